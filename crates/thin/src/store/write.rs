//! Host writes, trims, zeroing and flushes, applied in arrival order from the `blocked` queue.

use super::read::Purpose;
use super::{HostOp, MAX_RECORDS_IN_FLIGHT, Phase, Store, ThinError, ThinEvent, Waiter};
use crate::format::{ENTRY_BYTES, PAYLOAD_ALIGN};
use crate::{BLOCK_BYTES, codec};

const BLOCK: usize = BLOCK_BYTES as usize;

/// A write whose first or last block is partial, waiting for the old contents of those blocks.
pub(super) struct Merge {
    pub id: u64,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// `None` for write-zeroes.
    pub data: Option<Vec<u8>>,
    pub fua: bool,
    /// The old contents of the first and last blocks, once read.
    pub head: Option<Vec<u8>>,
    pub tail: Option<Vec<u8>>,
    pub reads_pending: u32,
    pub failed: bool,
}

/// The log space a write of `blocks` blocks may take: every block stored raw at worst, or
/// for zeroing, the two partial end blocks plus hole entries. The same bound is used when the
/// write is queued and when a merge finishes, so a merge that gives up can always be retried.
fn room_needed_bytes(blocks: u64, has_data: bool) -> u64 {
    let per_block = BLOCK_BYTES + PAYLOAD_ALIGN + ENTRY_BYTES as u64;
    if has_data {
        blocks * per_block
    } else {
        2 * per_block
    }
}

enum Applied {
    Done,
    /// Leave it at the front of the queue and try again after the next completion.
    Wait,
}

impl Store {
    /// Applies queued host requests in order until one has to wait.
    pub(super) fn drain_blocked(&mut self) {
        while self.phase == Phase::Ready && self.merge.is_none() {
            let Some((id, op)) = self.blocked.pop_front() else {
                return;
            };
            match self.apply(id, &op) {
                // The write's data is in the log now (or the write failed): its buffer can
                // carry another request's data.
                Applied::Done => {
                    if let HostOp::Write { data, .. } = op {
                        self.recycle(data);
                    }
                }
                Applied::Wait => {
                    self.blocked.push_front((id, op));
                    return;
                }
            }
        }
    }

