//! Measurements for the benchmark (`parity-bench`'s GPU rows): one engine, one operation, one
//! batch size: throughput one batch at a time and double-buffered, and the CPU time it costs.

use std::time::{Duration, Instant};

use tessera_parity::Kernel;

use crate::GpuError;
use crate::calibrate::cpu_time;
use crate::engine::GpuEngine;
use crate::stripe::{StripeOperation, StripeOutput, StripeRef, run_on_cpu};

/// The benchmarked operations, on stripes of `data_chunks` data chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchOperation {
    /// P only.
    Xor,
    /// P and Q.
    Pq,
    /// Data chunks 1 and n-1 lost (the multiply-by-constant path).
    RecoverTwoData,
}

impl BenchOperation {
    /// Every operation, in report order.
    pub const ALL: [BenchOperation; 3] = [
        BenchOperation::Xor,
        BenchOperation::Pq,
        BenchOperation::RecoverTwoData,
    ];

    /// The name `parity-bench` uses for the same operation.
    pub fn name(self) -> &'static str {
        match self {
            BenchOperation::Xor => "xor",
            BenchOperation::Pq => "pq",
            BenchOperation::RecoverTwoData => "recover_2data",
        }
    }

    fn stripe_operation(self, data_chunks: usize) -> StripeOperation {
        match self {
            BenchOperation::Xor => StripeOperation::Xor,
            BenchOperation::Pq => StripeOperation::Pq,
            BenchOperation::RecoverTwoData => StripeOperation::RecoverTwoData {
                x: 1,
                y: data_chunks - 1,
            },
        }
    }
}

/// What one measurement found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Bytes of data chunks per batch.
    pub batch_bytes: u64,
    /// GB/s of data chunks, one batch at a time (submit to completion), fastest round.
    pub gbps: f64,
    /// GB/s of data chunks with the next batch submitted before waiting for the previous one
    /// (double buffering; the same as `gbps` for the CPU, which computes inline).
    pub pipelined_gbps: f64,
    /// CPU seconds (user + system, every thread of the process) per 10^9 bytes of data chunks,
    /// over the pipelined run.
    pub process_cpu_seconds_per_gb: f64,
    /// CPU seconds of the calling thread alone per 10^9 bytes, over the pipelined run.
    pub thread_cpu_seconds_per_gb: f64,
}

/// Buffers for a batch of `op` stripes: 8 data chunks (or fewer for tiny batches) of up to
/// `chunk_bytes`, P and Q, and outputs.
pub struct BenchBatch {
    operation: BenchOperation,
    data: Vec<u8>,
    parity: Vec<u8>,
    outputs: Vec<u8>,
    data_chunks: usize,
    chunk_bytes: usize,
}

impl BenchBatch {
    /// A batch of about `batch_bytes` of data chunks.
    pub fn new(
        operation: BenchOperation,
        batch_bytes: u64,
        data_chunks: usize,
        chunk_bytes: usize,
    ) -> BenchBatch {
        assert!(data_chunks >= 2);
        let chunk_bytes = chunk_bytes.min(batch_bytes as usize / data_chunks).max(16);
        let stripes = (batch_bytes as usize / (data_chunks * chunk_bytes)).max(1);
        let mut data = vec![0u8; stripes * data_chunks * chunk_bytes];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for chunk in data.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        let mut batch = BenchBatch {
            operation,
            data,
            parity: vec![0u8; stripes * 2 * chunk_bytes],
            outputs: vec![0u8; stripes * 2 * chunk_bytes],
            data_chunks,
            chunk_bytes,
        };
        // Real P and Q, so that recovery recovers real data.
        let parity_kernel = tessera_parity::Scalar;
        batch.with_jobs_for(BenchOperation::Pq, |stripes, outputs| {
            for (stripe, output) in stripes.iter().zip(outputs.iter_mut()) {
                run_on_cpu(&parity_kernel, stripe, output);
            }
        });
        let outputs = std::mem::take(&mut batch.outputs);
        batch.parity.copy_from_slice(&outputs);
        batch.outputs = outputs;
        batch
    }

    /// Bytes of data chunks.
    pub fn data_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Data chunks per stripe and bytes per chunk.
    pub fn shape(&self) -> (usize, usize) {
        (self.data_chunks, self.chunk_bytes)
    }

    /// The outputs of the last run (both outputs of each stripe; the second is zero for XOR).
    pub fn outputs(&self) -> &[u8] {
        &self.outputs
    }

    /// Runs `f` over the batch's stripes and outputs.
    pub fn with_jobs<R>(
        &mut self,
        f: impl FnOnce(&[StripeRef<'_>], &mut [StripeOutput<'_>]) -> R,
    ) -> R {
        self.with_jobs_for(self.operation, f)
    }

