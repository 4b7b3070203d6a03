//! The log: opening, filling and sealing records, claiming segments, write completions,
//! flushes, and how much room is left.

use super::{OpenRecord, Pending, Phase, RECOVERY_SEQ_GAP, Store, Waiter};
use crate::codec::Codec;
use crate::format::{
    ENTRY_BYTES, Entry, Location, PAYLOAD_ALIGN, RECORD_HEADER_BYTES, RecordHeader, RecordKind,
};
use crate::store::LowerOp;
use std::sync::Arc;

impl Store {
    /// The sequence number the next record gets.
    pub(super) fn next_seq(&self) -> u64 {
        if self.jump_seq {
            self.last_seq + RECOVERY_SEQ_GAP
        } else {
            self.last_seq + 1
        }
    }

    /// Where the next record will be opened.
    pub(super) fn next_position(&self) -> u64 {
        if self.layout.segment_of(self.next_record) == self.current_segment {
            self.next_record
        } else {
            self.layout.first_record(self.next_segment)
        }
    }

    /// The log enters a segment.
    pub(super) fn enter_segment(&mut self, segment: u64) {
        let entry = &mut self.segments[segment as usize];
        entry.used = true;
        entry.in_chain = true;
        if let Some(work) = &mut self.checkpoint {
            work.chain.push(segment);
        }
    }

    /// Takes the lowest free segment.
    pub(super) fn claim_segment(&mut self) -> Option<u64> {
        let segment = self.free.pop_first()?;
        let entry = &mut self.segments[segment as usize];
        assert!(
            !entry.used && entry.live_bytes == 0,
            "free segment {segment} in use"
        );
        entry.used = true;
        Some(segment)
    }

    /// Opens the next record; `false` when the log has no segment to move on to. Only
    /// checkpoint records may take the segments a checkpoint needs.
    pub(super) fn open_record(&mut self, kind: RecordKind, checkpoint_id: u64) -> bool {
        assert!(self.open.is_none(), "a record is already open");
        if self.layout.segment_of(self.next_record) != self.current_segment {
            if kind != RecordKind::Checkpoint
                && self.free.len() as u64 <= self.checkpoint_segments()
            {
                return false;
            }
            let Some(claimed) = self.claim_segment() else {
                return false;
            };
            self.current_segment = std::mem::replace(&mut self.next_segment, claimed);
            self.enter_segment(self.current_segment);
            self.next_record = self.layout.first_record(self.current_segment);
        }
        let record = self.next_record;
        self.next_record += 1;
        let seq = self.next_seq();
        let prev_seq = self.last_seq;
        self.last_seq = seq;
        let first_of_session = std::mem::replace(&mut self.jump_seq, false);
        let record_bytes = self.layout.record_bytes;
        self.resident.insert(record, seq);
        self.open = Some(OpenRecord {
            record,
            seq,
            prev_seq,
            first_of_session,
            kind,
            checkpoint_id,
            entries: std::mem::take(&mut self.spare_entries),
            bytes: vec![0; record_bytes as usize],
            payload_start: record_bytes,
            opened_us: self.now_us,
        });
        true
    }

    /// Whether the open record takes one more entry with `stored_len` payload bytes.
    fn open_fits(&self, stored_len: u64) -> bool {
        let Some(open) = &self.open else {
            return false;
        };
        let header = RecordHeader::encoded_len(open.entries.len() + 1) as u64;
        let footprint = stored_len.div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN;
        header + footprint <= open.payload_start
    }

    /// Makes sure a record of `kind` with room for an entry of `stored_len` is open.
    fn room_for(&mut self, stored_len: u64, kind: RecordKind, checkpoint_id: u64) -> bool {
        let matches = self
            .open
            .as_ref()
            .is_some_and(|open| open.kind == kind && open.checkpoint_id == checkpoint_id);
        if matches && self.open_fits(stored_len) {
            return true;
        }
        self.seal();
        self.open_record(kind, checkpoint_id) && self.open_fits(stored_len)
    }

