//! The one error type of the member I/O layer.

use std::fmt;
use std::path::PathBuf;

/// Why a member I/O operation failed. I/O failures are values, never panics.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoError {
    /// A system call failed; `errno` is the positive error number.
    Os {
        /// What was being done, e.g. "io_uring_enter" or "pread".
        context: &'static str,
        /// The error number.
        errno: i32,
    },
    /// Opening or inspecting a member path failed.
    Open {
        /// The member path.
        path: PathBuf,
        /// The error number.
        errno: i32,
    },
    /// A block device is already held exclusively (by another drive group, a mount, md...).
    Busy {
        /// The member path.
        path: PathBuf,
    },
    /// The path is neither a block device nor a regular file.
    NotAMember {
        /// The member path.
        path: PathBuf,
    },
    /// A member size that is zero or not a multiple of 512 bytes.
    BadSize {
        /// The size asked for.
        size_bytes: u64,
    },
    /// A request outside the member.
    OutOfRange {
        /// Start of the request.
        offset_bytes: u64,
        /// Its length.
        len_bytes: u64,
        /// Size of the member.
        size_bytes: u64,
    },
    /// A read or write moved fewer bytes than asked (end of the device, media error).
    ShortTransfer {
        /// Bytes asked for.
        expected_bytes: u64,
        /// Bytes moved.
        actual_bytes: u64,
    },
    /// The device is gone: unplugged, its connection lost, or its server shutting down.
    DeviceGone {
        /// The error number that said so.
        errno: i32,
    },
    /// A kernel facility is unavailable (io_uring refused or missing an operation).
    Unsupported {
        /// The sentence to report, e.g. `io_uring unavailable: <errno text>`.
        reason: String,
    },
    /// Connecting to a remote member (NBD) failed.
    Remote {
        /// The member's URI.
        uri: String,
        /// What went wrong.
        reason: String,
    },
}

impl IoError {
    /// The error for a failed system call, classifying "device gone" errors apart.
    pub fn from_errno(context: &'static str, errno: i32) -> IoError {
        assert!(errno > 0, "errno values are positive, got {errno}");
        if errno_means_gone(errno) {
            IoError::DeviceGone { errno }
        } else {
            IoError::Os { context, errno }
        }
    }

    /// The error of the last failed system call (`errno`).
    pub fn last_os_error(context: &'static str) -> IoError {
        IoError::from_errno(context, last_errno())
    }

    /// The error number behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            IoError::Os { errno, .. }
            | IoError::Open { errno, .. }
            | IoError::DeviceGone { errno } => Some(*errno),
            IoError::Busy { .. } => Some(libc::EBUSY),
            IoError::OutOfRange { .. } | IoError::BadSize { .. } => Some(libc::EINVAL),
            IoError::ShortTransfer { .. } => Some(libc::EIO),
            IoError::NotAMember { .. } | IoError::Remote { .. } | IoError::Unsupported { .. } => {
                None
            }
        }
    }

    /// Whether the device is gone for good (as opposed to a failed request).
    pub fn is_device_gone(&self) -> bool {
        matches!(self, IoError::DeviceGone { .. })
    }
}

/// Errors after which no request to the device can succeed: it was removed (ENODEV, ENXIO),
/// its connection broke (ENOTCONN, ECONNRESET, EPIPE), or its server is shutting down.
pub fn errno_means_gone(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENODEV
            | libc::ENXIO
            | libc::ENOTCONN
            | libc::ECONNRESET
            | libc::EPIPE
            | libc::ESHUTDOWN
    )
}

/// The calling thread's `errno`.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .expect("last_os_error carries an errno")
}

/// The system's text for an error number, e.g. "Operation not permitted (os error 1)".
pub fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Os { context, errno } => write!(f, "{context} failed: {}", errno_text(*errno)),
            IoError::Open { path, errno } => {
                write!(f, "cannot open {}: {}", path.display(), errno_text(*errno))
            }
            IoError::Busy { path } => write!(
                f,
                "{} is in use (held exclusively by a mount, md, or another drive group)",
                path.display()
            ),
            IoError::NotAMember { path } => {
                write!(
                    f,
                    "{} is neither a block device nor a regular file",
                    path.display()
                )
            }
            IoError::BadSize { size_bytes } => write!(
                f,
                "member size {size_bytes} bytes is not a positive multiple of 512 bytes"
            ),
            IoError::OutOfRange {
                offset_bytes,
                len_bytes,
                size_bytes,
            } => write!(
                f,
                "request of {len_bytes} bytes at offset {offset_bytes} is outside the member \
                 ({size_bytes} bytes)"
            ),
            IoError::ShortTransfer {
                expected_bytes,
                actual_bytes,
            } => {
                write!(
                    f,
                    "short transfer: {actual_bytes} of {expected_bytes} bytes"
                )
            }
            IoError::DeviceGone { errno } => write!(f, "device gone: {}", errno_text(*errno)),
            IoError::Unsupported { reason } => f.write_str(reason),
            IoError::Remote { uri, reason } => write!(f, "remote member {uri}: {reason}"),
        }
    }
}

impl std::error::Error for IoError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_errors_are_classified_apart() {
        assert_eq!(
            IoError::from_errno("read", libc::ENODEV),
            IoError::DeviceGone { errno: 19 }
        );
        assert_eq!(
            IoError::from_errno("read", libc::EIO),
            IoError::Os {
                context: "read",
                errno: 5
            }
        );
        assert!(
            IoError::DeviceGone {
                errno: libc::ENOTCONN
            }
            .is_device_gone()
        );
    }

    #[test]
    fn messages_carry_the_errno_text() {
        let text = IoError::Os {
            context: "io_uring_setup",
            errno: libc::EPERM,
        }
        .to_string();
        assert_eq!(
            text,
            "io_uring_setup failed: Operation not permitted (os error 1)"
        );
    }
}
