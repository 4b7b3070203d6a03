//! The I/O buffer arena.
//!
//! Every byte that moves between a host and a member passes through one `BufferPool`: a single
//! 4 KiB-aligned allocation made up front (so it can be registered with io_uring once and
//! satisfies O_DIRECT alignment), carved into power-of-two blocks of pages by a buddy allocator.
//! Buffers are named by `BufferId`s (index + generation, so a stale id is caught), and I/O
//! commands carry `BufferSlice`s: plain data that a simulator can resolve to bytes and a real
//! I/O layer can resolve to a pointer.
//!
//! The pool never frees a buffer on its own: its owner frees a buffer only when no I/O on it is
//! in flight. That ownership rule is what makes handing raw pointers to the kernel sound.

mod access;
mod buddy;
mod spares;

pub use access::Access;
pub use spares::SpareVecs;

use buddy::Buddy;
use std::alloc::Layout;
use std::ptr::NonNull;

/// The unit of allocation and the alignment of every buffer.
pub const PAGE_BYTES: usize = 4096;

/// Names one live buffer of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId {
    index: u32,
    generation: u32,
}

/// A byte range of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferSlice {
    pub buffer: BufferId,
    pub offset_bytes: u32,
    pub len_bytes: u32,
}

impl BufferSlice {
    /// The range `offset_bytes .. offset_bytes + len_bytes` of `buffer`.
    pub fn new(buffer: BufferId, offset_bytes: usize, len_bytes: usize) -> BufferSlice {
        BufferSlice {
            buffer,
            offset_bytes: u32::try_from(offset_bytes).expect("buffer offset fits u32"),
            len_bytes: u32::try_from(len_bytes).expect("buffer length fits u32"),
        }
    }

    /// A sub-range of this slice, relative to its start.
    pub fn sub(self, offset_bytes: usize, len_bytes: usize) -> BufferSlice {
        assert!(offset_bytes + len_bytes <= self.len_bytes as usize);
        BufferSlice::new(
            self.buffer,
            self.offset_bytes as usize + offset_bytes,
            len_bytes,
        )
    }

    pub fn len(self) -> usize {
        self.len_bytes as usize
    }

