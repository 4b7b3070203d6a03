//! `GET /v1/info`: what the daemon runs with.

use serde::{Deserialize, Serialize};

/// One candidate kernel's speed on one parity operation, timed at start-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSpeedView {
    /// Kernel name (`naive`, `scalar`, `avx2`, `avx512`, `gfni`, ...).
    pub kernel: String,
    /// GB/s (10^9 bytes per second) of data chunks, cache-resident, one core.
    pub gbps: f64,
}

/// The kernel chosen for one parity operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParityChoiceView {
    /// Operation (`xor_gen`, `pq_gen`, `p_update`, `pq_update`, `recover_data_p`, ...).
    pub operation: String,
    /// The kernel used on cache-resident buffers.
    pub kernel: String,
    /// The kernel used when streaming from and to memory.
    pub streaming_kernel: String,
    /// Every candidate's speed (empty when the kernel was forced).
    pub speeds: Vec<KernelSpeedView>,
}

/// How the CPU parity kernels were chosen at start-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParitySelectionView {
    /// `measured`, `config` or `environment`.
    pub source: String,
    /// One entry per operation.
    pub choices: Vec<ParityChoiceView>,
}

/// Throughput of a parity engine at one batch size, measured at start-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPointView {
    /// Bytes of data chunks per batch.
    pub batch_bytes: u64,
    /// GB/s (10^9 bytes per second) of data chunks at that batch size, submit latency included.
    pub gbps: f64,
}

/// One engine that can compute parity (the CPU kernels, or one GPU adapter).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParityEngineView {
    /// Engine name (`cpu`, `gpu0`, ...).
    pub name: String,
    /// `cpu` or `gpu`.
    pub kind: String,
    /// The GPU adapter's name (`None` for the CPU).
    #[serde(default)]
    pub adapter: Option<String>,
    /// Time from submitting a batch to seeing its completion, for an empty batch.
    #[serde(default)]
    pub submit_latency_us: Option<f64>,
    /// Throughput by batch size.
    #[serde(default)]
    pub calibration: Vec<CalibrationPointView>,
    /// Smallest batch the dispatcher routes to this engine (`None`: never chosen by size).
    #[serde(default)]
    pub min_batch_bytes: Option<u64>,
    /// Why the engine is out of service, if it failed (its work went back to the CPU).
    #[serde(default)]
    pub failure: Option<String>,
    /// Batches of handed-out full-stripe parity work this engine computed.
    #[serde(default)]
    pub batches: u64,
    /// Data bytes of those batches.
    #[serde(default)]
    pub computed_bytes: u64,
}

impl ParityEngineView {
    /// The CPU kernels as an engine, before (or without) any calibration.
    pub fn cpu_kernels() -> ParityEngineView {
        ParityEngineView {
            name: "cpu".into(),
            kind: "cpu".into(),
            adapter: None,
            submit_latency_us: None,
            calibration: Vec::new(),
            min_batch_bytes: Some(0),
            failure: None,
            batches: 0,
            computed_bytes: 0,
        }
    }
}

/// How member and socket I/O is done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoView {
    /// The I/O driver in use: `io_uring` or `poll`.
    pub driver: String,
    /// Whether io_uring is in use.
    pub io_uring: bool,
    /// Why io_uring is not in use (`None` when it is).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `GET /v1/info`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InfoView {
    /// The daemon's version.
    pub version: String,
    /// The configured parity engine choice: `cpu`, `gpu` or `auto`.
    pub parity_engine: String,
    /// How the CPU parity kernels were chosen, with their speeds.
    pub parity: ParitySelectionView,
    /// Every engine available for parity, with its calibration (only the CPU while the
    /// start-up calibration runs, or with the `cpu` engine).
    pub parity_engines: Vec<ParityEngineView>,
    /// Whether full-stripe parity work (full-stripe writes, rebuild, resync, scrub) goes through
    /// the dispatcher; otherwise every engine computes inline on the CPU kernels.
    #[serde(default)]
    pub parity_offload: bool,
    /// The I/O driver.
    pub io: IoView,
    /// The NBD Unix socket.
    #[serde(default)]
    pub nbd_socket: Option<String>,
    /// The NBD TCP address, if listening.
    #[serde(default)]
    pub nbd_listen: Option<String>,
    /// Seconds since the daemon started.
    #[serde(default)]
    pub uptime_seconds: u64,
}
