//! Thin virtual drives end to end: compressible data written and verified by fio through NBD,
//! the capacity statistics, holes seen by `nbdinfo --map`, an orderly restart and a crash
//! (kill -9) with every flushed write intact, and running out of physical space.

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

#[test]
fn thin_drive_compresses_maps_holes_and_keeps_flushed_data() {
    if !have("fio") || !have("nbdinfo") {
        return;
    }
    let mut daemon = Daemon::start();
    let ids = daemon.add_file_drives(4, 96 << 20);
    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
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

    let compressible = [
        "--buffer_compress_percentage=50",
        "--buffer_compress_chunk=4k",
        "--refill_buffers",
    ];
    let mut extra = vec!["--randseed=11", "--end_fsync=1"];
    extra.extend(compressible);
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
    extra.extend(compressible);
    fio_verify(&uri, "96M", &extra, daemon.dir.path());

    // A crash: what was flushed before it is all there, the rest of the drive is untouched.
    let mut extra = vec!["--randseed=12", "--offset=512M", "--end_fsync=1"];
    extra.extend(compressible);
    fio_verify(&uri, "32M", &extra, daemon.dir.path());
    daemon.kill();
    daemon.restart();
    for (seed, offset, size) in [("11", "0", "96M"), ("12", "512M", "32M")] {
        let seed = format!("--randseed={seed}");
        let offset = format!("--offset={offset}");
        let mut extra = vec![seed.as_str(), offset.as_str(), "--verify_only"];
        extra.extend(compressible);
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
    let daemon = Daemon::start();
    let ids = daemon.add_file_drives(4, 64 << 20);
    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
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
    ]);
    let uri = daemon.uri("small");
    // Something that must stay readable.
    fio_verify(
        &uri,
        "4M",
        &["--randseed=21", "--end_fsync=1"],
        daemon.dir.path(),
    );

    // Incompressible data past the physical space: fio must see ENOSPC.
    let output = Command::new("fio")
        .args([
            "--name=fill",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--offset=8M",
            "--size=200M",
            "--rw=write",
            "--bs=128k",
            "--iodepth=8",
            "--end_fsync=1",
        ])
        .output()
        .expect("fio");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "writes past the space succeeded: {text}"
    );
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

    // Trimming the filler makes room: writes work again.
    let output = Command::new("fio")
        .args([
            "--name=trim",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--offset=8M",
            "--size=200M",
            "--rw=trim",
            "--bs=1m",
        ])
        .output()
        .expect("fio");
    assert!(output.status.success(), "trim failed: {output:?}");
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