    pub fn is_empty(self) -> bool {
        self.len_bytes == 0
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u32,
    /// First page of the block, or `None` when the slot is free.
    page: Option<u32>,
    order: u8,
    len_bytes: u32,
}

/// A fixed arena of I/O buffers. See the crate documentation.
pub struct BufferPool {
    base: NonNull<u8>,
    layout: Layout,
    buddy: Buddy,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    used_bytes: usize,
}

// SAFETY: the pool owns its arena exclusively; the raw base pointer is only dereferenced through
// `&self`/`&mut self` methods, so moving the pool to another thread moves that ownership with it.
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// An arena of `capacity_bytes` (rounded up to whole pages, at least one page).
    pub fn new(capacity_bytes: usize) -> BufferPool {
        let pages = capacity_bytes.div_ceil(PAGE_BYTES).max(1);
        let pages_u32 = u32::try_from(pages).expect("buffer pool page count fits u32");
        let layout = Layout::from_size_align(pages * PAGE_BYTES, PAGE_BYTES)
            .expect("buffer pool layout is valid");
        // SAFETY: the layout has a non-zero size. Zeroed memory means a buffer handed out before
        // it is written reads as zeroes, never as leftovers from another process.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        BufferPool {
            base,
            layout,
            buddy: Buddy::new(pages_u32),
            slots: Vec::new(),
            free_slots: Vec::new(),
            used_bytes: 0,
        }
    }

    /// Size of the arena in bytes.
    pub fn capacity_bytes(&self) -> usize {
        self.layout.size()
    }

    /// Bytes currently handed out (whole blocks, so rounded up to powers of two pages).
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// The largest single buffer this pool can ever hold.
    pub fn max_buffer_bytes(&self) -> usize {
        (1usize << self.buddy.max_order()) * PAGE_BYTES
    }

    /// A buffer of at least `len_bytes` (its length is exactly `len_bytes`), or `None` when the
    /// arena has no free block that large right now. Contents are unspecified.
    pub fn alloc(&mut self, len_bytes: usize) -> Option<BufferId> {
        let pages = len_bytes.div_ceil(PAGE_BYTES).max(1);
        let order = pages.next_power_of_two().trailing_zeros();
        let page = self.buddy.alloc(order)?;
        self.used_bytes += (1usize << order) * PAGE_BYTES;
        let len_bytes = u32::try_from(len_bytes).expect("buffer length fits u32");
        let index = match self.free_slots.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    page: None,
                    order: 0,
                    len_bytes: 0,
                });
                u32::try_from(self.slots.len() - 1).expect("slot count fits u32")
            }
        };
        let slot = &mut self.slots[index as usize];
        assert!(slot.page.is_none());
        slot.page = Some(page);
        slot.order = u8::try_from(order).expect("order fits u8");
        slot.len_bytes = len_bytes;
        Some(BufferId {
            index,
            generation: slot.generation,
        })
    }

    /// Like `alloc`, with the contents set to zero.
    pub fn alloc_zeroed(&mut self, len_bytes: usize) -> Option<BufferId> {
        let id = self.alloc(len_bytes)?;
        self.slice_mut(id).fill(0);
        Some(id)
    }

    /// Returns a buffer to the arena. The caller guarantees no I/O on it is in flight.
    pub fn free(&mut self, id: BufferId) {
        let slot = self.slot_mut(id);
        let page = slot.page.take().expect("freeing a live buffer");
        let order = u32::from(slot.order);
        slot.generation = slot.generation.wrapping_add(1);
        self.buddy.free(page, order);
        self.used_bytes -= (1usize << order) * PAGE_BYTES;
        self.free_slots.push(id.index);
    }

    /// Length of a live buffer, as requested at allocation.
    pub fn len(&self, id: BufferId) -> usize {
        self.slot(id).len_bytes as usize
    }

    /// Number of live buffers.
    pub fn live_buffers(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// The whole of a live buffer as a slice descriptor.
    pub fn full(&self, id: BufferId) -> BufferSlice {
        BufferSlice::new(id, 0, self.len(id))
    }

    /// The bytes of a whole buffer.
    pub fn slice(&self, id: BufferId) -> &[u8] {
        self.bytes(self.full(id))
    }

    /// The bytes of a whole buffer, writable.
    pub fn slice_mut(&mut self, id: BufferId) -> &mut [u8] {
        let full = self.full(id);
        self.bytes_mut(full)
    }

    /// The bytes a slice names.
    pub fn bytes(&self, slice: BufferSlice) -> &[u8] {
        let (start, len) = self.range(slice);
        // SAFETY: `range` checked that the bytes lie inside a live block of the arena; `&self`
        // excludes any `&mut` access to the arena for the lifetime of the returned slice.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(start), len) }
    }

    /// The bytes a slice names, writable.
    pub fn bytes_mut(&mut self, slice: BufferSlice) -> &mut [u8] {
        let (start, len) = self.range(slice);
        // SAFETY: as in `bytes`; `&mut self` makes this the only access to the arena.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(start), len) }
    }

    /// Simultaneous access to several disjoint slices, some of them writable (parity
    /// computation reads the data chunks and writes P and Q in one call).
    pub fn access(&mut self) -> Access<'_> {
        Access::new(self)
    }

    /// Raw address of a slice, for handing to the kernel. Dereferencing it is only sound while
    /// the buffer stays live and nothing else accesses those bytes.
    pub fn as_mut_ptr(&self, slice: BufferSlice) -> *mut u8 {
        let (start, _) = self.range(slice);
        // SAFETY: `range` checked that `start` lies inside the arena allocation.
        unsafe { self.base.as_ptr().add(start) }
    }

    /// The whole arena (address and length), for registering it with io_uring as one buffer.
    pub fn arena(&self) -> (*mut u8, usize) {
        (self.base.as_ptr(), self.layout.size())
    }

    /// Byte offset of a slice from the start of the arena.
    pub fn arena_offset(&self, slice: BufferSlice) -> usize {
        self.range(slice).0
    }

    fn slot(&self, id: BufferId) -> &Slot {
        let slot = &self.slots[id.index as usize];
        assert_eq!(slot.generation, id.generation, "stale buffer id {id:?}");
        assert!(slot.page.is_some(), "buffer {id:?} is not live");
        slot
    }

    fn slot_mut(&mut self, id: BufferId) -> &mut Slot {
        let slot = &mut self.slots[id.index as usize];
        assert_eq!(slot.generation, id.generation, "stale buffer id {id:?}");
        slot
    }

    /// Arena byte range of a slice, checked against its buffer.
    fn range(&self, slice: BufferSlice) -> (usize, usize) {
        let slot = self.slot(slice.buffer);
        let end = slice.offset_bytes as u64 + u64::from(slice.len_bytes);
        assert!(
            end <= u64::from(slot.len_bytes),
            "slice {slice:?} beyond its buffer"
        );
        let page = slot.page.expect("live buffer has a page") as usize;
        (
            page * PAGE_BYTES + slice.offset_bytes as usize,
            slice.len_bytes as usize,
        )
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("capacity_bytes", &self.capacity_bytes())
            .field("used_bytes", &self.used_bytes)
            .field("live_buffers", &self.live_buffers())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_disjoint_and_reused() {
        let mut pool = BufferPool::new(64 * PAGE_BYTES);
        let a = pool.alloc(100).unwrap();
        let b = pool.alloc(3 * PAGE_BYTES).unwrap();
        assert_eq!(pool.len(a), 100);
        assert_eq!(pool.used_bytes(), PAGE_BYTES + 4 * PAGE_BYTES);
        for id in [a, b] {
            assert_eq!(pool.as_mut_ptr(pool.full(id)) as usize % PAGE_BYTES, 0);
        }
        pool.slice_mut(a).fill(0xaa);
        pool.slice_mut(b).fill(0xbb);
        assert!(pool.slice(a).iter().all(|&x| x == 0xaa));
        assert!(pool.slice(b).iter().all(|&x| x == 0xbb));
        pool.free(a);
        pool.free(b);
        assert_eq!(pool.used_bytes(), 0);
        let whole = pool
            .alloc(64 * PAGE_BYTES)
            .expect("frees merge back into one block");
        pool.free(whole);
    }

    #[test]
    fn exhaustion_is_reported_not_fatal() {
        let mut pool = BufferPool::new(4 * PAGE_BYTES);
        let a = pool.alloc(4 * PAGE_BYTES).unwrap();
        assert!(pool.alloc(1).is_none());
        pool.free(a);
        assert!(pool.alloc(1).is_some());
    }

    #[test]
    #[should_panic(expected = "stale buffer id")]
    fn stale_ids_are_caught() {
        let mut pool = BufferPool::new(4 * PAGE_BYTES);
        let a = pool.alloc(1).unwrap();
        pool.free(a);
        let _b = pool.alloc(1).unwrap();
        let _ = pool.len(a);
    }

    #[test]
    fn non_power_of_two_capacity_is_fully_usable() {
        let mut pool = BufferPool::new(7 * PAGE_BYTES);
        let ids: Vec<_> = (0..7).map(|_| pool.alloc(PAGE_BYTES).unwrap()).collect();
        assert!(pool.alloc(1).is_none());
        for id in ids {
            pool.free(id);
        }
        assert_eq!(pool.used_bytes(), 0);
    }

    proptest::proptest! {
        /// Random alloc/free sequences never hand out overlapping blocks and always merge back.
        #[test]
        fn random_alloc_free_keeps_blocks_disjoint(ops in proptest::collection::vec((0usize..70_000, proptest::bool::ANY), 1..200)) {
            let mut pool = BufferPool::new(256 * PAGE_BYTES);
            let mut live: Vec<BufferId> = Vec::new();
            for (len, free_one) in ops {
                if free_one && !live.is_empty() {
                    let id = live.swap_remove(len % live.len());
                    pool.free(id);
                } else if let Some(id) = pool.alloc(len) {
                    live.push(id);
                }
                let mut ranges: Vec<(usize, usize)> = live.iter().map(|&id| {
                    let slice = pool.full(id);
                    let start = pool.arena_offset(slice);
                    (start, start + len_rounded(pool.len(id)))
                }).collect();
                ranges.sort();
                for pair in ranges.windows(2) {
                    proptest::prop_assert!(pair[0].1 <= pair[1].0, "overlap {:?}", pair);
                }
            }
            for id in live {
                pool.free(id);
            }
            proptest::prop_assert_eq!(pool.used_bytes(), 0);
            proptest::prop_assert!(pool.alloc(256 * PAGE_BYTES).is_some());
        }
    }

    fn len_rounded(len: usize) -> usize {
        len.div_ceil(PAGE_BYTES).max(1).next_power_of_two() * PAGE_BYTES
    }
}
