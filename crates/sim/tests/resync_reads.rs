//! After a power cut, the copies of a mirrored region awaiting resync may disagree (a write the
//! cut tore reached some of them). A read there answers with the first readable copy, the one
//! resync copies to the others, and writes that answer to the other copies before giving it:
//! losing the copy that was read must not change what a later read returns.

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
        harness.engine.fail_member_admin(primary);
        harness.drain();
        assert!(
            harness.read(0, CHUNK).unwrap() == first,
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
    harness.engine.fail_member_admin(second);
    harness.drain();
    assert!(harness.read(0, CHUNK).unwrap() == answer);
}

#[test]
fn parity_levels_read_awaiting_resync_without_writing() {
    // Parity levels read data chunks in place (data is the truth; parity is what resync fixes).
    let mut harness = assembled(torn_images(Level::Raid5, 4));
    let before = harness.members.clone();
    let answer = harness.read(0, CHUNK).unwrap();
    assert!(answer.iter().all(|&b| b == fill_of(0)));
    assert!(harness.members == before, "nothing written by the read");
    assert_eq!(harness.engine.status().counters.synced_reads, 0);
}