    fn apply(&mut self, id: u64, op: &HostOp) -> Applied {
        match op {
            // Only reads that arrived during start-up are queued.
            HostOp::Read {
                offset_bytes,
                len_bytes,
            } => {
                self.start_read(super::read::Purpose::Host(id), *offset_bytes, *len_bytes);
                Applied::Done
            }
            HostOp::Flush => {
                self.seal();
                let need = self.sealed_seq();
                self.wait_durable(need, Waiter::Host(id));
                Applied::Done
            }
            HostOp::Write {
                offset_bytes,
                data,
                fua,
            } => self.apply_write(id, *offset_bytes, data.len() as u64, Some(data), *fua),
            HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
            } => self.apply_write(id, *offset_bytes, *len_bytes, None, *fua),
            HostOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                // Trim is advisory: only whole blocks are dropped.
                let first = offset_bytes.div_ceil(BLOCK_BYTES);
                let end = (offset_bytes + len_bytes) / BLOCK_BYTES;
                if first < end && !self.punch(first, end - first) {
                    return self.out_of_space(id, ENTRY_BYTES as u64);
                }
                self.reply(id, Ok(None));
                Applied::Done
            }
        }
    }

    fn apply_write(
        &mut self,
        id: u64,
        offset_bytes: u64,
        len_bytes: u64,
        data: Option<&Vec<u8>>,
        fua: bool,
    ) -> Applied {
        if len_bytes == 0 {
            self.reply(id, Ok(None));
            return Applied::Done;
        }
        if self.in_flight.len() >= MAX_RECORDS_IN_FLIGHT {
            return Applied::Wait;
        }
        let blocks = (offset_bytes + len_bytes).div_ceil(BLOCK_BYTES) - offset_bytes / BLOCK_BYTES;
        let needed = room_needed_bytes(blocks, data.is_some());
        if needed > self.host_room_bytes() {
            return self.out_of_space(id, needed);
        }
        let aligned =
            offset_bytes.is_multiple_of(BLOCK_BYTES) && len_bytes.is_multiple_of(BLOCK_BYTES);
        if aligned {
            let first = offset_bytes / BLOCK_BYTES;
            match data {
                Some(data) => self.write_blocks(first, data),
                None => {
                    let punched = self.punch(first, blocks);
                    assert!(punched, "room was checked");
                }
            }
            self.write_applied(id, data.map_or(0, |d| d.len() as u64), fua);
            return Applied::Done;
        }
        self.start_merge(id, offset_bytes, len_bytes, data.cloned(), fua);
        Applied::Done
    }

    /// The host's write is in the log: acknowledge it, or for FUA once it is durable.
    fn write_applied(&mut self, id: u64, host_bytes: u64, fua: bool) {
        self.stats.host_bytes_written += host_bytes;
        if fua {
            self.seal();
            let need = self.sealed_seq();
            self.wait_durable(need, Waiter::Host(id));
        } else {
            self.reply(id, Ok(None));
        }
    }

    /// No room now: wait if cleaning or a checkpoint can make some, else fail the request.
    fn out_of_space(&mut self, id: u64, needed_bytes: u64) -> Applied {
        if self.can_reclaim(needed_bytes) {
            return Applied::Wait;
        }
        self.reply(id, Err(ThinError::NoSpace));
        self.event(ThinEvent::NoSpace);
        Applied::Done
    }

    /// Compresses and appends whole blocks starting at `first_lba`.
    pub(super) fn write_blocks(&mut self, first_lba: u64, data: &[u8]) {
        assert!(data.len().is_multiple_of(BLOCK));
        let preferred = self.config.compression.codec();
        let mut zero_run: Option<(u64, u64)> = None;
        for (i, block) in data.chunks_exact(BLOCK).enumerate() {
            let lba = first_lba + i as u64;
            if codec::is_zero(block) {
                zero_run = match zero_run {
                    Some((start, count)) if start + count == lba => Some((start, count + 1)),
                    Some((start, count)) => {
                        let punched = self.punch(start, count);
                        assert!(punched, "room was checked");
                        Some((lba, 1))
                    }
                    None => Some((lba, 1)),
                };
                continue;
            }
            if let Some((start, count)) = zero_run.take() {
                let punched = self.punch(start, count);
                assert!(punched, "room was checked");
            }
            let mut compressor = std::mem::take(&mut self.compressor);
            let (codec, stored) = compressor.compress(block, preferred);
            let checksum = codec::checksum(stored);
            let location = self
                .append_block(lba, codec, stored, checksum)
                .expect("room was checked");
            self.compressor = compressor;
            self.remap(lba, Some(location));
        }
        if let Some((start, count)) = zero_run {
            let punched = self.punch(start, count);
            assert!(punched, "room was checked");
        }
    }

    /// Drops blocks `first..first + count` (they read as zeroes), logged as holes.
    pub(super) fn punch(&mut self, first: u64, count: u64) -> bool {
        let mut cursor = first;
        let end = first + count;
        while cursor < end {
            let (mapped, run) = self.map.run(cursor, end - cursor);
            if mapped {
                let run32 = run.min(u64::from(u32::MAX));
                if !self.append_hole(cursor, run32 as u32) {
                    return false;
                }
                for lba in cursor..cursor + run32 {
                    self.remap(lba, None);
                }
                cursor += run32;
            } else {
                cursor += run;
            }
        }
        true
    }

    fn start_merge(
        &mut self,
        id: u64,
        offset_bytes: u64,
        len_bytes: u64,
        data: Option<Vec<u8>>,
        fua: bool,
    ) {
        let first = offset_bytes / BLOCK_BYTES;
        let last = (offset_bytes + len_bytes - 1) / BLOCK_BYTES;
        let head_partial = !offset_bytes.is_multiple_of(BLOCK_BYTES)
            || (first == last && !len_bytes.is_multiple_of(BLOCK_BYTES));
        let tail_partial = last != first && !(offset_bytes + len_bytes).is_multiple_of(BLOCK_BYTES);
        self.merge = Some(Merge {
            id,
            offset_bytes,
            len_bytes,
            data,
            fua,
            head: None,
            tail: None,
            reads_pending: u32::from(head_partial) + u32::from(tail_partial),
            failed: false,
        });
        if head_partial {
            self.start_read(Purpose::MergeHead, first * BLOCK_BYTES, BLOCK_BYTES);
        }
        if tail_partial {
            self.start_read(Purpose::MergeTail, last * BLOCK_BYTES, BLOCK_BYTES);
        }
    }

    /// One of a merge's reads finished.
    pub(super) fn merge_read_done(&mut self, head: bool, result: Result<Vec<u8>, ThinError>) {
        let merge = self.merge.as_mut().expect("merge in progress");
        match result {
            Ok(block) if head => merge.head = Some(block),
            Ok(block) => merge.tail = Some(block),
            Err(_) => merge.failed = true,
        }
        merge.reads_pending -= 1;
        if merge.reads_pending > 0 {
            return;
        }
        let merge = self.merge.take().expect("merge in progress");
        if merge.failed || self.phase != Phase::Ready {
            // Stopping refuses the write as it refuses those still queued: nothing changed.
            let error = if self.phase == Phase::Stopping && !merge.failed {
                ThinError::Unavailable
            } else {
                ThinError::Io
            };
            self.reply(merge.id, Err(error));
            return;
        }
        let first = merge.offset_bytes / BLOCK_BYTES;
        let last = (merge.offset_bytes + merge.len_bytes - 1) / BLOCK_BYTES;
        let needed = room_needed_bytes(last + 1 - first, merge.data.is_some());
        if needed > self.host_room_bytes() {
            // Cleaning took the room meanwhile: start over from the queue.
            let op = match merge.data {
                Some(data) => HostOp::Write {
                    offset_bytes: merge.offset_bytes,
                    data,
                    fua: merge.fua,
                },
                None => HostOp::WriteZeroes {
                    offset_bytes: merge.offset_bytes,
                    len_bytes: merge.len_bytes,
                    fua: merge.fua,
                },
            };
            self.blocked.push_front((merge.id, op));
            return;
        }
        let end_bytes = merge.offset_bytes + merge.len_bytes;
        // Applies the request's bytes to one old block.
        let merged = |lba: u64, old: &[u8]| {
            let mut block = old.to_vec();
            let start = merge.offset_bytes.max(lba * BLOCK_BYTES);
            let stop = end_bytes.min((lba + 1) * BLOCK_BYTES);
            let within = (start - lba * BLOCK_BYTES) as usize..(stop - lba * BLOCK_BYTES) as usize;
            match &merge.data {
                Some(data) => {
                    let from = (start - merge.offset_bytes) as usize;
                    block[within.clone()].copy_from_slice(&data[from..from + within.len()]);
                }
                None => block[within].fill(0),
            }
            block
        };
        let mut inner = first..last + 1;
        if let Some(head) = &merge.head {
            let block = merged(first, head);
            self.write_blocks(first, &block);
            inner.start = first + 1;
        }
        if let Some(tail) = &merge.tail {
            let block = merged(last, tail);
            self.write_blocks(last, &block);
            inner.end = last;
        }
        if inner.start < inner.end {
            match &merge.data {
                Some(data) => {
                    let from = (inner.start * BLOCK_BYTES - merge.offset_bytes) as usize;
                    let len = ((inner.end - inner.start) * BLOCK_BYTES) as usize;
                    self.write_blocks(inner.start, &data[from..from + len]);
                }
                None => {
                    let punched = self.punch(inner.start, inner.end - inner.start);
                    assert!(punched, "room was checked");
                }
            }
        }
        let host_bytes = merge.data.as_ref().map_or(0, |d| d.len() as u64);
        self.write_applied(merge.id, host_bytes, merge.fua);
    }
}
