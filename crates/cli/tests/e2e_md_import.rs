//! `tessera dg import-md` on file members carrying hand-built md v1.2 superblocks and data laid
//! out as md lays out RAID5 (left-symmetric): every refusal leaves the files and the daemon
//! untouched and says why; a degraded array is adopted with its data in place, read back over
//! NBD, rebuilt onto a spare, and read back again with another member failed; an import cut
//! short by a crash leaves a degraded group or a failed one with a way back to md.

mod daemon;
use daemon::Daemon;
use tessera_raid::md::{
    FEATURE_BITMAP_OFFSET, FEATURE_RESHAPE_ACTIVE, LAYOUT_LEFT_SYMMETRIC, MD_MAX_SECTOR,
    MdSuperblock,
};

const MEMBERS: usize = 4;
const MEMBER_BYTES: u64 = 24 << 20;
const CHUNK_BYTES: u64 = 64 << 10;
const DATA_OFFSET_BYTES: u64 = 2 << 20;
/// md's per-member data size: 8 MiB.
const MEMBER_DATA_BYTES: u64 = 8 << 20;
const ARRAY_BYTES: u64 = (MEMBERS as u64 - 1) * MEMBER_DATA_BYTES;

fn superblock(dev_number: u32) -> MdSuperblock {
    MdSuperblock {
        feature_map: 8, // a bad-block log, as mdadm makes by default
        set_uuid: [0x5a; 16],
        set_name: "testhost:media".into(),
        ctime: 1_700_000_000,
        level: 5,
        layout: LAYOUT_LEFT_SYMMETRIC,
        size_sectors: MEMBER_DATA_BYTES / 512,
        chunk_sectors: (CHUNK_BYTES / 512) as u32,
        raid_disks: MEMBERS as u32,
        reshape_position: 0,
        data_offset_sectors: DATA_OFFSET_BYTES / 512,
        data_size_sectors: (MEMBER_BYTES - DATA_OFFSET_BYTES) / 512,
        super_offset_sectors: 8,
        recovery_offset_sectors: 0,
        dev_number,
        device_uuid: [dev_number as u8 + 1; 16],
        bblog_offset_sectors: 8,
        bblog_size_sectors: 8,
        utime: 1_700_000_100,
        events: 42,
        resync_offset_sectors: MD_MAX_SECTOR,
        dev_roles: (0..MEMBERS as u16).collect(),
    }
}

fn array_data() -> Vec<u8> {
    (0..ARRAY_BYTES)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 11) as u8 ^ (i >> 16) as u8)
        .collect()
}

/// The members' data areas as md's RAID5 left-symmetric places `data`, parity included.
fn md_raid5_areas(data: &[u8]) -> Vec<Vec<u8>> {
    let n = MEMBERS as u64;
    let chunk = CHUNK_BYTES as usize;
    let mut areas = vec![vec![0u8; MEMBER_DATA_BYTES as usize]; MEMBERS];
    for stripe in 0..MEMBER_DATA_BYTES / CHUNK_BYTES {
        let parity_member = ((n - 1) - stripe % n) as usize;
        let row = stripe as usize * chunk;
        let mut parity = vec![0u8; chunk];
        for j in 0..MEMBERS - 1 {
            let member = (parity_member + 1 + j) % MEMBERS;
            let at = (stripe as usize * (MEMBERS - 1) + j) * chunk;
            let piece = &data[at..at + chunk];
            areas[member][row..row + chunk].copy_from_slice(piece);
            parity.iter_mut().zip(piece).for_each(|(p, d)| *p ^= d);
        }
        areas[parity_member][row..row + chunk].copy_from_slice(&parity);
    }
    areas
}