    /// Appends a stored block to the log; returns where it went (`None`: no room at all).
    pub(super) fn append_block(
        &mut self,
        lba: u64,
        codec: Codec,
        stored: &[u8],
        checksum: u32,
    ) -> Option<Location> {
        if !self.room_for(stored.len() as u64, RecordKind::Data, 0) {
            return None;
        }
        let record_offset = self.layout.record_offset(self.open.as_ref()?.record);
        let open = self.open.as_mut().expect("open record");
        let footprint = (stored.len() as u64).div_ceil(PAYLOAD_ALIGN) * PAYLOAD_ALIGN;
        open.payload_start -= footprint;
        let at = open.payload_start as usize;
        open.bytes[at..at + stored.len()].copy_from_slice(stored);
        open.entries.push(Entry::Block {
            lba,
            offset_in_record: at as u32,
            stored_len: stored.len() as u16,
            codec,
            checksum,
        });
        Some(Location {
            address_bytes: record_offset + at as u64,
            stored_len: stored.len() as u32,
            codec,
            checksum,
        })
    }

    /// Records in the log that blocks `lba..lba + count` read as zeroes.
    pub(super) fn append_hole(&mut self, lba: u64, count: u32) -> bool {
        if !self.room_for(0, RecordKind::Data, 0) {
            return false;
        }
        let open = self.open.as_mut().expect("open record");
        open.entries.push(Entry::Hole { lba, count });
        true
    }

    /// Appends checkpoint entries, opening checkpoint records as they fill.
    pub(super) fn append_mapped(&mut self, checkpoint_id: u64, lba: u64, location: Location) {
        assert!(
            self.room_for(0, RecordKind::Checkpoint, checkpoint_id),
            "the space reserve holds every checkpoint"
        );
        let open = self.open.as_mut().expect("open record");
        open.entries.push(Entry::Mapped { lba, location });
    }

    /// Writes the open record out.
    pub(super) fn seal(&mut self) {
        let Some(mut open) = self.open.take() else {
            return;
        };
        let header = RecordHeader {
            store_id: self.config.store_id,
            seq: open.seq,
            prev_seq: open.prev_seq,
            checkpoint_id: open.checkpoint_id,
            next_segment: self.next_segment as u32,
            kind: open.kind,
            record_bytes: self.layout.record_bytes as u32,
            durable_seq: self
                .durable_cap
                .map_or(self.durable_seq, |cap| cap.min(self.durable_seq)),
            session: self.config.session_id,
            first_of_session: open.first_of_session,
            entries: std::mem::take(&mut open.entries),
        };
        assert!(
            RECORD_HEADER_BYTES + header.entries.len() * ENTRY_BYTES <= open.payload_start as usize
        );
        header.encode(&mut open.bytes);
        let mut entries = header.entries;
        entries.clear();
        self.spare_entries = entries;
        let data = Arc::new(open.bytes);
        self.in_flight
            .insert(open.seq, (open.record, Arc::clone(&data)));
        self.record_bytes_since_checkpoint += self.layout.record_bytes;
        self.stats.lower_bytes_written += self.layout.record_bytes;
        self.issue(
            LowerOp::Write {
                offset_bytes: self.layout.record_offset(open.record),
                data,
            },
            Pending::RecordWrite { seq: open.seq },
        );
    }

    /// The bytes of a record still in memory.
    pub(super) fn resident_bytes(&self, record: u64) -> Option<&[u8]> {
        let seq = *self.resident.get(&record)?;
        if let Some(open) = self.open.as_ref().filter(|open| open.seq == seq) {
            return Some(&open.bytes);
        }
        self.in_flight.get(&seq).map(|(_, bytes)| bytes.as_slice())
    }

    pub(super) fn record_written(&mut self, seq: u64, ok: bool) {
        let (record, _) = self.in_flight.remove(&seq).expect("record in flight");
        if self.resident.get(&record) == Some(&seq) {
            self.resident.remove(&record);
        }
        if !ok {
            self.fail("the drive group failed a write of the log");
            return;
        }
        self.pump_flushes();
    }

