//! Helpers shared by the GPU tests: a seeded PRNG, random stripes with their parity from the
//! naive kernel, and opening an adapter (or skipping when the machine has no Vulkan at all).

#![allow(dead_code)] // Each test file uses a different subset.

use tessera_parity::{Kernel, Naive};
use tessera_parity_gpu::{EngineConfig, GpuEngine, list_adapters};

/// Set to `1` to make a missing adapter a test failure instead of a skip (CI sets it once it
/// has installed Mesa's lavapipe).
pub const REQUIRE_ENVIRONMENT_VARIABLE: &str = "TESSERA_REQUIRE_GPU";

/// Opens adapter 0 with `config`, or returns `None` after printing why the test is skipped.
/// Panics if an adapter exists but does not open: that is a bug, not a missing GPU.
pub fn open_engine(test: &str, config: EngineConfig) -> Option<GpuEngine> {
    if list_adapters().is_empty() {
        let required = std::env::var(REQUIRE_ENVIRONMENT_VARIABLE).is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{REQUIRE_ENVIRONMENT_VARIABLE}=1 but no Vulkan/Metal/DX12 adapter exists"
        );
        eprintln!(
            "SKIPPED {test}: no Vulkan/Metal/DX12 adapter on this machine (install Mesa's \
             lavapipe: apt-get install mesa-vulkan-drivers)"
        );
        return None;
    }
    Some(GpuEngine::open(0, config).expect("adapter 0 opens"))
}

/// SplitMix64: small, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        for chunk in bytes.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        bytes
    }
}

/// A random stripe of `data_chunks` chunks of `len` bytes, with P and Q from the naive kernel.
pub struct Stripe {
    pub data: Vec<Vec<u8>>,
    pub p: Vec<u8>,
    pub q: Vec<u8>,
}

impl Stripe {
    pub fn random(rng: &mut Rng, data_chunks: usize, len: usize) -> Stripe {
        let data: Vec<Vec<u8>> = (0..data_chunks).map(|_| rng.bytes(len)).collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        Naive.pq_gen(&refs, &mut p, &mut q);
        Stripe { data, p, q }
    }

    /// The data chunks with the `lost` ones replaced by empty slices (a GPU that read them
    /// would see a different length and the layout would panic).
    pub fn survivors(&self, lost: &[usize]) -> Vec<&[u8]> {
        self.data
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                if lost.contains(&i) {
                    &[][..]
                } else {
                    chunk.as_slice()
                }
            })
            .collect()
    }
}

/// Every 1- and 2-erasure of `data_chunks` data chunks as (x, y) pairs of lost data positions
/// (for two-data recovery), or all pairs sampled down to about `limit` (always keeping the
/// extremes) for wide stripes.
pub fn data_pairs(rng: &mut Rng, data_chunks: usize, limit: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for x in 0..data_chunks {
        for y in x + 1..data_chunks {
            pairs.push((x, y));
        }
    }
    if pairs.len() <= limit {
        return pairs;
    }
    let mut sampled = vec![pairs[0], *pairs.last().expect("nonempty")];
    sampled.push((0, data_chunks - 1));
    while sampled.len() < limit {
        sampled.push(pairs[rng.below(pairs.len())]);
    }
    sampled
}

/// Lost single positions: all, or the extremes plus a sample.
pub fn single_positions(rng: &mut Rng, data_chunks: usize, limit: usize) -> Vec<usize> {
    if data_chunks <= limit {
        return (0..data_chunks).collect();
    }
    let mut positions = vec![0, data_chunks - 1];
    while positions.len() < limit {
        positions.push(rng.below(data_chunks));
    }
    positions
}
