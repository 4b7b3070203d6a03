//! A dedicated journal drive (`dg create --journal PD`): the group reports it, keeps it across a
//! crash, replays from it, and when the drive fails the journal moves to the members' own
//! journal areas while the group stays optimal and the data intact.

mod daemon;
use daemon::{Daemon, fio_verify, have, sh};

#[test]
fn a_journal_drive_holds_the_journal_until_it_fails() {
    if !have("fio") {
        return;
    }
    let mut daemon = Daemon::start();
    let ids = daemon.add_file_drives(5, 96 << 20);
    let (members, journal_pd) = ids.split_at(4);
    let journal_pd = &journal_pd[0];
    let mut args = vec![
        "dg",
        "create",
        "--level",
        "5",
        "--chunk",
        "64K",
        "--journal",
    ];
    args.push(journal_pd);
    args.extend(members.iter().map(String::as_str));
    let group = daemon.json(&args);
    assert_eq!(group["journal"]["placement"], "device", "{group:#}");
    assert_eq!(group["journal"]["pd"].to_string(), *journal_pd, "{group:#}");
    assert_eq!(group["journal"]["mode"], "always_on", "{group:#}");
    assert_eq!(group["members"].as_array().unwrap().len(), 4, "{group:#}");
    let pd = daemon.json(&["pd", "describe", journal_pd]);
    assert_eq!(pd["state"], "online", "{pd:#}");
    // A drive in use as a journal cannot be removed.
    assert!(!daemon.run(&["pd", "remove", journal_pd]).status.success());

    daemon.ok(&["vd", "create", "0", "--size", "128M", "--name", "j"]);
    let uri = daemon.uri("j");
    daemon.wait_for_group("0", "journal coverage", |group| {
        group["journal"]["covering"] == true
    });
    fio_verify(
        &uri,
        "48M",
        &["--randseed=11", "--bsrange=4k-64k", "--end_fsync=1"],
        daemon.dir.path(),
    );
    // Partial-stripe writes went through the journal, batched (group commit).
    let metric = |name: &str| {
        daemon
            .metric(&format!("{name}{{dg=\"0\"}}"))
            .unwrap_or_else(|| panic!("no {name} for group 0"))
    };
    let (batches, entries) = (
        metric("tessera_dg_journal_batches_total"),
        metric("tessera_dg_journal_entries_total"),
    );
    assert!(
        batches > 0 && entries >= batches,
        "{batches} batches, {entries} entries"
    );
    assert!(
        metric("tessera_dg_journal_bytes_total") >= entries * 512,
        "journal bytes below a sector per entry"
    );
    assert!(
        metric("tessera_dg_read_modify_writes_total")
            + metric("tessera_dg_reconstruct_writes_total")
            > 0,
        "no partial-stripe update counted"
    );

    // A crash: the journal drive comes back with the group and is replayed from.
    daemon.kill();
    daemon.restart();
    // The group replays while it starts; the log says so once it has.
    daemon.wait_for_group("0", "start-up after the crash", |group| {
        group["state"] != "initializing"
    });
    let group = daemon.json(&["dg", "describe", "0"]);
    assert_eq!(group["journal"]["placement"], "device", "{group:#}");
    assert!(
        daemon.log().contains("journal replayed"),
        "no replay after the crash:\n{}",
        daemon.log()
    );
    fio_verify(
        &uri,
        "48M",
        &["--randseed=11", "--bsrange=4k-64k", "--verify_only"],
        daemon.dir.path(),
    );

    // The journal drive fails: the group stays optimal, the journal moves to the members.
    daemon.ok(&["pd", "fail", journal_pd]);
    daemon.wait_for_group("0", "the journal back on the members", |group| {
        group["journal"]["placement"] == "members" && group["journal"]["covering"] == true
    });
    assert_eq!(daemon.json(&["dg", "describe", "0"])["state"], "optimal");
    fio_verify(
        &uri,
        "32M",
        &["--randseed=12", "--offset=64M", "--end_fsync=1"],
        daemon.dir.path(),
    );
    fio_verify(
        &uri,
        "48M",
        &["--randseed=11", "--bsrange=4k-64k", "--verify_only"],
        daemon.dir.path(),
    );

    // On the members, a one-chunk update journaled alone goes to its stripe's parity member
    // only (while on the device every batch went there, once).
    let home_batches = || {
        daemon
            .metric("tessera_dg_journal_home_batches_total{dg=\"0\"}")
            .expect("home batch counter")
    };
    let before = home_batches();
    let qd1_uri = format!("--uri={uri}");
    sh(
        "fio",
        &[
            "--name=qd1",
            "--ioengine=nbd",
            &qd1_uri,
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=1",
            "--offset=112M",
            "--size=1M",
        ],
    );
    assert!(home_batches() > before, "no batch went to one member alone");
}
