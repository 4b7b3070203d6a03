//! `engine-bench`: the RAID engine alone over in-memory members, on one core.
//!
//! Drives the engine with a closed loop of host requests at a fixed queue depth, executing each
//! member command as a memory copy the moment it is emitted: the members are memory, and their
//! copies stand in for the drives' transfers, so the main ratio is bounded by member traffic as
//! on drives (a RAID5 small write moves four blocks where no RAID moves one). A second ratio
//! leaves the copy time out (a drive's DMA costs no CPU): the engine's own work per request. Workloads: 4 KiB random read,
//! 4 KiB random write, 128 KiB sequential write. Groups: RAID5 4+1 and RAID6 4+2, and beside each
//! the same workload with no redundancy over the same members (RAID0 through the same engine, so
//! the ratio isolates what redundancy costs). Prints IOPS, GB/s and the ratio; `--json` prints
//! one JSON array. `--journal` measures instead the write journal's cost: the write workloads
//! with the journal `always_on` against the same group with it off.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_raid::engine::{
    Command, CreateSpec, Engine, EngineConfig, HostOp, HostRequest, MemberOp,
};
use tessera_raid::geometry::Level;
use tessera_raid::superblock::{JournalMode, Uuid};
use tessera_sim::prng::Rng;

const MEMBER_BYTES: u64 = 160 << 20;
const WORKING_BYTES: u64 = 256 << 20;
const QUEUE_DEPTH: usize = 32;

struct Bench {
    engine: Engine,
    members: Vec<Vec<u8>>,
    rng: Rng,
    now_us: u64,
    /// Time spent copying member data in and out: the work a drive's DMA does, not the
    /// engine's.
    member_copy: Duration,
}

