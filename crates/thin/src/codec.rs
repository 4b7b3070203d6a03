//! Block compression and checksums.

use crate::BLOCK_BYTES;
use crate::lz4::Lz4Encoder;
use tessera_parity::checksum;

const BLOCK: usize = BLOCK_BYTES as usize;

/// How a block is stored. The numbers are the on-disk codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    Raw = 0,
    Lz4 = 1,
    Zstd = 2,
}

impl Codec {
    pub fn from_code(code: u8) -> Option<Codec> {
        match code {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// A compressed block is stored raw unless it saves at least this much: a block that barely
/// compresses costs a decompression on every read for nothing.
const MIN_SAVING_BYTES: usize = 256;

/// zstd's fastest level: the point is to write less, at drive speed.
const ZSTD_LEVEL: i32 = 1;

/// Compresses blocks, reusing its scratch space.
pub struct Compressor {
    scratch: Vec<u8>,
    lz4: Option<Lz4Encoder>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl Compressor {
    /// A compressor whose buffers are made at its first use, so that one can stand in for
    /// another (`std::mem::take`) without allocating.
    pub fn new() -> Compressor {
        Compressor {
            scratch: Vec::new(),
            lz4: None,
            zstd: None,
        }
    }

    /// The stored form of one block with `preferred`: the codec used and the bytes.
    pub fn compress<'a>(&'a mut self, block: &'a [u8], preferred: Codec) -> (Codec, &'a [u8]) {
        assert_eq!(block.len(), BLOCK, "compress takes whole blocks");
        let scratch_bytes = Lz4Encoder::max_output_bytes(BLOCK).max(BLOCK * 2);
        if self.scratch.len() < scratch_bytes {
            self.scratch.resize(scratch_bytes, 0);
        }
        let len = match preferred {
            Codec::Raw => None,
            Codec::Lz4 => self
                .lz4
                .get_or_insert_with(Lz4Encoder::new)
                .compress(block, &mut self.scratch),
            Codec::Zstd => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
                }
                self.zstd
                    .as_mut()
                    .and_then(|zstd| zstd.compress_to_buffer(block, &mut self.scratch[..]).ok())
            }
        };
        match len {
            Some(len) if len + MIN_SAVING_BYTES <= BLOCK => (preferred, &self.scratch[..len]),
            _ => (Codec::Raw, block),
        }
    }
}

impl Default for Compressor {
    fn default() -> Compressor {
        Compressor::new()
    }
}

/// Expands a stored block into `out` (one block). Fails on anything that does not decode to
/// exactly one block: stored bytes come from a drive.
pub fn decompress(codec: Codec, stored: &[u8], out: &mut [u8]) -> Result<(), String> {
    assert_eq!(out.len(), BLOCK, "decompress fills whole blocks");
    let len = match codec {
        Codec::Raw => {
            if stored.len() != BLOCK {
                return Err(format!("raw block of {} bytes", stored.len()));
            }
            out.copy_from_slice(stored);
            BLOCK
        }
        Codec::Lz4 => lz4_flex::block::decompress_into(stored, out).map_err(|e| e.to_string())?,
        Codec::Zstd => zstd::bulk::decompress_to_buffer(stored, out).map_err(|e| e.to_string())?,
    };
    if len != BLOCK {
        return Err(format!("block decompressed to {len} bytes"));
    }
    Ok(())
}

/// The checksum of a stored block (over its stored bytes, so corruption is caught before the
/// decompressor sees it).
pub fn checksum(stored: &[u8]) -> u32 {
    checksum::crc32c(stored)
}

pub fn is_zero(block: &[u8]) -> bool {
    // OR-folding fixed-size pieces vectorizes; an early exit per byte does not.
    let mut pieces = block.chunks_exact(64);
    pieces.all(|piece| piece.iter().fold(0u8, |acc, &b| acc | b) == 0)
        && pieces.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: u8) -> Vec<u8> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        (0..BLOCK)
            .map(|i| match kind {
                0 => 0,
                1 => (i / 64) as u8,
                _ => {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                }
            })
            .collect()
    }

    #[test]
    fn round_trips_and_falls_back_to_raw() {
        let mut compressor = Compressor::new();
        for preferred in [Codec::Raw, Codec::Lz4, Codec::Zstd] {
            for kind in 0..3 {
                let block = sample(kind);
                let (codec, stored) = compressor.compress(&block, preferred);
                let stored = stored.to_vec();
                if preferred == Codec::Raw || kind == 2 {
                    assert_eq!(codec, Codec::Raw, "{preferred:?} kind {kind}");
                } else {
                    assert_eq!(codec, preferred);
                    assert!(stored.len() < BLOCK / 4);
                }
                let mut out = vec![1u8; BLOCK];
                decompress(codec, &stored, &mut out).unwrap();
                assert_eq!(out, block);
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = vec![0u8; BLOCK];
        for len in [0usize, 1, 7, 100, 4095, 4096, 5000] {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let _ = decompress(Codec::Lz4, &junk, &mut out);
            let _ = decompress(Codec::Zstd, &junk, &mut out);
            assert_eq!(
                decompress(Codec::Raw, &junk, &mut out).is_ok(),
                len == BLOCK
            );
        }
    }

    #[test]
    fn zero_detection() {
        let mut block = vec![0u8; BLOCK];
        assert!(is_zero(&block));
        block[4095] = 1;
        assert!(!is_zero(&block));
        block[4095] = 0;
        block[0] = 1;
        assert!(!is_zero(&block));
    }
}
