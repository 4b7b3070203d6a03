//! One queue of a device, on a thread of its own (the driver wants every command of a queue
//! from the same thread): a fetch in flight for every tag; a completed fetch is a request,
//! handed to the server; the server's answer goes back as COMMIT_AND_FETCH, which also fetches
//! the tag's next request.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};
use tessera_io::EventFd;

use crate::error::{UblkError, last_errno};
use crate::memory::{Mapping, page_bytes};
use crate::request::{BlockRequest, QueueShared, RequestSink};
use crate::uapi::{self, IoCmd, IoDesc};

/// `user_data` of the wake-up poll (tags are below 4096).
const WAKE: u64 = u64::MAX;
/// How long to wait for `/dev/ublkcN` to appear after ADD_DEV.
const CHAR_DEVICE_WAIT: Duration = Duration::from_secs(5);

/// Where a tag's request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// A fetch (or commit-and-fetch) is in flight: the kernel has it.
    Kernel,
    /// The server has it.
    Server,
    /// The driver aborted its fetch (the device is stopping).
    Done,
}

/// What a queue thread needs.
pub(crate) struct QueueConfig {
    pub dev_id: u32,
    pub queue: u16,
    pub depth: u16,
    pub max_io_bytes: usize,
    pub sink: Arc<dyn RequestSink>,
    /// The character device, `/dev/ublkcN` (the driver lets it be opened once, so the
    /// queues share it).
    pub char_device: Arc<File>,
}

/// A running queue thread.
pub(crate) struct QueueThread {
    pub shared: Arc<QueueShared>,
    pub join: std::thread::JoinHandle<()>,
}

impl QueueThread {
    /// Starts the thread and returns once its fetches are in flight (or it failed).
    pub fn start(config: QueueConfig) -> Result<QueueThread, UblkError> {
        let shared = Arc::new(QueueShared {
            answers: Mutex::new(Vec::new()),
            wake: EventFd::new().map_err(|_| UblkError::System("eventfd", last_errno()))?,
            stop: std::sync::atomic::AtomicBool::new(false),
            buffers: Mapping::anonymous(usize::from(config.depth) * config.max_io_bytes)?,
            max_io_bytes: config.max_io_bytes,
        });
        let (ready, started) = mpsc::channel();
        let thread_shared = shared.clone();
        let join = std::thread::Builder::new()
            .name(format!("ublk{}-q{}", config.dev_id, config.queue))
            .spawn(move || {
                let queue = match Queue::open(config, thread_shared) {
                    Ok(queue) => queue,
                    Err(error) => {
                        let _ = ready.send(Err(error));
                        return;
                    }
                };
                queue.run(ready);
            })
            .map_err(|error| {
                UblkError::System("thread spawn", error.raw_os_error().unwrap_or(libc::EAGAIN))
            })?;
        match started.recv() {
            Ok(Ok(())) => Ok(QueueThread { shared, join }),
            Ok(Err(error)) => {
                let _ = join.join();
                Err(error)
            }
            Err(_) => {
                let _ = join.join();
                Err(UblkError::Invalid("a ublk queue thread ended early".into()))
            }
        }
    }

    /// Asks the thread to end (it stops fetching; requests with the server may still be
    /// answered, into the void).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.signal();
    }
}

/// Fields drop in order: the ring (whose commands use the character device) and the
/// descriptors (mapped from it) before `config`, which holds the device.
struct Queue {
    ring: IoUring,
    descriptors: Mapping,
    shared: Arc<QueueShared>,
    tags: Vec<Tag>,
    config: QueueConfig,
}

impl Queue {
    fn open(config: QueueConfig, shared: Arc<QueueShared>) -> Result<Queue, UblkError> {
        let page = page_bytes();
        let offset_bytes = uapi::CMD_BUF_OFFSET
            + u64::from(config.queue) * uapi::max_descriptor_area_bytes(page) as u64;
        let descriptors = Mapping::read_only(
            config.char_device.as_raw_fd(),
            offset_bytes,
            uapi::descriptor_area_bytes(config.depth, page),
        )?;
        let ring = IoUring::new((u32::from(config.depth) + 1).next_power_of_two())
            .map_err(|e| UblkError::System("io_uring setup", e.raw_os_error().unwrap_or(0)))?;
        let tags = vec![Tag::Kernel; usize::from(config.depth)];
        Ok(Queue {
            config,
            shared,
            ring,
            descriptors,
            tags,
        })
    }

    /// Queues a fetch (with the previous request's result, for a commit) for `tag`.
    fn push_fetch(&mut self, tag: u16, commit: Option<i32>) {
        let command = IoCmd {
            q_id: self.config.queue,
            tag,
            result: commit.unwrap_or(0),
            addr: self.shared.buffer(tag) as u64,
        };
        let cmd_op = match commit {
            Some(_) => uapi::U_IO_COMMIT_AND_FETCH_REQ,
            None => uapi::U_IO_FETCH_REQ,
        };
        let entry = opcode::UringCmd16::new(types::Fd(self.config.char_device.as_raw_fd()), cmd_op)
            .cmd(uapi::bytes_of(&command))
            .build()
            .user_data(u64::from(tag));
        // SAFETY: the command carries the tag's buffer address, which stays mapped as long as
        // `shared` lives (the requests hold it too), and the driver writes it only while the
        // tag is with the kernel. The ring has room: at most one command per tag plus the
        // wake poll are in flight, and it has more entries than that.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .expect("room in the submission queue");
        }
        self.tags[usize::from(tag)] = Tag::Kernel;
    }

    fn push_wake_poll(&mut self) {
        let entry =
            opcode::PollAdd::new(types::Fd(self.shared.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE);
        // SAFETY: polls a descriptor `shared` keeps open; no memory is involved.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .expect("room in the submission queue");
        }
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

    fn run(mut self, ready: mpsc::Sender<Result<(), UblkError>>) {
        for tag in 0..self.config.depth {
            self.push_fetch(tag, None);
        }
        self.push_wake_poll();
        if let Err(error) = self.ring.submit() {
            let _ = ready.send(Err(UblkError::System(
                "io_uring submit",
                error.raw_os_error().unwrap_or(0),
            )));
            return;
        }
        let _ = ready.send(Ok(()));
        let mut completions = Vec::new();
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => return,
            }
            completions.clear();
            completions.extend(
                self.ring
                    .completion()
                    .map(|entry| (entry.user_data(), entry.result())),
            );
            let mut requests = Vec::new();
            let mut woken = false;
            for &(user_data, result) in &completions {
                if user_data == WAKE {
                    woken = true;
                    continue;
                }
                let tag = user_data as u16;
                if result == uapi::IO_RES_OK {
                    self.tags[usize::from(tag)] = Tag::Server;
                    let descriptor = self.descriptor(tag);
                    requests.push(BlockRequest::new(
                        self.config.queue,
                        tag,
                        descriptor,
                        self.shared.clone(),
                    ));
                } else {
                    // Aborted (the device stops) or refused: this tag is finished.
                    self.tags[usize::from(tag)] = Tag::Done;
                }
            }
            if !requests.is_empty() {
                self.config.sink.submit(requests);
            }
            if woken {
                self.shared.wake.drain();
                if self.shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let answers = std::mem::take(
                    &mut *self
                        .shared
                        .answers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                );
                for (tag, result) in answers {
                    if self.tags[usize::from(tag)] == Tag::Server {
                        self.push_fetch(tag, Some(result));
                    }
                }
                self.push_wake_poll();
            }
            if self.tags.iter().all(|&tag| tag == Tag::Done) {
                return;
            }
        }
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
