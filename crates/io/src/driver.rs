//! The driver interface: asynchronous operations on file descriptors, keyed by caller tokens.
//!
//! A driver queues operations ([`Driver::submit`]) and hands nothing to the kernel until
//! [`Driver::wait`] or [`Driver::flush_submissions`], so one event-loop turn costs one system
//! call however many operations it issued. Completions come back in any order, each carrying
//! the token the caller chose.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::error::IoError;

/// Most pieces one [`Operation::Send`] gathers: room for several NBD replies (a header and
/// the data each), so that replies ready together leave in one system call.
pub const SEND_PARTS_MAX: usize = 16;

/// The byte ranges one send gathers, in order: raw pointers the caller keeps valid.
#[derive(Clone, Copy, Debug)]
pub struct SendParts {
    parts: [(*const u8, u32); SEND_PARTS_MAX],
    count: usize,
}

impl SendParts {
    /// No parts yet.
    pub fn new() -> SendParts {
        SendParts {
            parts: [(std::ptr::null(), 0); SEND_PARTS_MAX],
            count: 0,
        }
    }

    /// Appends `len_bytes` starting at `pointer`; at most [`SEND_PARTS_MAX`] parts.
    pub fn push(&mut self, pointer: *const u8, len_bytes: u32) {
        assert!(
            self.count < SEND_PARTS_MAX,
            "a send gathers at most {SEND_PARTS_MAX} parts"
        );
        self.parts[self.count] = (pointer, len_bytes);
        self.count += 1;
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[(*const u8, u32)] {
        &self.parts[..self.count]
    }

    /// Bytes in all parts.
    pub fn total_bytes(&self) -> u64 {
        self.parts().iter().map(|&(_, len)| u64::from(len)).sum()
    }

    /// Fills `iovecs` with the parts minus their first `skip_bytes` bytes; returns how many
    /// iovecs are used.
    pub(crate) fn iovecs_after(
        &self,
        skip_bytes: u64,
        iovecs: &mut [libc::iovec; SEND_PARTS_MAX],
    ) -> usize {
        let mut skip = skip_bytes;
        let mut used = 0;
        for &(pointer, len) in self.parts() {
            let len = u64::from(len);
            if skip >= len {
                skip -= len;
                continue;
            }
            // `wrapping_add` keeps this free of unsafe: the kernel, not Rust, dereferences it.
            iovecs[used] = libc::iovec {
                iov_base: pointer.wrapping_add(skip as usize) as *mut libc::c_void,
                iov_len: (len - skip) as usize,
            };
            skip = 0;
            used += 1;
        }
        used
    }
}

impl Default for SendParts {
    fn default() -> Self {
        SendParts::new()
    }
}

/// One asynchronous operation. Memory named by pointers belongs to the kernel (or the driver)
/// from [`Driver::submit`] until the operation's completion is returned by [`Driver::wait`].
// A send's parts stay inline: operations live in slots allocated once per ring, and boxing
// them would cost an allocation per send on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum Operation {
    /// `pread`: read `len_bytes` at `offset_bytes` of `fd` into `buffer`. The result is the
    /// bytes read, fewer than asked only at the end of the file.
    Read {
        /// File or block device.
        fd: RawFd,
        /// Where in the file.
        offset_bytes: u64,
        /// Destination; lies in the registered arena for a READ_FIXED.
        buffer: *mut u8,
        /// How much.
        len_bytes: u32,
    },
    /// `pwrite`: write `len_bytes` from `buffer` at `offset_bytes` of `fd`.
    Write {
        /// File or block device.
        fd: RawFd,
        /// Where in the file.
        offset_bytes: u64,
        /// Source; lies in the registered arena for a WRITE_FIXED.
        buffer: *const u8,
        /// How much.
        len_bytes: u32,
        /// Written with `RWF_DSYNC` (FUA): it completes only once these bytes are durable,
        /// without making the member's other completed writes durable.
        fua: bool,
    },
    /// `fdatasync`: the member's durability barrier. Writes that completed before it was
    /// submitted are durable when it completes; writes still in flight are not covered.
    Fsync {
        /// File or block device.
        fd: RawFd,
    },
    /// `fallocate(fd, mode, offset_bytes, len_bytes)`: completes with 0 or an error (EOPNOTSUPP
    /// when the file system or device does not do `mode`). Member zeroing uses it
    /// ([`crate::MemberDevice::zero_operation`]).
    Fallocate {
        /// File or block device.
        fd: RawFd,
        /// `FALLOC_FL_*` flags.
        mode: i32,
        /// Where in the file.
        offset_bytes: u64,
        /// How much.
        len_bytes: u64,
    },
    /// `recv` on a stream socket: completes with 1 to `len_bytes` bytes, or 0 at end of stream.
    Recv {
        /// The socket.
        fd: RawFd,
        /// Destination.
        buffer: *mut u8,
        /// Room in `buffer`.
        len_bytes: u32,
    },
    /// `sendmsg` of all parts, in order. Completes once every byte is sent (the driver resumes
    /// short sends itself) with the total, or with an error. Keep one send in flight per socket
    /// when the order of sends matters.
    Send {
        /// The socket.
        fd: RawFd,
        /// What to send.
        parts: SendParts,
    },
    /// `accept4(SOCK_CLOEXEC)`: completes with the new connection's descriptor, which the
    /// caller owns. The poll driver waits for readiness first, so a blocking listener works.
    Accept {
        /// The listening socket.
        fd: RawFd,
    },
    /// Completes when `fd` is readable (an eventfd, a pipe, a socket) with the poll revents.
    PollReadable {
        /// Any pollable descriptor.
        fd: RawFd,
    },
    /// Completes when `fd` is writable (a socket with room in its send buffer) with the poll
    /// revents: for writes the caller makes itself, without blocking, and resumes on room.
    PollWritable {
        /// Any pollable descriptor.
        fd: RawFd,
    },
    /// `IORING_OP_URING_CMD` with a 16-byte command: a driver-defined command on a character
    /// device (the ublk driver's FETCH_REQ and COMMIT_AND_FETCH_REQ). Completes with the
    /// driver's result. Memory the command names (the ublk tag's buffer) is covered by
    /// `submit`'s contract like any buffer. io_uring only: the poll driver completes it with
    /// EOPNOTSUPP.
    UringCmd {
        /// The character device.
        fd: RawFd,
        /// The driver's command number.
        cmd_op: u32,
        /// The command's payload.
        cmd: [u8; 16],
    },
}

