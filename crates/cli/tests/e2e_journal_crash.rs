//! The write journal closes the write hole, end to end, on RAID5 and RAID6. fio writes
//! crc32c-verified blocks of mixed sizes through NBD to a group created with `--journal
//! always_on`; the daemon is killed (SIGKILL) in the middle of it, tearing the partial-stripe
//! updates in flight; one member (two on RAID6) is then lost (its file replaced by a blank one)
//! and the daemon restarts on the others. The group must come up degraded with its journal
//! replayed, and every write fio saw acknowledged must read back intact, although the lost
//! members' chunks in the stripes the crash tore can only be rebuilt through those stripes'
//! parity. Some batches go to their stripes' parity members alone (one-chunk updates journaled
//! as partial parity: P on RAID5, P and Q on RAID6); the test checks that the run wrote some. (With `--journal always_off` the same verify
//! pass fails with EIO: the daemon will not reconstruct through the parity of a region awaiting
//! resync.)
//!
//! Which writes were acknowledged. A SIGKILL loses nothing the daemon had handed to the kernel,
//! so every write it acknowledged is on the members; a write in flight may or may not be. fio's
//! own mechanism for this (`verify_state_save` / `verify_state_load`) is not exact in fio 3.33:
//! it saves its state only when the job ends (which it does here: fio is not killed, its
//! in-flight writes fail when the connection drops and the job ends on that error), and the state
//! is the number of writes issued plus the offsets of the last `iodepth` writes completed. The
//! verify pass then trusts every write but the last `iodepth` issued, yet a write held back (say
//! behind another write's stripe lock) can still be in flight after `iodepth` later writes were
//! issued; fio would then check a write that was never acknowledged and report a loss that is
//! not one. So the test keeps an exact record from two logs of the same crash run, which fio
//! writes out when the job ends:
//! - `--write_iolog`: every write in the order fio issued it, which is the order its verify pass
//!   regenerates them in (a write pushed back by the engine is logged again when requeued; the
//!   first entry counts);
//! - the completion-latency log with offsets (`--write_lat_log`, `--log_offset=1`): one line per
//!   write that completed successfully, that is, whose NBD reply fio received.
//!
//! fio's random map writes no block twice in a pass, so (offset, length) names a write. K is the
//! length of the longest run of issued writes, from the first, that were all acknowledged. The
//! verify pass is the same job with `verify_only` and `number_ios=K`: fio regenerates exactly
//! those K writes (same seed: same offsets, sizes and data) and reads each back. Every write it
//! checks was acknowledged, it checks all acknowledged writes but the few completed after the
//! first write that was not, and the test asserts it read back exactly the bytes of those K.

mod daemon;
use daemon::{Daemon, have, wait_timeout};

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MEMBER_BYTES: u64 = 256 << 20;
/// The virtual drive, and the range fio's pass covers.
const VD_BYTES: u64 = 768 << 20;
/// The daemon is killed once its group has taken in this many bytes of writes: a fifth of the
/// pass, so fio is still writing, with all of its queue depth in flight.
const CRASH_AFTER_BYTES: u64 = 160 << 20;
const IODEPTH: &str = "16";

/// A write fio issued: offset and length in bytes.
type Write = (u64, u64);

/// The options both fio runs share: they must generate the same writes with the same data.
fn fio_job(uri: &str) -> Vec<String> {
    vec![
        "--name=journal".to_string(),
        "--ioengine=nbd".into(),
        format!("--uri={uri}"),
        format!("--size={VD_BYTES}"),
        "--rw=randwrite".into(),
        "--bsrange=4k-128k".into(),
        "--randseed=4242".into(),
        "--verify=crc32c".into(),
        // The record of acknowledged writes is the two logs (see the top of the file).
        "--verify_state_save=0".into(),
    ]
}

#[test]
fn acknowledged_writes_survive_a_crash_and_a_lost_member() {
    // Left-symmetric layouts rotate data and parity over every member: any role will do.
    crash_then_lose(5, 5, &[2]);
}

#[test]
fn acknowledged_writes_survive_a_crash_and_two_lost_members_on_raid6() {
    crash_then_lose(6, 6, &[1, 4]);
}

