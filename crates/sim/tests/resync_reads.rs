//! Reads of a region awaiting resync after a power cut. On mirrors the copies may disagree (a
//! write the cut tore reached some of them): a read answers with the first readable copy, the
//! one resync copies to the others, and writes that answer to the other copies before giving
//! it. On parity levels parity may disagree with the data: a read first resyncs its stripe.
//! Either way, losing the member that answered must not change what a later read returns.

use std::sync::Arc;
use tessera_raid::engine::EngineConfig;
use tessera_raid::geometry::Level;
use tessera_sim::harness::Harness;

const CHUNK: u64 = 16 << 10;

/// Resync never starts (a window of no stripes), so reads meet the region unsynced.
fn resync_held() -> EngineConfig {
    EngineConfig {
        pool_bytes: 16 << 20,
        resync_window: 0,
        ..EngineConfig::default()
    }
}

fn fill_of(copy: usize) -> u8 {
    0x11 * (copy as u8 + 1)
}

/// Member images of a group whose first chunk was written, taken before its dirty bit could
/// clear (as at a power cut), with copy `k` of that chunk then holding `fill_of(k)`.
fn torn_images(level: Level, members: usize) -> Vec<Option<Vec<u8>>> {
    let mut harness = Harness::for_test(level, members, CHUNK);
    harness.write(0, &vec![0x55; 4 * CHUNK as usize]).unwrap();
    harness.flush().unwrap();
    let geometry = *harness.engine.geometry();
    let data_offset = harness.data_offset_bytes();
    for copy in 0..geometry.copies() {
        let placement = geometry.data_placement(0, 0, copy);
        let at = (data_offset + placement.offset_bytes) as usize;
        harness.members[placement.member][at..at + CHUNK as usize].fill(fill_of(copy));
    }
    harness.members.into_iter().map(Some).collect()
}

fn assembled(images: Vec<Option<Vec<u8>>>) -> Harness {
    let mut harness =
        Harness::assemble_unstarted(images, resync_held(), Arc::new(tessera_parity::Naive));
    harness.drain();
    assert!(
        harness.engine.status().resync_regions_left > 0,
        "the written region awaits resync"
    );
    harness
}

/// Every copy of chunk 0 of stripe 0, as the members hold it.
fn copies_on_members(harness: &Harness) -> Vec<Vec<u8>> {
    let geometry = *harness.engine.geometry();
    let data_offset = harness.data_offset_bytes();
    (0..geometry.copies())
        .map(|copy| {
            let placement = geometry.data_placement(0, 0, copy);
            let at = (data_offset + placement.offset_bytes) as usize;
            harness.members[placement.member][at..at + CHUNK as usize].to_vec()
        })
        .collect()
}

/// The first chunk, read again once `member` is failed.
fn read_without(harness: &mut Harness, member: usize) -> Vec<u8> {
    harness.engine.fail_member_admin(member);
    harness.drain();
    harness.read(0, CHUNK).unwrap()
}

#[test]
fn a_read_awaiting_resync_survives_the_loss_of_the_copy_it_came_from() {
    for (level, members) in [(Level::Raid1, 2), (Level::Raid1, 3), (Level::Raid10, 4)] {
        let mut harness = assembled(torn_images(level, members));
        let first = harness.read(0, CHUNK).unwrap();
        assert!(
            first.iter().all(|&b| b == fill_of(0)),
            "{level:?}: the first copy answers"
        );
        assert!(
            copies_on_members(&harness)
                .iter()
                .all(|copy| *copy == first),
            "{level:?}: every copy holds the answer"
        );
        assert!(harness.engine.status().counters.synced_reads > 0);

        let primary = harness.engine.geometry().data_placement(0, 0, 0).member;
        assert!(
            read_without(&mut harness, primary) == first,
            "{level:?}: the same answer without the copy it came from"
        );
    }
}

#[test]
fn a_read_error_awaiting_resync_answers_from_the_next_copy_and_writes_it_everywhere() {
    let mut harness = assembled(torn_images(Level::Raid1, 3));
    let geometry = *harness.engine.geometry();
    let primary = geometry.data_placement(0, 0, 0);
    let sector = (harness.data_offset_bytes() + primary.offset_bytes) / 512 + 3;
    harness.latent_errors.insert((primary.member, sector));

    let answer = harness.read(0, CHUNK).unwrap();
    assert!(
        answer.iter().all(|&b| b == fill_of(1)),
        "the second copy answers (the first copy in order that reads)"
    );
    assert!(
        copies_on_members(&harness)
            .iter()
            .all(|copy| *copy == answer),
        "the answer reached every copy, the repaired one included"
    );
    assert!(
        harness.latent_errors.is_empty(),
        "the bad sector was rewritten"
    );

    let second = geometry.data_placement(0, 0, 1).member;
    assert!(read_without(&mut harness, second) == answer);
}

