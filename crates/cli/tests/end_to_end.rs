//! The CLI against the API server and the fake controller, through a real socket: the command
//! line -> client -> HTTP -> router -> controller -> answer -> output path. Expected values come
//! from the fake's documented rules (1 GiB drives, 1 MiB data offset, 25% progress per read).

mod common;

use common::{FakeDaemon, tessera};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("not JSON ({error}): {text}"))
}

/// Four drives and a spare, a RAID5 group over three of them, and one virtual drive.
fn populated() -> FakeDaemon {
    let daemon = FakeDaemon::start();
    let ids = daemon
        .run(&["pd", "add", "/d/a", "/d/b", "/d/c", "/d/d"])
        .ok();
    assert_eq!(ids, "0\n1\n2\n3\n");
    assert_eq!(
        daemon.run(&["pd", "add", "--spare", "/d/spare"]).ok(),
        "4\n"
    );
    daemon
        .run(&[
            "dg", "create", "--level", "5", "--chunk", "64K", "--name", "fast", "0", "1", "2",
        ])
        .ok();
    let uri = daemon
        .run(&["vd", "create", "fast", "--size", "256M", "--name", "vd0"])
        .ok();
    assert_eq!(uri, "nbd+unix:///vd0?socket=/run/tessera/nbd.sock\n");
    daemon
}

#[test]
fn acceptance_interface_fields() {
    let daemon = populated();
    let pds = json(&daemon.run(&["pd", "list", "--json"]).ok());
    let pds = pds.as_array().unwrap();
    assert_eq!(pds.len(), 5);
    assert_eq!(pds[1]["id"], 1);
    assert_eq!(pds[1]["path"], "/d/b");
    assert_eq!(pds[1]["state"], "online");
    assert_eq!(pds[1]["size_bytes"], 1u64 << 30);
    assert_eq!(pds[4]["state"], "hot_spare");

    let dg = json(&daemon.run(&["dg", "describe", "fast", "--json"]).ok());
    let member_bytes = ((1u64 << 30) - (1 << 20)) / 65536 * 65536;
    assert_eq!(dg["id"], 0);
    assert_eq!(dg["level"], "raid5");
    assert_eq!(dg["layout"], "left-symmetric");
    assert_eq!(dg["state"], "optimal");
    assert_eq!(dg["chunk_bytes"], 65536);
    assert_eq!(dg["size_bytes"], 2 * member_bytes);
    let members = dg["members"].as_array().unwrap();
    for (role, member) in members.iter().enumerate() {
        assert_eq!(member["pd"], role);
        assert_eq!(member["role"], role);
        assert_eq!(member["state"], "online");
        assert_eq!(member["data_offset_bytes"], 1 << 20);
        assert_eq!(member["path"], ["/d/a", "/d/b", "/d/c"][role]);
    }

    let vd = json(&daemon.run(&["vd", "describe", "vd0", "--json"]).ok());
    assert_eq!(vd["name"], "vd0");
    assert_eq!(vd["size_bytes"], 256u64 << 20);
    assert_eq!(vd["dg"], 0);
    assert_eq!(vd["offset_bytes"], 0);
    assert_eq!(
        vd["nbd_uri"],
        "nbd+unix:///vd0?socket=/run/tessera/nbd.sock"
    );

    let line = daemon.run(&["pd", "fail", "1"]).ok();
    assert_eq!(
        line,
        "physical drive 1: failed; drive group 0 (fast): degraded\n"
    );
    let dg = json(&daemon.run(&["dg", "describe", "0", "--json"]).ok());
    assert_eq!(dg["state"], "degraded");
    assert_eq!(dg["members"][1]["state"], "failed");
}

