//! A hasher for the engine's maps keyed by stripe or region number. The keys are plain
//! integers chosen by the engine itself (not by a client), so the standard library's
//! flood-resistant SipHash buys nothing here, and on the write path, where every request
//! takes and releases a stripe lock and enters and leaves a region, it cost several percent.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplies the key by an odd constant (Fibonacci hashing); the high bits, which the
/// multiplication mixes best, are folded down because hash tables index by the low bits.
#[derive(Default)]
pub(crate) struct NumberHasher {
    hash: u64,
}

impl Hasher for NumberHasher {
    fn finish(&self) -> u64 {
        self.hash ^ (self.hash >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.hash = (self.hash ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by stripe or region number.
pub(crate) type NumberMap<V> = HashMap<u64, V, BuildHasherDefault<NumberHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_keys_spread_over_low_bits() {
        let buckets: std::collections::HashSet<u64> = (0..1024u64)
            .map(|key| {
                let mut hasher = NumberHasher::default();
                hasher.write_u64(key);
                hasher.finish() & 1023
            })
            .collect();
        // A good spread fills most of 1024 buckets (a random function fills ~63%).
        assert!(buckets.len() > 600, "{} buckets used", buckets.len());
    }
}