/// Writes member files: `superblocks[i]` at 4 KiB and `areas[i]` at the data offset.
fn write_members(daemon: &Daemon, tag: &str, superblocks: &[MdSuperblock]) -> Vec<String> {
    let areas = md_raid5_areas(&array_data());
    superblocks
        .iter()
        .enumerate()
        .map(|(i, superblock)| {
            let path = daemon.path(&format!("md-{tag}-{i}.img"));
            let mut image = vec![0u8; MEMBER_BYTES as usize];
            image[4096..8192].copy_from_slice(&superblock.encode());
            // mdadm fills an empty bad-block log with ones.
            image[8192..12288].fill(0xff);
            let data = DATA_OFFSET_BYTES as usize;
            image[data..data + MEMBER_DATA_BYTES as usize].copy_from_slice(&areas[i]);
            std::fs::write(&path, &image).expect("member file");
            path.display().to_string()
        })
        .collect()
}

fn members(change: impl Fn(&mut Vec<MdSuperblock>)) -> Vec<MdSuperblock> {
    let mut superblocks: Vec<MdSuperblock> = (0..MEMBERS as u32).map(superblock).collect();
    change(&mut superblocks);
    superblocks
}

fn refused(daemon: &Daemon, tag: &str, paths: &[String], expected: &str) {
    let before: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let mut args = vec!["dg", "import-md"];
    args.extend(paths.iter().map(String::as_str));
    let output = daemon.run(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{tag}: import succeeded");
    assert!(
        stderr.contains(expected),
        "{tag}: {stderr:?} does not say {expected:?}"
    );
    for (path, before) in paths.iter().zip(before) {
        assert!(
            std::fs::read(path).unwrap() == before,
            "{tag}: {path} changed"
        );
    }
    assert_eq!(daemon.json(&["pd", "list"]), serde_json::json!([]), "{tag}");
    assert_eq!(daemon.json(&["dg", "list"]), serde_json::json!([]), "{tag}");
}

fn read_vd(daemon: &Daemon, vd: &str) -> Vec<u8> {
    let mut client = tessera_nbd::Client::connect_str(&daemon.uri(vd)).expect("NBD connect");
    assert_eq!(client.size_bytes(), ARRAY_BYTES);
    let mut out = vec![0u8; ARRAY_BYTES as usize];
    for (i, piece) in out.chunks_mut(1 << 20).enumerate() {
        client
            .read_at(piece, i as u64 * (1 << 20))
            .expect("NBD read");
    }
    out
}

#[test]
fn import_md_refuses_what_it_cannot_adopt() {
    let daemon = Daemon::start();
    let good = |tag| write_members(&daemon, tag, &members(|_| {}));

    let blank = daemon.path("blank.img");
    std::fs::write(&blank, vec![0u8; 1 << 20]).unwrap();
    let mut paths = good("blank");
    paths[3] = blank.display().to_string();
    refused(&daemon, "blank", &paths, "no md superblock");

    let paths = good("checksum");
    let mut image = std::fs::read(&paths[1]).unwrap();
    image[4096 + 100] ^= 1;
    std::fs::write(&paths[1], image).unwrap();
    refused(&daemon, "checksum", &paths, "checksum");

    let paths = good("badblocks");
    let mut image = std::fs::read(&paths[2]).unwrap();
    image[8192..8200].copy_from_slice(&((4096u64 << 10) | 7).to_le_bytes());
    std::fs::write(&paths[2], image).unwrap();
    refused(&daemon, "badblocks", &paths, "md recorded bad blocks on");

    let unclean = members(|s| s.iter_mut().for_each(|s| s.resync_offset_sectors = 1024));
    let paths = write_members(&daemon, "unclean", &unclean);
    refused(&daemon, "unclean", &paths, "not stopped cleanly");

    let bitmap = members(|s| {
        s.iter_mut()
            .for_each(|s| s.feature_map |= FEATURE_BITMAP_OFFSET)
    });
    let paths = write_members(&daemon, "bitmap", &bitmap);
    refused(&daemon, "bitmap", &paths, "mdadm --grow --bitmap=none");

    let reshape = members(|s| {
        s.iter_mut()
            .for_each(|s| s.feature_map |= FEATURE_RESHAPE_ACTIVE)
    });
    let paths = write_members(&daemon, "reshape", &reshape);
    refused(&daemon, "reshape", &paths, "a reshape is in progress");

    let stale = members(|s| s[2].events = 40);
    let paths = write_members(&daemon, "stale", &stale);
    refused(&daemon, "stale", &paths, "md-stale-2.img is stale");

    let raid4 = members(|s| s.iter_mut().for_each(|s| s.level = 4));
    let paths = write_members(&daemon, "raid4", &raid4);
    refused(&daemon, "raid4", &paths, "unsupported md array: md level 4");

    let layout = members(|s| s.iter_mut().for_each(|s| s.layout = 0));
    let paths = write_members(&daemon, "layout", &layout);
    refused(
        &daemon,
        "layout",
        &paths,
        "only left-symmetric is supported",
    );

    let cramped = members(|s| s.iter_mut().for_each(|s| s.data_offset_sectors = 256));
    let paths = write_members(&daemon, "cramped", &cramped);
    refused(&daemon, "cramped", &paths, "Tessera's metadata needs");

    let mixed = members(|s| s[1].set_uuid = [1; 16]);
    let paths = write_members(&daemon, "mixed", &mixed);
    refused(&daemon, "mixed", &paths, "belong to different md arrays");

    let paths = good("degraded2");
    refused(
        &daemon,
        "two missing",
        &paths[..2],
        "2 members of the raid5 array are missing",
    );
}

#[test]
fn import_md_adopts_a_degraded_raid5_and_rebuilds_it() {
    let daemon = Daemon::start();
    let paths = write_members(&daemon, "adopt", &members(|_| {}));
    let originals: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).unwrap()[4096..4096 + 16384].to_vec())
        .collect();
    // Member 1 left out: it becomes a failed member, and the array is served degraded.
    let given = [&paths[3], &paths[0], &paths[2]];
    let mut args = vec!["dg", "import-md"];
    args.extend(given.iter().map(|p| p.as_str()));
    let imported = daemon.json(&args);
    assert_eq!(imported["md_name"], "media");
    assert_eq!(imported["md_uuid"], "5a5a5a5a:5a5a5a5a:5a5a5a5a:5a5a5a5a");
    assert_eq!(imported["vd"]["name"], "media");
    assert_eq!(imported["dg"]["name"], "media");
    assert_eq!(imported["vd"]["size_bytes"], ARRAY_BYTES);
    assert_eq!(imported["dg"]["state"], "degraded");
    let dg = imported["dg"]["id"].to_string();

    // md's superblock area is kept at 36 KiB, for going back.
    for (path, original) in paths.iter().zip(&originals) {
        if path == &paths[1] {
            continue;
        }
        let image = std::fs::read(path).unwrap();
        assert!(
            image[36 << 10..(36 << 10) + 16384] == original[..],
            "{path}"
        );
    }
    let data = array_data();
    assert!(read_vd(&daemon, "media") == data, "degraded read");

    // A spare takes the missing role and is rebuilt with every byte.
    let spare = daemon.path("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(MEMBER_BYTES)
        .unwrap();
    daemon.ok(&["pd", "add", "--spare", &spare.display().to_string()]);
    daemon.wait_for_group(&dg, "the rebuild onto the spare", |group| {
        group["state"] == "optimal"
    });
    let rebuilt = std::fs::read(&spare).unwrap();
    let area = DATA_OFFSET_BYTES as usize..(DATA_OFFSET_BYTES + MEMBER_DATA_BYTES) as usize;
    assert!(
        rebuilt[area] == md_raid5_areas(&data)[1][..],
        "the spare holds md's member 1"
    );

    // Another member failed: the data still reads, now through the rebuilt member.
    let victim = daemon.group_members(&dg)[0]["pd"].to_string();
    daemon.ok(&["pd", "fail", &victim]);
    assert!(
        read_vd(&daemon, "media") == data,
        "read after a second failure"
    );
}

