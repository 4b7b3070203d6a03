//! `checksum-bench`: the rate of Tessera's CRC32C (`tessera_parity::checksum`) on the sizes it
//! checksums (a 4 KiB thin block, journal batches and pieces of 4.5 to 64 KiB), beside the
//! SSE4.2 `crc32` instruction (the `crc32c` crate) as the anchor, with the ratio. Buffers are
//! cache-resident, as a batch just encoded is. Best of several timed batches per size.
//!
//! Options: `--measure-ms N` per implementation per size (default 100).

use std::process::ExitCode;
use std::time::{Duration, Instant};

const SIZES_BYTES: [usize; 5] = [4096, 4608, 12 << 10, 16 << 10, 64 << 10];

fn best_rate(bytes: &[u8], budget: Duration, crc: impl Fn(&[u8]) -> u32) -> (f64, u32) {
    let batch = (8 << 20) / bytes.len();
    let mut best = Duration::MAX;
    let mut value = 0;
    let deadline = Instant::now() + budget;
    let mut rounds = 0;
    while rounds < 3 || Instant::now() < deadline {
        let started = Instant::now();
        for _ in 0..batch {
            value = crc(std::hint::black_box(bytes));
        }
        best = best.min(started.elapsed());
        rounds += 1;
    }
    ((batch * bytes.len()) as f64 / best.as_secs_f64(), value)
}

fn main() -> ExitCode {
    let mut budget = Duration::from_millis(100);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--measure-ms", Some(ms)) => budget = Duration::from_millis(ms),
            _ => {
                eprintln!("usage: checksum-bench [--measure-ms N]");
                return ExitCode::from(2);
            }
        }
    }
    println!("| bytes | tessera GB/s | crc32 instruction GB/s | ratio |");
    println!("|---:|---:|---:|---:|");
    for len in SIZES_BYTES {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        let (ours, ours_value) = best_rate(&bytes, budget, tessera_parity::checksum::crc32c);
        let (anchor, anchor_value) = best_rate(&bytes, budget, crc32c::crc32c);
        if ours_value != anchor_value {
            eprintln!(
                "checksum-bench: CRC32C of {len} bytes differs: {ours_value:#x} against {anchor_value:#x}"
            );
            return ExitCode::FAILURE;
        }
        println!(
            "| {len} | {:.1} | {:.1} | {:.2}x |",
            ours / 1e9,
            anchor / 1e9,
            ours / anchor
        );
    }
    ExitCode::SUCCESS
}
