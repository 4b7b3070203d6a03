//! The GPU layer's one error type. Every variant means "this GPU cannot be trusted with this
//! batch": the dispatcher answers the batch on the CPU instead and stops using the engine.

use std::fmt;

/// Why a GPU engine could not be opened or could not finish a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuError {
    /// No adapter of the requested index exists (or none at all).
    NoAdapter {
        /// How many adapters exist.
        available: usize,
    },
    /// The adapter refused to create a device.
    RequestDevice {
        /// wgpu's explanation.
        message: String,
    },
    /// wgpu reported an error (validation, out of memory, internal) on this device.
    Device {
        /// wgpu's explanation.
        message: String,
    },
    /// The device was lost (driver reset, unplugged, destroyed).
    DeviceLost {
        /// The reason reported by wgpu.
        message: String,
    },
    /// Mapping a staging buffer for upload or download failed.
    Map,
    /// The batch did not complete within the engine's timeout.
    Timeout,
    /// The batch needs more buffer space than the device allows in one binding.
    BatchTooLarge {
        /// Bytes the batch needs in its largest buffer.
        needed_bytes: u64,
        /// The device's limit for one storage binding.
        limit_bytes: u64,
    },
    /// Every staging slot holds a batch not yet waited for: wait for one first.
    NoFreeSlot,
    /// The ticket was already waited for, or belongs to another engine.
    UnknownTicket,
    /// A fault injected by a test (`GpuEngine::inject_fault`).
    Injected,
    /// An earlier error latched the engine as failed; it refuses further work.
    Failed {
        /// The first error, as text.
        first_error: String,
    },
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoAdapter { available } => {
                write!(f, "no such GPU adapter ({available} available)")
            }
            GpuError::RequestDevice { message } => write!(f, "cannot open the GPU: {message}"),
            GpuError::Device { message } => write!(f, "GPU error: {message}"),
            GpuError::DeviceLost { message } => write!(f, "GPU device lost: {message}"),
            GpuError::Map => write!(f, "mapping a GPU staging buffer failed"),
            GpuError::Timeout => write!(f, "the GPU did not finish the batch in time"),
            GpuError::BatchTooLarge {
                needed_bytes,
                limit_bytes,
            } => write!(
                f,
                "batch needs a {needed_bytes}-byte buffer, the GPU allows {limit_bytes}"
            ),
            GpuError::NoFreeSlot => write!(f, "every GPU staging slot is busy"),
            GpuError::UnknownTicket => write!(f, "unknown or already completed GPU ticket"),
            GpuError::Injected => write!(f, "injected GPU fault"),
            GpuError::Failed { first_error } => {
                write!(
                    f,
                    "GPU engine disabled after an earlier error: {first_error}"
                )
            }
        }
    }
}

impl std::error::Error for GpuError {}
