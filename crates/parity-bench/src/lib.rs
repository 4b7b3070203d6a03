//! The parity benchmark: every kernel this CPU runs, against Intel ISA-L on the same buffers in
//! the same run, cache-resident and from DRAM, one core.
//!
//! GB/s counts bytes of data chunks processed (10^9 bytes per second): for generation and
//! recovery, all data chunks of the stripe (lost ones included); for `pq_update`, the one data
//! chunk rewritten. Parity bytes are not counted. `ratio` is `gbps / isal_gbps`.

mod arena;
#[cfg(feature = "gpu")]
mod gpu;
mod measure;
mod table;
mod workload;

use std::time::Duration;

use serde::Serialize;
use tessera_parity::{Kernel, Parity, SelectionConfig, SelectionReport, kernel_by_name};

#[cfg(feature = "gpu")]
pub use gpu::gpu_rows;
pub use table::format_table;
pub use workload::Op;

use arena::Arena;
use workload::{buffers_per_set, isal_tables, prepare};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Kernel names to measure; empty means every kernel this CPU supports (and, with the `gpu`
    /// feature, the engine rows). `gpu` asks for the engine rows alone.
    pub kernels: Vec<String>,
    /// Time spent measuring each implementation on each row.
    pub measure_time: Duration,
    /// Size of the buffer pool walked for the DRAM rows (must exceed the last-level cache).
    pub dram_bytes: usize,
    /// Operation names to measure (`Op::name`); empty means all.
    pub ops: Vec<String>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            kernels: Vec::new(),
            measure_time: Duration::from_millis(40),
            dram_bytes: 256 << 20,
            ops: Vec::new(),
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchRow {
    /// Tessera kernel name.
    pub kernel: String,
    /// Operation (`xor`, `pq`, `pq_update`, `recover_1`, `recover_data_p`, `recover_data_q`,
    /// `recover_2data`).
    pub op: &'static str,
    /// Data chunks in the stripe.
    pub data_chunks: usize,
    /// Parity chunks in the stripe layout (1 for RAID5 rows, 2 for RAID6 rows).
    pub parity_chunks: usize,
    /// Bytes per chunk.
    pub chunk_bytes: usize,
    /// `cache` (one stripe reused) or `dram` (a pool larger than the last-level cache).
    pub working_set: &'static str,
    /// Bytes the measurement walks through (one stripe for `cache`).
    pub working_set_bytes: usize,
    /// Tessera throughput, GB/s of data chunks (10^9 bytes/s), one core.
    pub gbps: f64,
    /// ISA-L throughput on the same buffers in the same run, if ISA-L has a counterpart.
    pub isal_gbps: Option<f64>,
    /// The ISA-L call compared against.
    pub isal_call: Option<&'static str>,
    /// The ISA-L linked in.
    pub isal_version: &'static str,
    /// `gbps / isal_gbps`.
    pub ratio: Option<f64>,
    /// For `dram` rows: this core's sequential read bandwidth measured in the same run (GB/s).
    pub dram_read_gbps: Option<f64>,
    /// For `dram` rows: `gbps / dram_read_gbps`, how close the kernel gets to memory bandwidth.
    pub of_dram_read: Option<f64>,
    /// Whether `Parity`'s start-up selection picks this kernel for this operation and working set
    /// (`Parity::kernel` for `cache`, `Parity::streaming` for `dram`).
    pub selected: bool,
    /// Engine rows only (`working_set` = `batch`, feature `gpu`): `cpu` or `gpu`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<&'static str>,
    /// Engine rows: bytes of data chunks per batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_bytes: Option<u64>,
    /// Engine rows: GB/s with the next batch submitted before waiting for the previous one
    /// (`gbps` is one batch at a time, submit to completion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipelined_gbps: Option<f64>,
    /// GPU rows: round trip of an empty submission, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit_latency_us: Option<f64>,
    /// Engine rows: CPU seconds (user + system, whole process) per 10^9 bytes of data chunks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds_per_gb: Option<f64>,
    /// Engine rows: CPU seconds of the submitting thread alone per 10^9 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_cpu_seconds_per_gb: Option<f64>,
    /// GPU rows: how the shader multiplies by constants (`shift` or `table`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mul_strategy: Option<&'static str>,
    /// GPU rows: the smallest batch at which this GPU finishes sooner than the CPU engine
    /// (`null`: never, in 1 KiB .. 1 GiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crossover_batch_bytes: Option<Option<u64>>,
}

/// The stripe shapes measured: (op, data chunks, chunk bytes).
pub fn rows_measured() -> Vec<(Op, usize, usize)> {
    let mut rows = Vec::new();
    for op in Op::ALL {
        let chunk_bytes = if op == Op::PqUpdate {
            4 << 10
        } else {
            64 << 10
        };
        for data_chunks in [4, 8] {
            rows.push((op, data_chunks, chunk_bytes));
        }
    }
    rows
}

/// The `tessera_parity::Parity` operation name corresponding to a benchmark op.
fn parity_operation(op: Op) -> tessera_parity::Operation {
    use tessera_parity::Operation;
    match op {
        Op::Xor => Operation::XorGen,
        Op::Pq => Operation::PqGen,
        Op::PqUpdate => Operation::PqUpdate,
        Op::Recover1 | Op::RecoverDataQ => Operation::RecoverDataQ,
        Op::RecoverDataP => Operation::RecoverDataP,
        Op::RecoverTwoData => Operation::RecoverTwoData,
    }
}

/// The kernel `Parity` picks for `op`: its ordinary choice for cache-resident buffers, its
/// streaming (non-temporal store) choice for buffers streamed from DRAM.
fn chosen(selection: &Parity, op: Op, dram: bool) -> &'static str {
    let operation = parity_operation(op);
    if dram {
        selection.streaming().kernel(operation).name()
    } else {
        selection.kernel(operation).name()
    }
}