#[test]
fn human_output() {
    let daemon = populated();
    assert_eq!(
        daemon.run(&["pd", "list"]).ok(),
        "\
ID  STATE            SIZE  KIND  DG  ROLE  SPARE FOR  PATH
 0  online        1.0 GiB  file   0     0  -          /d/a
 1  online        1.0 GiB  file   0     1  -          /d/b
 2  online        1.0 GiB  file   0     2  -          /d/c
 3  unconfigured  1.0 GiB  file   -     -  -          /d/d
 4  hot_spare     1.0 GiB  file   -     -  any        /d/spare
"
    );
    assert_eq!(
        daemon.run(&["dg", "list"]).ok(),
        "\
ID  NAME  LEVEL  STATE       SIZE     FREE  CHUNK  MEMBERS  VDS  ACTIVITY
 0  fast  raid5  optimal  2.0 GiB  1.7 GiB    64K      3/3    1  -
"
    );
    assert_eq!(
        daemon.run(&["vd", "list"]).ok(),
        "\
NAME  DG       SIZE  KIND   CONNS  NBD URI
vd0    0  256.0 MiB  thick      0  nbd+unix:///vd0?socket=/run/tessera/nbd.sock
"
    );
    let describe = daemon.run(&["dg", "describe", "fast"]).ok();
    assert!(
        describe.starts_with("Drive group 0 (fast)\n  level:           raid5 (left-symmetric)\n"),
        "{describe}"
    );
    assert!(
        describe.contains("\n  size:            2.0 GiB (2145386496 bytes), 1.7 GiB free\n"),
        "{describe}"
    );
    assert!(describe.contains("\n  chunk:           64K (65536 bytes)\n"));
    assert!(describe.contains("\n  virtual drives:  vd0\n"));
    assert!(describe.ends_with(
        "ROLE  PD  STATE   DATA OFFSET  PATH\n   0   0  online      1.0 MiB  /d/a\n   1   1  online      1.0 MiB  /d/b\n   2   2  online      1.0 MiB  /d/c\n"
    ), "{describe}");
    let info = daemon.run(&["info"]).ok();
    assert!(info.starts_with(&format!("Tessera daemon {}\n", env!("CARGO_PKG_VERSION"))));
    assert!(
        info.contains("pq_gen     scalar  scalar     naive 0.5, scalar 4.0\n"),
        "{info}"
    );
    let info_json = json(&daemon.run(&["info", "--json"]).ok());
    assert_eq!(info_json["parity_engines"][0]["kind"], "cpu");
}

#[test]
fn api_errors_print_the_message_and_exit_1() {
    let daemon = populated();
    let line = daemon
        .run(&["vd", "create", "0", "--size", "10T", "--name", "big"])
        .fails(1);
    assert_eq!(
        line,
        "tessera: drive group 0 has 1876951040 bytes free, 10995116277760 asked"
    );
    assert_eq!(
        daemon.run(&["dg", "delete", "fast"]).fails(1),
        "tessera: drive group fast holds virtual drives (vd0); delete them or force"
    );
    assert_eq!(
        daemon.run(&["pd", "describe", "9"]).fails(1),
        "tessera: no physical drive 9"
    );
    assert_eq!(
        daemon.run(&["dg", "describe", "slow"]).fails(1),
        "tessera: no drive group slow"
    );
    assert_eq!(
        daemon.run(&["pd", "remove", "3", "0"]).fails(1),
        "tessera: physical drive 0 is a member of drive group 0; nothing was removed"
    );
    // Nothing was removed: drive 3 is still there.
    assert_eq!(
        json(&daemon.run(&["pd", "describe", "3", "--json"]).ok())["id"],
        3
    );
    daemon.controller.set_connections("vd0", 1);
    assert_eq!(
        daemon.run(&["vd", "delete", "vd0"]).fails(1),
        "tessera: virtual drive vd0 has 1 client connection(s); disconnect them or force"
    );
    assert_eq!(
        daemon.run(&["vd", "delete", "vd0", "--force"]).ok(),
        "deleted virtual drive vd0\n"
    );
    assert_eq!(
        daemon.run(&["dg", "delete", "fast"]).ok(),
        "deleted drive group fast\n"
    );
    assert_eq!(
        daemon.run(&["pd", "remove", "3", "0"]).ok(),
        "removed physical drive 3\nremoved physical drive 0\n"
    );
}

#[test]
fn pd_add_adds_all_or_nothing() {
    let daemon = FakeDaemon::start();
    let line = daemon
        .run(&["pd", "add", "/d/a", "/d/b", "/nonexistent/c"])
        .fails(1);
    assert_eq!(
        line,
        "tessera: cannot add /nonexistent/c: cannot open /nonexistent/c: No such file or directory (removed again the drives added before it: 0, 1)"
    );
    assert_eq!(
        json(&daemon.run(&["pd", "list", "--json"]).ok()),
        json("[]")
    );
    let added = json(&daemon.run(&["pd", "add", "--json", "/d/a"]).ok());
    assert_eq!(added[0]["path"], "/d/a");
    assert_eq!(added[0]["id"], 2);
}

