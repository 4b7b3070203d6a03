//! One queue of a device, served by the server's own event loop: the server submits the
//! queue's commands on its io_uring and hands their completions back here. A fetch is in
//! flight for every tag; a completed fetch is a request; the server's answer goes back as
//! COMMIT_AND_FETCH, which also fetches the tag's next request.
//!
//! The driver wants every command of a queue from one thread (the first to fetch becomes the
//! queue's daemon), so one thread must submit all of a queue's commands. Serving the queue on
//! the thread that serves the drive saves two thread wake-ups per request over a queue thread
//! of its own.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::UblkError;
use crate::memory::{Mapping, page_bytes};
use crate::request::{BlockRequest, QueueShared};
use crate::uapi::{self, IoCmd, IoDesc};

/// How long to wait for `/dev/ublkcN` to appear after ADD_DEV.
const CHAR_DEVICE_WAIT: Duration = Duration::from_secs(5);

/// Where a tag's request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// Not fetched yet.
    Idle,
    /// A fetch (or commit-and-fetch) is in flight: the kernel has it.
    Kernel,
    /// The server has it.
    Server,
    /// The driver aborted its fetch (the device stopped) or refused it: the tag is finished.
    Done,
}

/// A command for the server to submit as `IORING_OP_URING_CMD` (16-byte payload) on
/// [`ServedQueue::char_device_fd`]; its completion goes back to
/// [`ServedQueue::completed`] with the same tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCommand {
    pub tag: u16,
    /// `UBLK_U_IO_FETCH_REQ` or `UBLK_U_IO_COMMIT_AND_FETCH_REQ`.
    pub cmd_op: u32,
    /// The `ublksrv_io_cmd`: queue, tag, the previous request's result, and the address of
    /// the tag's buffer, which the kernel fills (a write) or reads (a read answered).
    pub cmd: [u8; 16],
}

/// A queue served by the caller's event loop.
///
/// Its commands name its tags' buffers: keep the queue until [`ServedQueue::is_finished`]
/// (every command has completed), then drop it, which releases `/dev/ublkcN` (deleting the
/// device waits for that). Fields drop in order: the descriptors (mapped from the character
/// device) before the device itself.
pub struct ServedQueue {
    queue: u16,
    descriptors: Mapping,
    shared: Arc<QueueShared>,
    tags: Vec<Tag>,
    char_device: Arc<File>,
}

impl ServedQueue {
    /// Maps queue `queue`'s descriptors from `/dev/ublkcN` and gives every tag a buffer of
    /// `max_io_bytes`.
    pub(crate) fn open(
        char_device: Arc<File>,
        queue: u16,
        depth: u16,
        max_io_bytes: usize,
    ) -> Result<ServedQueue, UblkError> {
        let page = page_bytes();
        let offset_bytes =
            uapi::CMD_BUF_OFFSET + u64::from(queue) * uapi::max_descriptor_area_bytes(page) as u64;
        let descriptors = Mapping::read_only(
            char_device.as_raw_fd(),
            offset_bytes,
            uapi::descriptor_area_bytes(depth, page),
        )?;
        let shared = Arc::new(QueueShared {
            answers: Mutex::new(Vec::new()),
            buffers: Mapping::anonymous(usize::from(depth) * max_io_bytes)?,
            max_io_bytes,
        });
        Ok(ServedQueue {
            queue,
            descriptors,
            shared,
            tags: vec![Tag::Idle; usize::from(depth)],
            char_device,
        })
    }

    /// The queue's number in its device.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Tags (requests in flight at most).
    pub fn depth(&self) -> u16 {
        self.tags.len() as u16
    }

    /// The descriptor every command of the queue is submitted on.
    pub fn char_device_fd(&self) -> RawFd {
        self.char_device.as_raw_fd()
    }

    /// The first fetch of every tag; submit them all before the device is started (START_DEV
    /// waits until every tag of every queue is fetched).
    pub fn initial_fetches(&mut self) -> Vec<QueueCommand> {
        assert!(
            self.tags.iter().all(|&tag| tag == Tag::Idle),
            "a queue fetches once"
        );
        (0..self.depth())
            .map(|tag| self.command(tag, None))
            .collect()
    }

