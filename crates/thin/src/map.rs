//! The block map: logical block -> location, 91 bits per block (11.4 bytes) packed in pages
//! allocated on first use and freed when empty, so memory follows the data written, not the
//! logical size.

use crate::format::Location;

const PAGE_SLOTS: usize = 1024;

/// A slot: `Location::pack`'s 59-bit word, then the 32-bit checksum.
const SLOT_BITS: usize = 91;

const PAGE_WORDS: usize = PAGE_SLOTS * SLOT_BITS / 64;

struct Page {
    words: Box<[u64; PAGE_WORDS]>,
    mapped: u32,
}

impl Page {
    fn slot(&self, index: usize) -> Option<Location> {
        let bit = index * SLOT_BITS;
        let (word, shift) = (bit / 64, bit % 64);
        let mut value =
            (u128::from(self.words[word]) | u128::from(self.words[word + 1]) << 64) >> shift;
        if shift + SLOT_BITS > 128 {
            value |= u128::from(self.words[word + 2]) << (128 - shift);
        }
        let value = value & ((1 << SLOT_BITS) - 1);
        Location::unpack([
            value as u32,
            (value >> 32) as u32 & ((1 << 27) - 1),
            (value >> 59) as u32,
        ])
    }

    fn set_slot(&mut self, index: usize, location: Option<Location>) {
        let value = location.map_or(0, |location| {
            let [low, high, checksum] = location.pack();
            assert!(high < 1 << 27, "a packed location takes 59 bits");
            u128::from(low) | u128::from(high) << 32 | u128::from(checksum) << 59
        });
        let bit = index * SLOT_BITS;
        let (word, shift) = (bit / 64, bit % 64);
        let mask = ((1u128 << SLOT_BITS) - 1) << shift;
        let pair = (u128::from(self.words[word]) | u128::from(self.words[word + 1]) << 64) & !mask
            | value << shift;
        self.words[word] = pair as u64;
        self.words[word + 1] = (pair >> 64) as u64;
        if shift + SLOT_BITS > 128 {
            let spill = 128 - shift;
            let high_mask = (1u64 << (SLOT_BITS - spill)) - 1;
            self.words[word + 2] = self.words[word + 2] & !high_mask | (value >> spill) as u64;
        }
    }
}

pub struct BlockMap {
    pages: Vec<Option<Page>>,
    blocks: u64,
    mapped: u64,
}

impl BlockMap {
    pub fn new(blocks: u64) -> BlockMap {
        let pages = blocks.div_ceil(PAGE_SLOTS as u64) as usize;
        BlockMap {
            pages: (0..pages).map(|_| None).collect(),
            blocks,
            mapped: 0,
        }
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Blocks that hold data.
    pub fn mapped(&self) -> u64 {
        self.mapped
    }

    pub fn get(&self, lba: u64) -> Option<Location> {
        assert!(lba < self.blocks, "block {lba} beyond the map");
        let page = self.pages[lba as usize / PAGE_SLOTS].as_ref()?;
        page.slot(lba as usize % PAGE_SLOTS)
    }

    /// Sets (or with `None` clears) a block's location; returns the old one.
    pub fn set(&mut self, lba: u64, location: Option<Location>) -> Option<Location> {
        assert!(lba < self.blocks, "block {lba} beyond the map");
        let index = lba as usize / PAGE_SLOTS;
        let within = lba as usize % PAGE_SLOTS;
        let entry = &mut self.pages[index];
        if entry.is_none() {
            location?;
            *entry = Some(Page {
                words: Box::new([0; PAGE_WORDS]),
                mapped: 0,
            });
        }
        let page = entry.as_mut().expect("page present");
        let old = page.slot(within);
        page.set_slot(within, location);
        match (old.is_some(), location.is_some()) {
            (false, true) => {
                page.mapped += 1;
                self.mapped += 1;
            }
            (true, false) => {
                page.mapped -= 1;
                self.mapped -= 1;
                if page.mapped == 0 {
                    *entry = None;
                }
            }
            _ => {}
        }
        old
    }

    /// Every mapped block in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Location)> + '_ {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(index, page)| Some((index, page.as_ref()?)))
            .flat_map(|(index, page)| {
                (0..PAGE_SLOTS)
                    .filter_map(move |i| Some(((index * PAGE_SLOTS + i) as u64, page.slot(i)?)))
            })
    }

