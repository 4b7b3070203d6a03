//! Sequential partial-stripe writes that arrive close together become one full-stripe write,
//! also when the event loop was busy for a long time before they arrived: the coalescing
//! window starts when the first write arrives, not at the engine's last tick; with the journal
//! on, a stream waits longer for a partner than a write whose predecessor was answered, and
//! longer still when writes are slow to be answered.

use tessera_raid::engine::HostOp;
use tessera_raid::geometry::Level;
use tessera_sim::harness::Harness;

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 11) as u8))
        .collect()
}

/// Sends stripe 1 of `data` as two halves, the second `gap_us` after the first (ticked), lets
/// everything finish, checks that the two stripes read back, and returns how many writes were
/// coalesced meanwhile.
fn send_halves_of_stripe_one(harness: &mut Harness, data: &[u8], gap_us: u64) -> u64 {
    let stripe = data.len() / 2;
    let before = harness.engine.status().counters.coalesced_writes;
    harness.submit_write(stripe as u64, &data[stripe..stripe + stripe / 2]);
    harness.advance(gap_us);
    harness.submit_write(
        (stripe + stripe / 2) as u64,
        &data[stripe + stripe / 2..2 * stripe],
    );
    harness.settle();
    assert!(
        harness.read(0, 2 * stripe as u64).unwrap() == data[..2 * stripe],
        "the data reads back"
    );
    harness.engine.status().counters.coalesced_writes - before
}

#[test]
fn halves_arriving_after_a_busy_loop_turn_still_coalesce() {
    for (level, members) in [(Level::Raid5, 5), (Level::Raid6, 6)] {
        let mut harness = Harness::for_test(level, members, 16 << 10);
        let stripe = harness.engine.geometry().stripe_data_bytes() as usize;
        let data = pattern(2 * stripe);
        harness.write(0, &data[..stripe]).unwrap();
        harness.settle();

        // A client with more than one request in flight: a read elsewhere, not yet answered.
        harness.submit(HostOp::Read {
            offset_bytes: 2 * stripe as u64,
            len_bytes: 4096,
        });
        // Ten milliseconds without a tick (a long loop turn), then the first half arrives,
        // a tick 50 us later (the end of that turn), and the second half in the next turn.
        harness.pass_time_untold(10_000);
        assert_eq!(
            send_halves_of_stripe_one(&mut harness, &data, 50),
            1,
            "{level:?}: the halves became one write"
        );
    }
}

#[test]
fn a_lone_sequential_partial_write_does_not_wait_for_a_partner() {
    for (level, members) in [(Level::Raid5, 5), (Level::Raid6, 6)] {
        let mut harness = Harness::for_test(level, members, 16 << 10);
        let stripe = harness.engine.geometry().stripe_data_bytes() as usize;
        let data = pattern(2 * stripe);
        harness.write(0, &data[..stripe / 2]).unwrap();
        harness.settle();
        // Queue depth 1: the next half is sent only after this one is answered. Without a
        // tick, the write must still complete (member I/O only, no coalescing timer).
        let id = harness.submit_write((stripe / 2) as u64, &data[stripe / 2..stripe]);
        let started = harness.now_us();
        harness.drain();
        assert!(
            harness.answered(id),
            "{level:?}: answered without waiting for a timer"
        );
        assert_eq!(harness.now_us(), started, "{level:?}");
        assert!(
            harness.read(0, stripe as u64).unwrap() == data[..stripe],
            "{level:?}: the data reads back"
        );
    }
}

/// RAID5 of five with the journal always on and the default coalescing window (200 us).
fn journaled() -> Harness {
    let config = tessera_raid::engine::EngineConfig {
        pool_bytes: 16 << 20,
        ..tessera_raid::engine::EngineConfig::default()
    };
    let mut harness = Harness::with_journal(
        Level::Raid5,
        5,
        16 << 10,
        16 << 20,
        config,
        std::sync::Arc::new(tessera_parity::Naive),
        tessera_raid::superblock::JournalMode::AlwaysOn,
    );
    harness.settle();
    harness
}

#[test]
fn with_the_journal_on_a_stream_waits_longer_for_a_partner_than_a_lone_write() {
    // A stream: the write the first half continues is still in flight when it arrives, so the
    // half waits up to ten windows; its partner 1 ms later still joins it.
    let mut harness = journaled();
    let stripe = harness.engine.geometry().stripe_data_bytes() as usize;
    let data = pattern(2 * stripe);
    harness.submit_write(0, &data[..stripe]);
    assert_eq!(
        send_halves_of_stripe_one(&mut harness, &data, 1_000),
        1,
        "the stream's halves became one write"
    );

    // Not a stream: the write before was answered (another request is in flight), so the
    // half keeps the 200 us window and goes alone before its partner arrives 1 ms later.
    let mut harness = journaled();
    harness.write(0, &data[..stripe]).unwrap();
    harness.settle();
    harness.submit(HostOp::Read {
        offset_bytes: 4 * stripe as u64,
        len_bytes: 4096,
    });
    assert_eq!(
        send_halves_of_stripe_one(&mut harness, &data, 1_000),
        0,
        "the halves went out apart"
    );
}

#[test]
fn with_the_journal_on_a_stream_on_slow_writes_waits_as_long_as_they_take() {
    // Writes answered 20 ms after they arrive, sixteen of them: the engine's average write
    // latency nears 20 ms, and a journaled stream's half then waits up to 50 windows (10 ms)
    // for its partner instead of 10 (2 ms): the partner 5 ms later still joins it.
    let mut harness = journaled();
    let stripe = harness.engine.geometry().stripe_data_bytes() as usize;
    let data = pattern(2 * stripe);
    for _ in 0..16 {
        harness.submit_write(4 * stripe as u64, &data[..stripe]);
        harness.pass_time_untold(20_000);
        harness.drain();
    }
    harness.settle();
    harness.submit_write(0, &data[..stripe]);
    assert_eq!(
        send_halves_of_stripe_one(&mut harness, &data, 5_000),
        1,
        "the stream's halves became one write"
    );

    // Fast writes (answered at once): the same stream's half waits 2 ms, and a partner 5 ms
    // later finds it gone.
    let mut harness = journaled();
    harness.submit_write(0, &data[..stripe]);
    assert_eq!(
        send_halves_of_stripe_one(&mut harness, &data, 5_000),
        0,
        "the halves went out apart"
    );
}
