//! A slab of entries named by index + generation, so a stale id is caught rather than aliased.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    pub(crate) fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    pub(crate) fn from_u64(raw: u64) -> Key {
        Key {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

pub(crate) struct Slab<T> {
    entries: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Slab<T> {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.live += 1;
        match self.free.pop() {
            Some(index) => {
                let entry = &mut self.entries[index as usize];
                assert!(entry.1.is_none());
                entry.1 = Some(value);
                Key {
                    index,
                    generation: entry.0,
                }
            }
            None => {
                self.entries.push((0, Some(value)));
                let index = u32::try_from(self.entries.len() - 1).expect("slab index fits u32");
                Key {
                    index,
                    generation: 0,
                }
            }
        }
    }

    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        let entry = self.entries.get(key.index as usize)?;
        if entry.0 != key.generation {
            return None;
        }
        entry.1.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.0 != key.generation {
            return None;
        }
        entry.1.as_mut()
    }

    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.0 != key.generation {
            return None;
        }
        let value = entry.1.take()?;
        entry.0 = entry.0.wrapping_add(1);
        self.free.push(key.index);
        self.live -= 1;
        Some(value)
    }

    /// Takes the value out while keeping its key valid; `put_back` returns it. Lookups of the
    /// key miss in between.
    pub(crate) fn take(&mut self, key: Key) -> Option<T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.0 != key.generation {
            return None;
        }
        entry.1.take()
    }

    pub(crate) fn put_back(&mut self, key: Key, value: T) {
        let entry = &mut self.entries[key.index as usize];
        assert_eq!(entry.0, key.generation);
        assert!(entry.1.is_none());
        entry.1 = Some(value);
    }

    /// Retires a key whose value was taken.
    pub(crate) fn retire(&mut self, key: Key) {
        let entry = &mut self.entries[key.index as usize];
        assert_eq!(entry.0, key.generation);
        assert!(entry.1.is_none());
        entry.0 = entry.0.wrapping_add(1);
        self.free.push(key.index);
        self.live -= 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Keys of every live entry (taken ones excluded), in index order.
    pub(crate) fn keys(&self) -> Vec<Key> {
        self.iter().map(|(key, _)| key).collect()
    }

    /// Every live entry (taken ones excluded) with its key, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, (generation, value))| {
                let key = Key {
                    index: index as u32,
                    generation: *generation,
                };
                value.as_ref().map(|value| (key, value))
            })
    }

    /// Every live entry (taken ones excluded) with its key, in index order, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (Key, &mut T)> {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(index, (generation, value))| {
                let key = Key {
                    index: index as u32,
                    generation: *generation,
                };
                value.as_mut().map(|value| (key, value))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut slab = Slab::new();
        let a = slab.insert(1);
        assert_eq!(slab.remove(a), Some(1));
        let b = slab.insert(2);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.get(b), Some(&2));
        assert_eq!(Key::from_u64(b.to_u64()), b);
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn iteration_skips_removed_and_taken_entries() {
        let mut slab = Slab::new();
        let a = slab.insert(10);
        let b = slab.insert(20);
        let c = slab.insert(30);
        slab.remove(a);
        let taken = slab.take(c).expect("live");
        assert_eq!(slab.iter().collect::<Vec<_>>(), vec![(b, &20)]);
        for (_, value) in slab.iter_mut() {
            *value += 1;
        }
        slab.put_back(c, taken);
        assert_eq!(slab.keys(), vec![b, c]);
        assert_eq!(slab.get(b), Some(&21));
    }
}
