//! `engine-bench`: the RAID engine alone over in-memory members, on one core.
//!
//! Drives the engine with a closed loop of host requests at a fixed queue depth, executing each
//! member command as a memory copy the moment it is emitted: the members are memory, and their
//! copies stand in for the drives' transfers, so the main ratio is bounded by member traffic as
//! on drives (a RAID5 small write moves four blocks where no RAID moves one). A second ratio
//! leaves the copy time out (a drive's DMA costs no CPU): the engine's own work per request; a
//! third counts the copies alone, the bound the main ratio approaches as the engine's share
//! shrinks. Workloads: 4 KiB random read, 4 KiB random write, 128 KiB sequential write. Groups:
//! RAID5 4+1 and RAID6 4+2, and beside each the same workload with no redundancy over the same
//! members (RAID0 through the same engine, so the ratio isolates what redundancy costs). Prints
//! IOPS, GB/s and the ratios; `--json` prints one JSON array. `--journal` measures instead the
//! write journal's cost: the write workloads with the journal `always_on` against the same
//! group with it off.

use std::time::Duration;
use tessera_raid::geometry::Level;
use tessera_raid::superblock::JournalMode;
use tessera_sim::closed_loop::{ClosedLoop, CountingAllocator, Limit, Measured, Workload};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Runs of each side alternate in this many slices of the duration, so that a machine whose
/// speed drifts (a shared virtual machine: the no-RAID side alone moved by 30% between
/// back-to-back runs) weighs on both sides alike.
const SLICES: u32 = 8;

/// `a` and `b` on `workload` for `duration` each, in alternating slices.
fn alternate(
    a: &mut ClosedLoop,
    b: &mut ClosedLoop,
    workload: Workload,
    duration: Duration,
) -> (Measured, Measured) {
    let mut totals = (Measured::default(), Measured::default());
    for _ in 0..SLICES {
        totals
            .0
            .add(&a.run(workload, Limit::Time(duration / SLICES)));
        totals
            .1
            .add(&b.run(workload, Limit::Time(duration / SLICES)));
    }
    totals
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
            journal_cost(
                level,
                members,
                parity,
                duration,
                json,
                only.as_deref(),
                &mut rows,
            );
            continue;
        }
        let mut raid = ClosedLoop::new(level, members, JournalMode::AlwaysOff);
        raid.precondition();
        let mut plain = ClosedLoop::new(Level::Raid0, members, JournalMode::AlwaysOff);
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
            // The wall-clock ratio is a mediant of these two, so it cannot pass the larger:
            // with the copies' ratio below a target, no engine change reaches it.
            let copy_ratio = raid_run.copy_iops() / plain_run.copy_iops();
            let theoretical = match workload {
                Workload::SequentialWrite => Some((members - parity) as f64 / members as f64),
                _ => None,
            };
            rows.push(format!(
                "{{\"group\":\"{level} {}+{parity}\",\"workload\":\"{}\",\"iops\":{:.0},\"gbps\":{:.3},\"no_raid_iops\":{:.0},\"no_raid_gbps\":{:.3},\"ratio\":{ratio:.3},\"theoretical_ratio\":{},\"of_theoretical\":{},\"engine_iops\":{:.0},\"no_raid_engine_iops\":{:.0},\"engine_ratio\":{engine_ratio:.3},\"copy_ratio\":{copy_ratio:.3},\"allocations_per_request\":{:.2},\"no_raid_allocations_per_request\":{:.2}}}",
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
                raid_run.allocations_per_op(),
                plain_run.allocations_per_op(),
            ));
            if !json {
                println!(
                    "{level} {}+{parity} {:<22} {:>9.0} IOPS {:>6.2} GB/s | no RAID {:>9.0} IOPS {:>6.2} GB/s | ratio {ratio:.2}{} | engine time only: ratio {engine_ratio:.2} | copies only: ratio {copy_ratio:.2} | allocations/request {:.2} (no RAID {:.2})",
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
                    raid_run.allocations_per_op(),
                    plain_run.allocations_per_op(),
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
    only: Option<&str>,
    rows: &mut Vec<String>,
) {
    let mut off = ClosedLoop::new(level, members, JournalMode::AlwaysOff);
    off.precondition();
    let mut on = ClosedLoop::new(level, members, JournalMode::AlwaysOn);
    on.precondition();
    for workload in [Workload::RandomWrite, Workload::SequentialWrite] {
        if only.is_some_and(|only| only != format!("{level}:{}", workload.name())) {
            continue;
        }
        let (on_run, off_run) = alternate(&mut on, &mut off, workload, duration);
        let (on_iops, off_iops) = (on_run.iops(), off_run.iops());
        let ratio = on_iops / off_iops;
        let name = format!("{level} {}+{parity}", members - parity);
        rows.push(format!(
            "{{\"group\":\"{name}\",\"workload\":\"{}\",\"journal_iops\":{on_iops:.0},\"no_journal_iops\":{off_iops:.0},\"ratio\":{ratio:.3},\"cost\":{:.3},\"allocations_per_request\":{:.2},\"no_journal_allocations_per_request\":{:.2}}}",
            workload.name(),
            1.0 - ratio,
            on_run.allocations_per_op(),
            off_run.allocations_per_op(),
        ));
        if !json {
            println!(
                "{name} {:<22} journal always_on {on_iops:>9.0} IOPS | off {off_iops:>9.0} IOPS | ratio {ratio:.2} (cost {:.0}%) | allocations/request {:.2} (off {:.2})",
                workload.name(),
                (1.0 - ratio) * 100.0,
                on_run.allocations_per_op(),
                off_run.allocations_per_op(),
            );
        }
    }
}
