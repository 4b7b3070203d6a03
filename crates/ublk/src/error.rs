//! What can go wrong talking to the ublk driver.

use std::fmt;

/// An error of the ublk front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UblkError {
    /// The kernel has no ublk driver: `/dev/ublk-control` is missing.
    NotAvailable,
    /// A device file could not be opened (path, errno).
    Open(String, i32),
    /// A system call failed (what, errno).
    System(&'static str, i32),
    /// The driver refused a control command (command, errno).
    Command(&'static str, i32),
    /// The settings asked for are out of the driver's range.
    Invalid(String),
    /// The server could not take the device's queues (why).
    Server(String),
}

impl fmt::Display for UblkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UblkError::NotAvailable => write!(
                f,
                "ublk is not available: {} is missing; it needs the ublk_drv kernel module \
                 (Linux 6.0 or later; `modprobe ublk_drv`)",
                crate::uapi::CONTROL_PATH
            ),
            UblkError::Open(path, errno) => write!(f, "cannot open {path}: {}", errno_text(*errno)),
            UblkError::System(what, errno) => write!(f, "{what} failed: {}", errno_text(*errno)),
            UblkError::Command(command, errno) => {
                write!(f, "ublk {command} refused: {}", errno_text(*errno))
            }
            UblkError::Invalid(message) | UblkError::Server(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for UblkError {}

/// `strerror` text of an errno.
pub fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// The calling thread's errno.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
