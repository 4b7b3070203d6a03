//! The engine of one drive group: a state machine with no I/O inside.
//!
//! Inputs: `submit` (host requests), `complete` (member command completions), `tick` (time),
//! and administrative calls. Output: `poll` yields `Command`s — member reads, writes and
//! flushes, host replies, events. Everything runs to quiescence inside each input call, so
//! after any call the caller drains `poll` and carries the member commands out.

mod adopt;
mod ahead;
mod background;
mod compute;
mod hashing;
mod host;
mod journal;
mod locks;
mod members;
mod meta;
mod regions;
mod replay;
mod reserve;
mod salvage;
mod scrub;
mod slab;
mod stripe;
mod types;

pub use background::ScrubResult;
pub use journal::JournalStatus;
pub use meta::{AssembleError, CreateSpec, DeviceProbe};
pub use scrub::ScrubStats;
pub use types::{
    AdminError, Command, CommandId, ComputeCommand, ComputeId, ComputeJob, EngineConfig,
    FailReason, GroupEvent, GroupState, HostError, HostOp, HostRequest, MemberCommand, MemberError,
    MemberOp, Reply,
};

use crate::geometry::{Column, Geometry};
use crate::superblock::{Superblock, Uuid};
use locks::StripeLocks;
use members::{MemberState, Members};
use regions::Regions;
use slab::{Key, Slab};
use std::collections::VecDeque;
use std::sync::Arc;
use stripe::StripeOp;
use tessera_buffer::{BufferId, BufferPool, BufferSlice};
use tessera_parity::Kernel;

/// The members (and device offsets) a column write goes to: one, a copy per mirror, or a
/// second while a member is replaced; inline so the write path does not allocate for it.
type Writers = smallvec::SmallVec<[(usize, u64); 4]>;

/// Names a stripe operation.
pub(crate) type OpId = Key;

/// Bytes of the shared all-zero buffer used for zero-fill and write-zeroes.
const ZERO_BUFFER_BYTES: usize = 1 << 20;
/// Host requests may use at most this share of the buffer arena, so stripe operations always
/// find scratch space and make progress.
const HOST_POOL_SHARE_PERCENT: usize = 50;

/// Why a member command was issued, so its completion reaches the right place.
#[derive(Clone, Copy, Debug)]
enum Owner {
    /// A healthy read straight into a host read buffer.
    HostRead {
        request: Key,
        piece: host::ReadPiece,
    },
    /// Part of a stripe operation.
    Stripe {
        op: OpId,
        purpose: stripe::IoPurpose,
    },
    /// Loading one slot of one bitmap block at start-up.
    BitmapLoad {
        block: u32,
        slot: u8,
        buffer: BufferId,
    },
    /// Writing or flushing one bitmap block.
    BitmapWrite { block: u32 },
    /// Zero-filling a region before its first write.
    ZeroFill { region: u64 },
    /// Writing or flushing a superblock copy.
    Superblock,
    /// A flush of every data member (host or internal).
    Flush { flush: Key },
    /// Writing one copy of a journal batch (a FUA write: durable when it completes).
    Journal { sequence: u64 },
    /// Reading a window of a member's journal area during replay.
    JournalScan {
        member: usize,
        offset_bytes: u64,
        buffer: BufferId,
    },
    /// Replaying a batch: reading it, reading a data range a partial parity entry needs, or
    /// writing a block in place.
    JournalReplay { io: replay::ReplayIo },
}

struct InFlight {
    member: usize,
    owner: Owner,
    is_write: bool,
}

/// A host request while its parts are in flight.
struct Request {
    id: u64,
    parts_pending: u32,
    error: Option<HostError>,
    /// Read requests: the buffer being filled, and the range read (checked against recorded
    /// lost data once more at the end, as data may be declared lost while the read runs).
    read_buffer: Option<BufferId>,
    read_range: (u64, u64),
    /// Write requests: the caller's buffer, freed at the end.
    write_buffer: Option<BufferId>,
    /// Replies to writes and flushes wait until every member failure recorded before they
    /// finished is durable in the superblock (a failed member must never be trusted again).
    waits_for_metadata: bool,
    /// Members written by this request's parts, flushed before the reply (FUA).
    fua_members: u64,
    fua: bool,
    /// FUA that must also make bitmap changes durable (write-zeroes that dropped regions).
    fua_bitmap: bool,
    /// When the request arrived (for latency-adaptive background pacing).
    submit_us: u64,
}