/// Runs the benchmark. Panics if a requested kernel is unknown or unavailable, or if a kernel's
/// output differs from ISA-L's on the benchmark buffers.
pub fn run(options: &BenchOptions) -> Vec<BenchRow> {
    run_with_selection(options).1
}

/// `run`, also returning what `Parity`'s start-up selection chose (and measured) in this run.
pub fn run_with_selection(options: &BenchOptions) -> (SelectionReport, Vec<BenchRow>) {
    let kernels: Vec<&'static dyn Kernel> = if options.kernels.is_empty() {
        tessera_parity::available_kernels()
    } else {
        options
            .kernels
            .iter()
            // `gpu` / `gpu:<adapter>` ask for the engine rows of the `gpu` feature.
            .filter(|name| !name.starts_with("gpu"))
            .map(|name| kernel_by_name(name).unwrap_or_else(|error| panic!("{error}")))
            .collect()
    };
    let selection = Parity::select(&SelectionConfig::default())
        .expect("the default selection needs no configuration");

    let mut arena = Arena::new(options.dram_bytes, 0x7e55_e2a0);
    let dram_read = measure::read_bandwidth(arena.bytes_mut(), 3);

    let mut report = Vec::new();
    for (op, data_chunks, chunk_bytes) in rows_measured() {
        if !options.ops.is_empty() && !options.ops.iter().any(|name| name == op.name()) {
            continue;
        }
        let buffers = buffers_per_set(data_chunks);
        let set_bytes = buffers * chunk_bytes;
        let tables = isal_tables(op, data_chunks);
        for working_set in ["cache", "dram"] {
            let sets = if working_set == "cache" {
                1
            } else {
                arena.len() / set_bytes
            };
            let mut calls: Vec<_> =
                arena::stripe_sets(arena.bytes_mut(), sets, buffers, chunk_bytes)
                    .into_iter()
                    .map(|set| prepare(op, data_chunks, set))
                    .collect();
            let counted_bytes = op.counted_chunks(data_chunks) * chunk_bytes;
            for &kernel in &kernels {
                verify_against_isal(calls[0].as_mut(), kernel, tables.as_ref(), op);
                let rates = measure::measure(
                    &mut calls,
                    kernel,
                    tables.as_ref(),
                    counted_bytes,
                    options.measure_time,
                    true,
                );
                let gbps = rates.ours / 1e9;
                let isal_gbps = rates.isal.map(|rate| rate / 1e9);
                let is_dram = working_set == "dram";
                report.push(BenchRow {
                    kernel: kernel.name().to_string(),
                    op: op.name(),
                    data_chunks,
                    parity_chunks: op.parity_chunks(),
                    chunk_bytes,
                    working_set,
                    working_set_bytes: sets * op.touched_buffers(data_chunks) * chunk_bytes,
                    gbps,
                    isal_gbps,
                    isal_call: Some(op.isal_call()),
                    isal_version: tessera_isal::VERSION,
                    ratio: isal_gbps.map(|isal| gbps / isal),
                    dram_read_gbps: is_dram.then_some(dram_read / 1e9),
                    of_dram_read: is_dram.then_some(rates.ours / dram_read),
                    selected: chosen(&selection, op, is_dram) == kernel.name(),
                    ..BenchRow::default()
                });
            }
        }
    }
    #[cfg(feature = "gpu")]
    report.extend(gpu_rows(options));
    (selection.report().clone(), report)
}

/// Runs one call both ways and panics if the outputs differ: the two sides must do the same work.
fn verify_against_isal(
    call: &mut dyn workload::Call,
    kernel: &dyn Kernel,
    tables: Option<&tessera_isal::EcTables>,
    op: Op,
) {
    let before = call.outputs();
    call.ours(kernel);
    let ours = call.outputs();
    call.restore(&before);
    call.isal(tables);
    let isal = call.outputs();
    call.restore(&before);
    assert!(
        ours == isal,
        "kernel {} and ISA-L disagree on {}",
        kernel.name(),
        op.name()
    );
}
