//! Thin virtual drives end to end: compressible data written and verified by fio through NBD,
//! the capacity statistics, holes seen by `nbdinfo --map`, an orderly restart and a crash
//! (kill -9) with every flushed write intact, running out of physical space, and bits flipped
//! on a member (at rest and under a running workload) found and repaired.

mod daemon;
use daemon::{Daemon, fio_verify, have};
use std::process::Command;

fn stats(daemon: &Daemon, vd: &str) -> serde_json::Value {
    let view = daemon.json(&["vd", "describe", vd]);
    assert_eq!(view["thin"], true);
    view["stats"].clone()
}

fn number(value: &serde_json::Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// `nbdinfo --map` lines: (offset, length, type).
fn allocation_map(uri: &str) -> Vec<(u64, u64, String)> {
    let output = Command::new("nbdinfo")
        .args(["--map", uri])
        .output()
        .expect("nbdinfo");
    assert!(output.status.success(), "nbdinfo --map failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (
                fields[0].parse().expect("offset"),
                fields[1].parse().expect("length"),
                fields[3..].join(" "),
            )
        })
        .collect()
}

/// fio through its nbd engine, one job with `options`: whether it succeeded, and what it
/// printed.
fn fio_over_nbd(uri: &str, options: &[&str]) -> (bool, String) {
    fio_jobs(uri, &[&["--name=job"], options].concat())
}

