//! The seed corpus: `fuzz/corpus/<target>/seed-*`, built here from real protocol messages and
//! on-disk images, so every target starts from inputs that get past its first checks. Each seed
//! is checked to reach the deep path it was written for (a completed handshake, a decoded
//! superblock, an assembled engine, a successful API call), through the crates' own public
//! APIs rather than through the fuzz targets.
//!
//! The committed files must match what this file builds. After changing a seed, rewrite them:
//! `TESSERA_WRITE_CORPUS=1 cargo test -p tessera-fuzz-replay --test seeds`. Inputs that the
//! fuzzer found (`cargo xtask fuzz run`) live beside the seeds under other names.

use std::path::PathBuf;
use std::sync::Arc;
use tessera_api::http::{Limits, parse_response_head, read_body, read_head};
use tessera_api::testing::FakeController;
use tessera_api::{Router, serve_connection};
use tessera_nbd::client::handshake::{ClientConfig, ClientHandshake, ClientStatus};
use tessera_nbd::client::replies::{InFlight, ReplyDecoder};
use tessera_nbd::fuzzing::FuzzCatalog;
use tessera_nbd::reply::{self, Extent};
use tessera_nbd::{
    Command, CommandFlags, Errno, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeStatus,
    Request, ServerHandshake, encode_request,
};
use tessera_raid::bitmap;
use tessera_raid::engine::{DeviceProbe, Engine, EngineConfig};
use tessera_raid::geometry::Level;
use tessera_raid::layout::member_layout;
use tessera_raid::superblock::{
    BadRange, JournalMode, MemberRecord, MemberRecordState, Superblock, Uuid,
};

struct Seed {
    target: &'static str,
    name: &'static str,
    bytes: Vec<u8>,
}

