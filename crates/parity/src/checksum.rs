//! CRC32C (Castagnoli), the checksum of every structure Tessera writes to its members:
//! superblocks, bitmap blocks, journal batches, thin segments and blocks.
//!
//! Journal batches are checksummed on the write path and thin blocks on every read, so the
//! rate matters: folding with carry-less multiplication (VPCLMULQDQ, or PCLMULQDQ where AVX-512
//! is absent) runs at about 2.5 times the rate of the SSE4.2 `crc32` instruction on this
//! project's machine (`docs/benchmarks.md`). The values are the standard CRC32C's (iSCSI,
//! reflected polynomial 0x82F63B78), so nothing on disk changes with the implementation.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    narrow(crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes))
}

/// CRC32C of bytes given in parts, as if they were one slice.
pub struct Crc32c(Digest);

impl Crc32c {
    pub fn new() -> Crc32c {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    /// Appends `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The CRC32C of everything appended.
    pub fn finish(&self) -> u32 {
        narrow(self.0.finalize())
    }
}

impl Default for Crc32c {
    fn default() -> Crc32c {
        Crc32c::new()
    }
}

fn narrow(crc: u64) -> u32 {
    u32::try_from(crc).expect("a 32-bit CRC fits u32")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit by bit, as the polynomial division is defined: the oracle.
    fn crc32c_bitwise(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn the_standard_check_value() {
        // The check value of CRC-32/ISCSI in the catalogue of parametrised CRCs.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_bitwise(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[]), 0);
    }

    proptest! {
        #[test]
        fn matches_the_bitwise_definition_at_any_length_and_alignment(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            skip in 0usize..64,
        ) {
            let slice = &bytes[skip.min(bytes.len())..];
            prop_assert_eq!(crc32c(slice), crc32c_bitwise(slice));
        }

        #[test]
        fn parts_give_the_crc_of_the_whole(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            cuts in proptest::collection::vec(any::<usize>(), 0..5),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut digest = Crc32c::new();
            let mut from = 0;
            for cut in cuts {
                digest.update(&bytes[from..cut]);
                from = cut;
            }
            digest.update(&bytes[from..]);
            prop_assert_eq!(digest.finish(), crc32c_bitwise(&bytes));
        }
    }
}
