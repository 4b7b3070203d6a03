//! The fuzz targets of Tessera (issue 11) as plain functions, one per target.
//!
//! Each target takes arbitrary bytes and must never panic: a panic is a bug in the code under
//! test, or a broken invariant that the target checks itself (what decodes re-encodes to the
//! same value; the management API never answers `500 internal`). The cargo-fuzz binaries in
//! `fuzz/fuzz_targets/` are one-line calls of these functions under libFuzzer (nightly), and
//! `tests/replay.rs` runs every committed corpus and regression input through them on stable,
//! so the normal test command exercises every target. `docs/fuzzing.md` says how to run them.
//!
//! Adding a target: a module here, an entry in [`TARGETS`], a one-line binary in
//! `fuzz/fuzz_targets/` and a seed corpus in `fuzz/corpus/<name>/`; the replay test then
//! picks it up by itself. Journal replay as a whole runs under `engine_assemble`;
//! `journal_batch` covers the batch decoder it trusts, and `thin_log_replay` the thin drive's
//! start-up from its checkpoints and log.

pub mod api;
pub mod engine;
pub mod metadata;
pub mod nbd;
pub mod thin;

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The cargo-fuzz binary and the name of its corpus and regression directories.
    pub name: &'static str,
    /// The entry point.
    pub run: fn(&[u8]),
}

/// Every fuzz target, in the order `cargo xtask fuzz all` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "nbd_server_handshake",
        run: nbd::server_handshake,
    },
    Target {
        name: "nbd_requests",
        run: nbd::requests,
    },
    Target {
        name: "nbd_client_replies",
        run: nbd::client_replies,
    },
    Target {
        name: "superblock",
        run: metadata::superblock,
    },
    Target {
        name: "bitmap_block",
        run: metadata::bitmap_block,
    },
    Target {
        name: "journal_batch",
        run: metadata::journal_batch,
    },
    Target {
        name: "md_superblock",
        run: metadata::md_superblock,
    },
    Target {
        name: "engine_assemble",
        run: engine::assemble,
    },
    Target {
        name: "thin_log_replay",
        run: thin::log_replay,
    },
    Target {
        name: "api_http",
        run: api::http,
    },
    Target {
        name: "api_router",
        run: api::router,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|target| target.name == name)
}