/// The descriptor an operation works on.
pub(crate) fn descriptor(operation: &Operation) -> RawFd {
    match *operation {
        Operation::Read { fd, .. }
        | Operation::Write { fd, .. }
        | Operation::Fsync { fd }
        | Operation::Fallocate { fd, .. }
        | Operation::Recv { fd, .. }
        | Operation::Send { fd, .. }
        | Operation::Accept { fd }
        | Operation::PollReadable { fd }
        | Operation::PollWritable { fd }
        | Operation::UringCmd { fd, .. } => fd,
    }
}

/// The result of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The token given at submission.
    pub token: u64,
    /// Bytes transferred (a new descriptor for Accept, revents for PollReadable), or a
    /// negative errno.
    pub result: i32,
}

impl Completion {
    /// The non-negative result, or the error it reports.
    pub fn value(&self) -> Result<u32, IoError> {
        if self.result < 0 {
            Err(IoError::from_errno("completion", -self.result))
        } else {
            Ok(self.result as u32)
        }
    }

    /// Checks that exactly `expected_bytes` moved: a short transfer is an error here.
    pub fn expect_bytes(&self, expected_bytes: u32) -> Result<(), IoError> {
        let moved = self.value()?;
        if moved == expected_bytes {
            Ok(())
        } else {
            Err(IoError::ShortTransfer {
                expected_bytes: u64::from(expected_bytes),
                actual_bytes: u64::from(moved),
            })
        }
    }
}

/// An asynchronous submission/completion interface; see the module documentation.
pub trait Driver {
    /// Queues `operation`; its completion will carry `token` (any value; tokens need not be
    /// unique, but the caller then cannot tell the completions apart). Never fails and never
    /// drops an operation: when the kernel's queues are full it waits in the driver.
    ///
    /// # Safety
    ///
    /// Every pointer in `operation` must stay valid, and memory a Read or Recv writes must not
    /// be read or written by anyone else, until this operation's completion has been returned
    /// by [`Driver::wait`] (or the driver is dropped). Descriptors must stay open as long.
    unsafe fn submit(&mut self, token: u64, operation: Operation);

    /// Hands queued operations to the kernel without waiting.
    fn flush_submissions(&mut self) -> Result<(), IoError>;

