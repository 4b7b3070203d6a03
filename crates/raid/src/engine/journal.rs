//! The write journal at run time: stripe updates are recorded in batches (group commit) on
//! several members before their in-place writes go out, and retired once a flush has made
//! those in-place writes durable. Also when journaling starts and stops (`Coverage`).
//!
//! What is journaled and why it is safe is in `docs/fault-model.md`; the batch format is in
//! `crate::journal`; replay after a crash is in `replay.rs`.

use super::hashing::NumberMap;
use super::stripe::{Fragment, Kind, Stage, StripeOp};
use super::{Engine, GroupState, MemberError, MemberOp, OpId, Owner};
use crate::geometry::Column;
use crate::journal::{self as format, BATCH_ALIGN_BYTES, EntryDescriptor, EntryKind};
use crate::layout::min_journal_bytes;
use crate::superblock::{JournalMode, Uuid};
use std::collections::{BTreeMap, VecDeque};
use tessera_buffer::{BufferId, BufferSlice};

/// Batches being written at once; while they are, new entries gather into the next batch.
pub(super) const MAX_BATCHES_IN_FLIGHT: usize = 2;
/// Finished batches kept before a flush retires them, however large the ring: bounds the
/// bookkeeping (and what a replay after a crash has to redo) on a big journal device.
const RETIRE_AFTER_BATCHES: usize = 4096;
/// What a journal write costs beyond its bytes, counted in bytes, when choosing between whole
/// copies of a batch and pieces (`Engine::plan_pieces`): a batch of a few RAID5 entries on
/// parity members all different would take more writes than it saves bytes. A 4 KiB write to
/// a tmpfs member costs its event loop about what copying 16 KiB does.
const WRITE_COST_BYTES: u64 = 16 << 10;

/// One member's journal area, used as a ring of batches.
#[derive(Default)]
pub(crate) struct Ring {
    head_bytes: u64,
    /// Batches whose bytes must stay (not yet below the durable retirement point), oldest first.
    live: VecDeque<(u64, u64, u64)>,
    /// Their total bytes.
    used: u64,
}

impl Ring {
    /// Where a batch of `len` bytes (plus `reserve` bytes kept free behind it) would go.
    pub(crate) fn place(&self, ring_bytes: u64, len: u64, reserve: u64) -> Option<u64> {
        let need = len + reserve;
        let Some(&(_, tail, _)) = self.live.front() else {
            return (need <= ring_bytes).then_some(0);
        };
        let head = self.head_bytes;
        if head > tail {
            if head + need <= ring_bytes {
                Some(head)
            } else if need <= tail {
                Some(0)
            } else {
                None
            }
        } else if head + need <= tail && need > 0 {
            Some(head)
        } else {
            None
        }
    }

    pub(crate) fn push(&mut self, ring_bytes: u64, sequence: u64, start: u64, len: u64) {
        self.live.push_back((sequence, start, len));
        self.used += len;
        self.head_bytes = start + len;
        if self.head_bytes == ring_bytes {
            self.head_bytes = 0;
        }
    }

    /// Frees the space of batches below `below`.
    pub(crate) fn reclaim(&mut self, below: u64) {
        while self
            .live
            .front()
            .is_some_and(|&(sequence, _, _)| sequence < below)
        {
            let (_, _, len) = self.live.pop_front().expect("checked");
            self.used -= len;
        }
        if self.live.is_empty() {
            self.head_bytes = 0;
        }
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used
    }
}

/// An entry waiting to be sealed into a batch.
struct OpenEntry {
    op: OpId,
    descriptor: EntryDescriptor,
    /// Per write that carries payload: its bytes, or for a partial parity entry the stripe's
    /// new parity (P, then Q) from which `fold` makes the share when the batch is encoded.
    payload: smallvec::SmallVec<[BufferSlice; 3]>,
    fold: Option<Fold>,
    region: u64,
}

/// What turns a partial parity entry's new parity into its shares when its batch is encoded:
/// the written data column's new contents over the entry's range, taken out of P (and Q).
/// The shares are computed straight into their place in the batch (or piece), so they are
/// never copied there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fold {
    index: usize,
    data: BufferSlice,
    /// A slice the update no longer reads, of the range's length: the P+Q kernel's P output
    /// while making a Q share alone.
    scratch_p: BufferSlice,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchStage {
    /// Copies being written (FUA).
    Committing,
    /// Durable; the ops' in-place writes are under way.
    Durable,
    /// Every in-place write finished; retired by the first full flush started after
    /// `done_epoch`.
    Done { done_epoch: u64 },
}

/// Where a batch's bytes are, until it is durable.
#[derive(Clone, Copy, Debug)]
enum BatchBuffer {
    Pool(BufferId),
    /// The reserved batch (`MetadataBuffers::take_journal_batch`), when the pool had no room.
    Reserve(BufferSlice),
}

impl BatchBuffer {
    fn slice(self, pool: &tessera_buffer::BufferPool) -> BufferSlice {
        match self {
            BatchBuffer::Pool(buffer) => pool.full(buffer),
            BatchBuffer::Reserve(slice) => slice,
        }
    }
}

struct BatchState {
    stage: BatchStage,
    ops: smallvec::SmallVec<[OpId; 8]>,
    ops_left: u32,
    /// The image written whole to every copy, or one per piece; empty once durable.
    buffers: smallvec::SmallVec<[BatchBuffer; 2]>,
    /// Copy (or piece) writes outstanding (each a FUA write).
    pending_io: u32,
    copies_ok: u32,
    /// Split into pieces on its entries' parity members (`Engine::plan_pieces`): a replay
    /// after those members are lost will not see the retirement point it carries, so that
    /// point is not durable for the rules that depend on one.
    pieces: bool,
    carried_retired_below: u64,
    intents: smallvec::SmallVec<[u64; 8]>,
    /// Stripes of its partial parity entries.
    partials: smallvec::SmallVec<[u64; 8]>,
}

/// A partial parity entry not yet retired: its data column's in-place write may not be
/// durable, so parity computed over that range by a later update could disagree with what a
/// crash leaves.
#[derive(Clone, Copy, Debug)]
struct UnretiredPartial {
    sequence: u64,
    index: usize,
    start_bytes: u64,
    end_bytes: u64,
}

