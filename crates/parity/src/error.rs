//! The parity layer's one error type. Misuse of buffers (wrong lengths, bad indices) is a bug in
//! the caller and panics; errors here are about choosing kernels, which configuration decides.

use std::fmt;

/// Why a kernel could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParityError {
    /// No kernel of this name exists in this build.
    UnknownKernel {
        /// The name asked for.
        name: String,
    },
    /// The kernel exists but this CPU lacks the instructions it needs.
    KernelUnavailable {
        /// The name asked for.
        name: String,
    },
}

impl fmt::Display for ParityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParityError::UnknownKernel { name } => write!(
                f,
                "unknown parity kernel {name:?} (known: {})",
                crate::KERNEL_NAMES.join(", ")
            ),
            ParityError::KernelUnavailable { name } => {
                write!(
                    f,
                    "parity kernel {name:?} needs instructions this CPU does not have"
                )
            }
        }
    }
}

impl std::error::Error for ParityError {}
