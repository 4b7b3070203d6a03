//! fio (nbd engine, crc32c verify) against a virtual drive of every RAID level, healthy and
//! with one member failed (two for RAID6): data written before the failure still verifies, and
//! new writes verify while degraded.

mod daemon;
use daemon::{Daemon, fio_verify, have};

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