/// Whether every stripe update is journaled, as recorded in the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coverage {
    Off,
    /// New writes are journaled; waiting for unjournaled ones to finish and be flushed, and for
    /// any resync to end.
    Draining {
        floor: u64,
        flush_epoch: Option<u64>,
    },
    /// The superblock generation saying "covering" is being written.
    Recording {
        generation: u64,
    },
    On,
    /// The superblock is being told coverage ends; writes stay journaled until it is durable.
    Ending {
        generation: u64,
    },
}

pub(crate) struct Journal {
    pub(crate) offset_bytes: u64,
    /// The ring on each member.
    pub(crate) ring_bytes: u64,
    /// The dedicated journal device's member index, if the group was given one, and its ring.
    pub(crate) device_member: Option<usize>,
    pub(crate) device_ring_bytes: u64,
    rings: Vec<Ring>,
    pub(crate) next_sequence: u64,
    rotation: usize,
    open: VecDeque<OpenEntry>,
    batches: BTreeMap<u64, BatchState>,
    /// Batches in `batches` whose stage is `Done`.
    done_batches: usize,
    committing: usize,
    /// The retirement point carried by a durable batch (or the superblock floor): replay never
    /// goes below it, so the space of batches under it may be reused.
    pub(crate) durable_retired_below: u64,
    /// Full-stripe writes not yet retired, by stripe.
    intents: NumberMap<u64>,
    /// The newest batch touching each region, until it is below the durable retirement point.
    region_sequences: NumberMap<u64>,
    /// Partial parity entries not yet retired, by stripe.
    partials: NumberMap<smallvec::SmallVec<[UnretiredPartial; 2]>>,
    /// The newest redo entry of each stripe, until it is below the durable retirement point
    /// (until then a replay may rewrite its data).
    redo_sequences: NumberMap<u64>,
    /// Updates waiting for a full-stripe write or a partial parity entry on their stripe to
    /// retire.
    intent_waiters: Vec<OpId>,
    /// New stripe updates are journaled.
    pub(crate) active: bool,
    pub(crate) coverage: Coverage,
    /// Parity writes in flight that were not journaled.
    pub(crate) unjournaled_writes: u32,
    /// A batch could not be placed: retire what can be retired and write a checkpoint.
    space_wanted: bool,
    /// A zero-fill waits for its region's entries to fall below the durable retirement point.
    checkpoint_wanted: bool,
    flush_running: bool,
    /// A superblock generation being written to record a retirement point.
    checkpoint: Option<(u64, u64)>,
    pub(crate) replay: Option<super::replay::Replay>,
    /// The descriptors and entries of the batch being sealed, kept between batches with
    /// their capacity.
    sealing_descriptors: Vec<EntryDescriptor>,
    sealing_entries: Vec<OpenEntry>,
    /// The plan of a batch being split and its pieces' descriptors (one per item of the plan,
    /// in its order), kept likewise.
    piece_plan: Vec<PieceItem>,
    piece_descriptors: Vec<EntryDescriptor>,
    /// Bytes of each piece of `piece_plan`, in its order (`Engine::plan_pieces`).
    piece_bytes: Vec<u64>,
    /// The shares of the batch or piece being encoded: fold, which parity, new parity, and
    /// where the share goes; kept likewise.
    share_slots: Vec<(Fold, usize, BufferSlice, BufferSlice)>,
}

/// Where a batch's copies go: (member, start within its ring).
type Places = smallvec::SmallVec<[(usize, u64); 3]>;

/// A batch's pieces: buffer, member, and start in that member's ring.
type Pieces = smallvec::SmallVec<[(BatchBuffer, usize, u64); 4]>;

/// One entry's share of one piece: its stripe's parity `parity` is on `member`.
#[derive(Clone, Copy, Debug)]
struct PieceItem {
    member: usize,
    entry: usize,
    parity: usize,
}

/// How a sealed batch is written.
enum Copies {
    /// One image, whole at each place.
    Whole { buffer: BatchBuffer, places: Places },
    /// One piece per parity member (`Engine::plan_pieces`).
    Pieces(Pieces),
}

/// What operators see of the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalStatus {
    pub mode: JournalMode,
    /// New writes are being journaled.
    pub active: bool,
    /// The superblock vouches that the journal holds every stripe update since its floor.
    pub covering: bool,
    pub ring_bytes: u64,
    /// Bytes of the busiest member's ring holding unretired batches.
    pub used_bytes: u64,
    pub unretired_batches: u64,
}

impl Journal {
    pub(crate) fn new(offset_bytes: u64, ring_bytes: u64, floor: u64, covering: bool) -> Journal {
        Journal {
            offset_bytes,
            ring_bytes,
            device_member: None,
            device_ring_bytes: 0,
            rings: Vec::new(),
            next_sequence: floor,
            rotation: 0,
            open: VecDeque::new(),
            batches: BTreeMap::new(),
            done_batches: 0,
            committing: 0,
            durable_retired_below: floor,
            intents: NumberMap::default(),
            region_sequences: NumberMap::default(),
            partials: NumberMap::default(),
            redo_sequences: NumberMap::default(),
            intent_waiters: Vec::new(),
            active: covering,
            coverage: if covering {
                Coverage::On
            } else {
                Coverage::Off
            },
            unjournaled_writes: 0,
            space_wanted: false,
            checkpoint_wanted: false,
            flush_running: false,
            checkpoint: None,
            replay: None,
            sealing_descriptors: Vec::new(),
            sealing_entries: Vec::new(),
            piece_plan: Vec::new(),
            piece_descriptors: Vec::new(),
            piece_bytes: Vec::new(),
            share_slots: Vec::new(),
        }
    }

    /// The ring size on `member`.
    pub(crate) fn ring_size(&self, member: usize) -> u64 {
        if self.device_member == Some(member) {
            self.device_ring_bytes
        } else {
            self.ring_bytes
        }
    }

    /// Every batch below this sequence number is retired (in memory).
    pub(crate) fn retired_below(&self) -> u64 {
        self.batches
            .keys()
            .next()
            .copied()
            .unwrap_or(self.next_sequence)
    }

    fn ring(&mut self, member: usize) -> &mut Ring {
        if self.rings.len() <= member {
            self.rings.resize_with(member + 1, Ring::default);
        }
        &mut self.rings[member]
    }

