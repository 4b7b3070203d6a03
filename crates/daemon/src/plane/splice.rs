//! Host reads carried from page-cache members to the NBD socket without passing through the
//! engine's buffers.
//!
//! The engine marks the member reads whose bytes only the host will see (`for_host`). When
//! such a read is large enough, goes to a member whose file lives in the page cache (tmpfs:
//! the members whose I/O already runs inline) and answers a plain NBD connection (not TLS),
//! the plane splices the range into a pipe instead of reading it into the buffer: the pipe
//! holds references to the file's pages, no copy. The engine sees the read complete as any
//! other and replies with the request's buffer, whose spliced ranges were never filled; the
//! reply then goes out as its header, the pipes' contents in order (spliced into the socket,
//! again without a copy) and any range of the buffer the engine filled itself (zeroes of an
//! unwritten region, a piece recovered from parity).
//!
//! What the host receives is the member's pages as the receiver copies them out of the
//! socket: a write to the same blocks that the engine applies after this read completed but
//! before the client took the bytes may show in them. Only a write the client sent before
//! it had this read's answer can do that, and NBD leaves overlapping requests in flight
//! unordered, so either contents are a valid answer.

use super::DataPlane;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_io::Pipe;

/// Pieces smaller than this are read into the buffer as before. Below it a spliced reply
/// costs the client more than the copies save the daemon: it goes out as its own header and
/// data, where copied replies leave many in one send, and the client reads the member's pages
/// cold. Measured with fio on RAID5 4+1 over tmpfs (docs/benchmarks.md): 32 KiB random reads
/// 2-13% fewer IOPS spliced, 64 KiB equal to 8% more, 128 KiB sequential 16% more.
pub(crate) const SPLICE_MIN_BYTES: u32 = 64 * 1024;

/// Pipes are made to hold this much; pieces are at most a chunk, and larger ones are read
/// into the buffer.
const PIPE_BYTES: usize = 1 << 20;

/// Empty pipes kept for the next pieces (each two descriptors and its page slots).
const SPARE_PIPES_MAX: usize = 256;

/// The most pipes open at once, kept or in use (two descriptors each): past it, pieces are
/// read into the buffer, so that splicing never takes the descriptors that connections and
/// members need.
const LIVE_PIPES_MAX: usize = 512;

/// A pipe, counted among the open ones while it lives.
#[derive(Debug)]
pub(crate) struct CountedPipe {
    pub pipe: Pipe,
    live: Arc<AtomicUsize>,
}

impl Drop for CountedPipe {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One spliced piece of a host read.
#[derive(Debug)]
pub(crate) struct SplicedPiece {
    /// Where the piece starts in the reply's data.
    pub offset_bytes: u32,
    pub len_bytes: u32,
    pub pipe: CountedPipe,
}

/// The pipes of host reads in flight, by engine request id, and the empty ones kept.
#[derive(Default)]
pub(crate) struct Splicing {
    spare: Vec<CountedPipe>,
    pieces: HashMap<u64, smallvec::SmallVec<[SplicedPiece; 2]>>,
    /// Pipes open (kept, in use, or in a reply being sent).
    live: Arc<AtomicUsize>,
    /// Bytes of host reads that went to a socket through a pipe (`/metrics`).
    pub spliced_bytes: u64,
}

impl Splicing {
    /// Splices a piece of request `request` into a pipe. `None`: no pipe fits it (read it
    /// into the buffer instead); `Some(Err(_))`: the splice failed, as a read would have.
    pub fn read_piece(
        &mut self,
        request: u64,
        file: std::os::fd::RawFd,
        member_offset_bytes: u64,
        reply_offset_bytes: u32,
        len_bytes: u32,
    ) -> Option<Result<(), tessera_io::IoError>> {
        let mut pipe = match self.spare.pop() {
            Some(pipe) => pipe,
            None if self.live.load(Ordering::Relaxed) < LIVE_PIPES_MAX => {
                let pipe = Pipe::new(PIPE_BYTES).ok()?;
                self.live.fetch_add(1, Ordering::Relaxed);
                CountedPipe {
                    pipe,
                    live: Arc::clone(&self.live),
                }
            }
            None => return None,
        };
        if pipe.pipe.room_bytes() < len_bytes as usize {
            self.give_back(pipe);
            return None;
        }
        // A pipe that failed part-way may hold bytes: it is dropped, not kept.
        if let Err(error) = pipe
            .pipe
            .fill_from(file, member_offset_bytes, len_bytes as usize)
        {
            return Some(Err(error));
        }
        self.pieces.entry(request).or_default().push(SplicedPiece {
            offset_bytes: reply_offset_bytes,
            len_bytes,
            pipe,
        });
        Some(Ok(()))
    }

    /// The pieces of a request answered with data, in the order of the data; none for a
    /// request without any.
    pub fn take(&mut self, request: u64) -> smallvec::SmallVec<[SplicedPiece; 2]> {
        if self.pieces.is_empty() {
            // Small reads only: no lookup on their path.
            return smallvec::SmallVec::new();
        }
        let mut pieces = self.pieces.remove(&request).unwrap_or_default();
        pieces.sort_by_key(|piece| piece.offset_bytes);
        pieces
    }

    /// Drops the pieces of a request answered without its data (an error): their pipes
    /// still hold bytes, so they are closed, not kept.
    pub fn discard(&mut self, request: u64) {
        if !self.pieces.is_empty() {
            self.pieces.remove(&request);
        }
    }

    /// Keeps a drained pipe for later pieces.
    pub fn give_back(&mut self, pipe: CountedPipe) {
        if self.spare.len() < SPARE_PIPES_MAX {
            self.spare.push(pipe);
        }
    }
}

impl DataPlane {
    /// Whether a marked member read of `len_bytes` for engine request `request` may be
    /// spliced: it answers a plain (not TLS) NBD connection and is large enough.
    pub(super) fn may_splice(&self, request: u64, len_bytes: u32) -> bool {
        len_bytes >= SPLICE_MIN_BYTES && self.answers_plain_nbd(request)
    }
}
