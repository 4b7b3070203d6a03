//! A rebuild that meets a latent sector error where redundancy is already spent, or a resync
//! after a power cut that meets one, loses only the sectors that fail, not the chunks around
//! them: the chunk is read again one sector at a time, what reads is kept (and rebuilt or
//! resynced from), and only the failing rows are recorded as lost. The reference is the data
//! the test wrote; the recorded losses are compared with the sectors the test made unreadable.

use std::sync::Arc;
use tessera_raid::engine::{EngineConfig, GroupState};
use tessera_raid::geometry::{Column, Level};
use tessera_raid::superblock::{BadRange, Uuid};
use tessera_sim::harness::Harness;

const CHUNK: u64 = 4096;
const SECTOR: u64 = 512;
const STRIPES: u64 = 4;
/// The sector of the stripe-0 chunk the test makes unreadable.
const BAD_ROW: u64 = 5;

/// Sector `s` of the group holds its number and then bytes derived from it, so a sector moved,
/// mixed or taken from parity never passes for another.
fn reference(len_bytes: u64) -> Vec<u8> {
    (0..len_bytes / SECTOR)
        .flat_map(|sector| {
            let mut bytes = sector.to_le_bytes().to_vec();
            bytes.extend((8..SECTOR).map(|i| (sector as u8).wrapping_mul(31) ^ (i as u8)));
            bytes
        })
        .collect()
}

/// A group holding `reference` in its first `STRIPES` stripes, flushed.
fn written(level: Level, members: usize) -> (Harness, Vec<u8>) {
    let mut harness = Harness::for_test(level, members, CHUNK);
    let stripe_bytes = harness.engine.geometry().data_chunks() as u64 * CHUNK;
    let data = reference(STRIPES * stripe_bytes);
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    harness.settle();
    (harness, data)
}

/// Member holding `column` of stripe 0 (first copy), and the device sector of its row `row`.
fn holder_sector(harness: &Harness, column: Column, row: u64) -> (usize, u64) {
    let geometry = harness.engine.geometry();
    let placement = match column {
        Column::Data(index) => geometry.data_placement(0, index, 0),
        Column::Parity(which) => geometry.parity_placement(0, which),
    };
    let offset = harness.data_offset_bytes() + placement.offset_bytes + row * SECTOR;
    (placement.member, offset / SECTOR)
}

/// Fails `lost`, makes `(member, device sector)` unreadable, and rebuilds `lost`'s role onto a
/// new device.
fn rebuild_with_latent_error(harness: &mut Harness, lost: usize, latent: (usize, u64)) {
    rebuild_into(harness, lost, latent, GroupState::Optimal);
}

fn rebuild_into(harness: &mut Harness, lost: usize, latent: (usize, u64), after: GroupState) {
    harness.engine.fail_member_admin(lost);
    harness.settle();
    harness.latent_errors.insert(latent);
    let size = harness.members[lost].len();
    let index = harness
        .engine
        .replace_member(lost, Uuid([0x77; 16]), size as u64)
        .expect("replace");
    assert_eq!(index, harness.members.len());
    harness.members.push(vec![0u8; size]);
    harness.settle();
    assert_eq!(harness.engine.state(), after, "the rebuild ends");
}

/// Reads every sector of `data`'s range: those in `lost` fail, all others match.
#[track_caller]
fn assert_only_lost_fail(harness: &mut Harness, data: &[u8], lost: &[BadRange], what: &str) {
    for sector in 0..data.len() as u64 / SECTOR {
        let offset = sector * SECTOR;
        let expected_lost = lost.iter().any(|range| {
            range.offset_bytes <= offset && offset < range.offset_bytes + range.len_bytes
        });
        match harness.read(offset, SECTOR) {
            Err(_) => assert!(
                expected_lost,
                "{what}: sector {sector} fails but was not lost"
            ),
            Ok(read) => {
                assert!(!expected_lost, "{what}: lost sector {sector} reads back");
                assert!(
                    read[..] == data[offset as usize..(offset + SECTOR) as usize],
                    "{what}: sector {sector} holds other data"
                );
            }
        }
    }
}

/// Checks that exactly `expected` is recorded lost and fails to read while every other sector
/// reads as written; then again without `latent_member`, whose kept sectors must now come
/// from the rebuilt member (and parity), which shows parity agrees with what is left.
#[track_caller]
fn assert_losses(harness: &mut Harness, data: &[u8], expected: &[BadRange], latent_member: usize) {
    assert_eq!(harness.engine.superblock().bad_ranges, expected);
    assert_only_lost_fail(harness, data, expected, "after the rebuild");
    harness.engine.fail_member_admin(latent_member);
    harness.settle();
    assert_only_lost_fail(harness, data, expected, "without the member with the error");
}

fn sector_range(offset_bytes: u64) -> BadRange {
    BadRange {
        offset_bytes,
        len_bytes: SECTOR,
    }
}