/// A flush of every data member: for a host FLUSH, for FUA, or internal (to let dirty regions
/// be cleared).
struct FlushOp {
    request: Option<Key>,
    /// Only these members (FUA); `None` means every data member.
    only_members: Option<u64>,
    stage: FlushStage,
    epoch: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlushStage {
    /// Waiting for pending bitmap updates to be written.
    WaitBitmap,
    Flushing {
        pending: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Writing initial metadata or loading the bitmap.
    Starting,
    Running,
    /// Stopping: new requests are refused, work in flight finishes.
    Stopping,
}

/// Counters for observability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub host_reads: u64,
    pub host_writes: u64,
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    pub member_read_bytes: u64,
    pub member_write_bytes: u64,
    /// Bytes members were asked to zero (`MemberOp::WriteZeroes`), not in `member_write_bytes`.
    pub member_zeroed_bytes: u64,
    pub full_stripe_writes: u64,
    pub read_modify_writes: u64,
    pub reconstruct_writes: u64,
    pub degraded_reads: u64,
    pub read_errors: u64,
    pub repaired_reads: u64,
    /// Read pieces of a mirrored region awaiting resync whose answer was written to the other
    /// copies before it was given.
    pub synced_reads: u64,
    /// Stripes of parity levels resynced ahead of the resync because a read needed them.
    pub resynced_ahead_stripes: u64,
    pub coalesced_writes: u64,
    pub rebuilt_bytes: u64,
    pub resynced_stripes: u64,
    pub scrubbed_bytes: u64,
    pub journal_batches: u64,
    /// Batches made durable on their stripes' parity members alone, in pieces (each parity
    /// member its share).
    pub journal_home_batches: u64,
    /// Batches written from the reserved batch buffer because the pool had no room.
    pub journal_reserve_batches: u64,
    pub journal_entries: u64,
    /// Bytes written to journal areas, every copy counted.
    pub journal_bytes: u64,
    pub journal_replayed_entries: u64,
    /// Data bytes of parity work handed out as `Command::Compute`.
    pub offloaded_parity_bytes: u64,
}

/// A point-in-time view of the group for operators and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    pub state: GroupState,
    pub members: Vec<MemberStatus>,
    /// Rebuild progress: (member, role, bytes in sync, bytes to rebuild).
    pub rebuild: Option<RebuildStatus>,
    pub resync_regions_left: u64,
    pub written_regions: u64,
    pub dirty_regions: u64,
    pub counters: Counters,
    pub generation: u64,
    pub journal: JournalStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildStatus {
    pub member: usize,
    pub role: usize,
    pub position_bytes: u64,
    pub total_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub uuid: Uuid,
    pub role: Option<usize>,
    pub state: &'static str,
    pub size_bytes: u64,
}

/// The engine of one drive group.
pub struct Engine {
    config: EngineConfig,
    parity: Arc<dyn Kernel>,
    geometry: Geometry,
    /// The authoritative superblock (its member table is rebuilt from `members` on write).
    superblock: Superblock,
    members: Members,
    pool: BufferPool,
    zero_buffer: BufferId,
    metadata_buffers: reserve::MetadataBuffers,
    now_us: u64,
    phase: Phase,
    reported_state: GroupState,
    out: VecDeque<Command>,
    in_flight: Slab<InFlight>,
    requests: Slab<Request>,
    /// Host requests not yet admitted (engine starting, or no buffer space).
    deferred: VecDeque<HostRequest>,
    // Boxed: an op moves out of its slot and back on every step, and it is large.
    ops: Slab<Box<StripeOp>>,
    /// Finished ops and fragment lists kept for reuse, with the capacity of their lists, so a
    /// stripe update in steady state allocates nothing (at most `SPARE_OPS` of each).
    // The boxes themselves are what is reused: ops live boxed in `ops`.
    #[allow(clippy::vec_box)]
    spare_ops: Vec<Box<StripeOp>>,
    spare_fragments: Vec<Vec<stripe::Fragment>>,
    locks: StripeLocks,
    regions: Regions,
    journal: journal::Journal,
    meta: meta::MetaWriter,
    flushes: Slab<FlushOp>,
    background: background::Background,
    /// Ops ready to make progress.
    ready: VecDeque<OpId>,
    /// Ops waiting for buffer space, and the arena use when the first of them blocked.
    waiting_for_memory: VecDeque<OpId>,
    memory_blocked_used_bytes: usize,
    /// Replies held until the superblock generation they need is durable.
    parked: Vec<(u64, Reply)>,
    /// Stripe updates waiting for a member's failure to be recorded (`failure_pending`).
    failure_waiters: Vec<OpId>,
    /// Stripes being resynced ahead of the cursor for reads (`ahead.rs`): the resync op and
    /// the read pieces waiting for it.
    resync_ahead: hashing::NumberMap<(OpId, Vec<ahead::WaitingRead>)>,
    /// Where the last host write ended, to recognise sequential streams, and that write (its
    /// request key and id) while it may still be in flight.
    last_write_end_bytes: u64,
    last_write: Option<(Key, u64)>,
    /// Host writes' latency from arrival to reply, averaged (one eighth of each new sample),
    /// in microseconds: how long a journaled stream waits for a stripe's partner scales with it
    /// (`host::gather_window_us`).
    write_latency_average_us: u64,
    counters: Counters,
    startup: meta::Startup,
}

impl Engine {
    /// The group's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Bytes of the group's data space.
    pub fn data_bytes(&self) -> u64 {
        self.geometry.data_bytes()
    }