    /// Whether a replay could still rewrite a redo entry's data on `stripe` (its newest redo
    /// entry is at or above the durable retirement point).
    fn redo_replayable(&self, stripe: u64) -> bool {
        self.redo_sequences
            .get(&stripe)
            .is_some_and(|&sequence| sequence >= self.durable_retired_below)
    }

    /// Whether a full-stripe write on `stripe` awaits retirement.
    pub(crate) fn has_intent(&self, stripe: u64) -> bool {
        self.intents.contains_key(&stripe)
    }

    /// Whether no entry above the durable retirement point touches `region` (so replay cannot
    /// write into it).
    pub(crate) fn region_clear(&self, region: u64) -> bool {
        self.region_sequences
            .get(&region)
            .is_none_or(|&sequence| sequence < self.durable_retired_below)
    }

    /// What the journal holds, for liveness reports.
    pub(crate) fn debug_summary(&self) -> String {
        format!(
            "open {}, committing {}, batches {} ({} done), waiters {}, partial stripes {}, \
             intents {}, flush running {}, coverage {:?}",
            self.open.len(),
            self.committing,
            self.batches.len(),
            self.done_batches,
            self.intent_waiters.len(),
            self.partials.len(),
            self.intents.len(),
            self.flush_running,
            self.coverage
        )
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.open.is_empty() && self.committing == 0
    }
}

impl Engine {
    /// Whether stripe updates should be journaled now, by mode and group state.
    fn journal_desired(&self) -> bool {
        if self.geometry.parity_chunks() == 0 || !self.journal_fits() {
            return false;
        }
        match self.superblock.journal_mode {
            JournalMode::AlwaysOff => false,
            JournalMode::AlwaysOn => true,
            JournalMode::DegradeOnly => matches!(
                self.members.group_state(&self.geometry),
                GroupState::Degraded | GroupState::Rebuilding
            ),
        }
    }

    /// The ring new batches go to: the journal device's while it works, else each member's.
    fn active_ring_bytes(&self) -> u64 {
        match self.members.journal_device() {
            Some(device) => self.journal.ring_size(device),
            None => self.journal.ring_bytes,
        }
    }

    /// Whether the journal area can hold the largest batch twice over.
    fn journal_fits(&self) -> bool {
        self.active_ring_bytes()
            >= min_journal_bytes(self.geometry.members(), self.geometry.chunk_bytes())
    }

    /// Sets the journal mode (persisted with the next superblock write).
    pub fn set_journal_mode(&mut self, mode: JournalMode) -> Result<(), super::AdminError> {
        if mode != JournalMode::AlwaysOff
            && self.geometry.parity_chunks() > 0
            && !self.journal_fits()
        {
            return Err(super::AdminError::BadValue(
                "the journal area of this group is too small for its stripe size",
            ));
        }
        self.superblock.journal_mode = mode;
        self.request_superblock_update();
        self.pump();
        Ok(())
    }

    pub fn journal_status(&self) -> JournalStatus {
        JournalStatus {
            mode: self.superblock.journal_mode,
            active: self.journal.active,
            covering: self.superblock.journal_covering,
            ring_bytes: self.active_ring_bytes(),
            used_bytes: self
                .journal
                .rings
                .iter()
                .map(Ring::used_bytes)
                .max()
                .unwrap_or(0),
            unretired_batches: self.journal.batches.len() as u64,
        }
    }

    /// Whether a power cut now would be followed by a replay that leaves every stripe
    /// consistent (coverage recorded durably).
    pub fn journal_covering(&self) -> bool {
        self.journal.coverage == Coverage::On
    }

    /// Whether replay could write into `region` (asking for the retirement point to be
    /// recorded when it could).
    pub(super) fn journal_region_clear(&mut self, region: u64) -> bool {
        if self.journal.region_clear(region) {
            return true;
        }
        self.journal.checkpoint_wanted = true;
        false
    }

    /// Whether this op's update goes through the journal.
    pub(super) fn journal_takes(&self, kind_is_write: bool) -> bool {
        kind_is_write && self.journal.active && self.geometry.parity_chunks() > 0
    }

    /// An update must not start over data that a crash could still tear and that no entry
    /// would restore: its entry would be computed over it. That is a partial write on a stripe
    /// whose full-stripe write is not retired, and an update whose parity range meets the range
    /// of an unretired partial parity entry of another column (replay recomputes that parity
    /// from the column as the crash left it, and this update's parity would assume the new
    /// contents). A full-stripe write waits for neither: replay resyncs its stripe.
    pub(super) fn journal_blocks_update(&mut self, id: OpId, op: &StripeOp) -> bool {
        let Kind::Write { fragments } = &op.kind else {
            return false;
        };
        if op.covers_full_stripe(self.geometry.data_chunks(), self.geometry.chunk_bytes()) {
            return false;
        }
        let blocked = self.journal.has_intent(op.stripe)
            || self
                .journal
                .partials
                .get(&op.stripe)
                .is_some_and(|partials| partials.iter().any(|p| meets(p, fragments)));
        if blocked {
            self.journal.intent_waiters.push(id);
        }
        blocked
    }

    /// The partial parity entry of an update of one data column on an optimal group: the new
    /// parity without the new data over the written range, which is the parity of the other
    /// data columns there (P, and on RAID6 Q as a second write). Half the bytes of a redo entry
    /// on RAID5, two thirds on RAID6. The entry's writes go into `writes`, naming the new
    /// parity; the shares are made from it when the batch is encoded, by the fold returned
    /// (`spare`, a slice the update no longer reads, is its scratch). `None` (and `writes`
    /// untouched) when a redo entry is needed.
    pub(super) fn partial_parity_entry(
        &mut self,
        stripe: u64,
        fragments: &[Fragment],
        parity_writes: &[(usize, BufferSlice, u64)],
        spare: Option<BufferSlice>,
        writes: &mut Vec<(Column, u64, BufferSlice)>,
    ) -> Option<Fold> {
        let [fragment] = fragments else {
            return None;
        };
        // Replay needs the written column and parity on their members, and every other column
        // as it is: a degraded stripe keeps redo entries.
        let parity_chunks = self.geometry.parity_chunks();
        if parity_writes.len() != parity_chunks
            || self.members.group_state(&self.geometry) != GroupState::Optimal
        {
            return None;
        }
        // A replay may still rewrite an earlier redo entry's data over this update's, and a
        // partial parity entry would not write it back (a redo entry, replayed later, does).
        if self.journal.redo_replayable(stripe) {
            return None;
        }
        let len = fragment.range.len() as usize;
        let mut new_parity = [None; 2];
        for (which, &(column, parity, parity_start)) in parity_writes.iter().enumerate() {
            let at = fragment.range.start_bytes.checked_sub(parity_start)? as usize;
            if column != which || at + len > parity.len() {
                return None;
            }
            new_parity[which] = Some(parity.sub(at, len));
        }
        let scratch_p = spare.filter(|spare| spare.len() == len)?;
        let start = fragment.range.start_bytes;
        writes.clear();
        writes.push((
            Column::Data(fragment.index),
            start,
            new_parity[0].expect("P is among the parity writes"),
        ));
        if let Some(q) = new_parity[1] {
            writes.push((Column::Parity(1), start, q));
        }
        Some(Fold {
            index: fragment.index,
            data: fragment.buffer,
            scratch_p,
        })
    }

