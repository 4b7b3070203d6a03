//! Buffers set aside for metadata writes.
//!
//! A superblock or bitmap write must never wait for data I/O to free buffer space: updates
//! wait for the superblock write that records a member failure, and the bitmap gates writes to
//! clean regions, so data ops holding the pool while they wait for metadata would never let go.
//! A budget on used bytes cannot promise this (the buddy allocator fragments), so the buffers
//! are allocated once, when the pool is empty, and handed back after each write.
//!
//! A journal batch is the same case: stripe updates hold their buffers until their entries
//! are durable, so a batch that could only come from the pool might wait for them forever
//! (simulator seed 15091: six updates held the pool and a one-entry batch found no block).
//! One batch of the largest entry an update makes is set aside; the journal takes it only
//! when the pool has no room.

use crate::bitmap;
use crate::superblock::SUPERBLOCK_BYTES;
use tessera_buffer::{BufferId, BufferPool, BufferSlice};

/// Bitmap block writes that may be in flight at once; more wait for a buffer, not for data.
const BITMAP_WRITE_BUFFERS: usize = 4;

pub(crate) struct MetadataBuffers {
    /// One per member slot: a superblock write writes one copy to each metadata member.
    superblock: Vec<BufferId>,
    bitmap: Vec<BufferId>,
    /// The journal's batch of last resort: `None` while a batch uses it.
    journal_batch: Option<BufferId>,
    /// Its size; 0 when the group has no journal or the pool had no room for it.
    journal_batch_bytes: usize,
}

impl MetadataBuffers {
    /// Takes the reserve from a pool that has room for it (a new engine's pool), with a
    /// journal batch of `journal_batch_bytes` (0 for none). A pool too small for that batch
    /// goes without it (the journal then depends on the pool alone, as before).
    pub(crate) fn new(
        pool: &mut BufferPool,
        member_slots: usize,
        journal_batch_bytes: usize,
    ) -> MetadataBuffers {
        let mut reserve = MetadataBuffers {
            superblock: Vec::new(),
            bitmap: Vec::new(),
            journal_batch: None,
            journal_batch_bytes: 0,
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
        if journal_batch_bytes > 0
            && let Some(buffer) = pool.alloc(journal_batch_bytes)
        {
            reserve.journal_batch = Some(buffer);
            reserve.journal_batch_bytes = journal_batch_bytes;
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

    /// The journal's reserved batch, `len_bytes` of it, if it is free and that large.
    pub(crate) fn take_journal_batch(&mut self, len_bytes: usize) -> Option<BufferSlice> {
        if len_bytes > self.journal_batch_bytes {
            return None;
        }
        let buffer = self.journal_batch.take()?;
        Some(BufferSlice::new(buffer, 0, len_bytes))
    }

    pub(crate) fn give_journal_batch(&mut self, buffer: BufferId) {
        assert!(self.journal_batch.is_none(), "one reserved journal batch");
        self.journal_batch = Some(buffer);
    }

    /// How large a batch the reserve holds (0: none), whether or not it is in use now.
    pub(crate) fn journal_batch_bytes(&self) -> usize {
        self.journal_batch_bytes
    }
}