    /// The authoritative superblock, with the member table as it stands now.
    pub fn superblock(&self) -> Superblock {
        let mut superblock = self.superblock.clone();
        superblock.members = self
            .members
            .list
            .iter()
            .filter(|member| !member.is_retired())
            .map(|member| member.record())
            .collect();
        superblock
    }

    /// The buffer arena: host write buffers come from here, read replies point into it.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    pub fn pool_mut(&mut self) -> &mut BufferPool {
        &mut self.pool
    }

    /// A buffer for a host write payload, or `None` while host requests already hold their
    /// share of the arena (the caller stops reading requests until replies free space).
    pub fn alloc_host_buffer(&mut self, len_bytes: usize) -> Option<BufferId> {
        if self.pool.used_bytes() + len_bytes > self.host_pool_limit() {
            return None;
        }
        self.pool.alloc(len_bytes)
    }

    /// Arena bytes host buffers may hold: a share of what the zero buffer leaves.
    fn host_pool_limit(&self) -> usize {
        ZERO_BUFFER_BYTES
            + (self.pool.capacity_bytes() - ZERO_BUFFER_BYTES) / 100 * HOST_POOL_SHARE_PERCENT
    }

    /// The next command to carry out, if any.
    pub fn poll(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// Whether the engine has nothing in flight, nothing queued and no output waiting (used by
    /// clean shutdown and by the simulator's quiescence checks).
    pub fn is_idle(&self) -> bool {
        self.is_quiet() && self.out.is_empty()
    }

    fn is_quiet(&self) -> bool {
        self.in_flight.len() == 0
            && self.requests.len() == 0
            && self.ops.len() == 0
            && self.deferred.is_empty()
            && self.flushes.len() == 0
            && self.parked.is_empty()
            && self.journal.is_idle()
    }

    /// Whether background work (rebuild, resync, region clean-up) is still pending.
    pub fn has_background_work(&self) -> bool {
        self.background.is_active() || self.regions.has_pending_cleanup()
    }

    /// A one-line description of what the engine is holding, for liveness reports.
    pub fn debug_summary(&self) -> String {
        let stages: Vec<String> = self
            .ops
            .keys()
            .into_iter()
            .filter_map(|key| {
                self.ops
                    .get(key)
                    .map(|op| format!("{}:{:?}", op.stripe, op.stage))
            })
            .collect();
        format!(
            "in flight {}, requests {}, deferred {}, ops {} {:?}, waiting for memory {}, flushes {}, parked {}, pool used {}/{} bytes, phase {:?}, journal {}",
            self.in_flight.len(),
            self.requests.len(),
            self.deferred.len(),
            self.ops.len(),
            stages,
            self.waiting_for_memory.len(),
            self.flushes.len(),
            self.parked.len(),
            self.pool.used_bytes(),
            self.pool.capacity_bytes(),
            self.phase,
            self.journal.debug_summary()
        )
    }

    /// Group data bytes per bitmap region.
    pub fn region_bytes(&self) -> u64 {
        self.regions.region_bytes()
    }

    /// Whether a region holds data (an unwritten region reads as zeroes and its member
    /// contents are meaningless).
    pub fn is_region_written(&self, region: u64) -> bool {
        self.regions.is_written(region)
    }

    /// Whether a region awaits resync after an unclean shutdown.
    pub fn is_region_unsynced(&self, region: u64) -> bool {
        self.regions.is_unsynced(region)
    }

    /// The state operators see.
    pub fn state(&self) -> GroupState {
        if self.phase == Phase::Starting {
            return GroupState::Starting;
        }
        let state = self.members.group_state(&self.geometry);
        if state == GroupState::Optimal && self.background.resync_pending() {
            return GroupState::Resyncing;
        }
        state
    }

    pub fn status(&self) -> GroupStatus {
        GroupStatus {
            state: self.state(),
            members: self
                .members
                .list
                .iter()
                .map(|member| MemberStatus {
                    uuid: member.uuid,
                    role: member.role,
                    state: match member.state {
                        MemberState::Active => "online",
                        MemberState::Rebuilding { .. } => "rebuilding",
                        MemberState::Failed(FailReason::Missing) => "missing",
                        MemberState::Failed(_) => "failed",
                        MemberState::Spare => "hot_spare",
                        MemberState::Journal => "journal",
                    },
                    size_bytes: member.size_bytes,
                })
                .collect(),
            rebuild: self.members.rebuilding().map(|member| {
                let MemberState::Rebuilding { position_bytes } = self.members.list[member].state
                else {
                    unreachable!("rebuilding() returns a rebuilding member")
                };
                RebuildStatus {
                    member,
                    role: self.members.list[member]
                        .role
                        .expect("a rebuilding member has a role"),
                    position_bytes,
                    total_bytes: self.geometry.member_data_bytes(),
                }
            }),
            resync_regions_left: self.background.resync_regions_left(),
            written_regions: self.regions.written_count(),
            dirty_regions: self.regions.dirty_count(),
            counters: self.counters,
            generation: self.superblock.generation,
            journal: self.journal_status(),
        }
    }

    /// Advances the engine's clock and runs timers (coalescing windows, lazy bitmap clearing,
    /// background work pacing).
    pub fn tick(&mut self, now_us: u64) {
        assert!(now_us >= self.now_us, "time goes forward");
        self.now_us = now_us;
        self.release_gathering_ops();
        self.regions_tick();
        self.pump();
    }

    /// Advances the engine's clock without running timers: the caller says what time it is
    /// before handing in events, so that windows opened by those events (coalescing) start
    /// now and not at the last `tick`, which may be a long event-loop turn ago.
    pub fn advance_clock(&mut self, now_us: u64) {
        assert!(now_us >= self.now_us, "time goes forward");
        self.now_us = now_us;
    }

    /// The earliest time at which `tick` has work to do, if any timer is armed.
    pub fn next_deadline_us(&self) -> Option<u64> {
        let gathering = self.gathering_deadline();
        let regions = self.regions.next_deadline();
        let background = self.background_deadline();
        [gathering, regions, background].into_iter().flatten().min()
    }

    /// Accepts a host request. Its reply arrives through `poll`.
    pub fn submit(&mut self, request: HostRequest) {
        self.accept(request);
        self.pump();
    }

    /// Accepts several host requests that arrived together, in order, then moves on once.
    pub fn submit_all(&mut self, requests: impl IntoIterator<Item = HostRequest>) {
        for request in requests {
            self.accept(request);
        }
        self.pump();
    }

    fn accept(&mut self, request: HostRequest) {
        if self.phase == Phase::Stopping {
            self.reject(request, HostError::ShuttingDown);
        } else if self.phase == Phase::Starting || !self.deferred.is_empty() {
            self.deferred.push_back(request);
        } else {
            self.admit(request);
        }
    }

    /// Reports the completion of a member command.
    pub fn complete(&mut self, id: CommandId, result: Result<(), MemberError>) {
        self.record_completion(id, result);
        self.pump();
    }

    /// Reports several member completions that arrived together (a driver reaps them in
    /// batches): each is recorded as `complete` would, then the engine moves on once. The
    /// work they unblock runs in one pass instead of one per completion, which is most of the
    /// engine's cost per member command; the outcome is that of the same completions arriving
    /// in this order faster than the engine looks at them.
    pub fn complete_all(
        &mut self,
        completions: impl IntoIterator<Item = (CommandId, Result<(), MemberError>)>,
    ) {
        for (id, result) in completions {
            self.record_completion(id, result);
        }
        self.pump();
    }

    fn record_completion(&mut self, id: CommandId, result: Result<(), MemberError>) {
        let entry = self
            .in_flight
            .remove(Key::from_u64(id.0))
            .expect("completion of a command in flight");
        let member = &mut self.members.list[entry.member];
        member.in_flight -= 1;
        if let Err(error) = result {
            match error {
                MemberError::Gone => self.fail_member(entry.member, FailReason::Gone),
                MemberError::Io if entry.is_write => {
                    let reason = match entry.owner {
                        Owner::Flush { .. } => FailReason::FlushError,
                        _ => FailReason::WriteError,
                    };
                    self.fail_member(entry.member, reason);
                }
                MemberError::Io => self.counters.read_errors += 1,
            }
        }
        match entry.owner {
            Owner::HostRead { request, piece } => {
                self.host_read_done(request, piece, entry.member, result)
            }
            Owner::Stripe { op, purpose } => self.stripe_io_done(op, purpose, entry.member, result),
            Owner::BitmapLoad {
                block,
                slot,
                buffer,
            } => self.bitmap_load_done(block, slot, buffer, result),
            Owner::BitmapWrite { block } => self.bitmap_write_done(block),
            Owner::ZeroFill { region } => self.zero_fill_done(region),
            Owner::Superblock => self.superblock_io_done(),
            Owner::Flush { flush } => self.flush_io_done(flush),
            Owner::Journal { sequence } => self.journal_io_done(sequence, entry.member, result),
            Owner::JournalScan {
                member,
                offset_bytes,
                buffer,
            } => self.journal_scan_done(member, offset_bytes, buffer, result),
            Owner::JournalReplay { io } => self.journal_replay_io_done(io, result),
        }
    }

    /// Takes a member out of service as if it had failed (administrative fail, tests).
    pub fn fail_member_admin(&mut self, member: usize) {
        if !matches!(self.members.list[member].state, MemberState::Failed(_)) {
            self.meta.farewell.push(member);
        }
        self.fail_member(member, FailReason::Admin);
        self.pump();
    }

    /// Adds a device to rebuild `role` onto: the role of a lost member, or of a live one to be
    /// replaced while it still works (proactive replace, copying from it). The rebuild starts
    /// at once. Returns the new member's index, to which the caller attaches the device.
    pub fn replace_member(
        &mut self,
        role: usize,
        uuid: Uuid,
        size_bytes: u64,
    ) -> Result<usize, AdminError> {
        if role >= self.geometry.members() {
            return Err(AdminError::NoSuchRole(role));
        }
        if self.members.group_state(&self.geometry) == GroupState::Failed {
            return Err(AdminError::GroupFailed);
        }
        let needed = self.superblock.data_offset_bytes + self.geometry.member_data_bytes();
        if size_bytes < needed {
            return Err(AdminError::TooSmall {
                size_bytes,
                needed_bytes: needed,
            });
        }
        if self.members.rebuilding().is_some() {
            return Err(AdminError::RebuildRunning);
        }
        if self.members.list.iter().any(|member| member.uuid == uuid) {
            return Err(AdminError::AlreadyMember);
        }
        let live = self
            .members
            .list
            .iter()
            .filter(|member| !member.is_retired())
            .count();
        if live >= crate::superblock::MAX_MEMBER_RECORDS {
            return Err(AdminError::TooManyMembers);
        }
        if !self.metadata_buffers.add_member_slot(&mut self.pool) {
            return Err(AdminError::PoolFull);
        }
        let replacing = self.members.role_active(role);
        self.members.list.push(members::Member {
            uuid,
            size_bytes,
            role: Some(role),
            state: MemberState::Rebuilding { position_bytes: 0 },
            replacing,
            in_flight: 0,
        });
        self.request_superblock_update();
        self.pump();
        Ok(self.members.list.len() - 1)
    }

    /// Sets the share of member bandwidth rebuilds may take while hosts are busy (1..=100).
    pub fn set_rebuild_rate(&mut self, percent: u8) -> Result<(), AdminError> {
        if !(1..=100).contains(&percent) {
            return Err(AdminError::BadValue(
                "the rebuild rate is a percentage from 1 to 100",
            ));
        }
        self.superblock.rebuild_rate_percent = percent;
        self.background.pacer.adaptive_rate_percent = None;
        self.request_superblock_update();
        Ok(())
    }

    /// Sets the share of member bandwidth scrubs may take while hosts are busy (1..=100).
    pub fn set_scrub_rate(&mut self, percent: u8) -> Result<(), AdminError> {
        if !(1..=100).contains(&percent) {
            return Err(AdminError::BadValue(
                "the scrub rate is a percentage from 1 to 100",
            ));
        }
        self.superblock.scrub_rate_percent = percent;
        self.request_superblock_update();
        Ok(())
    }

    /// Makes the rebuild rate adapt so host requests finish within `target_us` on average
    /// (0 turns the adaptation off and returns to the fixed rate).
    pub fn set_rebuild_latency_target(&mut self, target_us: u32) {
        self.superblock.rebuild_latency_target_us = target_us;
        self.background.pacer.adaptive_rate_percent = None;
        self.request_superblock_update();
    }

    /// A running scrub's progress: (repair mode, stripes done, stripes in all, findings).
    pub fn scrub_progress(&self) -> Option<(bool, u64, u64, ScrubStats)> {
        self.background
            .scrub_progress()
            .map(|(repair, next, stats)| {
                (
                    repair,
                    next.min(self.geometry.stripe_count()),
                    self.geometry.stripe_count(),
                    stats,
                )
            })
    }

    /// How the last scrub ended.
    pub fn last_scrub(&self) -> Option<ScrubResult> {
        self.background.last_scrub
    }

    /// The rebuild (or scrub) throughput recently achieved, bytes per second.
    pub fn background_bytes_per_second(&self) -> f64 {
        self.background.pacer.background_bytes_per_second
    }

    /// The rebuild rate in effect (adapted to the latency target when one is set).
    pub fn effective_rebuild_rate(&self) -> u8 {
        self.background
            .pacer
            .adaptive_rate_percent
            .unwrap_or(self.superblock.rebuild_rate_percent)
    }

    /// Brings a failed member back to be rebuilt in its role (after an administrative fail, or a
    /// device that returned): it is trusted nowhere until the rebuild passes over it.
    pub fn readmit_member(&mut self, member: usize) -> Result<(), AdminError> {
        let entry = self
            .members
            .list
            .get(member)
            .ok_or(AdminError::NoSuchMember(member))?;
        let Some(role) = entry.role else {
            return Err(AdminError::NoSuchMember(member));
        };
        if !entry.is_failed() {
            return Err(AdminError::NotFailed(member));
        }
        if self.members.group_state(&self.geometry) == GroupState::Failed {
            return Err(AdminError::GroupFailed);
        }
        if self.members.rebuilding().is_some() {
            return Err(AdminError::RebuildRunning);
        }
        if self.members.role_active(role) {
            return Err(AdminError::RoleTaken(role));
        }
        let entry = &mut self.members.list[member];
        entry.state = MemberState::Rebuilding { position_bytes: 0 };
        entry.replacing = false;
        self.request_superblock_update();
        self.pump();
        Ok(())
    }

    /// Begins an orderly stop: new requests are refused; once idle, dirty regions are cleared
    /// and the superblock is marked clean. `is_stopped` tells when it is done.
    pub fn stop(&mut self) {
        if self.phase == Phase::Running {
            self.phase = Phase::Stopping;
        }
        self.pump();
    }

    /// True once a stop has finished: nothing in flight, metadata clean and durable.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopping
            && self.is_idle()
            && self.startup.shutdown == Some(meta::Shutdown::Done)
    }

