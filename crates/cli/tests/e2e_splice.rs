//! Host reads whose bytes are spliced from tmpfs members to the NBD socket (`plane/splice.rs`)
//! against a flat reference disk: many reads in flight at once, of sizes below and above the
//! splice threshold, crossing chunks and the edge of what was ever written (so that one
//! reply mixes pipes with zeroes the engine filled in), with simple and structured replies,
//! on an optimal group and with a member failed (pieces recovered from parity in memory).

mod daemon;
use daemon::Daemon;
use tessera_nbd::client::handshake::ClientConfig;
use tessera_nbd::{Client, NbdUri};

const MIB: u64 = 1 << 20;
const VD_BYTES: u64 = 48 * MIB;
/// Only the first part of the drive is written; the rest reads as zeroes never stored.
const WRITTEN_BYTES: u64 = 20 * MIB;

/// xorshift64: the test's data and offsets, the same on every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn connect(daemon: &Daemon, structured_replies: bool) -> Client {
    let uri: NbdUri = daemon.uri("spliced").parse().expect("uri");
    let mut config = ClientConfig::new("spliced");
    config.structured_replies = structured_replies;
    let client = Client::connect_with(&uri, config).expect("connect");
    assert_eq!(client.details().structured_replies, structured_replies);
    client
}

/// Writes random data over the written part, in pieces of random sizes.
fn fill(client: &mut Client, reference: &mut [u8], random: &mut Random) {
    let mut offset = 0u64;
    while offset < WRITTEN_BYTES {
        let len = ((random.below(256) + 1) * 4096).min(WRITTEN_BYTES - offset);
        let range = offset as usize..(offset + len) as usize;
        for byte in &mut reference[range.clone()] {
            *byte = random.next() as u8;
        }
        client
            .write_at(&reference[range], offset, false)
            .expect("write");
        offset += len;
    }
    client.flush().expect("flush");
}

/// Reads `rounds` batches of 16 random ranges in flight at once and compares every reply
/// with the reference.
fn read_and_compare(client: &mut Client, reference: &[u8], random: &mut Random, rounds: usize) {
    for _ in 0..rounds {
        let mut expected = std::collections::HashMap::new();
        for _ in 0..16 {
            // Sizes from 512 bytes to 512 KiB, sector-aligned anywhere, often near the edge
            // of the written part.
            let len = (random.below(1024) + 1) * 512;
            let offset = if random.below(4) == 0 {
                (WRITTEN_BYTES - random.below(1024) * 512).min(VD_BYTES - len)
            } else {
                random.below((VD_BYTES - len) / 512) * 512
            };
            let cookie = client.submit_read(offset, len as u32).expect("submit read");
            expected.insert(cookie, (offset as usize, len as usize));
        }
        while !expected.is_empty() {
            let completion = client.receive().expect("reply");
            let (offset, len) = expected.remove(&completion.cookie).expect("known cookie");
            assert!(
                completion.result.is_ok(),
                "read {offset}+{len}: {:?}",
                completion.result
            );
            assert!(
                completion.data == reference[offset..offset + len],
                "read {offset}+{len} differs from the reference"
            );
        }
    }
}

#[test]
fn spliced_reads_match_a_flat_reference_optimal_and_degraded() {
    let daemon = Daemon::start();
    daemon.group_with_vd("5", 5, 16 * MIB, "spliced", VD_BYTES);
    let mut reference = vec![0u8; VD_BYTES as usize];
    let mut random = Random(0x5eed_1234_abcd_0001);
    let mut client = connect(&daemon, true);
    fill(&mut client, &mut reference, &mut random);

    read_and_compare(&mut client, &reference, &mut random, 40);
    let mut simple = connect(&daemon, false);
    read_and_compare(&mut simple, &reference, &mut random, 20);
    let spliced = daemon
        .metric("tessera_nbd_spliced_bytes_total")
        .expect("the spliced-bytes counter");
    assert!(
        spliced > 8 * MIB,
        "tmpfs members splice large reads: {spliced} bytes spliced"
    );

    // One member gone: the pieces it held are recovered into the buffer, the rest spliced.
    daemon.ok(&["pd", "fail", "2"]);
    read_and_compare(&mut client, &reference, &mut random, 40);
    read_and_compare(&mut simple, &reference, &mut random, 20);
    let spliced_degraded = daemon
        .metric("tessera_nbd_spliced_bytes_total")
        .expect("the spliced-bytes counter");
    assert!(
        spliced_degraded > spliced,
        "degraded reads still splice what the survivors hold"
    );
    client.disconnect().expect("disconnect");
    simple.disconnect().expect("disconnect");
}