    /// Writes share `which` (0: P, 1: Q) of a partial parity entry into `slot`: the stripe's
    /// new parity `parity` over the entry's range with the written data taken out, which is
    /// that parity of the stripe's other data columns.
    fn write_share(&mut self, fold: Fold, which: usize, parity: BufferSlice, slot: BufferSlice) {
        if which == 0 {
            self.generate_parity(&[parity, fold.data], &[slot]);
        } else {
            self.copy_slice(parity, slot);
            self.fold_data_into_q(fold.index, fold.data, slot, fold.scratch_p);
        }
    }

    /// Queues the op's entry for the next batch.
    pub(super) fn journal_append(
        &mut self,
        op: OpId,
        stripe: u64,
        region: u64,
        kind: EntryKind,
        writes: &[(Column, u64, BufferSlice)],
        fold: Option<Fold>,
    ) {
        let descriptor = EntryDescriptor {
            kind,
            stripe,
            writes: writes
                .iter()
                .map(|&(column, within_bytes, buffer)| format::WriteDescriptor {
                    column,
                    within_bytes,
                    len_bytes: buffer.len() as u64,
                })
                .collect(),
        };
        let payload = if kind.has_payload() {
            writes.iter().map(|&(_, _, buffer)| buffer).collect()
        } else {
            smallvec::SmallVec::new()
        };
        self.journal.open.push_back(OpenEntry {
            op,
            descriptor,
            payload,
            fold,
            region,
        });
    }

    /// Largest batch sealed from several entries (a single entry may exceed it).
    fn batch_cap_bytes(&self) -> u64 {
        let reserve = (self.pool.capacity_bytes() / 16) as u64;
        (self.active_ring_bytes() / 4)
            .min(reserve)
            .max(BATCH_ALIGN_BYTES)
    }

    /// Seals and writes batches, starts flushes that retire entries, writes checkpoints, and
    /// moves coverage along.
    pub(super) fn pump_journal(&mut self) -> bool {
        if self.journal.replay.is_some() {
            return false;
        }
        let mut progressed = self.pump_coverage();
        progressed |= self.checkpoint_durable();
        progressed |= self.release_open_entries_of_failed_group();
        while self.journal.committing < MAX_BATCHES_IN_FLIGHT && !self.journal.open.is_empty() {
            if !self.seal_batch() {
                break;
            }
            progressed = true;
        }
        let waiting = self.journal.space_wanted
            || self.journal.checkpoint_wanted
            || !self.journal.intent_waiters.is_empty();
        let pressure = self
            .journal
            .rings
            .iter()
            .enumerate()
            .any(|(member, ring)| ring.used_bytes() * 2 > self.journal.ring_size(member))
            || self.journal.done_batches >= RETIRE_AFTER_BATCHES;
        let done_unretired = self.journal.done_batches > 0;
        if (waiting || pressure)
            && done_unretired
            && !self.journal.flush_running
            && !self.failure_pending()
        {
            self.journal.flush_running = true;
            self.start_flush(None, None);
            progressed = true;
        }
        if (self.journal.space_wanted || self.journal.checkpoint_wanted)
            && !self.journal.flush_running
        {
            if self.journal.retired_below() > self.journal.durable_retired_below {
                if self.write_checkpoint() {
                    progressed = true;
                }
            } else if !done_unretired {
                self.journal.checkpoint_wanted = false;
                self.journal.space_wanted = false;
            }
        }
        progressed
    }

    fn pump_coverage(&mut self) -> bool {
        if self.phase != super::Phase::Running && self.phase != super::Phase::Stopping {
            return false;
        }
        let desired = self.journal_desired();
        match self.journal.coverage {
            Coverage::Off => {
                if !desired {
                    return false;
                }
                self.journal.active = true;
                self.journal.coverage = Coverage::Draining {
                    floor: self.journal.next_sequence,
                    flush_epoch: None,
                };
                true
            }
            Coverage::Draining { floor, flush_epoch } => {
                if !desired {
                    self.journal.active = false;
                    self.journal.coverage = Coverage::Off;
                    return true;
                }
                // Batches below the floor (from an earlier period of journaling) will not be
                // replayed once coverage is recorded: their in-place writes must be finished
                // before the flush that makes them durable starts, like unjournaled writes.
                let earlier_in_flight = self
                    .journal
                    .batches
                    .range(..floor)
                    .any(|(_, batch)| !matches!(batch.stage, BatchStage::Done { .. }));
                if self.journal.unjournaled_writes > 0
                    || earlier_in_flight
                    || self.background.resync_pending()
                    || self.regions.unsynced_count() > 0
                {
                    return false;
                }
                match flush_epoch {
                    None => {
                        let key = self.start_flush(None, None);
                        let epoch = self.flushes.get(key).expect("new flush").epoch;
                        self.journal.coverage = Coverage::Draining {
                            floor,
                            flush_epoch: Some(epoch),
                        };
                        true
                    }
                    Some(epoch) if self.regions.flush_epoch_done() >= epoch => {
                        self.superblock.journal_covering = true;
                        self.superblock.journal_floor_sequence =
                            self.superblock.journal_floor_sequence.max(floor);
                        let generation = self.request_superblock_update();
                        self.journal.coverage = Coverage::Recording { generation };
                        true
                    }
                    Some(_) => false,
                }
            }
            Coverage::Recording { generation } => {
                if self.meta.durable_generation < generation {
                    return false;
                }
                self.journal.coverage = Coverage::On;
                true
            }
            Coverage::On => {
                if desired {
                    return false;
                }
                self.superblock.journal_covering = false;
                let generation = self.request_superblock_update();
                self.journal.coverage = Coverage::Ending { generation };
                true
            }
            Coverage::Ending { generation } => {
                if self.meta.durable_generation < generation {
                    return false;
                }
                self.journal.active = false;
                self.journal.coverage = Coverage::Off;
                true
            }
        }
    }

