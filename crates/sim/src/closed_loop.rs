//! A closed loop of host requests through one engine over in-memory members, each member
//! command carried out as a memory copy the moment it is emitted: what `engine-bench` measures,
//! and what the allocation test runs. Also a counting allocator, so either can say how many
//! heap allocations a request costs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_raid::engine::{
    Command, CreateSpec, Engine, EngineConfig, HostOp, HostRequest, MemberCommand, MemberOp,
};
use tessera_raid::geometry::Level;
use tessera_raid::superblock::JournalMode;

use crate::harness::{group_spec, read_image, write_image};
use crate::prng::Rng;

/// Counts heap allocations (and reallocations) of the whole process, passing each call on to
/// the system allocator: install it with `#[global_allocator]` and read [`allocations`]. The
/// data path is meant to take none per request once warm.
pub struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to `System` unchanged; the counter has no other effect.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap allocations and reallocations so far (zero unless [`CountingAllocator`] is installed).
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Checks that [`CountingAllocator`] is installed (the counter moves when something is
/// allocated), so that a count of zero means something.
pub fn assert_counting() {
    let before = allocations();
    let probe = std::hint::black_box(vec![1u8; 100]);
    assert!(
        allocations() > before,
        "the counting allocator is installed"
    );
    drop(probe);
}

const MEMBER_BYTES: u64 = 160 << 20;
const WORKING_BYTES: u64 = 256 << 20;
const QUEUE_DEPTH: usize = 32;

/// The closed loop: one engine, its members, and the requests in flight.
pub struct ClosedLoop {
    engine: Engine,
    members: Vec<Vec<u8>>,
    rng: Rng,
    now_us: u64,
    /// Time spent copying member data in and out: the work a drive's DMA does, not the
    /// engine's.
    member_copy: Duration,
    /// Member commands of the current round, kept between rounds so the loop allocates
    /// nothing of its own.
    commands: Vec<MemberCommand>,
    /// Host requests of the current round, likewise.
    requests: Vec<HostRequest>,
    /// Requests stay within this many bytes from the start of the group.
    working_bytes: u64,
}

impl ClosedLoop {
    pub fn new(level: Level, members: usize, journal_mode: JournalMode) -> ClosedLoop {
        ClosedLoop::with_working_bytes(level, members, journal_mode, WORKING_BYTES)
    }

    /// A loop whose requests stay within the first `working_bytes` of the group.
    pub fn with_working_bytes(
        level: Level,
        members: usize,
        journal_mode: JournalMode,
        working_bytes: u64,
    ) -> ClosedLoop {
        let spec = CreateSpec {
            region_bytes: Some(64 << 20),
            journal_bytes: Some(8 << 20),
            rebuild_rate_percent: 30,
            ..group_spec(
                "bench",
                level,
                64 << 10,
                members,
                MEMBER_BYTES,
                journal_mode,
            )
        };
        let parity: Arc<dyn tessera_parity::Kernel> = Arc::new(
            tessera_parity::Parity::select(&tessera_parity::SelectionConfig::default())
                .expect("parity kernels"),
        );
        let config = EngineConfig {
            pool_bytes: 256 << 20,
            ..EngineConfig::default()
        };
        let engine = Engine::create(spec, config, parity).expect("bench group");
        let mut bench = ClosedLoop {
            engine,
            members: (0..members)
                .map(|_| vec![0u8; MEMBER_BYTES as usize])
                .collect(),
            rng: Rng::new(7),
            now_us: 0,
            member_copy: Duration::ZERO,
            commands: Vec::with_capacity(1024),
            requests: Vec::with_capacity(QUEUE_DEPTH),
            working_bytes,
        };
        bench.settle();
        bench
    }

    /// Carries out every command the engine has, until it has none; returns replies seen.
    /// Member commands are gathered and copied in one timed block per round (as a drive would
    /// take a batch of submissions), so the clock is read twice per round, not per command,
    /// and their completions go back together, as the daemon reaps its ring.
    fn drain(&mut self) -> usize {
        let mut replies = 0;
        let mut commands = std::mem::take(&mut self.commands);
        loop {
            while let Some(command) = self.engine.poll() {
                match command {
                    Command::Member(command) => commands.push(command),
                    Command::Reply(reply) => {
                        replies += 1;
                        match reply.result {
                            Ok(Some(buffer)) => self.engine.pool_mut().free(buffer),
                            Ok(None) => {}
                            Err(error) => panic!("bench request failed: {error}"),
                        }
                    }
                    Command::Event(_) => {}
                    Command::Compute(command) => {
                        self.engine.run_compute(&command.job);
                        self.engine.compute_done(command.id);
                    }
                }
            }
            if commands.is_empty() {
                self.commands = commands;
                return replies;
            }
            let copy_started = Instant::now();
            for command in &commands {
                let member = &mut self.members[command.member];
                match command.op.zeroes_as_write() {
                    MemberOp::Read {
                        offset_bytes,
                        buffer,
                        ..
                    } => {
                        read_image(self.engine.pool_mut(), member, offset_bytes, buffer);
                    }
                    MemberOp::Write {
                        offset_bytes,
                        buffer,
                        ..
                    } => {
                        write_image(self.engine.pool(), member, offset_bytes, buffer);
                    }
                    MemberOp::Flush => {}
                    MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
                }
            }
            self.member_copy += copy_started.elapsed();
            self.engine
                .complete_all(commands.drain(..).map(|command| (command.id, Ok(()))));
        }
    }

    fn settle(&mut self) {
        loop {
            self.drain();
            match self.engine.next_deadline_us() {
                Some(deadline) if !self.engine.is_idle() => {
                    self.now_us = self.now_us.max(deadline);
                    self.engine.tick(self.now_us);
                }
                _ if self.engine.is_idle() => break,
                _ => {}
            }
        }
    }

    fn request(&mut self, id: u64, op: Workload, sequence: u64) -> HostRequest {
        let data_bytes = self.engine.data_bytes().min(self.working_bytes);
        let (len, offset) = match op {
            Workload::RandomRead | Workload::RandomWrite => {
                (4096, self.rng.below(data_bytes / 4096) * 4096)
            }
            Workload::SequentialWrite => {
                let len = 128 << 10;
                (len, sequence * len % (data_bytes / len * len))
            }
        };
        let op = match op {
            Workload::RandomRead => HostOp::Read {
                offset_bytes: offset,
                len_bytes: len,
            },
            _ => {
                let buffer = self
                    .engine
                    .alloc_host_buffer(len as usize)
                    .expect("host buffer");
                self.engine.pool_mut().slice_mut(buffer)[..8].copy_from_slice(&id.to_le_bytes());
                HostOp::Write {
                    offset_bytes: offset,
                    buffer,
                    fua: false,
                }
            }
        };
        HostRequest { id, op }
    }

    /// Runs a closed loop at `QUEUE_DEPTH` until `limit`.
    pub fn run(&mut self, workload: Workload, limit: Limit) -> Measured {
        let copies_before = self.member_copy;
        let len = match workload {
            Workload::SequentialWrite => 128 << 10,
            _ => 4096,
        };
        let mut in_flight = 0;
        let mut done = 0u64;
        let mut next_id = 1;
        let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
        let start = Instant::now();
        while match limit {
            Limit::Time(duration) => start.elapsed() < duration,
            Limit::Requests(count) => done < count,
        } {
            let mut requests = std::mem::take(&mut self.requests);
            while in_flight < QUEUE_DEPTH {
                requests.push(self.request(next_id, workload, next_id));
                next_id += 1;
                in_flight += 1;
            }
            self.engine.submit_all(requests.drain(..));
            self.requests = requests;
            let replies = self.drain();
            in_flight -= replies;
            done += replies as u64;
            if replies == 0 {
                // Coalescing windows and lazy bitmap work run on time; keep time moving.
                self.now_us += 1;
                self.engine.tick(self.now_us);
            }
        }
        let wall = start.elapsed();
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
        let engine_seconds = (wall - (self.member_copy - copies_before)).as_secs_f64();
        while in_flight > 0 {
            let replies = self.drain();
            in_flight -= replies;
            self.now_us += 100;
            self.engine.tick(self.now_us);
        }
        Measured {
            ops: done,
            bytes: done * len,
            wall_seconds: wall.as_secs_f64(),
            engine_seconds,
            allocations,
        }
    }

    /// Writes the working set once so measurements see written regions (no zero-fill).
    pub fn precondition(&mut self) {
        let data_bytes = self.engine.data_bytes().min(self.working_bytes);
        let stripes = data_bytes / (1 << 20);
        for i in 0..stripes {
            let buffer = self.engine.alloc_host_buffer(1 << 20).expect("buffer");
            self.engine.submit(HostRequest {
                id: i,
                op: HostOp::Write {
                    offset_bytes: i << 20,
                    buffer,
                    fua: false,
                },
            });
            self.drain();
        }
        self.settle();
    }
}

/// When a run stops: after about this long, or once this many requests are answered.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Time(Duration),
    Requests(u64),
}

