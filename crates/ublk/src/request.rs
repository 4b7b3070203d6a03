//! One block request from the kernel, handed to the server with the buffer of its tag, and
//! answered through the queue that fetched it.

use std::sync::Arc;
use std::sync::Mutex;

use crate::memory::Mapping;
use crate::uapi;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp {
    /// Fill the buffer with `len_bytes` from `offset_bytes`.
    Read,
    /// Write the buffer's `len_bytes`; with `fua`, durable before the answer.
    Write { fua: bool },
    /// Make every answered write durable.
    Flush,
    /// The range's contents are no longer needed.
    Discard,
    /// Zero the range; with `unmap`, it may be deallocated.
    WriteZeroes { fua: bool, unmap: bool },
    /// An operation the front end does not serve (answered with EOPNOTSUPP).
    Unsupported(u8),
}

impl BlockOp {
    /// The operation in a descriptor's `op_flags`.
    pub fn decode(op_flags: u32) -> BlockOp {
        let fua = op_flags & uapi::IO_F_FUA != 0;
        match (op_flags & 0xff) as u8 {
            uapi::IO_OP_READ => BlockOp::Read,
            uapi::IO_OP_WRITE => BlockOp::Write { fua },
            uapi::IO_OP_FLUSH => BlockOp::Flush,
            uapi::IO_OP_DISCARD => BlockOp::Discard,
            uapi::IO_OP_WRITE_ZEROES => BlockOp::WriteZeroes {
                fua,
                unmap: op_flags & uapi::IO_F_NOUNMAP == 0,
            },
            other => BlockOp::Unsupported(other),
        }
    }
}

/// What a queue and the requests it handed out share.
pub(crate) struct QueueShared {
    /// Answers waiting to be committed: (tag, result).
    pub answers: Mutex<Vec<(u16, i32)>>,
    /// One buffer of `max_io_bytes` per tag.
    pub buffers: Mapping,
    pub max_io_bytes: usize,
}

impl QueueShared {
    pub fn answer(&self, tag: u16, result: i32) {
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tag, result));
    }

    /// The start of a tag's buffer.
    pub fn buffer(&self, tag: u16) -> *mut u8 {
        let offset = usize::from(tag) * self.max_io_bytes;
        assert!(offset + self.max_io_bytes <= self.buffers.len_bytes());
        // SAFETY: within the mapping (checked above).
        unsafe { self.buffers.as_ptr().add(offset) }
    }
}

/// A request in the server's hands. Until it is answered, its tag's buffer belongs to it
/// alone: the kernel filled it (writes) before handing the request out and reads it (reads)
/// only after the answer is committed, and the queue does not touch it meanwhile. Dropping
/// it unanswered answers EIO. The answer waits in the queue until the server takes it
/// ([`crate::ServedQueue::take_commits`]).
pub struct BlockRequest {
    /// The queue that fetched it.
    pub queue: u16,
    /// Its tag in that queue.
    pub tag: u16,
    pub op: BlockOp,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    shared: Arc<QueueShared>,
    answered: bool,
}

impl BlockRequest {
    pub(crate) fn new(
        queue: u16,
        tag: u16,
        descriptor: uapi::IoDesc,
        shared: Arc<QueueShared>,
    ) -> BlockRequest {
        let op = BlockOp::decode(descriptor.op_flags);
        let len_bytes = descriptor.nr_sectors.saturating_mul(512);
        BlockRequest {
            queue,
            tag,
            op,
            offset_bytes: descriptor.start_sector.saturating_mul(512),
            len_bytes,
            shared,
            answered: false,
        }
    }

    /// Whether the request carries data that fits its buffer (reads and writes); a request
    /// whose length exceeds the buffer (the kernel never sends one) has no data.
    fn data_len(&self) -> usize {
        let len = self.len_bytes as usize;
        if len <= self.shared.max_io_bytes {
            len
        } else {
            0
        }
    }

