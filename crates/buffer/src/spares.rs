//! Byte vectors outside the arena (reply headers, a thin drive's block data) given back after
//! use and handed out again, so that a warm data path allocates nothing for them.

/// A bounded list of empty vectors kept for reuse. Only vectors that hold memory and are no
/// larger than a limit are kept, and only up to a count, so what it keeps stays small.
#[derive(Debug)]
pub struct SpareVecs {
    vecs: Vec<Vec<u8>>,
    max_count: usize,
    max_capacity_bytes: usize,
}

impl SpareVecs {
    pub const fn new(max_count: usize, max_capacity_bytes: usize) -> SpareVecs {
        SpareVecs {
            vecs: Vec::new(),
            max_count,
            max_capacity_bytes,
        }
    }

    /// An empty vector: a kept one if there is one, else a new one (no memory yet).
    pub fn take(&mut self) -> Vec<u8> {
        self.vecs.pop().unwrap_or_default()
    }

    /// Keeps `vec`, emptied, for a later `take`; drops it if it holds no memory, is larger
    /// than the limit, or enough are kept already.
    pub fn give(&mut self, mut vec: Vec<u8>) {
        if vec.capacity() > 0
            && vec.capacity() <= self.max_capacity_bytes
            && self.vecs.len() < self.max_count
        {
            vec.clear();
            self.vecs.push(vec);
        }
    }

    /// How many vectors are kept.
    pub fn len(&self) -> usize {
        self.vecs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vecs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::SpareVecs;

    #[test]
    fn gives_back_the_memory_it_was_given_empty() {
        let mut spares = SpareVecs::new(2, 1024);
        let mut vec = Vec::with_capacity(100);
        vec.extend_from_slice(b"reply");
        let pointer = vec.as_ptr();
        spares.give(vec);
        let again = spares.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), pointer, "the same allocation");
        assert!(again.capacity() >= 100);
        assert_eq!(
            spares.take().capacity(),
            0,
            "none kept: a new, unallocated one"
        );
    }

    #[test]
    fn keeps_only_small_allocated_vectors_up_to_the_count() {
        let mut spares = SpareVecs::new(2, 1024);
        spares.give(Vec::new());
        spares.give(Vec::with_capacity(4096));
        assert!(
            spares.is_empty(),
            "unallocated and oversized vectors are dropped"
        );
        for _ in 0..3 {
            spares.give(Vec::with_capacity(16));
        }
        assert_eq!(spares.len(), 2);
    }
}
