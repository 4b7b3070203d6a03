//! The fallback driver for systems without a usable io_uring (old kernels, seccomp filters,
//! containers that forbid it).
//!
//! File reads, writes and fsyncs run synchronously inside [`Driver::submit`] and complete on
//! the next [`Driver::wait`]. Socket and wake-up operations wait for readiness with poll(2) and
//! then run without blocking (MSG_DONTWAIT), so sockets need not be non-blocking themselves.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::driver::{Completion, Driver, Operation, SEND_PARTS_MAX, descriptor};
use crate::error::IoError;
use crate::sys;

/// A socket or wake-up operation waiting for its descriptor to be ready.
struct Waiting {
    token: u64,
    operation: Operation,
    /// For sends: bytes already sent.
    sent_bytes: u64,
}

/// The poll(2) driver. Use it from one thread at a time.
pub struct PollDriver {
    /// Completions of operations that already ran.
    ready: VecDeque<Completion>,
    waiting: Vec<Waiting>,
    /// Scratch array for poll(2), one entry per waiting operation.
    poll_fds: Vec<libc::pollfd>,
}

// SAFETY: the raw pointers held by waiting operations are used only by the thread calling
// `wait`; `Driver::submit`'s contract keeps the memory valid whichever thread that is.
unsafe impl Send for PollDriver {}

impl PollDriver {
    /// A driver with nothing in flight.
    pub fn new() -> PollDriver {
        PollDriver {
            ready: VecDeque::new(),
            waiting: Vec::new(),
            poll_fds: Vec::new(),
        }
    }

    /// Runs a ready socket operation without blocking: `Some(result)` when it finished,
    /// `None` when it must wait for readiness again.
    ///
    /// # Safety
    ///
    /// The operation's memory must be valid, as `Driver::submit` requires.
    unsafe fn attempt(waiting: &mut Waiting, revents: i16) -> Option<i32> {
        let result = match waiting.operation {
            Operation::Recv {
                fd,
                buffer,
                len_bytes,
            } => {
                // SAFETY: the submitter keeps `buffer` valid until completion.
                unsafe { sys::recv_nonblocking(fd, buffer, len_bytes) }
            }
            Operation::Send { fd, parts } => loop {
                let empty = libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                let mut iovecs = [empty; SEND_PARTS_MAX];
                let used = parts.iovecs_after(waiting.sent_bytes, &mut iovecs);
                if used == 0 {
                    break i32::try_from(waiting.sent_bytes).expect("a send is below 2 GiB");
                }
                // SAFETY: the submitter keeps every part valid until completion.
                let sent = unsafe { sys::sendmsg_nonblocking(fd, &iovecs[..used]) };
                if sent < 0 {
                    break sent;
                }
                waiting.sent_bytes += sent as u64;
            },
            Operation::Accept { fd } => sys::accept(fd),
            // A closed descriptor: what io_uring reports for it.
            Operation::PollReadable { .. } | Operation::PollWritable { .. }
                if revents & libc::POLLNVAL != 0 =>
            {
                -libc::EBADF
            }
            Operation::PollReadable { .. } | Operation::PollWritable { .. } => i32::from(revents),
            Operation::Read { .. }
            | Operation::Write { .. }
            | Operation::Fsync { .. }
            | Operation::Fallocate { .. }
            | Operation::UringCmd { .. } => {
                unreachable!("file operations and commands end at submission")
            }
        };
        if result == -libc::EAGAIN || result == -libc::EWOULDBLOCK {
            None
        } else {
            Some(result)
        }
    }

    /// poll(2) events an operation waits for.
    fn events(operation: &Operation) -> i16 {
        match operation {
            Operation::Send { .. } | Operation::PollWritable { .. } => libc::POLLOUT,
            _ => libc::POLLIN,
        }
    }

    /// Polls the waiting operations for up to `timeout_ms` and runs those that are ready.
    fn poll_once(&mut self, timeout_ms: i32) -> Result<(), IoError> {
        self.poll_fds.clear();
        self.poll_fds
            .extend(self.waiting.iter().map(|waiting| libc::pollfd {
                fd: descriptor(&waiting.operation),
                events: Self::events(&waiting.operation),
                revents: 0,
            }));
        let result = sys::poll(&mut self.poll_fds, timeout_ms);
        if result == -libc::EINTR {
            return Ok(());
        }
        if result < 0 {
            return Err(IoError::from_errno("poll", -result));
        }
        let mut index = 0;
        let mut poll_index = 0;
        while index < self.waiting.len() {
            let revents = self.poll_fds[poll_index].revents;
            poll_index += 1;
            if revents == 0 {
                index += 1;
                continue;
            }
            // SAFETY: the submitter keeps the operation's memory valid until completion.
            match unsafe { Self::attempt(&mut self.waiting[index], revents) } {
                None => index += 1,
                Some(result) => {
                    // `remove` keeps submission order among the rest.
                    let waiting = self.waiting.remove(index);
                    self.ready.push_back(Completion {
                        token: waiting.token,
                        result,
                    });
                }
            }
        }
        Ok(())
    }
}

impl Default for PollDriver {
    fn default() -> Self {
        PollDriver::new()
    }
}

/// Milliseconds for poll(2), rounded up so a short timeout still sleeps.
fn poll_timeout_ms(remaining: Option<Duration>) -> i32 {
    match remaining {
        None => -1,
        Some(remaining) => {
            let micros = remaining.as_micros();
            i32::try_from(micros.div_ceil(1000)).unwrap_or(i32::MAX)
        }
    }
}

impl Driver for PollDriver {
    unsafe fn submit(&mut self, token: u64, operation: Operation) {
        // SAFETY: the caller upholds `submit`'s contract for the operation's memory.
        if let Some(result) = unsafe { sys::run_file_operation(&operation) } {
            self.ready.push_back(Completion { token, result });
            return;
        }
        if let Operation::UringCmd { .. } = operation {
            self.ready.push_back(Completion {
                token,
                result: -libc::EOPNOTSUPP,
            });
            return;
        }
        if let Operation::Send { parts, .. } = &operation {
            assert!(
                parts.total_bytes() <= i32::MAX as u64,
                "a send is below 2 GiB"
            );
        }
        self.waiting.push(Waiting {
            token,
            operation,
            sent_bytes: 0,
        });
    }

    fn flush_submissions(&mut self) -> Result<(), IoError> {
        // File operations already ran; socket operations run when `wait` finds them ready.
        Ok(())
    }

    fn wait(
        &mut self,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<usize, IoError> {
        let start_len = out.len();
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let have_ready = !self.ready.is_empty();
            if self.waiting.is_empty() && !have_ready && timeout.is_none() {
                break;
            }
            let remaining =
                deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
            let timeout_ms = if have_ready {
                0
            } else {
                poll_timeout_ms(remaining)
            };
            self.poll_once(timeout_ms)?;
            out.extend(self.ready.drain(..));
            if out.len() > start_len || deadline.is_some_and(|deadline| Instant::now() >= deadline)
            {
                break;
            }
        }
        Ok(out.len() - start_len)
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.waiting.len()
    }

    fn take_ready(&mut self, out: &mut Vec<Completion>) -> usize {
        let taken = self.ready.len();
        out.extend(self.ready.drain(..));
        taken
    }

    fn set_inline(&mut self, _fd: RawFd, _inline: bool) {
        // File operations always run inline here.
    }

    unsafe fn register_buffers(
        &mut self,
        _pointer: *mut u8,
        _len_bytes: usize,
    ) -> Result<(), IoError> {
        // Synchronous system calls gain nothing from registration.
        Ok(())
    }
}
