//! Start-up calibration: each engine's throughput at several batch sizes (P+Q of 8-data-chunk
//! stripes, the commonest full-stripe write) and a GPU's submit latency, as Linux times its
//! raid6 routines at boot. Also the process and thread CPU time, for the benchmark's CPU
//! seconds per GB.

use std::time::{Duration, Instant};

use tessera_parity::Kernel;

use crate::GpuError;
use crate::engine::GpuEngine;
use crate::report::CalibrationPoint;
use crate::stripe::{StripeOperation, StripeOutput, StripeRef, run_on_cpu};

/// What calibration measures.
#[derive(Clone, Debug)]
pub struct CalibrationConfig {
    /// Batch sizes, bytes of data chunks.
    pub batch_bytes: Vec<u64>,
    /// Data chunks per stripe.
    pub data_chunks: usize,
    /// Chunk size, or less for batches smaller than one stripe of it.
    pub chunk_bytes: usize,
    /// Time spent on each batch size per engine (at least one round, at most `max_rounds`).
    pub time_per_size: Duration,
    /// Most rounds per batch size.
    pub max_rounds: usize,
    /// Empty submissions timed for the submit latency (the median counts).
    pub latency_rounds: usize,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        CalibrationConfig {
            batch_bytes: (0..6).map(|step| (64u64 << 10) << (2 * step)).collect(),
            data_chunks: 8,
            chunk_bytes: 64 << 10,
            time_per_size: Duration::from_millis(30),
            max_rounds: 20,
            latency_rounds: 21,
        }
    }
}

/// Seeded bytes for the calibration stripes (their contents do not change the speed).
fn fill(bytes: &mut [u8]) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in bytes.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

/// The buffers of a calibration batch: P+Q stripes covering `batch_bytes` of data.
pub(crate) struct CalibrationBatch {
    data: Vec<u8>,
    parity: Vec<u8>,
    data_chunks: usize,
    chunk_bytes: usize,
}

impl CalibrationBatch {
    pub fn new(batch_bytes: u64, data_chunks: usize, chunk_bytes: usize) -> CalibrationBatch {
        assert!(data_chunks >= 1);
        let batch_bytes = batch_bytes as usize;
        let chunk_bytes = chunk_bytes.min(batch_bytes / data_chunks).max(16);
        let stripes = (batch_bytes / (data_chunks * chunk_bytes)).max(1);
        let mut data = vec![0u8; stripes * data_chunks * chunk_bytes];
        fill(&mut data);
        CalibrationBatch {
            data,
            parity: vec![0u8; stripes * 2 * chunk_bytes],
            data_chunks,
            chunk_bytes,
        }
    }

    /// Bytes of data chunks.
    pub fn data_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Runs `f` with the stripes and their outputs.
    pub fn with_jobs<R>(
        &mut self,
        f: impl FnOnce(&[StripeRef<'_>], &mut [StripeOutput<'_>]) -> R,
    ) -> R {
        let chunk_bytes = self.chunk_bytes;
        let lists: Vec<Vec<&[u8]>> = self
            .data
            .chunks(self.data_chunks * chunk_bytes)
            .map(|stripe| stripe.chunks(chunk_bytes).collect())
            .collect();
        let stripes: Vec<StripeRef<'_>> = lists
            .iter()
            .map(|data| StripeRef {
                operation: StripeOperation::Pq,
                data,
                parity: &[],
            })
            .collect();
        let mut outputs: Vec<StripeOutput<'_>> = self
            .parity
            .chunks_mut(2 * chunk_bytes)
            .map(|pair| {
                let (p, q) = pair.split_at_mut(chunk_bytes);
                StripeOutput {
                    first: p,
                    second: Some(q),
                }
            })
            .collect();
        f(&stripes, &mut outputs)
    }
}

/// Runs `round` repeatedly for `time` (at least once, at most `max_rounds`) and returns the
/// fastest round: the least disturbed by other work on a shared machine.
fn fastest<E>(
    time: Duration,
    max_rounds: usize,
    mut round: impl FnMut() -> Result<(), E>,
) -> Result<Duration, E> {
    let started = Instant::now();
    let mut best = Duration::MAX;
    for _ in 0..max_rounds.max(1) {
        let round_started = Instant::now();
        round()?;
        best = best.min(round_started.elapsed());
        if started.elapsed() >= time {
            break;
        }
    }
    Ok(best)
}

fn gbps(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64().max(1e-9) / 1e9
}

/// The CPU kernel's throughput at each batch size.
pub fn calibrate_cpu(kernel: &dyn Kernel, config: &CalibrationConfig) -> Vec<CalibrationPoint> {
    config
        .batch_bytes
        .iter()
        .map(|&batch_bytes| {
            let mut batch =
                CalibrationBatch::new(batch_bytes, config.data_chunks, config.chunk_bytes);
            let bytes = batch.data_bytes();
            let time = fastest::<()>(config.time_per_size, config.max_rounds, || {
                batch.with_jobs(|stripes, outputs| {
                    for (stripe, output) in stripes.iter().zip(outputs.iter_mut()) {
                        run_on_cpu(kernel, stripe, output);
                    }
                });
                Ok(())
            })
            .expect("the CPU does not fail");
            CalibrationPoint {
                batch_bytes: bytes,
                gbps: gbps(bytes, time),
            }
        })
        .collect()
}

/// The GPU's submit latency and throughput at each batch size (one batch at a time, submit to
/// completion, copies included).
pub fn calibrate_gpu(
    engine: &mut GpuEngine,
    config: &CalibrationConfig,
) -> Result<(Duration, Vec<CalibrationPoint>), GpuError> {
    let latency = engine.submit_latency(config.latency_rounds)?;
    let mut points = Vec::new();
    for &batch_bytes in &config.batch_bytes {
        let mut batch = CalibrationBatch::new(batch_bytes, config.data_chunks, config.chunk_bytes);
        let bytes = batch.data_bytes();
        // One untimed round grows the staging buffers to this size.
        batch.with_jobs(|stripes, outputs| engine.run(stripes, outputs))?;
        let time = fastest(config.time_per_size, config.max_rounds, || {
            batch.with_jobs(|stripes, outputs| engine.run(stripes, outputs))
        })?;
        points.push(CalibrationPoint {
            batch_bytes: bytes,
            gbps: gbps(bytes, time),
        });
    }
    Ok((latency, points))
}

/// CPU time used so far, user plus system.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// By the whole process (every thread, a software GPU driver's included).
    pub process: Duration,
    /// By the calling thread alone.
    pub thread: Duration,
}

fn rusage(who: libc::c_int) -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` into the pointer it is given, which points to
    // enough properly aligned memory; `who` is one of the RUSAGE_* constants.
    let status = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    assert_eq!(status, 0, "getrusage cannot fail with valid arguments");
    // SAFETY: getrusage succeeded, so it initialised the structure (zeroed before anyway).
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The process's and this thread's CPU time (`getrusage`).
pub fn cpu_time() -> CpuTime {
    CpuTime {
        process: rusage(libc::RUSAGE_SELF),
        thread: rusage(libc::RUSAGE_THREAD),
    }
}
