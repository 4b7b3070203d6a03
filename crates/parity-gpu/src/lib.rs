//! RAID5/RAID6 parity on a GPU, bit-exact with `tessera-parity` (GF(2^8)/0x11d, generator 2,
//! Linux md), through wgpu compute shaders (Vulkan, Metal, DX12; headless), and the dispatcher
//! that sends each batch to the CPU kernels or to a GPU, whichever finishes it soonest.
//!
//! - [`GpuEngine`]: one adapter's device and queue, the pipeline compiled once, and staging
//!   slots for double buffering: [`GpuEngine::submit`] a batch of many stripes, get a
//!   [`Ticket`], [`GpuEngine::wait`] for it.
//! - [`GpuKernel`]: a [`GpuEngine`] behind the [`tessera_parity::Kernel`] trait, one stripe per
//!   call (slow, exact: for tests).
//! - [`Dispatcher`]: calibrates every engine at start-up ([`calibrate`]), routes each batch
//!   ([`route`]), falls back to the CPU for good when a GPU fails, and reports
//!   [`ParityEngineReport`]s for `tessera info`.
//!
//! Read-modify-write updates never go to a GPU. See `docs/gpu.md` for the design and figures.

mod adapter;
pub mod bench;
mod calibrate;
mod dispatch;
mod engine;
mod error;
mod kernel;
mod layout;
mod report;
mod shader;
mod stripe;

pub use adapter::{AdapterDescription, list_adapters};
pub use calibrate::{CalibrationConfig, CpuTime, calibrate_cpu, calibrate_gpu, cpu_time};
pub use dispatch::{
    Candidate, Completion, Dispatcher, DispatcherConfig, EngineMode, Job, Pending, route,
};
pub use engine::{EngineConfig, Fault, GpuEngine, Ticket};
pub use error::GpuError;
pub use kernel::GpuKernel;
pub use report::{
    CalibrationPoint, EngineKind, ParityEngineReport, ThroughputModel, crossover_bytes,
};
pub use shader::MulStrategy;
pub use stripe::{StripeOperation, StripeOutput, StripeRef, run_on_cpu};