    /// A failed group has nowhere to journal and nothing left to protect: entries waiting for a
    /// batch go on without one, so their ops finish (and fail) instead of waiting forever.
    fn release_open_entries_of_failed_group(&mut self) -> bool {
        if self.journal.open.is_empty()
            || self.members.group_state(&self.geometry) != GroupState::Failed
        {
            return false;
        }
        for entry in std::mem::take(&mut self.journal.open) {
            if let Some(op) = self.ops.get_mut(entry.op) {
                op.journal_committed = true;
                self.ready.push_back(entry.op);
            }
        }
        true
    }

    /// The journal device failed: the batches it held are gone, so the superblock (written
    /// with the failure) stops vouching for the journal, and coverage starts over with new
    /// batches on the members' own journal areas.
    pub(super) fn journal_device_lost(&mut self) {
        self.superblock.journal_covering = false;
        if matches!(
            self.journal.coverage,
            Coverage::On | Coverage::Recording { .. } | Coverage::Draining { .. }
        ) {
            self.journal.coverage = Coverage::Off;
        }
    }

    /// Members for the copies of a batch of `len` bytes, with where it goes on each; `None`
    /// when too few have room: `parity + 1` data members in rotation, or the journal device.
    fn place_batch(&mut self, len: u64, reserve: u64) -> Option<Places> {
        if let Some(device) = self.members.journal_device() {
            // One copy: the device is the user's choice of a fast place for the journal, and
            // when it fails the batches it held are given up (coverage starts over).
            let ring_bytes = self.journal.ring_size(device);
            let start = self.journal.ring(device).place(ring_bytes, len, reserve)?;
            return Some(smallvec::smallvec![(device, start)]);
        }
        let eligible = self.members.data_members();
        if eligible.is_empty() {
            return None;
        }
        let copies = (self.geometry.parity_chunks() + 1).min(eligible.len());
        let ring_bytes = self.journal.ring_bytes;
        let mut chosen = Places::new();
        for step in 0..eligible.len() {
            let member = eligible[(self.journal.rotation + step) % eligible.len()];
            if let Some(start) = self.journal.ring(member).place(ring_bytes, len, reserve) {
                chosen.push((member, start));
                if chosen.len() == copies {
                    break;
                }
            }
        }
        if chosen.len() < copies {
            return None;
        }
        self.journal.rotation = (self.journal.rotation + 1) % eligible.len();
        Some(chosen)
    }

    /// Plans a batch split into pieces, one per parity member of its entries' stripes (P on
    /// RAID5; P and Q on RAID6), each piece holding what its member's parity needs: the
    /// partial parity of that parity alone, and the intents. Replay of these entries only
    /// rewrites parity, so, as with md's partial parity log, a lost parity member takes with
    /// it only entries it no longer needs, and any other loss within the group's redundancy
    /// leaves each surviving parity its piece (on RAID6, losing P and a data chunk leaves Q
    /// its partial Q). Fills `plan` (sorted by member, then entry) and says whether to split:
    /// only when the pieces cost less than `parity + 1` whole copies, counting each write as
    /// `WRITE_COST_BYTES` on top of its bytes.
    ///
    /// Only on an optimal group without a journal device, and only for entries whose replay
    /// rewrites nothing but parity (partial parity and intents, not redo). A stripe with a redo
    /// entry at or above the durable retirement point keeps rotation: were this batch lost with
    /// its members, replay could rewrite that older redo entry's data over this update's. For
    /// the same reason a split batch's own retirement point does not count as durable
    /// (`BatchState::pieces`), and a batch with a retirement point to make durable goes in
    /// rotation, so ring space keeps being reclaimed.
    fn plan_pieces(&mut self, entries: &[EntryDescriptor], plan: &mut Vec<PieceItem>) -> bool {
        plan.clear();
        let parity_chunks = self.geometry.parity_chunks();
        if parity_chunks == 0
            || self.members.journal_device().is_some()
            || self.members.group_state(&self.geometry) != GroupState::Optimal
            || self.journal.retired_below() > self.journal.durable_retired_below
        {
            return false;
        }
        for (entry_index, entry) in entries.iter().enumerate() {
            if !matches!(entry.kind, EntryKind::PartialParity | EntryKind::Intent)
                || self.journal.redo_replayable(entry.stripe)
            {
                return false;
            }
            for parity in 0..parity_chunks {
                let [(member, _)] = self.column_writers(entry.stripe, Column::Parity(parity))[..]
                else {
                    return false;
                };
                plan.push(PieceItem {
                    member,
                    entry: entry_index,
                    parity,
                });
            }
        }
        plan.sort_unstable_by_key(|item| (item.member, item.entry));
        let whole = (format::batch_bytes(entries) + WRITE_COST_BYTES) * (parity_chunks as u64 + 1);
        let mut descriptors = std::mem::take(&mut self.journal.piece_descriptors);
        descriptors.clear();
        descriptors.extend(
            plan.iter()
                .map(|item| self.piece_descriptor(&entries[item.entry], item.parity)),
        );
        let mut lens = std::mem::take(&mut self.journal.piece_bytes);
        lens.clear();
        let mut at = 0;
        for piece in plan.chunk_by(|a, b| a.member == b.member) {
            lens.push(format::batch_bytes(&descriptors[at..at + piece.len()]));
            at += piece.len();
        }
        let split: u64 = lens.iter().map(|len| len + WRITE_COST_BYTES).sum();
        self.journal.piece_descriptors = descriptors;
        self.journal.piece_bytes = lens;
        split < whole
    }

    /// An entry as a piece for the member of its parity `parity` holds it: a RAID6 partial
    /// parity entry becomes that parity's share alone; other entries go whole.
    fn piece_descriptor(&self, entry: &EntryDescriptor, parity: usize) -> EntryDescriptor {
        if entry.kind == EntryKind::PartialParity && self.geometry.parity_chunks() == 2 {
            let data = entry.writes[0];
            EntryDescriptor {
                kind: EntryKind::ParityPiece,
                stripe: entry.stripe,
                writes: smallvec::smallvec![
                    data,
                    format::WriteDescriptor {
                        column: Column::Parity(parity),
                        ..data
                    },
                ],
            }
        } else {
            entry.clone()
        }
    }

