//! Choosing a driver at start-up: io_uring when the kernel allows it, poll(2) otherwise.

use std::fmt;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::driver::{Completion, Driver, Operation};
use crate::error::IoError;
use crate::poll::PollDriver;
use crate::uring::UringDriver;

/// What the caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverChoice {
    /// io_uring if available, poll(2) otherwise.
    Auto,
    /// io_uring or an error.
    Uring,
    /// poll(2), even where io_uring works (tests, debugging).
    Poll,
}

/// Which driver is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// [`UringDriver`].
    Uring,
    /// [`PollDriver`].
    Poll,
}

impl fmt::Display for DriverKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DriverKind::Uring => "io_uring",
            DriverKind::Poll => "poll",
        })
    }
}

/// Either driver, dispatched without boxing.
#[expect(
    clippy::large_enum_variant,
    reason = "one driver per event-loop thread, made once and never moved on the hot path"
)]
pub enum AnyDriver {
    /// io_uring.
    Uring(UringDriver),
    /// poll(2).
    Poll(PollDriver),
}

impl AnyDriver {
    /// Which driver this is.
    pub fn kind(&self) -> DriverKind {
        match self {
            AnyDriver::Uring(_) => DriverKind::Uring,
            AnyDriver::Poll(_) => DriverKind::Poll,
        }
    }
}

/// The driver `open_driver` made, and why it is not io_uring when it is not.
pub struct OpenedDriver {
    /// The driver.
    pub driver: AnyDriver,
    /// Set when `Auto` fell back to poll(2): `io_uring unavailable: <errno text>`, for the
    /// daemon to report once.
    pub fallback_reason: Option<String>,
}

/// Makes a driver as `choice` asks. Only `Uring` can fail.
pub fn open_driver(choice: DriverChoice) -> Result<OpenedDriver, IoError> {
    match choice {
        DriverChoice::Poll => Ok(OpenedDriver {
            driver: AnyDriver::Poll(PollDriver::new()),
            fallback_reason: None,
        }),
        DriverChoice::Uring => match UringDriver::new() {
            Ok(driver) => Ok(OpenedDriver {
                driver: AnyDriver::Uring(driver),
                fallback_reason: None,
            }),
            Err(unavailable) => Err(IoError::Unsupported {
                reason: unavailable.0,
            }),
        },
        DriverChoice::Auto => Ok(match UringDriver::new() {
            Ok(driver) => OpenedDriver {
                driver: AnyDriver::Uring(driver),
                fallback_reason: None,
            },
            Err(unavailable) => OpenedDriver {
                driver: AnyDriver::Poll(PollDriver::new()),
                fallback_reason: Some(unavailable.0),
            },
        }),
    }
}

impl Driver for AnyDriver {
    unsafe fn submit(&mut self, token: u64, operation: Operation) {
        match self {
            // SAFETY: the caller upholds `submit`'s contract, which is the same for both.
            AnyDriver::Uring(driver) => unsafe { driver.submit(token, operation) },
            // SAFETY: as above.
            AnyDriver::Poll(driver) => unsafe { driver.submit(token, operation) },
        }
    }

    fn flush_submissions(&mut self) -> Result<(), IoError> {
        match self {
            AnyDriver::Uring(driver) => driver.flush_submissions(),
            AnyDriver::Poll(driver) => driver.flush_submissions(),
        }
    }

    fn wait(
        &mut self,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<usize, IoError> {
        match self {
            AnyDriver::Uring(driver) => driver.wait(out, timeout),
            AnyDriver::Poll(driver) => driver.wait(out, timeout),
        }
    }

    fn in_flight(&self) -> usize {
        match self {
            AnyDriver::Uring(driver) => driver.in_flight(),
            AnyDriver::Poll(driver) => driver.in_flight(),
        }
    }

    fn take_ready(&mut self, out: &mut Vec<Completion>) -> usize {
        match self {
            AnyDriver::Uring(driver) => driver.take_ready(out),
            AnyDriver::Poll(driver) => driver.take_ready(out),
        }
    }

    fn set_inline(&mut self, fd: RawFd, inline: bool) {
        match self {
            AnyDriver::Uring(driver) => driver.set_inline(fd, inline),
            AnyDriver::Poll(driver) => driver.set_inline(fd, inline),
        }
    }

    fn set_busy_poll(&mut self, window: Duration) {
        match self {
            AnyDriver::Uring(driver) => driver.set_busy_poll(window),
            AnyDriver::Poll(driver) => driver.set_busy_poll(window),
        }
    }

    unsafe fn register_buffers(
        &mut self,
        pointer: *mut u8,
        len_bytes: usize,
    ) -> Result<(), IoError> {
        match self {
            // SAFETY: the caller upholds `register_buffers`' contract.
            AnyDriver::Uring(driver) => unsafe { driver.register_buffers(pointer, len_bytes) },
            // SAFETY: as above.
            AnyDriver::Poll(driver) => unsafe { driver.register_buffers(pointer, len_bytes) },
        }
    }
}