    /// Replaces the opaque configuration blob of the superblock (the virtual-drive table) and
    /// persists it. Returns the generation that will carry it.
    pub fn set_config(&mut self, config: Vec<u8>) -> u64 {
        assert!(config.len() <= crate::superblock::MAX_CONFIG_BYTES);
        self.superblock.config = config;
        self.request_superblock_update()
    }

    /// The superblock generation known durable on the members.
    pub fn durable_generation(&self) -> u64 {
        self.meta.durable_generation
    }

    // ----- internal plumbing -----

    fn issue(&mut self, member: usize, op: MemberOp, owner: Owner) {
        assert!(member < self.members.list.len());
        let is_write = !matches!(op, MemberOp::Read { .. });
        match op {
            MemberOp::Read { buffer, .. } => self.counters.member_read_bytes += buffer.len() as u64,
            MemberOp::Write { buffer, .. } => {
                self.counters.member_write_bytes += buffer.len() as u64
            }
            MemberOp::WriteZeroes { buffer, .. } => {
                self.counters.member_zeroed_bytes += buffer.len() as u64
            }
            MemberOp::Flush => {}
        }
        let key = self.in_flight.insert(InFlight {
            member,
            owner,
            is_write,
        });
        self.members.list[member].in_flight += 1;
        self.out.push_back(Command::Member(MemberCommand {
            id: CommandId(key.to_u64()),
            member,
            op,
        }));
    }