const SAVED_MD_OFFSET: usize = 36 << 10;
const MD_AREA_BYTES: usize = 16 << 10;

/// Imports md's array from fresh member files, then kills the daemon and leaves the files as a
/// crash between the first and the last superblock copy A of the import would have
/// (docs/md-import.md, "A crash during the import"): copy A on the first `with_copy_a`
/// members only (the others still carry md's superblock), copy B on none.
fn crashed_import(daemon: &mut Daemon, tag: &str, with_copy_a: usize) -> Vec<String> {
    let paths = write_members(daemon, tag, &members(|_| {}));
    let mut args = vec!["dg", "import-md"];
    args.extend(paths.iter().map(String::as_str));
    daemon.ok(&args);
    daemon.kill();
    for (i, path) in paths.iter().enumerate() {
        let restore_md = i >= with_copy_a;
        undo_superblocks(path, restore_md);
    }
    daemon.restart();
    paths
}

/// Erases Tessera's superblock copy B, and with `restore_md` puts md's 16 KiB from 4 KiB back
/// from the copy the import kept at 36 KiB (the documented `dd` commands).
fn undo_superblocks(path: &str, restore_md: bool) {
    let mut image = std::fs::read(path).unwrap();
    if restore_md {
        let saved = image[SAVED_MD_OFFSET..SAVED_MD_OFFSET + MD_AREA_BYTES].to_vec();
        image[4096..4096 + MD_AREA_BYTES].copy_from_slice(&saved);
    }
    image[4096 + MD_AREA_BYTES..4096 + 2 * MD_AREA_BYTES].fill(0);
    std::fs::write(path, &image).unwrap();
}