    /// Whether blocks `lba..` are mapped, and how many in a row share that state (at most
    /// `limit`).
    pub fn run(&self, lba: u64, limit: u64) -> (bool, u64) {
        let state = self.get(lba).is_some();
        let mut len = 1;
        while len < limit && lba + len < self.blocks {
            let next = lba + len;
            if (next as usize).is_multiple_of(PAGE_SLOTS)
                && self.pages[next as usize / PAGE_SLOTS].is_none()
            {
                if state {
                    break;
                }
                len = (len + PAGE_SLOTS as u64).min(limit).min(self.blocks - lba);
                continue;
            }
            if self.get(next).is_some() != state {
                break;
            }
            len += 1;
        }
        (state, len)
    }

    /// Bytes of memory the map holds.
    pub fn memory_bytes(&self) -> u64 {
        let pages = self.pages.iter().filter(|p| p.is_some()).count() as u64;
        pages * (PAGE_WORDS as u64 * 8 + 16) + self.pages.len() as u64 * 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;

    fn at(n: u64) -> Location {
        Location {
            address_bytes: n * 16,
            stored_len: 100,
            codec: Codec::Lz4,
            checksum: n as u32,
        }
    }

    #[test]
    fn set_get_iterate_and_free_pages() {
        let mut map = BlockMap::new(5000);
        assert_eq!(map.memory_bytes(), 5 * 24);
        assert_eq!(map.set(3, Some(at(1))), None);
        assert_eq!(map.set(3, Some(at(2))), Some(at(1)));
        map.set(4500, Some(at(3)));
        assert_eq!(map.mapped(), 2);
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            vec![(3, at(2)), (4500, at(3))]
        );
        assert_eq!(map.run(0, 100), (false, 3));
        assert_eq!(map.run(3, 100), (true, 1));
        assert_eq!(map.run(4, 5000), (false, 4496));
        assert_eq!(map.set(3, None), Some(at(2)));
        assert_eq!(map.set(4500, None), Some(at(3)));
        assert_eq!(map.mapped(), 0);
        assert_eq!(map.memory_bytes(), 5 * 24);
        assert_eq!(map.set(7, None), None);
    }

    /// Against a plain vector of locations, with slots that straddle two and three words and
    /// every field at its extremes, so a write that spills into a neighbour is caught.
    #[test]
    fn packed_slots_hold_every_location_and_leave_their_neighbours_alone() {
        let blocks = 3 * PAGE_SLOTS as u64 + 17;
        let mut map = BlockMap::new(blocks);
        let mut reference: Vec<Option<Location>> = vec![None; blocks as usize];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let codecs = [Codec::Raw, Codec::Lz4, Codec::Zstd];
        for round in 0..200_000u64 {
            let lba = next() % blocks;
            let location = match round % 5 {
                0 => None,
                1 => Some(Location {
                    address_bytes: ((1 << 44) - 1) * 16,
                    stored_len: (1 << 13) - 1,
                    codec: codecs[2],
                    checksum: u32::MAX,
                }),
                _ => Some(Location {
                    address_bytes: (next() % (1 << 44)) * 16,
                    stored_len: 1 + (next() % ((1 << 13) - 1)) as u32,
                    codec: codecs[(next() % 3) as usize],
                    checksum: next() as u32,
                }),
            };
            assert_eq!(map.set(lba, location), reference[lba as usize]);
            reference[lba as usize] = location;
            // The neighbours on both sides still read as they were.
            for near in lba.saturating_sub(2)..(lba + 3).min(blocks) {
                assert_eq!(map.get(near), reference[near as usize], "block {near}");
            }
        }
        let expected: Vec<(u64, Location)> = reference
            .iter()
            .enumerate()
            .filter_map(|(lba, l)| Some((lba as u64, (*l)?)))
            .collect();
        assert_eq!(map.iter().collect::<Vec<_>>(), expected);
        assert_eq!(map.mapped(), expected.len() as u64);
    }
}
