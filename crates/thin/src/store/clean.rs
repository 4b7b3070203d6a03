//! Background work: checkpoints (which make the map durable and let dead segments be reused)
//! and segment cleaning (which moves the live blocks out of mostly dead segments).

use super::read::Purpose;
use super::{CheckpointStage, CheckpointWork, Pending, Phase, Store, ThinEvent, Waiter};
use crate::format::{CheckpointHeader, Entry, Location, RecordHeader, RecordKind};
use crate::store::LowerOp;
use crate::{BLOCK_BYTES, codec};
use std::sync::Arc;

/// A segment is worth cleaning while at most this share of it is live (percent).
const CLEANABLE_LIVE_PERCENT: u64 = 90;

impl Store {
    /// Starts whatever background work is due.
    pub(super) fn background(&mut self) {
        self.pump_flushes();
        if !matches!(self.phase, Phase::Ready | Phase::Stopping) {
            return;
        }
        if self.phase == Phase::Stopping {
            if self.checkpoint.is_none() && self.cleaning.is_none() && self.merge.is_none() {
                if self.final_checkpoint_done {
                    self.phase = Phase::Stopped;
                } else if !self.final_checkpoint_started {
                    self.final_checkpoint_started = true;
                    if !self.start_checkpoint() {
                        // No room for one: the next start replays the log, as after a crash.
                        self.seal();
                        let need = self.sealed_seq();
                        self.wait_durable(need, Waiter::Stop);
                    }
                }
            }
            return;
        }
        self.free_dead_segments();
        self.flush_to_reclaim();
        if self.checkpoint.is_none() && self.wants_checkpoint() {
            self.start_checkpoint();
        }
        if self.cleaning.is_none() && self.free_below_watermark() {
            self.start_cleaning();
        }
        let free_bytes = self.free.len() as u64 * self.layout.segment_bytes();
        let threshold = self.layout.data_bytes() / 100 * u64::from(self.config.low_space_percent);
        if free_bytes < threshold && !self.low_space_reported {
            self.low_space_reported = true;
            self.event(ThinEvent::LowSpace { free_bytes });
        } else if free_bytes >= threshold {
            self.low_space_reported = false;
        }
    }

    /// Cleaning keeps this many segments free. Few: every segment held free is one where
    /// dead space cannot build up, and cleaning the emptiest segment gets cheaper the more
    /// dead space the used ones hold (a tenth kept free made cleaning move 2.3x the host's
    /// bytes under random overwrites at 72% full, a fiftieth 0.9x: docs/thin.md). A
    /// checkpoint's segments, two for a pass, and a fiftieth; but always two above the host's
    /// floor, so that cleaning runs before host writes have to wait. Not the host's floor plus
    /// a fiftieth: the C more segments held free cost 7-31% more write amplification.
    fn clean_watermark(&self) -> u64 {
        let keep_free = self.cleaning_floor() + 1 + (self.layout.segments / 50).max(2);
        keep_free.max(self.reserve_segments() + 2)
    }

    fn free_below_watermark(&self) -> bool {
        (self.free.len() as u64) < self.clean_watermark()
    }

    /// Frees the segments written before the durable checkpoint started whose last live
    /// block was taken by a record that is now durable, without waiting for a checkpoint.
    ///
    /// Safe because recovery loads that checkpoint's map, which may still point into such a
    /// segment, and then replays every durable record after the checkpoint's start: the
    /// records that took the segment's blocks are among them, so the replayed map points
    /// elsewhere before anything reads the segment. A segment written after the checkpoint's
    /// start is on the chain replay walks (`in_chain`) and waits for the next checkpoint, as
    /// do all segments while records vouch for less than they hold after a torn start-up
    /// (`durable_cap`).
    fn free_dead_segments(&mut self) {
        if self.phase != Phase::Ready || self.durable_cap.is_some() {
            return;
        }
        let mut freed = Vec::new();
        while let Some(&(seq, segment)) = self.dying.front() {
            if seq > self.durable_seq {
                break;
            }
            self.dying.pop_front();
            let entry = &mut self.segments[segment as usize];
            if entry.used
                && entry.live_bytes == 0
                && entry.dead_seq == seq
                && !entry.in_chain
                && entry.readers == 0
                && segment != self.current_segment
                && segment != self.next_segment
            {
                entry.used = false;
                self.free.insert(segment);
                freed.push(segment);
            }
        }
        self.trim_free_runs(&freed);
    }

