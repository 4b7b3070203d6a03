//! `ReadAround`: a read that does not trust one copy of the data. Silent corruption on a
//! member (which a plain read returns as it is) is read around: parity levels reconstruct the
//! chunk from the rest of the stripe, mirrors read the other copy; nothing is rewritten.

use tessera_raid::engine::HostError;
use tessera_raid::geometry::Level;
use tessera_sim::harness::Harness;

const CHUNK: u64 = 16 << 10;

fn harness(level: Level, members: usize) -> Harness {
    Harness::for_test(level, members, CHUNK)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add((i >> 12) as u8))
        .collect()
}

/// Writes a pattern over the first stripes, corrupts copy `copy` of data chunk 1 of stripe 0
/// (chunk 0 on mirrors)
/// on its member, and returns the pattern and where (in the group) the chunk starts.
fn corrupted(level: Level, members: usize, copy: usize) -> (Harness, Vec<u8>, u64) {
    let mut harness = harness(level, members);
    let geometry = *harness.engine.geometry();
    let data = pattern(geometry.stripe_data_bytes() as usize * 3);
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    harness.settle();
    let index = 1.min(geometry.data_chunks() - 1);
    let placement = geometry.data_placement(0, index, copy);
    let offset = (harness.data_offset_bytes() + placement.offset_bytes + 100) as usize;
    harness.members[placement.member][offset] ^= 0xa5;
    // Where chunk 1 of stripe 0 is in the group's address space.
    let chunk_start = (0..geometry.stripe_data_bytes())
        .step_by(CHUNK as usize)
        .find(|&at| geometry.locate(at).1 == index)
        .expect("the chunk in stripe 0");
    (harness, data, chunk_start)
}

#[test]
fn parity_levels_reconstruct_the_chunk_a_plain_read_gets_wrong() {
    for (level, members) in [(Level::Raid5, 4), (Level::Raid6, 5), (Level::Raid6, 4)] {
        let (mut harness, data, start) = corrupted(level, members, 0);
        let range = start as usize..(start + CHUNK) as usize;
        let plain = harness.read(start, CHUNK).unwrap();
        assert!(
            plain != data[range.clone()],
            "{level:?}: the corruption is visible"
        );
        let around = harness.read_around(start, CHUNK, 0).unwrap();
        assert!(around == data[range.clone()], "{level:?}: reconstructed");
        // A range across the chunks of a clean stripe: each reconstructed from the others.
        let stripe = harness.engine.geometry().stripe_data_bytes();
        let wide = harness.read_around(stripe, stripe, 0).unwrap();
        assert!(
            wide == data[stripe as usize..2 * stripe as usize],
            "{level:?}: a whole stripe"
        );
        // Nothing was rewritten: the plain read still sees the corruption.
        assert!(
            harness.read(start, CHUNK).unwrap() == plain,
            "{level:?}: untouched"
        );
        // Over two chunks, the bad one second: reconstructing the first goes through the bad
        // one; the second version (the second chunk reconstructed) is right.
        let pair = start - CHUNK..start + CHUNK;
        let first = harness.read_around(pair.start, 2 * CHUNK, 0).unwrap();
        assert!(
            first != data[pair.start as usize..pair.end as usize],
            "{level:?}"
        );
        let second = harness.read_around(pair.start, 2 * CHUNK, 1).unwrap();
        assert!(
            second == data[pair.start as usize..pair.end as usize],
            "{level:?}: the second chunk reconstructed"
        );
        // A range touches no third chunk, and one chunk has one version to try.
        assert_eq!(
            harness.read_around(pair.start, 2 * CHUNK, 2),
            Err(HostError::Io)
        );
        assert_eq!(harness.read_around(start, CHUNK, 1), Err(HostError::Io));
    }
}

#[test]
fn mirrors_read_another_copy() {
    for (level, members) in [(Level::Raid1, 2), (Level::Raid1, 3), (Level::Raid10, 4)] {
        let (mut harness, data, start) = corrupted(level, members, 0);
        let range = start as usize..(start + CHUNK) as usize;
        assert!(
            harness.read_around(start, CHUNK, 0).unwrap() == data[range.clone()],
            "{level:?}: around the bad copy"
        );
        // Around the good copy, the bad one may be what is left to read: the caller checks.
        let copies = harness.engine.geometry().copies();
        let others: Vec<Vec<u8>> = (1..copies)
            .map(|copy| harness.read_around(start, CHUNK, copy as u8).unwrap())
            .collect();
        assert!(others.iter().all(|got| got.len() == CHUNK as usize));
        assert_eq!(
            harness.read_around(start, CHUNK, copies as u8),
            Err(HostError::Io)
        );
    }
}

#[test]
fn raid0_has_nothing_to_read_around() {
    let (mut harness, _, start) = corrupted(Level::Raid0, 3, 0);
    assert_eq!(harness.read_around(start, CHUNK, 0), Err(HostError::Io));
}
