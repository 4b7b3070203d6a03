//! One simulated run: the engine, its member devices, a host workload, faults, crashes, and
//! the checkers, all on one thread and driven by one seed.

use crate::config::{Config, FaultMode};
use crate::member::SimMember;
use crate::model::{ANY, Model, WriteTicket};
use crate::pattern::{self, SECTOR_BYTES};
use crate::prng::Rng;
use crate::thin::ThinDrive;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tessera_parity::Kernel;
use tessera_raid::engine::{
    Command, CommandId, ComputeCommand, ComputeJob, CreateSpec, DeviceProbe, Engine, EngineConfig,
    GroupEvent, GroupState, HostError, HostOp, HostRequest, MemberCommand, MemberError, MemberOp,
    Reply,
};
use tessera_raid::geometry::{Column, Geometry};
use tessera_raid::plan::Recovery;
use tessera_raid::superblock::{SUPERBLOCK_BYTES, SUPERBLOCK_OFFSETS, Uuid, newest_copy};

/// What a run did, for the summary line.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub host_ops: u64,
    pub reads_checked: u64,
    pub crashes: u64,
    /// Crashes after which members were lost before assembly.
    pub crash_losses: u64,
    pub member_losses: u64,
    pub write_failures: u64,
    pub latent_errors: u64,
    pub bit_flips: u64,
    pub admin_fails: u64,
    pub restarts: u64,
    pub rebuilds: u64,
    pub failed_requests: u64,
    pub sim_time_us: u64,
    /// Parity computations handed out by the engine and carried out by the world.
    pub offloaded_computes: u64,
    /// Thin runs: writes refused for lack of physical space, and store start-ups that
    /// rebuilt the map from the group.
    pub thin_no_space: u64,
    pub thin_recoveries: u64,
    /// Journal batches written to their parity members alone, over every engine of the run.
    pub journal_home_batches: u64,
    /// Journal batches written from the reserved batch buffer (the pool had no room).
    pub journal_reserve_batches: u64,
    /// Member completions handed to the engine two or more at a time.
    pub batched_completions: u64,
    /// Host requests submitted to the engine two or more at a time.
    pub batched_submissions: u64,
}

struct Device {
    member: SimMember,
    uuid: Uuid,
    /// Replaced and out of the group for good.
    retired: bool,
    /// Superblock copies with a flipped bit not yet rewritten.
    flipped: [bool; 2],
}

enum Scheduled {
    Member {
        command: MemberCommand,
        device: usize,
        flush_point: u64,
    },
    /// Handed-out parity work and a digest of its inputs when it was handed out.
    Compute {
        command: ComputeCommand,
        inputs_digest: u64,
    },
}

/// A request for the group (a plain run) or for the thin drive (a thin run).
#[derive(Debug)]
enum Request {
    Group(HostOp),
    Thin(tessera_thin::HostOp),
}

/// A write's data: in the engine's pool for the group, a vector for the thin drive.
enum Payload {
    Buffer(tessera_buffer::BufferId),
    Data(Vec<u8>),
}

enum HostKind {
    Read { offset_bytes: u64, len_bytes: u64 },
    Write { ticket: WriteTicket, fua: bool },
    Flush,
    Discard { ticket: WriteTicket },
    Zeroes { ticket: WriteTicket, fua: bool },
}

/// What the buffer of a read marked `for_host` holds between the read and its reply.
const HOST_READ_POISON: u8 = 0x5a;

struct HostInFlight {
    kind: HostKind,
    submit: u64,
}

/// Why a host request failed, from the group or from the thin drive.
#[derive(Debug)]
enum Failure {
    /// A write-zeroes with `fast_only` that would have had to write.
    NotFast,
    /// The thin drive has no physical space left for the write.
    NoSpace,
    /// The thin drive is stopping for a clean restart.
    Unavailable,
    Io(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotFast => f.write_str("not fast"),
            Failure::NoSpace => f.write_str("no space"),
            Failure::Unavailable => f.write_str("unavailable"),
            Failure::Io(why) => write!(f, "I/O error ({why})"),
        }
    }
}

pub struct World {
    config: Config,
    rng: Rng,
    parity: Arc<dyn Kernel>,
    engine: Option<Engine>,
    devices: Vec<Device>,
    /// Engine member index -> device index.
    map: Vec<Option<usize>>,
    group_uuid: Uuid,
    now_us: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    scheduled: BTreeMap<u64, Scheduled>,
    sequence: u64,
    model: Model,
    in_flight: BTreeMap<u64, HostInFlight>,
    /// While the queue is refilled with `batch_events`: the group requests to submit together.
    held_requests: Option<Vec<HostRequest>>,
    /// Emptied vectors kept for the next refill and the next member completion, which would
    /// otherwise allocate one each.
    spare_requests: Vec<HostRequest>,
    spare_completions: Vec<(CommandId, Result<(), MemberError>)>,
    /// Bytes of reads the engine marked as the host's alone (`for_host`), by host request:
    /// kept aside and put in the reply's buffer only when the reply comes, while the buffer
    /// itself holds `HOST_READ_POISON` meanwhile, as a daemon splicing them to the host's
    /// socket leaves it. An engine that used those bytes would compute with the poison.
    host_reads: BTreeMap<u64, Vec<(tessera_buffer::BufferSlice, Vec<u8>)>>,
    next_request_id: u64,
    next_write_id: u64,
    submitted: u64,
    /// Time at which a failed member is replaced, if one is pending.
    repair_at: Option<u64>,
    faults_enabled: bool,
    /// An orderly stop is under way (repairs wait for the fresh assembly).
    restarting: bool,
    /// An event (a scrub's result, a thin drive's checksum repair) told of something that
    /// cannot happen within tolerance.
    event_failure: Option<String>,
    /// The thin drive of a thin run.
    thin: Option<ThinDrive>,
    /// The last thin scrub's result: blocks checked, errors detected, errors repaired.
    thin_scrub: Option<(u64, u64, u64)>,
    pub stats: Stats,
    trace: Vec<String>,
}

const TRACE_LINES: usize = 400;

/// A thin drive's block.
const BLOCK_BYTES: u64 = tessera_thin::BLOCK_BYTES;

impl World {
    pub fn new(config: Config) -> World {
        let mut rng = Rng::new(config.seed.wrapping_mul(31).wrapping_add(7));
        let parity: Arc<dyn Kernel> = Arc::new(tessera_parity::Scalar);
        let devices = (0..config.members)
            .map(|_| Device {
                member: SimMember::new(config.member_bytes),
                uuid: random_uuid(&mut rng),
                retired: false,
                flipped: [false; 2],
            })
            .collect();
        let group_uuid = random_uuid(&mut rng);
        World {
            model: Model::new(0, config.mode == FaultMode::MustSurvive),
            config,
            rng,
            parity,
            engine: None,
            devices,
            map: Vec::new(),
            group_uuid,
            now_us: 0,
            queue: BinaryHeap::new(),
            scheduled: BTreeMap::new(),
            sequence: 0,
            in_flight: BTreeMap::new(),
            held_requests: None,
            spare_requests: Vec::new(),
            spare_completions: Vec::new(),
            host_reads: BTreeMap::new(),
            next_request_id: 1,
            next_write_id: 1,
            submitted: 0,
            repair_at: None,
            faults_enabled: true,
            restarting: false,
            event_failure: None,
            thin: None,
            thin_scrub: None,
            stats: Stats::default(),
            trace: Vec::new(),
        }
    }

    fn engine(&mut self) -> &mut Engine {
        self.engine.as_mut().expect("engine running")
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_LINES && watched_sector().is_none() {
            self.trace.remove(0);
        }
        self.trace.push(format!("[{} us] {line}", self.now_us));
    }