/// A group of `members` at `level` with the journal always on: fio writes, the daemon is
/// killed, `lost_roles` are lost, and every acknowledged write must verify.
fn crash_then_lose(level: u8, members: usize, lost_roles: &[usize]) {
    if !have("fio") {
        return;
    }
    let started = Instant::now();
    let mut daemon = Daemon::start();
    let scratch = daemon.dir.path().to_path_buf();
    let ids = daemon.add_file_drives(members, MEMBER_BYTES);
    let level = level.to_string();
    let mut args = vec![
        "dg",
        "create",
        "--level",
        &level,
        "--chunk",
        "64K",
        "--journal",
        "always_on",
    ];
    args.extend(ids.iter().map(String::as_str));
    let dg = daemon.json(&args)["id"].to_string();
    daemon.ok(&[
        "vd",
        "create",
        &dg,
        "--size",
        &VD_BYTES.to_string(),
        "--name",
        "journaled",
    ]);
    let uri = daemon.uri("journaled");
    let group_members = daemon.group_members(&dg);
    let lost: Vec<String> = lost_roles
        .iter()
        .map(|&role| {
            group_members[role]["path"]
                .as_str()
                .expect("member path")
                .to_string()
        })
        .collect();
    // Replay makes every stripe consistent only if the journal covers the group.
    wait_for(&daemon, "the journal to cover the group", || {
        let journal = &daemon.json(&["dg", "describe", &dg])["journal"];
        journal["active"] == true && journal["covering"] == true
    });

    // Write until the group has taken CRASH_AFTER_BYTES, then kill the daemon under fio.
    let issued_log = scratch.join("issued.log");
    let fio_log = scratch.join("fio-crash.log");
    let mut fio = Command::new("fio")
        .args(fio_job(&uri))
        .arg(format!("--iodepth={IODEPTH}"))
        .arg("--do_verify=0")
        .arg(format!("--write_iolog={}", issued_log.display()))
        .arg(format!(
            "--write_lat_log={}",
            scratch.join("acked").display()
        ))
        .arg("--log_offset=1")
        .current_dir(&scratch)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&fio_log).expect("fio log"))
        .stderr(std::fs::File::create(scratch.join("fio-crash.err")).expect("fio log"))
        .spawn()
        .expect("start fio");
    let series = format!("tessera_dg_host_write_bytes_total{{dg=\"{dg}\"}}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = fio.try_wait().expect("wait for fio") {
            panic!(
                "fio ended ({status}) before the crash:\n{}",
                read(&fio_log) + &read(&scratch.join("fio-crash.err"))
            );
        }
        if daemon.metric(&series).unwrap_or(0) >= CRASH_AFTER_BYTES {
            break;
        }
        if Instant::now() > deadline {
            let _ = fio.kill();
            panic!("the group took in less than {CRASH_AFTER_BYTES} bytes in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let home_batches = daemon
        .metric(&format!(
            "tessera_dg_journal_home_batches_total{{dg=\"{dg}\"}}"
        ))
        .expect("home batch counter");
    assert!(
        home_batches > 0,
        "no batch went to its parity members alone before the crash"
    );
    daemon.kill();
    let status = wait_timeout(&mut fio, Duration::from_secs(60))
        .expect("fio did not end within 60 s of losing its NBD server");
    let fio_output = read(&fio_log) + &read(&scratch.join("fio-crash.err"));
    assert!(
        !status.success(),
        "fio succeeded although its server died mid-run:\n{fio_output}"
    );

    // What fio issued and what it saw acknowledged.
    let issued = issued_writes(&issued_log);
    let acked = acknowledged_writes(&completion_log(&scratch));
    let issued_set: HashSet<Write> = issued.iter().copied().collect();
    assert!(
        acked.iter().all(|write| issued_set.contains(write)),
        "fio's completion log names writes its issue log does not"
    );
    let issued_bytes: u64 = issued.iter().map(|w| w.1).sum();
    assert!(
        issued_bytes < VD_BYTES,
        "fio finished its pass ({issued_bytes} bytes): the crash came too late"
    );
    let verified = issued.iter().take_while(|w| acked.contains(w)).count();
    let verified_bytes: u64 = issued[..verified].iter().map(|w| w.1).sum();
    let acked_later = issued[verified..]
        .iter()
        .filter(|w| acked.contains(w))
        .count();
    eprintln!(
        "crash after {:.1} s: {} writes issued ({issued_bytes} bytes), {} acknowledged; \
         verifying the first {verified} ({verified_bytes} bytes), {acked_later} acknowledged \
         after the first that was not; {home_batches} batches on their parity members alone",
        started.elapsed().as_secs_f64(),
        issued.len(),
        acked.len(),
    );
    assert!(
        verified_bytes >= CRASH_AFTER_BYTES / 2,
        "only {verified_bytes} bytes of acknowledged writes to verify:\n{fio_output}"
    );

    // Lose members: each file is replaced by a blank one of the same size.
    for lost in &lost {
        std::fs::remove_file(lost).expect("remove member");
        std::fs::File::create(lost)
            .and_then(|file| file.set_len(MEMBER_BYTES))
            .expect("blank member");
    }

    // Restart on the others: the group comes up degraded, its journal replayed.
    daemon.restart();
    wait_for(&daemon, "the group to start", || {
        daemon.json(&["dg", "describe", &dg])["state"] != "initializing"
    });
    let group = daemon.json(&["dg", "describe", &dg]);
    assert_eq!(group["state"], "degraded", "{group:#}");
    for &role in lost_roles {
        assert_eq!(group["members"][role]["state"], "missing", "{group:#}");
    }
    let replayed = daemon
        .json(&["events"])
        .as_array()
        .expect("events")
        .iter()
        .find(|event| event["kind"] == "journal_replayed")
        .cloned()
        .unwrap_or_else(|| panic!("no journal_replayed event; log:\n{}", daemon.log()));
    assert_eq!(
        replayed["severity"], "info",
        "the journal was not replayed whole: {replayed}"
    );
    assert!(
        daemon.log().contains("journal replayed"),
        "{}",
        daemon.log()
    );
    eprintln!("{}", replayed["message"].as_str().unwrap_or_default());

    // Every acknowledged write of the first K reads back intact from the degraded group.
    let report = scratch.join("fio-verify.json");
    let mut fio = Command::new("fio")
        .args(fio_job(&uri))
        .arg(format!("--iodepth={IODEPTH}"))
        .arg("--do_verify=1")
        .arg("--verify_only=1")
        .arg(format!("--number_ios={verified}"))
        .arg("--verify_fatal=0")
        .arg("--output-format=json")
        .arg(format!("--output={}", report.display()))
        .current_dir(&scratch)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(scratch.join("fio-verify.out")).expect("fio log"))
        .stderr(std::fs::File::create(scratch.join("fio-verify.err")).expect("fio log"))
        .spawn()
        .expect("start fio");
    let status = wait_timeout(&mut fio, Duration::from_secs(120));
    let output =
        truncated(read(&scratch.join("fio-verify.err")) + &read(&scratch.join("fio-verify.out")));
    let status = status.unwrap_or_else(|| panic!("fio's verify pass took over 120 s:\n{output}"));
    let report: serde_json::Value = serde_json::from_str(&read(&report))
        .unwrap_or_else(|e| panic!("fio's report ({status}): {e}\n{output}"));
    let job = &report["jobs"][0];
    assert!(
        status.success() && job["error"] == 0,
        "acknowledged writes did not verify after the crash and the loss of roles \
         {lost_roles:?} ({status}, fio error {}):\n{output}",
        job["error"]
    );
    assert_eq!(
        job["read"]["io_bytes"].as_u64(),
        Some(verified_bytes),
        "fio verified other writes than the {verified} acknowledged ones:\n{output}"
    );
    assert_eq!(daemon.json(&["dg", "describe", &dg])["state"], "degraded");
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}

