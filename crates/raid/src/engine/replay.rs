//! Journal replay at assembly, before the group serves I/O: scan every present member's
//! journal area for valid batches (at every assembly, so new batches are numbered above all
//! found), and if the superblock says the journal covers the group, apply the entries above
//! the retirement point in sequence order (redo: write the blocks again; partial parity: read
//! the written data range, add it to the payload, write parity; supplied intent: once the
//! batch's writes are done, resync the stripe with the journaled contents of its columns that
//! had no member), recompute the parity of stripes that had full-stripe writes in flight,
//! flush, and only then trust the stripes (clear the regions awaiting resync).
//!
//! A crash during replay leaves the journal as it was (replay writes only data areas and the
//! superblock floor comes last), so the next assembly replays again; redo is idempotent.

use super::stripe::{Kind, StripeOp, SuppliedColumns};
use super::{Engine, MemberError, MemberOp, Owner};
use crate::geometry::Column;
use crate::journal::{self as format, BATCH_ALIGN_BYTES, BatchError, EntryKind};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tessera_buffer::{BufferId, BufferSlice};

/// What a replay I/O is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplayIo {
    /// Reading a copy of the batch being applied.
    Batch,
    /// Reading one piece of the split batch being applied (its index among them).
    Piece(u32),
    /// Reading the data range a partial parity entry was made for.
    Data,
    /// Writing a block in place.
    Write,
}

/// A partial parity entry being applied: the range of the column it was made for is read as
/// the crash left it, and parity is the payload plus that column, written to the parity
/// members. On RAID6, when that column has no member, P is read instead and the column taken
/// from it, so that Q is made to agree with P.
struct PartialParity {
    /// The data column the entry was made for.
    index: usize,
    /// Where the read lands: that column's range, or P's when `read_is_p`.
    read: BufferSlice,
    read_is_p: bool,
    /// P and Q of the stripe's other data columns over the range; either may be missing
    /// from a split batch whose piece was on a member now absent (whose parity needs none).
    payload_p: Option<BufferSlice>,
    payload_q: Option<BufferSlice>,
    /// Members and offsets to write P and Q to.
    p_writers: Vec<(usize, u64)>,
    q_writers: Vec<(usize, u64)>,
}

/// A data range read for a partial parity entry: member, device offset, where it lands.
type DataRead = (usize, u64, BufferSlice);

/// The batch being applied.
struct Applying {
    sequence: u64,
    copy: usize,
    /// The copy read, or every piece of a split batch (with whether its read failed).
    buffers: Vec<(BufferId, bool)>,
    /// I/O outstanding (data reads and writes).
    pending: u32,
    /// Data reads of partial parity entries outstanding, and whether one failed.
    reads_pending: u32,
    read_failed: bool,
    /// Partial parity entries waiting for their data reads.
    partials: Vec<PartialParity>,
    /// Buffers of those entries, freed with the batch.
    scratch: Vec<BufferId>,
    /// Supplied intents to resync once the batch's writes are done: stripe and the pieces of
    /// its supplied columns (slices of the batch buffer).
    supplied: Vec<(u64, SuppliedColumns)>,
}

impl Applying {
    /// A batch whose copy `copy` (or whose every piece) is being read into `buffers`.
    fn reading(sequence: u64, copy: usize, buffers: Vec<(BufferId, bool)>) -> Applying {
        Applying {
            sequence,
            copy,
            pending: u32::try_from(buffers.len()).expect("pieces fit u32"),
            buffers,
            reads_pending: 0,
            read_failed: false,
            partials: Vec::new(),
            scratch: Vec::new(),
            supplied: Vec::new(),
        }
    }
}