    /// Seals the oldest open entries into a batch and starts writing it. False when it must
    /// wait (memory or ring space).
    fn seal_batch(&mut self) -> bool {
        let mut descriptors = std::mem::take(&mut self.journal.sealing_descriptors);
        let mut plan = std::mem::take(&mut self.journal.piece_plan);
        let mut count = self.gather_batch(self.batch_cap_bytes(), &mut descriptors);
        if self.plan_pieces(&descriptors, &mut plan)
            && let Some(pieces) = self.alloc_pieces(&plan)
        {
            self.journal.piece_plan = plan;
            return self.seal_gathered(count, descriptors, Copies::Pieces(pieces));
        }
        self.journal.piece_plan = plan;
        let mut total = format::batch_bytes(&descriptors);
        // Memory first, so that the batch is placed once, at the size it is written: a
        // placement in rotation moves the rotation on.
        let buffer = match self.pool.alloc(total as usize) {
            Some(buffer) => BatchBuffer::Pool(buffer),
            None => {
                // No block in the pool: the reserved batch, which holds one entry's batch at
                // least, with fewer entries if need be (the estimate behind `gather_batch` can
                // fall short of the aligned total, hence one entry as the last resort).
                let reserve_bytes = self.metadata_buffers.journal_batch_bytes() as u64;
                if total > reserve_bytes {
                    count = self.gather_batch(reserve_bytes, &mut descriptors);
                    total = format::batch_bytes(&descriptors);
                    if total > reserve_bytes && count > 1 {
                        count = self.gather_batch(0, &mut descriptors);
                        total = format::batch_bytes(&descriptors);
                    }
                }
                match self.metadata_buffers.take_journal_batch(total as usize) {
                    Some(reserve) => BatchBuffer::Reserve(reserve),
                    None => {
                        // In use by the batch before (it comes back when that one is
                        // durable), or an entry larger than any update makes.
                        self.journal.sealing_descriptors = descriptors;
                        return false;
                    }
                }
            }
        };
        let Some(places) = self.place_batch(total, 0) else {
            self.release_batch_buffer(buffer);
            self.journal.space_wanted = true;
            self.journal.sealing_descriptors = descriptors;
            return false;
        };
        if matches!(buffer, BatchBuffer::Reserve(_)) {
            self.counters.journal_reserve_batches += 1;
        }
        self.seal_gathered(count, descriptors, Copies::Whole { buffer, places })
    }

    /// Memory and ring space for each piece of `plan` (of the sizes `plan_pieces` found), or
    /// `None` (nothing held) when some piece has neither: the batch then goes whole, in
    /// rotation.
    fn alloc_pieces(&mut self, plan: &[PieceItem]) -> Option<Pieces> {
        let mut pieces = Pieces::new();
        let ring_bytes = self.journal.ring_bytes;
        let lens = std::mem::take(&mut self.journal.piece_bytes);
        for (piece, &len) in plan.chunk_by(|a, b| a.member == b.member).zip(&lens) {
            let member = piece[0].member;
            let placed = self
                .journal
                .ring(member)
                .place(ring_bytes, len, 0)
                .and_then(|start| Some((self.pool.alloc(len as usize)?, start)));
            let Some((buffer, start)) = placed else {
                for (buffer, _, _) in pieces {
                    self.release_batch_buffer(buffer);
                }
                self.journal.piece_bytes = lens;
                return None;
            };
            pieces.push((BatchBuffer::Pool(buffer), member, start));
        }
        self.journal.piece_bytes = lens;
        Some(pieces)
    }

    fn release_batch_buffer(&mut self, buffer: BatchBuffer) {
        match buffer {
            BatchBuffer::Pool(buffer) => self.pool.free(buffer),
            BatchBuffer::Reserve(slice) => self.metadata_buffers.give_journal_batch(slice.buffer),
        }
    }

    /// The first open entries that fit a batch of `cap` bytes (one at least), into
    /// `descriptors`; how many.
    fn gather_batch(&self, cap: u64, descriptors: &mut Vec<EntryDescriptor>) -> usize {
        let mut count = 0;
        let mut estimate = (format::HEADER_BYTES + 512) as u64;
        descriptors.clear();
        for entry in &self.journal.open {
            estimate += format::entry_cost_bytes(&entry.descriptor);
            if count > 0 && estimate > cap {
                break;
            }
            descriptors.push(entry.descriptor.clone());
            count += 1;
        }
        count
    }

