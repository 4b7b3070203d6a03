//! Stripe operations: everything that must see a stable stripe runs as one of these, holding
//! the stripe lock — host writes (with coalescing), recovery of unreadable read pieces,
//! rebuild steps and resync steps.
//!
//! Each op walks the same stages: wait for the lock (`Queued`, or `Gathering` while a partial
//! sequential write waits for the rest of its stripe), pass the region gate, plan, read, compute,
//! write, finish. A read error during `Reading` re-plans with that member treated as lost (or,
//! for a resync or a rebuild's salvage, with that chunk read again sector by sector:
//! `salvage.rs`).

use super::host::ReadPiece;
use super::slab::Key;
use super::{Engine, GroupEvent, GroupState, HostError, MemberError, MemberOp, OpId, Owner};
use crate::geometry::{Column, MAX_MEMBERS};
use crate::journal::EntryKind;
use crate::plan::{self, ChunkRange, PlanColumn, PlanError, Recovery, StripeWrite, WriteStrategy};
use crate::superblock::BadRange;
use tessera_buffer::{BufferId, BufferSlice};

/// A piece of a host write that falls in one data chunk of the op's stripe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fragment {
    pub request: Key,
    pub index: usize,
    pub range: ChunkRange,
    pub buffer: BufferSlice,
}

/// A host read piece that needs recovery.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecoverPiece {
    request: Key,
    piece: ReadPiece,
    target: BufferSlice,
    /// A member the piece must not be read from.
    repair_member: Option<usize>,
    /// Write what is recovered back to `repair_member` (it failed the read).
    rewrite: bool,
    /// The member a mirrored piece was read from, once planned.
    read_from: Option<usize>,
}

pub(crate) enum Kind {
    Write {
        fragments: Vec<Fragment>,
    },
    Recover {
        pieces: Vec<RecoverPiece>,
    },
    /// Check a stripe's redundancy (and with `repair`, fix what disagrees); read errors are
    /// always repaired.
    Scrub {
        repair: bool,
    },
    Rebuild {
        target: usize,
        column: Column,
        row: u64,
        target_offset_bytes: u64,
    },
    Resync,
}

impl Kind {
    pub(crate) fn write(fragments: Vec<Fragment>) -> Kind {
        Kind::Write { fragments }
    }