/// One closed-loop run, or the sum of several.
#[derive(Default)]
pub struct Measured {
    pub ops: u64,
    pub bytes: u64,
    pub wall_seconds: f64,
    /// The wall time less the member copies: the engine's own time on its core.
    pub engine_seconds: f64,
    /// Heap allocations during the measured loop.
    pub allocations: u64,
}

impl Measured {
    pub fn add(&mut self, other: &Measured) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.wall_seconds += other.wall_seconds;
        self.engine_seconds += other.engine_seconds;
        self.allocations += other.allocations;
    }

    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.wall_seconds
    }

    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.wall_seconds / 1e9
    }

    pub fn engine_iops(&self) -> f64 {
        self.ops as f64 / self.engine_seconds
    }

    /// Requests per second of member copies alone (the wall time less the engine's).
    pub fn copy_iops(&self) -> f64 {
        self.ops as f64 / (self.wall_seconds - self.engine_seconds)
    }

    pub fn allocations_per_op(&self) -> f64 {
        self.allocations as f64 / self.ops.max(1) as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    RandomRead,
    RandomWrite,
    SequentialWrite,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::RandomRead => "4k_random_read",
            Workload::RandomWrite => "4k_random_write",
            Workload::SequentialWrite => "128k_sequential_write",
        }
    }
}
