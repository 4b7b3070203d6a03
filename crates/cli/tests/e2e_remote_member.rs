//! A drive group spanning a remote member: one physical drive is an NBD export served by
//! `nbdkit memory` over a Unix socket. Killing that server is a pulled cable: the member fails,
//! the group degrades and goes on serving, and every write verifies.

mod daemon;
use daemon::{Daemon, fio_verify, have};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_remote_member_that_disappears_degrades_the_group_and_io_goes_on() {
    if !have("fio") || !have("nbdkit") {
        return;
    }
    let daemon = Daemon::start();
    let socket = daemon.path("remote.sock");
    let mut server = Server(
        Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "-U"])
            .arg(&socket)
            .args(["memory", "160M"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nbdkit"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let uri = format!("nbd+unix:///?socket={}", socket.display());
    let mut ids = daemon.add_file_drives(3, 160 << 20);
    ids.push(daemon.ok(&["pd", "add", &uri]).trim().to_string());
    let pd = daemon.json(&["pd", "describe", &ids[3]]);
    assert_eq!(pd["state"], "unconfigured", "{pd:#}");

    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
    daemon.ok(&["vd", "create", "0", "--size", "128M", "--name", "r"]);
    let vd = daemon.uri("r");
    fio_verify(
        &vd,
        "48M",
        &["--randseed=21", "--end_fsync=1"],
        daemon.dir.path(),
    );

    // The cable is pulled: the remote member fails, the group degrades and keeps serving.
    let _ = server.0.kill();
    let _ = server.0.wait();
    fio_verify(
        &vd,
        "32M",
        &["--randseed=22", "--offset=64M", "--end_fsync=1"],
        daemon.dir.path(),
    );
    daemon.wait_for_group("0", "the group degraded", |group| {
        group["state"] == "degraded"
    });
    let remote = daemon
        .group_members("0")
        .into_iter()
        .find(|member| member["role"] == 3)
        .expect("role 3");
    assert_ne!(remote["state"], "online", "{remote:#}");
    fio_verify(
        &vd,
        "48M",
        &["--randseed=21", "--verify_only"],
        daemon.dir.path(),
    );
}
