//! Cleaning under a host that writes faster than the drive group completes the store's I/O
//! (a daemon starved of CPU, or slow members): writes may wait, but a drive with room to
//! reclaim never refuses one.

mod common;

use common::{BLOCK, Lower, block, run};
use std::collections::VecDeque;
use tessera_thin::{Compression, Config, HostOp, Output, Store, ThinError};

const EXTENT_BYTES: u64 = 64 << 20;

fn config(logical_bytes: u64) -> Config {
    Config {
        store_id: 0xc1ea,
        logical_bytes,
        extent_bytes: EXTENT_BYTES,
        stripe_bytes: 4 * 65536,
        compression: Compression::None,
        repair_sources: 1,
        member_bytes_per_data_byte: 5.0 / 4.0,
        low_space_percent: 10,
        session_id: 1,
    }
}

/// The store with every lower command held until `complete_one` releases the oldest.
struct SlowLower {
    lower: Lower,
    queue: VecDeque<tessera_thin::LowerCommand>,
    answered: u64,
    refused: u64,
}

impl SlowLower {
    /// Takes what the store has to say, holding its lower commands.
    fn poll(&mut self, store: &mut Store) {
        while let Some(output) = store.poll() {
            match output {
                Output::Lower(command) => self.queue.push_back(command),
                Output::Reply(reply) => {
                    self.answered += 1;
                    match reply.result {
                        Ok(_) => {}
                        Err(ThinError::NoSpace) => self.refused += 1,
                        Err(error) => panic!("write {} failed: {error:?}", reply.id),
                    }
                }
                Output::Event(event) => self.lower.events.push(event),
            }
        }
    }

    fn complete_one(&mut self, store: &mut Store) -> bool {
        let Some(command) = self.queue.pop_front() else {
            return false;
        };
        let result = command.op.apply_to(&mut self.lower.image);
        store.lower_done(command.id, Ok(result));
        true
    }
}

#[test]
fn a_host_outrunning_the_group_waits_for_cleaning_instead_of_failing() {
    for (writes_per_completion, seed) in [(32, 0x2545_f491_4f6c_dd1d), (8, 7), (128, 99), (2, 5)] {
        outrun(writes_per_completion, seed);
    }
}

/// Incompressible data filling 70% of the physical space, then random overwrites that arrive
/// `writes_per_completion` at a time for each lower command the group completes.
fn outrun(writes_per_completion: u64, seed: u64) {
    let logical_bytes = EXTENT_BYTES / 10 * 7 / BLOCK as u64 * BLOCK as u64;
    let blocks = logical_bytes / BLOCK as u64;
    let mut lower = Lower::new(EXTENT_BYTES, 0);
    let mut store = Store::create(config(logical_bytes)).expect("store");
    run(&mut store, &mut lower);
    for lba in 0..blocks {
        let op = HostOp::Write {
            offset_bytes: lba * BLOCK as u64,
            data: block(lba, 0),
            fua: false,
        };
        let reply = common::submit(&mut store, &mut lower, lba, op);
        assert!(reply.result.is_ok(), "fill write {lba} failed");
    }

    let mut slow = SlowLower {
        lower,
        queue: VecDeque::new(),
        answered: 0,
        refused: 0,
    };
    let mut state = seed;
    let writes = blocks * 3;
    let mut submitted = 0;
    while submitted < writes {
        for _ in 0..writes_per_completion {
            if submitted == writes {
                break;
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let lba = state % blocks;
            submitted += 1;
            store.submit(
                blocks + submitted,
                HostOp::Write {
                    offset_bytes: lba * BLOCK as u64,
                    data: block(lba, submitted),
                    fua: false,
                },
            );
            slow.poll(&mut store);
        }
        slow.complete_one(&mut store);
        slow.poll(&mut store);
    }
    while slow.complete_one(&mut store) {
        slow.poll(&mut store);
    }
    assert_eq!(
        slow.answered, writes,
        "every write was answered ({writes_per_completion} per completion)"
    );
    assert_eq!(
        slow.refused, 0,
        "writes refused for space on a drive 70% full, where cleaning can make room \
         ({writes_per_completion} per completion)"
    );
    assert!(
        store.stats().cleaning_bytes > 0,
        "the overwrites made cleaning run"
    );
}
