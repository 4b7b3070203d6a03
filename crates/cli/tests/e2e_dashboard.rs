//! The read-only web dashboard (`tessera serve --http-listen`), rendered by headless Chromium:
//! the group state it shows matches `tessera dg describe`, before and after a member fails, a
//! thin drive's capacity and compression match `tessera vd describe`, and a screenshot of it is
//! a PNG.

mod daemon;
use daemon::{Daemon, have, wait_timeout};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_nbd::Client;

const CHROMIUM: &str = "chromium";

/// Runs headless Chromium with `args` then `url`; `None` if it fails or hangs.
fn chromium(profile: &Path, args: &[&str], url: &str) -> Option<String> {
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let status = wait_timeout(&mut child, Duration::from_secs(90))?;
    let text = reader.join().ok()?;
    status.success().then_some(text)
}

/// The value of attribute `name` in the start tag of the first element whose start tag
/// contains `hook`.
fn attribute(dom: &str, hook: &str, name: &str) -> Option<String> {
    let at = dom.find(hook)?;
    let tag_start = dom[..at].rfind('<')?;
    let tag_end = at + dom[at..].find('>')?;
    let tag = &dom[tag_start..tag_end];
    let value_start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let value_end = value_start + tag[value_start..].find('"')?;
    Some(tag[value_start..value_end].to_string())
}

/// The text of the first element whose start tag contains `hook` (attributes as the page
/// writes them, e.g. `data-dg="0" data-field="state"`).
fn field(dom: &str, hook: &str) -> Option<String> {
    let at = dom.find(hook)?;
    let rest = &dom[at..];
    let start = rest.find('>')? + 1;
    let end = rest[start..].find('<')? + start;
    Some(rest[start..end].to_string())
}

fn dump(profile: &Path, url: &str) -> String {
    let dom = chromium(profile, &["--dump-dom"], url).expect("chromium --dump-dom failed");
    let polls = dom
        .split_once("data-polls=\"")
        .and_then(|(_, rest)| rest.split('"').next()?.parse::<u32>().ok());
    assert!(
        polls.is_some_and(|n| n > 0),
        "the page never polled the daemon; DOM:\n{dom}"
    );
    dom
}