    fn emit_event(&mut self, event: GroupEvent) {
        self.out.push_back(Command::Event(event));
    }

    fn reject(&mut self, request: HostRequest, error: HostError) {
        if let HostOp::Write { buffer, .. } = request.op {
            self.pool.free(buffer);
        }
        self.out.push_back(Command::Reply(Reply {
            id: request.id,
            result: Err(error),
        }));
    }

    /// Runs every piece of machinery until nothing more can progress.
    fn pump(&mut self) {
        let mut rounds = 0u32;
        loop {
            let mut progressed = [false; 12];
            while let Some(op) = self.ready.pop_front() {
                self.advance_op(op);
                progressed[0] = true;
            }
            progressed[1] = self.pump_startup();
            progressed[2] = self.pump_superblock();
            progressed[3] = self.pump_bitmap();
            progressed[4] = self.pump_zero_fills();
            progressed[5] = self.pump_flushes();
            progressed[6] = self.pump_background();
            progressed[7] = self.admit_deferred();
            progressed[8] = self.release_parked() | self.release_failure_waiters();
            progressed[9] = self.retry_memory_waiters();
            progressed[10] = self.pump_stop();
            progressed[11] = self.pump_journal();
            if !progressed.iter().any(|&p| p) {
                break;
            }
            rounds += 1;
            // Every round must consume finite work; a machine that keeps reporting progress
            // without any is a bug worth stopping for.
            assert!(rounds < 1_000_000, "engine machinery spins: {progressed:?}");
        }
        self.report_state_change();
    }

