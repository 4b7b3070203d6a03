//! The daemon with `--parity-engine gpu`: the parity of full-stripe writes, rebuild and scrub
//! goes through the dispatcher to the GPU (Mesa's software Vulkan driver in CI), and a RAID6
//! group keeps every block through two member failures and the rebuilds onto spares.

mod daemon;
use daemon::{Daemon, fio_verify, have};

/// Whole stripes (4 x 64 KiB) written in order: their parity is handed out.
const SEQUENTIAL: &[&str] = &["--rw=write", "--bsrange=1M-1M", "--randseed=21"];

/// Polls `tessera info --json` until the parity worker has calibrated its engines.
fn wait_for_calibration(daemon: &Daemon) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let info = daemon.json(&["info"]);
        if info["parity_offload"] == true {
            return info;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "engines never started handing parity out: {info:#}\ndaemon log:\n{}",
            daemon.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The data bytes of handed-out parity work engine `name` computed.
fn engine_bytes(daemon: &Daemon, name: &str) -> u64 {
    let info = daemon.json(&["info"]);
    info["parity_engines"]
        .as_array()
        .expect("parity engines")
        .iter()
        .find(|engine| engine["name"] == name)
        .and_then(|engine| engine["computed_bytes"].as_u64())
        .unwrap_or(0)
}

#[test]
fn raid6_with_parity_on_the_gpu_verifies_through_two_failures_and_rebuilds() {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let daemon = Daemon::start_with(&["--parity-engine", "gpu"]);
    let info = wait_for_calibration(&daemon);
    let gpu = info["parity_engines"]
        .as_array()
        .expect("parity engines")
        .iter()
        .find(|engine| engine["kind"] == "gpu" && engine["failure"].is_null())
        .map(|engine| engine["name"].as_str().expect("name").to_string());
    // Without any adapter the dispatcher computes on the CPU: the data path is still tested,
    // only the GPU's share cannot be.
    let engine = match gpu {
        Some(name) => name,
        None if std::env::var("TESSERA_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("TESSERA_REQUIRE_GPU=1 but no working GPU adapter: {info:#}")
        }
        None => {
            eprintln!(
                "SKIPPED (GPU part): no Vulkan/Metal/DX12 adapter; parity ran on the CPU fallback"
            );
            "cpu".to_string()
        }
    };
    assert_eq!(info["parity_engine"], "gpu");

    let uri = daemon.group_with_vd("6", 6, 64 << 20, "g", 160 << 20);
    fio_verify(
        &uri,
        "96M",
        &[SEQUENTIAL, &["--end_fsync=1"]].concat(),
        daemon.dir.path(),
    );
    // Small random writes beside them (read-modify-write: always on the CPU).
    fio_verify(
        &uri,
        "32M",
        &["--offset=96M", "--randseed=22", "--end_fsync=1"],
        daemon.dir.path(),
    );
    let written = engine_bytes(&daemon, &engine);
    assert!(
        written >= 96 << 20,
        "the {engine} engine computed only {written} bytes of full-stripe parity"
    );
    let offloaded = daemon
        .metric("tessera_dg_parity_offloaded_bytes_total{dg=\"0\"}")
        .expect("offload metric");
    assert!(offloaded >= 96 << 20, "offloaded {offloaded} bytes");

    // Two members fail; two spares take their roles one after the other.
    let spares: Vec<String> = (0..2)
        .map(|i| {
            let path = daemon.path(&format!("spare-{i}.img"));
            std::fs::File::create(&path)
                .and_then(|file| file.set_len(64 << 20))
                .expect("spare file");
            path.display().to_string()
        })
        .collect();
    daemon.ok(&["pd", "add", "--spare", &spares[0], &spares[1]]);
    let members = daemon.group_members("0");
    let first = members[0]["pd"].to_string();
    let third = members[2]["pd"].to_string();
    daemon.ok(&["pd", "fail", &first]);
    daemon.ok(&["pd", "fail", &third]);
    // Reads go on through two lost members (recovery of two data chunks per stripe).
    fio_verify(
        &uri,
        "96M",
        &[SEQUENTIAL, &["--verify_only"]].concat(),
        daemon.dir.path(),
    );
    daemon.wait_for_group("0", "both rebuilds", |group| group["state"] == "optimal");
    let rebuilt = engine_bytes(&daemon, &engine);
    assert!(
        rebuilt > written,
        "the rebuild handed no parity work to {engine} ({rebuilt} bytes in all)"
    );
    fio_verify(
        &uri,
        "96M",
        &[SEQUENTIAL, &["--verify_only"]].concat(),
        daemon.dir.path(),
    );
    fio_verify(
        &uri,
        "32M",
        &["--offset=96M", "--randseed=22", "--verify_only"],
        daemon.dir.path(),
    );

    // A scrub recomputes every stripe's parity on the same engine and finds it all consistent.
    daemon.ok(&["dg", "scrub", "0", "--wait"]);
    let group = daemon.json(&["dg", "describe", "0"]);
    assert_eq!(group["last_scrub"]["completed"], true, "{group:#}");
    assert_eq!(group["last_scrub"]["mismatches"], 0, "{group:#}");
    assert!(
        engine_bytes(&daemon, &engine) > rebuilt,
        "the scrub handed nothing out"
    );
}
