//! Committed images of format version 1 must decode, field for field, in every later build.
//! Regenerate (only when adding a new format version, never to paper over a change):
//! `TESSERA_WRITE_FIXTURES=1 cargo test -p tessera-raid --test format_fixtures`.

use std::path::PathBuf;
use tessera_raid::bitmap;
use tessera_raid::geometry::Level;
use tessera_raid::superblock::{
    BadRange, JournalMode, MemberRecord, MemberRecordState, Superblock, Uuid,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn v1_superblock() -> Superblock {
    let member = |n: u8, role: Option<u8>, state, position| MemberRecord {
        uuid: Uuid([n; 16]),
        size_bytes: 1 << 30,
        role,
        state,
        rebuild_position_bytes: position,
        replacing: false,
    };
    Superblock {
        group_uuid: Uuid(*b"group-uuid-01234"),
        member_uuid: Uuid([2; 16]),
        generation: 42,
        created_unix_seconds: 1_790_000_000,
        level: Level::Raid6,
        member_count: 5,
        chunk_bytes: 65536,
        member_data_bytes: (1 << 30) - (5 << 20),
        data_offset_bytes: 5 << 20,
        bitmap_offset_bytes: 64 << 10,
        bitmap_slot_bytes: 4096,
        region_bytes: 3 * 65536 * 22,
        journal_offset_bytes: (64 << 10) + 8192,
        journal_bytes: 4 << 20,
        journal_mode: JournalMode::DegradeOnly,
        clean: true,
        rebuild_rate_percent: 30,
        // Fields added after version 1's first images: zero there, which reads as defaults.
        scrub_rate_percent: 0,
        rebuild_latency_target_us: 0,
        journal_covering: false,
        journal_floor_sequence: 0,
        journal_device_bytes: 0,
        name: "fixture-dg".into(),
        members: vec![
            member(1, Some(0), MemberRecordState::Active, 0),
            member(2, Some(1), MemberRecordState::Active, 0),
            member(3, Some(2), MemberRecordState::Failed, 0),
            member(4, Some(3), MemberRecordState::Active, 0),
            member(5, Some(4), MemberRecordState::Active, 0),
            member(6, Some(2), MemberRecordState::Rebuilding, 128 << 20),
        ],
        bad_ranges: vec![BadRange {
            offset_bytes: 196608,
            len_bytes: 65536,
        }],
        config: br#"{"virtual_drives":[{"name":"vd0","offset_bytes":0,"size_bytes":1048576}]}"#
            .to_vec(),
    }
}

#[test]
fn superblock_v1_decodes() {
    let path = fixture("superblock-v1.bin");
    if std::env::var("TESSERA_WRITE_FIXTURES").is_ok() {
        std::fs::write(&path, v1_superblock().encode()).unwrap();
    }
    let image = std::fs::read(&path).expect("committed fixture");
    assert_eq!(Superblock::decode(&image), Ok(v1_superblock()));
}

#[test]
fn bitmap_block_v1_decodes() {
    let path = fixture("bitmap-block-v1.bin");
    let mut written = bitmap::Bits::new(100);
    let mut dirty = bitmap::Bits::new(100);
    written.set(0, true);
    written.set(77, true);
    dirty.set(77, true);
    if std::env::var("TESSERA_WRITE_FIXTURES").is_ok() {
        let image = bitmap::encode_block(
            0x0123_4567_89ab_cdef,
            0,
            9,
            written.block_bytes(0),
            dirty.block_bytes(0),
        );
        std::fs::write(&path, image).unwrap();
    }
    let image = std::fs::read(&path).expect("committed fixture");
    let block = bitmap::decode_block(&image, 0x0123_4567_89ab_cdef, 0).expect("valid block");
    assert_eq!(block.sequence, 9);
    let mut loaded_written = bitmap::Bits::new(100);
    let mut loaded_dirty = bitmap::Bits::new(100);
    loaded_written.load_block(0, &block.written);
    loaded_dirty.load_block(0, &block.dirty);
    assert_eq!(loaded_written, written);
    assert_eq!(loaded_dirty, dirty);
}