    fn command(&mut self, tag: u16, commit: Option<i32>) -> QueueCommand {
        let io = IoCmd {
            q_id: self.queue,
            tag,
            result: commit.unwrap_or(0),
            addr: self.shared.buffer(tag) as u64,
        };
        self.tags[usize::from(tag)] = Tag::Kernel;
        QueueCommand {
            tag,
            cmd_op: match commit {
                Some(_) => uapi::U_IO_COMMIT_AND_FETCH_REQ,
                None => uapi::U_IO_FETCH_REQ,
            },
            cmd: uapi::bytes_of(&io),
        }
    }

    /// A command of `tag` completed with `result`: the request it fetched, or `None` when the
    /// tag is finished (the device stopped and the driver aborted the fetch, or refused it).
    pub fn completed(&mut self, tag: u16, result: i32) -> Option<BlockRequest> {
        let index = usize::from(tag);
        assert_eq!(
            self.tags[index],
            Tag::Kernel,
            "a completion for a tag the kernel did not have"
        );
        if result != uapi::IO_RES_OK {
            self.tags[index] = Tag::Done;
            return None;
        }
        self.tags[index] = Tag::Server;
        Some(BlockRequest::new(
            self.queue,
            tag,
            self.descriptor(tag),
            self.shared.clone(),
        ))
    }

    /// The requests answered since the last call, as commit-and-fetch commands for `out`.
    pub fn take_commits(&mut self, out: &mut Vec<QueueCommand>) {
        let answers = std::mem::take(
            &mut *self
                .shared
                .answers
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (tag, result) in answers {
            if self.tags[usize::from(tag)] == Tag::Server {
                out.push(self.command(tag, Some(result)));
            }
        }
    }

    /// Whether every tag is finished: no command is in flight and no request is out, so the
    /// queue may be dropped.
    pub fn is_finished(&self) -> bool {
        self.tags
            .iter()
            .all(|&tag| matches!(tag, Tag::Done | Tag::Idle))
    }

    fn descriptor(&self, tag: u16) -> IoDesc {
        let index = usize::from(tag);
        assert!((index + 1) * std::mem::size_of::<IoDesc>() <= self.descriptors.len_bytes());
        // SAFETY: within the mapping (checked above), aligned (the mapping is page-aligned
        // and descriptors are 24 bytes of 8-byte fields); the driver wrote this tag's
        // descriptor before completing its fetch, and it is read volatile since the kernel
        // owns the memory.
        unsafe { std::ptr::read_volatile(self.descriptors.as_ptr().cast::<IoDesc>().add(index)) }
    }
}

impl std::fmt::Debug for ServedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedQueue")
            .field("queue", &self.queue)
            .field("depth", &self.depth())
            .field("tags", &self.tags)
            .finish()
    }
}

