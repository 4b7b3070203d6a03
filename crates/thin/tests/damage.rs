//! Damage the store meets on its drive group beyond what the model test injects: records whose
//! headers no longer decode under blocks the map still points at, and checkpoint headers whose
//! CRC holds over values no store writes.

use tessera_thin::format::CheckpointHeader;
use tessera_thin::layout::Layout;
use tessera_thin::{Compression, Config, HostOp, LowerOp, Output, Store};

const BLOCK: u64 = 4096;
/// Outputs taken and commands answered before a store is taken to be spinning.
const STEPS_MAX: usize = 20_000;

/// Answers every command from `image` at once until the store has nothing to do; the number
/// of steps that took, or `None` past `STEPS_MAX`.
fn settle(store: &mut Store, image: &mut [u8]) -> Option<usize> {
    for step in 0..STEPS_MAX {
        match store.poll() {
            Some(Output::Lower(command)) => {
                let result = command.op.apply_to(image);
                store.lower_done(command.id, Ok(result));
            }
            Some(_) => {}
            None => match store.next_deadline_us() {
                Some(deadline) => store.tick(deadline),
                None => return Some(step),
            },
        }
    }
    None
}

#[test]
fn cleaning_does_not_spin_on_a_record_whose_header_is_damaged() {
    // One record a segment and few segments, so a reopened store wants to clean at once.
    let stripe_bytes = 516 << 10;
    let record_bytes = Layout::new(1 << 30, stripe_bytes).unwrap().record_bytes;
    let config = Config {
        store_id: 11,
        logical_bytes: 2 << 20,
        extent_bytes: 14 * record_bytes,
        stripe_bytes,
        compression: Compression::None,
        repair_sources: 1,
        member_bytes_per_data_byte: 1.5,
        low_space_percent: 10,
        session_id: 1,
    };
    let mut image = vec![0u8; config.extent_bytes as usize];
    let mut store = Store::create(config.clone()).unwrap();
    settle(&mut store, &mut image).expect("formatting settles");
    let mut id = 0;
    for round in 0..8u64 {
        for lba in round * 4..round * 4 + 4 {
            id += 1;
            let data = (0..BLOCK).map(|i| (i * 7 + lba * 13 + 1) as u8).collect();
            store.submit(
                id,
                HostOp::Write {
                    offset_bytes: lba * BLOCK,
                    data,
                    fua: false,
                },
            );
        }
        id += 1;
        store.submit(id, HostOp::Flush);
        settle(&mut store, &mut image).expect("writes settle");
    }
    store.shutdown();
    settle(&mut store, &mut image).expect("shutdown settles");
    assert!(store.is_stopped());

    // The data record holding block 0, which the checkpoint maps, loses its magic.
    let layout = *store.layout();
    let address = store.location(0).expect("block 0 is stored").address_bytes;
    let first = layout.record_offset(layout.record_at(address)) as usize;
    assert_eq!(&image[first..first + 8], b"TSTHINR2");
    image[first + 1] ^= 0x20;

    let mut store = Store::open(config).unwrap();
    let steps = settle(&mut store, &mut image);
    assert!(
        steps.is_some(),
        "the store keeps re-reading a segment it cannot clean"
    );
    assert!(store.is_ready());
    // The blocks of the damaged record are still where the map says, and read back.
    id += 1;
    store.submit(
        id,
        HostOp::Read {
            offset_bytes: 0,
            len_bytes: BLOCK,
        },
    );
    let mut data = None;
    let mut now_us = 0;
    for _ in 0..STEPS_MAX {
        match store.poll() {
            Some(Output::Lower(command)) => {
                let result = match command.op {
                    LowerOp::Read {
                        offset_bytes,
                        len_bytes,
                    } => Some(image[offset_bytes as usize..][..len_bytes as usize].to_vec()),
                    _ => None,
                };
                store.lower_done(command.id, Ok(result));
            }
            Some(Output::Reply(reply)) if reply.id == id => data = Some(reply.result),
            Some(_) => {}
            None if data.is_some() => break,
            None => {
                now_us += 100_000;
                store.tick(now_us);
            }
        }
    }
    let expected: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + 1) as u8).collect();
    assert_eq!(data, Some(Ok(Some(expected))));
}

#[test]
fn a_checkpoint_whose_sequence_numbers_reach_the_top_is_refused() {
    let stripe_bytes = 256 << 10;
    let config = Config {
        store_id: 12,
        logical_bytes: 1 << 20,
        extent_bytes: 12 << 20,
        stripe_bytes,
        compression: Compression::Lz4,
        repair_sources: 1,
        member_bytes_per_data_byte: 1.5,
        low_space_percent: 10,
        session_id: 1,
    };
    let mut image = vec![0u8; config.extent_bytes as usize];
    let mut store = Store::create(config.clone()).unwrap();
    settle(&mut store, &mut image).expect("formatting settles");
    let layout = *store.layout();
    // Both slots name an empty checkpoint after which counting on would overflow.
    for slot in 0..2 {
        let at = layout.slot_offset(slot) as usize;
        let Some(mut header) = CheckpointHeader::decode(&image[at..at + 4096]) else {
            continue;
        };
        header.checkpoint_records = 0;
        header.start_prev_seq = u64::MAX - 16;
        header.start_seq = u64::MAX - 15;
        header.encode(&mut image[at..at + 4096]);
    }
    let mut store = Store::open(config).unwrap();
    settle(&mut store, &mut image).expect("start-up settles");
    assert!(store.is_failed(), "{}", store.debug_position());
}