    pub(crate) fn recover(
        request: Key,
        piece: ReadPiece,
        target: BufferSlice,
        repair_member: Option<usize>,
        rewrite: bool,
    ) -> Kind {
        Kind::Recover {
            pieces: vec![RecoverPiece {
                request,
                piece,
                target,
                repair_member,
                rewrite,
                read_from: None,
            }],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Waiting for the stripe lock.
    Queued,
    /// Holding the lock, waiting briefly for more of a sequential stream.
    Gathering {
        until_us: u64,
    },
    Gate,
    Plan,
    Reading,
    /// Waiting for handed-out parity work (`Command::Compute`).
    Offloading,
    Compute,
    /// Waiting for the op's journal entry to be durable before writing in place.
    Journal,
    Writing,
    Done,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum IoPurpose {
    Read,
    Write,
    /// One sector of data column `index` read alone, to find which sectors of a chunk that
    /// failed to read are really lost.
    SectorRead {
        index: usize,
        sector: u32,
    },
}

/// Buffers of a stripe over a chunk range: one per data chunk and per parity chunk read, and
/// the recovery that fills in lost data chunks.
#[derive(Default)]
pub(super) struct Image {
    pub(super) range: Option<ChunkRange>,
    pub(super) data: [Option<BufferSlice>; MAX_MEMBERS],
    pub(super) parity: [Option<BufferSlice>; 2],
    pub(super) recovery: Option<Recovery>,
}

/// What the plan decided, for the compute stage.
// Ops live in a slab, allocated once per op; boxing the large variant would add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Work {
    None,
    /// Every readable copy of a mirrored chunk: (member, device offset, buffer).
    Copies(Vec<(usize, u64, BufferSlice)>),
    /// A parity-level write.
    ParityWrite {
        strategy: WriteStrategy,
        range: ChunkRange,
        /// Per data chunk: a scratch buffer and the chunk offset of its first byte.
        data: [Option<(BufferSlice, u64)>; MAX_MEMBERS],
        /// Old parity (read-modify-write: updated in place and written back).
        parity_old: [Option<BufferSlice>; 2],
        /// New parity (reconstruct-write).
        parity_new: [Option<BufferSlice>; 2],
        image: Image,
    },
    /// An image of the stripe (recovery, rebuild, resync), or a copy read from one member
    /// (`source`: the buffer and the member it came from), plus parity computed from it.
    Chunk {
        image: Image,
        source: Option<(BufferSlice, usize)>,
        parity_out: [Option<BufferSlice>; 2],
    },
}

/// How many finished ops (and fragment lists) are kept for reuse: enough for a deep queue of
/// small writes, few enough that a burst of large ones does not pin memory.
const SPARE_OPS: usize = 256;

/// A stripe update's parity writes: which parity, its new contents, and the chunk offset of
/// their first byte.
type ParityWrites = smallvec::SmallVec<[(usize, BufferSlice, u64); 2]>;

/// Pieces of data columns a replayed supplied intent gives: data index, offset within the
/// chunk, contents.
pub(super) type SuppliedColumns = Vec<(usize, u64, BufferSlice)>;

pub(crate) struct StripeOp {
    pub stripe: u64,
    pub region: u64,
    pub stage: Stage,
    pub kind: Kind,
    pub(super) pending_io: u32,
    pub(super) read_failed: bool,
    /// Members whose reads failed during this op (treated as lost for it).
    pub(super) unreadable: u64,
    /// Data columns read sector by sector (a chunk that failed to read on a member still
    /// present, in a resync or a rebuild's salvage), and the sectors of them that failed:
    /// (data index, sector in the chunk).
    pub(super) sector_columns: u64,
    pub(super) bad_sectors: Vec<(usize, u32)>,
    pub(super) entered: bool,
    pub(super) written_members: u64,
    pub(super) scratch: Vec<BufferId>,
    pub(super) work: Work,
    /// The op could not do its job because data is lost beyond redundancy.
    pub(super) lost_data: bool,
    /// Data chunks that could not be recovered (for recording what a rebuild lost).
    pub(super) lost_mask: u64,
    /// A resync that had to leave its stripe unsynced (a data chunk is unreadable).
    pub(super) skipped: bool,
    /// A rebuild that lost data beyond redundancy is zeroing the lost chunks and making parity
    /// agree with what is left, so the stripe's redundancy stays usable for the rest.
    pub(super) salvaging: bool,
    /// Member writes computed but held back until the journal entry is durable.
    pub(super) hold_writes: bool,
    pub(super) held_writes: Vec<(usize, MemberOp)>,
    /// The update as journal entry writes: column, offset within the chunk, contents.
    pub(super) journal_writes: Vec<(Column, u64, BufferSlice)>,
    /// A write of every data chunk whole (journaled as an intent, without contents, or with
    /// the contents of the data columns that have no member: `journal_writes` then holds
    /// only those).
    pub(super) full_stripe: bool,
    /// The batch holding this op's entry, and whether it is durable.
    pub(super) journal_sequence: Option<u64>,
    pub(super) journal_committed: bool,
    /// `journal_writes` is a partial parity entry (one data column and the parity of the
    /// others), not a redo entry: how its shares are made from the new parity it names.
    pub(super) journal_fold: Option<super::journal::Fold>,
    /// A parity write that went out without a journal entry.
    pub(super) unjournaled: bool,
    /// A resync run by journal replay (not by background resync).
    pub(super) journal_replay: bool,
    /// For a resync replaying a supplied intent: the new contents of the data columns that had
    /// no member when the write was journaled (data index, offset within the chunk, slice of
    /// the batch), used instead of reading or recovering those columns, and written to a
    /// column that has a member again.
    pub(super) supplied: SuppliedColumns,
    /// The op's parity work was done outside the engine; the compute stage must not redo it.
    pub(super) computed: bool,
}

impl StripeOp {
    pub(crate) fn new(stripe: u64, region: u64, kind: Kind) -> StripeOp {
        StripeOp {
            stripe,
            region,
            stage: Stage::Queued,
            kind,
            pending_io: 0,
            read_failed: false,
            unreadable: 0,
            sector_columns: 0,
            bad_sectors: Vec::new(),
            entered: false,
            written_members: 0,
            scratch: Vec::new(),
            work: Work::None,
            lost_data: false,
            lost_mask: 0,
            skipped: false,
            salvaging: false,
            hold_writes: false,
            held_writes: Vec::new(),
            journal_writes: Vec::new(),
            full_stripe: false,
            journal_sequence: None,
            journal_committed: false,
            journal_fold: None,
            unjournaled: false,
            journal_replay: false,
            supplied: Vec::new(),
            computed: false,
        }
    }

    /// This op made new for `stripe`, keeping the capacity of its lists.
    fn reuse(&mut self, stripe: u64, region: u64, kind: Kind) {
        let scratch = std::mem::take(&mut self.scratch);
        let mut held_writes = std::mem::take(&mut self.held_writes);
        let mut journal_writes = std::mem::take(&mut self.journal_writes);
        let mut supplied = std::mem::take(&mut self.supplied);
        assert!(scratch.is_empty(), "an op is reused with its scratch freed");
        held_writes.clear();
        journal_writes.clear();
        supplied.clear();
        *self = StripeOp {
            scratch,
            held_writes,
            journal_writes,
            supplied,
            ..StripeOp::new(stripe, region, kind)
        };
    }

    /// Whether data column `index` is being read sector by sector.
    pub(super) fn reads_by_sector(&self, index: usize) -> bool {
        self.sector_columns & (1 << index) != 0
    }

    /// Whether a replayed supplied intent gives data column `index`.
    pub(super) fn supplies(&self, index: usize) -> bool {
        self.supplied
            .iter()
            .any(|&(supplied, _, _)| supplied == index)
    }

    pub(crate) fn is_gathering(&self) -> bool {
        matches!(self.stage, Stage::Gathering { .. })
    }

    /// Adds write fragments if the op has not started and they neither overlap its fragments
    /// nor leave a gap inside any chunk.
    pub(crate) fn try_merge(&mut self, new: &[Fragment]) -> bool {
        if !matches!(self.stage, Stage::Queued | Stage::Gathering { .. }) {
            return false;
        }
        let Kind::Write { fragments } = &mut self.kind else {
            return false;
        };
        for fragment in new {
            let mut span = Some(fragment.range);
            for existing in fragments.iter().filter(|f| f.index == fragment.index) {
                let overlaps = existing.range.start_bytes < fragment.range.end_bytes
                    && fragment.range.start_bytes < existing.range.end_bytes;
                if overlaps {
                    return false;
                }
                span = span.map(|s| s.hull(existing.range));
            }
            let covered: u64 = fragments
                .iter()
                .filter(|f| f.index == fragment.index)
                .map(|f| f.range.len())
                .sum();
            if span.is_some_and(|s| s.len() != covered + fragment.range.len()) {
                return false;
            }
        }
        fragments.extend_from_slice(new);
        true
    }

    pub(crate) fn try_add_recovery(
        &mut self,
        request: Key,
        piece: ReadPiece,
        target: BufferSlice,
        repair_member: Option<usize>,
        rewrite: bool,
    ) -> bool {
        if self.stage != Stage::Queued {
            return false;
        }
        let Kind::Recover { pieces } = &mut self.kind else {
            return false;
        };
        pieces.push(RecoverPiece {
            request,
            piece,
            target,
            repair_member,
            rewrite,
            read_from: None,
        });
        true
    }

    /// Whether the write fragments cover every data chunk completely.
    pub(crate) fn covers_full_stripe(&self, data_chunks: usize, chunk_bytes: u64) -> bool {
        let Kind::Write { fragments } = &self.kind else {
            return false;
        };
        (0..data_chunks).all(|index| {
            fragments
                .iter()
                .filter(|f| f.index == index)
                .map(|f| f.range.len())
                .sum::<u64>()
                == chunk_bytes
        })
    }

    fn written_ranges(&self, data_chunks: usize) -> [Option<ChunkRange>; MAX_MEMBERS] {
        let mut written = [None; MAX_MEMBERS];
        if let Kind::Write { fragments } = &self.kind {
            for fragment in fragments {
                let slot: &mut Option<ChunkRange> = &mut written[fragment.index];
                *slot = Some(slot.map_or(fragment.range, |range| range.hull(fragment.range)));
            }
        }
        assert!(written[data_chunks..].iter().all(Option::is_none));
        written
    }
}

/// Result of a planning step.
pub(super) enum Planned {
    /// Reads were issued (or none were needed); go on.
    Go,
    /// No buffer space: wait.
    NoMemory,
    /// The stripe cannot be served: more lost than the redundancy.
    BeyondRedundancy,
}

impl Engine {
    pub(super) fn advance_op(&mut self, id: OpId) {
        let Some(mut op) = self.ops.take(id) else {
            return;
        };
        if self.step_op(id, &mut op) {
            self.ops.put_back(id, op);
        } else {
            self.ops.retire(id);
            self.recycle_op(op);
        }
    }

    /// A stripe op for `stripe`: a finished one reused when there is one.
    /// Admits a stripe op: it takes its stripe's lock and is made ready if the lock is free,
    /// else it waits in the lock's queue.
    pub(super) fn start_stripe_op(&mut self, op: Box<StripeOp>) -> OpId {
        let stripe = op.stripe;
        let id = self.ops.insert(op);
        if self.locks.acquire(stripe, id) {
            self.ops.get_mut(id).expect("new op").stage = Stage::Gate;
            self.ready.push_back(id);
        }
        id
    }

    pub(super) fn new_stripe_op(&mut self, stripe: u64, region: u64, kind: Kind) -> Box<StripeOp> {
        match self.spare_ops.pop() {
            Some(mut op) => {
                op.reuse(stripe, region, kind);
                op
            }
            None => Box::new(StripeOp::new(stripe, region, kind)),
        }
    }

    /// Keeps a finished op for reuse (its fragments went back in `finish_op`).
    fn recycle_op(&mut self, op: Box<StripeOp>) {
        if self.spare_ops.len() < SPARE_OPS {
            self.spare_ops.push(op);
        }
    }

    /// An empty fragment list, reused when there is one.
    pub(super) fn new_fragments(&mut self) -> Vec<Fragment> {
        self.spare_fragments.pop().unwrap_or_default()
    }

    pub(super) fn recycle_fragments(&mut self, mut fragments: Vec<Fragment>) {
        if self.spare_fragments.len() < SPARE_OPS && fragments.capacity() > 0 {
            fragments.clear();
            self.spare_fragments.push(fragments);
        }
    }

    pub(super) fn stripe_io_done(
        &mut self,
        id: OpId,
        purpose: IoPurpose,
        member: usize,
        result: Result<(), MemberError>,
    ) {
        // Only the last completion moves the op out of its slot (a large struct) to step it.
        let entry = self.ops.get_mut(id).expect("stripe op in flight");
        entry.pending_io -= 1;
        match (purpose, result) {
            (IoPurpose::Read, Err(_)) => {
                entry.unreadable |= 1 << member;
                entry.read_failed = true;
            }
            (IoPurpose::SectorRead { index, sector }, Err(_)) => {
                entry.bad_sectors.push((index, sector));
            }
            _ => {}
        }
        if entry.pending_io > 0 {
            return;
        }
        let mut op = self.ops.take(id).expect("stripe op in flight");
        let alive = self.step_op(id, &mut op);
        if alive {
            self.ops.put_back(id, op);
        } else {
            self.ops.retire(id);
            self.recycle_op(op);
        }
    }

    /// Whether an op that changes a stripe's data or parity must wait for a member's failure
    /// to be recorded (`failure_pending`; seed 24842 with `TESSERA_SIM_JOURNAL=always_on`
    /// found the hole: an update planned without a just-failed member's parity, then a power
    /// cut, and the member came back with its old parity).
    fn waits_for_failure_record(&mut self, id: OpId, op: &StripeOp) -> bool {
        let updates = match op.kind {
            Kind::Write { .. } | Kind::Resync => true,
            Kind::Scrub { repair } => repair,
            Kind::Recover { .. } | Kind::Rebuild { .. } => false,
        };
        if !updates || !self.failure_pending() {
            return false;
        }
        self.failure_waiters.push(id);
        true
    }

    /// Runs an op as far as it can go; false once it is finished.
    fn step_op(&mut self, id: OpId, op: &mut StripeOp) -> bool {
        loop {
            match op.stage {
                Stage::Queued | Stage::Gathering { .. } => return true,
                Stage::Gate => {
                    if !self.pass_gate(id, op) {
                        return true;
                    }
                }
                Stage::Plan if self.waits_for_failure_record(id, op) => {
                    return true;
                }
                Stage::Plan if self.journal_blocks_update(id, op) => {
                    return true;
                }
                Stage::Plan => match self.plan_op(id, op) {
                    Planned::Go => op.stage = Stage::Reading,
                    Planned::NoMemory => {
                        self.free_scratch(op);
                        op.work = Work::None;
                        self.memory_blocked_used_bytes =
                            self.memory_blocked_used_bytes.min(self.pool.used_bytes());
                        self.waiting_for_memory.push_back(id);
                        return true;
                    }
                    Planned::BeyondRedundancy => {
                        self.free_scratch(op);
                        self.beyond_redundancy(op);
                        let failed = self.members.group_state(&self.geometry) == GroupState::Failed;
                        if matches!(op.kind, Kind::Rebuild { .. }) && !failed && !op.salvaging {
                            op.salvaging = true;
                            op.work = Work::None;
                        } else {
                            op.stage = Stage::Done;
                        }
                    }
                },
                Stage::Reading => {
                    if op.pending_io > 0 {
                        return true;
                    }
                    if op.read_failed {
                        op.read_failed = false;
                        self.free_scratch(op);
                        op.work = Work::None;
                        op.stage = Stage::Plan;
                        continue;
                    }
                    self.zero_bad_sectors(op, &op.work);
                    if let Some(job) = self.offload_job(op) {
                        self.issue_compute(id, op, job);
                        op.stage = Stage::Offloading;
                    } else {
                        op.stage = Stage::Compute;
                    }
                }
                Stage::Offloading => {
                    if op.pending_io > 0 {
                        return true;
                    }
                    op.stage = Stage::Compute;
                }
                // Checked again here: a member that failed while the op read would be left
                // out of its writes, and until the failure is recorded a power cut brings
                // that member back with its old contents.
                Stage::Compute if self.waits_for_failure_record(id, op) => {
                    return true;
                }
                Stage::Compute => {
                    let is_write = matches!(op.kind, Kind::Write { .. });
                    op.hold_writes = self.journal_takes(is_write);
                    self.compute_op(id, op);
                    if op.hold_writes && !op.held_writes.is_empty() {
                        let writes = &op.journal_writes;
                        let kind = if op.full_stripe && !writes.is_empty() {
                            EntryKind::SuppliedIntent
                        } else if op.full_stripe {
                            EntryKind::Intent
                        } else if op.journal_fold.is_some() {
                            EntryKind::PartialParity
                        } else {
                            EntryKind::Redo
                        };
                        self.journal_append(
                            id,
                            op.stripe,
                            op.region,
                            kind,
                            writes,
                            op.journal_fold,
                        );
                        op.stage = Stage::Journal;
                    } else {
                        op.hold_writes = false;
                        op.journal_writes.clear();
                        if is_write && self.geometry.parity_chunks() > 0 && op.written_members != 0
                        {
                            op.unjournaled = true;
                            self.journal.unjournaled_writes += 1;
                        }
                        op.stage = Stage::Writing;
                    }
                }
                Stage::Journal => {
                    if !op.journal_committed {
                        return true;
                    }
                    self.release_held_writes(id, op);
                }
                Stage::Writing => {
                    if op.pending_io > 0 {
                        return true;
                    }
                    op.stage = Stage::Done;
                }
                Stage::Done => {
                    self.finish_op(id, op);
                    return false;
                }
            }
        }
    }

    /// The region gate; true when the op may go on (stage advanced).
    fn pass_gate(&mut self, id: OpId, op: &mut StripeOp) -> bool {
        match op.kind {
            Kind::Write { .. } | Kind::Scrub { repair: true } => {
                if matches!(op.kind, Kind::Scrub { .. }) && !self.regions.is_written(op.region) {
                    // Nothing to check in a region that holds no data.
                    op.stage = Stage::Done;
                    return true;
                }
                self.note_first_write();
                if self.write_gate(op.region, id) == super::regions::Gate::Wait {
                    return false;
                }
                self.regions.enter(op.region);
                op.entered = true;
                op.stage = Stage::Plan;
            }
            _ => match self.read_gate(op.region, id) {
                None => return false,
                Some(false) => {
                    // Unwritten region: reads are zeroes, background work has nothing to do.
                    if let Kind::Recover { pieces } = &op.kind {
                        for piece in pieces {
                            self.pool.bytes_mut(piece.target).fill(0);
                        }
                    }
                    op.stage = Stage::Done;
                }
                Some(true) => {
                    self.regions.enter(op.region);
                    op.entered = true;
                    op.stage = Stage::Plan;
                }
            },
        }
        true
    }

    pub(super) fn op_issue(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        member: usize,
        command: MemberOp,
    ) {
        let purpose = match command {
            MemberOp::Read { .. } => IoPurpose::Read,
            _ => IoPurpose::Write,
        };
        if matches!(
            command,
            MemberOp::Write { .. } | MemberOp::WriteZeroes { .. }
        ) {
            op.written_members |= 1 << member;
            if op.hold_writes {
                op.held_writes.push((member, command));
                return;
            }
        }
        op.pending_io += 1;
        self.issue(member, command, Owner::Stripe { op: id, purpose });
    }

    /// Issues a write of `buffer` at `offset_bytes` of `member` for the op (held back while
    /// the op's journal entry is not yet durable).
    pub(super) fn op_write(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        member: usize,
        offset_bytes: u64,
        buffer: BufferSlice,
    ) {
        // Zeroes (a host's write-zeroes, a salvaged chunk) need not cross to a member that
        // can zero the range itself.
        let command = if buffer.buffer == self.zero_buffer {
            MemberOp::WriteZeroes {
                offset_bytes,
                buffer,
            }
        } else {
            MemberOp::Write {
                offset_bytes,
                buffer,
                fua: false,
            }
        };
        self.op_issue(id, op, member, command);
    }

    /// Issues a read of `buffer`'s length at `offset_bytes` of `member` for the op.
    pub(super) fn op_read(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        member: usize,
        offset_bytes: u64,
        buffer: BufferSlice,
    ) {
        self.op_issue(
            id,
            op,
            member,
            MemberOp::Read {
                offset_bytes,
                buffer,
                for_host: None,
            },
        );
    }

    pub(super) fn scratch(&mut self, op: &mut StripeOp, len_bytes: u64) -> Option<BufferSlice> {
        // An eighth of the arena stays free for metadata (superblock and bitmap writes), which
        // must never wait for data I/O to free space.
        let limit = self.pool.capacity_bytes() - self.pool.capacity_bytes() / 8;
        if self.pool.used_bytes() + len_bytes as usize > limit {
            return None;
        }
        let buffer = self.pool.alloc(len_bytes as usize)?;
        op.scratch.push(buffer);
        Some(self.pool.full(buffer))
    }

    /// Fills every slot with a scratch buffer of `len_bytes`; false when the pool is short (the
    /// op then waits for memory, its scratch freed).
    pub(super) fn scratch_all(
        &mut self,
        op: &mut StripeOp,
        slots: &mut [Option<BufferSlice>],
        len_bytes: u64,
    ) -> bool {
        for slot in slots {
            let Some(slice) = self.scratch(op, len_bytes) else {
                return false;
            };
            *slot = Some(slice);
        }
        true
    }

    fn free_scratch(&mut self, op: &mut StripeOp) {
        assert_eq!(op.pending_io, 0, "scratch freed under I/O");
        for buffer in op.scratch.drain(..) {
            self.pool.free(buffer);
        }
    }

    /// Whether a data or parity column of the op's stripe can be read, and from where.
    pub(super) fn readable_column(&self, op: &StripeOp, column: Column) -> Option<(usize, u64)> {
        self.column_reader(op.stripe, column)
            .filter(|(member, _)| op.unreadable & (1 << member) == 0)
    }

    fn plan_op(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        if self.members.group_state(&self.geometry) == GroupState::Failed {
            return Planned::BeyondRedundancy;
        }
        match op.kind {
            Kind::Write { .. } if self.geometry.parity_chunks() == 0 => {
                op.work = Work::None;
                Planned::Go
            }
            Kind::Write { .. } => self.plan_parity_write(id, op),
            Kind::Recover { .. } if self.geometry.parity_chunks() == 0 => {
                self.plan_mirror_recover(id, op)
            }
            Kind::Recover { .. } => {
                let Kind::Recover { pieces } = &op.kind else {
                    unreachable!()
                };
                let range = pieces
                    .iter()
                    .map(|p| {
                        ChunkRange::new(
                            p.piece.within_bytes,
                            p.piece.within_bytes + p.piece.len_bytes,
                        )
                    })
                    .reduce(ChunkRange::hull)
                    .expect("a recovery has pieces");
                // A piece whose member failed the read is recovered around that member; a piece
                // queued because its column was unavailable is read directly if it is back.
                let mut lost = 0u64;
                for piece in pieces {
                    let reader = self
                        .column_reader(op.stripe, Column::Data(piece.piece.index))
                        .map(|(member, _)| member);
                    if piece.repair_member.is_some() && reader == piece.repair_member {
                        lost |= 1 << piece.piece.index;
                    }
                }
                match self.plan_image(id, op, range, lost, None, false) {
                    // No redundancy left to go around the member (another failed meanwhile):
                    // read it again, since a scrub or another read may have rewritten the
                    // sector by now. A second failure marks it unreadable for good.
                    Planned::BeyondRedundancy if lost != 0 => {
                        self.plan_image(id, op, range, 0, None, false)
                    }
                    planned => planned,
                }
            }
            Kind::Rebuild { .. } if op.salvaging => self.plan_salvage(id, op),
            Kind::Rebuild { .. } => self.plan_rebuild(id, op),
            Kind::Resync => self.plan_resync(id, op),
            Kind::Scrub { .. } => self.plan_scrub(id, op),
        }
    }

    /// Allocates an image of the stripe over `range` and reads what recovering the data
    /// chunks in `forced_lost` (plus any unreadable ones) needs. `skip_parity` is a parity
    /// column that must not be read (the one being rebuilt). With `parity_outputs`, buffers
    /// for freshly computed parity are allocated too. Every buffer is allocated before any
    /// read is issued, so running out of space never strands I/O.
    pub(super) fn plan_image(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        range: ChunkRange,
        forced_lost: u64,
        skip_parity: Option<usize>,
        parity_outputs: bool,
    ) -> Planned {
        let data_chunks = self.geometry.data_chunks();
        let parity_chunks = self.geometry.parity_chunks();
        let mut data_readable = [false; MAX_MEMBERS];
        for (index, readable) in data_readable.iter_mut().enumerate().take(data_chunks) {
            *readable = op.supplies(index)
                || op.reads_by_sector(index)
                || (forced_lost & (1 << index) == 0
                    && self.readable_column(op, Column::Data(index)).is_some());
        }
        let mut parity_readable = [false; 2];
        for (which, readable) in parity_readable.iter_mut().enumerate().take(parity_chunks) {
            *readable = skip_parity != Some(which)
                && self.readable_column(op, Column::Parity(which)).is_some();
        }
        op.lost_mask = (0..data_chunks)
            .filter(|&index| !data_readable[index])
            .fold(0, |mask, index| mask | (1 << index));
        let recovery = match plan::plan_recovery(
            &data_readable[..data_chunks],
            &parity_readable[..parity_chunks],
        ) {
            Ok(recovery) => recovery,
            Err(PlanError::BeyondRedundancy) => {
                return Planned::BeyondRedundancy;
            }
        };
        // After an unclean shutdown, parity of a region not yet resynced may disagree with its
        // data: recovering through it could return wrong data, so the data counts as lost.
        let replayed_intent = op.journal_replay && matches!(op.kind, Kind::Resync);
        if recovery.is_some()
            && !self.regions.stripe_in_sync(op.region, op.stripe)
            && !replayed_intent
        {
            return Planned::BeyondRedundancy;
        }
        let mut image = Image {
            range: Some(range),
            recovery,
            ..Image::default()
        };
        if !self.scratch_all(op, &mut image.data[..data_chunks], range.len()) {
            return Planned::NoMemory;
        }
        let used_parity: &[usize] = match recovery {
            None => &[],
            Some(Recovery::FromP { .. }) => &[0],
            Some(Recovery::FromQ { .. }) => &[1],
            Some(Recovery::FromPq { .. }) => &[0, 1],
        };
        for &which in used_parity {
            let Some(slice) = self.scratch(op, range.len()) else {
                return Planned::NoMemory;
            };
            image.parity[which] = Some(slice);
        }
        let mut parity_out = [None; 2];
        if parity_outputs && !self.scratch_all(op, &mut parity_out[..parity_chunks], range.len()) {
            return Planned::NoMemory;
        }
        for &(index, within_bytes, piece) in &op.supplied {
            let at = (within_bytes - range.start_bytes) as usize;
            let slot = image.data[index].expect("buffer");
            self.copy_slice(piece, slot.sub(at, piece.len()));
        }
        let mut reads = Vec::new();
        for index in 0..data_chunks {
            if !data_readable[index] || op.supplies(index) {
                continue;
            }
            let buffer = image.data[index].expect("buffer");
            if op.reads_by_sector(index) {
                let at = self
                    .column_reader(op.stripe, Column::Data(index))
                    .expect("a column read by sector has a member");
                self.op_read_sectors(id, op, index, (at.0, at.1 + range.start_bytes), buffer);
                continue;
            }
            let (member, offset) = self
                .readable_column(op, Column::Data(index))
                .expect("readable column");
            reads.push((member, offset + range.start_bytes, buffer));
        }
        for &which in used_parity {
            let (member, offset) = self
                .readable_column(op, Column::Parity(which))
                .expect("readable column");
            reads.push((
                member,
                offset + range.start_bytes,
                image.parity[which].expect("buffer"),
            ));
        }
        self.issue_reads(id, op, reads);
        op.work = Work::Chunk {
            image,
            source: None,
            parity_out,
        };
        Planned::Go
    }

    fn plan_parity_write(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let data_chunks = self.geometry.data_chunks();
        let parity_chunks = self.geometry.parity_chunks();
        let written = op.written_ranges(data_chunks);
        let mut data_readable = [false; MAX_MEMBERS];
        for (index, readable) in data_readable.iter_mut().enumerate().take(data_chunks) {
            *readable = self.readable_column(op, Column::Data(index)).is_some();
        }
        let mut parity_readable = [false; 2];
        let mut parity_writable = [false; 2];
        for which in 0..parity_chunks {
            parity_readable[which] = self.readable_column(op, Column::Parity(which)).is_some();
            parity_writable[which] = !self
                .column_writers(op.stripe, Column::Parity(which))
                .is_empty();
        }
        let shape = StripeWrite {
            written: &written[..data_chunks],
            data_readable: &data_readable[..data_chunks],
            parity_readable: &parity_readable[..parity_chunks],
            parity_writable: &parity_writable[..parity_chunks],
        };
        let plan = match plan::plan_write(shape) {
            Ok(plan) => plan,
            Err(PlanError::BeyondRedundancy) => return Planned::BeyondRedundancy,
        };
        let range = plan.parity_range;
        let mut data: [Option<(BufferSlice, u64)>; MAX_MEMBERS] = [None; MAX_MEMBERS];
        let mut parity_old = [None; 2];
        let mut parity_new = [None; 2];
        let mut image = Image::default();
        match plan.strategy {
            WriteStrategy::DataOnly => {}
            WriteStrategy::ReconstructWrite => {
                let Kind::Write { fragments } = &op.kind else {
                    unreachable!()
                };
                // Data chunks written by exactly one fragment covering the whole parity range:
                // their new data is the source as it is, with no scratch copy.
                let mut written_whole = 0u64;
                for index in 0..data_chunks {
                    let single = fragments.iter().filter(|f| f.index == index).count() == 1
                        && fragments
                            .iter()
                            .any(|f| f.index == index && f.range == range);
                    if single {
                        written_whole |= 1 << index;
                    }
                }
                for index in 0..data_chunks {
                    if written_whole & (1 << index) == 0 {
                        let Some(slice) = self.scratch(op, range.len()) else {
                            return Planned::NoMemory;
                        };
                        data[index] = Some((slice, range.start_bytes));
                    }
                }
                for slot in parity_new.iter_mut().take(parity_chunks) {
                    let Some(slice) = self.scratch(op, range.len()) else {
                        return Planned::NoMemory;
                    };
                    *slot = Some(slice);
                }
            }
            WriteStrategy::ReadModifyWrite => {
                for index in 0..data_chunks {
                    if let Some(w) = written[index] {
                        let Some(slice) = self.scratch(op, w.len()) else {
                            return Planned::NoMemory;
                        };
                        data[index] = Some((slice, w.start_bytes));
                    }
                }
                for which in 0..parity_chunks {
                    if parity_writable[which] || which == 0 {
                        let Some(slice) = self.scratch(op, range.len()) else {
                            return Planned::NoMemory;
                        };
                        parity_old[which] = Some(slice);
                    }
                }
            }
            WriteStrategy::RecoverThenWrite => {
                let mut lost = 0u64;
                for (index, readable) in data_readable.iter().enumerate().take(data_chunks) {
                    if !readable {
                        lost |= 1 << index;
                    }
                }
                match self.plan_image(id, op, range, lost, None, true) {
                    Planned::Go => {}
                    other => return other,
                }
                let Work::Chunk {
                    image: planned,
                    parity_out,
                    ..
                } = std::mem::replace(&mut op.work, Work::None)
                else {
                    unreachable!("plan_image leaves a chunk image")
                };
                image = planned;
                parity_new = parity_out;
            }
        }
        // Reads land in the buffers above, at their offset from each buffer's first byte.
        if plan.strategy != WriteStrategy::RecoverThenWrite {
            for (column, piece) in &plan.reads {
                let (member, offset) = match column {
                    PlanColumn::Data(index) => self.readable_column(op, Column::Data(*index)),
                    PlanColumn::Parity(which) => self.readable_column(op, Column::Parity(*which)),
                }
                .expect("plans read readable columns");
                let target = match column {
                    PlanColumn::Data(index) => {
                        let (buffer, base) = data[*index].expect("read target");
                        buffer.sub((piece.start_bytes - base) as usize, piece.len() as usize)
                    }
                    PlanColumn::Parity(which) => {
                        let buffer = parity_old[*which].expect("parity read target");
                        buffer.sub(
                            (piece.start_bytes - range.start_bytes) as usize,
                            piece.len() as usize,
                        )
                    }
                };
                self.op_issue(
                    id,
                    op,
                    member,
                    MemberOp::Read {
                        offset_bytes: offset + piece.start_bytes,
                        buffer: target,
                        for_host: None,
                    },
                );
            }
        }
        match plan.strategy {
            WriteStrategy::ReconstructWrite
                if plan.reads.is_empty() && range.len() == self.geometry.chunk_bytes() =>
            {
                self.counters.full_stripe_writes += 1;
            }
            WriteStrategy::ReconstructWrite => self.counters.reconstruct_writes += 1,
            WriteStrategy::ReadModifyWrite => self.counters.read_modify_writes += 1,
            _ => {}
        }
        op.work = Work::ParityWrite {
            strategy: plan.strategy,
            range,
            data,
            parity_old,
            parity_new,
            image,
        };
        Planned::Go
    }

    fn plan_mirror_recover(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let Kind::Recover { pieces } = &op.kind else {
            unreachable!()
        };
        let mut pieces = pieces.clone();
        let mut reads = Vec::new();
        // Copies awaiting resync may disagree: the first readable one answers, as resync
        // copies it (and `compute_recover` copies the answer to the others).
        let primary_only = self.regions.is_unsynced(op.region);
        for piece in &mut pieces {
            let exclude = op.unreadable | piece.repair_member.map_or(0, |m| 1 << m);
            let reader = |exclude| {
                self.data_reader(
                    op.stripe,
                    piece.piece.index,
                    piece.piece.within_bytes,
                    primary_only,
                    exclude,
                )
            };
            // With no other copy left (another mirror failed meanwhile), the avoided copy is
            // read again, as parity levels do when they cannot reconstruct: a write may have
            // repaired the sector since, and a read around trusts the caller to check. A
            // second failure (now in `op.unreadable`) makes the piece unreadable for good.
            let chosen = match reader(exclude) {
                Some(chosen) => Some(chosen),
                None => {
                    piece.rewrite = false;
                    reader(op.unreadable)
                }
            };
            match chosen {
                Some((member, offset_bytes)) => {
                    piece.read_from = Some(member);
                    reads.push((member, offset_bytes, piece.target));
                }
                None => return Planned::BeyondRedundancy,
            }
        }
        op.kind = Kind::Recover { pieces };
        self.issue_reads(id, op, reads);
        op.work = Work::None;
        Planned::Go
    }

    fn plan_rebuild(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let Kind::Rebuild { target, column, .. } = op.kind else {
            unreachable!()
        };
        let chunk = ChunkRange::new(0, self.geometry.chunk_bytes());
        // A proactive replace copies from the live member it replaces.
        let role = self.members.list[target]
            .role
            .expect("rebuild target has a role");
        let placement_offset = match column {
            Column::Data(index) => {
                let copies = self.geometry.copies();
                (0..copies)
                    .map(|copy| self.geometry.data_placement(op.stripe, index, copy))
                    .find(|placement| placement.member == role)
                    .expect("target role holds the column")
                    .offset_bytes
            }
            Column::Parity(which) => {
                self.geometry
                    .parity_placement(op.stripe, which)
                    .offset_bytes
            }
        };
        let old_holder = self
            .members
            .reader(role, placement_offset)
            .filter(|&member| member != target && op.unreadable & (1 << member) == 0);
        if self.geometry.copies() > 1 || old_holder.is_some() {
            let source = match old_holder {
                Some(member) => {
                    Some((member, self.superblock.data_offset_bytes + placement_offset))
                }
                None => {
                    let Column::Data(index) = column else {
                        unreachable!("mirrors have no parity")
                    };
                    self.data_reader(op.stripe, index, 0, false, op.unreadable | (1 << target))
                }
            };
            let Some((member, offset_bytes)) = source else {
                op.lost_mask = match column {
                    Column::Data(index) => 1 << index,
                    Column::Parity(_) => 0,
                };
                return Planned::BeyondRedundancy;
            };
            return self.plan_chunk_copy(id, op, member, offset_bytes);
        }
        match column {
            Column::Data(index) => self.plan_image(id, op, chunk, 1 << index, None, false),
            Column::Parity(which) => self.plan_image(id, op, chunk, 0, Some(which), true),
        }
    }

    /// Issues member reads, each `(member, offset_bytes, buffer)`, for the op.
    pub(super) fn issue_reads(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        reads: Vec<(usize, u64, BufferSlice)>,
    ) {
        for (member, offset_bytes, buffer) in reads {
            self.op_read(id, op, member, offset_bytes, buffer);
        }
    }

    /// Reads one whole chunk from `member`: the source a rebuild or a mirror resync copies.
    fn plan_chunk_copy(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        member: usize,
        offset_bytes: u64,
    ) -> Planned {
        let Some(buffer) = self.scratch(op, self.geometry.chunk_bytes()) else {
            return Planned::NoMemory;
        };
        self.op_read(id, op, member, offset_bytes, buffer);
        op.work = Work::Chunk {
            image: Image::default(),
            source: Some((buffer, member)),
            parity_out: [None; 2],
        };
        Planned::Go
    }

    fn plan_resync(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let chunk = ChunkRange::new(0, self.geometry.chunk_bytes());
        if self.geometry.copies() > 1 {
            // Mirrors: the first readable copy is the truth (reads of unsynced regions use it
            // too), copied onto the others.
            let Some((member, offset_bytes)) =
                self.data_reader(op.stripe, 0, 0, true, op.unreadable)
            else {
                return Planned::BeyondRedundancy;
            };
            return self.plan_chunk_copy(id, op, member, offset_bytes);
        }
        let data_chunks = self.geometry.data_chunks();
        let any_gone = (0..data_chunks).any(|index| {
            !op.supplies(index) && self.column_reader(op.stripe, Column::Data(index)).is_none()
        });
        // A chunk that failed to read on a member still present holds its data in every sector
        // but the failing ones, and parity not yet resynced cannot stand in for those (a read
        // of them already fails): the chunk is read again sector by sector and only the sectors
        // that fail are lost, so the stripe is whole again and its region can be trusted
        // (journal seed 46618 found the replay case).
        op.sector_columns = self.columns_failed_on_present_members(op);
        op.bad_sectors.clear();
        // A stripe a replayed full-stripe intent names holds only the torn write's data, which
        // may read back as anything (the fault model's relaxation): a chunk of it whose member
        // is gone is taken as parity says, and the other parity made to agree, so that the
        // stripe is whole again before the region is trusted.
        if self.geometry.parity_chunks() == 0 || (any_gone && !op.journal_replay) {
            // No parity, or a lost data chunk that cannot be checked against parity: leave the
            // stripe as it is (and the region unsynced, so nothing trusts its parity).
            op.skipped = any_gone;
            op.sector_columns = 0;
            op.work = Work::None;
            return Planned::Go;
        }
        self.plan_image(id, op, chunk, 0, None, true)
    }

    fn compute_op(&mut self, id: OpId, op: &mut StripeOp) {
        match &op.kind {
            Kind::Write { .. } => self.compute_write(id, op),
            Kind::Recover { .. } => self.compute_recover(id, op),
            Kind::Rebuild { .. } if op.salvaging => self.compute_salvage(id, op),
            Kind::Rebuild { .. } => self.compute_rebuild(id, op),
            Kind::Resync => self.compute_resync(id, op),
            Kind::Scrub { .. } => self.compute_scrub(id, op),
        }
    }

    pub(super) fn image_recover(&mut self, image: &Image) {
        if let Some(recovery) = image.recovery {
            let data_chunks = self.geometry.data_chunks();
            let data: Vec<BufferSlice> = image.data[..data_chunks]
                .iter()
                .map(|slot| slot.expect("image buffer"))
                .collect();
            self.recover_data(recovery, &data, image.parity[0], image.parity[1]);
        }
    }

    fn compute_write(&mut self, id: OpId, op: &mut StripeOp) {
        let chunk_bytes = self.geometry.chunk_bytes();
        let full_stripe = match &op.work {
            Work::ParityWrite { range, .. } => {
                range.len() == chunk_bytes
                    && op.covers_full_stripe(self.geometry.data_chunks(), chunk_bytes)
            }
            _ => false,
        };
        // Out of the op while it is computed (the op is borrowed mutably throughout), put
        // back at the end: no copy of the fragment list per write.
        let Kind::Write { fragments } = &mut op.kind else {
            unreachable!()
        };
        let fragments = std::mem::take(fragments);
        let work = std::mem::replace(&mut op.work, Work::None);
        let mut parity_writes: ParityWrites = ParityWrites::new();
        // A scratch slice over a lone fragment's range that nothing reads once parity is
        // computed: room for a partial parity journal entry without taking more memory.
        let mut spare: Option<BufferSlice> = None;
        if let Work::ParityWrite {
            strategy,
            range,
            data,
            parity_old,
            parity_new,
            image,
        } = work
        {
            let data_chunks = self.geometry.data_chunks();
            match strategy {
                WriteStrategy::DataOnly => {}
                // A whole stripe of zeroes (a host's zeroes) has zero parity: zeroed like
                // the data, nothing computed.
                WriteStrategy::ReconstructWrite
                    if full_stripe
                        && self.only_zeroes(fragments.iter().map(|fragment| fragment.buffer)) =>
                {
                    let zeroes = BufferSlice::new(self.zero_buffer, 0, range.len() as usize);
                    for which in 0..self.geometry.parity_chunks() {
                        parity_writes.push((which, zeroes, range.start_bytes));
                    }
                }
                WriteStrategy::ReconstructWrite | WriteStrategy::RecoverThenWrite => {
                    if strategy == WriteStrategy::RecoverThenWrite {
                        self.image_recover(&image);
                    }
                    let mut sources = smallvec::SmallVec::<[BufferSlice; 16]>::new();
                    for index in 0..data_chunks {
                        let scratch = match strategy {
                            WriteStrategy::RecoverThenWrite => {
                                Some((image.data[index].expect("image"), range.start_bytes))
                            }
                            _ => data[index],
                        };
                        match scratch {
                            Some((buffer, base)) => {
                                for fragment in fragments.iter().filter(|f| f.index == index) {
                                    let at = buffer.sub(
                                        (fragment.range.start_bytes - base) as usize,
                                        fragment.range.len() as usize,
                                    );
                                    self.copy_slice(fragment.buffer, at);
                                }
                                sources.push(buffer);
                            }
                            None => {
                                let fragment = fragments
                                    .iter()
                                    .find(|f| f.index == index)
                                    .expect("single fragment");
                                sources.push(fragment.buffer);
                            }
                        }
                    }
                    let parity_chunks = self.geometry.parity_chunks();
                    let mut outputs = [parity_new[0].expect("parity buffer"); 2];
                    if parity_chunks == 2 {
                        outputs[1] = parity_new[1].expect("parity buffer");
                    }
                    let outputs = &outputs[..parity_chunks];
                    if !op.computed {
                        self.generate_parity(&sources, outputs);
                    }
                    if let ([fragment], WriteStrategy::ReconstructWrite) =
                        (&fragments[..], strategy)
                    {
                        spare = (0..data_chunks)
                            .filter(|&index| index != fragment.index)
                            .find_map(|index| data[index])
                            .map(|(buffer, base)| {
                                buffer.sub(
                                    (fragment.range.start_bytes - base) as usize,
                                    fragment.range.len() as usize,
                                )
                            });
                    }
                    for (which, &buffer) in outputs.iter().enumerate() {
                        parity_writes.push((which, buffer, range.start_bytes));
                    }
                }
                WriteStrategy::ReadModifyWrite => {
                    let parity_chunks = self.geometry.parity_chunks();
                    let mut writable = [false; 2];
                    for (which, writable) in writable.iter_mut().enumerate().take(parity_chunks) {
                        *writable = !self
                            .column_writers(op.stripe, Column::Parity(which))
                            .is_empty();
                    }
                    let writable = &writable[..parity_chunks];
                    for fragment in &fragments {
                        let (old, base) = data[fragment.index].expect("old data read");
                        let old = old.sub(
                            (fragment.range.start_bytes - base) as usize,
                            fragment.range.len() as usize,
                        );
                        let at = (fragment.range.start_bytes - range.start_bytes) as usize;
                        let len = fragment.range.len() as usize;
                        let p = parity_old[0]
                            .filter(|_| writable[0])
                            .map(|p| p.sub(at, len));
                        let q = if parity_chunks == 2 {
                            parity_old[1]
                                .filter(|_| writable[1])
                                .map(|q| q.sub(at, len))
                        } else {
                            None
                        };
                        let scratch_p = parity_old[0].map(|p| p.sub(at, len));
                        self.update_parity(fragment.index, old, fragment.buffer, p, q, scratch_p);
                        if fragments.len() == 1 {
                            spare = Some(old);
                        }
                    }
                    for (which, &is_writable) in writable.iter().enumerate() {
                        // A parity member that came into sync while this write ran (a rebuild
                        // passing a region trimmed meanwhile) was not read, so it cannot be
                        // updated; the region reads as zeroes and is zero-filled before reuse.
                        if let Some(old) = parity_old[which].filter(|_| is_writable) {
                            parity_writes.push((which, old, range.start_bytes));
                        }
                    }
                }
            }
        }
        let fold = if op.hold_writes {
            self.partial_parity_entry(
                op.stripe,
                &fragments,
                &parity_writes,
                spare,
                &mut op.journal_writes,
            )
        } else {
            None
        };
        op.journal_fold = fold;
        if fold.is_some() {
            op.full_stripe = false;
        } else if op.hold_writes {
            // A full-stripe write needs no contents in the journal where every data column has
            // a member: replay recomputes parity from the data on the members. A data column
            // without a member lives only in parity, which a torn write leaves useless, so its
            // new contents go into the journal and replay recomputes parity from them and the
            // other columns. A missing parity column needs nothing: there is nothing to redo.
            let missing = |index: usize| {
                self.column_writers(op.stripe, Column::Data(index))
                    .is_empty()
            };
            op.full_stripe = full_stripe;
            op.journal_writes.clear();
            op.journal_writes.extend(
                fragments
                    .iter()
                    .filter(|f| !full_stripe || missing(f.index))
                    .map(|f| (Column::Data(f.index), f.range.start_bytes, f.buffer))
                    .chain(
                        parity_writes
                            .iter()
                            .filter(|_| !full_stripe)
                            .map(|&(which, buffer, start)| (Column::Parity(which), start, buffer)),
                    ),
            );
        }
        for fragment in &fragments {
            for (member, offset) in self.column_writers(op.stripe, Column::Data(fragment.index)) {
                let offset_bytes = offset + fragment.range.start_bytes;
                self.op_write(id, op, member, offset_bytes, fragment.buffer);
            }
        }
        for (which, buffer, start) in parity_writes {
            for (member, offset) in self.column_writers(op.stripe, Column::Parity(which)) {
                self.op_write(id, op, member, offset + start, buffer);
            }
        }
        let Kind::Write { fragments: slot } = &mut op.kind else {
            unreachable!()
        };
        *slot = fragments;
    }

    fn compute_recover(&mut self, id: OpId, op: &mut StripeOp) {
        let Kind::Recover { pieces } = &op.kind else {
            unreachable!()
        };
        let pieces = pieces.clone();
        let work = std::mem::replace(&mut op.work, Work::None);
        if let Work::Chunk { image, .. } = &work {
            self.image_recover(image);
            let range = image.range.expect("image range");
            for piece in &pieces {
                let source = image.data[piece.piece.index].expect("image buffer");
                let from = source.sub(
                    (piece.piece.within_bytes - range.start_bytes) as usize,
                    piece.piece.len_bytes as usize,
                );
                self.copy_slice(from, piece.target);
            }
        }
        // Rewrite what a member failed to read, from the recovered data: a latent sector error
        // is repaired (or, if the write fails too, the member fails). In a mirrored region
        // awaiting resync, the answer also goes to every other copy before it is given: the
        // copies may disagree, and losing the one read must not change what was read.
        let sync_copies = self.geometry.parity_chunks() == 0 && self.regions.is_unsynced(op.region);
        for piece in &pieces {
            let writers = self.column_writers(op.stripe, Column::Data(piece.piece.index));
            for (member, offset) in writers {
                let repair = piece.rewrite && piece.repair_member == Some(member);
                let sync = sync_copies && piece.read_from.is_some_and(|from| from != member);
                if !(repair || sync) || self.members.list[member].is_failed() {
                    continue;
                }
                let offset_bytes = offset + piece.piece.within_bytes;
                self.op_write(id, op, member, offset_bytes, piece.target);
                if repair {
                    self.counters.repaired_reads += 1;
                    self.emit_event(GroupEvent::ReadErrorRepaired {
                        member,
                        offset_bytes,
                        len_bytes: piece.piece.len_bytes,
                    });
                } else {
                    self.counters.synced_reads += 1;
                }
            }
        }
        op.work = work;
    }

    fn compute_rebuild(&mut self, id: OpId, op: &mut StripeOp) {
        let Kind::Rebuild {
            target,
            column,
            target_offset_bytes,
            ..
        } = op.kind
        else {
            unreachable!()
        };
        let work = std::mem::replace(&mut op.work, Work::None);
        let Work::Chunk {
            image,
            source,
            parity_out,
        } = &work
        else {
            unreachable!("rebuild plans a chunk")
        };
        let content = match (source, column) {
            (Some((buffer, _)), _) => *buffer,
            (None, Column::Data(index)) => {
                if !op.computed {
                    self.image_recover(image);
                }
                image.data[index].expect("image buffer")
            }
            (None, Column::Parity(which)) => {
                let (data, outputs) = self.image_parity_slices(image, parity_out);
                if !op.computed {
                    self.image_recover(image);
                    self.generate_parity(&data, &outputs);
                }
                outputs[which]
            }
        };
        if !self.members.list[target].is_failed() {
            self.op_write(id, op, target, target_offset_bytes, content);
        }
        op.work = work;
    }

    /// Writes `buffer`, a whole chunk, to every member holding `column` of the op's stripe but
    /// `except`.
    fn write_whole_column(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        column: Column,
        buffer: BufferSlice,
        except: Option<usize>,
    ) {
        for (member, offset) in self.column_writers(op.stripe, column) {
            if Some(member) != except {
                self.op_write(id, op, member, offset, buffer);
            }
        }
    }

    fn compute_resync(&mut self, id: OpId, op: &mut StripeOp) {
        let work = std::mem::replace(&mut op.work, Work::None);
        match &work {
            Work::None => {}
            Work::Chunk {
                source: Some((buffer, source)),
                ..
            } => {
                self.write_whole_column(id, op, Column::Data(0), *buffer, Some(*source));
            }
            Work::Chunk {
                image, parity_out, ..
            } => {
                if !op.computed {
                    // A lost data chunk (replayed intents only) comes from parity first.
                    self.image_recover(image);
                }
                let (data, outputs) = self.image_parity_slices(image, parity_out);
                if !op.computed {
                    self.generate_parity(&data, &outputs);
                }
                let mut rewritten: Vec<usize> = op.supplied.iter().map(|s| s.0).collect();
                // A column read by sector is written back whole: the sectors that failed get
                // the zeroes parity was computed over, which also lets the drive remap them.
                rewritten.extend((0..data.len()).filter(|&index| op.reads_by_sector(index)));
                rewritten.sort_unstable();
                rewritten.dedup();
                for index in rewritten {
                    self.write_whole_column(id, op, Column::Data(index), data[index], None);
                }
                self.record_bad_sectors(op);
                for (which, buffer) in outputs.into_iter().enumerate() {
                    self.write_whole_column(id, op, Column::Parity(which), buffer, None);
                }
            }
            Work::ParityWrite { .. } | Work::Copies(_) => unreachable!("resync plans a chunk"),
        }
        op.work = work;
    }

    /// The stripe lost more than its redundancy (or the group failed).
    fn beyond_redundancy(&mut self, op: &mut StripeOp) {
        op.lost_data = true;
        // A rebuild goes on to salvage the stripe (`salvage.rs`), which records what is lost.
        if matches!(op.kind, Kind::Resync) {
            op.skipped = true;
        }
    }

    /// Records group data that is lost; reads of it fail from now on.
    pub(super) fn record_bad_range(&mut self, range: BadRange) {
        let table = &mut self.superblock.bad_ranges;
        if !crate::bad_ranges::record(table, range, crate::superblock::MAX_BAD_RANGES) {
            return;
        }
        self.emit_event(GroupEvent::DataLost {
            offset_bytes: range.offset_bytes,
            len_bytes: range.len_bytes,
        });
        self.request_superblock_update();
    }

    /// Whether a host range overlaps recorded lost data.
    pub(super) fn overlaps_bad(&self, offset_bytes: u64, len_bytes: u64) -> bool {
        self.superblock.bad_ranges.iter().any(|bad| {
            bad.offset_bytes < offset_bytes + len_bytes
                && offset_bytes < bad.offset_bytes + bad.len_bytes
        })
    }

    fn finish_op(&mut self, id: OpId, op: &mut StripeOp) {
        self.free_scratch(op);
        if let Some(sequence) = op.journal_sequence.take() {
            self.journal_op_done(sequence);
        }
        if std::mem::take(&mut op.unjournaled) {
            self.journal.unjournaled_writes -= 1;
        }
        let failed = self.members.group_state(&self.geometry) == GroupState::Failed;
        let result = if op.lost_data || failed {
            Err(HostError::Io)
        } else {
            Ok(())
        };
        if op.entered {
            // A recovery writes too when it repairs a read error or copies a mirrored answer
            // awaiting resync: its region's dirty bit must outlast those writes as well.
            let wrote = op.written_members != 0
                || matches!(
                    op.kind,
                    Kind::Write { .. }
                        | Kind::Resync
                        | Kind::Rebuild { .. }
                        | Kind::Scrub { repair: true }
                );
            self.regions.leave(
                op.region,
                self.now_us,
                wrote.then_some(self.config.dirty_clear_delay_us),
            );
        }
        if let Some(next) = self.locks.release(op.stripe, id) {
            let next_op = self.ops.get_mut(next).expect("queued op is live");
            next_op.stage = Stage::Gate;
            self.ready.push_back(next);
        }
        match std::mem::replace(&mut op.kind, Kind::Resync) {
            Kind::Write { fragments } => {
                if result.is_ok() {
                    self.clear_bad_ranges_covered(op.stripe, &fragments);
                }
                for fragment in &fragments {
                    if let Some(request) = self.requests.get_mut(fragment.request) {
                        request.fua_members |= op.written_members;
                    }
                    self.finish_part(fragment.request, result);
                }
                self.recycle_fragments(fragments);
            }
            Kind::Recover { pieces } => {
                for piece in pieces {
                    self.finish_part(piece.request, result);
                }
            }
            Kind::Rebuild { row, .. } => self.rebuild_step_done(row),
            Kind::Resync if op.journal_replay => self.replay_resync_done(op.skipped),
            Kind::Resync if self.is_resync_ahead(op.stripe, id) => {
                self.resync_ahead_done(op.stripe, op.region, op.skipped)
            }
            Kind::Resync => self.resync_step_done(op.skipped),
            Kind::Scrub { .. } => self.scrub_step_done(op.lost_data),
        }
    }

    /// A write that fully covers a recorded bad range makes its data valid again.
    fn clear_bad_ranges_covered(&mut self, stripe: u64, fragments: &[Fragment]) {
        if self.superblock.bad_ranges.is_empty() {
            return;
        }
        let stripe_offset = self.geometry.stripe_offset_bytes(stripe);
        let chunk = self.geometry.chunk_bytes();
        let before = self.superblock.bad_ranges.len();
        self.superblock.bad_ranges.retain(|bad| {
            !fragments.iter().any(|f| {
                let start = stripe_offset + f.index as u64 * chunk + f.range.start_bytes;
                start <= bad.offset_bytes
                    && bad.offset_bytes + bad.len_bytes <= start + f.range.len()
            })
        });
        if self.superblock.bad_ranges.len() != before {
            self.request_superblock_update();
        }
    }
}