/// A batch found on the members: where its copies are (member, offset and bytes), all alike,
/// or where its pieces are, each with part of it (`pieces`).
struct Found {
    copies: Vec<(usize, u64, u64)>,
    pieces: bool,
    intents: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplayStage {
    Scanning,
    Applying,
    Resyncing,
    Flushing { epoch: u64 },
}

pub(crate) struct Replay {
    stage: ReplayStage,
    /// The superblock vouches for the journal: its batches are applied. Otherwise the scan only
    /// learns the highest sequence number in the rings.
    apply: bool,
    /// Scans in flight.
    scans_pending: u32,
    /// Windows waiting for buffer space: member and offset in its journal area.
    scan_queue: VecDeque<(usize, u64)>,
    found: BTreeMap<u64, Found>,
    max_retired_below: u64,
    /// A journal area could not be read, or a batch not applied: the stripes cannot be
    /// trusted from the journal alone.
    incomplete: bool,
    queue: VecDeque<u64>,
    /// The newest full-stripe write per stripe among the batches replayed.
    last_intent: BTreeMap<u64, u64>,
    current: Option<Applying>,
    /// Stripes to resync, with the supplied columns of a supplied intent.
    resync_queue: VecDeque<(u64, SuppliedColumns)>,
    resync_in_flight: u32,
    pub(crate) replayed_entries: u64,
}

impl Engine {
    /// Bytes read from `member`'s journal area at once.
    fn scan_window_bytes(&self, member: usize) -> u64 {
        let largest = (self.geometry.members() as u64 * self.geometry.chunk_bytes() + (8 << 10))
            .div_ceil(BATCH_ALIGN_BYTES)
            * BATCH_ALIGN_BYTES;
        self.journal.ring_size(member).min(largest.max(1 << 20))
    }

    pub(super) fn start_journal_replay(&mut self) {
        self.journal.replay = Some(Replay {
            stage: ReplayStage::Scanning,
            apply: self.superblock.journal_covering,
            scans_pending: 0,
            scan_queue: VecDeque::new(),
            found: BTreeMap::new(),
            max_retired_below: 0,
            incomplete: false,
            queue: VecDeque::new(),
            last_intent: BTreeMap::new(),
            current: None,
            resync_queue: VecDeque::new(),
            resync_in_flight: 0,
            replayed_entries: 0,
        });
        let device = self.members.journal_device();
        // A journal device the group had but that is absent or failed took its batches with
        // it: replay cannot vouch for the stripes, and the bitmap's resync must run.
        let device_lost = self.journal.device_member.is_some() && device.is_none();
        let replay = self.journal.replay.as_mut().expect("replay");
        replay.incomplete |= device_lost && replay.apply;
        for member in self.members.data_members().into_iter().chain(device) {
            replay.scan_queue.push_back((member, 0));
        }
        self.pump_scans();
        self.replay_step();
    }

    /// Reads queued windows while buffer space allows (members are scanned in parallel as far
    /// as the pool lets them).
    fn pump_scans(&mut self) {
        while let Some(&(member, offset_bytes)) = self
            .journal
            .replay
            .as_ref()
            .and_then(|replay| replay.scan_queue.front())
        {
            let len = self
                .scan_window_bytes(member)
                .min(self.journal.ring_size(member) - offset_bytes);
            let Some(buffer) = self.pool.alloc(len as usize) else {
                let replay = self.journal.replay.as_ref().expect("replay");
                assert!(
                    replay.scans_pending > 0,
                    "a journal scan window fits the empty pool"
                );
                return;
            };
            self.journal
                .replay
                .as_mut()
                .expect("replay")
                .scan_queue
                .pop_front();
            self.scan_window(member, offset_bytes, buffer);
        }
    }

    fn scan_window(&mut self, member: usize, offset_bytes: u64, buffer: BufferId) {
        let slice = self.pool.full(buffer);
        self.journal.replay.as_mut().expect("replay").scans_pending += 1;
        self.issue(
            member,
            MemberOp::Read {
                offset_bytes: self.journal.offset_bytes + offset_bytes,
                buffer: slice,
                for_host: None,
            },
            Owner::JournalScan {
                member,
                offset_bytes,
                buffer,
            },
        );
    }

