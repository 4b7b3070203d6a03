//! The synchronous surface every local member offers: for metadata at assembly time, for tests,
//! and for in-memory members, which the event loop runs inline.

use crate::error::IoError;

/// Blocking reads, writes and flushes on a member.
pub trait SyncMember {
    /// Size in bytes.
    fn size_bytes(&self) -> u64;

    /// Fills `buffer` from `offset_bytes`; a request past the end is `OutOfRange`, a device
    /// that returns less than asked is `ShortTransfer`.
    fn read_at(&mut self, offset_bytes: u64, buffer: &mut [u8]) -> Result<(), IoError>;

    /// Writes all of `data` at `offset_bytes`.
    fn write_at(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError>;

    /// The durability barrier: every completed write is durable when this returns.
    fn flush(&mut self) -> Result<(), IoError>;
}

/// `OutOfRange` unless `offset_bytes .. offset_bytes + len_bytes` lies within `size_bytes`.
pub(crate) fn check_range(
    offset_bytes: u64,
    len_bytes: usize,
    size_bytes: u64,
) -> Result<(), IoError> {
    let len_bytes = len_bytes as u64;
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(IoError::OutOfRange {
            offset_bytes,
            len_bytes,
            size_bytes,
        }),
    }
}