    /// Short of free segments, a flush that makes the records that emptied segments durable
    /// frees them for the price of a flush, where a checkpoint would write the whole map.
    fn flush_to_reclaim(&mut self) {
        if self.reclaim_flush || self.durable_cap.is_some() || !self.free_below_watermark() {
            return;
        }
        let Some(&(seq, _)) = self.dying.front() else {
            return;
        };
        if seq > self.sealed_seq() && !self.blocked.is_empty() {
            // The record that emptied it is still open, and the host writes that would fill
            // it are the ones waiting for room: nothing else would ever seal it.
            self.seal();
            return;
        }
        if seq > self.durable_seq && seq <= self.completed_seq() {
            self.reclaim_flush = true;
            self.wait_durable(seq, Waiter::Reclaim);
        }
    }

    /// Used segments with no live block that a checkpoint would free.
    fn dead_segments(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.layout.segments).filter(move |&segment| {
            let entry = &self.segments[segment as usize];
            entry.used
                && entry.live_bytes == 0
                && segment != self.current_segment
                && segment != self.next_segment
        })
    }

    /// Whether a checkpoint now frees more segments than its records take.
    fn checkpoint_pays(&self) -> bool {
        self.dead_segments().count() as u64 > self.checkpoint_segments()
    }

    fn wants_checkpoint(&self) -> bool {
        let checkpoint_bytes =
            (self.map.mapped() * crate::format::ENTRY_BYTES as u64).max(self.layout.record_bytes);
        if self.record_bytes_since_checkpoint
            >= (16 * checkpoint_bytes).max(64 * self.layout.record_bytes)
        {
            return true;
        }
        if !self.free_below_watermark() || !self.checkpoint_pays() {
            return false;
        }
        let dead = self.dead_segments().count() as u64;
        // Near cleaning's own floor (C + 1), or with host writes waiting; not near the host's
        // floor, which lies within the watermark's reach and made checkpoints eight times as
        // frequent in small stores.
        let urgent =
            (self.free.len() as u64) <= self.cleaning_floor() + 2 || !self.blocked.is_empty();
        urgent || dead >= (self.layout.segments / 20).max(2)
    }

    /// Whether waiting can make room for host writes: background work is running or can
    /// start, or records still landing will empty segments or let cleaning take them.
    pub(super) fn can_reclaim(&self, _needed_bytes: u64) -> bool {
        self.checkpoint.is_some()
            || self.cleaning.is_some()
            || self.reclaim_flush
            || !self.in_flight.is_empty()
            || !self.dying.is_empty()
            || self.checkpoint_pays()
            || self.cleaning_victim().is_some()
    }

    /// Free segments cleaning leaves: a checkpoint's, and one for the log to move on to.
    fn cleaning_floor(&self) -> u64 {
        self.checkpoint_segments() + 1
    }

    /// Bytes cleaning may move without taking a checkpoint's segments.
    fn cleaning_room_bytes(&self) -> u64 {
        let usable = self.layout.record_bytes - crate::format::RECORD_HEADER_BYTES as u64;
        let left_in_segment = if self.layout.segment_of(self.next_record) == self.current_segment {
            self.layout.first_record(self.current_segment + 1) - self.next_record
        } else {
            0
        };
        let free = (self.free.len() as u64).saturating_sub(self.cleaning_floor());
        (left_in_segment + free * self.layout.records_per_segment) * usable
    }

    /// Writes the whole map as checkpoint records at the head of the log, then (once they are
    /// durable) a checkpoint header naming where they start.
    /// False, and nothing done, when the free segments cannot hold it (restarts in quick
    /// succession can leave cleaning no time to run, and each start takes a segment).
    pub(super) fn start_checkpoint(&mut self) -> bool {
        assert!(self.checkpoint.is_none());
        if (self.free.len() as u64) < self.checkpoint_segments() {
            return false;
        }
        self.seal();
        let id = self.durable_checkpoint.map_or(1, |h| h.checkpoint_id + 1);
        let start_record = self.next_position();
        let start_seq = self.next_seq();
        let start_prev_seq = self.last_seq;
        // Only segments dead before this point may be freed by it: the checkpoint covers the
        // writes that killed them.
        let candidates: Vec<u64> = self.dead_segments().collect();
        self.checkpoint = Some(CheckpointWork {
            id,
            start_record,
            start_seq,
            start_prev_seq,
            records: 0,
            last_seq: start_prev_seq,
            chain: vec![self.layout.segment_of(start_record)],
            candidates,
            stage: CheckpointStage::Records,
        });
        let entries: Vec<(u64, Location)> = self.map.iter().collect();
        for (lba, location) in entries {
            self.append_mapped(id, lba, location);
        }
        self.seal();
        let work = self.checkpoint.as_mut().expect("checkpoint");
        work.last_seq = self.last_seq;
        work.records = if self.last_seq == start_prev_seq {
            0
        } else {
            (self.last_seq - start_seq + 1) as u32
        };
        let need = work.last_seq;
        self.record_bytes_since_checkpoint = 0;
        self.wait_durable(need, Waiter::Checkpoint);
        true
    }

    pub(super) fn checkpoint_records_durable(&mut self, ok: bool) {
        if !ok {
            self.fail("the drive group failed a flush of the checkpoint");
            return;
        }
        let work = self.checkpoint.as_mut().expect("checkpoint");
        work.stage = CheckpointStage::Header;
        let header = CheckpointHeader {
            store_id: self.config.store_id,
            checkpoint_id: work.id,
            start_record: work.start_record,
            start_seq: work.start_seq,
            start_prev_seq: work.start_prev_seq,
            checkpoint_records: work.records,
            logical_bytes: self.config.logical_bytes,
            record_bytes: self.layout.record_bytes as u32,
            records_per_segment: self.layout.records_per_segment as u32,
        };
        self.write_slot(header);
    }

    /// Writes a checkpoint header into its slot (a whole record, so a full-stripe write).
    pub(super) fn write_slot(&mut self, header: CheckpointHeader) {
        let mut bytes = vec![0u8; self.layout.record_bytes as usize];
        header.encode(&mut bytes);
        self.pending_slot = Some(header);
        self.issue(
            LowerOp::Write {
                offset_bytes: self.layout.slot_offset(header.checkpoint_id % 2),
                data: Arc::new(bytes),
            },
            Pending::SlotWrite,
        );
    }

    pub(super) fn slot_written(&mut self, ok: bool) {
        if !ok {
            self.fail("the drive group failed a write of a checkpoint header");
            return;
        }
        self.wait_durable(0, Waiter::Slot);
    }

    /// A checkpoint header is durable.
    pub(super) fn slot_durable(&mut self, ok: bool) {
        if !ok {
            self.fail("the drive group failed a flush of a checkpoint header");
            return;
        }
        let header = self.pending_slot.take().expect("slot written");
        self.durable_checkpoint = Some(header);
        if self.phase == Phase::Formatting {
            // Whatever the extent held before is not needed.
            let free: Vec<u64> = self.free.iter().copied().collect();
            self.trim_free_runs(&free);
            self.started();
            return;
        }
        let work = self.checkpoint.take().expect("checkpoint");
        assert_eq!(work.stage, CheckpointStage::Header);
        for segment in &mut self.segments {
            segment.in_chain = false;
        }
        for &segment in &work.chain {
            self.segments[segment as usize].in_chain = true;
        }
        let mut freed = Vec::new();
        for segment in work.candidates {
            let entry = &mut self.segments[segment as usize];
            if entry.used
                && entry.live_bytes == 0
                && !entry.in_chain
                && entry.readers == 0
                && segment != self.current_segment
                && segment != self.next_segment
            {
                entry.used = false;
                entry.stuck = false;
                self.free.insert(segment);
                freed.push(segment);
            }
        }
        self.trim_free_runs(&freed);
        self.stats.checkpoints += 1;
        self.durable_cap = None;
        if self.phase == Phase::Stopping && self.final_checkpoint_started {
            self.final_checkpoint_done = true;
        }
    }

    /// The segment with the least live data that is worth cleaning and that there is room
    /// to move.
    fn cleaning_victim(&self) -> Option<u64> {
        let capacity = self.layout.segment_bytes();
        // Entries and alignment take a little more than the live bytes.
        let room = self.cleaning_room_bytes() / 10 * 9;
        let busy: Vec<u64> = self
            .in_flight
            .values()
            .map(|(record, _)| self.layout.segment_of(*record))
            .collect();
        (0..self.layout.segments)
            .filter(|&segment| {
                let entry = &self.segments[segment as usize];
                entry.used
                    && entry.live_bytes > 0
                    && entry.live_bytes * 100 <= capacity * CLEANABLE_LIVE_PERCENT
                    && entry.live_bytes <= room
                    && segment != self.current_segment
                    && segment != self.next_segment
                    && !entry.stuck
                    && !busy.contains(&segment)
            })
            .min_by_key(|&segment| self.segments[segment as usize].live_bytes)
    }

    fn start_cleaning(&mut self) {
        let Some(segment) = self.cleaning_victim() else {
            return;
        };
        self.cleaning = Some(segment);
        self.segments[segment as usize].readers += 1;
        let first = self.layout.first_record(segment);
        self.issue(
            LowerOp::Read {
                offset_bytes: self.layout.record_offset(first),
                len_bytes: self.layout.segment_bytes(),
            },
            Pending::CleanRead { segment },
        );
    }

    /// Moves the victim's live blocks, as stored, to the head of the log.
    pub(super) fn clean_read_done(&mut self, segment: u64, result: Result<Option<Vec<u8>>, ()>) {
        self.segments[segment as usize].readers -= 1;
        self.cleaning = None;
        let Ok(Some(data)) = result else {
            self.segments[segment as usize].stuck = true;
            return;
        };
        // A stop lets the pass finish: under frequent restarts cleaning would otherwise never
        // complete, and the final checkpoint frees the victim.
        if !matches!(self.phase, Phase::Ready | Phase::Stopping) {
            return;
        }
        let live_before = self.segments[segment as usize].live_bytes;
        let mut repairing = false;
        let record_bytes = self.layout.record_bytes as usize;
        let first = self.layout.first_record(segment);
        for (i, bytes) in data.chunks_exact(record_bytes).enumerate() {
            let record = first + i as u64;
            let Some(header) = RecordHeader::decode(bytes, self.config.store_id) else {
                continue;
            };
            if header.kind != RecordKind::Data {
                continue;
            }
            let record_offset = self.layout.record_offset(record);
            for entry in header.entries {
                let Entry::Block {
                    lba,
                    offset_in_record,
                    stored_len,
                    codec,
                    checksum,
                } = entry
                else {
                    continue;
                };
                let location = Location {
                    address_bytes: record_offset + u64::from(offset_in_record),
                    stored_len: u32::from(stored_len),
                    codec,
                    checksum,
                };
                if lba >= self.map.blocks() || self.map.get(lba) != Some(location) {
                    continue;
                }
                let at = offset_in_record as usize;
                let stored = &bytes[at..at + stored_len as usize];
                if codec::checksum(stored) != checksum
                    && self.config.repair_sources > 0
                    && !self.lost.contains(&location)
                {
                    // The read path repairs it from redundancy and moves it; the segment is
                    // cleaned on a later pass.
                    self.start_read(Purpose::Repair, lba * BLOCK_BYTES, BLOCK_BYTES);
                    repairing = true;
                    continue;
                }
                // A block with no good copy left moves as it is: it keeps failing its
                // checksum (reads of it fail) and no longer pins the segment.
                let Some(moved) = self.append_block(lba, codec, stored, checksum) else {
                    return;
                };
                self.remap(lba, Some(moved));
                self.stats.cleaning_bytes += u64::from(stored_len);
            }
        }
        let entry = &mut self.segments[segment as usize];
        if entry.live_bytes == live_before && !repairing {
            entry.stuck = true;
        }
    }
}
