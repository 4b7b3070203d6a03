//! The block map: logical block -> location, 12 bytes per mapped block, in pages allocated
//! on first use and freed when empty, so memory follows the data written, not the logical size.

use crate::format::Location;

const PAGE_SLOTS: usize = 1024;

struct Page {
    slots: Box<[[u32; 3]; PAGE_SLOTS]>,
    mapped: u32,
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
        Location::unpack(page.slots[lba as usize % PAGE_SLOTS])
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
                slots: Box::new([[0; 3]; PAGE_SLOTS]),
                mapped: 0,
            });
        }
        let page = entry.as_mut().expect("page present");
        let old = Location::unpack(page.slots[within]);
        page.slots[within] = location.map_or([0; 3], |l| l.pack());
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
                page.slots.iter().enumerate().filter_map(move |(i, slot)| {
                    Some(((index * PAGE_SLOTS + i) as u64, Location::unpack(*slot)?))
                })
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
        pages * (PAGE_SLOTS as u64 * 12 + 16) + self.pages.len() as u64 * 24
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
}
