//! A thin drive's reads and writes in steady state take no heap allocation per request when
//! its caller hands buffers back as the daemon does: a read's reply data and a lower read's
//! data come from the store's spare buffers (`Store::spare_buffer`, `Store::recycle`), a
//! read's lists are reused, and a write's buffer goes back to the store once its data is in
//! the log; compressors keep their state (the LZ4 encoder its hash table, zstd its context).
//! What is left is per record (a record holds many blocks), not per request.
//! One test in this file: the counter is the whole process's.

use tessera_sim::closed_loop::{CountingAllocator, allocations, assert_counting};
use tessera_sim::prng::Rng;
use tessera_thin::{Compression, Config, HostOp, Output, Store};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const BLOCK_BYTES: u64 = 4096;
const LOGICAL_BYTES: u64 = 64 << 20;
/// Room enough that the measured writes do not wrap the log: cleaning, which allocates per
/// segment it reads, is not what this test measures.
const EXTENT_BYTES: u64 = 256 << 20;
const WARM_UP_REQUESTS: u64 = 4_000;
const MEASURED_REQUESTS: u64 = 8_000;

/// A store over a flat image that completes every lower command at once, handing buffers
/// back and forth as the daemon does.
struct Drive {
    store: Store,
    image: Vec<u8>,
    next_id: u64,
    now_us: u64,
}

impl Drive {
    fn new(compression: Compression) -> Drive {
        let store = Store::create(Config {
            store_id: 0x7a11,
            logical_bytes: LOGICAL_BYTES,
            extent_bytes: EXTENT_BYTES,
            stripe_bytes: 4 * 65536,
            compression,
            repair_sources: 1,
            member_bytes_per_data_byte: 1.25,
            low_space_percent: 10,
            session_id: 1,
        })
        .expect("store");
        let mut drive = Drive {
            store,
            image: vec![0; EXTENT_BYTES as usize],
            next_id: 1,
            now_us: 0,
        };
        drive.settle();
        assert!(drive.store.is_ready());
        drive
    }

    /// Carries out the store's output until it has none; returns the replies seen. Time
    /// stands still: under load records are sealed when full, not on their deadline.
    fn run(&mut self) -> u64 {
        let mut replies = 0;
        while let Some(output) = self.store.poll() {
            match output {
                Output::Reply(reply) => {
                    replies += 1;
                    match reply.result {
                        Ok(Some(data)) => self.store.recycle(data),
                        Ok(None) => {}
                        Err(error) => panic!("request {} failed: {error}", reply.id),
                    }
                }
                Output::Event(_) => {}
                Output::Lower(command) => {
                    let result = match command.op.read_range() {
                        Some((offset_bytes, len_bytes)) => {
                            let mut data = self.store.spare_buffer();
                            data.extend_from_slice(
                                &self.image[offset_bytes as usize..][..len_bytes as usize],
                            );
                            Some(data)
                        }
                        None => command.op.apply_to(&mut self.image),
                    };
                    self.store.lower_done(command.id, Ok(result));
                }
            }
        }
        replies
    }

    /// Runs the store and its timers until it is idle.
    fn settle(&mut self) {
        loop {
            self.run();
            match self.store.next_deadline_us() {
                Some(deadline) => {
                    self.now_us = self.now_us.max(deadline);
                    self.store.tick(self.now_us);
                }
                None => return,
            }
        }
    }

    fn write(&mut self, lba: u64, fill: u64) {
        let mut data = self.store.spare_buffer();
        // Half compressible, as the daemon's benchmarks write.
        data.extend((0..BLOCK_BYTES).map(|i| {
            if i < BLOCK_BYTES / 2 {
                0
            } else {
                (i ^ fill) as u8
            }
        }));
        self.submit(HostOp::Write {
            offset_bytes: lba * BLOCK_BYTES,
            data,
            fua: false,
        });
    }

    fn submit(&mut self, op: HostOp) {
        let id = self.next_id;
        self.next_id += 1;
        self.store.submit(id, op);
    }

    /// `count` random 4 KiB requests, 32 submitted before the store is run; how many were
    /// answered.
    fn random_requests(&mut self, rng: &mut Rng, count: u64, writes: bool) -> u64 {
        let mut answered = 0;
        let blocks = LOGICAL_BYTES / BLOCK_BYTES;
        while answered < count {
            for _ in 0..32 {
                let lba = rng.below(blocks);
                if writes {
                    self.write(lba, rng.next_u64());
                } else {
                    self.submit(HostOp::Read {
                        offset_bytes: lba * BLOCK_BYTES,
                        len_bytes: BLOCK_BYTES,
                    });
                }
            }
            answered += self.run();
        }
        answered
    }
}

/// Allocations per request over `MEASURED_REQUESTS` after the warm-up.
fn allocations_per_request(drive: &mut Drive, rng: &mut Rng, writes: bool) -> f64 {
    drive.random_requests(rng, WARM_UP_REQUESTS, writes);
    let before = allocations();
    let answered = drive.random_requests(rng, MEASURED_REQUESTS, writes);
    (allocations() - before) as f64 / answered as f64
}

#[test]
fn thin_reads_and_writes_take_no_heap_allocation_per_request() {
    assert_counting();

    let mut report = Vec::new();
    for compression in [Compression::None, Compression::Zstd, Compression::Lz4] {
        let mut rng = Rng::new(11);
        let mut drive = Drive::new(compression);
        // Every block written once, so reads find stored blocks, not holes.
        for lba in 0..LOGICAL_BYTES / BLOCK_BYTES {
            drive.write(lba, lba);
            if lba % 32 == 31 {
                drive.run();
            }
        }
        drive.settle();

        let reads = allocations_per_request(&mut drive, &mut rng, false);
        let writes = allocations_per_request(&mut drive, &mut rng, true);
        report.push(format!(
            "{compression:?}: 4 KiB random reads {reads:.3}, writes {writes:.3}"
        ));
        // Before the buffers were reused a read took five (its output, its lists, the lower
        // read's data) and a write two and a half.
        assert!(
            reads < 0.05,
            "{compression:?}: a thin read allocates {reads:.3} times"
        );
        // What is left is per record (its buffer; a record holds dozens of blocks). LZ4 took
        // one more per block before its encoder kept its hash table.
        assert!(
            writes < 0.1,
            "{compression:?}: a thin write allocates {writes:.3} times"
        );
    }
    println!("allocations per request:\n{}", report.join("\n"));
}