#[test]
fn scrub_and_rebuild_with_wait_show_progress_lines_off_a_terminal() {
    let daemon = populated();
    let out = daemon
        .run(&["dg", "scrub", "fast", "--wait", "--poll-ms", "10"])
        .ok();
    assert_eq!(
        out,
        "\
drive group 0: scrub check: 0.0%, rate 30%, ETA estimating, 0 mismatches, 0 repaired
drive group 0: scrub check: 25.0%, rate 30%, ETA 7 s, 0 mismatches, 0 repaired
drive group 0: scrub check: 50.0%, rate 30%, ETA 5 s, 0 mismatches, 0 repaired
drive group 0: scrub check: 75.0%, rate 30%, ETA 2 s, 0 mismatches, 0 repaired
scrub (check) of drive group 0 (fast) finished 2023-11-14 22:13:20Z: 0 mismatches, 0 repaired, 0 unrecoverable
"
    );

    daemon.run(&["pd", "fail", "2"]).ok();
    let replaced = daemon.run(&["pd", "replace", "2", "4"]).ok();
    assert_eq!(
        replaced,
        "drive group 0: rebuilding physical drive 4 (role 2): 0.0%, rate 30%, ETA estimating\n"
    );
    daemon
        .run(&["dg", "set", "fast", "--rebuild-rate", "60"])
        .ok();
    let run = daemon.run(&[
        "dg",
        "describe",
        "fast",
        "--wait",
        "--poll-ms",
        "10",
        "--json",
    ]);
    assert_eq!(run.code, 0);
    // With --json the progress goes to standard error, keeping standard output one document.
    assert_eq!(
        run.stderr,
        "\
drive group 0: rebuilding physical drive 4 (role 2): 25.0%, rate 60%, ETA 7 s
drive group 0: rebuilding physical drive 4 (role 2): 50.0%, rate 60%, ETA 5 s
drive group 0: rebuilding physical drive 4 (role 2): 75.0%, rate 60%, ETA 2 s
"
    );
    let dg = json(&run.stdout);
    assert_eq!(dg["state"], "optimal");
    assert_eq!(dg["rebuild"], Value::Null);
    assert_eq!(dg["rebuild_rate_percent"], 60);
    assert_eq!(dg["members"][2]["pd"], 4);

    let events = json(&daemon.run(&["events", "--json", "--since", "9"]).ok());
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["member_failed", "rebuild_started", "rebuild_finished"]
    );
    let table = daemon.run(&["events", "--since", "11"]).ok();
    assert_eq!(
        table,
        "\
SEQ  TIME                  SEVERITY  KIND              MESSAGE
 12  2023-11-14 22:13:32Z  info      rebuild_finished  rebuild of drive group 0 onto physical drive 4 finished
"
    );
}

#[test]
fn absent_daemon_is_one_clear_line_and_exit_1() {
    let directory = tempfile::tempdir().unwrap();
    let stale = directory.path().join("api.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let line = tessera(&stale, &["pd", "list"]).fails(1);
    assert_eq!(
        line,
        format!(
            "tessera: cannot reach the Tessera daemon at {}: connection refused — is `tessera serve` running?",
            stale.display()
        )
    );
    // --api-socket wins over the environment.
    let daemon = FakeDaemon::start();
    let socket = daemon.socket.to_str().unwrap();
    let out = tessera(&stale, &["--api-socket", socket, "pd", "list"]).ok();
    assert_eq!(
        out,
        "no physical drives (add one with `tessera pd add PATH`)\n"
    );
    let out = tessera(&stale, &["dg", "list", "--api-socket", socket]).ok();
    assert_eq!(
        out,
        "no drive groups (create one with `tessera dg create --level L PD...`)\n"
    );
}

#[test]
fn bench_parity_runs_without_a_daemon() {
    let nowhere = std::path::Path::new("/nonexistent/api.sock");
    let rows = json(
        &tessera(
            nowhere,
            &[
                "bench", "parity", "--json", "--kernel", "scalar", "--op", "xor",
            ],
        )
        .ok(),
    );
    let rows = rows.as_array().unwrap();
    // Two stripe shapes (4 and 8 data chunks), each cache-resident and from DRAM.
    assert_eq!(rows.len(), 4);
    for row in rows {
        assert_eq!(row["kernel"], "scalar");
        assert_eq!(row["op"], "xor");
        assert!(row["gbps"].as_f64().unwrap() > 0.0);
    }
    let table = tessera(
        nowhere,
        &["bench", "parity", "--kernel", "naive", "--op", "pq"],
    )
    .ok();
    assert!(table.starts_with("Parity kernels vs ISA-L"), "{table}");
    assert_eq!(
        table
            .lines()
            .filter(|line| line.starts_with("naive "))
            .count(),
        4
    );
}

#[test]
fn events_follow_prints_new_events_as_json_lines() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let daemon = FakeDaemon::start();
    daemon.run(&["pd", "add", "/d/a"]).ok();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["events", "--follow", "--json", "--poll-ms", "10"])
        .env("TESSERA_API_SOCKET", &daemon.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = json(&lines.next().unwrap().unwrap());
    assert_eq!(
        (first["seq"].as_u64(), first["kind"].as_str()),
        (Some(1), Some("pd_added"))
    );
    daemon.run(&["pd", "add", "/d/b"]).ok();
    let second = json(&lines.next().unwrap().unwrap());
    assert_eq!(second["seq"], 2);
    assert_eq!(second["message"], "physical drive 1 added: /d/b");
    child.kill().unwrap();
    child.wait().unwrap();
}
