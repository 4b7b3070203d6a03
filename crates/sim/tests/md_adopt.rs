//! Adopting data in place (`Engine::adopt`, used by `tessera dg import-md`): data laid out
//! as md lays it out reads back, a missing member is rebuilt with every byte copied (the
//! adopted regions are written, not "never written"), and the group assembles again.

use std::sync::Arc;
use tessera_raid::engine::{CreateSpec, Engine, EngineConfig, GroupState};
use tessera_raid::geometry::Level;
use tessera_raid::layout::adopted_layout;
use tessera_raid::superblock::{JournalMode, Uuid};
use tessera_sim::harness::Harness;

const MEMBER_BYTES: u64 = 16 << 20;
const CHUNK_BYTES: u64 = 64 << 10;

fn config() -> EngineConfig {
    EngineConfig {
        pool_bytes: 16 << 20,
        ..EngineConfig::default()
    }
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Member images holding `data` placed exactly as md places it (written through a group of
/// the same geometry and data offset), with everything before the data zeroed, as if md's
/// metadata had been there.
fn md_like_images(level: Level, members: usize, data: &[u8]) -> (Vec<Vec<u8>>, u64, u64) {
    let mut source = Harness::for_test(level, members, CHUNK_BYTES);
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        source.write(i as u64 * (1 << 20), piece).unwrap();
    }
    source.flush().unwrap();
    source.settle();
    let data_offset_bytes = source.data_offset_bytes();
    let member_data_bytes = source.engine.geometry().member_data_bytes();
    let mut images = source.members.clone();
    for image in &mut images {
        image[..data_offset_bytes as usize].fill(0);
    }
    (images, data_offset_bytes, member_data_bytes)
}

fn read_all(group: &mut Harness, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for offset in (0..len as u64).step_by(1 << 20) {
        out.extend(
            group
                .read(offset, (1 << 20).min(len as u64 - offset))
                .unwrap(),
        );
    }
    out
}

fn adopt(
    level: Level,
    images: Vec<Vec<u8>>,
    data_offset_bytes: u64,
    member_data_bytes: u64,
    missing: &[usize],
) -> Harness {
    let members = images.len();
    let layout = adopted_layout(
        level,
        members,
        CHUNK_BYTES,
        MEMBER_BYTES,
        member_data_bytes,
        data_offset_bytes,
    )
    .unwrap();
    let spec = CreateSpec {
        group_uuid: Uuid([3; 16]),
        name: "adopted".into(),
        level,
        chunk_bytes: CHUNK_BYTES,
        members: (0..members)
            .map(|i| (Uuid([i as u8 + 1; 16]), MEMBER_BYTES))
            .collect(),
        created_unix_seconds: 0,
        region_bytes: None,
        journal_bytes: None,
        journal_mode: JournalMode::AlwaysOff,
        journal_device: None,
        rebuild_rate_percent: 100,
        config: Vec::new(),
    };
    let engine = Engine::adopt(
        spec,
        layout,
        missing,
        config(),
        Arc::new(tessera_parity::Naive),
    )
    .unwrap();
    // A harness over the adopted engine and the md images.
    let mut harness = Harness::for_test(level, members, CHUNK_BYTES);
    harness.engine = engine;
    harness.members = images;
    harness.settle();
    harness
}

#[test]
fn adopted_raid5_reads_the_data_in_place() {
    let data = pattern(3 * (8 << 20));
    let (images, data_offset_bytes, member_data_bytes) = md_like_images(Level::Raid5, 4, &data);
    let mut group = adopt(
        Level::Raid5,
        images,
        data_offset_bytes,
        member_data_bytes,
        &[],
    );
    assert_eq!(group.engine.state(), GroupState::Optimal);
    let regions = group
        .engine
        .data_bytes()
        .div_ceil(group.engine.region_bytes());
    assert!((0..regions).all(|region| group.engine.is_region_written(region)));
    assert!((0..regions).all(|region| !group.engine.is_region_unsynced(region)));
    assert_eq!(read_all(&mut group, data.len()), data);

    // Assembled again from its members, the bitmap still says written.
    let images = group.members.iter().cloned().map(Some).collect();
    let mut again = Harness::assemble(images, config(), Arc::new(tessera_parity::Naive));
    assert_eq!(read_all(&mut again, data.len()), data);
}

#[test]
fn adopted_degraded_raid6_rebuilds_every_byte() {
    let data = pattern(3 * (8 << 20));
    let (images, data_offset_bytes, member_data_bytes) = md_like_images(Level::Raid6, 5, &data);
    let original_member_2 = images[2].clone();
    let mut md_images = images;
    md_images[2] = vec![0u8; MEMBER_BYTES as usize];
    let mut group = adopt(
        Level::Raid6,
        md_images,
        data_offset_bytes,
        member_data_bytes,
        &[2],
    );
    assert_eq!(group.engine.state(), GroupState::Degraded);
    assert_eq!(read_all(&mut group, data.len()), data);

    let index = group
        .engine
        .replace_member(2, Uuid([0x55; 16]), MEMBER_BYTES)
        .unwrap();
    assert_eq!(index, group.members.len());
    group.members.push(vec![0u8; MEMBER_BYTES as usize]);
    group.settle();
    assert_eq!(group.engine.state(), GroupState::Optimal);
    let data_area = data_offset_bytes as usize..(data_offset_bytes + member_data_bytes) as usize;
    assert!(
        group.members[index][data_area.clone()] == original_member_2[data_area],
        "the rebuild wrote md's data and parity of the lost member"
    );
    assert_eq!(read_all(&mut group, data.len()), data);
}
