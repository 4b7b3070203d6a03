//! An eventfd: how other threads (a remote member's receiver, the control plane) wake an
//! event loop that waits on it with [`crate::Operation::PollReadable`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{IoError, last_errno};

/// A non-blocking eventfd counter.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new counter at zero.
    pub fn new() -> Result<EventFd, IoError> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(IoError::last_os_error("eventfd"));
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes the descriptor readable (adds one to the counter).
    pub fn signal(&self) {
        let one: u64 = 1;
        loop {
            // SAFETY: writes 8 bytes from `one`.
            let result =
                unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            // EAGAIN means the counter is at its maximum: the descriptor is readable anyway.
            if result == 8 || last_errno() != libc::EINTR {
                return;
            }
        }
    }

    /// Resets the counter; returns how many signals it held (0 if none).
    pub fn drain(&self) -> u64 {
        let mut count: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into `count`.
            let result =
                unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
            if result == 8 {
                return count;
            }
            let errno = last_errno();
            assert!(
                result < 0 && matches!(errno, libc::EAGAIN | libc::EINTR),
                "eventfd read"
            );
            if errno == libc::EAGAIN {
                return 0;
            }
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_signals() {
        let event = EventFd::new().unwrap();
        assert_eq!(event.drain(), 0);
        event.signal();
        event.signal();
        assert_eq!(event.drain(), 2);
        assert_eq!(event.drain(), 0);
    }
}
