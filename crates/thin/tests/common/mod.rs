//! Helpers shared by the store's integration tests: a lower device that completes commands
//! at once, and incompressible blocks.

#![allow(dead_code)]

use tessera_thin::{Compression, Config, HostOp, Output, Reply, Store, ThinEvent};

pub const BLOCK: usize = 4096;
pub const STRIPE_BYTES: u64 = 65536 * 3;

/// A lower device that completes every command at once, in order; writes are durable when
/// they complete (the store's own ordering is what is under test, not crash tearing).
pub struct Lower {
    pub image: Vec<u8>,
    /// Every event the stores run over it told.
    pub events: Vec<ThinEvent>,
}

impl Lower {
    pub fn new(bytes: u64, fill: u8) -> Lower {
        Lower {
            image: vec![fill; bytes as usize],
            events: Vec::new(),
        }
    }
}

/// Runs the store until it has nothing to do; returns the replies it gave.
///
/// Buffers go back and forth as the daemon's do (a buffer the size of each reply's data is
/// given back with `Store::recycle`, lower read data is carried in `Store::spare_buffer`), so
/// every test also runs the store's buffer reuse.
pub fn run(store: &mut Store, lower: &mut Lower) -> Vec<Reply> {
    let mut replies = Vec::new();
    for _ in 0..1_000_000 {
        let Some(output) = store.poll() else {
            return replies;
        };
        match output {
            Output::Reply(reply) => {
                if let Ok(Some(data)) = &reply.result {
                    store.recycle(vec![0xA5; data.len()]);
                }
                replies.push(reply);
            }
            Output::Event(event) => lower.events.push(event),
            Output::Lower(command) => {
                let result = command.op.apply_to(&mut lower.image).map(|data| {
                    let mut spare = store.spare_buffer();
                    spare.extend_from_slice(&data);
                    spare
                });
                store.lower_done(command.id, Ok(result));
            }
        }
    }
    panic!("the store never went idle");
}

pub fn submit(store: &mut Store, lower: &mut Lower, id: u64, op: HostOp) -> Reply {
    store.submit(id, op);
    let replies = run(store, lower);
    replies
        .into_iter()
        .find(|reply| reply.id == id)
        .unwrap_or_else(|| panic!("request {id} was not answered"))
}

/// Incompressible, different for every (block, version).
pub fn block(lba: u64, version: u64) -> Vec<u8> {
    let mut state = (lba << 20 | version).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..BLOCK)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub fn config(extent_bytes: u64) -> Config {
    Config {
        store_id: 0x6e0f,
        logical_bytes: 256 << 20,
        extent_bytes,
        stripe_bytes: STRIPE_BYTES,
        compression: Compression::Lz4,
        repair_sources: 1,
        member_bytes_per_data_byte: 4.0 / 3.0,
        low_space_percent: 10,
        session_id: 1,
    }
}