    /// The recent trace, for failure reports.
    pub fn trace(&self) -> String {
        self.trace.join("\n")
    }

    fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            pool_bytes: self.config.pool_bytes,
            coalesce_window_us: self.config.coalesce_window_us,
            dirty_clear_delay_us: self.config.dirty_clear_delay_us,
            rebuild_window: self.config.rebuild_window,
            rebuild_window_bytes: u64::MAX,
            resync_window: 2,
            rebuild_checkpoint_bytes: 4 * self.config.chunk_bytes,
            offload_parity: self.config.offload_parity,
        }
    }

    pub fn run(&mut self) -> Result<(), String> {
        self.create()?;
        while self.submitted < self.config.host_ops {
            self.maybe_fault()?;
            self.fill_queue();
            self.step()?;
        }
        self.faults_enabled = false;
        self.quiesce()?;
        self.verify_all()?;
        self.check_redundancy()?;
        self.final_scrub()?;
        self.count_engine();
        self.stats.sim_time_us = self.now_us;
        Ok(())
    }

    /// Adds the running engine's counters to the run's statistics before it goes away.
    fn count_engine(&mut self) {
        if let Some(engine) = &self.engine {
            let counters = engine.status().counters;
            self.stats.journal_home_batches += counters.journal_home_batches;
            self.stats.journal_reserve_batches += counters.journal_reserve_batches;
        }
    }

    fn create(&mut self) -> Result<(), String> {
        let spec = CreateSpec {
            group_uuid: self.group_uuid,
            name: format!("sim-{}", self.config.seed),
            level: self.config.level,
            chunk_bytes: self.config.chunk_bytes,
            members: self
                .devices
                .iter()
                .map(|d| (d.uuid, d.member.size_bytes))
                .collect(),
            created_unix_seconds: 0,
            region_bytes: Some(self.config.region_bytes),
            journal_bytes: self.config.journal_bytes(),
            journal_mode: self.config.journal_mode,
            journal_device: None,
            rebuild_rate_percent: self.config.rebuild_rate_percent,
            config: Vec::new(),
        };
        let engine = Engine::create(spec, self.engine_config(), self.parity.clone())
            .map_err(|e| format!("create: {e}"))?;
        let working = self.config.working_bytes.min(engine.data_bytes());
        self.config.working_bytes = working / SECTOR_BYTES as u64 * SECTOR_BYTES as u64;
        if self.config.thin {
            // The drive is usually smaller than its physical space; now and then three times
            // larger, so that it runs out of space.
            let overcommit = self.rng.chance(125_000);
            let physical = ThinDrive::physical_bytes(&engine)?;
            let logical = if overcommit {
                3 * physical
            } else {
                self.config.working_bytes.min(physical / 2)
            };
            let logical = (logical / BLOCK_BYTES).max(1) * BLOCK_BYTES;
            self.thin = Some(ThinDrive::create(&engine, logical, &mut self.rng)?);
            self.config.working_bytes = logical;
        }
        self.model = Model::new(
            self.config.working_bytes / SECTOR_BYTES as u64,
            self.config.mode == FaultMode::MustSurvive,
        );
        self.map = (0..self.devices.len()).map(Some).collect();
        self.engine = Some(engine);
        self.note(format!("created {:?}", self.config));
        Ok(())
    }

    fn geometry(&self) -> Geometry {
        *self.engine.as_ref().expect("engine").geometry()
    }

    // ----- workload -----

    fn fill_queue(&mut self) {
        if self.config.batch_events {
            self.held_requests = Some(std::mem::take(&mut self.spare_requests));
        }
        while self.in_flight.len() < self.config.host_queue_depth()
            && self.submitted < self.config.host_ops
        {
            if !self.submit_one() {
                break;
            }
        }
        if let Some(mut requests) = self.held_requests.take() {
            if requests.len() > 1 {
                self.stats.batched_submissions += requests.len() as u64;
            }
            if !requests.is_empty() {
                self.engine().submit_all(requests.drain(..));
            }
            self.spare_requests = requests;
        }
    }

    fn random_range(&mut self) -> (u64, u64) {
        let sectors = self.config.working_bytes / SECTOR_BYTES as u64;
        let max = (self.config.max_request_bytes / SECTOR_BYTES as u64).min(sectors);
        let len = if self.rng.chance(300_000) {
            self.rng.between(1, 8)
        } else {
            self.rng.between(1, max)
        };
        let len = len.min(sectors);
        let start = if self.rng.chance(200_000) {
            // Aligned to a chunk, to produce full-stripe writes now and then.
            let chunk_sectors = self.config.chunk_bytes / SECTOR_BYTES as u64;
            self.rng.below(sectors / chunk_sectors) * chunk_sectors
        } else {
            self.rng.below(sectors - len + 1)
        };
        (start.min(sectors - len), len)
    }

    /// Submits one host request; false if none could be submitted now (no buffer space).
    fn submit_one(&mut self) -> bool {
        let id = self.next_request_id;
        let roll = self.rng.below(100);
        let thin = self.thin.is_some();
        let (kind, request) = if roll < 40 {
            let (start, len) = self.random_range();
            let (offset_bytes, len_bytes) = (start * 512, len * 512);
            let kind = HostKind::Read {
                offset_bytes,
                len_bytes,
            };
            if thin {
                (
                    kind,
                    Request::Thin(tessera_thin::HostOp::Read {
                        offset_bytes,
                        len_bytes,
                    }),
                )
            } else {
                // Every eighth read of a redundant group goes around one copy of its data (as
                // a thin drive does after a checksum failure); picked by id so the random
                // stream, and so every seed's schedule, stays as it was.
                let geometry = self.engine().geometry();
                let chunk_sectors = geometry.chunk_bytes() / 512;
                let sources = if geometry.parity_chunks() > 0 {
                    // Parity levels number the chunks the range touches.
                    (start + len).div_ceil(chunk_sectors) - start / chunk_sectors
                } else {
                    geometry.copies() as u64
                };
                let op = if geometry.redundancy() > 0 && id.is_multiple_of(8) {
                    HostOp::ReadAround {
                        offset_bytes,
                        len_bytes,
                        copy: ((id / 8) % sources) as u8,
                    }
                } else {
                    HostOp::Read {
                        offset_bytes,
                        len_bytes,
                    }
                };
                (kind, Request::Group(op))
            }
        } else if roll < 85 {
            let (start, len) = self.random_range();
            let mut write = self.next_write_id;
            // Half of a thin drive's writes compress well.
            if thin && self.rng.chance(500_000) {
                write |= pattern::COMPRESSIBLE;
            }
            let fill = |bytes: &mut [u8]| {
                for (i, sector) in bytes.chunks_exact_mut(SECTOR_BYTES).enumerate() {
                    pattern::fill(write, start + i as u64, sector);
                }
            };
            let payload = if thin {
                let mut data = vec![0; (len * 512) as usize];
                fill(&mut data);
                Payload::Data(data)
            } else {
                let Some(buffer) = self.engine().alloc_host_buffer((len * 512) as usize) else {
                    return false;
                };
                fill(self.engine().pool_mut().slice_mut(buffer));
                Payload::Buffer(buffer)
            };
            self.next_write_id += 1;
            let fua = self.rng.chance(100_000);
            let ticket = self
                .model
                .write_submitted(start, &vec![write; len as usize]);
            let offset_bytes = start * 512;
            let request = match payload {
                Payload::Data(data) => Request::Thin(tessera_thin::HostOp::Write {
                    offset_bytes,
                    data,
                    fua,
                }),
                Payload::Buffer(buffer) => Request::Group(HostOp::Write {
                    offset_bytes,
                    buffer,
                    fua,
                }),
            };
            (HostKind::Write { ticket, fua }, request)
        } else if roll < 92 {
            let request = if thin {
                Request::Thin(tessera_thin::HostOp::Flush)
            } else {
                Request::Group(HostOp::Flush)
            };
            (HostKind::Flush, request)
        } else if roll < 96 {
            let (start, len) = self.wide_range();
            let ticket = self.model.write_submitted(start, &vec![ANY; len as usize]);
            let (offset_bytes, len_bytes) = (start * 512, len * 512);
            let request = if thin {
                Request::Thin(tessera_thin::HostOp::Trim {
                    offset_bytes,
                    len_bytes,
                })
            } else {
                Request::Group(HostOp::Trim {
                    offset_bytes,
                    len_bytes,
                })
            };
            (HostKind::Discard { ticket }, request)
        } else {
            let (start, len) = self.wide_range();
            let fua = self.rng.chance(200_000);
            let may_deallocate = self.rng.chance(700_000);
            let fast_only = self.rng.chance(200_000);
            let ticket = self.model.write_submitted(start, &vec![0; len as usize]);
            let (offset_bytes, len_bytes) = (start * 512, len * 512);
            let request = if thin {
                Request::Thin(tessera_thin::HostOp::WriteZeroes {
                    offset_bytes,
                    len_bytes,
                    fua,
                })
            } else {
                Request::Group(HostOp::WriteZeroes {
                    offset_bytes,
                    len_bytes,
                    may_deallocate,
                    fast_only,
                    fua,
                })
            };
            (HostKind::Zeroes { ticket, fua }, request)
        };
        let submit = self.model.now();
        if let Some(watch) = watched_sector() {
            let (offset, len) = match &kind {
                HostKind::Read {
                    offset_bytes,
                    len_bytes,
                } => (*offset_bytes, *len_bytes),
                HostKind::Write { ticket, .. }
                | HostKind::Discard { ticket }
                | HostKind::Zeroes { ticket, .. } => ticket.byte_range(),
                HostKind::Flush => (0, u64::MAX),
            };
            if watch * 512 >= offset && watch * 512 - offset < len {
                self.note(format!(
                    "request {id} (t{submit}): {request:?} len {len} write id {}",
                    self.next_write_id - 1
                ));
            }
        }
        self.in_flight.insert(id, HostInFlight { kind, submit });
        self.next_request_id += 1;
        self.submitted += 1;
        self.stats.host_ops += 1;
        self.update_oldest_read();
        self.send_request(id, request);
        true
    }

    fn send_request(&mut self, id: u64, request: Request) {
        match request {
            Request::Group(op) => match &mut self.held_requests {
                Some(held) => held.push(HostRequest { id, op }),
                None => self.engine().submit(HostRequest { id, op }),
            },
            Request::Thin(op) => match self.thin.as_mut().and_then(|t| t.store.as_mut()) {
                Some(store) => store.submit(id, op),
                // The store could not start (beyond tolerance only): nothing is served.
                None => {
                    let reply = self.finish_host(id, Err(Failure::Io("no thin store".into())));
                    reply.expect("a failed start was reported when it happened");
                }
            },
        }
    }

    /// A range that often covers whole regions (for trim and write-zeroes).
    fn wide_range(&mut self) -> (u64, u64) {
        let sectors = self.config.working_bytes / SECTOR_BYTES as u64;
        let region_sectors = self.config.region_bytes / SECTOR_BYTES as u64;
        if self.rng.chance(600_000) && sectors >= region_sectors {
            let regions = sectors / region_sectors;
            let first = self.rng.below(regions);
            let count = self.rng.between(1, (regions - first).min(3));
            (first * region_sectors, count * region_sectors)
        } else {
            self.random_range()
        }
    }

    fn update_oldest_read(&mut self) {
        let oldest = self
            .in_flight
            .values()
            .filter(|h| matches!(h.kind, HostKind::Read { .. }))
            .map(|h| h.submit)
            .min()
            .unwrap_or(u64::MAX);
        self.model.set_oldest_read(oldest);
    }

    // ----- the event loop -----

    /// Carries out whatever the engine asked for, then advances to the next event.
    fn step(&mut self) -> Result<(), String> {
        self.drain()?;
        let next_io = self.queue.peek().map(|Reverse((time, _))| *time);
        let deadline = self.engine.as_ref().and_then(Engine::next_deadline_us);
        let thin_deadline = self.store().and_then(tessera_thin::Store::next_deadline_us);
        let repair_at = self.repair_at.filter(|_| !self.restarting);
        let next = [next_io, deadline, thin_deadline, repair_at]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            if !self.in_flight.is_empty() {
                let engine = self
                    .engine
                    .as_ref()
                    .map(Engine::debug_summary)
                    .unwrap_or_default();
                let store = self
                    .store()
                    .map(tessera_thin::Store::debug_position)
                    .unwrap_or_default();
                return Err(format!(
                    "liveness: {} host requests stuck with no I/O in flight ({engine}) {store}",
                    self.in_flight.len()
                ));
            }
            return Ok(());
        };
        self.now_us = self.now_us.max(next);
        let now = self.now_us;
        self.engine().tick(now);
        if let Some(store) = self.thin.as_mut().and_then(|t| t.store.as_mut()) {
            store.tick(now);
        }
        if !self.restarting && self.repair_at.is_some_and(|at| at <= now) {
            self.repair_at = None;
            self.repair()?;
        }
        if let Some(Reverse((time, sequence))) = self.queue.peek().copied()
            && time <= now
        {
            self.queue.pop();
            match self.scheduled.remove(&sequence).expect("scheduled command") {
                Scheduled::Member {
                    command,
                    device,
                    flush_point,
                } => {
                    let result = self.execute(command, device, flush_point);
                    let mut completions = std::mem::take(&mut self.spare_completions);
                    completions.push((command.id, result));
                    if self.config.batch_events {
                        self.execute_due_members(&mut completions);
                    }
                    if completions.len() > 1 {
                        self.stats.batched_completions += completions.len() as u64;
                    }
                    self.engine().complete_all(completions.drain(..));
                    self.spare_completions = completions;
                }
                Scheduled::Compute {
                    command,
                    inputs_digest,
                } => self.execute_compute(command, inputs_digest)?,
            }
        }
        self.drain()
    }

    /// Carries out the member commands due now that come next in the queue (up to the first
    /// parity job), adding their completions to `completions`: a driver reaping its ring hands
    /// the engine every completion it found at once.
    fn execute_due_members(&mut self, completions: &mut Vec<(CommandId, Result<(), MemberError>)>) {
        while let Some(Reverse((time, sequence))) = self.queue.peek().copied()
            && time <= self.now_us
            && matches!(
                self.scheduled.get(&sequence),
                Some(Scheduled::Member { .. })
            )
        {
            self.queue.pop();
            let Some(Scheduled::Member {
                command,
                device,
                flush_point,
            }) = self.scheduled.remove(&sequence)
            else {
                unreachable!("checked above")
            };
            let result = self.execute(command, device, flush_point);
            completions.push((command.id, result));
        }
    }

    fn drain(&mut self) -> Result<(), String> {
        if let Some(failure) = self.event_failure.take() {
            return Err(failure);
        }
        loop {
            let mut progress = false;
            while let Some(command) = self.engine.as_mut().and_then(Engine::poll) {
                progress = true;
                match command {
                    Command::Member(command) => self.schedule(command),
                    Command::Reply(reply) => self.host_reply(reply)?,
                    Command::Event(event) => self.event(event),
                    Command::Compute(command) => self.schedule_compute(command),
                }
            }
            while let Some(output) = self.thin.as_mut().and_then(|t| t.store.as_mut()?.poll()) {
                progress = true;
                match output {
                    tessera_thin::Output::Lower(command) => {
                        self.thin.as_mut().expect("thin").queue_lower(command)
                    }
                    tessera_thin::Output::Reply(reply) => {
                        // A buffer goes back to the store as the daemon's does once sent, so
                        // the simulated drive runs its buffer reuse.
                        if let (Ok(Some(data)), Some(store)) = (
                            &reply.result,
                            self.thin.as_mut().and_then(|t| t.store.as_mut()),
                        ) {
                            store.recycle(vec![0; data.len()]);
                        }
                        let result = reply.result.map_err(|error| match error {
                            tessera_thin::ThinError::NoSpace => Failure::NoSpace,
                            tessera_thin::ThinError::Unavailable => Failure::Unavailable,
                            other => Failure::Io(other.to_string()),
                        });
                        self.finish_host(reply.id, result)?
                    }
                    tessera_thin::Output::Event(event) => self.thin_event(event),
                }
            }
            if let (Some(thin), Some(engine)) = (self.thin.as_mut(), self.engine.as_mut()) {
                progress |= thin.send(engine, &mut self.next_request_id) > 0;
            }
            if !progress {
                return Ok(());
            }
        }
    }

    fn store(&self) -> Option<&tessera_thin::Store> {
        self.thin.as_ref()?.store.as_ref()
    }

    fn thin_event(&mut self, event: tessera_thin::ThinEvent) {
        use tessera_thin::ThinEvent;
        let position = match &event {
            tessera_thin::ThinEvent::Recovered { .. }
            | tessera_thin::ThinEvent::LowSpace { .. } => self.store().map(|store| {
                let stats = store.stats();
                format!(
                    " ({}; live {} of {} used bytes)",
                    store.debug_position(),
                    stats.stored_bytes,
                    stats.physical_used_bytes
                )
            }),
            _ => None,
        };
        self.note(format!(
            "thin event {event:?}{}",
            position.unwrap_or_default()
        ));
        let must_survive = self.config.mode == FaultMode::MustSurvive;
        match event {
            ThinEvent::Recovered { .. } => self.stats.thin_recoveries += 1,
            ThinEvent::ScrubFinished {
                checked_blocks,
                errors_detected,
                errors_repaired,
            } => {
                self.thin_scrub = Some((checked_blocks, errors_detected, errors_repaired));
                if must_survive && errors_detected > 0 {
                    self.event_failure = Some(format!("{event:?} in a must-survive run"));
                }
            }
            // The group returns what was written or fails the read, and nothing damages
            // members' data in a thin run: within tolerance no checksum may ever fail.
            ThinEvent::ChecksumRepaired { .. }
            | ThinEvent::ChecksumUnrepairable { .. }
            | ThinEvent::StartFailed { .. }
            | ThinEvent::Failed { .. }
                if must_survive =>
            {
                self.event_failure = Some(format!("{event:?} in a must-survive run"));
            }
            _ => {}
        }
    }

    /// The digest of the buffers a computation reads.
    fn compute_inputs_digest(&self, job: &ComputeJob) -> u64 {
        let pool = self.engine.as_ref().expect("engine running").pool();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        match job {
            ComputeJob::Parity { data, .. } => {
                for slice in data {
                    pool.bytes(*slice).hash(&mut hasher);
                }
            }
            ComputeJob::Recover {
                recovery,
                data,
                p,
                q,
            } => {
                let lost: &[usize] = match recovery {
                    Recovery::FromP { lost } | Recovery::FromQ { lost } => {
                        std::slice::from_ref(lost)
                    }
                    Recovery::FromPq { lost } => lost,
                };
                for (index, slice) in data.iter().enumerate() {
                    if !lost.contains(&index) {
                        pool.bytes(*slice).hash(&mut hasher);
                    }
                }
                for slice in [p, q].into_iter().flatten() {
                    pool.bytes(*slice).hash(&mut hasher);
                }
            }
        }
        hasher.finish()
    }

    fn schedule_compute(&mut self, command: ComputeCommand) {
        // A batch waits for others to join it, then for the engine that runs it.
        let latency = self.rng.between(1, 3_000);
        let inputs_digest = self.compute_inputs_digest(&command.job);
        self.sequence += 1;
        self.queue
            .push(Reverse((self.now_us + latency, self.sequence)));
        self.scheduled.insert(
            self.sequence,
            Scheduled::Compute {
                command,
                inputs_digest,
            },
        );
    }

    /// Carries out parity work at the time it completes, so that an engine that touched its
    /// buffers in the meantime is caught (by the digest, or by wrong data later).
    fn execute_compute(
        &mut self,
        command: ComputeCommand,
        inputs_digest: u64,
    ) -> Result<(), String> {
        if self.compute_inputs_digest(&command.job) != inputs_digest {
            return Err(format!(
                "the engine changed the inputs of parity work in flight: {command:?}"
            ));
        }
        let engine = self.engine.as_mut().expect("engine running");
        engine.run_compute(&command.job);
        engine.compute_done(command.id);
        self.stats.offloaded_computes += 1;
        Ok(())
    }

    fn schedule(&mut self, command: MemberCommand) {
        let device = self.map[command.member].expect("commands go to attached members");
        let latency = if self.rng.chance(self.config.slow_command_rate) {
            self.rng.between(1_000, 20_000)
        } else {
            self.rng.between(2, 150)
        };
        let flush_point = self.devices[device].member.flush_point();
        self.sequence += 1;
        self.queue
            .push(Reverse((self.now_us + latency, self.sequence)));
        self.scheduled.insert(
            self.sequence,
            Scheduled::Member {
                command,
                device,
                flush_point,
            },
        );
    }

    /// Carries out a member command on its device; the engine hears of it from the caller.
    fn execute(
        &mut self,
        command: MemberCommand,
        device: usize,
        flush_point: u64,
    ) -> Result<(), MemberError> {
        let engine = self.engine.as_mut().expect("engine running");
        let member = &mut self.devices[device].member;
        if let Ok(spec) = std::env::var("TESSERA_SIM_WATCH_MEMBER") {
            let mut parts = spec.split(':').map(|p| p.parse::<u64>().unwrap_or(0));
            let (watch_device, watch_offset) = (
                parts.next().unwrap_or(0) as usize,
                parts.next().unwrap_or(0),
            );
            let (offset, len, what) = match command.op.zeroes_as_write() {
                MemberOp::Read {
                    offset_bytes,
                    buffer,
                    ..
                } => (offset_bytes, buffer.len() as u64, "read"),
                MemberOp::Write {
                    offset_bytes,
                    buffer,
                    ..
                } => (offset_bytes, buffer.len() as u64, "write"),
                MemberOp::Flush => (0, 0, "flush"),
                MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
            };
            if device == watch_device && offset <= watch_offset && watch_offset < offset + len {
                let first = match command.op.zeroes_as_write() {
                    MemberOp::Write { buffer, .. } => {
                        let at = (watch_offset - offset) as usize;
                        let bytes = &engine.pool().bytes(buffer)[at..at + 16];
                        format!("{:?}", &bytes[..16])
                    }
                    _ => String::new(),
                };
                eprintln!(
                    "[{} us] device {device} {what} {offset}+{len} {first}",
                    self.now_us
                );
            }
        }
        match command.op.zeroes_as_write() {
            MemberOp::Read {
                offset_bytes,
                buffer,
                for_host: Some(request),
            } => {
                let mut bytes = vec![0; buffer.len()];
                let result = member.read(offset_bytes, &mut bytes);
                if result.is_ok() {
                    engine.pool_mut().bytes_mut(buffer).fill(HOST_READ_POISON);
                    self.host_reads
                        .entry(request)
                        .or_default()
                        .push((buffer, bytes));
                }
                result
            }
            MemberOp::Read {
                offset_bytes,
                buffer,
                for_host: None,
            } => member.read(offset_bytes, engine.pool_mut().bytes_mut(buffer)),
            MemberOp::Write {
                offset_bytes,
                buffer,
                fua,
            } => {
                let result = member.write(offset_bytes, engine.pool().bytes(buffer), fua);
                if result.is_ok() {
                    for (copy, &offset) in SUPERBLOCK_OFFSETS.iter().enumerate() {
                        if offset == offset_bytes {
                            self.devices[device].flipped[copy] = false;
                        }
                    }
                }
                result
            }
            MemberOp::Flush => member.flush(flush_point),
            MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
        }
    }

    fn event(&mut self, event: GroupEvent) {
        self.note(format!("event {event:?}"));
        match event {
            GroupEvent::MemberFailed { .. } if self.repair_at.is_none() => {
                self.repair_at = Some(self.now_us + self.rng.between(100, 5_000));
            }
            // Within tolerance, nothing can have gone out of sync except what a crash left
            // for resync, which a repairing scrub may fix first.
            GroupEvent::ScrubFinished(result)
                if self.config.mode == FaultMode::MustSurvive && result.stats.unrecoverable > 0 =>
            {
                self.event_failure = Some(format!("scrub found unrecoverable stripes: {result:?}"));
            }
            GroupEvent::RebuildFinished { .. } => {
                self.stats.rebuilds += 1;
                self.retire_replaced_devices();
            }
            _ => {}
        }
    }

    fn host_reply(&mut self, reply: Reply) -> Result<(), String> {
        if let Some(reads) = self.host_reads.remove(&reply.id)
            && let Ok(Some(_)) = reply.result
        {
            let pool = self.engine().pool_mut();
            for (slice, bytes) in reads {
                pool.bytes_mut(slice).copy_from_slice(&bytes);
            }
        }
        if let (Some(thin), Some(engine)) = (self.thin.as_mut(), self.engine.as_mut())
            && thin.lower_reply(engine, reply.id, reply.result)
        {
            return Ok(());
        }
        let result = match reply.result {
            Ok(Some(buffer)) => {
                let pool = self.engine().pool_mut();
                let data = pool.slice(buffer).to_vec();
                pool.free(buffer);
                Ok(Some(data))
            }
            Ok(None) => Ok(None),
            Err(HostError::NotFast) => Err(Failure::NotFast),
            Err(error) => Err(Failure::Io(format!("{error:?}"))),
        };
        self.finish_host(reply.id, result)
    }

    /// A host request was answered (by the group, or by the thin drive in a thin run).
    fn finish_host(
        &mut self,
        id: u64,
        result: Result<Option<Vec<u8>>, Failure>,
    ) -> Result<(), String> {
        if watched_sector().is_some() {
            self.note(format!("reply {id} {:?}", result.as_ref().map(|_| ())));
        }
        let host = self
            .in_flight
            .remove(&id)
            .ok_or_else(|| format!("reply to unknown request {id}"))?;
        let ack = self.model.now();
        if let (
            HostKind::Read {
                offset_bytes,
                len_bytes,
            },
            Ok(data),
        ) = (&host.kind, &result)
        {
            let data = data.as_ref().ok_or("read reply without data")?;
            if let Err(error) =
                self.check_read_data(*offset_bytes, *len_bytes, data, host.submit, ack)
            {
                return Err(format!("{error}\n  {}", self.describe_at(*offset_bytes)));
            }
        }
        match (host.kind, result) {
            (HostKind::Read { .. }, Ok(_)) => {}
            (HostKind::Write { ticket, fua }, Ok(_))
            | (HostKind::Zeroes { ticket, fua }, Ok(_)) => self.model.write_acked(&ticket, fua),
            (HostKind::Discard { ticket }, Ok(_)) => self.model.write_acked(&ticket, false),
            (HostKind::Flush, Ok(_)) => self.model.flush_acked(host.submit),
            (HostKind::Zeroes { ticket, .. }, Err(Failure::NotFast)) => {
                self.model.write_cancelled(&ticket)
            }
            // Refused before any block changed, or applied in part: unacknowledged, the write
            // stays possible for every later read, as does what it would have replaced.
            (
                HostKind::Write { .. } | HostKind::Zeroes { .. } | HostKind::Discard { .. },
                Err(Failure::NoSpace),
            ) => self.stats.thin_no_space += 1,
            // A clean restart stops the thin drive with requests queued.
            (_, Err(Failure::Unavailable)) if self.restarting => {}
            (kind, Err(error)) => {
                self.stats.failed_requests += 1;
                let what = match kind {
                    HostKind::Read { .. } => "read",
                    HostKind::Write { .. } => "write",
                    HostKind::Flush => "flush",
                    HostKind::Discard { .. } => "trim",
                    HostKind::Zeroes { .. } => "write-zeroes",
                };
                if self.config.mode == FaultMode::MustSurvive {
                    let range = match kind {
                        HostKind::Read {
                            offset_bytes,
                            len_bytes,
                        } => format!(" at {offset_bytes}+{len_bytes}"),
                        _ => String::new(),
                    };
                    let status = self.engine.as_ref().map(|engine| engine.status());
                    return Err(format!(
                        "{what} request {id}{range} failed with {error} in a must-survive run; \
                         group {:?}, members {:?}, bad ranges {:?}, latent errors {:?}",
                        status.as_ref().map(|s| s.state),
                        status.as_ref().map(|s| s
                            .members
                            .iter()
                            .map(|m| (m.role, m.state))
                            .collect::<Vec<_>>()),
                        self.engine
                            .as_ref()
                            .map(|engine| engine.superblock().bad_ranges),
                        self.devices
                            .iter()
                            .enumerate()
                            .filter(|(_, d)| !d.member.latent_errors.is_empty())
                            .map(|(i, d)| (i, d.member.latent_errors.clone()))
                            .collect::<Vec<_>>(),
                    ));
                }
                // Beyond tolerance: a failed write may or may not have landed (its entry stays
                // unacknowledged in the model, which allows both).
            }
        }
        self.update_oldest_read();
        Ok(())
    }

    /// The group's state around a host offset, for a failed read check.
    fn describe_at(&self, offset_bytes: u64) -> String {
        let engine = self.engine.as_ref().expect("engine");
        let status = engine.status();
        let thin = self
            .store()
            .map(|store| format!(", thin {}", store.debug_position()))
            .unwrap_or_default();
        format!(
            "region of offset written {} unsynced {}, group {:?}, members {:?}, rebuild {:?}, bad ranges {:?}{thin}",
            engine.is_region_written(offset_bytes / engine.region_bytes()),
            engine.is_region_unsynced(offset_bytes / engine.region_bytes()),
            status.state,
            status
                .members
                .iter()
                .map(|m| (m.role, m.state))
                .collect::<Vec<_>>(),
            engine
                .superblock()
                .members
                .iter()
                .map(|m| (m.role, m.state, m.rebuild_position_bytes))
                .collect::<Vec<_>>(),
            engine.superblock().bad_ranges
        )
    }

    fn check_read_data(
        &mut self,
        offset_bytes: u64,
        len_bytes: u64,
        data: &[u8],
        submit: u64,
        ack: u64,
    ) -> Result<(), String> {
        let first = offset_bytes / SECTOR_BYTES as u64;
        assert_eq!(data.len() as u64, len_bytes);
        for (i, bytes) in data.chunks_exact(SECTOR_BYTES).enumerate() {
            let sector = first + i as u64;
            let value = match pattern::identify(sector, bytes) {
                Ok(value) => value,
                Err(_) if self.model.allows_anything(sector, submit, ack) => continue,
                Err(error) => return Err(error),
            };
            self.model.check_read(sector, value, submit, ack)?;
            self.stats.reads_checked += 1;
        }
        Ok(())
    }

    // ----- faults -----

    fn redundancy(&self) -> usize {
        self.geometry().redundancy()
    }

    /// Roles that are down or about to be (device gone or failing), members with latent
    /// errors, and whether the group still resyncs.
    fn exposure(&self) -> (usize, usize, bool) {
        let engine = self.engine.as_ref().expect("engine");
        let status = engine.status();
        let roles = self.geometry().members();
        let mut down = 0;
        let mut latent = 0;
        for role in 0..roles {
            let online = status
                .members
                .iter()
                .enumerate()
                .find(|(_, m)| m.role == Some(role) && m.state == "online");
            match online {
                Some((index, _)) => {
                    let device = &self.devices[self.map[index].expect("attached")];
                    if device.member.gone || device.member.failing_writes {
                        down += 1;
                    } else if !device.member.latent_errors.is_empty() {
                        latent += 1;
                    }
                }
                None => down += 1,
            }
        }
        (
            down,
            latent,
            status.resync_regions_left > 0 || status.state == GroupState::Starting,
        )
    }

    fn fault_allowed(&self, extra: usize) -> bool {
        if self.config.mode == FaultMode::BeyondTolerance {
            return true;
        }
        let (down, latent, unsynced) = self.exposure();
        !unsynced && down + latent + extra <= self.redundancy()
    }

    fn maybe_fault(&mut self) -> Result<(), String> {
        if !self.faults_enabled
            || self
                .engine
                .as_ref()
                .is_some_and(|e| e.state() == GroupState::Starting)
        {
            return Ok(());
        }
        let config = self.config.clone();
        if self.rng.chance(config.crash_rate) {
            let (down, latent, unsynced) = self.exposure();
            if config.mode == FaultMode::BeyondTolerance || (down == 0 && latent == 0) {
                let redundancy = self.redundancy() as u64;
                let covered = self
                    .engine
                    .as_ref()
                    .is_some_and(|engine| engine.journal_covering())
                    && !unsynced;

                let lose = if redundancy > 0
                    && self.rng.chance(config.crash_loss_chance)
                    && (config.mode == FaultMode::BeyondTolerance || covered)
                {
                    self.rng.between(1, redundancy) as usize
                } else {
                    0
                };
                return self.crash(lose);
            }
        }
        if self.rng.chance(config.restart_rate) {
            return self.clean_restart();
        }
        if self.rng.chance(config.scrub_rate) {
            if self.thin.is_some() && self.rng.chance(500_000) {
                if let Some(store) = self.thin.as_mut().and_then(|t| t.store.as_mut())
                    && store.start_scrub()
                {
                    self.note("thin scrub started".into());
                }
            } else {
                let repair = self.rng.chance(500_000);
                let engine = self.engine.as_mut().expect("engine");
                if engine.start_scrub(repair).is_ok() {
                    self.note(format!("scrub started (repair {repair})"));
                }
            }
        }
        if self.rng.chance(config.member_loss_rate)
            && self.fault_allowed(1)
            && let Some(device) = self.pick_online_device()
        {
            self.devices[device].member.gone = true;
            self.stats.member_losses += 1;
            self.note(format!("device {device} gone"));
        }
        if self.rng.chance(config.write_failure_rate)
            && self.fault_allowed(1)
            && let Some(device) = self.pick_online_device()
        {
            self.devices[device].member.failing_writes = true;
            self.stats.write_failures += 1;
            self.note(format!("device {device} fails writes"));
        }
        if self.rng.chance(config.admin_fail_rate)
            && self.fault_allowed(1)
            && let Some(device) = self.pick_online_device()
        {
            let member = self
                .map
                .iter()
                .position(|&d| d == Some(device))
                .expect("attached");
            self.stats.admin_fails += 1;
            self.note(format!("admin fails member {member} (device {device})"));
            self.engine().fail_member_admin(member);
        }
        if self.rng.chance(config.latent_error_rate)
            && let Some(device) = self.pick_online_device()
        {
            let extra = usize::from(self.devices[device].member.latent_errors.is_empty());
            if self.fault_allowed(extra) {
                let superblock = self.engine.as_ref().expect("engine").superblock();
                let data_sectors = superblock.member_data_bytes / SECTOR_BYTES as u64;
                let sector = superblock.data_offset_bytes / SECTOR_BYTES as u64
                    + self.rng.below(data_sectors);
                self.devices[device].member.latent_errors.insert(sector);
                self.stats.latent_errors += 1;
                self.note(format!("latent error on device {device} sector {sector}"));
            }
        }
        if self.rng.chance(config.bit_flip_rate) {
            let device = self.rng.below(self.devices.len() as u64) as usize;
            let copy = self.rng.below(2) as usize;
            // Within tolerance, the other copy must be intact (now and durably): one damaged
            // copy is survivable, two make the device unreadable, which is a member loss.
            let other_intact = {
                let member = &self.devices[device].member;
                let other = SUPERBLOCK_OFFSETS[1 - copy] as usize;
                [member.contents(), member.durable_contents()]
                    .iter()
                    .all(|image| {
                        tessera_raid::superblock::Superblock::decode(
                            &image[other..other + SUPERBLOCK_BYTES],
                        )
                        .is_ok()
                    })
            };
            if !self.devices[device].retired
                && (other_intact || config.mode == FaultMode::BeyondTolerance)
            {
                let offset = SUPERBLOCK_OFFSETS[copy] + self.rng.below(SUPERBLOCK_BYTES as u64);
                let bit = self.rng.below(8) as u8;
                self.devices[device].member.flip_bit(offset, bit);
                self.devices[device].flipped[copy] = true;
                self.stats.bit_flips += 1;
                self.note(format!(
                    "bit flip on device {device} superblock copy {copy}"
                ));
            }
        }
        Ok(())
    }

    /// A scrub of the quiet, optimal group must find every stripe consistent.
    fn final_scrub(&mut self) -> Result<(), String> {
        let engine = self.engine.as_mut().expect("engine");
        if engine.state() != GroupState::Optimal || self.config.mode != FaultMode::MustSurvive {
            return Ok(());
        }
        engine
            .start_scrub(false)
            .map_err(|e| format!("final scrub: {e}"))?;
        let deadline = self.now_us + 600_000_000;
        while self.engine.as_ref().expect("engine").has_background_work() {
            self.step()?;
            if self.now_us > deadline {
                return Err("liveness: the final scrub did not finish".into());
            }
        }
        let result = self
            .engine
            .as_ref()
            .expect("engine")
            .last_scrub()
            .ok_or("final scrub left no result")?;
        if !result.completed || result.stats.mismatches != 0 || result.stats.unrecoverable != 0 {
            return Err(format!(
                "final scrub of a quiet optimal group found {:?}",
                result
            ));
        }
        self.final_thin_scrub()
    }

    /// A scrub of the thin drive reads every live block: none may fail its checksum.
    fn final_thin_scrub(&mut self) -> Result<(), String> {
        let Some(store) = self.thin.as_mut().and_then(|t| t.store.as_mut()) else {
            return Ok(());
        };
        self.thin_scrub = None;
        if !store.start_scrub() {
            return Err("final thin scrub did not start".into());
        }
        let deadline = self.now_us + 600_000_000;
        while self.thin_scrub.is_none() {
            self.step()?;
            if self.now_us > deadline {
                return Err("liveness: the final thin scrub did not finish".into());
            }
        }
        let (checked, detected, _) = self.thin_scrub.expect("finished");
        let mapped = self
            .store()
            .map_or(0, |store| store.stats().logical_used_bytes / BLOCK_BYTES);
        if detected != 0 || checked != mapped {
            return Err(format!(
                "final thin scrub checked {checked} of {mapped} mapped blocks, found {detected} errors"
            ));
        }
        Ok(())
    }

    /// A device holding an online role, untouched by other faults.
    fn pick_online_device(&mut self) -> Option<usize> {
        let status = self.engine.as_ref().expect("engine").status();
        let candidates: Vec<usize> = status
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state == "online" && m.role.is_some())
            .filter_map(|(index, _)| self.map[index])
            .filter(|&device| {
                !self.devices[device].member.gone && !self.devices[device].member.failing_writes
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(*self.rng.pick(&candidates))
    }

    /// A power cut: the engine vanishes mid-flight, members keep what was durable and some of
    /// what was not, and the group is assembled again from what is on the members.
    fn crash(&mut self, lose: usize) -> Result<(), String> {
        self.stats.crashes += 1;
        self.note("crash".into());
        let mut lost = Vec::new();
        for _ in 0..lose {
            if let Some(device) = self.pick_online_device()
                && !lost.contains(&device)
            {
                lost.push(device);
            }
        }
        // A member that failed while a full-stripe write was in flight tears that stripe as
        // surely as one lost in the crash (the write's intent does not cover it).
        let degraded = self.exposure().0 > 0;
        self.count_engine();
        let engine = self.engine.take().expect("engine running");
        self.host_reads.clear();
        let mut in_flight: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new(); self.devices.len()];
        for scheduled in self.scheduled.values() {
            let Scheduled::Member {
                command, device, ..
            } = scheduled
            else {
                continue;
            };
            if let MemberOp::Write {
                offset_bytes,
                buffer,
                ..
            } = command.op.zeroes_as_write()
            {
                in_flight[*device].push((offset_bytes, engine.pool().bytes(buffer).to_vec()));
            }
        }
        drop(engine);
        if let Some(thin) = &mut self.thin {
            thin.lose_store();
        }
        self.queue.clear();
        self.scheduled.clear();
        self.in_flight.clear();
        self.model.set_oldest_read(u64::MAX);
        for (device, writes) in in_flight.into_iter().enumerate() {
            let mut rng = self.rng.fork();
            self.devices[device].member.crash(&mut rng, writes);
        }
        // A thin drive checks every block it reads: a torn record is found and dropped, so
        // what it returns is never anything but a write's data, lost members or not.
        if (lost.is_empty() && !degraded) || self.thin.is_some() {
            self.model.crash();
        } else {
            // Writes not yet durable in a stripe that lost a member may read back as anything
            // (their stripe was torn); everything durable must survive.
            self.model.crash_losing_members();
        }
        if !lost.is_empty() {
            self.stats.crash_losses += 1;
            for &device in &lost {
                self.devices[device].member.gone = true;
                self.stats.member_losses += 1;
                self.note(format!("device {device} lost in the crash"));
            }
        }
        self.assemble(true)
    }

    /// An orderly stop and a fresh assembly (a daemon restart; also how a returning device is
    /// noticed).
    fn clean_restart(&mut self) -> Result<(), String> {
        self.stats.restarts += 1;
        self.note("clean restart".into());
        self.restarting = true;
        if let Some(store) = self.thin.as_mut().and_then(|t| t.store.as_mut()) {
            store.shutdown();
            let deadline = self.now_us + 60_000_000;
            while !self.store().is_some_and(tessera_thin::Store::is_stopped) {
                if self.now_us > deadline {
                    return Err(format!(
                        "liveness: the thin drive did not stop: {}",
                        self.store().map(|s| s.debug_position()).unwrap_or_default()
                    ));
                }
                let before = (self.now_us, self.queue.len());
                self.step()?;
                if (self.now_us, self.queue.len()) == before && self.queue.is_empty() {
                    return Err("liveness: the thin drive's stop stalled".into());
                }
            }
            self.thin.as_mut().expect("thin").lose_store();
        }
        self.engine().stop();
        let deadline = self.now_us + 60_000_000;
        while !self.engine.as_ref().expect("engine").is_stopped() {
            if self.now_us > deadline {
                return Err(format!(
                    "liveness: clean stop did not finish: {}",
                    self.engine.as_ref().expect("engine").debug_summary()
                ));
            }
            let before = (self.now_us, self.queue.len());
            self.step()?;
            if (self.now_us, self.queue.len()) == before
                && self.queue.is_empty()
                && !self.engine.as_ref().expect("engine").is_stopped()
            {
                return Err("liveness: clean stop stalled".into());
            }
        }
        if !self.in_flight.is_empty() {
            return Err(format!(
                "{} requests unanswered after a clean stop",
                self.in_flight.len()
            ));
        }
        self.count_engine();
        self.engine = None;
        // Every request was answered, so nothing is left aside; kept exact anyway.
        self.host_reads.clear();
        self.restarting = false;
        self.assemble(false)
    }

    fn assemble(&mut self, after_crash: bool) -> Result<(), String> {
        let mut probes = Vec::new();
        let mut probed_devices = Vec::new();
        let mut notes = Vec::new();
        for (index, device) in self.devices.iter().enumerate() {
            if device.retired || device.member.gone {
                continue;
            }
            let image = if after_crash {
                device.member.durable_contents()
            } else {
                device.member.contents()
            };
            let copy = |i: usize| {
                &image[SUPERBLOCK_OFFSETS[i] as usize
                    ..SUPERBLOCK_OFFSETS[i] as usize + SUPERBLOCK_BYTES]
            };
            match newest_copy(copy(0), copy(1)) {
                Ok(superblock) if superblock.group_uuid == self.group_uuid => {
                    probes.push(DeviceProbe { superblock });
                    probed_devices.push(index);
                }
                Ok(_) => return Err(format!("device {index} carries a foreign superblock")),
                Err(error) => notes.push(format!("device {index}: no superblock ({error})")),
            }
        }
        for line in notes {
            self.note(line);
        }
        if probes.is_empty() {
            // Every device is gone (possible beyond tolerance): they come back.
            assert_eq!(
                self.config.mode,
                FaultMode::BeyondTolerance,
                "all devices lost in a must-survive run"
            );
            for device in &mut self.devices {
                device.member.gone = false;
            }
            return self.assemble(after_crash);
        }
        let (engine, mapping) = Engine::assemble(probes, self.engine_config(), self.parity.clone())
            .map_err(|e| format!("assemble: {e}"))?;
        let members = engine.superblock().members.len();
        self.map = vec![None; members.max(mapping.len())];
        for (probe, member) in mapping.into_iter().enumerate() {
            if let Some(member) = member {
                if member >= self.map.len() {
                    self.map.resize(member + 1, None);
                }
                self.map[member] = Some(probed_devices[probe]);
            }
        }
        self.engine = Some(engine);
        let status = self.engine.as_ref().expect("engine").status();
        self.note(format!(
            "assembled: state {:?}, members {:?}",
            status.state,
            status
                .members
                .iter()
                .map(|m| (m.role, m.state))
                .collect::<Vec<_>>()
        ));
        if status
            .members
            .iter()
            .any(|m| m.state == "failed" || m.state == "missing")
            && self.repair_at.is_none()
        {
            self.repair_at = Some(self.now_us + self.rng.between(100, 5_000));
        }
        if let Some(thin) = &mut self.thin
            && let Err(error) = thin.open()
        {
            if self.config.mode == FaultMode::MustSurvive {
                return Err(format!("the thin drive cannot start: {error}"));
            }
            self.note(format!("the thin drive cannot start: {error}"));
        }
        self.drain()
    }

    /// Replaces a failed member: a device that went away comes back (noticed on a restart), or
    /// a fresh device takes the role.
    fn repair(&mut self) -> Result<(), String> {
        let status = self.engine.as_ref().expect("engine").status();
        if status.state == GroupState::Failed || status.state == GroupState::Starting {
            return Ok(());
        }
        if status.rebuild.is_some() {
            self.repair_at = Some(self.now_us + 2_000);
            return Ok(());
        }
        let roles = self.geometry().members();
        let Some(role) = (0..roles).find(|&role| {
            !status
                .members
                .iter()
                .any(|m| m.role == Some(role) && m.state == "online")
        }) else {
            return Ok(());
        };
        let old = status
            .members
            .iter()
            .position(|m| m.role == Some(role) && m.state != "online")
            .and_then(|index| self.map.get(index).copied().flatten());
        if let Some(device) = old
            && self.devices[device].member.gone
            && self.rng.chance(500_000)
        {
            self.note(format!("device {device} returns"));
            self.devices[device].member.gone = false;
            return self.clean_restart();
        }
        let size = self.config.member_bytes;
        let uuid = random_uuid(&mut self.rng);
        self.devices.push(Device {
            member: SimMember::new(size),
            uuid,
            retired: false,
            flipped: [false; 2],
        });
        let device = self.devices.len() - 1;
        let member = self
            .engine()
            .replace_member(role, uuid, size)
            .map_err(|e| format!("replace: {e}"))?;
        if member >= self.map.len() {
            self.map.resize(member + 1, None);
        }
        self.map[member] = Some(device);
        self.note(format!(
            "device {device} replaces role {role} as member {member}"
        ));
        if let Some(device) = old {
            self.devices[device].retired = true;
        }
        self.drain()
    }

    fn retire_replaced_devices(&mut self) {
        let status = self.engine.as_ref().expect("engine").status();
        for (index, member) in status.members.iter().enumerate() {
            if member.role.is_none()
                && member.state == "failed"
                && let Some(device) = self.map[index]
            {
                self.devices[device].retired = true;
            }
        }
    }

    // ----- the end of a run -----

    /// Lets everything finish: no new faults, failed members replaced, rebuilds and resyncs
    /// done, every request answered.
    fn quiesce(&mut self) -> Result<(), String> {
        let deadline = self.now_us + 600_000_000;
        loop {
            self.step()?;
            let engine = self.engine.as_ref().expect("engine");
            let state = engine.state();
            let settled = self.in_flight.is_empty()
                && self.thin.as_ref().is_none_or(ThinDrive::is_idle)
                && engine.is_idle()
                && !engine.has_background_work()
                && self.queue.is_empty()
                && self.repair_at.is_none();
            let healthy = matches!(state, GroupState::Optimal)
                || self.config.mode == FaultMode::BeyondTolerance;
            if settled && (healthy || state == GroupState::Failed) {
                if self.config.mode == FaultMode::MustSurvive && state != GroupState::Optimal {
                    return Err(format!("group ended {state} in a must-survive run"));
                }
                return Ok(());
            }
            if settled && !healthy && self.repair_at.is_none() {
                self.repair_at = Some(self.now_us + 1_000);
            }
            if self.now_us > deadline {
                return Err(format!(
                    "liveness: not settled after 600 s of simulated time (state {state}; in flight {}, idle {}, background {}, queue {}, repair {:?}; engine: {}; journal: {:?})",
                    self.in_flight.len(),
                    engine.is_idle(),
                    engine.has_background_work(),
                    self.queue.len(),
                    self.repair_at,
                    engine.debug_summary(),
                    engine.journal_status(),
                ));
            }
        }
    }

    /// Reads the whole working area and checks every sector.
    fn verify_all(&mut self) -> Result<(), String> {
        if self.engine.as_ref().expect("engine").state() == GroupState::Failed
            || self
                .thin
                .as_ref()
                .is_some_and(|thin| !thin.store.as_ref().is_some_and(|s| s.is_ready()))
        {
            return Ok(());
        }
        let total = self.config.working_bytes;
        let step = 64 * 1024;
        let mut offset = 0;
        while offset < total {
            let len = step.min(total - offset);
            let id = self.next_request_id;
            self.next_request_id += 1;
            let submit = self.model.now();
            self.in_flight.insert(
                id,
                HostInFlight {
                    kind: HostKind::Read {
                        offset_bytes: offset,
                        len_bytes: len,
                    },
                    submit,
                },
            );
            self.update_oldest_read();
            let request = if self.thin.is_some() {
                Request::Thin(tessera_thin::HostOp::Read {
                    offset_bytes: offset,
                    len_bytes: len,
                })
            } else {
                Request::Group(HostOp::Read {
                    offset_bytes: offset,
                    len_bytes: len,
                })
            };
            self.send_request(id, request);
            while self.in_flight.contains_key(&id) {
                self.step()?;
            }
            offset += len;
        }
        Ok(())
    }

    /// With the group quiet and optimal, every written stripe's parity (or every mirror copy)
    /// must agree with its data — checked straight on the member images.
    fn check_redundancy(&mut self) -> Result<(), String> {
        let engine = self.engine.as_ref().expect("engine");
        if engine.state() != GroupState::Optimal {
            return Ok(());
        }
        let geometry = *engine.geometry();
        let superblock = engine.superblock();
        let status = engine.status();
        let role_device: Vec<usize> = (0..geometry.members())
            .map(|role| {
                let index = status
                    .members
                    .iter()
                    .position(|m| m.role == Some(role) && m.state == "online")
                    .expect("optimal group");
                self.map[index].expect("attached")
            })
            .collect();
        let chunk = geometry.chunk_bytes() as usize;
        let per_region = engine.region_bytes() / geometry.stripe_data_bytes();
        for stripe in 0..geometry.stripe_count() {
            let region = stripe / per_region;
            if !engine.is_region_written(region) || engine.is_region_unsynced(region) {
                continue;
            }
            let column = |column: Column, copy: usize| {
                let placement = match column {
                    Column::Data(index) => geometry.data_placement(stripe, index, copy),
                    Column::Parity(which) => geometry.parity_placement(stripe, which),
                };
                let start = (superblock.data_offset_bytes + placement.offset_bytes) as usize;
                &self.devices[role_device[placement.member]]
                    .member
                    .contents()[start..start + chunk]
            };
            for copy in 1..geometry.copies() {
                if column(Column::Data(0), copy) != column(Column::Data(0), 0) {
                    return Err(format!("stripe {stripe}: mirror copy {copy} differs"));
                }
            }
            if geometry.parity_chunks() > 0 {
                let data: Vec<&[u8]> = (0..geometry.data_chunks())
                    .map(|i| column(Column::Data(i), 0))
                    .collect();
                let mut p = vec![0u8; chunk];
                let mut q = vec![0u8; chunk];
                tessera_parity::Naive.pq_gen(&data, &mut p, &mut q);
                if p != column(Column::Parity(0), 0) {
                    return Err(format!("stripe {stripe}: P does not match the data"));
                }
                if geometry.parity_chunks() == 2 && q != column(Column::Parity(1), 0) {
                    return Err(format!("stripe {stripe}: Q does not match the data"));
                }
            }
        }
        Ok(())
    }
}

/// `TESSERA_SIM_WATCH=<sector>` traces every host request touching that sector.
fn watched_sector() -> Option<u64> {
    std::env::var("TESSERA_SIM_WATCH").ok()?.parse().ok()
}

fn random_uuid(rng: &mut Rng) -> Uuid {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    Uuid(bytes)
}