    fn report_state_change(&mut self) {
        let state = self.state();
        if state != self.reported_state {
            let from = self.reported_state;
            self.reported_state = state;
            self.emit_event(GroupEvent::StateChanged { from, to: state });
        }
    }

    /// Admits waiting requests in order. A read waiting for buffer space does not hold back
    /// the requests behind it (they need no new space, and writes may be what frees it); it
    /// keeps its place among the other reads.
    fn admit_deferred(&mut self) -> bool {
        if self.phase == Phase::Starting || self.deferred.is_empty() {
            return false;
        }
        let mut progressed = false;
        let mut still_waiting = VecDeque::new();
        while let Some(request) = self.deferred.pop_front() {
            let is_read = matches!(request.op, HostOp::Read { .. });
            if is_read
                && still_waiting
                    .iter()
                    .any(|r: &HostRequest| matches!(r.op, HostOp::Read { .. }))
            {
                still_waiting.push_back(request);
                continue;
            }
            if self.admit(request) {
                progressed = true;
            } else {
                // `admit` put it back at the front; move it to the waiting list.
                let request = self.deferred.pop_front().expect("put back by admit");
                still_waiting.push_back(request);
            }
        }
        self.deferred = still_waiting;
        progressed
    }

    /// A member failed and the superblock saying so is not durable yet. Until it is, a power
    /// cut brings the member back as online with whatever it held, so nothing may come to
    /// depend on it being out: stripe updates that would leave its columns behind wait,
    /// journal entries are not retired and dirty regions are not cleared (replay or resync
    /// then makes those stripes whole again), as md holds stripe writes until a failed
    /// device is recorded.
    pub(super) fn failure_pending(&self) -> bool {
        self.meta.failure_generation > self.meta.durable_generation
    }