    fn with_jobs_for<R>(
        &mut self,
        operation: BenchOperation,
        f: impl FnOnce(&[StripeRef<'_>], &mut [StripeOutput<'_>]) -> R,
    ) -> R {
        let (n, chunk) = (self.data_chunks, self.chunk_bytes);
        let stripe_operation = operation.stripe_operation(n);
        let lost = stripe_operation.lost();
        let lists: Vec<Vec<&[u8]>> = self
            .data
            .chunks(n * chunk)
            .map(|stripe| {
                stripe
                    .chunks(chunk)
                    .enumerate()
                    .map(|(i, c)| if lost.contains(&i) { &[][..] } else { c })
                    .collect()
            })
            .collect();
        let parity: Vec<[&[u8]; 2]> = self
            .parity
            .chunks(2 * chunk)
            .map(|pair| [&pair[..chunk], &pair[chunk..]])
            .collect();
        let stripes: Vec<StripeRef<'_>> = lists
            .iter()
            .zip(&parity)
            .map(|(data, parity)| StripeRef {
                operation: stripe_operation,
                data,
                parity: &parity[..stripe_operation.parity_inputs()],
            })
            .collect();
        let mut outputs: Vec<StripeOutput<'_>> = self
            .outputs
            .chunks_mut(2 * chunk)
            .map(|pair| {
                let (first, second) = pair.split_at_mut(chunk);
                StripeOutput {
                    first,
                    second: (stripe_operation.outputs() == 2).then_some(second),
                }
            })
            .collect();
        f(&stripes, &mut outputs)
    }
}

fn gbps(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64().max(1e-9) / 1e9
}

/// Rounds to run: as many as fit in `time` at the first round's pace, at least 2, at most 50.
fn rounds_for(first_round: Duration, time: Duration) -> usize {
    ((time.as_secs_f64() / first_round.as_secs_f64().max(1e-9)) as usize).clamp(2, 50)
}

/// Measures the CPU kernel on `batch` for about `time`.
pub fn measure_cpu(kernel: &dyn Kernel, batch: &mut BenchBatch, time: Duration) -> Measurement {
    let mut round = || {
        let started = Instant::now();
        batch.with_jobs(|stripes, outputs| {
            for (stripe, output) in stripes.iter().zip(outputs.iter_mut()) {
                run_on_cpu(kernel, stripe, output);
            }
        });
        started.elapsed()
    };
    let rounds = rounds_for(round(), time);
    let before = cpu_time();
    let started = Instant::now();
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        best = best.min(round());
    }
    let elapsed = started.elapsed();
    let after = cpu_time();
    let gigabytes = (batch.data_bytes() * rounds as u64) as f64 / 1e9;
    Measurement {
        batch_bytes: batch.data_bytes(),
        gbps: gbps(batch.data_bytes(), best),
        pipelined_gbps: gbps(batch.data_bytes() * rounds as u64, elapsed),
        process_cpu_seconds_per_gb: (after.process - before.process).as_secs_f64() / gigabytes,
        thread_cpu_seconds_per_gb: (after.thread - before.thread).as_secs_f64() / gigabytes,
    }
}

/// Measures the GPU engine on `batch` for about `time` (the engine needs two slots for the
/// pipelined run).
pub fn measure_gpu(
    engine: &mut GpuEngine,
    batch: &mut BenchBatch,
    time: Duration,
) -> Result<Measurement, GpuError> {
    let mut round = |engine: &mut GpuEngine| -> Result<Duration, GpuError> {
        let started = Instant::now();
        batch.with_jobs(|stripes, outputs| engine.run(stripes, outputs))?;
        Ok(started.elapsed())
    };
    // The first round grows the staging buffers; it is not counted.
    let rounds = rounds_for(round(engine)?, time / 2);
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        best = best.min(round(engine)?);
    }
    // Double-buffered: submit batch k+1, then wait for batch k.
    let before = cpu_time();
    let started = Instant::now();
    batch.with_jobs(|stripes, outputs| -> Result<(), GpuError> {
        let mut previous = None;
        for _ in 0..rounds {
            let ticket = engine.submit(stripes)?;
            if let Some(previous) = previous.replace(ticket) {
                engine.wait(previous, outputs)?;
            }
        }
        if let Some(last) = previous {
            engine.wait(last, outputs)?;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    let after = cpu_time();
    let gigabytes = (batch.data_bytes() * rounds as u64) as f64 / 1e9;
    Ok(Measurement {
        batch_bytes: batch.data_bytes(),
        gbps: gbps(batch.data_bytes(), best),
        pipelined_gbps: gbps(batch.data_bytes() * rounds as u64, elapsed),
        process_cpu_seconds_per_gb: (after.process - before.process).as_secs_f64() / gigabytes,
        thread_cpu_seconds_per_gb: (after.thread - before.thread).as_secs_f64() / gigabytes,
    })
}