/// A crash that left copy A on too few members for the group: it is failed and serves
/// nothing; deleting it, forgetting the drives and restoring md's superblocks gives md's
/// array back intact, which imports again with its data.
#[test]
fn a_crash_early_in_the_import_leaves_a_way_back() {
    let mut daemon = Daemon::start();
    let paths = crashed_import(&mut daemon, "early", 2);
    let groups = daemon.json(&["dg", "list"]);
    assert_eq!(groups[0]["state"], "failed", "{groups}");
    if let Ok(mut client) = tessera_nbd::Client::connect_str(&daemon.uri("media")) {
        let mut out = vec![0u8; 4096];
        assert!(
            client.read_at(&mut out, 0).is_err(),
            "a failed group serves nothing"
        );
    }
    let dg = groups[0]["id"].to_string();
    daemon.ok(&["dg", "delete", &dg, "--force"]);
    for pd in 0..MEMBERS {
        daemon.ok(&["pd", "remove", &pd.to_string()]);
    }
    for path in &paths {
        undo_superblocks(path, true);
    }
    let mut args = vec!["dg", "import-md"];
    args.extend(paths.iter().map(String::as_str));
    let imported = daemon.json(&args);
    assert_eq!(imported["dg"]["state"], "optimal");
    assert!(
        read_vd(&daemon, "media") == array_data(),
        "the data after the second import"
    );
}

/// A crash that left copy A on all members but one: the import took, degraded; the last
/// device, given back as a spare, is rebuilt into its role.
#[test]
fn a_crash_late_in_the_import_leaves_a_degraded_group() {
    let mut daemon = Daemon::start();
    let paths = crashed_import(&mut daemon, "late", MEMBERS - 1);
    let groups = daemon.json(&["dg", "list"]);
    assert_eq!(groups[0]["state"], "degraded", "{groups}");
    assert!(read_vd(&daemon, "media") == array_data(), "degraded read");
    let last = (MEMBERS - 1).to_string();
    daemon.ok(&["pd", "remove", &last]);
    daemon.ok(&["pd", "add", "--spare", &paths[MEMBERS - 1]]);
    let dg = groups[0]["id"].to_string();
    daemon.wait_for_group(&dg, "the rebuild onto the last device", |group| {
        group["state"] == "optimal"
    });
    assert!(
        read_vd(&daemon, "media") == array_data(),
        "read after the rebuild"
    );
}