    /// Updates that waited for a failure to be recorded go on once it is.
    fn release_failure_waiters(&mut self) -> bool {
        if self.failure_waiters.is_empty() || self.failure_pending() {
            return false;
        }
        let waiters = std::mem::take(&mut self.failure_waiters);
        self.ready.extend(waiters);
        true
    }

    fn release_parked(&mut self) -> bool {
        let durable = self.meta.durable_generation;
        if self.parked.iter().all(|(needed, _)| *needed > durable) {
            return false;
        }
        let parked = std::mem::take(&mut self.parked);
        for (needed, reply) in parked {
            if needed <= durable {
                self.out.push_back(Command::Reply(reply));
            } else {
                self.parked.push((needed, reply));
            }
        }
        true
    }

    /// Ops that found no buffer space retry once some has been freed since.
    fn retry_memory_waiters(&mut self) -> bool {
        if self.waiting_for_memory.is_empty()
            || self.pool.used_bytes() >= self.memory_blocked_used_bytes
        {
            return false;
        }
        self.memory_blocked_used_bytes = usize::MAX;
        let waiting: Vec<OpId> = self.waiting_for_memory.drain(..).collect();
        self.ready.extend(waiting);
        true
    }

    fn pump_stop(&mut self) -> bool {
        if self.phase != Phase::Stopping || !self.is_quiet() {
            return false;
        }
        self.begin_clean_shutdown()
    }

    /// Marks a member failed (latched until rebuilt) and records it in the superblock.
    fn fail_member(&mut self, member: usize, reason: FailReason) {
        let state = self.members.list[member].state;
        if matches!(state, MemberState::Failed(_)) {
            return;
        }
        self.members.list[member].state = MemberState::Failed(reason);
        if state == MemberState::Journal {
            self.journal_device_lost();
        }
        let uuid = self.members.list[member].uuid;
        self.emit_event(GroupEvent::MemberFailed {
            member,
            uuid,
            reason,
        });
        let generation = self.request_superblock_update();
        self.meta.failure_generation = self.meta.failure_generation.max(generation);
        self.background.member_failed(member);
        if self.members.group_state(&self.geometry) == GroupState::Failed {
            self.fail_all_queued();
        }
    }

    /// Finishes one part of a host request.
    fn finish_part(&mut self, request: Key, result: Result<(), HostError>) {
        let entry = self.requests.get_mut(request).expect("request in flight");
        assert!(entry.parts_pending > 0);
        entry.parts_pending -= 1;
        if let Err(error) = result {
            entry.error.get_or_insert(error);
        }
        if entry.parts_pending > 0 {
            return;
        }
        if entry.fua && entry.error.is_none() && (entry.fua_members != 0 || entry.fua_bitmap) {
            let members = std::mem::take(&mut entry.fua_members);
            let only = if std::mem::take(&mut entry.fua_bitmap) {
                None
            } else {
                Some(members)
            };
            entry.fua = false;
            entry.parts_pending = 1;
            self.start_flush(Some(request), only);
            return;
        }
        let mut entry = self.requests.remove(request).expect("request in flight");
        if entry.read_buffer.is_some()
            && entry.error.is_none()
            && self.overlaps_bad(entry.read_range.0, entry.read_range.1)
        {
            entry.error = Some(HostError::Io);
        }
        if let Some(buffer) = entry.write_buffer {
            self.pool.free(buffer);
        }
        let result = match (entry.error, entry.read_buffer) {
            (Some(error), buffer) => {
                if let Some(buffer) = buffer {
                    self.pool.free(buffer);
                }
                Err(error)
            }
            (None, buffer) => Ok(buffer),
        };
        let reply = Reply {
            id: entry.id,
            result,
        };
        let latency_us = self.now_us.saturating_sub(entry.submit_us);
        self.background.pacer.host_latency(latency_us);
        if entry.write_buffer.is_some() {
            let average = self.write_latency_average_us;
            self.write_latency_average_us = average - average / 8 + latency_us / 8;
        }
        let needed = self.meta.failure_generation;
        if entry.waits_for_metadata && needed > self.meta.durable_generation {
            self.parked.push((needed, reply));
        } else {
            self.out.push_back(Command::Reply(reply));
        }
    }

    fn start_flush(&mut self, request: Option<Key>, only_members: Option<u64>) -> Key {
        let epoch = self.regions.next_flush_epoch();
        self.flushes.insert(FlushOp {
            request,
            only_members,
            stage: FlushStage::WaitBitmap,
            epoch,
        })
    }