fn seed(target: &'static str, name: &'static str, bytes: Vec<u8>) -> Seed {
    Seed {
        target,
        name,
        bytes,
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn all_seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    seeds.extend(server_handshake_seeds());
    seeds.extend(request_seeds());
    seeds.extend(client_reply_seeds());
    seeds.extend(superblock_seeds());
    seeds.extend(md_superblock_seeds());
    seeds.extend(bitmap_seeds());
    seeds.extend(journal_seeds());
    seeds.extend(engine_seeds());
    seeds.extend(thin_seeds());
    seeds.extend(api_http_seeds());
    seeds.extend(api_router_seeds());
    seeds
}

#[test]
fn committed_corpus_holds_every_seed() {
    let write = std::env::var_os("TESSERA_WRITE_CORPUS").is_some();
    for seed in all_seeds() {
        let path = corpus_dir(seed.target).join(format!("seed-{}", seed.name));
        if write {
            std::fs::create_dir_all(path.parent().expect("corpus directory")).unwrap();
            std::fs::write(&path, &seed.bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|error| {
            panic!(
                "{}: {error} (rewrite with TESSERA_WRITE_CORPUS=1)",
                path.display()
            )
        });
        assert!(
            committed == seed.bytes,
            "{} differs from its seed (rewrite with TESSERA_WRITE_CORPUS=1)",
            path.display()
        );
    }
}

#[test]
fn every_target_has_seeds() {
    let seeds = all_seeds();
    for target in tessera_fuzz_replay::TARGETS {
        let count = seeds
            .iter()
            .filter(|seed| seed.target == target.name)
            .count();
        assert!(count >= 3, "{} has only {count} seeds", target.name);
    }
    for seed in &seeds {
        assert!(
            tessera_fuzz_replay::target(seed.target).is_some(),
            "seed {} names no target",
            seed.name
        );
    }
}

// ----- md superblocks (dg import-md) -----

/// The 16 KiB `dg import-md` reads from 4 KiB: md's superblock, an empty bad-block log (all
/// ones, as mdadm writes it) at 8 KiB, and the device size the target takes from bytes
/// 4088..4096 (past the roles).
fn md_area(superblock: &tessera_raid::md::MdSuperblock, device_bytes: u64) -> Vec<u8> {
    let mut area = superblock.encode();
    area[4088..4096].copy_from_slice(&device_bytes.to_le_bytes());
    area.resize(8192, 0xff);
    area.resize(16384, 0);
    area
}

fn md_superblock_seeds() -> Vec<Seed> {
    use tessera_raid::md::{LAYOUT_LEFT_SYMMETRIC, LAYOUT_RAID10_NEAR2, MD_MAX_SECTOR};
    use tessera_raid::md::{MdSuperblock, ROLE_SPARE};
    use tessera_raid::md_import::{MdDevice, plan_import};
    let base = MdSuperblock {
        feature_map: tessera_raid::md::FEATURE_BAD_BLOCKS,
        set_uuid: [7; 16],
        set_name: "host:data".into(),
        ctime: 1,
        level: 5,
        layout: LAYOUT_LEFT_SYMMETRIC,
        size_sectors: 16384,
        chunk_sectors: 128,
        raid_disks: 4,
        reshape_position: 0,
        data_offset_sectors: 2048,
        data_size_sectors: 45056,
        super_offset_sectors: 8,
        recovery_offset_sectors: 0,
        dev_number: 1,
        device_uuid: [2; 16],
        bblog_offset_sectors: 8,
        bblog_size_sectors: 8,
        utime: 2,
        events: 19,
        resync_offset_sectors: MD_MAX_SECTOR,
        dev_roles: vec![0, 1, 2, 3],
    };
    let device_bytes = 24 << 20;
    let variants: Vec<(&'static str, MdSuperblock, bool)> = vec![
        ("raid5-clean", base.clone(), true),
        (
            "raid6-five",
            MdSuperblock {
                level: 6,
                raid_disks: 5,
                dev_number: 4,
                dev_roles: vec![0, 1, 2, 3, 4],
                ..base.clone()
            },
            true,
        ),
        (
            "raid1-pair",
            MdSuperblock {
                level: 1,
                layout: 0,
                chunk_sectors: 0,
                raid_disks: 2,
                dev_roles: vec![0, 1],
                ..base.clone()
            },
            true,
        ),
        (
            "raid10-near2",
            MdSuperblock {
                level: 10,
                layout: LAYOUT_RAID10_NEAR2,
                ..base.clone()
            },
            true,
        ),
        (
            "raid0-three",
            MdSuperblock {
                level: 0,
                layout: 0,
                size_sectors: 0,
                raid_disks: 3,
                dev_roles: vec![0, 1, 2],
                ..base.clone()
            },
            true,
        ),
        (
            "raid5-odd-roles",
            MdSuperblock {
                raid_disks: 3,
                dev_roles: vec![0, 1, 2],
                ..base.clone()
            },
            true,
        ),
        (
            "raid5-spare-unclean",
            MdSuperblock {
                dev_number: 3,
                resync_offset_sectors: 0,
                dev_roles: vec![0, 1, 2, ROLE_SPARE],
                ..base.clone()
            },
            false,
        ),
    ];
    variants
        .into_iter()
        .map(|(name, superblock, plannable)| {
            // Every seed decodes; the plannable ones are adopted when every role is given.
            let area = md_area(&superblock, device_bytes);
            let decoded = MdSuperblock::decode(&area).expect("seed decodes");
            assert_eq!(decoded.bad_blocks_recorded(&area), Some(false), "{name}");
            let devices: Vec<MdDevice> = (0..decoded.raid_disks)
                .map(|dev_number| MdDevice {
                    path: format!("dev{dev_number}"),
                    size_bytes: device_bytes,
                    superblock: MdSuperblock {
                        dev_number,
                        ..decoded.clone()
                    },
                })
                .collect();
            assert_eq!(plan_import(&devices).is_ok(), plannable, "{name}");
            seed("md_superblock", name, area)
        })
        .collect()
}

// ----- NBD -----

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_LIST: u32 = 3;
const OPT_PEEK_EXPORT: u32 = 4;
const OPT_STARTTLS: u32 = 5;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;
const OPT_STRUCTURED_REPLY: u32 = 8;
const OPT_LIST_META_CONTEXT: u32 = 9;
const OPT_SET_META_CONTEXT: u32 = 10;
const OPT_EXTENDED_HEADERS: u32 = 11;
/// Client flags: fixed newstyle and no zeroes.
const CLIENT_FLAGS: [u8; 4] = [0, 0, 0, 3];

fn option(code: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = b"IHAVEOPT".to_vec();
    bytes.extend_from_slice(&code.to_be_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The payload of `NBD_OPT_GO` / `NBD_OPT_INFO`.
fn go_payload(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut bytes = (name.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for info in infos {
        bytes.extend_from_slice(&info.to_be_bytes());
    }
    bytes
}

/// The payload of `NBD_OPT_SET_META_CONTEXT` / `NBD_OPT_LIST_META_CONTEXT`.
fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut bytes = (name.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for query in queries {
        bytes.extend_from_slice(&(query.len() as u32).to_be_bytes());
        bytes.extend_from_slice(query.as_bytes());
    }
    bytes
}

fn request(
    command: Command,
    flags: CommandFlags,
    cookie: u64,
    offset: u64,
    length: u32,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_request(
        &Request {
            flags,
            command,
            cookie,
            offset_bytes: offset,
            length_bytes: length,
        },
        &mut bytes,
    );
    if command == Command::Write {
        bytes.resize(bytes.len() + length as usize, 0xab);
    }
    bytes
}

/// A session's worth of ordinary requests; `structured` adds those that need structured
/// replies and a metadata context.
fn typical_requests(structured: bool) -> Vec<u8> {
    let none = CommandFlags::NONE;
    let mut bytes = [
        request(Command::Read, none, 1, 0, 4096),
        request(Command::Write, none, 2, 4096, 4096),
        request(Command::Write, CommandFlags::FUA, 3, 1 << 20, 512),
        request(Command::Flush, none, 4, 0, 0),
        request(Command::Trim, none, 5, 8192, 65536),
        request(Command::WriteZeroes, CommandFlags::NO_HOLE, 6, 0, 1 << 20),
        request(Command::Cache, none, 7, 0, 4096),
        request(Command::Read, none, 8, (1 << 30) - 4096, 4096),
    ]
    .concat();
    if structured {
        bytes.extend(request(
            Command::BlockStatus,
            CommandFlags::REQ_ONE,
            9,
            0,
            1 << 20,
        ));
        bytes.extend(request(Command::Read, CommandFlags::DF, 10, 0, 65536));
        bytes.extend(request(
            Command::WriteZeroes,
            CommandFlags::FAST_ZERO,
            11,
            0,
            4096,
        ));
    }
    bytes.extend(request(Command::Disc, none, 12, 0, 0));
    bytes
}

/// (name, piece size selector, client bytes, whether the handshake completes)
fn server_handshake_cases() -> Vec<(&'static str, u8, Vec<u8>, bool)> {
    let flags = CLIENT_FLAGS.to_vec();
    vec![
        (
            "go-structured-meta",
            30,
            [
                flags.clone(),
                option(OPT_STRUCTURED_REPLY, &[]),
                option(
                    OPT_SET_META_CONTEXT,
                    &meta_payload("disk", &["base:allocation"]),
                ),
                option(OPT_GO, &go_payload("disk", &[3, 1, 2])),
                typical_requests(true),
            ]
            .concat(),
            true,
        ),
        (
            "go-default-export",
            0,
            [
                vec![0, 0, 0, 1],
                option(OPT_GO, &go_payload("", &[])),
                typical_requests(false),
            ]
            .concat(),
            true,
        ),
        (
            "export-name",
            7,
            [
                flags.clone(),
                option(OPT_EXPORT_NAME, b"disk"),
                typical_requests(false),
            ]
            .concat(),
            true,
        ),
        (
            "export-name-not-fixed-newstyle",
            12,
            [vec![0, 0, 0, 0], option(OPT_EXPORT_NAME, b"disk")].concat(),
            true,
        ),
        (
            "option-tour-then-abort",
            30,
            [
                flags.clone(),
                option(OPT_LIST, &[]),
                option(OPT_INFO, &go_payload("disk", &[0, 1, 2, 3])),
                option(OPT_LIST_META_CONTEXT, &meta_payload("disk", &["base:"])),
                option(OPT_PEEK_EXPORT, &[]),
                option(OPT_EXTENDED_HEADERS, &[]),
                option(42, b"unknown option"),
                option(OPT_GO, &go_payload("no-such-export", &[])),
                option(OPT_ABORT, &[]),
            ]
            .concat(),
            false,
        ),
        (
            // The fuzz entry point's server has TLS disabled: STARTTLS is refused, and so is
            // the export that needs TLS.
            "starttls-refused",
            30,
            [
                flags.clone(),
                option(OPT_STARTTLS, &[]),
                option(OPT_STRUCTURED_REPLY, &[]),
                option(OPT_GO, &go_payload("secret", &[])),
                option(OPT_GO, &go_payload("disk", &[])),
                typical_requests(false),
            ]
            .concat(),
            true,
        ),
        (
            "tls-required-then-read-only",
            3,
            [
                flags.clone(),
                option(OPT_GO, &go_payload("secret", &[])),
                option(OPT_GO, &go_payload("ro", &[3])),
                request(Command::Write, CommandFlags::NONE, 1, 0, 4096),
                request(Command::Read, CommandFlags::NONE, 2, 0, 4096),
            ]
            .concat(),
            true,
        ),
        (
            "unknown-client-flags",
            30,
            [
                vec![0x80, 0, 0, 3],
                option(OPT_GO, &go_payload("disk", &[])),
            ]
            .concat(),
            false,
        ),
    ]
}

fn server_handshake_seeds() -> Vec<Seed> {
    server_handshake_cases()
        .into_iter()
        .map(|(name, split, client, _)| {
            seed("nbd_server_handshake", name, [vec![split], client].concat())
        })
        .collect()
}

/// Feeds client bytes to a server handshake; returns whether it reached the transmission phase.
fn server_handshake_completes(mut client: &[u8]) -> bool {
    let mut server = ServerHandshake::new(HandshakeConfig::default());
    loop {
        match server.receive(client, &FuzzCatalog) {
            Ok((_, HandshakeStatus::Done(_))) => return true,
            Ok((consumed, HandshakeStatus::StartTls)) => {
                server.tls_started();
                client = &client[consumed..];
            }
            Ok(_) | Err(_) => return false,
        }
    }
}

#[test]
fn server_handshake_seeds_get_where_they_should() {
    for (name, _, client, completes) in server_handshake_cases() {
        assert_eq!(server_handshake_completes(&client), completes, "{name}");
    }
}

/// Requests after the fixed handshake of `tessera_nbd::fuzzing::decode_requests` (the default
/// export, 1 GiB, simple replies).
fn request_cases() -> Vec<(&'static str, Vec<u8>)> {
    let none = CommandFlags::NONE;
    vec![
        ("typical", typical_requests(false)),
        (
            "edges",
            [
                request(Command::Read, none, 1, (1 << 30) - 4096, 4096),
                request(Command::Read, none, 2, 1 << 30, 4096),
                request(Command::Read, none, 3, 0, 0),
                request(Command::Read, none, 4, 0, (32 << 20) + 1),
                request(Command::Read, none, 5, 1, 511),
                request(Command::Unknown(42), none, 6, 0, 4096),
                request(Command::Read, CommandFlags(1 << 15), 7, 0, 4096),
                request(Command::BlockStatus, none, 8, 0, 4096),
                request(Command::Read, CommandFlags::DF, 9, 0, 4096),
                request(Command::Write, CommandFlags::FUA, 10, u64::MAX - 511, 512),
            ]
            .concat(),
        ),
        (
            "large-write",
            request(Command::Write, none, 1, 1 << 20, 65536),
        ),
        (
            "disconnect-then-garbage",
            [
                request(Command::Disc, none, 1, 0, 0),
                b"garbage after the disconnect".to_vec(),
            ]
            .concat(),
        ),
    ]
}

fn request_seeds() -> Vec<Seed> {
    request_cases()
        .into_iter()
        .map(|(name, bytes)| seed("nbd_requests", name, bytes))
        .collect()
}

#[test]
fn request_seeds_start_with_a_request() {
    for (name, bytes) in request_cases() {
        let decoded = tessera_nbd::decode_request(&bytes);
        assert!(matches!(decoded, Ok(Some(_))), "{name}: {decoded:?}");
    }
}

/// What a server says to a client that asks for `export` with structured replies (the
/// configuration of `tessera_nbd::fuzzing::client_replies`), obtained by running the two
/// handshakes against each other.
fn server_side_of_handshake(catalog: &dyn ExportCatalog) -> Vec<u8> {
    let mut client = ClientHandshake::new(ClientConfig::new("disk"));
    let mut server = ServerHandshake::new(HandshakeConfig::default());
    let mut server_bytes = Vec::new();
    for _ in 0..16 {
        let mut to_client = Vec::new();
        server.take_output(&mut to_client);
        server_bytes.extend_from_slice(&to_client);
        match client.receive(&to_client) {
            Ok((_, ClientStatus::Done(_))) | Err(_) => return server_bytes,
            Ok((_, ClientStatus::Continue)) => {}
        }
        let mut to_server = Vec::new();
        client.take_output(&mut to_server);
        match server.receive(&to_server, catalog) {
            Ok((_, HandshakeStatus::Continue)) => {}
            _ => {
                let mut rest = Vec::new();
                server.take_output(&mut rest);
                server_bytes.extend_from_slice(&rest);
                return server_bytes;
            }
        }
    }
    panic!("the handshakes did not finish");
}

/// A catalog without the export the client asks for.
struct EmptyCatalog;

impl ExportCatalog for EmptyCatalog {
    fn lookup(&self, _name: &str) -> Option<ExportInfo> {
        None
    }

    fn list(&self) -> Vec<String> {
        Vec::new()
    }
}

/// (name, server bytes, whether the handshake completes). The requests in flight are those of
/// `tessera_nbd::fuzzing::client_replies`: cookie 0 READ 4096 at 0, 1 WRITE, 2 BLOCK_STATUS,
/// 3 READ 4096 at 12288.
fn client_reply_cases() -> Vec<(&'static str, Vec<u8>, bool)> {
    let handshake = server_side_of_handshake(&FuzzCatalog);
    let data = vec![0x5a; 4096];
    let mut structured = handshake.clone();
    reply::encode_offset_data_header(&mut structured, 0, 0, 4096, true);
    structured.extend_from_slice(&data);
    reply::encode_simple_reply(&mut structured, 1, None);
    let extents = [
        Extent {
            length_bytes: 4096,
            flags: 0,
        },
        Extent {
            length_bytes: 8192,
            flags: 3,
        },
    ];
    reply::encode_block_status(&mut structured, 2, 1, &extents, false);
    reply::encode_none(&mut structured, 2);
    reply::encode_offset_hole(&mut structured, 3, 12288, 4096, true);

    let mut simple = handshake.clone();
    reply::encode_simple_reply(&mut simple, 0, None);
    simple.extend_from_slice(&data);
    reply::encode_simple_reply(&mut simple, 1, None);
    reply::encode_simple_reply(&mut simple, 2, Some(Errno::Inval));
    reply::encode_simple_reply(&mut simple, 3, None);
    simple.extend_from_slice(&data);

    let mut errors = handshake.clone();
    reply::encode_error(&mut errors, 0, Errno::Io, "member read failed", true);
    reply::encode_command_reply(&mut errors, 1, true, Err((Errno::NoSpc, "full")));
    reply::encode_error_offset(&mut errors, 3, Errno::Io, "bad range", 12288, true);

    let mut split = handshake.clone();
    reply::encode_offset_data_header(&mut split, 0, 2048, 2048, false);
    split.extend_from_slice(&data[..2048]);
    reply::encode_offset_data_header(&mut split, 0, 0, 2048, true);
    split.extend_from_slice(&data[..2048]);
    reply::encode_offset_hole(&mut split, 3, 12288, 2048, false);
    reply::encode_offset_data_header(&mut split, 3, 14336, 2048, true);
    split.extend_from_slice(&data[..2048]);

    vec![
        ("structured-replies", structured, true),
        ("simple-replies", simple, true),
        ("error-chunks", errors, true),
        ("split-reads", split, true),
        (
            "export-refused",
            server_side_of_handshake(&EmptyCatalog),
            false,
        ),
    ]
}

fn client_reply_seeds() -> Vec<Seed> {
    client_reply_cases()
        .into_iter()
        .map(|(name, bytes, _)| seed("nbd_client_replies", name, bytes))
        .collect()
}

/// How many reply events a decoder yields for the requests in flight before it stops.
fn reply_events(structured: bool, mut rest: &[u8]) -> usize {
    let mut decoder = ReplyDecoder::new(structured);
    for (cookie, command, offset_bytes) in [
        (0, Command::Read, 0),
        (1, Command::Write, 4096),
        (2, Command::BlockStatus, 8192),
        (3, Command::Read, 12288),
    ] {
        decoder.expect(
            cookie,
            InFlight {
                command,
                offset_bytes,
                length_bytes: 4096,
            },
        );
    }
    let mut events = 0;
    while let Ok((used, Some(_))) = decoder.decode(rest) {
        rest = &rest[used..];
        events += 1;
    }
    events
}

#[test]
fn client_reply_seeds_complete_the_handshake_and_decode_replies() {
    for (name, bytes, completes) in client_reply_cases() {
        let mut client = ClientHandshake::new(ClientConfig::new("disk"));
        let outcome = client.receive(&bytes);
        let Ok((consumed, ClientStatus::Done(details))) = outcome else {
            assert!(!completes, "{name}: {outcome:?}");
            continue;
        };
        assert!(completes, "{name}");
        assert!(details.structured_replies, "{name}");
        // The fuzz entry point decodes the replies both ways; each seed is meant for one.
        let events = [false, true]
            .map(|structured| reply_events(structured, &bytes[consumed..]))
            .into_iter()
            .max()
            .unwrap_or(0);
        assert!(events >= 3, "{name}: only {events} reply events decoded");
    }
}

// ----- on-disk metadata -----

fn member_uuid(index: usize) -> Uuid {
    Uuid([0x10 + index as u8; 16])
}

fn fixture_superblock_image() -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../raid/tests/fixtures/superblock-v1.bin"),
    )
    .expect("the committed format fixture")
}

/// A consistent superblock of a group of `members` members of 64 MiB, as member 0 holds it,
/// every member active in its role. Fields not set here come from the format fixture, so
/// fields added to the format later get their fixture values.
fn group_superblock(level: Level, members: usize, chunk_bytes: u64) -> Superblock {
    let member_bytes = 64 << 20;
    let layout = member_layout(
        level,
        members,
        chunk_bytes,
        member_bytes,
        None,
        Some(256 << 10),
    )
    .expect("seed layout");
    let fixture = Superblock::decode(&fixture_superblock_image()).expect("the fixture decodes");
    Superblock {
        group_uuid: Uuid(*b"fuzz-seed-group!"),
        member_uuid: member_uuid(0),
        generation: 9,
        level,
        member_count: members as u8,
        chunk_bytes: chunk_bytes as u32,
        member_data_bytes: layout.geometry.member_data_bytes(),
        data_offset_bytes: layout.data_offset_bytes,
        bitmap_offset_bytes: layout.bitmap_offset_bytes,
        bitmap_slot_bytes: layout.bitmap_slot_bytes,
        region_bytes: layout.region_bytes,
        journal_offset_bytes: layout.journal_offset_bytes,
        journal_bytes: layout.journal_bytes,
        journal_mode: JournalMode::DegradeOnly,
        clean: true,
        name: format!("seed-{}", level.number()),
        members: (0..members)
            .map(|role| MemberRecord {
                uuid: member_uuid(role),
                size_bytes: member_bytes,
                role: Some(role as u8),
                state: MemberRecordState::Active,
                rebuild_position_bytes: 0,
                replacing: false,
            })
            .collect(),
        bad_ranges: Vec::new(),
        config: br#"{"virtual_drives":[{"name":"vd0","offset_bytes":0,"size_bytes":4194304}]}"#
            .to_vec(),
        ..fixture
    }
}

/// Superblocks of every level, some degraded, rebuilding, unclean or with spares and bad ranges.
fn superblock_cases() -> Vec<(&'static str, Superblock)> {
    let raid0 = group_superblock(Level::Raid0, 2, 65536);
    let raid1 = group_superblock(Level::Raid1, 2, 65536);
    let raid10 = group_superblock(Level::Raid10, 4, 16384);
    let mut raid5 = group_superblock(Level::Raid5, 3, 65536);
    raid5.clean = false;
    raid5.members[2].state = MemberRecordState::Failed;
    let mut raid6 = group_superblock(Level::Raid6, 6, 4096);
    raid6.members[1].state = MemberRecordState::Failed;
    raid6.members.push(MemberRecord {
        uuid: member_uuid(6),
        size_bytes: 64 << 20,
        role: Some(1),
        state: MemberRecordState::Rebuilding,
        rebuild_position_bytes: 1 << 20,
        replacing: false,
    });
    raid6.members.push(MemberRecord {
        uuid: member_uuid(7),
        size_bytes: 128 << 20,
        role: None,
        state: MemberRecordState::Spare,
        rebuild_position_bytes: 0,
        replacing: false,
    });
    raid6.bad_ranges = vec![
        BadRange {
            offset_bytes: 0,
            len_bytes: 4096,
        },
        BadRange {
            offset_bytes: 1 << 20,
            len_bytes: 65536,
        },
    ];
    raid6.journal_mode = JournalMode::AlwaysOn;
    let mut wide = group_superblock(Level::Raid6, 32, 4096);
    for spare in 32..40 {
        wide.members.push(MemberRecord {
            uuid: member_uuid(spare),
            size_bytes: 64 << 20,
            role: None,
            state: MemberRecordState::Spare,
            rebuild_position_bytes: 0,
            replacing: false,
        });
    }
    wide.config = Vec::new();
    vec![
        ("raid0", raid0),
        ("raid1", raid1),
        ("raid10", raid10),
        ("raid5-degraded-unclean", raid5),
        ("raid6-rebuilding-spare-bad-ranges", raid6),
        ("raid6-32-members-8-spares", wide),
    ]
}

fn superblock_seeds() -> Vec<Seed> {
    let mut seeds = vec![seed("superblock", "fixture-v1", fixture_superblock_image())];
    seeds.extend(
        superblock_cases()
            .into_iter()
            .map(|(name, superblock)| seed("superblock", name, superblock.encode())),
    );
    seeds
}

#[test]
fn superblock_seeds_decode() {
    for seed in superblock_seeds() {
        let decoded = Superblock::decode(&seed.bytes);
        assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
    }
}

/// The bitmap key (group tag, block index) followed by a block.
fn keyed_block(group_tag: u64, index: u32, block: &[u8]) -> Vec<u8> {
    let mut bytes = group_tag.to_le_bytes().to_vec();
    bytes.extend_from_slice(&index.to_le_bytes());
    bytes.extend_from_slice(block);
    bytes
}

fn bitmap_seeds() -> Vec<Seed> {
    let tag = 0x0123_4567_89ab_cdef;
    let mut written = bitmap::Bits::new(20_000);
    let mut dirty = bitmap::Bits::new(20_000);
    for region in [0, 1, 77, 8191, 16_255] {
        written.set(region, true);
    }
    dirty.set(77, true);
    let full = vec![0xff; 2032];
    vec![
        seed(
            "bitmap_block",
            "block-0",
            keyed_block(
                tag,
                0,
                &bitmap::encode_block(tag, 0, 5, written.block_bytes(0), dirty.block_bytes(0)),
            ),
        ),
        seed(
            "bitmap_block",
            "block-1-short",
            keyed_block(
                tag,
                1,
                &bitmap::encode_block(tag, 1, u64::MAX, written.block_bytes(1), &[]),
            ),
        ),
        seed(
            "bitmap_block",
            "all-written-all-dirty",
            keyed_block(7, 3, &bitmap::encode_block(7, 3, 1, &full, &full)),
        ),
        seed(
            "bitmap_block",
            "empty",
            keyed_block(0, 0, &bitmap::encode_block(0, 0, 0, &[], &[])),
        ),
    ]
}

#[test]
fn bitmap_seeds_decode() {
    for seed in bitmap_seeds() {
        let tag = u64::from_le_bytes(seed.bytes[..8].try_into().unwrap());
        let index = u32::from_le_bytes(seed.bytes[8..12].try_into().unwrap());
        let decoded = bitmap::decode_block(&seed.bytes[12..], tag, index);
        assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
    }
}

// ----- journal batches -----

fn journal_seeds() -> Vec<Seed> {
    use tessera_raid::geometry::Column;
    use tessera_raid::journal::{self, EntryDescriptor, EntryKind, WriteDescriptor};
    let group = tessera_raid::superblock::Uuid([0x5a; 16]);
    let encode_as = |piece: bool, sequence: u64, entries: &[EntryDescriptor]| {
        let mut out = vec![0u8; journal::batch_bytes(entries) as usize];
        journal::encode_batch(
            &mut out,
            group,
            sequence,
            sequence / 2,
            piece,
            entries,
            |e, w, b| {
                b.fill(u8::try_from(e * 16 + w + 1).expect("small"));
            },
        );
        out
    };
    let encode = |sequence: u64, entries: &[EntryDescriptor]| encode_as(false, sequence, entries);
    let redo = EntryDescriptor {
        kind: EntryKind::Redo,
        stripe: 7,
        writes: vec![
            WriteDescriptor {
                column: Column::Data(1),
                within_bytes: 512,
                len_bytes: 1024,
            },
            WriteDescriptor {
                column: Column::Parity(0),
                within_bytes: 512,
                len_bytes: 1024,
            },
            WriteDescriptor {
                column: Column::Parity(1),
                within_bytes: 512,
                len_bytes: 1024,
            },
        ]
        .into(),
    };
    let intent = EntryDescriptor {
        kind: EntryKind::Intent,
        stripe: 9,
        writes: Default::default(),
    };
    // Q's share of a RAID6 one-chunk update, as the piece on Q's member holds it.
    let q_share = EntryDescriptor {
        kind: EntryKind::ParityPiece,
        stripe: 11,
        writes: vec![
            WriteDescriptor {
                column: Column::Data(2),
                within_bytes: 1024,
                len_bytes: 512,
            },
            WriteDescriptor {
                column: Column::Parity(1),
                within_bytes: 1024,
                len_bytes: 512,
            },
        ]
        .into(),
    };
    vec![
        seed(
            "journal_batch",
            "redo",
            encode(3, std::slice::from_ref(&redo)),
        ),
        seed(
            "journal_batch",
            "intent",
            encode(4, std::slice::from_ref(&intent)),
        ),
        seed(
            "journal_batch",
            "piece",
            encode_as(true, 6, &[q_share, intent.clone()]),
        ),
        seed(
            "journal_batch",
            "mixed",
            encode(5, &[redo.clone(), intent, redo]),
        ),
    ]
}

#[test]
fn journal_seeds_decode() {
    let group = tessera_raid::superblock::Uuid([0x5a; 16]);
    for seed in journal_seeds() {
        let decoded = tessera_raid::journal::decode_batch(&seed.bytes, group);
        assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
    }
}

// ----- engine assembly -----

/// An `engine_assemble` input: device count, four device knobs, a 64-byte tape, the image (see
/// `tessera_fuzz_replay::engine`).
fn engine_input(devices: &[[u8; 4]], tape: &[u8], image: &[u8]) -> Vec<u8> {
    assert!((1..=4).contains(&devices.len()) && tape.len() <= 64);
    let mut bytes = vec![(devices.len() - 1) as u8];
    for device in 0..4 {
        bytes.extend_from_slice(devices.get(device).unwrap_or(&[0; 4]));
    }
    bytes.extend_from_slice(tape);
    bytes.resize(1 + 16 + 64, 0);
    bytes.extend_from_slice(image);
    bytes
}

/// Images for assembly, each with the devices that hold them.
fn engine_cases() -> Vec<(&'static str, Vec<u8>)> {
    let cases = superblock_cases();
    let image = |name: &str| {
        cases
            .iter()
            .find(|(case, _)| *case == name)
            .expect("a superblock case")
            .1
            .encode()
    };
    // Tape: a few failed member commands, bitmap blocks with written and dirty regions, host
    // requests once started (the engine reads the tape in the order it issues commands).
    let eventful: Vec<u8> = [
        &[0, 0, 0xfe, 0][..],
        &[
            0, 3, 0xff, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0x0f, 0, 0, 0, 0, 0, 0,
        ],
        &[4, 1, 0, 0, 0, 3, 0x81, 16, 0, 2, 2, 0, 0, 0, 0x84, 1, 0, 4],
    ]
    .concat();
    vec![
        (
            "raid1-both",
            engine_input(&[[0, 0, 0, 0], [1, 0, 0, 0]], &[], &image("raid1")),
        ),
        (
            "raid1-one-stale-unclean",
            engine_input(&[[0, 0, 0, 1], [1, 2, 0, 0]], &eventful, &image("raid1")),
        ),
        (
            "raid5-degraded-unclean",
            engine_input(
                &[[0, 0, 0, 0], [1, 0, 0, 0]],
                &eventful,
                &image("raid5-degraded-unclean"),
            ),
        ),
        (
            "raid5-failed-member-returns",
            engine_input(
                &[[0, 0, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0]],
                &[],
                &image("raid5-degraded-unclean"),
            ),
        ),
        (
            "raid6-rebuilding-with-spare",
            engine_input(
                &[[0, 0, 0, 0], [2, 0, 0, 0], [6, 0, 0, 0], [7, 0, 0, 0]],
                &eventful,
                &image("raid6-rebuilding-spare-bad-ranges"),
            ),
        ),
        (
            "raid10-foreign-device",
            engine_input(
                &[[0, 0, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0], [4, 0, 0, 0]],
                &[],
                &image("raid10"),
            ),
        ),
        (
            "raid0-diverging-views",
            engine_input(
                &[[0, 0, 0x40, 0], [1, 1, 0x81, 0]],
                &eventful,
                &image("raid0"),
            ),
        ),
        (
            "mixed-groups",
            engine_input(&[[0, 0, 0, 0], [1, 0, 0, 2]], &[], &image("raid1")),
        ),
    ]
}

fn engine_seeds() -> Vec<Seed> {
    engine_cases()
        .into_iter()
        .map(|(name, bytes)| seed("engine_assemble", name, bytes))
        .collect()
}

#[test]
fn engine_seed_images_assemble() {
    for (name, bytes) in engine_cases() {
        let image = &bytes[81..];
        let base = Superblock::decode(image).unwrap_or_else(|error| panic!("{name}: {error}"));
        let probes = base
            .members
            .iter()
            .map(|record| {
                let mut superblock = base.clone();
                superblock.member_uuid = record.uuid;
                DeviceProbe { superblock }
            })
            .collect();
        let config = EngineConfig {
            pool_bytes: 8 << 20,
            ..EngineConfig::default()
        };
        let assembled = Engine::assemble(probes, config, Arc::new(tessera_parity::Scalar));
        assert!(assembled.is_ok(), "{name}: {:?}", assembled.err());
    }
}

// ----- thin drive start-up -----

/// Image byte of a `thin_log_replay` input (see `tessera_fuzz_replay::thin`): geometry, a log
/// to replay after the checkpoint, compression of new writes, copies to read around.
fn thin_image(geometry: u8, with_log: bool, compression: u8, copies: u8) -> u8 {
    geometry | u8::from(with_log) << 2 | compression << 3 | copies << 5
}

/// Sealing bits: header CRCs, block checksums.
const SEAL_HEADERS: u8 = 1;
const SEAL_BLOCKS: u8 = 2;
/// A patch's region counting from its end.
const FROM_END: u8 = 0x80;
/// Regions: checkpoint slots 0 and 1, then records.
const RECORD: u8 = 2;

/// A `thin_log_replay` input: image, sealing, failing command, writes, then patches of
/// (region, offset, bytes).
fn thin_input(
    image: u8,
    seal: u8,
    fail_at: u8,
    writes: u8,
    patches: &[(u8, u16, &[u8])],
) -> Vec<u8> {
    let mut bytes = vec![image, seal, fail_at, writes];
    for (region, offset, patch) in patches {
        bytes.push(*region);
        bytes.extend_from_slice(&offset.to_le_bytes());
        bytes.push(patch.len() as u8);
        bytes.extend_from_slice(patch);
    }
    bytes
}

fn thin_cases() -> Vec<(&'static str, Vec<u8>)> {
    let log = thin_image(0, true, 0, 1);
    vec![
        (
            "clean-shutdown",
            thin_input(thin_image(0, false, 0, 1), 0, 0, 3, &[]),
        ),
        ("log-to-replay", thin_input(log, 0, 0, 5, &[])),
        (
            "log-384k-records-zstd-writes",
            thin_input(thin_image(1, true, 1, 1), 0, 0, 7, &[]),
        ),
        (
            "log-one-record-a-segment-two-copies",
            thin_input(thin_image(2, true, 2, 2), 0, 0, 6, &[]),
        ),
        (
            "torn-payload",
            thin_input(log, 0, 0, 4, &[(FROM_END | RECORD, 100, &[0x55; 16])]),
        ),
        (
            "payload-resealed",
            thin_input(
                log,
                SEAL_HEADERS | SEAL_BLOCKS,
                0,
                4,
                &[(FROM_END | (RECORD + 1), 200, &[0xaa; 32])],
            ),
        ),
        (
            "slot-damaged",
            thin_input(log, 0, 0, 2, &[(0, 24, &[1, 0, 0, 0])]),
        ),
        (
            "slot-start-record-sealed",
            thin_input(
                log,
                SEAL_HEADERS,
                0,
                2,
                &[(1, 24, &[2, 0, 0, 0, 0, 0, 0, 0])],
            ),
        ),
        (
            "entry-count-sealed",
            thin_input(log, SEAL_HEADERS, 0, 3, &[(RECORD + 4, 44, &[3, 0, 0, 0])]),
        ),
        (
            "durable-seq-sealed",
            thin_input(log, SEAL_HEADERS, 0, 3, &[(RECORD + 5, 64, &[0; 8])]),
        ),
        ("read-error-in-replay", thin_input(log, 0, 3, 0, &[])),
        ("write-error-after-start", thin_input(log, 0, 12, 5, &[])),
    ]
}

fn thin_seeds() -> Vec<Seed> {
    thin_cases()
        .into_iter()
        .map(|(name, bytes)| seed("thin_log_replay", name, bytes))
        .collect()
}

/// The images the seeds mutate start up ready; those with a log replay records after their
/// checkpoint.
#[test]
fn thin_seed_images_recover() {
    use tessera_thin::{Output, Store, ThinEvent};
    for geometry in 0..3 {
        for with_log in [false, true] {
            let (config, image) = tessera_fuzz_replay::thin::valid_image(geometry, with_log);
            let mut image = image.to_vec();
            let mut store = Store::open(config).unwrap();
            let mut replayed = None;
            while let Some(output) = store.poll() {
                match output {
                    Output::Lower(command) => {
                        let result = command.op.apply_to(&mut image);
                        store.lower_done(command.id, Ok(result));
                    }
                    Output::Event(ThinEvent::Recovered {
                        records_replayed, ..
                    }) => replayed = Some(records_replayed),
                    _ => {}
                }
            }
            assert!(store.is_ready(), "geometry {geometry}, log {with_log}");
            assert!(store.stats().logical_used_bytes > 0);
            let replayed = replayed.expect("a recovered event");
            // Without a log only the final checkpoint's record is replayed.
            assert_eq!(
                replayed > 1,
                with_log,
                "geometry {geometry}: {replayed} records"
            );
        }
    }
}

// ----- management API -----

fn http_request(method: &str, target: &str, body: &str, extra_headers: &str) -> String {
    let mut request = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n{extra_headers}");
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    request
}

/// A session that builds a RAID5 group with a virtual drive and exercises every endpoint.
fn session() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("GET", "/v1/info", ""),
        ("POST", "/v1/pds", r#"{"path": "/dev/nvme0n1"}"#),
        ("POST", "/v1/pds", r#"{"path": "/dev/nvme1n1"}"#),
        ("POST", "/v1/pds", r#"{"path": "/dev/nvme2n1"}"#),
        (
            "POST",
            "/v1/pds",
            r#"{"path": "memory://1073741824", "spare": true, "spare_for": null}"#,
        ),
        ("GET", "/v1/pds", ""),
        (
            "POST",
            "/v1/dgs",
            r#"{"level": 5, "chunk_bytes": 65536, "pds": [0,1,2], "name": "dg0", "journal": "degrade_only", "journal_pd": null}"#,
        ),
        (
            "POST",
            "/v1/vds",
            r#"{"dg": 0, "name": "vd0", "size_bytes": 1048576, "thin": false, "compression": null}"#,
        ),
        ("GET", "/v1/vds/vd0", ""),
        ("GET", "/v1/vds", ""),
        (
            "PATCH",
            "/v1/dgs/dg0",
            r#"{"rebuild_rate_percent": 50, "scrub_rate_percent": 30, "journal": "always_on"}"#,
        ),
        ("POST", "/v1/dgs/0/scrub", r#"{"repair": false}"#),
        ("GET", "/v1/dgs/0", ""),
        ("POST", "/v1/pds/1/fail", ""),
        ("POST", "/v1/pds/1/replace", r#"{"new_pd": 3}"#),
        ("GET", "/v1/dgs", ""),
        ("GET", "/v1/pds/1", ""),
        ("DELETE", "/v1/vds/vd0?force=true", ""),
        ("DELETE", "/v1/dgs/dg0?force=false", ""),
        ("GET", "/v1/events?since=0", ""),
        ("GET", "/metrics", ""),
    ]
}

/// (name, connection bytes, whether every response is a success)
fn api_http_cases() -> Vec<(&'static str, Vec<u8>, bool)> {
    let session: String = session()
        .into_iter()
        .map(|(method, target, body)| http_request(method, target, body, ""))
        .collect();
    let lf_only =
        "GET /v1/pds HTTP/1.1\nHost: localhost\n\nGET /v1/info HTTP/1.1\nConnection: close\n\n";
    vec![
        (
            "get-info",
            http_request("GET", "/v1/info", "", "").into_bytes(),
            true,
        ),
        ("session", session.into_bytes(), true),
        (
            "http10-keep-alive",
            [
                "GET /v1/info HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                "GET /metrics HTTP/1.0\r\n\r\n",
            ]
            .concat()
            .into_bytes(),
            true,
        ),
        (
            "expect-continue",
            http_request(
                "POST",
                "/v1/pds",
                r#"{"path":"/dev/sda"}"#,
                "Expect: 100-continue\r\n",
            )
            .into_bytes(),
            true,
        ),
        ("bare-lf", lf_only.as_bytes().to_vec(), true),
        (
            "refusals",
            [
                http_request("GET", "/v1/nothing", "", ""),
                http_request("PUT", "/v1/info", "", ""),
                http_request("POST", "/v1/pds", "{not json", ""),
                http_request("GET", "/v1/vds/bad%2Fname?force=%zz", "", ""),
                "GET /v1/info HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".into(),
            ]
            .concat()
            .into_bytes(),
            false,
        ),
    ]
}

fn api_http_seeds() -> Vec<Seed> {
    api_http_cases()
        .into_iter()
        .map(|(name, bytes, _)| seed("api_http", name, bytes))
        .collect()
}

/// Serves `input` as one connection; returns the status of every response.
fn statuses(input: &[u8]) -> Vec<u16> {
    struct Connection<'a> {
        input: &'a [u8],
        output: Vec<u8>,
    }
    impl std::io::Read for Connection<'_> {
        fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buffer)
        }
    }
    impl std::io::Write for Connection<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let router = Router::new(Arc::new(FakeController::new()));
    let mut connection = Connection {
        input,
        output: Vec::new(),
    };
    let limits = Limits::default();
    serve_connection(&mut connection, &router, &limits);
    let mut reader = std::io::BufReader::new(&connection.output[..]);
    let mut statuses = Vec::new();
    while let Ok(head) = read_head(&mut reader, &limits) {
        let head = parse_response_head(&head, &limits).unwrap();
        read_body(&mut reader, head.content_length().unwrap()).unwrap();
        statuses.push(head.status);
    }
    statuses
}

#[test]
fn api_http_seeds_get_answers() {
    for (name, bytes, succeeds) in api_http_cases() {
        let statuses = statuses(&bytes);
        assert!(!statuses.is_empty(), "{name}: no response");
        let final_statuses: Vec<u16> = statuses
            .into_iter()
            .filter(|&status| status != 100)
            .collect();
        let all_succeed = final_statuses
            .iter()
            .all(|status| (200..300).contains(status));
        assert_eq!(all_succeed, succeeds, "{name}: {final_statuses:?}");
    }
}

/// `api_router` input: requests separated by NUL, `METHOD TARGET` then a newline and the body.
fn router_input(requests: &[(&str, &str, &str)]) -> Vec<u8> {
    let records: Vec<String> = requests
        .iter()
        .map(|(method, target, body)| format!("{method} {target}\n{body}"))
        .collect();
    records.join("\0").into_bytes()
}

fn api_router_cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("session", router_input(&session())),
        (
            "raid6-thin",
            router_input(&[
                ("POST", "/v1/pds", r#"{"path":"memory://268435456"}"#),
                ("POST", "/v1/pds", r#"{"path":"memory://268439552"}"#),
                ("POST", "/v1/pds", r#"{"path":"memory://268443648"}"#),
                ("POST", "/v1/pds", r#"{"path":"memory://268447744"}"#),
                ("POST", "/v1/dgs", r#"{"level":"raid6","pds":[0,1,2,3]}"#),
                (
                    "POST",
                    "/v1/vds",
                    r#"{"dg":0,"size_bytes":65536,"thin":true,"compression":"lz4"}"#,
                ),
                ("GET", "/v1/vds", ""),
            ]),
        ),
        (
            "pd-lifecycle",
            router_input(&[
                ("POST", "/v1/pds", r#"{"path":"/srv/member.img"}"#),
                ("POST", "/v1/pds/0/fail", ""),
                ("POST", "/v1/pds/0/online", ""),
                ("DELETE", "/v1/pds/0", ""),
                ("GET", "/v1/events", ""),
            ]),
        ),
    ]
}

fn api_router_seeds() -> Vec<Seed> {
    api_router_cases()
        .into_iter()
        .map(|(name, bytes)| seed("api_router", name, bytes))
        .collect()
}

#[test]
fn api_router_seeds_succeed() {
    for (name, bytes) in api_router_cases() {
        let router = Router::new(Arc::new(FakeController::new()));
        for request in bytes.split(|&byte| byte == 0) {
            let text = std::str::from_utf8(request).unwrap();
            let (line, body) = text.split_once('\n').unwrap();
            let (method, target) = line.split_once(' ').unwrap();
            let response = router.handle(method, target, body.as_bytes());
            assert!(
                (200..300).contains(&response.status),
                "{name}: {line} answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            );
        }
    }
}
