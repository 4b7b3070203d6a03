//! The region bitmap: two bits per region of the group's data space, mirrored on every member.
//!
//! - *written*: the region has held host data since it was last known to be all zeroes. A
//!   region that was never written reads as zeroes without touching the members, is zero-filled
//!   before its first write, and is skipped by rebuild and scrub.
//! - *dirty* (write intent): writes may be in flight in the region, so after a crash its parity
//!   or mirrors must be resynced. Set durably before the first write, cleared lazily once the
//!   region is idle and a member flush has covered its writes.
//!
//! On disk the bitmap is an array of 4 KiB blocks, each stored in two slots; an update of block
//! `b` with sequence `s` goes to slot `s % 2`, so a torn write only ever damages the slot being
//! written while the other keeps the previous version. The reader takes, per block, the valid
//! copy with the highest sequence across all members.

use tessera_parity::checksum;
/// Bytes of one bitmap block.
pub const BLOCK_BYTES: usize = 4096;
const HEADER_BYTES: usize = 32;
const HALF_BYTES: usize = (BLOCK_BYTES - HEADER_BYTES) / 2;
/// Regions one block describes.
pub const REGIONS_PER_BLOCK: u64 = (HALF_BYTES * 8) as u64;
const MAGIC: u32 = u32::from_le_bytes(*b"TSBM");

/// Bytes of one bitmap slot (one copy of every block) for a group of `regions` regions.
pub fn slot_bytes_for(regions: u64) -> u64 {
    regions.div_ceil(REGIONS_PER_BLOCK).max(1) * BLOCK_BYTES as u64
}

/// Why a bitmap block copy was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// Wrong magic, group tag or block index: not this block of this group.
    Foreign,
    /// CRC32C mismatch: torn or damaged.
    Checksum,
}

/// The decoded contents of one bitmap block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockImage {
    pub sequence: u64,
    pub written: Vec<u8>,
    pub dirty: Vec<u8>,
}

/// Encodes block `index` of a group (identified by `group_tag`) from its two bit arrays.
pub fn encode_block(
    group_tag: u64,
    index: u32,
    sequence: u64,
    written: &[u8],
    dirty: &[u8],
) -> Vec<u8> {
    assert!(written.len() <= HALF_BYTES && dirty.len() <= HALF_BYTES);
    let mut out = vec![0u8; BLOCK_BYTES];
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&index.to_le_bytes());
    out[8..16].copy_from_slice(&sequence.to_le_bytes());
    out[16..24].copy_from_slice(&group_tag.to_le_bytes());
    out[HEADER_BYTES..HEADER_BYTES + written.len()].copy_from_slice(written);
    out[HEADER_BYTES + HALF_BYTES..HEADER_BYTES + HALF_BYTES + dirty.len()].copy_from_slice(dirty);
    let crc = checksum::crc32c(&out);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes one copy of block `index`.
pub fn decode_block(bytes: &[u8], group_tag: u64, index: u32) -> Result<BlockImage, BlockError> {
    if bytes.len() < BLOCK_BYTES {
        return Err(BlockError::Foreign);
    }
    let field = |at: usize, len: usize| &bytes[at..at + len];
    let u32_at = |at| u32::from_le_bytes(field(at, 4).try_into().expect("4 bytes"));
    let u64_at = |at| u64::from_le_bytes(field(at, 8).try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC || u32_at(4) != index || u64_at(16) != group_tag {
        return Err(BlockError::Foreign);
    }
    let mut zeroed = bytes[..BLOCK_BYTES].to_vec();
    zeroed[24..28].fill(0);
    if checksum::crc32c(&zeroed) != u32_at(24) {
        return Err(BlockError::Checksum);
    }
    Ok(BlockImage {
        sequence: u64_at(8),
        written: field(HEADER_BYTES, HALF_BYTES).to_vec(),
        dirty: field(HEADER_BYTES + HALF_BYTES, HALF_BYTES).to_vec(),
    })
}

/// A plain growable bit set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bits {
    bytes: Vec<u8>,
}

impl Bits {
    pub fn new(count: u64) -> Bits {
        Bits {
            bytes: vec![0; count.div_ceil(8) as usize],
        }
    }

    pub fn get(&self, index: u64) -> bool {
        self.bytes[(index / 8) as usize] & (1 << (index % 8)) != 0
    }

    pub fn set(&mut self, index: u64, value: bool) {
        let byte = &mut self.bytes[(index / 8) as usize];
        if value {
            *byte |= 1 << (index % 8);
        } else {
            *byte &= !(1 << (index % 8));
        }
    }

    /// The bytes holding bits `block * REGIONS_PER_BLOCK ..`, as stored in block `block`.
    pub fn block_bytes(&self, block: u32) -> &[u8] {
        let start = (block as usize * HALF_BYTES).min(self.bytes.len());
        let end = (start + HALF_BYTES).min(self.bytes.len());
        &self.bytes[start..end]
    }

    /// Loads the bits of block `block` from its stored bytes (bits beyond `count` are ignored).
    pub fn load_block(&mut self, block: u32, stored: &[u8]) {
        let start = (block as usize * HALF_BYTES).min(self.bytes.len());
        let end = (start + HALF_BYTES).min(self.bytes.len());
        let len = end - start;
        self.bytes[start..end].copy_from_slice(&stored[..len]);
    }

    pub fn count_ones(&self) -> u64 {
        self.bytes.iter().map(|b| u64::from(b.count_ones())).sum()
    }
}

/// The block holding a region's bits.
pub fn block_of(region: u64) -> u32 {
    u32::try_from(region / REGIONS_PER_BLOCK).expect("bitmap block index fits u32")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trip_and_damage() {
        let mut written = Bits::new(20_000);
        let mut dirty = Bits::new(20_000);
        written.set(3, true);
        written.set(16_300, true);
        dirty.set(16_255, true);
        let image = encode_block(7, 1, 42, written.block_bytes(1), dirty.block_bytes(1));
        let decoded = decode_block(&image, 7, 1).unwrap();
        assert_eq!(decoded.sequence, 42);
        let mut loaded = Bits::new(20_000);
        loaded.load_block(1, &decoded.written);
        assert!(
            loaded.get(16_300) && !loaded.get(3),
            "block 1 holds regions 16256.."
        );
        assert_eq!(decode_block(&image, 8, 1), Err(BlockError::Foreign));
        assert_eq!(decode_block(&image, 7, 0), Err(BlockError::Foreign));
        let mut torn = image.clone();
        torn[2000] ^= 1;
        assert_eq!(decode_block(&torn, 7, 1), Err(BlockError::Checksum));
    }

    #[test]
    fn sizes() {
        assert_eq!(REGIONS_PER_BLOCK, 16_256);
        assert_eq!(slot_bytes_for(1), 4096);
        assert_eq!(slot_bytes_for(16_256), 4096);
        assert_eq!(slot_bytes_for(16_257), 8192);
        assert_eq!(block_of(16_256), 1);
    }
}
