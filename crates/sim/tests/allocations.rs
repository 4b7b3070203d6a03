//! Host requests in steady state take no heap allocation in the engine: every list a stripe
//! update needs is inline or reused (finished ops and their lists, lock queues, journal
//! sealing lists), so the data path's cost per request does not include the allocator.
//! Counted with a counting global allocator over the engine-bench closed loop, after a warm-up
//! that lets reused lists reach their working size. One test in this file: the counter is the
//! whole process's.

use tessera_raid::geometry::Level;
use tessera_raid::superblock::JournalMode;
use tessera_sim::closed_loop::{ClosedLoop, CountingAllocator, Limit, Workload, assert_counting};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const WARM_UP_REQUESTS: u64 = 2_000;
const MEASURED_REQUESTS: u64 = 6_000;
/// Small enough to write whole quickly, large enough that random requests rarely meet.
const WORKING_BYTES: u64 = 32 << 20;

/// Allocations per request over `MEASURED_REQUESTS` after the warm-up.
fn allocations_per_request(
    level: Level,
    members: usize,
    journal: JournalMode,
    workload: Workload,
) -> f64 {
    let mut closed_loop = ClosedLoop::with_working_bytes(level, members, journal, WORKING_BYTES);
    closed_loop.precondition();
    closed_loop.run(workload, Limit::Requests(WARM_UP_REQUESTS));
    let measured = closed_loop.run(workload, Limit::Requests(MEASURED_REQUESTS));
    assert!(measured.ops >= MEASURED_REQUESTS);
    measured.allocations as f64 / measured.ops as f64
}

#[test]
fn steady_state_requests_take_no_heap_allocation() {
    assert_counting();

    let workloads = [
        Workload::RandomRead,
        Workload::RandomWrite,
        Workload::SequentialWrite,
    ];
    let mut report = Vec::new();
    for (level, members) in [
        (Level::Raid0, 4),
        (Level::Raid1, 2),
        (Level::Raid10, 4),
        (Level::Raid5, 5),
        (Level::Raid6, 6),
    ] {
        for workload in workloads {
            let per_request =
                allocations_per_request(level, members, JournalMode::AlwaysOff, workload);
            report.push(format!("{level} {}: {per_request:.3}", workload.name()));
            // Background bookkeeping (region state, an occasional superblock) may allocate
            // now and then; a list built per request would be one or more.
            assert!(
                per_request < 0.05,
                "{level} {} allocates {per_request:.3} times per request",
                workload.name()
            );
        }
    }
    // With the journal on, a batch of entries still allocates for its bookkeeping (a few per
    // batch, shared by its entries): well under one per request, where entries built their
    // descriptors and payload lists and a batch cloned them (5.5 per request before).
    for (level, members) in [(Level::Raid5, 5), (Level::Raid6, 6)] {
        for workload in [Workload::RandomWrite, Workload::SequentialWrite] {
            let per_request =
                allocations_per_request(level, members, JournalMode::AlwaysOn, workload);
            report.push(format!(
                "{level} {} journaled: {per_request:.3}",
                workload.name()
            ));
            assert!(
                per_request < 1.0,
                "{level} {} with the journal allocates {per_request:.3} times per request",
                workload.name()
            );
        }
    }
    println!("allocations per request:\n{}", report.join("\n"));
}