    /// Every record up to this sequence number has completed.
    pub(super) fn completed_seq(&self) -> u64 {
        match self.in_flight.keys().next() {
            Some(&oldest) => oldest - 1,
            None => match &self.open {
                Some(open) => open.prev_seq,
                None => self.last_seq,
            },
        }
    }

    /// The sequence number a flush asked for now must cover: everything sealed.
    pub(super) fn sealed_seq(&self) -> u64 {
        match &self.open {
            Some(open) => open.prev_seq,
            None => self.last_seq,
        }
    }

    pub(super) fn wait_durable(&mut self, need_seq: u64, waiter: Waiter) {
        self.waiters.push((need_seq, waiter));
        self.pump_flushes();
    }

    /// Issues a lower flush for the waiters whose records have all completed.
    pub(super) fn pump_flushes(&mut self) {
        if self.flush_in_flight.is_some() || self.waiters.is_empty() {
            return;
        }
        if self.phase == Phase::Failed {
            return;
        }
        let floor = self.completed_seq();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(need, _)| *need <= floor);
        self.waiters = waiting;
        if ready.is_empty() {
            return;
        }
        self.issue(LowerOp::Flush, Pending::Flush);
        self.flush_in_flight = Some((floor, ready.into_iter().map(|(_, w)| w).collect()));
    }

    pub(super) fn flush_done(&mut self, ok: bool) {
        let (floor, waiters) = self.flush_in_flight.take().expect("flush in flight");
        if ok {
            self.durable_seq = self.durable_seq.max(floor);
        }
        for waiter in waiters {
            match waiter {
                Waiter::Host(id) => {
                    let result = if ok {
                        Ok(None)
                    } else {
                        Err(super::ThinError::Io)
                    };
                    self.reply(id, result);
                }
                Waiter::Checkpoint => self.checkpoint_records_durable(ok),
                Waiter::Slot => self.slot_durable(ok),
                Waiter::Recovered => self.recovery_flushed(ok),
                // `background` frees what the flush made safe to free.
                Waiter::Reclaim => self.reclaim_flush = false,
                Waiter::Stop if ok => self.final_checkpoint_done = true,
                Waiter::Stop => self.fail("the drive group failed a flush at a stop"),
            }
        }
        self.pump_flushes();
    }

    /// Segments a checkpoint of the whole map may take.
    pub(super) fn checkpoint_segments(&self) -> u64 {
        let per_record = (self.layout.record_bytes as usize - RECORD_HEADER_BYTES) / ENTRY_BYTES;
        let records = self.map.mapped().div_ceil(per_record as u64) + 1;
        records.div_ceil(self.layout.records_per_segment) + 1
    }

    /// Segments host writes leave alone: a checkpoint's, and room for cleaning to empty more
    /// segments than the next checkpoint takes. The segments cleaning empties stay taken
    /// until a checkpoint covers them when they were written since the last one, and such a
    /// checkpoint only pays once it frees more than it writes; with room for fewer moves,
    /// a host that outran cleaning could leave neither cleaning nor a checkpoint able to
    /// start, and a drive 70% full refusing writes.
    pub(super) fn reserve_segments(&self) -> u64 {
        2 * self.checkpoint_segments() + 2
    }

    /// Payload bytes host writes may still take before touching the reserve.
    pub(super) fn host_room_bytes(&self) -> u64 {
        let usable = self.layout.record_bytes - RECORD_HEADER_BYTES as u64;
        let open_room = self.open.as_ref().map_or(0, |open| {
            open.payload_start
                .saturating_sub(RecordHeader::encoded_len(open.entries.len() + 1) as u64)
        });
        let left_in_segment = if self.layout.segment_of(self.next_record) == self.current_segment {
            self.layout.first_record(self.current_segment + 1) - self.next_record
        } else {
            0
        };
        // The reserve counts the rest of the head segment too: cleaning claims a segment for
        // what it moves, and a host allowed into the rest of it would take back every
        // segment cleaning frees.
        let records = left_in_segment + self.free.len() as u64 * self.layout.records_per_segment;
        let reserved = self.reserve_segments() * self.layout.records_per_segment;
        open_room + records.saturating_sub(reserved) * usable
    }
}
