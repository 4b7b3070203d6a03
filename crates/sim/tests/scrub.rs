//! Scrub finds what silently changed on a member and, with repair, fixes it: RAID5 and mirrors
//! rewrite parity (the copies) from the data, RAID6 locates the bad chunk and corrects it.

use tessera_raid::engine::{GroupEvent, ScrubResult};
use tessera_raid::geometry::{Column, Level};
use tessera_sim::harness::Harness;

const CHUNK: u64 = 16 << 10;

fn harness(level: Level, members: usize) -> Harness {
    Harness::for_test(level, members, CHUNK)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn scrub(harness: &mut Harness, repair: bool) -> ScrubResult {
    harness.events.clear();
    harness.engine.start_scrub(repair).expect("scrub starts");
    harness.settle();
    harness
        .events
        .iter()
        .find_map(|event| match event {
            GroupEvent::ScrubFinished(result) => Some(*result),
            _ => None,
        })
        .expect("scrub finished")
}

/// Flips a byte of the given column of stripe 0 on its member's image.
fn corrupt(harness: &mut Harness, column: Column, at: u64) {
    let geometry = *harness.engine.geometry();
    let placement = match column {
        Column::Data(index) => geometry.data_placement(0, index, 0),
        Column::Parity(which) => geometry.parity_placement(0, which),
    };
    let offset = (harness.data_offset_bytes() + placement.offset_bytes + at) as usize;
    harness.members[placement.member][offset] ^= 0x5a;
}

fn written_group(level: Level, members: usize) -> (Harness, Vec<u8>) {
    let mut harness = harness(level, members);
    let stripe_bytes = harness.engine.geometry().stripe_data_bytes() as usize;
    let data = pattern(stripe_bytes * 4, 3);
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    harness.settle();
    let clean = scrub(&mut harness, false);
    assert_eq!(
        (clean.stats.mismatches, clean.stats.unrecoverable),
        (0, 0),
        "a fresh group scrubs clean"
    );
    assert!(clean.stats.stripes_checked >= 4 && clean.completed);
    (harness, data)
}

#[test]
fn raid5_parity_mismatch_is_found_and_parity_rewritten() {
    let (mut harness, data) = written_group(Level::Raid5, 4);
    corrupt(&mut harness, Column::Parity(0), 100);
    let check = scrub(&mut harness, false);
    assert_eq!(check.stats.mismatches, 1);
    assert_eq!(check.stats.repaired, 0, "check mode changes nothing");
    assert_eq!(
        scrub(&mut harness, false).stats.mismatches,
        1,
        "still there"
    );
    let repair = scrub(&mut harness, true);
    assert_eq!((repair.stats.mismatches, repair.stats.repaired), (1, 1));
    assert_eq!(scrub(&mut harness, false).stats.mismatches, 0);
    assert_eq!(harness.read(0, data.len() as u64).unwrap(), data);
}

#[test]
fn raid6_locates_and_corrects_a_bad_data_chunk() {
    let (mut harness, data) = written_group(Level::Raid6, 6);
    corrupt(&mut harness, Column::Data(2), 4000);
    corrupt(&mut harness, Column::Data(2), 4001);
    let check = scrub(&mut harness, false);
    assert_eq!((check.stats.mismatches, check.stats.unrecoverable), (1, 0));
    let mut corrupted = data.clone();
    let at = 2 * CHUNK as usize + 4000;
    corrupted[at] ^= 0x5a;
    corrupted[at + 1] ^= 0x5a;
    assert_eq!(
        harness.read(0, data.len() as u64).unwrap(),
        corrupted,
        "reads return what the member holds"
    );
    let repair = scrub(&mut harness, true);
    assert_eq!(repair.stats.repaired, 1);
    assert_eq!(
        harness.read(0, data.len() as u64).unwrap(),
        data,
        "the located chunk was corrected"
    );
    assert_eq!(scrub(&mut harness, false).stats.mismatches, 0);
}

#[test]
fn raid6_bad_q_and_two_bad_chunks() {
    let (mut harness, data) = written_group(Level::Raid6, 5);
    corrupt(&mut harness, Column::Parity(1), 7);
    let repair = scrub(&mut harness, true);
    assert_eq!(
        (
            repair.stats.mismatches,
            repair.stats.repaired,
            repair.stats.unrecoverable
        ),
        (1, 1, 0)
    );
    assert_eq!(harness.read(0, data.len() as u64).unwrap(), data);
    corrupt(&mut harness, Column::Data(0), 9);
    corrupt(&mut harness, Column::Data(1), 10);
    let check = scrub(&mut harness, false);
    assert_eq!(
        (check.stats.mismatches, check.stats.unrecoverable),
        (1, 1),
        "two bad chunks cannot be located"
    );
}

#[test]
fn mirror_copies_that_disagree_are_rewritten_from_the_first() {
    let (mut harness, data) = written_group(Level::Raid1, 3);
    corrupt(&mut harness, Column::Data(0), 123);
    // Copy 0 is the one corrupted here: mirrors trust the first copy, so repair propagates it.
    let repair = scrub(&mut harness, true);
    assert_eq!((repair.stats.mismatches, repair.stats.repaired), (1, 1));
    assert_eq!(scrub(&mut harness, false).stats.mismatches, 0);
    let mut expected = data.clone();
    expected[123] ^= 0x5a;
    assert_eq!(harness.read(0, data.len() as u64).unwrap(), expected);
}

#[test]
fn scrub_repairs_latent_read_errors_on_the_way() {
    for (level, members) in [(Level::Raid5, 4), (Level::Raid6, 5), (Level::Raid10, 4)] {
        let (mut harness, data) = written_group(level, members);
        let geometry = *harness.engine.geometry();
        let placement = geometry.data_placement(1, 0, 0);
        let sector = (harness.data_offset_bytes() + placement.offset_bytes) / 512 + 3;
        harness.latent_errors.insert((placement.member, sector));
        let result = scrub(&mut harness, false);
        assert_eq!(result.stats.read_errors_repaired, 1, "{level}");
        assert!(
            harness.latent_errors.is_empty(),
            "{level}: the unreadable sector was rewritten"
        );
        assert_eq!(harness.read(0, data.len() as u64).unwrap(), data, "{level}");
        assert_eq!(scrub(&mut harness, false).stats.mismatches, 0, "{level}");
    }
}
