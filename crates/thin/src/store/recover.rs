//! Start-up: formatting a new store, and rebuilding the map of an existing one from its newest
//! checkpoint and the records written after it.

use super::{Config, MAX_SEQ, Pending, Phase, Store, ThinEvent, Waiter, stored_footprint};
use crate::codec;
use crate::format::{CheckpointHeader, Entry, Location, NO_SEGMENT, RecordHeader, RecordKind};
use crate::store::LowerOp;

/// Bytes read from each checkpoint slot.
const SLOT_READ_BYTES: u64 = 4096;

pub(super) struct Recovery {
    slots: [Option<CheckpointHeader>; 2],
    slots_pending: u8,
    /// Slots read that carry nothing of this store, not even a damaged header.
    slots_foreign: u8,
    /// A slot holds a header of this store in format 1.
    format_1: bool,
    header: Option<CheckpointHeader>,
    /// The sequence number the next record must name as its predecessor.
    expected_prev: u64,
    /// The start-up that wrote the last record replayed; the next record must be of the same
    /// one unless it is the first of its own.
    expected_session: Option<u64>,
    last_record: Option<u64>,
    last_next_segment: u32,
    checkpoint_records: u32,
    records_replayed: u64,
    /// The highest `durable_seq` any replayed record carried.
    durable_seq: u64,
    /// Blocks whose stored bytes failed their checksum: (seq, lba, previous location, this).
    suspects: Vec<(u64, u64, Option<Location>, Location)>,
    chain: Vec<u64>,
}

impl Store {
    /// A new, empty store: writes its first checkpoint header; ready once that is durable.
    pub fn create(config: Config) -> Result<Store, String> {
        let mut store = Store::empty(config)?;
        store.format();
        Ok(store)
    }

    fn format(&mut self) {
        self.phase = Phase::Formatting;
        let current = self.claim_segment().expect("a new store has free segments");
        self.next_segment = self.claim_segment().expect("a new store has free segments");
        self.current_segment = current;
        self.enter_segment(current);
        self.next_record = self.layout.first_record(current);
        let header = CheckpointHeader {
            store_id: self.config.store_id,
            checkpoint_id: 1,
            start_record: self.next_record,
            start_seq: 1,
            start_prev_seq: 0,
            checkpoint_records: 0,
            logical_bytes: self.config.logical_bytes,
            record_bytes: self.layout.record_bytes as u32,
            records_per_segment: self.layout.records_per_segment as u32,
        };
        self.write_slot(header);
    }

    /// An existing store: reads its checkpoint headers and replays its log; ready once done.
    pub fn open(config: Config) -> Result<Store, String> {
        let mut store = Store::empty(config)?;
        store.phase = Phase::Recovering;
        store.recovery = Some(Recovery {
            slots: [None, None],
            slots_pending: 2,
            slots_foreign: 0,
            format_1: false,
            header: None,
            expected_prev: 0,
            expected_session: None,
            last_record: None,
            last_next_segment: NO_SEGMENT,
            checkpoint_records: 0,
            records_replayed: 0,
            durable_seq: 0,
            suspects: Vec::new(),
            chain: Vec::new(),
        });
        for slot in 0..2 {
            store.issue(
                LowerOp::Read {
                    offset_bytes: store.layout.slot_offset(slot),
                    len_bytes: SLOT_READ_BYTES,
                },
                Pending::SlotRead { slot },
            );
        }
        Ok(store)
    }

    fn recovery_failed(&mut self, reason: String) {
        self.recovery = None;
        self.phase = Phase::Failed;
        self.event(ThinEvent::StartFailed { reason });
        for (id, _) in std::mem::take(&mut self.blocked) {
            self.reply(id, Err(super::ThinError::Unavailable));
        }
    }