    fn pump_flushes(&mut self) -> bool {
        // Runs on every pump while flushes are in flight: look before listing them.
        if !self
            .flushes
            .iter()
            .any(|(_, flush)| flush.stage == FlushStage::WaitBitmap)
        {
            return false;
        }
        let mut progressed = false;
        for key in self.flushes.keys() {
            let flush = self.flushes.get(key).expect("live flush");
            if flush.stage != FlushStage::WaitBitmap {
                continue;
            }
            // Bitmap changes (written-bit clears by trim/zeroes) become durable with the flush.
            if flush.only_members.is_none() && !self.regions.all_blocks_clean() {
                self.regions.request_all_pending_writes();
                continue;
            }
            let targets: members::MemberList = self
                .members
                .data_members()
                .into_iter()
                .filter(|&member| {
                    flush
                        .only_members
                        .is_none_or(|mask| mask & (1 << member) != 0)
                })
                .collect();
            let pending = u32::try_from(targets.len()).expect("member count fits u32");
            self.flushes.get_mut(key).expect("live flush").stage = FlushStage::Flushing { pending };
            for member in targets {
                self.issue(member, MemberOp::Flush, Owner::Flush { flush: key });
            }
            if pending == 0 {
                self.flush_finished(key);
            }
            progressed = true;
        }
        progressed
    }

    fn flush_io_done(&mut self, key: Key) {
        let flush = self.flushes.get_mut(key).expect("live flush");
        let FlushStage::Flushing { pending } = &mut flush.stage else {
            unreachable!("flush completes while flushing")
        };
        *pending -= 1;
        if *pending == 0 {
            self.flush_finished(key);
        }
    }

    fn flush_finished(&mut self, key: Key) {
        let flush = self.flushes.remove(key).expect("live flush");
        if flush.only_members.is_none() {
            self.regions.finish_flush_epoch(flush.epoch);
            self.journal_flush_done(flush.epoch);
            self.replay_flush_done();
        }
        if let Some(request) = flush.request {
            let failed = self.members.group_state(&self.geometry) == GroupState::Failed;
            self.finish_part(request, if failed { Err(HostError::Io) } else { Ok(()) });
        }
    }

    /// Every queued and future request fails once the group is beyond redundancy.
    fn fail_all_queued(&mut self) {
        while let Some(request) = self.deferred.pop_front() {
            self.reject(request, HostError::Io);
        }
    }

    /// The member and device offset to read copy-agnostic data at (`stripe`, data chunk
    /// `index`, byte `within` of the chunk), or `None` if no copy is readable.
    /// `primary_only` picks the first readable copy in copy order (used where mirrors may
    /// disagree until resynced); otherwise the least busy copy.
    fn data_reader(
        &self,
        stripe: u64,
        index: usize,
        within: u64,
        primary_only: bool,
        exclude: u64,
    ) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for copy in 0..self.geometry.copies() {
            let placement = self.geometry.data_placement(stripe, index, copy);
            let Some(member) = self
                .members
                .reader(placement.member, placement.offset_bytes)
            else {
                continue;
            };
            if exclude & (1 << member) != 0 {
                continue;
            }
            let offset = self.superblock.data_offset_bytes + placement.offset_bytes + within;
            if primary_only {
                return Some((member, offset));
            }
            let busier = best.is_some_and(|(chosen, _)| {
                self.members.list[chosen].in_flight <= self.members.list[member].in_flight
            });
            if !busier {
                best = Some((member, offset));
            }
        }
        best
    }

    /// Members (and device offsets of the chunk start) that a write of `column` of `stripe`
    /// must reach. Inline for the usual handful (a copy per mirror, a second writer while a
    /// member is replaced): this runs several times per stripe update.
    fn column_writers(&self, stripe: u64, column: Column) -> Writers {
        let mut writers = Writers::new();
        let mut add = |placement: crate::geometry::Placement| {
            let offset_bytes = self.superblock.data_offset_bytes + placement.offset_bytes;
            writers.extend(
                self.members
                    .writers(placement.member, placement.offset_bytes)
                    .map(|member| (member, offset_bytes)),
            );
        };
        match column {
            Column::Data(index) => {
                for copy in 0..self.geometry.copies() {
                    add(self.geometry.data_placement(stripe, index, copy));
                }
            }
            Column::Parity(which) => add(self.geometry.parity_placement(stripe, which)),
        }
        writers
    }

    /// The member able to read `column` of `stripe` for parity-level recovery (one copy).
    fn column_reader(&self, stripe: u64, column: Column) -> Option<(usize, u64)> {
        let placement = match column {
            Column::Data(index) => self.geometry.data_placement(stripe, index, 0),
            Column::Parity(which) => self.geometry.parity_placement(stripe, which),
        };
        let member = self
            .members
            .reader(placement.member, placement.offset_bytes)?;
        Some((
            member,
            self.superblock.data_offset_bytes + placement.offset_bytes,
        ))
    }

    fn slice(&self, buffer: BufferId, offset_bytes: u64, len_bytes: u64) -> BufferSlice {
        BufferSlice::new(buffer, offset_bytes as usize, len_bytes as usize)
    }
}
