//! Thin virtual drives: a log-structured store over an extent of a drive group's data space.
//!
//! Incoming 4 KiB blocks are compressed, checksummed and packed into records that are always
//! written whole, each record being a whole number of the group's stripes, so parity never
//! needs a read-modify-write and a torn update never corrupts data that was already there.
//! A map from logical block to (address, length, codec, checksum) lives in memory; it is made
//! durable by the records themselves (each carries its entries) and by periodic checkpoints,
//! and rebuilt at start-up from the newest checkpoint and the records written after it.
//!
//! **Architecture invariant:** like the engine, this crate performs no I/O and reads no clock.
//! It takes host requests, lower (drive group) completions and ticks, and emits lower commands
//! (reads, whole-record writes, flushes), host replies and events. See `docs/thin.md`.

pub mod codec;
pub mod format;
pub mod layout;
pub mod lz4;
pub mod map;
mod store;

pub use store::{
    Compression, Config, HostOp, LowerCommand, LowerOp, Output, Reply, ScrubProgress, Stats, Store,
    ThinError, ThinEvent,
};

/// The logical block: the unit of mapping, compression and checksumming.
pub const BLOCK_BYTES: u64 = 4096;

/// The smallest unit of a request's offset and length.
pub const SECTOR_BYTES: u64 = 512;
