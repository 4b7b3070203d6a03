//! fio (nbd engine, crc32c verify) against a virtual drive of every RAID level, healthy and
//! with one member failed (two for RAID6): data written before the failure still verifies, and
//! new writes verify while degraded.

mod daemon;
use daemon::{Daemon, fio_verify, have, sh};

fn level_round(daemon: &Daemon, level: &str, members: usize, failures: usize) {
    let vd = format!("vd-raid{level}");
    let uri = daemon.group_with_vd(level, members, 160 << 20, &vd, 128 << 20);
    let scratch = daemon.dir.path();
    // Healthy: write and verify; then fail members and verify the same data again, read-only.
    fio_verify(&uri, "48M", &["--randseed=11"], scratch);
    let dg = daemon.json(&["vd", "describe", &vd])["dg"].to_string();
    let members = daemon.group_members(&dg);
    for member in members.iter().take(failures) {
        let pd = member["pd"].to_string();
        daemon.ok(&["pd", "fail", &pd]);
    }
    let state = daemon.json(&["dg", "describe", &dg])["state"]
        .as_str()
        .unwrap()
        .to_string();
    let expected = if failures == 0 { "optimal" } else { "degraded" };
    assert_eq!(state, expected, "raid{level} after {failures} failures");
    fio_verify(&uri, "48M", &["--randseed=11", "--verify_only"], scratch);
    // Degraded: new writes still verify.
    fio_verify(&uri, "32M", &["--randseed=12", "--offset=64M"], scratch);
}

#[test]
fn every_level_healthy_and_degraded() {
    if !have("fio") {
        return;
    }
    let daemon = Daemon::start();
    level_round(&daemon, "0", 3, 0);
    level_round(&daemon, "1", 2, 1);
    level_round(&daemon, "10", 4, 1);
    level_round(&daemon, "5", 4, 1);
    level_round(&daemon, "6", 5, 2);
}

/// A degraded RAID6 group journals every write (`degrade_only`), each with its data and both
/// parities; with 128 writes in flight a batch gathers more payloads than a batch could once
/// borrow at a time, which stopped the daemon.
#[test]
fn degraded_raid6_under_a_deep_queue_of_small_writes() {
    if !have("fio") {
        return;
    }
    let daemon = Daemon::start();
    let uri = daemon.group_with_vd("6", 6, 512 << 20, "vd-deep", 1 << 30);
    let dg = daemon.json(&["vd", "describe", "vd-deep"])["dg"].to_string();
    let pd = daemon.group_members(&dg)[0]["pd"].to_string();
    daemon.ok(&["pd", "fail", &pd]);
    fio_verify(
        &uri,
        "64M",
        &["--randseed=13", "--bsrange=4k-4k", "--iodepth=128"],
        daemon.dir.path(),
    );
}

/// Bytes the member files of `daemon` hold on their file system (not their sizes).
fn allocated_member_bytes(daemon: &Daemon) -> u64 {
    std::fs::read_dir(daemon.dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "img"))
        .map(|path| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(path).unwrap()) * 512)
        .sum()
}

/// A region's first write zeroes the region on every member, but without writing the zeroes
/// where the member can zero a range itself (on tmpfs a punched hole): the member files stay
/// sparse, `/metrics` counts the zeroing apart from the writes, and the drive reads back the
/// write with zeroes around it. A host's write-zeroes is carried out the same way.
#[test]
fn zeroes_reach_the_members_without_being_written() {
    let daemon = Daemon::start();
    let uri = daemon.group_with_vd("5", 4, 64 << 20, "vd-zero", 96 << 20);
    let series = |name: &str| {
        daemon
            .metric(&format!("{name}{{dg=\"0\"}}"))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    let written_before = series("tessera_dg_member_write_bytes_total");
    let zeroed_before = series("tessera_dg_member_zeroed_bytes_total");
    let allocated_before = allocated_member_bytes(&daemon);

    let offset_bytes: u64 = (40 << 20) + 12 * 1024;
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    let mut client = tessera_nbd::Client::connect_str(&uri).expect("NBD client");
    client.write_at(&pattern, offset_bytes, false).unwrap();
    client.flush().unwrap();

    // The region (4 MiB of the drive, its share on each of the four members) was zeroed, and
    // what was written is the update itself and metadata, far less than the region.
    let zeroed = series("tessera_dg_member_zeroed_bytes_total") - zeroed_before;
    let written = series("tessera_dg_member_write_bytes_total") - written_before;
    assert!(zeroed >= 4 << 20, "zeroed {zeroed} bytes");
    assert!(written < 1 << 20, "wrote {written} bytes to members");
    let file_system = sh(
        "stat",
        &[
            "-f",
            "--format=%T",
            &daemon.dir.path().display().to_string(),
        ],
    );
    if file_system.trim() == "tmpfs" {
        let grown = allocated_member_bytes(&daemon) - allocated_before;
        assert!(grown < 1 << 20, "member files grew by {grown} bytes");
        let pd = daemon.json(&["pd", "describe", "0"]);
        assert_eq!(pd["io"]["zeroing"], "punch_hole", "{pd}");
    }

    let around = 8u64 << 20;
    let start = offset_bytes - (4 << 20);
    let mut back = vec![0xEEu8; around as usize];
    client.read_at(&mut back, start).unwrap();
    let mut expected = vec![0u8; around as usize];
    let at = (offset_bytes - start) as usize;
    expected[at..at + pattern.len()].copy_from_slice(&pattern);
    assert!(
        back == expected,
        "the drive does not read back the write among zeroes"
    );

    // A host's write-zeroes that must stay allocated (NO_HOLE) over written regions goes to
    // the members as zeroing too: only parity (a quarter of the data here) is written.
    let data_start: u64 = 48 << 20;
    let data: Vec<u8> = (0..12u32 << 20).map(|i| (i % 251) as u8 ^ 0x5A).collect();
    client.write_at(&data, data_start, false).unwrap();
    client.flush().unwrap();
    let written_before = series("tessera_dg_member_write_bytes_total");
    let zeroed_before = series("tessera_dg_member_zeroed_bytes_total");
    let (zero_at, zero_len) = (data_start + (64 << 10), 8u32 << 20);
    client.write_zeroes(zero_at, zero_len, true).unwrap();
    client.flush().unwrap();
    let zeroed = series("tessera_dg_member_zeroed_bytes_total") - zeroed_before;
    let written = series("tessera_dg_member_write_bytes_total") - written_before;
    assert!(zeroed >= 10 << 20, "zeroed {zeroed} bytes, parity included");
    assert!(written < 1 << 20, "wrote {written} bytes, zeroed {zeroed}");
    let mut expected = data;
    let at = (zero_at - data_start) as usize;
    expected[at..at + zero_len as usize].fill(0);
    let mut back = vec![0xEEu8; expected.len()];
    client.read_at(&mut back, data_start).unwrap();
    assert!(
        back == expected,
        "write-zeroes left other bytes than zeroes and the data"
    );
}
