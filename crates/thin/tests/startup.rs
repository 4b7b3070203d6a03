//! Start-up edge cases: a stop or a crash while a new store writes its first checkpoint, a
//! damaged checkpoint header, and requests that arrive before the store is ready.

mod common;

use common::{BLOCK, Lower, STRIPE_BYTES, block, config, run, submit};
use tessera_thin::layout::Layout;
use tessera_thin::{HostOp, LowerCommand, LowerOp, Output, Store, ThinEvent};

const EXTENT_BYTES: u64 = 16 << 20;

/// Lower commands the store issued, taken without completing them.
fn take_lower(store: &mut Store, lower: &mut Lower) -> Vec<LowerCommand> {
    take_lower_answering(store, lower, &[])
}

/// As `take_lower`, where the store may answer the requests `answered` meanwhile.
fn take_lower_answering(
    store: &mut Store,
    lower: &mut Lower,
    answered: &[u64],
) -> Vec<LowerCommand> {
    let mut commands = Vec::new();
    while let Some(output) = store.poll() {
        match output {
            Output::Lower(command) => commands.push(command),
            Output::Event(event) => lower.events.push(event),
            Output::Reply(reply) => {
                assert!(answered.contains(&reply.id), "unexpected reply {reply:?}")
            }
        }
    }
    commands
}

/// A new store, formatted.
fn formatted(lower: &mut Lower) -> Store {
    let mut store = Store::create(config(EXTENT_BYTES)).unwrap();
    run(&mut store, lower);
    store
}

/// The store started again from what `lower` holds (ready or not).
fn reopened(lower: &mut Lower) -> Store {
    let mut store = Store::open(config(EXTENT_BYTES)).unwrap();
    run(&mut store, lower);
    store
}

/// A new store holding version 1 of block `lba`, flushed; then the store is gone.
fn one_flushed_block(lower: &mut Lower, lba: u64) {
    let mut store = formatted(lower);
    write(&mut store, lower, 1, lba, 1);
    assert_eq!(submit(&mut store, lower, 2, HostOp::Flush).result, Ok(None));
}

fn write(store: &mut Store, lower: &mut Lower, id: u64, lba: u64, version: u64) {
    let reply = submit(
        store,
        lower,
        id,
        HostOp::Write {
            offset_bytes: lba * BLOCK as u64,
            data: block(lba, version),
            fua: false,
        },
    );
    assert_eq!(reply.result, Ok(None), "write of block {lba}");
}

fn read(store: &mut Store, lower: &mut Lower, id: u64, lba: u64) -> Vec<u8> {
    let reply = submit(
        store,
        lower,
        id,
        HostOp::Read {
            offset_bytes: lba * BLOCK as u64,
            len_bytes: BLOCK as u64,
        },
    );
    reply.result.expect("read").expect("data")
}

#[test]
fn a_stop_while_formatting_lets_the_format_finish_and_the_drive_opens_after() {
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    let mut store = Store::create(config(EXTENT_BYTES)).unwrap();
    let pending = take_lower(&mut store, &mut lower);
    assert!(!pending.is_empty(), "formatting writes a checkpoint header");
    store.shutdown();
    assert!(!store.is_stopped(), "stopped with the format in flight");
    // Requests after the stop was asked for are refused.
    store.submit(1, HostOp::Flush);
    for command in pending {
        let result = command.op.apply_to(&mut lower.image);
        store.lower_done(command.id, Ok(result));
    }
    let replies = run(&mut store, &mut lower);
    assert_eq!(replies.len(), 1);
    assert!(replies[0].result.is_err());
    assert!(store.is_stopped(), "the store did not stop once formatted");

    let store = reopened(&mut lower);
    assert!(store.is_ready(), "events: {:?}", lower.events);
    assert!(
        !lower.events.iter().any(|e| matches!(
            e,
            ThinEvent::Recovered {
                checkpoint_id: 0,
                ..
            }
        )),
        "the format was durable; it must not be done again: {:?}",
        lower.events
    );
}

#[test]
fn a_crash_before_the_first_checkpoint_is_durable_formats_the_drive_again() {
    // What the extent held before (another store's leftovers are as foreign as these).
    let mut lower = Lower::new(EXTENT_BYTES, 0x5a);
    let mut store = Store::create(config(EXTENT_BYTES)).unwrap();
    take_lower(&mut store, &mut lower);
    drop(store);

    let mut store = Store::open(config(EXTENT_BYTES)).unwrap();
    // A read and a write arrive while it starts; both wait for it.
    store.submit(
        1,
        HostOp::Read {
            offset_bytes: 0,
            len_bytes: BLOCK as u64,
        },
    );
    store.submit(
        2,
        HostOp::Write {
            offset_bytes: 5 * BLOCK as u64,
            data: block(5, 1),
            fua: true,
        },
    );
    let replies = run(&mut store, &mut lower);
    assert!(store.is_ready(), "events: {:?}", lower.events);
    assert!(
        lower.events.iter().any(|e| matches!(
            e,
            ThinEvent::Recovered {
                checkpoint_id: 0,
                ..
            }
        )),
        "events: {:?}",
        lower.events
    );
    let answer = |id: u64| {
        replies
            .iter()
            .find(|reply| reply.id == id)
            .unwrap_or_else(|| panic!("request {id} unanswered"))
            .result
            .clone()
    };
    assert_eq!(
        answer(1),
        Ok(Some(vec![0; BLOCK])),
        "a new drive reads zeroes"
    );
    assert_eq!(answer(2), Ok(None));

    // The drive works from then on: its FUA write survives a crash.
    drop(store);
    let mut store = reopened(&mut lower);
    assert!(store.is_ready());
    assert_eq!(read(&mut store, &mut lower, 3, 5), block(5, 1));
}

