//! Several disjoint borrows of one pool at once.

use crate::{BufferPool, BufferSlice};
use std::marker::PhantomData;

/// At most this many slices may be borrowed through one `Access` (a stripe of 32 members plus
/// a few scratch buffers).
const MAX_BORROWS: usize = 96;

/// Hands out slices of the arena, checking at run time that no writable slice overlaps any
/// other borrowed slice. Obtained from `BufferPool::access`; the exclusive borrow of the pool
/// keeps allocation and freeing out while it lives.
pub struct Access<'a> {
    pool: &'a BufferPool,
    borrowed: [(usize, usize, bool); MAX_BORROWS],
    count: usize,
    _exclusive: PhantomData<&'a mut BufferPool>,
}

impl<'a> Access<'a> {
    pub(crate) fn new(pool: &'a mut BufferPool) -> Access<'a> {
        Access {
            pool,
            borrowed: [(0, 0, false); MAX_BORROWS],
            count: 0,
            _exclusive: PhantomData,
        }
    }

    /// Read-only bytes of a slice.
    pub fn get(&mut self, slice: BufferSlice) -> &'a [u8] {
        let (start, len) = self.claim(slice, false);
        // SAFETY: `claim` verified the range lies in a live buffer and overlaps no writable
        // borrow; the pool is exclusively borrowed for 'a, so nothing else touches the arena.
        unsafe { std::slice::from_raw_parts(self.pool.base.as_ptr().add(start), len) }
    }

    /// Writable bytes of a slice.
    pub fn get_mut(&mut self, slice: BufferSlice) -> &'a mut [u8] {
        let (start, len) = self.claim(slice, true);
        // SAFETY: `claim` verified the range lies in a live buffer and overlaps no other borrow
        // at all; the pool is exclusively borrowed for 'a.
        unsafe { std::slice::from_raw_parts_mut(self.pool.base.as_ptr().add(start), len) }
    }

    /// Copies a slice's bytes into `destination` without keeping a borrow, so that any number
    /// of slices can be copied through one `Access` (a journal batch gathers a payload of every
    /// write of every entry). The slice must overlap no writable borrow, which `destination`
    /// may be part of.
    pub fn copy_into(&self, slice: BufferSlice, destination: &mut [u8]) {
        let (start, len) = self.pool.range(slice);
        self.check_aliasing(slice, start, start + len, false);
        assert_eq!(destination.len(), len, "a copy fills its destination");
        // SAFETY: `range` verified the slice lies in a live buffer; it overlaps no writable
        // borrow (checked above), and the pool is exclusively borrowed for 'a, so nothing else
        // writes it; `destination` is a distinct &mut, so it cannot alias a shared read.
        let source = unsafe { std::slice::from_raw_parts(self.pool.base.as_ptr().add(start), len) };
        destination.copy_from_slice(source);
    }

    /// Panics if arena bytes `start..end` (of `slice`) overlap a borrow while either is
    /// writable.
    fn check_aliasing(&self, slice: BufferSlice, start: usize, end: usize, writable: bool) {
        for &(other_start, other_end, other_writable) in &self.borrowed[..self.count] {
            let overlaps = start < other_end && other_start < end;
            assert!(
                !(overlaps && (writable || other_writable)),
                "aliasing borrow of the buffer arena: {slice:?}"
            );
        }
    }

    fn claim(&mut self, slice: BufferSlice, writable: bool) -> (usize, usize) {
        let (start, len) = self.pool.range(slice);
        let end = start + len;
        if len > 0 {
            self.check_aliasing(slice, start, end, writable);
            assert!(
                self.count < MAX_BORROWS,
                "too many simultaneous buffer borrows"
            );
            self.borrowed[self.count] = (start, end, writable);
            self.count += 1;
        }
        (start, len)
    }
}

#[cfg(test)]
mod tests {
    use crate::{BufferPool, BufferSlice};

    #[test]
    fn copies_keep_no_borrow() {
        let mut pool = BufferPool::new(4 << 20);
        let source = pool.alloc(4096).unwrap();
        let target = pool.alloc(4096 * 128).unwrap();
        for (index, byte) in pool.slice_mut(source).iter_mut().enumerate() {
            *byte = (index % 251) as u8;
        }
        let expected: Vec<u8> = (0..4096).map(|index| (index % 251) as u8).collect();
        let mut access = pool.access();
        let out = access.get_mut(BufferSlice::new(target, 0, 4096 * 128));
        // More copies than `get` may hold borrows at once (128 against 96).
        for chunk in out.chunks_mut(4096) {
            access.copy_into(BufferSlice::new(source, 0, 4096), chunk);
        }
        assert!(out.chunks(4096).all(|chunk| chunk == &expected[..]));
    }

    #[test]
    #[should_panic(expected = "aliasing borrow")]
    fn a_copy_from_a_writable_borrow_is_refused() {
        let mut pool = BufferPool::new(1 << 20);
        let a = pool.alloc(8192).unwrap();
        let mut access = pool.access();
        let _write = access.get_mut(BufferSlice::new(a, 0, 8192));
        let mut elsewhere = [0u8; 4096];
        access.copy_into(BufferSlice::new(a, 4096, 4096), &mut elsewhere);
    }

    #[test]
    fn disjoint_reads_and_writes_coexist() {
        let mut pool = BufferPool::new(1 << 20);
        let a = pool.alloc(8192).unwrap();
        pool.slice_mut(a).fill(7);
        let mut access = pool.access();
        let read = access.get(BufferSlice::new(a, 0, 4096));
        let read_again = access.get(BufferSlice::new(a, 0, 4096));
        let write = access.get_mut(BufferSlice::new(a, 4096, 4096));
        write.copy_from_slice(read);
        assert_eq!(read_again[0], 7);
        assert!(pool.slice(a).iter().all(|&x| x == 7));
    }

    #[test]
    #[should_panic(expected = "aliasing borrow")]
    fn overlapping_write_is_refused() {
        let mut pool = BufferPool::new(1 << 20);
        let a = pool.alloc(8192).unwrap();
        let mut access = pool.access();
        let _read = access.get(BufferSlice::new(a, 0, 4096));
        let _write = access.get_mut(BufferSlice::new(a, 4095, 2));
    }
}