    pub(super) fn journal_scan_done(
        &mut self,
        member: usize,
        offset_bytes: u64,
        buffer: BufferId,
        result: Result<(), MemberError>,
    ) {
        let group_uuid = self.superblock.group_uuid;
        let ring_bytes = self.journal.ring_size(member);
        let mut next = None;
        {
            let bytes = self.pool.slice(buffer);
            let replay = self.journal.replay.as_mut().expect("replay");
            replay.scans_pending -= 1;
            if result.is_err() {
                replay.incomplete = true;
            } else {
                let len = bytes.len();
                let at_ring_end = offset_bytes + len as u64 == ring_bytes;
                let mut pos = 0usize;
                while pos + format::HEADER_BYTES <= len {
                    match format::decode_batch(&bytes[pos..], group_uuid) {
                        Ok(batch) => {
                            let found =
                                replay
                                    .found
                                    .entry(batch.header.sequence)
                                    .or_insert_with(|| Found {
                                        copies: Vec::new(),
                                        pieces: batch.header.piece,
                                        intents: Vec::new(),
                                    });
                            // A copy's intents are every copy's; each piece has its own.
                            if found.copies.is_empty() || found.pieces {
                                found.intents.extend(
                                    batch
                                        .entries
                                        .iter()
                                        .filter(|entry| entry.kind.is_intent())
                                        .map(|entry| entry.stripe),
                                );
                            }
                            // A piece among copies or a copy among pieces has no place: one
                            // batch number is written one way. Replay cannot vouch for it.
                            replay.incomplete |= found.pieces != batch.header.piece;
                            found.copies.push((
                                member,
                                offset_bytes + pos as u64,
                                batch.header.total_bytes,
                            ));
                            replay.max_retired_below =
                                replay.max_retired_below.max(batch.header.retired_below);
                            pos += batch.header.total_bytes as usize;
                        }
                        Err(BatchError::NeedBytes(_)) if pos > 0 && !at_ring_end => break,
                        Err(_) => pos += BATCH_ALIGN_BYTES as usize,
                    }
                }
                let resume = offset_bytes + pos.min(len) as u64;
                if resume < ring_bytes && !at_ring_end {
                    next = Some(resume);
                }
            }
        }
        self.pool.free(buffer);
        if let Some(offset) = next {
            self.journal
                .replay
                .as_mut()
                .expect("replay")
                .scan_queue
                .push_back((member, offset));
        }
        self.pump_scans();
        self.replay_step();
    }

    /// Moves replay to its next stage when the current one is finished.
    fn replay_step(&mut self) {
        loop {
            let replay = self.journal.replay.as_mut().expect("replay");
            match replay.stage {
                ReplayStage::Scanning => {
                    if replay.scans_pending > 0 || !replay.scan_queue.is_empty() {
                        return;
                    }
                    let floor = replay
                        .max_retired_below
                        .max(self.superblock.journal_floor_sequence);
                    let sequences: Vec<u64> = if replay.apply {
                        replay.found.range(floor..).map(|(&s, _)| s).collect()
                    } else {
                        Vec::new()
                    };
                    for &sequence in &sequences {
                        for &stripe in &replay.found[&sequence].intents {
                            replay.last_intent.insert(stripe, sequence);
                        }
                    }
                    let newest = replay.found.keys().next_back().map_or(0, |&s| s + 1);
                    // A batch written to its parity members alone (`Engine::plan_pieces`) is
                    // not seen when they are absent or their areas unreadable, and must never
                    // share a number with a new batch should one come back. Every batch above
                    // the newest seen is on such an absent member's ring (any other has a copy
                    // that was read, and a ring's newest batch is never overwritten), so skipping
                    // as many numbers as the ring can hold, plus the batches torn in flight,
                    // numbers new batches above it (a batch below the floor may have been
                    // overwritten, so the ring's batches are counted from there).
                    let unseen = self.journal.ring_bytes / BATCH_ALIGN_BYTES
                        + super::journal::MAX_BATCHES_IN_FLIGHT as u64;
                    self.journal.next_sequence =
                        self.journal.next_sequence.max(newest.max(floor) + unseen);
                    replay.queue = sequences.into();
                    replay.stage = ReplayStage::Applying;
                }
                ReplayStage::Applying => {
                    if replay.current.is_some() {
                        return;
                    }
                    let Some(sequence) = replay.queue.front().copied() else {
                        replay.resync_queue = replay
                            .last_intent
                            .keys()
                            .map(|&stripe| (stripe, Vec::new()))
                            .collect();
                        replay.stage = ReplayStage::Resyncing;
                        continue;
                    };
                    self.read_batch_copy(sequence, 0);
                    return;
                }
                ReplayStage::Resyncing => {
                    self.pump_replay_resync();
                    let replay = self.journal.replay.as_mut().expect("replay");
                    if replay.resync_in_flight > 0 || !replay.resync_queue.is_empty() {
                        return;
                    }
                    let key = self.start_flush(None, None);
                    let epoch = self.flushes.get(key).expect("new flush").epoch;
                    self.journal.replay.as_mut().expect("replay").stage =
                        ReplayStage::Flushing { epoch };
                    return;
                }
                ReplayStage::Flushing { epoch } => {
                    if self.regions.flush_epoch_done() < epoch {
                        return;
                    }
                    self.finish_replay();
                    return;
                }
            }
        }
    }