/// Opens a device file that udev or devtmpfs may not have created yet.
pub(crate) fn open_when_present(path: &str) -> Result<File, UblkError> {
    let deadline = Instant::now() + CHAR_DEVICE_WAIT;
    loop {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        {
            Ok(file) => return Ok(file),
            Err(error)
                if error.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => {
                return Err(UblkError::Open(
                    path.to_string(),
                    error.raw_os_error().unwrap_or(libc::EIO),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue over memory instead of `/dev/ublkcN`: descriptors the test writes as the
    /// driver would.
    fn queue(depth: u16, max_io_bytes: usize) -> ServedQueue {
        ServedQueue {
            queue: 3,
            descriptors: Mapping::anonymous(uapi::descriptor_area_bytes(depth, page_bytes()))
                .unwrap(),
            shared: Arc::new(QueueShared {
                answers: Mutex::new(Vec::new()),
                buffers: Mapping::anonymous(usize::from(depth) * max_io_bytes).unwrap(),
                max_io_bytes,
            }),
            tags: vec![Tag::Idle; usize::from(depth)],
            char_device: Arc::new(File::open("/dev/null").unwrap()),
        }
    }

    fn write_descriptor(queue: &ServedQueue, tag: u16, descriptor: IoDesc) {
        // SAFETY: the test's own anonymous mapping, large enough for `depth` descriptors.
        unsafe {
            queue
                .descriptors
                .as_ptr()
                .cast::<IoDesc>()
                .add(usize::from(tag))
                .write(descriptor)
        }
    }

    /// The `ublksrv_io_cmd` fields of a command, decoded by hand from the UAPI's layout
    /// (q_id u16, tag u16, result i32, addr u64, little-endian).
    fn decode(command: &QueueCommand) -> (u16, u16, i32, u64) {
        let c = &command.cmd;
        (
            u16::from_le_bytes([c[0], c[1]]),
            u16::from_le_bytes([c[2], c[3]]),
            i32::from_le_bytes(c[4..8].try_into().unwrap()),
            u64::from_le_bytes(c[8..16].try_into().unwrap()),
        )
    }

    #[test]
    fn every_tag_is_fetched_into_its_own_buffer() {
        let mut queue = queue(4, 8192);
        let fetches = queue.initial_fetches();
        assert_eq!(fetches.len(), 4);
        let base = queue.shared.buffers.as_ptr() as u64;
        for (tag, fetch) in fetches.iter().enumerate() {
            assert_eq!(fetch.tag, tag as u16);
            assert_eq!(fetch.cmd_op, uapi::U_IO_FETCH_REQ);
            assert_eq!(decode(fetch), (3, tag as u16, 0, base + tag as u64 * 8192));
        }
        assert!(!queue.is_finished(), "fetches are in flight");
    }

    #[test]
    fn a_fetched_request_is_answered_by_a_commit_of_its_tag() {
        let mut queue = queue(2, 4096);
        queue.initial_fetches();
        write_descriptor(
            &queue,
            1,
            IoDesc {
                op_flags: u32::from(uapi::IO_OP_WRITE),
                nr_sectors: 8,
                start_sector: 16,
                addr: 0,
            },
        );
        let request = queue.completed(1, uapi::IO_RES_OK).expect("a request");
        assert_eq!((request.queue, request.tag), (3, 1));
        assert_eq!(request.op, crate::BlockOp::Write { fua: false });
        assert_eq!((request.offset_bytes, request.len_bytes), (8192, 4096));
        let mut commits = Vec::new();
        queue.take_commits(&mut commits);
        assert!(commits.is_empty(), "nothing answered yet");
        request.complete(Ok(()));
        queue.take_commits(&mut commits);
        assert_eq!(commits.len(), 1);
        assert_eq!(commits[0].cmd_op, uapi::U_IO_COMMIT_AND_FETCH_REQ);
        let base = queue.shared.buffers.as_ptr() as u64;
        assert_eq!(decode(&commits[0]), (3, 1, 4096, base + 4096));
        queue.take_commits(&mut commits);
        assert_eq!(commits.len(), 1, "an answer is committed once");
    }

    #[test]
    fn the_queue_finishes_when_every_fetch_is_aborted() {
        let mut queue = queue(2, 4096);
        queue.initial_fetches();
        assert!(queue.completed(0, uapi::IO_RES_ABORT).is_none());
        assert!(!queue.is_finished());
        write_descriptor(
            &queue,
            1,
            IoDesc {
                op_flags: u32::from(uapi::IO_OP_READ),
                nr_sectors: 1,
                start_sector: 0,
                addr: 0,
            },
        );
        // A request out with the server keeps the queue alive until its commit's fetch ends.
        let request = queue.completed(1, uapi::IO_RES_OK).unwrap();
        assert!(!queue.is_finished());
        drop(request);
        let mut commits = Vec::new();
        queue.take_commits(&mut commits);
        assert_eq!(decode(&commits[0]).2, -libc::EIO, "dropped unanswered: EIO");
        assert!(!queue.is_finished(), "the commit is in flight");
        assert!(queue.completed(1, uapi::IO_RES_ABORT).is_none());
        assert!(queue.is_finished());
    }
}