#[test]
fn a_damaged_checkpoint_header_of_the_drive_is_not_formatted_over() {
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    one_flushed_block(&mut lower, 7);

    // The first checkpoint header is in slot 1; slot 0 has never been written. Damage a
    // byte inside the header (after its magic and store id).
    let slot = Layout::new(EXTENT_BYTES, STRIPE_BYTES)
        .unwrap()
        .slot_offset(1) as usize;
    lower.image[slot + 40] ^= 0x10;
    let store = reopened(&mut lower);
    assert!(!store.is_ready());
    assert!(
        lower
            .events
            .iter()
            .any(|e| matches!(e, ThinEvent::StartFailed { .. })),
        "events: {:?}",
        lower.events
    );
    // The log is still there for whoever repairs the header.
    lower.image[slot + 40] ^= 0x10;
    let mut store = reopened(&mut lower);
    assert!(store.is_ready());
    assert_eq!(read(&mut store, &mut lower, 3, 7), block(7, 1));
}

#[test]
fn a_drive_in_format_1_is_refused_not_formatted_over() {
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    one_flushed_block(&mut lower, 7);
    // What format 1 left in the slot: its magic (the rest of that header differed too).
    let slot = Layout::new(EXTENT_BYTES, STRIPE_BYTES)
        .unwrap()
        .slot_offset(1) as usize;
    lower.image[slot..slot + 8].copy_from_slice(b"TSTHINC1");
    let before = lower.image.clone();
    let store = reopened(&mut lower);
    assert!(!store.is_ready());
    let reason = lower.events.iter().find_map(|e| match e {
        ThinEvent::StartFailed { reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(
        reason.as_deref().is_some_and(|r| r.contains("format 1")),
        "events: {:?}",
        lower.events
    );
    assert!(lower.image == before, "the drive was written to");
}

#[test]
fn a_torn_block_of_an_unflushed_record_goes_back_to_its_flushed_value() {
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    let mut store = formatted(&mut lower);
    write(&mut store, &mut lower, 1, 5, 1);
    write(&mut store, &mut lower, 2, 6, 1);
    assert_eq!(
        submit(&mut store, &mut lower, 3, HostOp::Flush).result,
        Ok(None)
    );
    // New versions, in a record written (when its idle time ran out) but never flushed.
    write(&mut store, &mut lower, 4, 5, 2);
    write(&mut store, &mut lower, 5, 6, 2);
    store.tick(10_000_000);
    run(&mut store, &mut lower);
    let torn = store.location(5).expect("mapped");
    assert_ne!(read(&mut store, &mut lower, 6, 5), block(5, 1));
    drop(store);

    // The crash tore the record: block 5's new bytes never reached the members.
    for byte in &mut lower.image[torn.address_bytes as usize + 40..][..64] {
        *byte ^= 0xff;
    }
    let mut store = reopened(&mut lower);
    assert!(store.is_ready(), "events: {:?}", lower.events);
    assert!(
        lower.events.iter().any(|e| matches!(
            e,
            ThinEvent::Recovered {
                torn_blocks_dropped: 1,
                ..
            }
        )),
        "events: {:?}",
        lower.events
    );
    assert_eq!(
        read(&mut store, &mut lower, 7, 5),
        block(5, 1),
        "the torn block"
    );
    assert_eq!(
        read(&mut store, &mut lower, 8, 6),
        block(6, 2),
        "its intact neighbour"
    );
}

#[test]
fn a_full_drive_starts_again_and_again() {
    // Overcommitted: more logical blocks than the extent holds.
    let extent = 12 << 20;
    let config = || {
        let mut config = config(extent);
        config.logical_bytes = 64 << 20;
        config
    };
    let mut lower = Lower::new(extent, 0);
    let mut store = Store::create(config()).unwrap();
    run(&mut store, &mut lower);
    let mut written = Vec::new();
    let mut id = 0;
    for lba in 0.. {
        id += 1;
        let reply = submit(
            &mut store,
            &mut lower,
            id,
            HostOp::Write {
                offset_bytes: lba * BLOCK as u64,
                data: block(lba, 1),
                fua: false,
            },
        );
        if reply.result.is_err() {
            break;
        }
        written.push(lba);
    }
    id += 1;
    assert_eq!(
        submit(&mut store, &mut lower, id, HostOp::Flush).result,
        Ok(None)
    );
    for restart in 0..40u64 {
        if restart % 2 == 0 {
            store.shutdown();
            run(&mut store, &mut lower);
            assert!(
                store.is_stopped(),
                "restart {restart}: the stop did not finish"
            );
        }
        drop(store);
        store = Store::open(config()).unwrap();
        run(&mut store, &mut lower);
        assert!(
            store.is_ready(),
            "restart {restart}: {:?}",
            lower.events.last()
        );
        // One more write each time, refused or not, and a flush.
        id += 1;
        let lba = 10_000 + restart;
        let reply = submit(
            &mut store,
            &mut lower,
            id,
            HostOp::Write {
                offset_bytes: lba * BLOCK as u64,
                data: block(lba, 2),
                fua: true,
            },
        );
        if reply.result.is_ok() {
            written.push(lba);
        }
    }
    for (i, &lba) in written.iter().enumerate() {
        let version = if lba >= 10_000 { 2 } else { 1 };
        assert_eq!(
            read(&mut store, &mut lower, 1 << 40 | i as u64, lba),
            block(lba, version)
        );
    }
}

/// Submits a write of block `lba` and a flush, and returns the lower commands they caused,
/// none of them carried out (the write is answered, the flush is not).
fn write_and_flush_held(
    store: &mut Store,
    lower: &mut Lower,
    id: u64,
    lba: u64,
) -> Vec<LowerCommand> {
    store.submit(
        id,
        HostOp::Write {
            offset_bytes: lba * BLOCK as u64,
            data: block(lba, id),
            fua: false,
        },
    );
    store.submit(id + 1, HostOp::Flush);
    // Only the write is answered: the flush waits for the commands held here.
    take_lower_answering(store, lower, &[id])
}

/// The writes among `commands` reach the drive; nothing is answered (the store is about to
/// be gone).
fn land_writes(commands: &[LowerCommand], lower: &mut Lower) {
    for command in commands {
        if matches!(command.op, LowerOp::Write { .. }) {
            command.op.apply_to(&mut lower.image);
        }
    }
}

fn record_write_offset(commands: &[LowerCommand]) -> u64 {
    let offsets: Vec<u64> = commands
        .iter()
        .filter_map(|command| match &command.op {
            LowerOp::Write { offset_bytes, .. } => Some(*offset_bytes),
            _ => None,
        })
        .collect();
    assert_eq!(offsets.len(), 1, "one record written: {commands:?}");
    offsets[0]
}

fn session(session_id: u64) -> tessera_thin::Config {
    tessera_thin::Config {
        session_id,
        ..config(EXTENT_BYTES)
    }
}

#[test]
fn records_a_crashed_start_up_left_are_not_replayed_after_the_next_ones() {
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    one_flushed_block(&mut lower, 0);

    // Start-up 2 writes two records; the crash tears the first and keeps the second.
    let mut store = Store::open(session(2)).unwrap();
    run(&mut store, &mut lower);
    assert!(store.is_ready());
    let first = write_and_flush_held(&mut store, &mut lower, 10, 1);
    let second = write_and_flush_held(&mut store, &mut lower, 20, 2);
    let first_at = record_write_offset(&first);
    let record_bytes = store.layout().record_bytes;
    assert_eq!(record_write_offset(&second), first_at + record_bytes);
    land_writes(&second, &mut lower);
    drop(store);

    // Start-up 3 resumes where start-up 2 did, with the same sequence numbers: block 2 was
    // never acknowledged and reads as before. Its first record lands; its second is lost.
    let mut store = Store::open(session(3)).unwrap();
    run(&mut store, &mut lower);
    assert!(store.is_ready());
    assert!(
        read(&mut store, &mut lower, 30, 2) == vec![0u8; BLOCK],
        "block 2 was never acknowledged"
    );
    let resumed = write_and_flush_held(&mut store, &mut lower, 40, 3);
    assert_eq!(record_write_offset(&resumed), first_at, "resumed elsewhere");
    land_writes(&resumed, &mut lower);
    write_and_flush_held(&mut store, &mut lower, 50, 4);
    drop(store);

    // Start-up 2's second record follows start-up 3's first on the drive and names its
    // sequence number as predecessor, but it is not of start-up 3: the log ends before it.
    let mut store = Store::open(session(4)).unwrap();
    run(&mut store, &mut lower);
    assert!(store.is_ready());
    assert!(read(&mut store, &mut lower, 60, 0) == block(0, 1));
    assert!(
        read(&mut store, &mut lower, 61, 2) == vec![0u8; BLOCK],
        "block 2 came back from the crashed start-up"
    );
}