    /// The request's data: a write's payload, or what a read has filled so far.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the tag's buffer is `max_io_bytes` long, `data_len` is within it, and it
        // belongs to this request alone until it is answered (see the type's documentation);
        // the mapping lives as long as `shared`.
        unsafe { std::slice::from_raw_parts(self.shared.buffer(self.tag), self.data_len()) }
    }

    /// Where a read's data goes.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.shared.buffer(self.tag), self.data_len()) }
    }

    /// Answers the request: `Ok` (a read's data is in its buffer), or an errno.
    pub fn complete(mut self, result: Result<(), i32>) {
        let value = match result {
            Ok(()) => match self.op {
                BlockOp::Read | BlockOp::Write { .. } => self.len_bytes as i32,
                _ => 0,
            },
            Err(errno) => -errno.abs(),
        };
        self.answered = true;
        self.shared.answer(self.tag, value);
    }
}

impl Drop for BlockRequest {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.answer(self.tag, -libc::EIO);
        }
    }
}

impl std::fmt::Debug for BlockRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockRequest")
            .field("queue", &self.queue)
            .field("tag", &self.tag)
            .field("op", &self.op)
            .field("offset_bytes", &self.offset_bytes)
            .field("len_bytes", &self.len_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(depth: u16) -> Arc<QueueShared> {
        Arc::new(QueueShared {
            answers: Mutex::new(Vec::new()),
            buffers: Mapping::anonymous(usize::from(depth) * 4096).unwrap(),
            max_io_bytes: 4096,
        })
    }

    #[test]
    fn operations_decode_with_their_flags() {
        assert_eq!(BlockOp::decode(0), BlockOp::Read);
        assert_eq!(
            BlockOp::decode(1 | uapi::IO_F_FUA),
            BlockOp::Write { fua: true }
        );
        assert_eq!(BlockOp::decode(2), BlockOp::Flush);
        assert_eq!(BlockOp::decode(3), BlockOp::Discard);
        assert_eq!(
            BlockOp::decode(5),
            BlockOp::WriteZeroes {
                fua: false,
                unmap: true
            }
        );
        assert_eq!(
            BlockOp::decode(5 | uapi::IO_F_NOUNMAP),
            BlockOp::WriteZeroes {
                fua: false,
                unmap: false
            }
        );
        assert_eq!(BlockOp::decode(4), BlockOp::Unsupported(4));
    }

    #[test]
    fn answers_carry_bytes_for_data_and_errors_as_negative_errno() {
        let queue = shared(4);
        let descriptor = |op_flags, nr_sectors| uapi::IoDesc {
            op_flags,
            nr_sectors,
            start_sector: 8,
            addr: 0,
        };
        let mut read = BlockRequest::new(0, 1, descriptor(0, 8), queue.clone());
        assert_eq!(read.offset_bytes, 4096);
        assert_eq!(read.len_bytes, 4096);
        read.data_mut().fill(7);
        read.complete(Ok(()));
        BlockRequest::new(0, 2, descriptor(2, 0), queue.clone()).complete(Ok(()));
        BlockRequest::new(0, 3, descriptor(1, 8), queue.clone()).complete(Err(libc::ENOSPC));
        drop(BlockRequest::new(0, 0, descriptor(1, 8), queue.clone()));
        assert_eq!(
            *queue.answers.lock().unwrap(),
            vec![(1, 4096), (2, 0), (3, -libc::ENOSPC), (0, -libc::EIO)]
        );
        // SAFETY: tag 1's buffer is the second 4 KiB of the mapping, which the test owns.
        let second = unsafe { std::slice::from_raw_parts(queue.buffer(1), 4096) };
        assert!(second.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_request_longer_than_its_buffer_has_no_data() {
        let queue = shared(1);
        let descriptor = uapi::IoDesc {
            op_flags: 1,
            nr_sectors: 16,
            start_sector: 0,
            addr: 0,
        };
        let request = BlockRequest::new(0, 0, descriptor, queue);
        assert!(request.data().is_empty());
    }
}
