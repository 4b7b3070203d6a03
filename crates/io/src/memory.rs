//! An in-memory member: the daemon's `memory://` test drives and the transport benchmark.

use crate::error::IoError;
use crate::sync_member::{SyncMember, check_range};

/// A member held in a vector; every operation completes at once, flush is a no-op (memory
/// is as durable as it gets).
#[derive(Clone, Debug)]
pub struct MemoryMember {
    bytes: Vec<u8>,
}

impl MemoryMember {
    /// A zero-filled member of `size_bytes`, a positive multiple of 512.
    pub fn new(size_bytes: u64) -> Result<MemoryMember, IoError> {
        if size_bytes == 0 || !size_bytes.is_multiple_of(512) {
            return Err(IoError::BadSize { size_bytes });
        }
        let size = usize::try_from(size_bytes).map_err(|_| IoError::BadSize { size_bytes })?;
        Ok(MemoryMember {
            bytes: vec![0; size],
        })
    }

    /// The contents.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl SyncMember for MemoryMember {
    fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&mut self, offset_bytes: u64, buffer: &mut [u8]) -> Result<(), IoError> {
        check_range(offset_bytes, buffer.len(), self.size_bytes())?;
        let start = offset_bytes as usize;
        buffer.copy_from_slice(&self.bytes[start..start + buffer.len()]);
        Ok(())
    }

    fn write_at(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), IoError> {
        check_range(offset_bytes, data.len(), self.size_bytes())?;
        let start = offset_bytes as usize;
        self.bytes[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IoError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut member = MemoryMember::new(4096).unwrap();
        member.write_at(512, &[7; 512]).unwrap();
        let mut buffer = [0u8; 1024];
        member.read_at(0, &mut buffer).unwrap();
        assert!(buffer[..512].iter().all(|&byte| byte == 0));
        assert!(buffer[512..].iter().all(|&byte| byte == 7));
        member.flush().unwrap();
        assert_eq!(
            member.read_at(3584, &mut buffer),
            Err(IoError::OutOfRange {
                offset_bytes: 3584,
                len_bytes: 1024,
                size_bytes: 4096
            })
        );
        assert_eq!(
            member.write_at(u64::MAX, &[1]),
            Err(IoError::OutOfRange {
                offset_bytes: u64::MAX,
                len_bytes: 1,
                size_bytes: 4096
            })
        );
        assert_eq!(
            MemoryMember::new(1000).unwrap_err(),
            IoError::BadSize { size_bytes: 1000 }
        );
    }
}