#[test]
fn thin_drive_compresses_maps_holes_and_keeps_flushed_data() {
    if !have("fio") || !have("nbdinfo") {
        return;
    }
    let mut daemon = Daemon::start();
    daemon.group("5", 4, 96 << 20);
    // More logical space than the group has: overcommit is allowed and reported.
    daemon.ok(&[
        "vd", "create", "0", "--size", "1G", "--name", "thin", "--thin",
    ]);
    let uri = daemon.uri("thin");
    let created = stats(&daemon, "thin");
    assert!(number(&created["overcommit_ratio"]) > 3.0, "{created}");
    assert_eq!(
        daemon.json(&["vd", "describe", "thin"])["size_bytes"],
        1u64 << 30
    );

    let mut extra = vec!["--randseed=11", "--end_fsync=1"];
    extra.extend(COMPRESSIBLE);
    fio_verify(&uri, "96M", &extra, daemon.dir.path());

    let written = stats(&daemon, "thin");
    assert_eq!(number(&written["logical_used_bytes"]) as u64, 96 << 20);
    assert!(
        number(&written["compression_ratio"]) > 1.5,
        "2:1 compressible data: {written}"
    );
    assert!(number(&written["physical_used_bytes"]) < number(&written["logical_used_bytes"]));
    assert!(number(&written["host_bytes_written"]) >= (96 << 20) as f64);
    assert!(number(&written["member_bytes_written"]) > 0.0);
    assert_eq!(number(&written["checksum_errors_detected"]), 0.0);
    let metric = |name: &str| {
        daemon
            .metric(&format!("{name}{{vd=\"thin\",dg=\"0\"}}"))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    assert!(metric("tessera_thin_host_write_bytes_total") >= 96 << 20);
    assert_eq!(metric("tessera_thin_logical_used_bytes"), 96 << 20);
    assert!(metric("tessera_thin_stored_bytes") < 96 << 20);

    // Only the first 96 MiB hold data; the rest is a hole that reads as zeroes.
    let map = allocation_map(&uri);
    let holes: u64 = map
        .iter()
        .filter(|(_, _, kind)| kind.contains("hole"))
        .map(|(_, length, _)| length)
        .sum();
    assert_eq!(holes, (1u64 << 30) - (96 << 20), "{map:?}");
    assert!(
        map.iter()
            .any(|(offset, _, kind)| *offset == 0 && kind.contains("data"))
    );

    daemon.restart();
    let mut extra = vec!["--randseed=11", "--verify_only"];
    extra.extend(COMPRESSIBLE);
    fio_verify(&uri, "96M", &extra, daemon.dir.path());

    // A crash: what was flushed before it is all there, the rest of the drive is untouched.
    let mut extra = vec!["--randseed=12", "--offset=512M", "--end_fsync=1"];
    extra.extend(COMPRESSIBLE);
    fio_verify(&uri, "32M", &extra, daemon.dir.path());
    daemon.kill();
    daemon.restart();
    for (seed, offset, size) in [("11", "0", "96M"), ("12", "512M", "32M")] {
        let seed = format!("--randseed={seed}");
        let offset = format!("--offset={offset}");
        let mut extra = vec![seed.as_str(), offset.as_str(), "--verify_only"];
        extra.extend(COMPRESSIBLE);
        fio_verify(&uri, size, &extra, daemon.dir.path());
    }
    let events = daemon.ok(&["events"]);
    assert!(events.contains("thin_recovered"), "{events}");
}

#[test]
fn a_full_thin_drive_fails_writes_with_enospc_and_recovers_after_trim() {
    if !have("fio") {
        return;
    }
    let mut daemon = Daemon::start();
    daemon.group("5", 4, 64 << 20);
    daemon.ok(&[
        "vd",
        "create",
        "0",
        "--size",
        "256M",
        "--name",
        "small",
        "--thin",
        "--physical",
        "24M",
        "--compression",
        "none",
        "--low-space-percent",
        "90",
    ]);
    let uri = daemon.uri("small");
    // Something that must stay readable.
    fio_verify(
        &uri,
        "4M",
        &["--randseed=21", "--end_fsync=1"],
        daemon.dir.path(),
    );
    // A second thin drive takes the rest of the group; a third finds no room, and says so.
    daemon.ok(&[
        "vd", "create", "0", "--size", "1G", "--name", "rest", "--thin",
    ]);
    let refused = daemon.run(&["vd", "create", "0", "--size", "1G", "--thin"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("no free space for a thin drive's log"),
        "{stderr}"
    );

    // A fifth of the space used is already below the 90% free asked for.
    let events = daemon.ok(&["events"]);
    assert!(events.contains("low_space"), "{events}");
    assert!(!events.contains("no_space"), "{events}");

    // Incompressible data past the physical space: fio must see ENOSPC.
    let (filled, text) = fio_over_nbd(
        &uri,
        &[
            "--offset=8M",
            "--size=200M",
            "--rw=write",
            "--bs=128k",
            "--iodepth=8",
            "--end_fsync=1",
        ],
    );
    assert!(!filled, "writes past the space succeeded: {text}");
    assert!(
        text.contains("No space left on device") || text.contains("error=28"),
        "fio did not see ENOSPC: {text}"
    );
    let events = daemon.ok(&["events"]);
    assert!(events.contains("no_space"), "{events}");
    // Everything acknowledged and flushed before stays readable.
    fio_verify(
        &uri,
        "4M",
        &["--randseed=21", "--verify_only"],
        daemon.dir.path(),
    );

    // Adding capacity resumes service. The group space right after the drive is the second
    // drive's: growing is refused, saying so; with that drive gone it succeeds.
    let refused = daemon.run(&["vd", "set", "small", "--physical", "48M"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("taken by virtual drive rest"), "{stderr}");
    let shrink = daemon.run(&["vd", "set", "small", "--physical", "8M"]);
    assert!(!shrink.status.success());
    daemon.ok(&["vd", "delete", "rest"]);
    let before = stats(&daemon, "small");
    let grown = daemon.json(&["vd", "set", "small", "--physical", "48M"]);
    let after = &grown["stats"];
    assert!(
        number(&after["capacity_bytes"]) >= number(&before["capacity_bytes"]) + (20 << 20) as f64,
        "capacity {} -> {}",
        before["capacity_bytes"],
        after["capacity_bytes"]
    );
    let events = daemon.ok(&["events"]);
    assert!(events.contains("thin_grown"), "{events}");
    fio_verify(
        &uri,
        "16M",
        &["--randseed=23", "--offset=40M", "--end_fsync=1"],
        daemon.dir.path(),
    );
    // The larger space is the drive's after a restart too.
    daemon.restart();
    assert_eq!(
        stats(&daemon, "small")["capacity_bytes"],
        after["capacity_bytes"]
    );
    for (seed, size, offset) in [
        ("--randseed=21", "4M", "--offset=0"),
        ("--randseed=23", "16M", "--offset=40M"),
    ] {
        fio_verify(
            &uri,
            size,
            &[seed, offset, "--verify_only"],
            daemon.dir.path(),
        );
    }

    // Trimming the filler makes room: writes work again.
    let (trimmed, text) = fio_over_nbd(
        &uri,
        &["--offset=8M", "--size=200M", "--rw=trim", "--bs=1m"],
    );
    assert!(trimmed, "trim failed: {text}");
    fio_verify(
        &uri,
        "8M",
        &["--randseed=22", "--offset=16M", "--end_fsync=1"],
        daemon.dir.path(),
    );
    fio_verify(
        &uri,
        "4M",
        &["--randseed=21", "--verify_only"],
        daemon.dir.path(),
    );
}

/// Flips one bit in each of `count` non-zero 4 KiB blocks of a member file (past its first
/// MiB of metadata), skipping log record and checkpoint headers. Returns the blocks hit.
fn flip_data_bits(path: &str, count: usize, seed: u64) -> usize {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("member file");
    let blocks = file.metadata().expect("metadata").len() / 4096;
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut flipped = 0;
    let mut block = vec![0u8; 4096];
    for _ in 0..100_000 {
        if flipped == count {
            break;
        }
        let at = 256 + next() % (blocks - 256);
        file.read_exact_at(&mut block, at * 4096)
            .expect("read member");
        let header = block
            .windows(8)
            .any(|w| w == b"TSTHINR2" || w == b"TSTHINC2");
        if header || block.iter().all(|&b| b == 0) {
            continue;
        }
        let byte = (next() % 4096) as usize;
        block[byte] ^= 1 << (next() % 8);
        file.write_all_at(&block, at * 4096).expect("write member");
        flipped += 1;
    }
    file.sync_all().expect("sync member");
    flipped
}

/// fio's options for 2:1 compressible data.
const COMPRESSIBLE: [&str; 3] = [
    "--buffer_compress_percentage=50",
    "--buffer_compress_chunk=4k",
    "--refill_buffers",
];

/// A RAID5 over four 64 MiB file drives holding a 256 MiB thin drive `name` (`vd create` given
/// `vd_args` too) whose first 64 MiB fio wrote with `seed` and verified. Returns the drive's
/// URI and the file of member `member`.
fn thin_drive_with_64m_written(
    daemon: &Daemon,
    name: &str,
    vd_args: &[&str],
    seed: &str,
    member: usize,
) -> (String, String) {
    let ids = daemon.add_file_drives(4, 64 << 20);
    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
    let mut args = vec![
        "vd", "create", "0", "--size", "256M", "--name", name, "--thin",
    ];
    args.extend(vd_args);
    daemon.ok(&args);
    let uri = daemon.uri(name);
    let mut extra = vec![seed, "--end_fsync=1"];
    extra.extend(COMPRESSIBLE);
    fio_verify(&uri, "64M", &extra, daemon.dir.path());
    let view = daemon.json(&["pd", "describe", &ids[member]]);
    let path = view["path"].as_str().expect("member path").to_string();
    (uri, path)
}

#[test]
fn bit_flips_on_a_member_are_found_by_scrub_and_repaired_from_parity() {
    if !have("fio") {
        return;
    }
    let daemon = Daemon::start();
    let (uri, path) = thin_drive_with_64m_written(&daemon, "flip", &[], "--randseed=31", 0);
    let path = path.as_str();

    // Silent corruption on one member: every flipped block still has its parity intact.
    assert_eq!(flip_data_bits(path, 64, 0x5eed), 64);

    // A scrub reads every live block: the flipped ones fail their checksum and are repaired.
    daemon.ok(&["dg", "scrub", "0"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !daemon.ok(&["events"]).contains("thin_scrub_finished") {
        assert!(
            std::time::Instant::now() < deadline,
            "the thin scrub did not finish"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let scrubbed = stats(&daemon, "flip");
    let found = number(&scrubbed["checksum_errors_detected"]);
    assert!(found > 0.0, "the scrub found no flipped block: {scrubbed}");
    assert_eq!(number(&scrubbed["checksum_errors_repaired"]), found);

    let mut extra = vec!["--randseed=31", "--verify_only"];
    extra.extend(COMPRESSIBLE);
    fio_verify(&uri, "64M", &extra, daemon.dir.path());
    let after = stats(&daemon, "flip");
    assert_eq!(
        number(&after["checksum_errors_detected"]),
        found,
        "the scrub left a bad live block for the reads to find: {after}"
    );

    // Flipped again, the reads themselves find the bad blocks and still return the right data.
    assert_eq!(flip_data_bits(path, 64, 0xf11d), 64);
    fio_verify(&uri, "64M", &extra, daemon.dir.path());
    let after = stats(&daemon, "flip");
    let detected = number(&after["checksum_errors_detected"]);
    assert!(
        detected > found,
        "the reads found no flipped block: {after}"
    );
    assert_eq!(
        number(&after["checksum_errors_repaired"]),
        detected,
        "every detected block had parity to repair it: {after}"
    );
    assert!(daemon.ok(&["events"]).contains("checksum_repaired"));
    // The repaired blocks were moved: reading again finds nothing new.
    fio_verify(&uri, "64M", &extra, daemon.dir.path());
    assert_eq!(
        number(&stats(&daemon, "flip")["checksum_errors_detected"]),
        detected
    );
}

/// fio through its nbd engine with every option as given (global options first, then jobs,
/// each from its `--name`): whether it succeeded, and what it printed.
fn fio_jobs(uri: &str, options: &[&str]) -> (bool, String) {
    let output = Command::new("fio")
        .args([
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            // No verify state files left in the working directory.
            "--verify_state_save=0",
        ])
        .args(options)
        .output()
        .expect("fio");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn bit_flips_under_a_running_workload_are_repaired_and_reads_stay_right() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !have("fio") {
        return;
    }
    let daemon = Daemon::start();
    // Two connections write at once (the verifying readers connect as writers too).
    let (uri, path) =
        thin_drive_with_64m_written(&daemon, "live", &["--multi-conn"], "--randseed=41", 1);

    // Bits flip on one member: 16 blocks at once (a quarter of a member's blocks are parity,
    // which reads do not check, so some surely hit data), then a few every 20 ms for as long
    // as the workload runs.
    assert_eq!(flip_data_bits(&path, 16, 0x5eed_f11b), 16);
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut flipped = 0;
            let mut seed = 0x0b17_f11b;
            while !stop.load(Ordering::Relaxed) {
                flipped += flip_data_bits(&path, 4, seed);
                seed += 2;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            flipped
        })
    };
    // The workload: the first 64 MiB read and verified four times over, while a second job
    // writes the next 64 MiB and verifies what it wrote as it goes.
    let mut workload = vec![
        "--verify=crc32c",
        "--verify_fatal=1",
        "--name=readers",
        "--size=64M",
        "--rw=randwrite",
        "--bsrange=4k-128k",
        "--iodepth=16",
        "--randseed=41",
        "--verify_only",
        "--loops=4",
        "--name=writer",
        "--offset=64M",
        "--size=64M",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--randseed=42",
        "--verify_backlog=256",
        "--do_verify=1",
    ];
    workload.extend(COMPRESSIBLE);
    let (ok, text) = fio_jobs(&uri, &workload);
    stop.store(true, Ordering::Relaxed);
    let flipped = 16 + flipper.join().expect("flipper");
    assert!(ok, "the workload read wrong data: {text}");
    let during = stats(&daemon, "live");
    let detected = number(&during["checksum_errors_detected"]);
    assert!(
        detected > 0.0,
        "{flipped} flipped blocks and the reads found none: {during}"
    );
    assert_eq!(
        number(&during["checksum_errors_repaired"]),
        detected,
        "every detected block had parity to repair it: {during}"
    );

    // Flips the workload did not read again are found now, and everything still verifies.
    let (ok, text) = fio_jobs(
        &uri,
        &[
            "--verify=crc32c",
            "--verify_fatal=1",
            "--verify_only",
            "--name=first",
            "--size=64M",
            "--rw=randwrite",
            "--bsrange=4k-128k",
            "--randseed=41",
            "--name=second",
            "--offset=64M",
            "--size=64M",
            "--rw=randwrite",
            "--bs=4k",
            "--randseed=42",
        ],
    );
    assert!(ok, "a final read found wrong data: {text}");
    let after = stats(&daemon, "live");
    assert_eq!(
        number(&after["checksum_errors_repaired"]),
        number(&after["checksum_errors_detected"]),
        "{after}"
    );
}
