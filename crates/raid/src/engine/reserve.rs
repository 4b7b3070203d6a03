//! Buffers set aside for metadata writes.
//!
//! A superblock or bitmap write must never wait for data I/O to free buffer space: updates
//! wait for the superblock write that records a member failure, and the bitmap gates writes to
//! clean regions, so data ops holding the pool while they wait for metadata would never let go.
//! A budget on used bytes cannot promise this (the buddy allocator fragments), so the buffers
//! are allocated once, when the pool is empty, and handed back after each write.

use crate::bitmap;
use crate::superblock::SUPERBLOCK_BYTES;
use tessera_buffer::{BufferId, BufferPool};

/// Bitmap block writes that may be in flight at once; more wait for a buffer, not for data.
const BITMAP_WRITE_BUFFERS: usize = 4;

pub(crate) struct MetadataBuffers {
    /// One per member slot: a superblock write writes one copy to each metadata member.
    superblock: Vec<BufferId>,
    bitmap: Vec<BufferId>,
}

impl MetadataBuffers {
    /// Takes the reserve from a pool that has room for it (a new engine's pool).
    pub(crate) fn new(pool: &mut BufferPool, member_slots: usize) -> MetadataBuffers {
        let mut reserve = MetadataBuffers {
            superblock: Vec::new(),
            bitmap: Vec::new(),
        };
        for _ in 0..member_slots {
            assert!(
                reserve.add_member_slot(pool),
                "superblock buffers fit the new pool"
            );
        }
        for _ in 0..BITMAP_WRITE_BUFFERS {
            let buffer = pool
                .alloc(bitmap::BLOCK_BYTES)
                .expect("bitmap buffers fit the new pool");
            reserve.bitmap.push(buffer);
        }
        reserve
    }

    /// One more superblock buffer, for a member added to the group. False when the pool has
    /// no room for it right now.
    pub(crate) fn add_member_slot(&mut self, pool: &mut BufferPool) -> bool {
        match pool.alloc(SUPERBLOCK_BYTES) {
            Some(buffer) => {
                self.superblock.push(buffer);
                true
            }
            None => false,
        }
    }

    /// A buffer for one superblock copy. The reserve holds one per member slot and a write
    /// targets each member at most once, so it never runs out.
    pub(crate) fn take_superblock(&mut self) -> BufferId {
        self.superblock
            .pop()
            .expect("one superblock buffer per member slot")
    }

    pub(crate) fn give_superblock(&mut self, buffer: BufferId) {
        self.superblock.push(buffer);
    }

    /// A buffer for one bitmap block write, or `None` while all are in flight.
    pub(crate) fn take_bitmap(&mut self) -> Option<BufferId> {
        self.bitmap.pop()
    }

    pub(crate) fn give_bitmap(&mut self, buffer: BufferId) {
        self.bitmap.push(buffer);
    }
}
