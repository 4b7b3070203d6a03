//! Write amplification of the thin store under uniform random 4 KiB overwrites, without a
//! daemon: a store over an in-memory group is filled sequentially until its data takes
//! `--fill` of the physical space, then overwritten at random; member bytes (records with
//! RAID5 4+1 parity, cleaning and checkpoints included) over host bytes of the random phase
//! are printed. The policy figures of cleaning can be compared in seconds this way; the
//! end-to-end figure is `bench/thin.py`'s.
//!
//! `cargo run --release -p tessera-thin --example write_amplification -- [--physical-mib N]
//! [--fill F] [--overwrite X] [--incompressible]`

use tessera_thin::{Compression, Config, HostOp, Output, Store};

const BLOCK: usize = 4096;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Completes every command at once, in order; panics on a failed host request (a store that
/// refuses writes for lack of space would make any figure meaningless).
fn run(store: &mut Store, image: &mut [u8]) -> u64 {
    let mut replies = 0;
    while let Some(output) = store.poll() {
        if let Output::Reply(reply) = &output {
            assert!(
                reply.result.is_ok(),
                "request {} failed: {:?}",
                reply.id,
                reply.result
            );
            replies += 1;
        }
        if let Output::Lower(command) = output {
            let result = command.op.apply_to(image);
            store.lower_done(command.id, Ok(result));
        }
    }
    replies
}

/// A block that LZ4 halves (random first half, zero second half), or incompressible.
fn block(rng: &mut Rng, compressible: bool) -> Vec<u8> {
    let random_bytes = if compressible { BLOCK / 2 } else { BLOCK };
    let mut data = vec![0u8; BLOCK];
    for chunk in data[..random_bytes].chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes()[..chunk.len()]);
    }
    data
}

fn main() {
    let mut physical_mib = 256u64;
    let mut fill = 0.7f64;
    let mut overwrite = 3.0f64;
    let mut compressible = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().expect("a value");
        match arg.as_str() {
            "--physical-mib" => physical_mib = value().parse().expect("MiB"),
            "--fill" => fill = value().parse().expect("a share"),
            "--overwrite" => overwrite = value().parse().expect("times the data"),
            "--incompressible" => compressible = false,
            other => panic!("unknown option {other}"),
        }
    }
    let extent_bytes = physical_mib << 20;
    let ratio = if compressible { 2.0 } else { 1.0 };
    let logical_bytes = ((extent_bytes as f64 * fill * ratio) as u64) / BLOCK as u64 * BLOCK as u64;
    let mut image = vec![0u8; extent_bytes as usize];
    let mut store = Store::create(Config {
        store_id: 7,
        logical_bytes,
        extent_bytes,
        stripe_bytes: 4 * 65536,
        compression: Compression::Lz4,
        repair_sources: 1,
        member_bytes_per_data_byte: 5.0 / 4.0,
        low_space_percent: 10,
        session_id: 1,
    })
    .expect("store");
    assert_eq!(run(&mut store, &mut image), 0);
    let mut rng = Rng(0x5eed);
    let blocks = logical_bytes / BLOCK as u64;
    let mut id = 0;
    let mut write = |store: &mut Store, image: &mut [u8], lba: u64, rng: &mut Rng| {
        id += 1;
        store.submit(
            id,
            HostOp::Write {
                offset_bytes: lba * BLOCK as u64,
                data: block(rng, compressible),
                fua: false,
            },
        );
        assert_eq!(run(store, image), 1, "write {id} was not answered at once");
    };
    for lba in 0..blocks {
        write(&mut store, &mut image, lba, &mut rng);
    }
    let before = store.stats();
    let writes = (blocks as f64 * overwrite) as u64;
    for _ in 0..writes {
        let lba = rng.next() % blocks;
        write(&mut store, &mut image, lba, &mut rng);
    }
    let after = store.stats();
    let host = after.host_bytes_written - before.host_bytes_written;
    let member = after.member_bytes_written - before.member_bytes_written;
    let cleaning = after.cleaning_bytes - before.cleaning_bytes;
    println!(
        "physical {physical_mib} MiB, filled {:.0}% ({} MiB logical, compression {:.2}), {writes} random 4 KiB writes",
        100.0 * after.stored_bytes as f64 / after.physical_bytes as f64,
        logical_bytes >> 20,
        after.compression_ratio
    );
    println!(
        "write amplification {:.3} (member / host bytes); cleaning moved {:.2}x the host bytes; no-cleaning bound {:.3}",
        member as f64 / host as f64,
        cleaning as f64 / host as f64,
        1.25 / after.compression_ratio
    );
    let lower = after.lower_bytes_written - before.lower_bytes_written;
    println!(
        "record bytes / host: {:.3} = stored data {:.3} + cleaning {:.3} + checkpoints and padding {:.3}; {} checkpoints",
        lower as f64 / host as f64,
        1.0 / after.compression_ratio,
        cleaning as f64 / host as f64,
        (lower - cleaning) as f64 / host as f64 - 1.0 / after.compression_ratio,
        after.checkpoints - before.checkpoints
    );
}
