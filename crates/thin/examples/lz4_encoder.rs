//! The store's LZ4 encoder against `lz4_flex`'s on 4 KiB blocks: compressed bytes and time per
//! block, one core. `cargo run --release -p tessera-thin --example lz4_encoder`

use std::time::Instant;
use tessera_thin::lz4::Lz4Encoder;

const BLOCK: usize = 4096;
const ROUNDS: u32 = 200_000;

fn main() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    let blocks: Vec<(&str, Vec<u8>)> = vec![
        ("random", (0..BLOCK).map(|_| random()).collect()),
        (
            "half random (256-byte runs of zeroes between random ones)",
            (0..BLOCK)
                .map(|i| if i % 512 < 256 { 0 } else { random() })
                .collect(),
        ),
        (
            "text",
            b"the quick brown fox jumps over the lazy dog; "
                .iter()
                .copied()
                .cycle()
                .take(BLOCK)
                .collect(),
        ),
    ];
    let mut encoder = Lz4Encoder::new();
    let mut out = vec![
        0u8;
        Lz4Encoder::max_output_bytes(BLOCK)
            .max(lz4_flex::block::get_maximum_output_size(BLOCK))
    ];
    for (name, block) in &blocks {
        let started = Instant::now();
        let mut ours = 0;
        for _ in 0..ROUNDS {
            ours = encoder
                .compress(std::hint::black_box(block), &mut out)
                .expect("the bound holds");
        }
        let ours_ns = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        let started = Instant::now();
        let mut theirs = 0;
        for _ in 0..ROUNDS {
            theirs = lz4_flex::block::compress_into(std::hint::black_box(block), &mut out)
                .expect("room");
        }
        let theirs_ns = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        println!(
            "{name}: this encoder {ours} bytes in {ours_ns:.0} ns, lz4_flex {theirs} bytes in {theirs_ns:.0} ns"
        );
    }
}
