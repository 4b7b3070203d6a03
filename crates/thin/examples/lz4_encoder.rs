//! The store's LZ4 encoder against `lz4_flex`'s on 4 KiB blocks: compressed bytes and time per
//! block, one core. `cargo run --release -p tessera-thin --example lz4_encoder`
//!
//! Each kind is 256 different blocks compressed in turn (a store never sees the same block
//! twice in a row, and the encoder's table keeps positions from the block before), timed in
//! seven rounds; the fastest round is printed, as the slower ones measure the machine's other
//! work.

use std::time::Instant;
use tessera_thin::lz4::Lz4Encoder;

const BLOCK: usize = 4096;
const BLOCKS: usize = 256;
const PASSES: u32 = 200;
const ROUNDS: usize = 7;

fn main() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    let mut kind = |make: &mut dyn FnMut(usize, &mut dyn FnMut() -> u8) -> u8| -> Vec<Vec<u8>> {
        (0..BLOCKS)
            .map(|_| (0..BLOCK).map(|i| make(i, &mut random)).collect())
            .collect()
    };
    let text = b"the quick brown fox jumps over the lazy dog; ";
    let kinds: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("random", kind(&mut |_, random| random())),
        (
            "fio buffer_compress_percentage=50 (2 KiB random, 2 KiB zeroes)",
            kind(&mut |i, random| if i < BLOCK / 2 { random() } else { 0 }),
        ),
        (
            "256-byte runs of zeroes between random ones",
            kind(&mut |i, random| if i % 512 < 256 { 0 } else { random() }),
        ),
        (
            "text",
            kind(&mut |i, random| {
                // A different starting point in the sentence for each block.
                if i == 0 {
                    random()
                } else {
                    text[i % text.len()]
                }
            }),
        ),
    ];
    let mut encoder = Lz4Encoder::new();
    let mut out = vec![
        0u8;
        Lz4Encoder::max_output_bytes(BLOCK)
            .max(lz4_flex::block::get_maximum_output_size(BLOCK))
    ];
    for (name, blocks) in &kinds {
        let (mut ours_ns, mut theirs_ns) = (f64::MAX, f64::MAX);
        let (mut ours_bytes, mut theirs_bytes) = (0, 0);
        for _ in 0..ROUNDS {
            let started = Instant::now();
            ours_bytes = 0;
            for _ in 0..PASSES {
                for block in blocks {
                    ours_bytes += encoder
                        .compress(std::hint::black_box(block), &mut out)
                        .expect("the bound holds");
                }
            }
            ours_ns = ours_ns.min(per_block_ns(started));
            let started = Instant::now();
            theirs_bytes = 0;
            for _ in 0..PASSES {
                for block in blocks {
                    theirs_bytes +=
                        lz4_flex::block::compress_into(std::hint::black_box(block), &mut out)
                            .expect("room");
                }
            }
            theirs_ns = theirs_ns.min(per_block_ns(started));
        }
        let count = BLOCKS * PASSES as usize;
        println!(
            "{name}: this encoder {} bytes in {ours_ns:.0} ns, lz4_flex {} bytes in {theirs_ns:.0} ns",
            ours_bytes / count,
            theirs_bytes / count
        );
    }
}

fn per_block_ns(started: Instant) -> f64 {
    started.elapsed().as_nanos() as f64 / (BLOCKS as f64 * f64::from(PASSES))
}
