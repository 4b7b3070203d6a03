//! Parity for RAID5 and RAID6, exactly as Linux md computes it: GF(2^8) with the polynomial
//! 0x11d and generator 2, P = XOR of the data chunks, Q = sum of 2^i * D_i.
//!
//! Several kernels implement the [`Kernel`] trait (naive, scalar, AVX2, AVX-512, AVX-512+GFNI,
//! and `-nt` variants of the SIMD ones that write with non-temporal stores); use
//! [`kernel_by_name`] or [`available_kernels`] to call one directly. [`Parity`] picks the fastest
//! this CPU runs, per operation, by timing them at start-up ([`Parity::streaming`] gives the
//! `-nt` counterparts for data streamed from DRAM). [`locate_single_error`] names the one bad
//! chunk of a stripe from its syndromes, for scrub. [`checksum`] is the CRC32C of everything
//! written to members. Everything works on caller-owned buffers and
//! never allocates in the hot path. This crate does no I/O.
//!
//! See `docs/parity.md` for how the kernels work and what they measure.

mod checks;
pub mod checksum;
mod error;
pub mod gf;
mod kernel;
mod locate;
mod naive;
mod registry;
mod scalar;
mod select;
#[cfg(target_arch = "x86_64")]
mod vector;
#[cfg(target_arch = "x86_64")]
mod vector_loops;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod gfni;

pub use error::ParityError;
pub use kernel::Kernel;
pub use locate::{SyndromeVerdict, locate_single_error};
pub use naive::Naive;
pub use registry::{KERNEL_NAMES, available_kernels, kernel_by_name, streaming_variant};
pub use scalar::Scalar;
pub use select::{
    ChoiceSource, KERNEL_ENVIRONMENT_VARIABLE, KernelSet, KernelSpeed, Operation, OperationChoice,
    Parity, SelectionConfig, SelectionReport,
};

#[cfg(target_arch = "x86_64")]
pub use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
pub use avx512::Avx512;
#[cfg(target_arch = "x86_64")]
pub use gfni::Gfni;
