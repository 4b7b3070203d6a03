//! The daemon's state lives on the members: groups and virtual drives come back after an
//! orderly restart and after a crash (kill -9), with every flushed write intact.

mod daemon;
use daemon::{Daemon, fio_verify, have};

#[test]
fn groups_and_data_survive_restart_and_crash() {
    if !have("fio") {
        return;
    }
    let mut daemon = Daemon::start();
    let uri = daemon.group_with_vd("5", 4, 96 << 20, "keep", 128 << 20);
    let before = daemon.json(&["vd", "describe", "keep"]);
    fio_verify(
        &uri,
        "64M",
        &["--randseed=5", "--end_fsync=1"],
        daemon.dir.path(),
    );

    daemon.restart();
    let after = daemon.json(&["vd", "describe", "keep"]);
    assert_eq!(before["offset_bytes"], after["offset_bytes"]);
    assert_eq!(before["size_bytes"], after["size_bytes"]);
    assert_eq!(daemon.json(&["dg", "describe", "0"])["state"], "optimal");
    fio_verify(
        &uri,
        "64M",
        &["--randseed=5", "--verify_only"],
        daemon.dir.path(),
    );

    // Flushed data survives a crash; the group resyncs what was in flight.
    fio_verify(
        &uri,
        "32M",
        &["--randseed=6", "--offset=64M", "--end_fsync=1"],
        daemon.dir.path(),
    );
    daemon.kill();
    daemon.restart();
    fio_verify(
        &uri,
        "64M",
        &["--randseed=5", "--verify_only"],
        daemon.dir.path(),
    );
    fio_verify(
        &uri,
        "32M",
        &["--randseed=6", "--offset=64M", "--verify_only"],
        daemon.dir.path(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while daemon.json(&["dg", "describe", "0"])["state"] != "optimal" {
        assert!(
            std::time::Instant::now() < deadline,
            "resync did not finish"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