    /// Encodes the first `count` open entries into the batch's buffers and writes them.
    fn seal_gathered(
        &mut self,
        count: usize,
        descriptors: Vec<EntryDescriptor>,
        copies: Copies,
    ) -> bool {
        let mut entries = std::mem::take(&mut self.journal.sealing_entries);
        entries.clear();
        entries.extend(self.journal.open.drain(..count));
        // Taken before this batch's number is handed out: the batch itself is not retired.
        let retired_below = self.journal.retired_below();
        let sequence = self.journal.next_sequence;
        self.journal.next_sequence += 1;
        let group_uuid = self.superblock.group_uuid;
        let mut buffers = smallvec::SmallVec::new();
        let split = matches!(copies, Copies::Pieces(_));
        let mut pending_io = 0u32;
        match copies {
            Copies::Whole { buffer, places } => {
                let header = (group_uuid, sequence, retired_below, false);
                self.encode_into(buffer, header, &descriptors, |entry, write| {
                    let entry = &entries[entry];
                    (entry.payload[write], entry.fold.map(|fold| (fold, write)))
                });
                self.start_batch_io(sequence, buffer, &places);
                pending_io = u32::try_from(places.len()).expect("copies fit u32");
                buffers.push(buffer);
            }
            Copies::Pieces(pieces) => {
                let plan = std::mem::take(&mut self.journal.piece_plan);
                let all_descriptors = std::mem::take(&mut self.journal.piece_descriptors);
                let mut at = 0;
                for (piece, (buffer, member, start)) in
                    plan.chunk_by(|a, b| a.member == b.member).zip(pieces)
                {
                    assert_eq!(piece[0].member, member, "pieces in plan order");
                    let piece_descriptors = &all_descriptors[at..at + piece.len()];
                    at += piece.len();
                    let header = (group_uuid, sequence, retired_below, true);
                    self.encode_into(buffer, header, piece_descriptors, |index, write| {
                        let item = piece[index];
                        // A parity piece's one payload is its parity's share.
                        let which = if piece_descriptors[index].kind == EntryKind::ParityPiece {
                            item.parity
                        } else {
                            write
                        };
                        let entry = &entries[item.entry];
                        (entry.payload[which], entry.fold.map(|fold| (fold, which)))
                    });
                    self.start_batch_io(sequence, buffer, &[(member, start)]);
                    pending_io += 1;
                    buffers.push(buffer);
                }
                self.journal.piece_plan = plan;
                self.journal.piece_descriptors = all_descriptors;
            }
        }
        let mut intents = smallvec::SmallVec::new();
        let mut partials = smallvec::SmallVec::new();
        let mut ops = smallvec::SmallVec::new();
        for entry in &entries {
            let stripe = entry.descriptor.stripe;
            match entry.descriptor.kind {
                EntryKind::Intent | EntryKind::SuppliedIntent => {
                    intents.push(stripe);
                    self.journal.intents.insert(stripe, sequence);
                }
                EntryKind::PartialParity => {
                    let write = entry.descriptor.writes[0];
                    let Column::Data(index) = write.column else {
                        unreachable!("a partial parity entry names a data column")
                    };
                    partials.push(stripe);
                    self.journal
                        .partials
                        .entry(stripe)
                        .or_default()
                        .push(UnretiredPartial {
                            sequence,
                            index,
                            start_bytes: write.within_bytes,
                            end_bytes: write.within_bytes + write.len_bytes,
                        });
                }
                EntryKind::Redo => {
                    self.journal.redo_sequences.insert(stripe, sequence);
                }
                EntryKind::ParityPiece => unreachable!("open entries are whole"),
            }
            self.journal.region_sequences.insert(entry.region, sequence);
            ops.push(entry.op);
            if let Some(op) = self.ops.get_mut(entry.op) {
                op.journal_sequence = Some(sequence);
            }
        }
        self.counters.journal_batches += 1;
        self.counters.journal_entries += entries.len() as u64;
        entries.clear();
        self.journal.sealing_entries = entries;
        self.journal.sealing_descriptors = descriptors;
        self.journal.batches.insert(
            sequence,
            BatchState {
                stage: BatchStage::Committing,
                ops_left: u32::try_from(ops.len()).expect("ops fit u32"),
                ops,
                pending_io,
                buffers,
                copies_ok: 0,
                pieces: split,
                carried_retired_below: retired_below,
                intents,
                partials,
            },
        );
        self.journal.committing += 1;
        true
    }

    /// Encodes a batch or piece with header fields (group, sequence, retired below, piece)
    /// into `buffer`. `payload(entry, write)` names each payload's bytes, copied in, or for a
    /// partial parity entry the new parity and the fold that makes the share from it, computed
    /// in place first.
    fn encode_into(
        &mut self,
        buffer: BatchBuffer,
        (group_uuid, sequence, retired_below, piece): (Uuid, u64, u64, bool),
        descriptors: &[EntryDescriptor],
        payload: impl Fn(usize, usize) -> (BufferSlice, Option<(Fold, usize)>),
    ) {
        let full = buffer.slice(&self.pool);
        let mut shares = std::mem::take(&mut self.journal.share_slots);
        shares.clear();
        format::for_each_payload(descriptors, |entry, write, at, len| {
            if let (parity, Some((fold, which))) = payload(entry, write) {
                shares.push((fold, which, parity, full.sub(at, len)));
            }
        });
        for &(fold, which, parity, slot) in &shares {
            self.write_share(fold, which, parity, slot);
        }
        self.journal.share_slots = shares;
        let mut access = self.pool.access();
        let out = access.get_mut(full);
        format::encode_batch(
            out,
            group_uuid,
            sequence,
            retired_below,
            piece,
            descriptors,
            |entry, write, bytes| {
                if let (source, None) = payload(entry, write) {
                    access.copy_into(source, bytes);
                }
            },
        );
    }

    fn start_batch_io(&mut self, sequence: u64, buffer: BatchBuffer, places: &[(usize, u64)]) {
        let slice = buffer.slice(&self.pool);
        let len = slice.len() as u64;
        for &(member, start) in places {
            let ring_bytes = self.journal.ring_size(member);
            self.journal
                .ring(member)
                .push(ring_bytes, sequence, start, len);
            self.counters.journal_bytes += len;
            let offset_bytes = self.journal.offset_bytes + start;
            self.issue(
                member,
                MemberOp::Write {
                    offset_bytes,
                    buffer: slice,
                    fua: true,
                },
                Owner::Journal { sequence },
            );
        }
    }

    /// Records the current retirement point in the superblock, so ring space below it can be
    /// reused (and zero-fills may go ahead) even when no batch is written to carry it.
    fn write_checkpoint(&mut self) -> bool {
        if self.journal.checkpoint.is_some() {
            return false;
        }
        let floor = self.journal.retired_below();
        self.superblock.journal_floor_sequence = self.superblock.journal_floor_sequence.max(floor);
        let generation = self.request_superblock_update();
        self.journal.checkpoint = Some((generation, floor));
        true
    }

    /// A checkpoint's superblock is durable: its floor is the durable retirement point.
    fn checkpoint_durable(&mut self) -> bool {
        let Some((generation, floor)) = self.journal.checkpoint else {
            return false;
        };
        if self.meta.durable_generation < generation {
            return false;
        }
        self.journal.checkpoint = None;
        self.journal.space_wanted = false;
        self.journal.checkpoint_wanted = false;
        self.advance_durable_floor(floor);
        true
    }

    fn advance_durable_floor(&mut self, floor: u64) {
        if floor <= self.journal.durable_retired_below {
            return;
        }
        self.journal.durable_retired_below = floor;
        for ring in &mut self.journal.rings {
            ring.reclaim(floor);
        }
        self.journal
            .region_sequences
            .retain(|_, &mut newest| newest >= floor);
        self.journal
            .redo_sequences
            .retain(|_, &mut newest| newest >= floor);
    }

