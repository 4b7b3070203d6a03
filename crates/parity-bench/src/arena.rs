//! The benchmark's memory: one large, page-aligned, pre-faulted allocation, carved into stripe
//! sets (every buffer one call needs). A cache-resident measurement reuses set 0; a DRAM
//! measurement walks through as many sets as fit, so every call reads memory that left the
//! caches long ago.

/// Alignment of the arena and of every buffer in it (chunk sizes are multiples of it).
pub const ALIGNMENT_BYTES: usize = 4096;

/// A page-aligned byte arena, filled with pseudo-random bytes.
pub struct Arena {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Arena {
    pub fn new(len: usize, seed: u64) -> Arena {
        let mut storage = vec![0u8; len + ALIGNMENT_BYTES];
        let start =
            (ALIGNMENT_BYTES - storage.as_ptr() as usize % ALIGNMENT_BYTES) % ALIGNMENT_BYTES;
        // One random page repeated: every page is written (faulted in) and the contents are not
        // trivially zero, at memcpy speed.
        let mut page = [0u8; ALIGNMENT_BYTES];
        let mut state = seed;
        for chunk in page.chunks_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        for (i, destination) in storage[start..start + len]
            .chunks_mut(ALIGNMENT_BYTES)
            .enumerate()
        {
            destination.copy_from_slice(&page[..destination.len()]);
            // Vary pages a little so that no two chunks are identical.
            destination[0] = i as u8;
            destination[1] = (i >> 8) as u8;
        }
        Arena {
            storage,
            start,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// The buffers of one stripe set, as disjoint slices of the arena: `buffers` chunks of
/// `chunk_bytes` each.
pub struct StripeSet<'a> {
    pub buffers: Vec<&'a mut [u8]>,
}

/// Splits the first `sets * buffers * chunk_bytes` bytes of `bytes` into stripe sets.
pub fn stripe_sets(
    bytes: &mut [u8],
    sets: usize,
    buffers: usize,
    chunk_bytes: usize,
) -> Vec<StripeSet<'_>> {
    assert!(
        chunk_bytes.is_multiple_of(64),
        "chunks stay 64-byte aligned"
    );
    let needed = sets * buffers * chunk_bytes;
    assert!(
        needed <= bytes.len(),
        "arena too small: {needed} > {}",
        bytes.len()
    );
    bytes[..needed]
        .chunks_mut(buffers * chunk_bytes)
        .map(|set| StripeSet {
            buffers: set.chunks_mut(chunk_bytes).collect(),
        })
        .collect()
}