    pub(super) fn slot_read(&mut self, slot: u64, result: Result<Option<Vec<u8>>, ()>) {
        let store_id = self.config.store_id;
        let layout = self.layout;
        let logical_bytes = self.config.logical_bytes;
        let recovery = self.recovery.as_mut().expect("recovering");
        recovery.slots_pending -= 1;
        if let Ok(Some(bytes)) = result {
            if !CheckpointHeader::names_store(&bytes, store_id) {
                recovery.slots_foreign += 1;
            }
            recovery.format_1 |= CheckpointHeader::is_format_1(&bytes, store_id);
            recovery.slots[slot as usize] = CheckpointHeader::decode(&bytes).filter(|h| {
                h.store_id == store_id
                    && u64::from(h.record_bytes) == layout.record_bytes
                    && u64::from(h.records_per_segment) == layout.records_per_segment
                    && h.logical_bytes == logical_bytes
                    && h.start_record < layout.records()
                    && h.checkpoint_id < MAX_SEQ
                    && h.start_seq < MAX_SEQ
                    && h.start_prev_seq < MAX_SEQ
            });
        }
        if recovery.slots_pending > 0 {
            return;
        }
        let newest = recovery
            .slots
            .iter()
            .flatten()
            .max_by_key(|h| h.checkpoint_id)
            .copied();
        if recovery.format_1 && newest.is_none() {
            self.recovery_failed(
                "the thin drive is in format 1 (written before records named their start-up); \
                 this version reads format 2 only: copy its data out with the version that \
                 wrote it"
                    .into(),
            );
            return;
        }
        let Some(header) = newest else {
            if recovery.slots_foreign == 2 {
                // The first header never became durable (a crash or stop during `create`),
                // and nothing is written before it is: the drive was never used.
                self.recovery = None;
                self.event(ThinEvent::Recovered {
                    checkpoint_id: 0,
                    records_replayed: 0,
                    torn_blocks_dropped: 0,
                });
                self.format();
                return;
            }
            self.recovery_failed("no checkpoint of this thin drive was found".into());
            return;
        };
        recovery.header = Some(header);
        recovery.expected_prev = header.start_prev_seq;
        let segment = self.layout.segment_of(header.start_record);
        recovery.chain.push(segment);
        self.replay_from(header.start_record);
    }

    /// Reads the log from `record` to the end of its segment.
    fn replay_from(&mut self, record: u64) {
        let segment = self.layout.segment_of(record);
        let end = self.layout.first_record(segment + 1);
        self.issue(
            LowerOp::Read {
                offset_bytes: self.layout.record_offset(record),
                len_bytes: (end - record) * self.layout.record_bytes,
            },
            Pending::ReplayRead {
                first_record: record,
            },
        );
    }

    pub(super) fn replay_read(&mut self, first_record: u64, result: Result<Option<Vec<u8>>, ()>) {
        let Ok(Some(data)) = result else {
            self.recovery_failed("the log could not be read".into());
            return;
        };
        let record_bytes = self.layout.record_bytes as usize;
        let mut complete_segment = true;
        for (i, bytes) in data.chunks_exact(record_bytes).enumerate() {
            let record = first_record + i as u64;
            if let Err(reason) = self.replay_record(record, bytes) {
                if let Some(reason) = reason {
                    self.recovery_failed(reason);
                    return;
                }
                complete_segment = false;
                break;
            }
        }
        let recovery = self.recovery.as_mut().expect("recovering");
        let next = u64::from(recovery.last_next_segment);
        let advanced = recovery.last_record.is_some_and(|last| {
            self.layout.segment_of(last) == self.layout.segment_of(first_record)
        });
        if complete_segment
            && advanced
            && recovery.last_next_segment != NO_SEGMENT
            && next < self.layout.segments
            && !recovery.chain.contains(&next)
        {
            recovery.chain.push(next);
            self.replay_from(self.layout.first_record(next));
            return;
        }
        self.finish_recovery();
    }