    /// Completion of a batch copy's FUA write: one durable copy, or none if it failed or its
    /// member failed meanwhile (replay would not read it). A FUA write rather than a write
    /// and a flush: one round trip to the device instead of two, and a flush would also wait
    /// for the member's in-place writes, which the batch does not need.
    pub(super) fn journal_io_done(
        &mut self,
        sequence: u64,
        member: usize,
        result: Result<(), MemberError>,
    ) {
        let failed = self.members.list[member].is_failed();
        let batch = self
            .journal
            .batches
            .get_mut(&sequence)
            .expect("batch in flight");
        batch.pending_io -= 1;
        if result.is_ok() && !failed {
            batch.copies_ok += 1;
        }
        if batch.pending_io > 0 {
            return;
        }
        // Pieces whose members all failed held entries of stripes whose parity members all
        // failed: their data chunks are whole, and the entries not needed.
        if batch.copies_ok == 0
            && !batch.pieces
            && self.members.group_state(&self.geometry) != GroupState::Failed
            && let [buffer] = batch.buffers[..]
        {
            // Every copy failed (the journal device died under it): write the batch again
            // where the journal now lives, so no in-place write goes out unjournaled.
            let len = buffer.slice(&self.pool).len() as u64;
            if let Some(places) = self.place_batch(len, 0) {
                let batch = self.journal.batches.get_mut(&sequence).expect("batch");
                batch.pending_io = u32::try_from(places.len()).expect("copies fit u32");
                self.start_batch_io(sequence, buffer, &places);
                return;
            }
        }
        self.batch_durable(sequence);
    }

    /// Every copy of a batch is written with FUA (or its member failed, which the group's
    /// reduced redundancy accounts for): its ops may write in place.
    fn batch_durable(&mut self, sequence: u64) {
        self.journal.committing -= 1;
        let batch = self
            .journal
            .batches
            .get_mut(&sequence)
            .expect("batch in flight");
        batch.stage = BatchStage::Durable;
        let buffers = std::mem::take(&mut batch.buffers);
        let carried = batch.carried_retired_below;
        let ops = batch.ops.clone(); // inline for batches of up to 8 entries: no allocation
        let empty = batch.ops_left == 0;
        let (pieces, copies_ok) = (batch.pieces, batch.copies_ok);
        for buffer in buffers {
            self.release_batch_buffer(buffer);
        }
        if pieces {
            self.counters.journal_home_batches += 1;
        } else if copies_ok > 0 {
            self.advance_durable_floor(carried);
        }
        if empty {
            // Unreachable today (an op outlives its batch's commit), kept whole anyway: a
            // batch forgotten without its stripes would leave later writes waiting on them.
            self.forget_batch(sequence);
        }
        for op in ops {
            if let Some(entry) = self.ops.get_mut(op) {
                entry.journal_committed = true;
                self.ready.push_back(op);
            }
        }
    }

    /// An op's in-place writes finished.
    pub(super) fn journal_op_done(&mut self, sequence: u64) {
        let epoch = self.regions.flush_epoch_started();
        let batch = self
            .journal
            .batches
            .get_mut(&sequence)
            .expect("an op's batch is live until the op finishes");
        batch.ops_left -= 1;
        if batch.ops_left == 0 {
            batch.stage = BatchStage::Done { done_epoch: epoch };
            self.journal.done_batches += 1;
        }
    }

    /// A flush of every data member finished: batches done before it started are retired.
    pub(super) fn journal_flush_done(&mut self, epoch: u64) {
        self.journal.flush_running = false;
        if self.failure_pending() {
            // Replay must still find these entries if the failure is lost with the power.
            return;
        }
        let retired: Vec<u64> = self
            .journal
            .batches
            .iter()
            .filter(|(_, batch)| {
                matches!(batch.stage, BatchStage::Done { done_epoch } if done_epoch < epoch)
            })
            .map(|(&sequence, _)| sequence)
            .collect();
        for sequence in retired {
            self.journal.done_batches -= 1;
            self.forget_batch(sequence);
        }
        let waiters = std::mem::take(&mut self.journal.intent_waiters);
        self.ready.extend(waiters);
    }

    /// Drops a batch and what it told about its stripes (full-stripe intents and partial
    /// parity entries that later writes wait on).
    fn forget_batch(&mut self, sequence: u64) {
        let batch = self
            .journal
            .batches
            .remove(&sequence)
            .expect("a live batch");
        for stripe in batch.intents {
            if self.journal.intents.get(&stripe) == Some(&sequence) {
                self.journal.intents.remove(&stripe);
            }
        }
        for stripe in batch.partials {
            if let Some(partials) = self.journal.partials.get_mut(&stripe) {
                partials.retain(|partial| partial.sequence != sequence);
                if partials.is_empty() {
                    self.journal.partials.remove(&stripe);
                }
            }
        }
    }

    /// Releases the writes an op held back while its entry was committed.
    pub(super) fn release_held_writes(&mut self, id: OpId, op: &mut super::stripe::StripeOp) {
        op.hold_writes = false;
        let mut held = std::mem::take(&mut op.held_writes);
        let group_failed = self.members.group_state(&self.geometry) == GroupState::Failed;
        // Released without a batch because the group failed: nothing may be written in place,
        // since a crash before the failure is recorded could bring the group back and replay
        // would not know these writes (the request fails with EIO).
        if op.journal_sequence.is_some() || !group_failed {
            for (member, command) in held.drain(..) {
                if self.members.list[member].is_failed() {
                    continue;
                }
                self.op_issue(id, op, member, command);
            }
        }
        held.clear();
        // Kept for the op's next use (ops are reused): the list keeps its capacity.
        op.held_writes = held;
        op.stage = Stage::Writing;
    }
}

/// Whether an update writing `fragments` computes parity over part of `partial`'s range for a
/// column other than the partial's own. Parity is computed over the span of the fragments.
fn meets(partial: &UnretiredPartial, fragments: &[Fragment]) -> bool {
    let start = fragments.iter().map(|f| f.range.start_bytes).min();
    let end = fragments.iter().map(|f| f.range.end_bytes).max();
    let (Some(start), Some(end)) = (start, end) else {
        return false;
    };
    let overlaps = start < partial.end_bytes && partial.start_bytes < end;
    let own_column_only = fragments.iter().all(|f| f.index == partial.index);
    overlaps && !own_column_only
}
