//! Creating and assembling a group, start-up, superblock updates and clean shutdown.

use super::background::Background;
use super::locks::StripeLocks;
use super::members::{Member, MemberState, Members};
use super::regions::Regions;
use super::slab::Slab;
use super::{
    Engine, EngineConfig, GroupEvent, GroupState, MemberOp, Owner, Phase, ZERO_BUFFER_BYTES,
};
use crate::geometry::{Geometry, GeometryError, Level};
use crate::layout::{MemberLayout, member_layout, min_journal_bytes};
use crate::superblock::{
    JournalMode, MAX_CONFIG_BYTES, MAX_NAME_BYTES, MemberRecord, MemberRecordState,
    SUPERBLOCK_OFFSETS, Superblock, Uuid,
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use tessera_buffer::{BufferId, BufferPool};
use tessera_parity::Kernel;

/// What a new group is made of.
#[derive(Clone, Debug)]
pub struct CreateSpec {
    pub group_uuid: Uuid,
    pub name: String,
    pub level: Level,
    pub chunk_bytes: u64,
    /// Member devices in role order: their uuids (written into their superblocks) and sizes.
    pub members: Vec<(Uuid, u64)>,
    pub created_unix_seconds: u64,
    /// Group data bytes per bitmap region; default `layout::DEFAULT_REGION_BYTES`.
    pub region_bytes: Option<u64>,
    /// Bytes reserved on each member for the journal; default by member size.
    pub journal_bytes: Option<u64>,
    pub journal_mode: JournalMode,
    /// A dedicated journal device (uuid and size) holding the journal instead of the members;
    /// it becomes the member after the last role.
    pub journal_device: Option<(Uuid, u64)>,
    pub rebuild_rate_percent: u8,
    /// The opaque configuration blob (the virtual-drive table).
    pub config: Vec<u8>,
}

/// The ring a dedicated journal device of `device_bytes` holds after the metadata every member
/// carries: up to 1 GiB (far beyond what group commit keeps in flight), in 64 KiB units.
fn journal_device_ring_bytes(journal_offset_bytes: u64, device_bytes: u64) -> u64 {
    device_bytes
        .saturating_sub(journal_offset_bytes)
        .min(1 << 30)
        / (64 << 10)
        * (64 << 10)
}

/// One device offered for assembly, with the newest valid superblock read from it.
#[derive(Clone, Debug)]
pub struct DeviceProbe {
    pub superblock: Superblock,
}

/// Why a group cannot be created or assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssembleError {
    /// No devices were offered.
    NoDevices,
    /// The devices belong to different groups.
    MixedGroups { first: Uuid, other: Uuid },
    /// The recorded or requested geometry is invalid.
    Geometry(GeometryError),
    /// A name or configuration blob larger than the superblock holds.
    TooLarge(&'static str),
    /// The same member appears twice.
    DuplicateMember(Uuid),
    /// The dedicated journal device cannot hold the journal's ring for this stripe size.
    JournalDeviceTooSmall { needed_bytes: u64 },
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssembleError::NoDevices => write!(f, "no member devices given"),
            AssembleError::MixedGroups { first, other } => {
                write!(
                    f,
                    "devices belong to different drive groups ({first} and {other})"
                )
            }
            AssembleError::Geometry(error) => write!(f, "{error}"),
            AssembleError::TooLarge(what) => write!(f, "{what} is too large for the superblock"),
            AssembleError::DuplicateMember(uuid) => write!(f, "member {uuid} appears twice"),
            AssembleError::JournalDeviceTooSmall { needed_bytes } => write!(
                f,
                "the journal device is too small: it needs at least {needed_bytes} bytes"
            ),
        }
    }
}

impl std::error::Error for AssembleError {}

/// Superblock writer state.
#[derive(Default)]
pub(crate) struct MetaWriter {
    /// The newest generation known durable on every metadata member.
    pub durable_generation: u64,
    /// Replies to writes wait until this generation (which records the newest member failure)
    /// is durable.
    pub failure_generation: u64,
    wanted_generation: u64,
    writing: Option<SuperblockWrite>,
    /// Members failed by the administrator whose own superblock has not yet said so. Their
    /// device still takes writes, and a copy naming them failed keeps them from being taken
    /// for current if they are ever assembled without the members that know better.
    pub farewell: Vec<usize>,
}