/// Member images of a parity-level group whose first stripe was written, taken before its
/// dirty bit could clear, with P of that stripe then garbage (a write the cut tore between
/// data and parity); and the data written.
fn torn_parity_images(level: Level, members: usize) -> (Vec<Option<Vec<u8>>>, Vec<u8>) {
    let mut harness = Harness::for_test(level, members, CHUNK);
    let geometry = *harness.engine.geometry();
    let data: Vec<u8> = (0..geometry.stripe_data_bytes() as usize * 2)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 10) as u8))
        .collect();
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    let placement = geometry.parity_placement(0, 0);
    let at = (harness.data_offset_bytes() + placement.offset_bytes) as usize;
    harness.members[placement.member][at..at + CHUNK as usize].fill(0xee);
    (harness.members.into_iter().map(Some).collect(), data)
}

/// P of stripe 0 as the members hold it, and as its data says it should be.
fn parity_on_member_and_from_data(harness: &Harness) -> (Vec<u8>, Vec<u8>) {
    let geometry = *harness.engine.geometry();
    let data_offset = harness.data_offset_bytes() as usize;
    let chunk = |placement: tessera_raid::geometry::Placement| {
        let at = data_offset + placement.offset_bytes as usize;
        harness.members[placement.member][at..at + CHUNK as usize].to_vec()
    };
    let mut expected = vec![0u8; CHUNK as usize];
    for index in 0..geometry.data_chunks() {
        for (byte, value) in expected
            .iter_mut()
            .zip(chunk(geometry.data_placement(0, index, 0)))
        {
            *byte ^= value;
        }
    }
    (chunk(geometry.parity_placement(0, 0)), expected)
}

#[test]
fn a_parity_read_awaiting_resync_resyncs_its_stripe_first() {
    for (level, members) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let (images, data) = torn_parity_images(level, members);
        let mut harness = assembled(images);
        let (on_member, from_data) = parity_on_member_and_from_data(&harness);
        assert!(on_member != from_data, "{level:?}: P starts torn");

        let first = harness.read(0, CHUNK).unwrap();
        assert!(
            first == data[..CHUNK as usize],
            "{level:?}: data read in place"
        );
        let (on_member, from_data) = parity_on_member_and_from_data(&harness);
        assert!(
            on_member == from_data,
            "{level:?}: P agrees with the data now"
        );
        let counters = harness.engine.status().counters;
        assert_eq!(counters.resynced_ahead_stripes, 1, "{level:?}");
        assert_eq!(counters.synced_reads, 0, "{level:?}: no mirror copies");

        // More reads of the stripe are plain reads: no second resync.
        let stripe = harness.engine.geometry().stripe_data_bytes();
        assert!(harness.read(CHUNK, CHUNK).unwrap() == data[CHUNK as usize..2 * CHUNK as usize]);
        assert_eq!(
            harness.engine.status().counters.resynced_ahead_stripes,
            1,
            "{level:?}"
        );

        // Losing the member that answered: the chunk is rebuilt from the stripe, now trusted.
        let holder = harness.engine.geometry().data_placement(0, 0, 0).member;
        assert!(
            read_without(&mut harness, holder) == first,
            "{level:?}: the same answer without the member it came from"
        );
        // A stripe never read stays untrusted: its lost chunk is an error, not a guess.
        let holder_chunk = (0..2 * stripe)
            .step_by(CHUNK as usize)
            .find(|&at| {
                let (row, index, _) = harness.engine.geometry().locate(at);
                row == 1 && harness.engine.geometry().data_placement(1, index, 0).member == holder
            })
            .expect("the lost member holds a chunk of stripe 1");
        assert!(harness.read(holder_chunk, CHUNK).is_err(), "{level:?}");
    }
}

#[test]
fn a_parity_stripe_missing_a_member_is_read_in_place_without_a_resync() {
    let (mut images, data) = torn_parity_images(Level::Raid5, 4);
    let geometry_probe = Harness::for_test(Level::Raid5, 4, CHUNK);
    let holder = geometry_probe
        .engine
        .geometry()
        .data_placement(0, 1, 0)
        .member;
    images[holder] = None;
    let mut harness = assembled(images);
    assert!(harness.read(0, CHUNK).unwrap() == data[..CHUNK as usize]);
    assert_eq!(harness.engine.status().counters.resynced_ahead_stripes, 0);
}

#[test]
fn a_raid6_stripe_missing_its_p_member_is_resynced_from_its_data() {
    let (mut images, data) = torn_parity_images(Level::Raid6, 5);
    let probe = Harness::for_test(Level::Raid6, 5, CHUNK);
    let geometry = *probe.engine.geometry();
    images[geometry.parity_placement(0, 0).member] = None;
    let mut harness = assembled(images);
    let first = harness.read(0, CHUNK).unwrap();
    assert!(first == data[..CHUNK as usize]);
    assert_eq!(harness.engine.status().counters.resynced_ahead_stripes, 1);
    // Q, made from the data, now answers for the chunk's member.
    let holder = geometry.data_placement(0, 0, 0).member;
    assert!(read_without(&mut harness, holder) == first);
}