    /// Reads copy `copy` of batch `sequence` (the next copy after a failure), or every piece
    /// of a split batch.
    fn read_batch_copy(&mut self, sequence: u64, copy: usize) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let found = &replay.found[&sequence];
        if found.pieces {
            return self.read_batch_pieces(sequence);
        }
        let Some(&(member, offset_bytes, total)) = found.copies.get(copy) else {
            // No copy reads back whole: the batch is lost, and with it the guarantee.
            replay.incomplete = true;
            replay.queue.pop_front();
            return self.replay_step();
        };
        let buffer = self
            .pool
            .alloc(total as usize)
            .expect("a journal batch fits the pool at start-up");
        replay.current = Some(Applying::reading(sequence, copy, vec![(buffer, false)]));
        let slice = self.pool.full(buffer);
        self.issue(
            member,
            MemberOp::Read {
                offset_bytes: self.journal.offset_bytes + offset_bytes,
                buffer: slice,
                for_host: None,
            },
            Owner::JournalReplay {
                io: ReplayIo::Batch,
            },
        );
    }

    /// Reads every piece of split batch `sequence` at once: replay needs them together (on
    /// RAID6 a stripe's P and Q pieces are joined into one entry).
    fn read_batch_pieces(&mut self, sequence: u64) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let copies = replay.found[&sequence].copies.clone();
        let buffers: Vec<(BufferId, bool)> = copies
            .iter()
            .map(|&(_, _, total)| {
                let buffer = self
                    .pool
                    .alloc(total as usize)
                    .expect("a journal batch fits the pool at start-up");
                (buffer, false)
            })
            .collect();
        let reads: Vec<DataRead> = copies
            .iter()
            .zip(&buffers)
            .map(|(&(member, offset, _), &(buffer, _))| (member, offset, self.pool.full(buffer)))
            .collect();
        let replay = self.journal.replay.as_mut().expect("replay");
        replay.current = Some(Applying::reading(sequence, 0, buffers));
        for (index, (member, offset_bytes, buffer)) in reads.into_iter().enumerate() {
            self.issue(
                member,
                MemberOp::Read {
                    offset_bytes: self.journal.offset_bytes + offset_bytes,
                    buffer,
                    for_host: None,
                },
                Owner::JournalReplay {
                    io: ReplayIo::Piece(u32::try_from(index).expect("pieces fit u32")),
                },
            );
        }
    }

    /// Completion of a replay read (the batch, a piece, or a data range) or write (one of its
    /// blocks).
    pub(super) fn journal_replay_io_done(&mut self, io: ReplayIo, result: Result<(), MemberError>) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let current = replay.current.as_mut().expect("a batch being applied");
        current.pending -= 1;
        match io {
            ReplayIo::Batch => self.apply_batch(result),
            ReplayIo::Piece(index) => {
                current.buffers[index as usize].1 = result.is_err();
                if current.pending == 0 {
                    self.apply_pieces();
                }
            }
            ReplayIo::Data => {
                current.reads_pending -= 1;
                if result.is_err() {
                    // Parity of that stripe stays as the crash left it: not trusted.
                    current.read_failed = true;
                    replay.incomplete = true;
                }
                if current.reads_pending == 0 {
                    self.write_partial_parities();
                }
            }
            // A failed replay write fails its member (in `complete`); the stripe is then
            // degraded, which the entry was written to survive.
            ReplayIo::Write => self.finish_batch_if_done(),
        }
    }

    /// The batch being applied.
    fn applying(&mut self) -> &mut Applying {
        self.journal
            .replay
            .as_mut()
            .and_then(|replay| replay.current.as_mut())
            .expect("a batch being applied")
    }

    /// The batch being applied has no I/O left: resync its supplied intents (after its writes,
    /// since an earlier entry of the batch may write the same stripe), then move on to the
    /// next batch.
    fn finish_batch_if_done(&mut self) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let Some(current) = replay.current.as_mut() else {
            return;
        };
        if current.pending > 0 {
            return;
        }
        if !current.supplied.is_empty() {
            let supplied = std::mem::take(&mut current.supplied);
            replay.resync_queue.extend(supplied);
            self.pump_replay_resync();
            return;
        }
        if replay.resync_in_flight > 0 || !replay.resync_queue.is_empty() {
            return;
        }
        let current = replay.current.take().expect("a batch being applied");
        replay.queue.pop_front();
        for (buffer, _) in current.buffers {
            self.pool.free(buffer);
        }
        for buffer in current.scratch {
            self.pool.free(buffer);
        }
        self.replay_step();
    }

    /// The batch copy was read: redo its entries, and start the data reads of its partial
    /// parity entries.
    fn apply_batch(&mut self, result: Result<(), MemberError>) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let (sequence, copy, buffer) = {
            let current = replay.current.as_ref().expect("a batch being applied");
            (current.sequence, current.copy, current.buffers[0].0)
        };
        let group_uuid = self.superblock.group_uuid;
        let batch = match result {
            Ok(()) => format::decode_batch(self.pool.slice(buffer), group_uuid)
                .ok()
                .filter(|batch| batch.header.sequence == sequence),
            Err(_) => None,
        };
        let Some(batch) = batch else {
            self.pool.free(buffer);
            self.journal.replay.as_mut().expect("replay").current = None;
            return self.read_batch_copy(sequence, copy + 1);
        };
        let mut writes = Vec::new();
        // Partial parity entries: the written range is read as the crash left it, then
        // folded into the entry to give parity (`waiting`, in the order of `reads`).
        let mut reads = Vec::new();
        let mut waiting = Vec::new();
        let mut scratch_buffers = Vec::new();
        let mut valid = true;
        let mut replayed = 0u64;
        let mut supplied = Vec::new();
        for (position, (entry, offsets)) in
            batch.entries.iter().zip(&batch.payload_offsets).enumerate()
        {
            if entry.kind == EntryKind::Intent {
                continue;
            }
            let replay = self.journal.replay.as_ref().expect("replay");
            if replay
                .last_intent
                .get(&entry.stripe)
                .is_some_and(|&intent| intent > sequence)
            {
                // A later full-stripe write replaced everything this entry wrote.
                continue;
            }
            if entry.kind == EntryKind::SuppliedIntent {
                let superseded = batch.entries[position + 1..]
                    .iter()
                    .any(|later| later.kind.is_intent() && later.stripe == entry.stripe);
                if !self.entry_in_geometry(entry) {
                    valid = false;
                    break;
                }
                if !superseded {
                    replayed += 1;
                    let pieces = entry
                        .writes
                        .iter()
                        .zip(offsets)
                        .map(|(write, &payload)| {
                            let Column::Data(index) = write.column else {
                                unreachable!("decoding checks a supplied intent's columns")
                            };
                            (
                                index,
                                write.within_bytes,
                                self.slice(buffer, payload, write.len_bytes),
                            )
                        })
                        .collect();
                    supplied.push((entry.stripe, pieces));
                }
                continue;
            }
            if !self.entry_in_geometry(entry)
                || (entry.kind == EntryKind::PartialParity
                    && entry.writes.len() != self.geometry.parity_chunks())
            {
                valid = false;
                break;
            }
            replayed += 1;
            if entry.kind == EntryKind::PartialParity {
                let payload_p = self.slice(buffer, offsets[0], entry.writes[0].len_bytes);
                let payload_q = offsets
                    .get(1)
                    .map(|&at| self.slice(buffer, at, entry.writes[0].len_bytes));
                if let Some((read, partial, scratch)) =
                    self.plan_partial(entry.stripe, entry.writes[0], Some(payload_p), payload_q)
                {
                    reads.push(read);
                    waiting.push(partial);
                    scratch_buffers.push(scratch);
                }
                continue;
            }
            for (write, &payload) in entry.writes.iter().zip(offsets) {
                for (member, offset) in self.column_writers(entry.stripe, write.column) {
                    writes.push((
                        member,
                        offset + write.within_bytes,
                        self.slice(buffer, payload, write.len_bytes),
                    ));
                }
            }
        }
        let replay = self.journal.replay.as_mut().expect("replay");
        if !valid {
            replay.incomplete = true;
            writes.clear();
            reads.clear();
            waiting.clear();
            supplied.clear();
        }
        replay.replayed_entries += replayed;
        self.counters.journal_replayed_entries += replayed;
        let current = self.applying();
        current.pending = u32::try_from(writes.len() + reads.len()).expect("I/O fits u32");
        current.reads_pending = u32::try_from(reads.len()).expect("reads fit u32");
        current.partials = waiting;
        current.scratch = scratch_buffers;
        current.supplied = supplied;
        self.issue_data_reads(reads);
        for (member, offset_bytes, slice) in writes {
            self.issue(
                member,
                MemberOp::Write {
                    offset_bytes,
                    buffer: slice,
                    fua: false,
                },
                Owner::JournalReplay {
                    io: ReplayIo::Write,
                },
            );
        }
        self.finish_batch_if_done();
    }

    /// What applying a partial parity entry of `stripe` takes: the data range `write` read as
    /// the crash left it (or, on RAID6 without that column's member, P read instead), and the
    /// parity to write from it. `None` when there is nothing to make agree.
    fn plan_partial(
        &mut self,
        stripe: u64,
        write: format::WriteDescriptor,
        payload_p: Option<BufferSlice>,
        payload_q: Option<BufferSlice>,
    ) -> Option<(DataRead, PartialParity, BufferId)> {
        let Column::Data(index) = write.column else {
            unreachable!("decoding checks a partial parity entry's columns")
        };
        let within = |writers: super::Writers| -> Vec<(usize, u64)> {
            writers
                .into_iter()
                .map(|(member, offset)| (member, offset + write.within_bytes))
                .collect()
        };
        let mut p_writers = match payload_p {
            Some(_) => within(self.column_writers(stripe, Column::Parity(0))),
            None => Vec::new(),
        };
        let q_writers = match payload_q {
            Some(_) => within(self.column_writers(stripe, Column::Parity(1))),
            None => Vec::new(),
        };
        // Without the written column its sectors are each old or new in parity as it is. On
        // RAID5 that is all; on RAID6 P and Q may each hold a different mix, so the column is
        // taken from P and Q made to agree with it.
        let source = match self.column_reader(stripe, write.column) {
            Some(reader) => Some((reader, false)),
            None if !q_writers.is_empty() && payload_p.is_some() => self
                .column_reader(stripe, Column::Parity(0))
                .map(|reader| (reader, true)),
            None => None,
        };
        let ((member, offset), read_is_p) = source?;
        if read_is_p {
            p_writers.clear();
        }
        if p_writers.is_empty() && q_writers.is_empty() {
            // No parity to make agree.
            return None;
        }
        let scratch = self
            .pool
            .alloc(write.len_bytes as usize)
            .expect("a chunk fits the pool at start-up");
        let read = self.pool.full(scratch);
        Some((
            (member, offset + write.within_bytes, read),
            PartialParity {
                index,
                read,
                read_is_p,
                payload_p,
                payload_q,
                p_writers,
                q_writers,
            },
            scratch,
        ))
    }

    /// Every piece of a split batch was read: join them (a RAID6 stripe's P and Q pieces make
    /// one partial parity entry, less the piece of a member that is absent, whose parity needs
    /// none) and start the data reads. A piece that did not read back whole leaves its parity
    /// as the crash left it: replay cannot vouch for the stripes.
    fn apply_pieces(&mut self) {
        let group_uuid = self.superblock.group_uuid;
        let replay = self.journal.replay.as_ref().expect("replay");
        let current = replay.current.as_ref().expect("a batch being applied");
        let sequence = current.sequence;
        let mut complete = true;
        // (stripe, data column write) -> P and Q payloads, in the order first met.
        let mut joined: Vec<(u64, format::WriteDescriptor, [Option<BufferSlice>; 2])> = Vec::new();
        let mut replayed = 0u64;
        for &(buffer, failed) in &current.buffers {
            let batch = (!failed)
                .then(|| format::decode_batch(self.pool.slice(buffer), group_uuid).ok())
                .flatten()
                .filter(|batch| batch.header.sequence == sequence && batch.header.piece);
            let Some(batch) = batch else {
                complete = false;
                continue;
            };
            for (entry, offsets) in batch.entries.iter().zip(&batch.payload_offsets) {
                if entry.kind == EntryKind::Intent {
                    continue;
                }
                let superseded = replay
                    .last_intent
                    .get(&entry.stripe)
                    .is_some_and(|&intent| intent > sequence);
                if !self.entry_in_geometry(entry) {
                    complete = false;
                    continue;
                }
                let (data, which) = match (entry.kind, &entry.writes[..]) {
                    // A whole partial parity entry is a piece's share on RAID5 only: on
                    // RAID6 it would leave Q as the crash left it.
                    (EntryKind::PartialParity, [data]) if self.geometry.parity_chunks() == 1 => {
                        (*data, 0)
                    }
                    (EntryKind::ParityPiece, [data, parity]) => {
                        let Column::Parity(which) = parity.column else {
                            unreachable!("decoding checks a parity piece's columns")
                        };
                        (*data, which)
                    }
                    _ => {
                        // Nothing else is ever split.
                        complete = false;
                        continue;
                    }
                };
                if superseded {
                    continue;
                }
                let payload =
                    BufferSlice::new(buffer, offsets[0] as usize, data.len_bytes as usize);
                match joined
                    .iter_mut()
                    .find(|(stripe, write, _)| *stripe == entry.stripe && *write == data)
                {
                    Some((_, _, payloads)) => payloads[which] = Some(payload),
                    None => {
                        replayed += 1;
                        let mut payloads = [None, None];
                        payloads[which] = Some(payload);
                        joined.push((entry.stripe, data, payloads));
                    }
                }
            }
        }
        let mut reads = Vec::new();
        let mut waiting = Vec::new();
        let mut scratch_buffers = Vec::new();
        for (stripe, write, [payload_p, payload_q]) in joined {
            if let Some((read, partial, scratch)) =
                self.plan_partial(stripe, write, payload_p, payload_q)
            {
                reads.push(read);
                waiting.push(partial);
                scratch_buffers.push(scratch);
            }
        }
        let replay = self.journal.replay.as_mut().expect("replay");
        replay.incomplete |= !complete;
        replay.replayed_entries += replayed;
        self.counters.journal_replayed_entries += replayed;
        let current = self.applying();
        current.pending = u32::try_from(reads.len()).expect("reads fit u32");
        current.reads_pending = current.pending;
        current.partials = waiting;
        current.scratch = scratch_buffers;
        self.issue_data_reads(reads);
        self.finish_batch_if_done();
    }

    /// Reads the data ranges of the batch's partial parity entries.
    fn issue_data_reads(&mut self, reads: Vec<DataRead>) {
        for (member, offset_bytes, buffer) in reads {
            self.issue(
                member,
                MemberOp::Read {
                    offset_bytes,
                    buffer,
                    for_host: None,
                },
                Owner::JournalReplay { io: ReplayIo::Data },
            );
        }
    }

    /// Every read of the batch's partial parity entries finished: parity is the payload plus
    /// the data column, written to the parity members (not at all if a read failed).
    fn write_partial_parities(&mut self) {
        let replay = self.journal.replay.as_mut().expect("replay");
        let current = replay.current.as_mut().expect("a batch being applied");
        let partials = std::mem::take(&mut current.partials);
        let reads_ok = !current.read_failed;
        let mut writes = Vec::new();
        let mut scratch = Vec::new();
        for partial in partials.into_iter().filter(|_| reads_ok) {
            let len = partial.read.len();
            let mut take = |engine: &mut Engine| {
                let id = engine
                    .pool
                    .alloc(len)
                    .expect("a chunk fits the pool at start-up");
                scratch.push(id);
                engine.pool.full(id)
            };
            let p = take(self);
            let q = partial.payload_q.map(|_| take(self));
            let data = match partial.payload_p {
                Some(payload_p) if partial.read_is_p => {
                    let data = take(self);
                    self.generate_parity(&[partial.read, payload_p], &[data]);
                    data
                }
                _ => partial.read,
            };
            if let Some(payload_p) = partial.payload_p {
                self.copy_slice(payload_p, p);
            }
            if let (Some(q), Some(payload_q)) = (q, partial.payload_q) {
                self.copy_slice(payload_q, q);
            }
            self.fold_data_into_parity(partial.index, data, p, q);
            for (member, offset_bytes) in partial.p_writers {
                writes.push((member, offset_bytes, p));
            }
            if let Some(q) = q {
                for (member, offset_bytes) in partial.q_writers {
                    writes.push((member, offset_bytes, q));
                }
            }
        }
        let current = self.applying();
        current.pending += u32::try_from(writes.len()).expect("writes fit u32");
        current.scratch.extend(scratch);
        for (member, offset_bytes, buffer) in writes {
            self.issue(
                member,
                MemberOp::Write {
                    offset_bytes,
                    buffer,
                    fua: false,
                },
                Owner::JournalReplay {
                    io: ReplayIo::Write,
                },
            );
        }
        self.finish_batch_if_done();
    }

    /// Whether an entry names only stripes, columns and ranges this group has.
    fn entry_in_geometry(&self, entry: &format::EntryDescriptor) -> bool {
        let chunk = self.geometry.chunk_bytes();
        entry.stripe < self.geometry.stripe_count()
            && entry.writes.iter().all(|write| {
                let column_ok = match write.column {
                    Column::Data(index) => index < self.geometry.data_chunks(),
                    Column::Parity(which) => which < self.geometry.parity_chunks(),
                };
                column_ok
                    && write.len_bytes > 0
                    && write
                        .within_bytes
                        .checked_add(write.len_bytes)
                        .is_some_and(|end| end <= chunk)
            })
    }

    fn pump_replay_resync(&mut self) {
        loop {
            let replay = self.journal.replay.as_mut().expect("replay");
            if replay.resync_in_flight as usize >= self.config.resync_window.max(1) {
                return;
            }
            let Some((stripe, supplied)) = replay.resync_queue.pop_front() else {
                return;
            };
            replay.resync_in_flight += 1;
            let region = self.regions.region_of_stripe(stripe, &self.geometry);
            let mut op = StripeOp::new(stripe, region, Kind::Resync);
            op.journal_replay = true;
            op.supplied = supplied;
            self.start_stripe_op(Box::new(op));
        }
    }

    /// A stripe resynced after a replayed full-stripe write.
    pub(super) fn replay_resync_done(&mut self, skipped: bool) {
        let replay = self.journal.replay.as_mut().expect("replay");
        replay.resync_in_flight -= 1;
        // A stripe left as the crash left it: its parity is not trusted.
        replay.incomplete |= skipped;
        if replay.stage == ReplayStage::Applying {
            self.pump_replay_resync();
            self.finish_batch_if_done();
        } else {
            self.replay_step();
        }
    }

    /// A full flush finished while replaying.
    pub(super) fn replay_flush_done(&mut self) {
        if self.journal.replay.is_some() {
            self.replay_step();
        }
    }

    fn finish_replay(&mut self) {
        let replay = self.journal.replay.take().expect("replay");
        if !replay.apply {
            // Nothing was vouched for: the bitmap's resync makes the stripes consistent. From
            // here on, sequence numbers start above everything found.
            self.superblock.journal_floor_sequence = self.journal.next_sequence;
            self.journal.durable_retired_below = self.journal.next_sequence;
            self.request_superblock_update();
            self.startup_after_replay();
            return;
        }
        if !replay.incomplete && !self.regions.bitmap_guessed() {
            // Every stripe is consistent again: nothing needs resync, and a member lost from
            // now on is recovered from parity.
            let unsynced: BTreeSet<u64> = self.regions.unsynced_regions().into_iter().collect();
            for region in unsynced {
                self.regions.mark_synced(region);
            }
        } else {
            self.superblock.journal_covering = false;
            self.journal.coverage = super::journal::Coverage::Off;
            self.journal.active = false;
        }
        self.emit_event(super::GroupEvent::JournalReplayed {
            entries: replay.replayed_entries,
            complete: !replay.incomplete,
        });
        self.superblock.journal_floor_sequence = self.journal.next_sequence;
        self.journal.durable_retired_below = self.journal.next_sequence;
        self.request_superblock_update();
        self.startup_after_replay();
    }
}