/// A superblock update: flush the members (so whatever the new superblock vouches for, such
/// as a rebuild position, is durable before it), then copy A, flush, copy B, flush.
struct SuperblockWrite {
    generation: u64,
    /// The state being recorded, taken before the first flush: a rebuild position must not
    /// get ahead of what that flush made durable.
    snapshot: Superblock,
    stage: SuperblockStage,
    pending: u32,
    buffers: Vec<BufferId>,
    /// Failed members written this once besides the metadata members (`MetaWriter::farewell`).
    farewell: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SuperblockStage {
    PreFlush,
    Write(usize),
    Flush(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartStep {
    FormatBitmap,
    WriteSuperblock,
    LoadBitmap,
    ReplayJournal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shutdown {
    Flushing,
    ClearingBits,
    MarkingClean { generation: u64 },
    Done,
}

/// Start-up and shutdown sequencing.
#[derive(Default)]
pub(crate) struct Startup {
    steps: VecDeque<StartStep>,
    /// The step whose I/O is in flight, with its outstanding command count.
    running: Option<(StartStep, u32)>,
    pub format_buffers: Vec<BufferId>,
    pub shutdown: Option<Shutdown>,
    shutdown_flush: Option<super::Key>,
    marked_dirty: bool,
}

impl Engine {
    /// A new group over blank members. The engine first writes the bitmap and superblocks
    /// (requests submitted meanwhile wait), then serves I/O at once: regions are zero-filled
    /// on first write, never up front.
    pub fn create(
        spec: CreateSpec,
        config: EngineConfig,
        parity: Arc<dyn Kernel>,
    ) -> Result<Engine, AssembleError> {
        if spec.name.len() > MAX_NAME_BYTES {
            return Err(AssembleError::TooLarge("group name"));
        }
        if spec.config.len() > MAX_CONFIG_BYTES {
            return Err(AssembleError::TooLarge("configuration"));
        }
        for (i, (uuid, _)) in spec.members.iter().enumerate() {
            if spec.members[..i].iter().any(|(other, _)| other == uuid) {
                return Err(AssembleError::DuplicateMember(*uuid));
            }
        }
        if let Some((uuid, _)) = spec.journal_device
            && spec.members.iter().any(|(other, _)| *other == uuid)
        {
            return Err(AssembleError::DuplicateMember(uuid));
        }
        let smallest = spec
            .members
            .iter()
            .map(|(_, size)| *size)
            .min()
            .unwrap_or(0);
        let layout = member_layout(
            spec.level,
            spec.members.len(),
            spec.chunk_bytes,
            smallest,
            spec.region_bytes,
            spec.journal_bytes,
        )
        .map_err(AssembleError::Geometry)?;
        Engine::create_with_layout(spec, layout, &[], false, config, parity)
    }

    /// A new group over `layout`; the members in `missing_roles` are recorded failed, and
    /// with `all_written` every region starts written (data already in place).
    pub(super) fn create_with_layout(
        spec: CreateSpec,
        layout: MemberLayout,
        missing_roles: &[usize],
        all_written: bool,
        config: EngineConfig,
        parity: Arc<dyn Kernel>,
    ) -> Result<Engine, AssembleError> {
        let mut records: Vec<MemberRecord> = spec
            .members
            .iter()
            .enumerate()
            .map(|(role, (uuid, size_bytes))| MemberRecord {
                uuid: *uuid,
                size_bytes: *size_bytes,
                role: Some(u8::try_from(role).expect("role fits u8")),
                state: if missing_roles.contains(&role) {
                    MemberRecordState::Failed
                } else {
                    MemberRecordState::Active
                },
                rebuild_position_bytes: 0,
                replacing: false,
            })
            .collect();
        let mut journal_device_bytes = 0;
        if let Some((uuid, size_bytes)) = spec.journal_device {
            journal_device_bytes =
                journal_device_ring_bytes(layout.journal_offset_bytes, size_bytes);
            let needed = min_journal_bytes(spec.members.len(), spec.chunk_bytes);
            if journal_device_bytes < needed {
                return Err(AssembleError::JournalDeviceTooSmall {
                    needed_bytes: layout.journal_offset_bytes + needed,
                });
            }
            records.push(MemberRecord {
                uuid,
                size_bytes,
                role: None,
                state: MemberRecordState::Journal,
                rebuild_position_bytes: 0,
                replacing: false,
            });
        }
        let superblock = Superblock {
            group_uuid: spec.group_uuid,
            member_uuid: spec.members[0].0,
            generation: 0,
            created_unix_seconds: spec.created_unix_seconds,
            level: spec.level,
            member_count: u8::try_from(spec.members.len()).expect("member count fits u8"),
            chunk_bytes: u32::try_from(spec.chunk_bytes).expect("chunk fits u32"),
            member_data_bytes: layout.geometry.member_data_bytes(),
            data_offset_bytes: layout.data_offset_bytes,
            bitmap_offset_bytes: layout.bitmap_offset_bytes,
            bitmap_slot_bytes: layout.bitmap_slot_bytes,
            region_bytes: layout.region_bytes,
            journal_offset_bytes: layout.journal_offset_bytes,
            journal_bytes: layout.journal_bytes,
            journal_mode: spec.journal_mode,
            clean: true,
            rebuild_rate_percent: spec.rebuild_rate_percent.clamp(1, 100),
            scrub_rate_percent: 30,
            rebuild_latency_target_us: 0,
            journal_covering: false,
            journal_floor_sequence: 0,
            journal_device_bytes,
            name: spec.name,
            members: records,
            bad_ranges: Vec::new(),
            config: spec.config,
        };
        let mut engine = Engine::from_superblock(superblock, &[], config, parity)?;
        if all_written {
            engine.regions.mark_all_written();
        }
        engine
            .startup
            .steps
            .extend([StartStep::FormatBitmap, StartStep::WriteSuperblock]);
        engine.request_superblock_update();
        engine.pump();
        Ok(engine)
    }

    /// Assembles a group from its devices. Returns the engine and, for each probe, the member
    /// index it was given (`None` for a device the group does not list). Members the
    /// authoritative superblock lists but that are absent are failed (and recorded so); a
    /// device the group had failed comes back as a rebuild target for its role.
    pub fn assemble(
        probes: Vec<DeviceProbe>,
        config: EngineConfig,
        parity: Arc<dyn Kernel>,
    ) -> Result<(Engine, Vec<Option<usize>>), AssembleError> {
        let first = probes
            .first()
            .ok_or(AssembleError::NoDevices)?
            .superblock
            .group_uuid;
        if let Some(other) = probes
            .iter()
            .map(|p| p.superblock.group_uuid)
            .find(|&uuid| uuid != first)
        {
            return Err(AssembleError::MixedGroups { first, other });
        }
        let authoritative = probes
            .iter()
            .max_by_key(|probe| probe.superblock.generation)
            .expect("at least one probe")
            .superblock
            .clone();
        let present: Vec<Uuid> = probes
            .iter()
            .map(|probe| probe.superblock.member_uuid)
            .collect();
        let mut engine = Engine::from_superblock(authoritative, &present, config, parity)?;
        let mapping = probes
            .iter()
            .map(|probe| {
                engine
                    .members
                    .list
                    .iter()
                    .position(|member| member.uuid == probe.superblock.member_uuid)
            })
            .collect();
        engine.meta.durable_generation = engine.superblock.generation;
        engine.meta.wanted_generation = engine.superblock.generation;
        let changed = engine.readmit_returning_members(&present, &probes);
        let failed = engine.members.list.iter().any(|member| member.is_failed());
        if changed || failed {
            engine.startup.steps.push_back(StartStep::WriteSuperblock);
            engine.request_superblock_update();
        }
        engine.startup.steps.push_back(StartStep::LoadBitmap);
        // The journal is scanned at every assembly, not only after a crash with the journal
        // covering: the superblock may still say "clean" while batches of the last run exist
        // (journaling can begin before the write marking the group unclean is durable), and a
        // run must number its batches above every batch still in the rings, or a stale batch
        // could later pass for a new one.
        if engine.geometry.parity_chunks() > 0 && engine.journal.ring_bytes > 0 {
            engine.startup.steps.push_back(StartStep::ReplayJournal);
        }
        engine.pump();
        Ok((engine, mapping))
    }

    fn from_superblock(
        superblock: Superblock,
        present: &[Uuid],
        config: EngineConfig,
        parity: Arc<dyn Kernel>,
    ) -> Result<Engine, AssembleError> {
        let geometry = superblock.geometry().map_err(AssembleError::Geometry)?;
        let journal_device = superblock
            .members
            .iter()
            .position(|record| record.state == MemberRecordState::Journal);
        let members: Vec<Member> = superblock
            .members
            .iter()
            .map(|record| {
                Member::from_record(record, present.is_empty() || present.contains(&record.uuid))
            })
            .collect();
        let group_tag =
            u64::from_le_bytes(superblock.group_uuid.0[..8].try_into().expect("8 bytes"));
        let regions = Regions::new(
            &geometry,
            superblock.region_bytes,
            group_tag,
            superblock.bitmap_offset_bytes,
            superblock.bitmap_slot_bytes,
        );
        let mut pool = BufferPool::new(config.pool_bytes.max(4 * ZERO_BUFFER_BYTES));
        let zero_buffer = pool
            .alloc_zeroed(ZERO_BUFFER_BYTES)
            .expect("zero buffer fits the new pool");
        let metadata_buffers = super::reserve::MetadataBuffers::new(
            &mut pool,
            members.len(),
            largest_entry_batch_bytes(&geometry),
        );
        let mut engine = Engine {
            parity,
            geometry,
            members: Members {
                list: members,
                ahead: super::members::RebuiltAhead {
                    member: None,
                    chunk_bytes: geometry.chunk_bytes(),
                    rows: Default::default(),
                },
                data_bytes: superblock.member_data_bytes,
            },
            pool,
            zero_buffer,
            metadata_buffers,
            now_us: 0,
            phase: Phase::Starting,
            reported_state: GroupState::Starting,
            out: VecDeque::new(),
            in_flight: Slab::new(),
            requests: Slab::new(),
            deferred: VecDeque::new(),
            ops: Slab::new(),
            spare_ops: Vec::new(),
            spare_fragments: Vec::new(),
            locks: StripeLocks::default(),
            regions,
            journal: super::journal::Journal::new(
                superblock.journal_offset_bytes,
                superblock.journal_bytes,
                superblock.journal_floor_sequence,
                superblock.journal_covering && geometry.parity_chunks() > 0,
            ),
            meta: MetaWriter::default(),
            flushes: Slab::new(),
            background: Background::default(),
            ready: VecDeque::new(),
            waiting_for_memory: VecDeque::new(),
            memory_blocked_used_bytes: usize::MAX,
            parked: Vec::new(),
            failure_waiters: Vec::new(),
            resync_ahead: Default::default(),
            last_write_end_bytes: u64::MAX,
            last_write: None,
            write_latency_average_us: 0,
            counters: super::Counters::default(),
            startup: Startup::default(),
            superblock,
            config,
        };
        engine.meta.durable_generation = engine.superblock.generation;
        engine.meta.wanted_generation = engine.superblock.generation;
        engine.journal.device_member = journal_device;
        engine.journal.device_ring_bytes = engine.superblock.journal_device_bytes;
        Ok(engine)
    }

    /// Devices the group had failed but that are present again become rebuild targets for
    /// their role when no other member holds it. Returns whether anything changed.
    fn readmit_returning_members(&mut self, present: &[Uuid], _probes: &[DeviceProbe]) -> bool {
        let mut changed = false;
        for index in 0..self.members.list.len() {
            let member = &self.members.list[index];
            let Some(role) = member.role else { continue };
            let was_failed_in_record =
                self.superblock.members[index].state == MemberRecordState::Failed;
            if !was_failed_in_record || !present.contains(&member.uuid) {
                continue;
            }
            let role_taken = self.members.list.iter().enumerate().any(|(other, m)| {
                other != index
                    && m.role == Some(role)
                    && matches!(
                        m.state,
                        MemberState::Active | MemberState::Rebuilding { .. }
                    )
            });
            if role_taken {
                continue;
            }
            self.members.list[index].state = MemberState::Rebuilding { position_bytes: 0 };
            self.members.list[index].replacing = false;
            changed = true;
        }
        changed
    }

    // ----- start-up -----

    pub(super) fn pump_startup(&mut self) -> bool {
        if self.phase != Phase::Starting || self.startup.running.is_some() {
            return false;
        }
        let Some(step) = self.startup.steps.pop_front() else {
            self.phase = Phase::Running;
            let unsynced = self.regions.unsynced_regions();
            self.background.start(unsynced);
            self.emit_event(GroupEvent::Started);
            return true;
        };
        match step {
            StartStep::FormatBitmap => {
                let issued = self.start_bitmap_format();
                self.startup.running = Some((step, issued));
                if issued == 0 {
                    self.startup_step_done();
                }
            }
            StartStep::WriteSuperblock => {
                self.startup.running = Some((step, 0));
                if self.meta.durable_generation >= self.meta.wanted_generation {
                    self.startup_step_done();
                }
            }
            StartStep::LoadBitmap => {
                self.startup.running = Some((step, 0));
                self.start_bitmap_load();
            }
            StartStep::ReplayJournal => {
                self.startup.running = Some((step, 0));
                self.start_journal_replay();
            }
        }
        true
    }

    /// Replay finished: its superblock (the new journal floor) is written before I/O is served.
    pub(super) fn startup_after_replay(&mut self) {
        self.startup.steps.push_front(StartStep::WriteSuperblock);
        self.startup_step_done();
    }

    pub(super) fn startup_step_done(&mut self) {
        let (step, _) = self
            .startup
            .running
            .take()
            .expect("a start-up step is running");
        if step == StartStep::FormatBitmap {
            for buffer in std::mem::take(&mut self.startup.format_buffers) {
                self.pool.free(buffer);
            }
        }
    }

    /// Completion of a bitmap-format write during start-up: once all are written, flush.
    fn format_io_done(&mut self) {
        let Some((StartStep::FormatBitmap, pending)) = self.startup.running.as_mut() else {
            unreachable!("format I/O completes while formatting")
        };
        *pending -= 1;
        if *pending > 0 {
            return;
        }
        if !self.startup.format_buffers.is_empty() {
            for buffer in std::mem::take(&mut self.startup.format_buffers) {
                self.pool.free(buffer);
            }
            let members = self.members.metadata_members();
            *self
                .startup
                .running
                .as_mut()
                .map(|(_, p)| p)
                .expect("running") = u32::try_from(members.len()).expect("fits");
            for member in members {
                self.issue(member, MemberOp::Flush, Owner::Superblock);
            }
            return;
        }
        self.startup_step_done();
    }

    // ----- superblock writer -----

    /// Asks for the superblock to be rewritten; returns the generation that will carry the
    /// current state.
    pub(super) fn request_superblock_update(&mut self) -> u64 {
        let base = match &self.meta.writing {
            Some(write) => write.generation,
            None => self.meta.durable_generation,
        };
        self.meta.wanted_generation = self.meta.wanted_generation.max(base + 1);
        self.meta.wanted_generation
    }

    pub(super) fn pump_superblock(&mut self) -> bool {
        if self.meta.writing.is_some()
            || self.meta.wanted_generation <= self.meta.durable_generation
        {
            return false;
        }
        // The bitmap format of a new group goes first: the superblock is what makes the
        // devices a group.
        if matches!(self.startup.running, Some((StartStep::FormatBitmap, _)))
            || self.startup.steps.front() == Some(&StartStep::FormatBitmap)
        {
            return false;
        }
        let generation = self.meta.wanted_generation;
        self.superblock.generation = generation;
        let snapshot = self.superblock();
        let farewell = std::mem::take(&mut self.meta.farewell)
            .into_iter()
            .filter(|&member| {
                self.members.list[member].state == MemberState::Failed(super::FailReason::Admin)
            })
            .collect();
        self.meta.writing = Some(SuperblockWrite {
            generation,
            snapshot,
            stage: SuperblockStage::PreFlush,
            pending: 0,
            buffers: Vec::new(),
            farewell,
        });
        self.superblock_flush();
        true
    }

    /// The members a superblock write goes to: the metadata members, and once, members the
    /// administrator failed since the last write.
    fn superblock_targets(&self) -> Vec<usize> {
        let mut targets = self.members.metadata_members();
        if let Some(write) = &self.meta.writing {
            for &member in &write.farewell {
                if !targets.contains(&member) {
                    targets.push(member);
                }
            }
        }
        targets
    }

    fn superblock_flush(&mut self) {
        let targets = self.superblock_targets();
        let write = self.meta.writing.as_mut().expect("superblock write");
        write.pending = u32::try_from(targets.len()).expect("member count fits u32");
        for member in &targets {
            self.issue(*member, MemberOp::Flush, Owner::Superblock);
        }
        if targets.is_empty() {
            self.superblock_step();
        }
    }

    fn write_superblock_copy(&mut self, copy_index: usize) {
        let template = self
            .meta
            .writing
            .as_ref()
            .expect("superblock write")
            .snapshot
            .clone();
        let targets = self.superblock_targets();
        let offset_bytes = SUPERBLOCK_OFFSETS[copy_index];
        let mut issue = Vec::new();
        for member in targets {
            let mut copy = template.clone();
            copy.member_uuid = self.members.list[member].uuid;
            let image = copy.encode();
            let buffer = self.metadata_buffers.take_superblock();
            self.pool.slice_mut(buffer).copy_from_slice(&image);
            issue.push((member, buffer));
        }
        let write = self.meta.writing.as_mut().expect("superblock write");
        write.pending = u32::try_from(issue.len()).expect("member count fits u32");
        write
            .buffers
            .extend(issue.iter().map(|(_, buffer)| *buffer));
        let none = issue.is_empty();
        for (member, buffer) in issue {
            let slice = self.pool.full(buffer);
            self.issue(
                member,
                MemberOp::Write {
                    offset_bytes,
                    buffer: slice,
                    fua: false,
                },
                Owner::Superblock,
            );
        }
        if none {
            self.superblock_step();
        }
    }

    pub(super) fn superblock_io_done(&mut self) {
        if matches!(self.startup.running, Some((StartStep::FormatBitmap, _))) {
            self.format_io_done();
            return;
        }
        let write = self
            .meta
            .writing
            .as_mut()
            .expect("superblock write in flight");
        write.pending -= 1;
        if write.pending == 0 {
            self.superblock_step();
        }
    }

    fn superblock_step(&mut self) {
        let write = self
            .meta
            .writing
            .as_mut()
            .expect("superblock write in flight");
        for buffer in std::mem::take(&mut write.buffers) {
            self.metadata_buffers.give_superblock(buffer);
        }
        match write.stage {
            SuperblockStage::PreFlush => {
                write.stage = SuperblockStage::Write(0);
                self.write_superblock_copy(0);
            }
            SuperblockStage::Write(copy) => {
                write.stage = SuperblockStage::Flush(copy);
                self.superblock_flush();
            }
            SuperblockStage::Flush(0) => {
                write.stage = SuperblockStage::Write(1);
                self.write_superblock_copy(1);
            }
            SuperblockStage::Flush(_) => {
                let generation = write.generation;
                self.meta.writing = None;
                self.meta.durable_generation = generation;
                if matches!(self.startup.running, Some((StartStep::WriteSuperblock, _)))
                    && generation >= self.meta.wanted_generation
                {
                    self.startup_step_done();
                }
                if let Some(Shutdown::MarkingClean { generation: needed }) = self.startup.shutdown
                    && generation >= needed
                {
                    self.startup.shutdown = Some(Shutdown::Done);
                }
            }
        }
    }

    /// Before the first write after start-up, the superblock stops saying "clean".
    pub(super) fn note_first_write(&mut self) {
        if !self.startup.marked_dirty {
            self.startup.marked_dirty = true;
            if self.superblock.clean {
                self.superblock.clean = false;
                self.request_superblock_update();
            }
        }
    }

    // ----- clean shutdown -----

    pub(super) fn begin_clean_shutdown(&mut self) -> bool {
        match self.startup.shutdown {
            None => {
                self.startup.shutdown = Some(Shutdown::Flushing);
                self.startup.shutdown_flush = Some(self.start_flush(None, None));
                true
            }
            Some(Shutdown::Flushing) => {
                // `is_idle` holds, so the flush finished.
                self.clear_all_dirty();
                self.startup.shutdown = Some(Shutdown::ClearingBits);
                true
            }
            Some(Shutdown::ClearingBits) => {
                if !self.regions.all_blocks_clean() {
                    return false;
                }
                self.superblock.clean = true;
                // Every batch is retired: none may be replayed at the next assembly.
                self.superblock.journal_floor_sequence = self.journal.next_sequence;
                let generation = self.request_superblock_update();
                self.startup.shutdown = Some(Shutdown::MarkingClean { generation });
                true
            }
            Some(Shutdown::MarkingClean { .. }) | Some(Shutdown::Done) => false,
        }
    }
}

/// The largest journal batch one stripe update needs (0 without parity, where nothing is
/// journaled): its writes are its fragments, whole sectors of the stripe's data that do not
/// overlap, and the parity columns, so its payload is at most the stripe's data and parity
/// chunks, with a write descriptor for each sector of data.
fn largest_entry_batch_bytes(geometry: &Geometry) -> usize {
    if geometry.parity_chunks() == 0 {
        return 0;
    }
    let chunk = geometry.chunk_bytes();
    let data = chunk * geometry.data_chunks() as u64;
    let writes = (data / crate::geometry::SECTOR_BYTES) as usize + geometry.parity_chunks();
    let payload = data + chunk * geometry.parity_chunks() as u64;
    usize::try_from(crate::journal::single_entry_batch_bytes(writes, payload))
        .expect("a batch fits memory")
}
