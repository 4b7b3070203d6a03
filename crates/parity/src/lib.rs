//! Parity for RAID5 and RAID6, exactly as Linux md computes it.
mod kernel;
pub use kernel::Kernel;