    /// Applies one record; `Err(None)` where the log ends, `Err(Some(reason))` for damage.
    fn replay_record(&mut self, record: u64, bytes: &[u8]) -> Result<(), Option<String>> {
        let blocks = self.map.blocks();
        let record_offset = self.layout.record_offset(record);
        // Past the last whole segment the extent holds no records.
        let segments_end = (2 + self.layout.records()) * self.layout.record_bytes;
        let slots_end = 2 * self.layout.record_bytes;
        let recovery = self.recovery.as_mut().expect("recovering");
        let Some(header) = RecordHeader::decode(bytes, self.config.store_id) else {
            return Err(None);
        };
        let other_session = recovery
            .expected_session
            .is_some_and(|session| session != header.session && !header.first_of_session);
        if header.prev_seq != recovery.expected_prev
            || other_session
            || header.seq <= header.prev_seq
            || header.seq >= MAX_SEQ
        {
            return Err(None);
        }
        recovery.expected_session = Some(header.session);
        let checkpoint = recovery.header.expect("checkpoint chosen");
        recovery.expected_prev = header.seq;
        recovery.last_record = Some(record);
        recovery.last_next_segment = header.next_segment;
        recovery.records_replayed += 1;
        match header.kind {
            RecordKind::Checkpoint => {
                if header.checkpoint_id != checkpoint.checkpoint_id {
                    return Ok(());
                }
                recovery.checkpoint_records += 1;
                for entry in header.entries {
                    let Entry::Mapped { lba, location } = entry else {
                        return Err(Some("a checkpoint record holds a data entry".into()));
                    };
                    let end = location.address_bytes + u64::from(location.stored_len);
                    if lba >= blocks || location.address_bytes < slots_end || end > segments_end {
                        return Err(Some(format!(
                            "a checkpoint maps block {lba} outside the drive"
                        )));
                    }
                    self.map.set(lba, Some(location));
                }
            }
            RecordKind::Data => {
                recovery.durable_seq = recovery.durable_seq.max(header.durable_seq);
                for entry in header.entries {
                    match entry {
                        Entry::Block {
                            lba,
                            offset_in_record,
                            stored_len,
                            codec,
                            checksum,
                        } => {
                            if lba >= blocks {
                                return Err(Some(format!("the log names block {lba}")));
                            }
                            let location = Location {
                                address_bytes: record_offset + u64::from(offset_in_record),
                                stored_len: u32::from(stored_len),
                                codec,
                                checksum,
                            };
                            let at = offset_in_record as usize;
                            let stored = &bytes[at..at + stored_len as usize];
                            let previous = self.map.set(lba, Some(location));
                            if codec::checksum(stored) != checksum {
                                recovery
                                    .suspects
                                    .push((header.seq, lba, previous, location));
                            }
                        }
                        Entry::Hole { lba, count } => {
                            let end = lba.saturating_add(u64::from(count)).min(blocks);
                            for block in lba.min(end)..end {
                                self.map.set(block, None);
                            }
                        }
                        Entry::Mapped { .. } => {
                            return Err(Some("a data record holds a checkpoint entry".into()));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn finish_recovery(&mut self) {
        let recovery = self.recovery.take().expect("recovering");
        let header = recovery.header.expect("checkpoint chosen");
        if recovery.checkpoint_records < header.checkpoint_records {
            self.recovery_failed(format!(
                "checkpoint {} is incomplete: {} of its {} records found",
                header.checkpoint_id, recovery.checkpoint_records, header.checkpoint_records
            ));
            return;
        }
        // A block that fails its checksum in a record no flush covered was torn by the crash:
        // it goes back to what it was. One in a flushed record is damage, repaired on read.
        let mut torn = 0;
        let mut oldest_torn_seq = u64::MAX;
        for &(seq, lba, previous, location) in recovery.suspects.iter().rev() {
            if seq > recovery.durable_seq && self.map.get(lba) == Some(location) {
                self.map.set(lba, previous);
                torn += 1;
                oldest_torn_seq = oldest_torn_seq.min(seq);
            }
        }
        for (_, location) in self.map.iter().collect::<Vec<_>>() {
            let segment = self.segment_of_address(location.address_bytes);
            self.segments[segment as usize].live_bytes += stored_footprint(&location);
        }
        for &segment in &recovery.chain {
            let entry = &mut self.segments[segment as usize];
            entry.in_chain = true;
            entry.used = true;
        }
        for (index, entry) in self.segments.iter_mut().enumerate() {
            if entry.live_bytes > 0 {
                entry.used = true;
            }
            if entry.used {
                self.free.remove(&(index as u64));
            }
        }
        // The log goes on right after its last good record, so a later replay finds what is
        // written next by following the same chain. Where it goes on after the current
        // segment is the segment its records named, as before the stop: claiming another
        // made every start-up take a segment, until a full drive could not start.
        let named = u64::from(recovery.last_next_segment);
        match recovery.last_record {
            Some(last) if self.layout.segment_of(last + 1) == self.layout.segment_of(last) => {
                self.current_segment = self.layout.segment_of(last);
                self.next_record = last + 1;
                let reusable = recovery.last_next_segment != NO_SEGMENT
                    && named < self.layout.segments
                    && named != self.current_segment
                    && !recovery.chain.contains(&named)
                    && self.segments[named as usize].live_bytes == 0;
                let next = if reusable {
                    self.free.remove(&named);
                    self.segments[named as usize].used = true;
                    Some(named)
                } else {
                    self.claim_segment()
                };
                let Some(next) = next else {
                    self.recovery_failed("no free segment to continue the log in".into());
                    return;
                };
                self.next_segment = next;
            }
            Some(last) => {
                // A store only ever names a segment it claimed empty, outside the chain (the
                // chain ends with it if replay went on into it and found nothing). The log
                // enters it with its next record, as it would have without the stop.
                let entered =
                    recovery.chain.last() == Some(&named) && self.layout.segment_of(last) != named;
                if named >= self.layout.segments
                    || (recovery.chain.contains(&named) && !entered)
                    || self.segments[named as usize].live_bytes > 0
                {
                    self.recovery_failed(format!(
                        "the log ends at a segment's end naming segment {named} to go on in, \
                         which it cannot"
                    ));
                    return;
                }
                self.free.remove(&named);
                self.segments[named as usize].used = true;
                self.current_segment = self.layout.segment_of(last);
                self.next_record = last + 1;
                self.next_segment = named;
            }
            None => {
                self.current_segment = self.layout.segment_of(header.start_record);
                self.next_record = header.start_record;
                let Some(next) = self.claim_segment() else {
                    self.recovery_failed("no free segment to continue the log in".into());
                    return;
                };
                self.next_segment = next;
            }
        }
        // Blocks mapped where the log goes on would be overwritten: a store never maps any.
        let position = self.next_position();
        let head = self.layout.record_offset(position);
        let segment_end = (2 + self
            .layout
            .first_record(self.layout.segment_of(position) + 1))
            * self.layout.record_bytes;
        let overwritten = self.map.iter().find(|(_, location)| {
            location.address_bytes + u64::from(location.stored_len) > head
                && location.address_bytes < segment_end
        });
        if let Some((lba, _)) = overwritten {
            self.recovery_failed(format!("block {lba} is mapped past the end of the log"));
            return;
        }
        self.last_seq = recovery.expected_prev;
        self.jump_seq = true;
        // Records from the oldest torn one on must not be vouched for as durable: a later
        // start-up has to drop the same torn blocks again (until a checkpoint passes them).
        self.recovered_durable_seq = self.last_seq.min(oldest_torn_seq.saturating_sub(1));
        self.recovered_torn = torn > 0;
        if torn > 0 {
            self.durable_cap = Some(self.recovered_durable_seq);
        }
        self.durable_checkpoint = Some(header);
        self.event(ThinEvent::Recovered {
            checkpoint_id: header.checkpoint_id,
            records_replayed: recovery.records_replayed,
            torn_blocks_dropped: torn,
        });
        // What was replayed is made durable before anything new is written after it.
        self.wait_durable(0, Waiter::Recovered);
    }

    pub(super) fn recovery_flushed(&mut self, ok: bool) {
        if !ok {
            self.recovery_failed("the drive group failed a flush".into());
            return;
        }
        self.durable_seq = self.recovered_durable_seq;
        self.phase = Phase::Ready;
        let free: Vec<u64> = self.free.iter().copied().collect();
        self.trim_free_runs(&free);
        if self.recovered_torn {
            // Moves the start of replay past the torn records (later, if no room now: until
            // then records vouch for nothing past the torn ones, `durable_cap`).
            self.start_checkpoint();
        }
        self.started();
        self.drain_blocked();
    }
}
