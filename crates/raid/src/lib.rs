//! The Tessera RAID engine.
//!
//! **Architecture invariant:** nothing in this crate performs I/O or reads a clock. The engine
//! takes events (host requests, member completions, ticks carrying the time) and emits commands
//! (member reads, writes and flushes; host replies; group events). The same engine runs over
//! io_uring in the daemon and over simulated members in the deterministic simulator.

pub mod bad_ranges;
pub mod bitmap;
pub mod engine;
pub mod geometry;
pub mod journal;
pub mod layout;
pub mod md;
pub mod md_import;
pub mod plan;
pub mod superblock;