/// Polls `done` every 50 ms for up to 60 s.
fn wait_for(daemon: &Daemon, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// At most the first 16 KiB of fio's output (a verify pass that fails can print a lot).
fn truncated(mut text: String) -> String {
    if text.len() > 16 << 10 {
        let mut end = 16 << 10;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[...]");
    }
    text
}

/// fio's `--write_iolog` (version 2 or 3: `[usec] FILE write OFFSET LENGTH`): the writes in the
/// order they were issued, each once.
fn issued_writes(path: &Path) -> Vec<Write> {
    let mut seen = HashSet::new();
    let mut writes = Vec::new();
    for line in read(path).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = fields.iter().position(|field| *field == "write") else {
            continue;
        };
        let number = |i: usize| -> u64 {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("bad line in fio's issue log: {line}"))
        };
        let write = (number(at + 1), number(at + 2));
        if seen.insert(write) {
            writes.push(write);
        }
    }
    assert!(!writes.is_empty(), "no writes in {}", path.display());
    writes
}

/// The completion-latency log fio wrote for the `acked` prefix (`acked_clat.1.log`).
fn completion_log(scratch: &Path) -> std::path::PathBuf {
    std::fs::read_dir(scratch)
        .expect("scratch directory")
        .map(|entry| entry.expect("directory entry").path())
        .find(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("acked_clat.") && name.ends_with(".log")
        })
        .unwrap_or_else(|| panic!("fio wrote no completion log in {}", scratch.display()))
}

/// The writes a completion-latency log with offsets lists (`msec, nsec, ddir, bs, offset, ...`;
/// direction 1 is a write): the ones that completed successfully.
fn acknowledged_writes(path: &Path) -> HashSet<Write> {
    let mut writes = HashSet::new();
    for line in read(path).lines() {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 5 || fields[2] != "1" {
            continue;
        }
        let number = |i: usize| -> u64 {
            fields[i]
                .parse()
                .unwrap_or_else(|_| panic!("bad line in fio's completion log: {line}"))
        };
        writes.insert((number(4), number(3)));
    }
    writes
}