#[test]
fn a_degraded_raid5_rebuild_loses_only_the_row_of_a_latent_error() {
    let (mut harness, data) = written(Level::Raid5, 3);
    let (lost, _) = holder_sector(&harness, Column::Data(0), 0);
    let latent = holder_sector(&harness, Column::Data(1), BAD_ROW);
    rebuild_with_latent_error(&mut harness, lost, latent);
    // Data chunk 0 (rebuilt from parity) and data chunk 1 (unreadable) lose that row alone.
    let expected = vec![
        sector_range(BAD_ROW * SECTOR),
        sector_range(CHUNK + BAD_ROW * SECTOR),
    ];
    assert_losses(&mut harness, &data, &expected, latent.0);
}

#[test]
fn a_raid5_parity_rebuild_loses_only_the_sector_of_a_latent_error() {
    let (mut harness, data) = written(Level::Raid5, 3);
    let (lost, _) = holder_sector(&harness, Column::Parity(0), 0);
    let latent = holder_sector(&harness, Column::Data(0), BAD_ROW);
    rebuild_with_latent_error(&mut harness, lost, latent);
    let expected = vec![sector_range(BAD_ROW * SECTOR)];
    assert_losses(&mut harness, &data, &expected, latent.0);
}

#[test]
fn a_degraded_mirror_rebuild_loses_only_the_sector_of_a_latent_error() {
    for (level, members) in [(Level::Raid1, 2), (Level::Raid10, 4)] {
        let (mut harness, data) = written(level, members);
        let geometry = *harness.engine.geometry();
        let lost = geometry.data_placement(0, 0, 1).member;
        let latent = holder_sector(&harness, Column::Data(0), BAD_ROW);
        rebuild_with_latent_error(&mut harness, lost, latent);
        println!("{level:?} x{members}");
        assert_losses(
            &mut harness,
            &data,
            &[sector_range(BAD_ROW * SECTOR)],
            latent.0,
        );
    }
}

#[test]
fn a_raid6_rebuild_with_both_parities_spent_loses_only_the_row_of_a_latent_error() {
    // RAID6 of four: P's member failed first, then data chunk 0's is rebuilt. Chunk 0 comes
    // from Q and chunk 1, which has one unreadable sector.
    let (mut harness, data) = written(Level::Raid6, 4);
    let (p_member, _) = holder_sector(&harness, Column::Parity(0), 0);
    harness.engine.fail_member_admin(p_member);
    let (lost, _) = holder_sector(&harness, Column::Data(0), 0);
    let latent = holder_sector(&harness, Column::Data(1), BAD_ROW);
    rebuild_into(&mut harness, lost, latent, GroupState::Degraded);
    let expected = vec![
        sector_range(BAD_ROW * SECTOR),
        sector_range(CHUNK + BAD_ROW * SECTOR),
    ];
    assert_losses(&mut harness, &data, &expected, latent.0);
}

#[test]
fn a_resync_that_meets_a_latent_error_loses_only_its_sector_and_trusts_the_stripe() {
    // RAID5 of four, stripe 0 written and its P torn by a power cut (the region awaits
    // resync), and one unreadable sector in data chunk 1. Parity not yet resynced cannot
    // recover that sector, but it must not keep the whole region untrusted either: a later
    // member loss would then lose every chunk of that member in the region.
    let mut harness = Harness::for_test(Level::Raid5, 4, CHUNK);
    let stripe_bytes = harness.engine.geometry().data_chunks() as u64 * CHUNK;
    let data = reference(STRIPES * stripe_bytes);
    harness.write(0, &data).unwrap();
    harness.flush().unwrap();
    let (p_member, p_sector) = holder_sector(&harness, Column::Parity(0), 0);
    let at = (p_sector * SECTOR) as usize;
    harness.members[p_member][at..at + CHUNK as usize].fill(0xee);
    let images = harness.members.into_iter().map(Some).collect();
    let config = EngineConfig {
        pool_bytes: 16 << 20,
        ..EngineConfig::default()
    };
    let mut harness = Harness::assemble_unstarted(images, config, Arc::new(tessera_parity::Naive));
    let latent = holder_sector(&harness, Column::Data(1), BAD_ROW);
    harness.latent_errors.insert(latent);
    harness.settle();
    assert!(
        !harness.engine.is_region_unsynced(0),
        "the region is resynced and trusted"
    );
    let expected = [sector_range(CHUNK + BAD_ROW * SECTOR)];
    assert_eq!(harness.engine.superblock().bad_ranges, expected);
    assert_only_lost_fail(&mut harness, &data, &expected, "after the resync");
    // Parity is trusted and right: without chunk 0's member, chunk 0 comes back whole.
    let (chunk0_member, _) = holder_sector(&harness, Column::Data(0), 0);
    harness.engine.fail_member_admin(chunk0_member);
    harness.settle();
    assert_only_lost_fail(&mut harness, &data, &expected, "without chunk 0's member");
}
