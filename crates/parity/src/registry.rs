//! The kernels this build knows and the ones this CPU can run.
//!
//! Each SIMD kernel comes in two variants: `NAME` writes its outputs with ordinary stores, and
//! `NAME-nt` with non-temporal stores, which bypass the caches. `-nt` is faster when the inputs
//! come from DRAM and the outputs are not read again soon (rebuild, parity headed for a device),
//! and slower when everything is cache-resident. It falls back to ordinary stores for outputs
//! not aligned to the vector width.

use crate::naive::Naive;
use crate::scalar::Scalar;
use crate::{Kernel, ParityError};

/// Every kernel name, from the simplest to the most specialised.
pub const KERNEL_NAMES: [&str; 8] = [
    "naive",
    "scalar",
    "avx2",
    "avx2-nt",
    "avx512",
    "avx512-nt",
    "gfni",
    "gfni-nt",
];

/// Suffix of the non-temporal-store variant of a SIMD kernel.
pub const STREAMING_SUFFIX: &str = "-nt";

static NAIVE: Naive = Naive;
static SCALAR: Scalar = Scalar;

/// The kernels this CPU supports, in the order of `KERNEL_NAMES`. `naive` and `scalar` are
/// always there.
pub fn available_kernels() -> Vec<&'static dyn Kernel> {
    KERNEL_NAMES
        .iter()
        .filter_map(|name| kernel_by_name(name).ok())
        .collect()
}

/// The kernel called `name`, if this build knows it and this CPU supports it.
pub fn kernel_by_name(name: &str) -> Result<&'static dyn Kernel, ParityError> {
    let (base, streaming) = match name.strip_suffix(STREAMING_SUFFIX) {
        Some(base) => (base, true),
        None => (name, false),
    };
    let detected: Option<&'static dyn Kernel> = match (base, streaming) {
        ("naive", false) => Some(&NAIVE),
        ("scalar", false) => Some(&SCALAR),
        #[cfg(target_arch = "x86_64")]
        ("avx2", _) => crate::avx2::Avx2::detect(streaming).map(|kernel| kernel as &dyn Kernel),
        #[cfg(target_arch = "x86_64")]
        ("avx512", _) => {
            crate::avx512::Avx512::detect(streaming).map(|kernel| kernel as &dyn Kernel)
        }
        #[cfg(target_arch = "x86_64")]
        ("gfni", _) => crate::gfni::Gfni::detect(streaming).map(|kernel| kernel as &dyn Kernel),
        _ if KERNEL_NAMES.contains(&name) => None,
        _ => {
            return Err(ParityError::UnknownKernel {
                name: name.to_string(),
            });
        }
    };
    detected.ok_or_else(|| ParityError::KernelUnavailable {
        name: name.to_string(),
    })
}

/// The non-temporal-store variant of `kernel`, or `kernel` itself if it has none.
pub fn streaming_variant(kernel: &'static dyn Kernel) -> &'static dyn Kernel {
    if kernel.name().ends_with(STREAMING_SUFFIX) {
        return kernel;
    }
    kernel_by_name(&format!("{}{STREAMING_SUFFIX}", kernel.name())).unwrap_or(kernel)
}