impl Bench {
    fn new(level: Level, members: usize, journal_mode: JournalMode) -> Bench {
        let spec = CreateSpec {
            group_uuid: Uuid([9; 16]),
            name: "bench".into(),
            level,
            chunk_bytes: 64 << 10,
            members: (0..members)
                .map(|i| (Uuid([i as u8 + 1; 16]), MEMBER_BYTES))
                .collect(),
            created_unix_seconds: 0,
            region_bytes: Some(64 << 20),
            journal_bytes: Some(8 << 20),
            journal_mode,
            journal_device: None,
            rebuild_rate_percent: 30,
            config: Vec::new(),
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
        let mut bench = Bench {
            engine,
            members: (0..members)
                .map(|_| vec![0u8; MEMBER_BYTES as usize])
                .collect(),
            rng: Rng::new(7),
            now_us: 0,
            member_copy: Duration::ZERO,
        };
        bench.settle();
        bench
    }

    /// Carries out every command the engine has, until it has none; returns replies seen.
    /// Member commands are gathered and copied in one timed block per round (as a drive would
    /// take a batch of submissions), so the clock is read twice per round, not per command.
    fn drain(&mut self) -> usize {
        let mut replies = 0;
        let mut commands = Vec::new();
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
                return replies;
            }
            let copy_started = Instant::now();
            for command in &commands {
                let member = &mut self.members[command.member];
                match command.op {
                    MemberOp::Read {
                        offset_bytes,
                        buffer,
                    } => {
                        let start = offset_bytes as usize;
                        let out = self.engine.pool_mut().bytes_mut(buffer);
                        out.copy_from_slice(&member[start..start + out.len()]);
                    }
                    MemberOp::Write {
                        offset_bytes,
                        buffer,
                        ..
                    } => {
                        let start = offset_bytes as usize;
                        let data = self.engine.pool().bytes(buffer);
                        member[start..start + data.len()].copy_from_slice(data);
                    }
                    MemberOp::Flush => {}
                }
            }
            self.member_copy += copy_started.elapsed();
            for command in commands.drain(..) {
                self.engine.complete(command.id, Ok(()));
            }
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

    fn submit(&mut self, id: u64, op: Workload, sequence: u64) {
        let data_bytes = self.engine.data_bytes().min(WORKING_BYTES);
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
        self.engine.submit(HostRequest { id, op });
    }

    /// Runs a closed loop at `QUEUE_DEPTH` for about `duration`.
    fn run(&mut self, workload: Workload, duration: Duration) -> Measured {
        let copies_before = self.member_copy;
        let len = match workload {
            Workload::SequentialWrite => 128 << 10,
            _ => 4096,
        };
        let mut in_flight = 0;
        let mut done = 0u64;
        let mut next_id = 1;
        let start = Instant::now();
        while start.elapsed() < duration {
            while in_flight < QUEUE_DEPTH {
                self.submit(next_id, workload, next_id);
                next_id += 1;
                in_flight += 1;
            }
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
        }
    }

    /// Writes the working set once so measurements see written regions (no zero-fill).
    fn precondition(&mut self) {
        let data_bytes = self.engine.data_bytes().min(WORKING_BYTES);
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

/// One closed-loop run, or the sum of several.
#[derive(Default)]
struct Measured {
    ops: u64,
    bytes: u64,
    wall_seconds: f64,
    /// The wall time less the member copies: the engine's own time on its core.
    engine_seconds: f64,
}

/// Runs of each side alternate in this many slices of the duration, so that a machine whose
/// speed drifts (a shared virtual machine: the no-RAID side alone moved by 30% between
/// back-to-back runs) weighs on both sides alike.
const SLICES: u32 = 8;

/// `a` and `b` on `workload` for `duration` each, in alternating slices.
fn alternate(
    a: &mut Bench,
    b: &mut Bench,
    workload: Workload,
    duration: Duration,
) -> (Measured, Measured) {
    let mut totals = (Measured::default(), Measured::default());
    for _ in 0..SLICES {
        totals.0.add(&a.run(workload, duration / SLICES));
        totals.1.add(&b.run(workload, duration / SLICES));
    }
    totals
}

impl Measured {
    fn add(&mut self, other: &Measured) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.wall_seconds += other.wall_seconds;
        self.engine_seconds += other.engine_seconds;
    }

    fn iops(&self) -> f64 {
        self.ops as f64 / self.wall_seconds
    }

    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.wall_seconds / 1e9
    }

    fn engine_iops(&self) -> f64 {
        self.ops as f64 / self.engine_seconds
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    RandomRead,
    RandomWrite,
    SequentialWrite,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::RandomRead => "4k_random_read",
            Workload::RandomWrite => "4k_random_write",
            Workload::SequentialWrite => "128k_sequential_write",
        }
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let journal = std::env::args().any(|a| a == "--journal");
    // `--only raid5:4k_random_write`: one row, for profiling.
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let seconds: f64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let duration = Duration::from_secs_f64(seconds);
    let mut rows = Vec::new();
    for (level, members, parity) in [(Level::Raid5, 5usize, 1usize), (Level::Raid6, 6, 2)] {
        if journal {
            journal_cost(level, members, parity, duration, json, &mut rows);
            continue;
        }
        let mut raid = Bench::new(level, members, JournalMode::AlwaysOff);
        raid.precondition();
        let mut plain = Bench::new(Level::Raid0, members, JournalMode::AlwaysOff);
        plain.precondition();
        for workload in [
            Workload::RandomRead,
            Workload::RandomWrite,
            Workload::SequentialWrite,
        ] {
            if only
                .as_deref()
                .is_some_and(|only| only != format!("{level}:{}", workload.name()))
            {
                continue;
            }
            let (raid_run, plain_run) = alternate(&mut raid, &mut plain, workload, duration);
            let ratio = raid_run.iops() / plain_run.iops();
            let engine_ratio = raid_run.engine_iops() / plain_run.engine_iops();
            let theoretical = match workload {
                Workload::SequentialWrite => Some((members - parity) as f64 / members as f64),
                _ => None,
            };
            rows.push(format!(
                "{{\"group\":\"{level} {}+{parity}\",\"workload\":\"{}\",\"iops\":{:.0},\"gbps\":{:.3},\"no_raid_iops\":{:.0},\"no_raid_gbps\":{:.3},\"ratio\":{ratio:.3},\"theoretical_ratio\":{},\"of_theoretical\":{},\"engine_iops\":{:.0},\"no_raid_engine_iops\":{:.0},\"engine_ratio\":{engine_ratio:.3}}}",
                members - parity,
                workload.name(),
                raid_run.iops(),
                raid_run.gbps(),
                plain_run.iops(),
                plain_run.gbps(),
                theoretical.map_or("null".into(), |t| format!("{t:.3}")),
                theoretical.map_or("null".into(), |t| format!("{:.3}", ratio / t)),
                raid_run.engine_iops(),
                plain_run.engine_iops(),
            ));
            if !json {
                println!(
                    "{level} {}+{parity} {:<22} {:>9.0} IOPS {:>6.2} GB/s | no RAID {:>9.0} IOPS {:>6.2} GB/s | ratio {ratio:.2}{} | engine time only: ratio {engine_ratio:.2}",
                    members - parity,
                    workload.name(),
                    raid_run.iops(),
                    raid_run.gbps(),
                    plain_run.iops(),
                    plain_run.gbps(),
                    theoretical.map_or(String::new(), |t| format!(
                        " (theoretical {t:.2}, {:.2} of it)",
                        ratio / t
                    )),
                );
            }
        }
    }
    if json {
        println!("[{}]", rows.join(",\n"));
    }
}

/// The write workloads with the journal always on against the same group without it.
/// Members here are memory, so this is the journal's CPU cost (entry copies, checksums, group
/// commit); on drives its extra writes and flushes add to it.
fn journal_cost(
    level: Level,
    members: usize,
    parity: usize,
    duration: Duration,
    json: bool,
    rows: &mut Vec<String>,
) {
    let mut off = Bench::new(level, members, JournalMode::AlwaysOff);
    off.precondition();
    let mut on = Bench::new(level, members, JournalMode::AlwaysOn);
    on.precondition();
    for workload in [Workload::RandomWrite, Workload::SequentialWrite] {
        let (on_run, off_run) = alternate(&mut on, &mut off, workload, duration);
        let (on_iops, off_iops) = (on_run.iops(), off_run.iops());
        let ratio = on_iops / off_iops;
        let name = format!("{level} {}+{parity}", members - parity);
        rows.push(format!(
            "{{\"group\":\"{name}\",\"workload\":\"{}\",\"journal_iops\":{on_iops:.0},\"no_journal_iops\":{off_iops:.0},\"ratio\":{ratio:.3},\"cost\":{:.3}}}",
            workload.name(),
            1.0 - ratio
        ));
        if !json {
            println!(
                "{name} {:<22} journal always_on {on_iops:>9.0} IOPS | off {off_iops:>9.0} IOPS | ratio {ratio:.2} (cost {:.0}%)",
                workload.name(),
                (1.0 - ratio) * 100.0
            );
        }
    }
}