    /// Submits what is queued, then waits until at least one completion is available or
    /// `timeout` passes (`None`: no limit; `Some(ZERO)`: do not block), and appends the
    /// completions to `out`. Returns how many it appended. With nothing in flight it returns
    /// at once when `timeout` is `None`, and after `timeout` otherwise.
    fn wait(
        &mut self,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<usize, IoError>;

    /// Operations submitted whose completion has not been returned yet.
    fn in_flight(&self) -> usize;

    /// Appends to `out` the completions already known without a system call (operations run
    /// inline at submission, and those met while submitting), and returns how many: an event
    /// loop answers them at once instead of going round `wait` for them.
    fn take_ready(&mut self, out: &mut Vec<Completion>) -> usize {
        let _ = out;
        0
    }

    /// Runs reads, writes and fsyncs on `fd` synchronously at submission (their completions
    /// come with the next `wait`, or `take_ready`) when `inline` is true, asynchronously
    /// otherwise. For files that cannot do non-blocking I/O (tmpfs: see
    /// [`crate::MemberDevice::nowait_io`]), io_uring hands every request to a kernel worker
    /// thread; a synchronous copy costs less. The io_uring driver still hands reads and writes
    /// above [`crate::INLINE_BYTES_MAX`] to its workers, so that large copies run beside the
    /// event loop instead of holding it up.
    /// Clear it before closing `fd`, since descriptor numbers are reused. The poll driver
    /// always runs file operations inline.
    fn set_inline(&mut self, fd: RawFd, inline: bool);

    /// Before `wait` sleeps, keeps looking for completions for up to `window` (no sleep, no
    /// wake-up to pay when one arrives soon). A request at queue depth 1 then waits for no
    /// scheduler: the answer to a reply comes within microseconds, and waking a sleeping
    /// thread costs more than that. `Duration::ZERO` (the default) turns it off. Costs CPU
    /// only while completions are due soon: a poll that finds nothing is not tried again
    /// until a sleep ends within `window`, and the polling thread yields to other threads
    /// of its core on every turn. The poll driver ignores it.
    fn set_busy_poll(&mut self, window: Duration) {
        let _ = window;
    }

    /// Registers the I/O buffer arena so reads and writes inside it skip per-request page
    /// pinning (READ_FIXED / WRITE_FIXED). One arena per driver.
    ///
    /// # Safety
    ///
    /// `pointer .. pointer + len_bytes` must stay allocated until the driver is dropped.
    unsafe fn register_buffers(
        &mut self,
        pointer: *mut u8,
        len_bytes: usize,
    ) -> Result<(), IoError>;

    /// Queues an fdatasync of `fd` (no memory is involved).
    fn submit_fsync(&mut self, token: u64, fd: RawFd) {
        // SAFETY: Fsync names no memory; the caller keeps `fd` open, as every submit requires.
        unsafe { self.submit(token, Operation::Fsync { fd }) }
    }

    /// Queues an accept on the listening socket `fd`.
    fn submit_accept(&mut self, token: u64, fd: RawFd) {
        // SAFETY: Accept names no memory (no peer address is asked for).
        unsafe { self.submit(token, Operation::Accept { fd }) }
    }

    /// Queues a wait for `fd` to become readable.
    fn submit_poll_readable(&mut self, token: u64, fd: RawFd) {
        // SAFETY: PollReadable names no memory.
        unsafe { self.submit(token, Operation::PollReadable { fd }) }
    }

    /// Queues a wait for `fd` to become writable.
    fn submit_poll_writable(&mut self, token: u64, fd: RawFd) {
        // SAFETY: PollWritable names no memory.
        unsafe { self.submit(token, Operation::PollWritable { fd }) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iovecs_skip_what_was_sent() {
        let header = [0u8; 16];
        let data = [0u8; 100];
        let mut parts = SendParts::new();
        parts.push(header.as_ptr(), 16);
        parts.push(data.as_ptr(), 100);
        assert_eq!(parts.total_bytes(), 116);
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iovecs = [empty; SEND_PARTS_MAX];

        assert_eq!(parts.iovecs_after(0, &mut iovecs), 2);
        assert_eq!(iovecs[0].iov_len, 16);
        assert_eq!(iovecs[1].iov_len, 100);

        assert_eq!(parts.iovecs_after(20, &mut iovecs), 1);
        assert_eq!(iovecs[0].iov_base as usize, data.as_ptr() as usize + 4);
        assert_eq!(iovecs[0].iov_len, 96);

        assert_eq!(parts.iovecs_after(16, &mut iovecs), 1);
        assert_eq!(iovecs[0].iov_base as usize, data.as_ptr() as usize);
        assert_eq!(parts.iovecs_after(116, &mut iovecs), 0);
    }

    #[test]
    fn completion_values() {
        assert_eq!(
            Completion {
                token: 1,
                result: 512
            }
            .value(),
            Ok(512)
        );
        assert_eq!(
            Completion {
                token: 1,
                result: -libc::EIO
            }
            .value(),
            Err(IoError::Os {
                context: "completion",
                errno: libc::EIO
            })
        );
        assert_eq!(
            Completion {
                token: 1,
                result: 100
            }
            .expect_bytes(512),
            Err(IoError::ShortTransfer {
                expected_bytes: 512,
                actual_bytes: 100
            })
        );
        assert!(
            Completion {
                token: 1,
                result: -libc::ENODEV
            }
            .value()
            .unwrap_err()
            .is_device_gone()
        );
    }
}