#[test]
fn dashboard_shows_group_and_member_states() {
    if !have(CHROMIUM) {
        return;
    }
    let profile = tempfile::tempdir().expect("profile dir");
    if chromium(profile.path(), &["--dump-dom"], "about:blank").is_none() {
        eprintln!("SKIPPED: {CHROMIUM} is installed but cannot run headless here");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_with(&["--http-listen", &address]);
    let url = format!("http://{address}/");
    let uri = daemon.group_with_vd("5", 4, 64 << 20, "web", 64 << 20);

    // A thin drive holding compressible data, flushed so that its statistics settle.
    daemon.ok(&[
        "vd",
        "create",
        "0",
        "--size",
        "256M",
        "--name",
        "pool",
        "--thin",
        "--physical",
        "48M",
    ]);
    {
        let mut client = Client::connect_str(&daemon.uri("pool")).expect("NBD connect");
        let text: Vec<u8> = b"tessera thin drive, compressible text block. "
            .iter()
            .copied()
            .cycle()
            .take(4 << 20)
            .collect();
        client.write_at(&text, 0, false).expect("write");
        client.flush().expect("flush");
        client.disconnect().expect("disconnect");
    }

    // Host I/O while the page polls, so the charts have something to draw.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut client = Client::connect_str(&uri).expect("NBD connect");
            let block = vec![0x5a_u8; 64 << 10];
            let mut offset = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                client.write_at(&block, offset, false).expect("write");
                let mut back = vec![0_u8; block.len()];
                client.read_at(&mut back, offset).expect("read");
                offset = (offset + block.len() as u64) % (32 << 20);
                std::thread::sleep(Duration::from_millis(2));
            }
            client.disconnect().expect("disconnect");
        })
    };

    let started = Instant::now();
    let thin_before = daemon.json(&["vd", "describe", "pool"]);
    let dom = dump(profile.path(), &url);
    let group = daemon.json(&["dg", "describe", "0"]);
    assert_eq!(group["state"], "optimal");
    assert_eq!(
        field(&dom, r#"data-dg="0" data-field="state""#).as_deref(),
        group["state"].as_str(),
        "DOM:\n{dom}"
    );
    for member in group["members"].as_array().expect("members") {
        let hook = format!(
            r#"data-dg="0" data-role="{}" data-field="member-state""#,
            member["role"]
        );
        assert_eq!(field(&dom, &hook).as_deref(), member["state"].as_str());
    }
    assert_eq!(
        field(&dom, r#"data-vd="web" data-field="dg""#).as_deref(),
        Some("0")
    );
    // Statistics read before and after the page's: the page shows one of them.
    let after = daemon.json(&["vd", "describe", "pool"]);
    let readings = [&thin_before["stats"], &after["stats"]];
    assert!(
        after["stats"]["compression_ratio"].as_f64().unwrap() > 2.0,
        "the data compresses: {after:#}"
    );
    for (hook, key) in [
        ("logical-used", "logical_used_bytes"),
        ("physical-used", "physical_used_bytes"),
        ("free", "free_bytes"),
    ] {
        let shown = attribute(
            &dom,
            &format!(r#"data-vd="pool" data-field="{hook}""#),
            "data-bytes",
        )
        .unwrap_or_else(|| panic!("no {hook} shown; DOM:\n{dom}"));
        assert!(
            readings
                .iter()
                .any(|stats| stats[key].as_u64() == shown.parse::<u64>().ok()),
            "{hook}: page {shown}, daemon {readings:?}"
        );
    }
    for (hook, key) in [
        ("compression-ratio", "compression_ratio"),
        ("write-amplification", "write_amplification"),
        ("overcommit", "overcommit_ratio"),
    ] {
        let shown = field(&dom, &format!(r#"data-vd="pool" data-field="{hook}""#))
            .and_then(|text| text.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {hook} shown; DOM:\n{dom}"));
        assert!(
            readings
                .iter()
                .any(|stats| (shown - stats[key].as_f64().unwrap()).abs() <= 0.005 + 1e-9),
            "{hook}: page {shown}, daemon {readings:?}"
        );
    }
    let state = field(&dom, r#"data-vd="pool" data-field="thin-state""#);
    assert!(
        readings
            .iter()
            .any(|stats| stats["state"].as_str() == state.as_deref()),
        "thin state: page {state:?}, daemon {readings:?}"
    );
    eprintln!("first dump: {:.1} s", started.elapsed().as_secs_f64());

    let member = &group["members"][1];
    let pd = member["pd"].to_string();
    daemon.ok(&["pd", "fail", &pd]);
    let group = daemon.json(&["dg", "describe", "0"]);
    assert_eq!(group["state"], "degraded");
    let started = Instant::now();
    let dom = dump(profile.path(), &url);
    assert_eq!(
        field(&dom, r#"data-dg="0" data-field="state""#).as_deref(),
        Some("degraded"),
        "DOM:\n{dom}"
    );
    assert_eq!(
        field(
            &dom,
            r#"data-dg="0" data-role="1" data-field="member-state""#
        )
        .as_deref(),
        group["members"][1]["state"].as_str()
    );
    assert_eq!(group["members"][1]["state"], "failed");
    let pd_state = daemon.json(&["pd", "describe", &pd])["state"].clone();
    assert_eq!(
        field(&dom, &format!(r#"data-pd="{pd}" data-field="state""#)).as_deref(),
        pd_state.as_str()
    );
    let events = tessera_api::Client::new(daemon.api_socket())
        .events(0)
        .expect("GET /v1/events");
    let last = events.last().expect("events");
    assert!(
        dom.contains(&format!(
            r#"<tr data-event="{}"><td>{}</td>"#,
            last.seq, last.seq
        )) && dom.contains(&format!(r#"data-field="kind">{}<"#, last.kind)),
        "the newest event ({} {}) is on the page; DOM:\n{dom}",
        last.seq,
        last.kind
    );
    eprintln!("second dump: {:.1} s", started.elapsed().as_secs_f64());

    // Bring the drive back, rebuilding slowly (1% of the host traffic the writer makes), and
    // see the rebuild's progress on the page.
    daemon.ok(&["dg", "set", "0", "--rebuild-rate", "1"]);
    daemon.ok(&["pd", "online", &pd]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.json(&["dg", "describe", "0"])["rebuild"].is_null() {
        assert!(Instant::now() < deadline, "the rebuild did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let dom = dump(profile.path(), &url);
    let group = daemon.json(&["dg", "describe", "0"]);
    if group["rebuild"].is_null() {
        eprintln!("the rebuild finished before the page was read: its progress is not checked");
    } else {
        assert_eq!(
            field(&dom, r#"data-dg="0" data-field="state""#).as_deref(),
            group["state"].as_str(),
            "DOM:\n{dom}"
        );
        let shown = field(&dom, r#"data-dg="0" data-field="rebuild-progress""#)
            .expect("rebuild progress on the page");
        let percent: f64 = shown
            .strip_suffix('%')
            .and_then(|number| number.parse().ok())
            .unwrap_or_else(|| panic!("rebuild progress {shown:?} is not a percentage"));
        let now = group["rebuild"]["progress_percent"]
            .as_f64()
            .expect("progress");
        assert!(
            (0.0..=now).contains(&percent),
            "the page shows {percent}% and the daemon {now}% after"
        );
        assert!(field(&dom, r#"data-dg="0" data-field="rebuild-eta""#).is_some());
    }
    eprintln!("third dump: {:.1} s", started.elapsed().as_secs_f64());

    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    let started = Instant::now();
    let target = format!("--screenshot={}", screenshot.display());
    chromium(
        profile.path(),
        &[&target, "--window-size=1280,900", "--hide-scrollbars"],
        &url,
    )
    .expect("chromium --screenshot failed");
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert!(png.len() > 1000, "screenshot is {} bytes", png.len());
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "screenshot is not a PNG"
    );
    eprintln!(
        "screenshot: {} ({} bytes, {:.1} s)",
        screenshot.display(),
        png.len(),
        started.elapsed().as_secs_f64()
    );

    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    let writes = daemon
        .metric(r#"tessera_vd_writes_total{vd="web",dg="0"}"#)
        .expect("per-drive metrics");
    assert!(writes > 0, "writes counted per virtual drive");
    assert!(
        daemon
            .metric(r#"tessera_vd_reads_total{vd="web",dg="0"}"#)
            .is_some_and(|reads| reads > 0)
    );
}
