//! Timing: alternate batches of Tessera calls and ISA-L calls on the same stripe sets, keep the
//! fastest batch of each (the least disturbed by other work on a shared machine).

use std::time::{Duration, Instant};

use tessera_isal::EcTables;
use tessera_parity::Kernel;

use crate::workload::Call;

/// Fastest observed rates, in bytes per second.
pub struct Rates {
    pub ours: f64,
    pub isal: Option<f64>,
}

/// Target duration of one timed batch: long enough to dwarf the timer, short enough that a
/// disturbance spoils only one batch of many.
const BATCH_TARGET: Duration = Duration::from_millis(2);

/// Fewest batches of each implementation, whatever the budget.
const MIN_ROUNDS: usize = 3;

/// Measures `kernel` (and ISA-L when `with_isal`) on `calls`, each call processing
/// `counted_bytes`. With one call, every batch reuses the same (cache-resident) buffers; with
/// many, batches walk through them in turn, so each call meets buffers last touched long ago.
pub fn measure(
    calls: &mut [Box<dyn Call + '_>],
    kernel: &dyn Kernel,
    tables: Option<&EcTables>,
    counted_bytes: usize,
    budget: Duration,
    with_isal: bool,
) -> Rates {
    assert!(!calls.is_empty());
    // Warm up (page tables, caches for the cache-resident case) and size the batch.
    calls[0].ours(kernel);
    let started = Instant::now();
    calls[0].ours(kernel);
    let one_call = started.elapsed().max(Duration::from_nanos(50));
    if with_isal {
        calls[0].isal(tables);
    }
    let batch = ((BATCH_TARGET.as_nanos() / one_call.as_nanos()) as usize).clamp(1, 100_000);

    let mut cursor = 0;
    let mut best_ours = Duration::MAX;
    let mut best_isal = Duration::MAX;
    let deadline = Instant::now() + budget * if with_isal { 2 } else { 1 };
    let mut rounds = 0;
    while rounds < MIN_ROUNDS || Instant::now() < deadline {
        let started = Instant::now();
        for _ in 0..batch {
            calls[cursor].ours(kernel);
            cursor = (cursor + 1) % calls.len();
        }
        best_ours = best_ours.min(started.elapsed());
        if with_isal {
            let started = Instant::now();
            for _ in 0..batch {
                calls[cursor].isal(tables);
                cursor = (cursor + 1) % calls.len();
            }
            best_isal = best_isal.min(started.elapsed());
        }
        rounds += 1;
    }
    let rate = |best: Duration| (batch * counted_bytes) as f64 / best.as_secs_f64();
    Rates {
        ours: rate(best_ours),
        isal: with_isal.then(|| rate(best_isal)),
    }
}

/// One core's read bandwidth over `bytes`, in bytes per second (best of a few passes): the
/// ceiling for any kernel whose data come from DRAM. The buffer is read as `STREAMS` interleaved
/// sequential streams (like a kernel reading several chunks at once), 64 bytes from each in turn.
pub fn read_bandwidth(bytes: &[u8], passes: usize) -> f64 {
    // Compiled for AVX2 where available: 32-byte loads keep more bytes in flight per
    // instruction, and the kernels it is compared with use vector loads too.
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 detected.
        return unsafe { read_bandwidth_avx2(bytes, passes) };
    }
    read_bandwidth_portable(bytes, passes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_bandwidth_avx2(bytes: &[u8], passes: usize) -> f64 {
    read_bandwidth_portable(bytes, passes)
}

#[inline(always)]
fn read_bandwidth_portable(bytes: &[u8], passes: usize) -> f64 {
    const STREAMS: usize = 8;
    let stream_bytes = bytes.len() / STREAMS / 64 * 64;
    let streams: Vec<&[u8]> = bytes.chunks_exact(stream_bytes).take(STREAMS).collect();
    let mut best = Duration::MAX;
    for _ in 0..passes {
        let started = Instant::now();
        let mut folded = [0u64; 8];
        for line in (0..stream_bytes).step_by(64) {
            for stream in &streams {
                for (lane, word) in folded
                    .iter_mut()
                    .zip(stream[line..line + 64].chunks_exact(8))
                {
                    *lane ^= u64::from_le_bytes(word.try_into().expect("eight bytes"));
                }
            }
        }
        std::hint::black_box(folded);
        best = best.min(started.elapsed());
    }
    (stream_bytes * STREAMS) as f64 / best.as_secs_f64()
}
