//! The daemon as the systemd unit runs it: `tessera serve --config FILE` and nothing else, then
//! `systemctl stop` (SIGTERM) while a client is connected with writes it never flushed. The
//! daemon must exit 0 having flushed and closed every group: it comes back with the group
//! clean (no resync), the virtual drive in place and every acknowledged write readable.

mod daemon;
use daemon::Daemon;
use tessera_nbd::Client;

/// Bytes that differ at every offset and from run to run of the pattern's seed.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn sigterm_stops_cleanly_with_a_client_connected_and_the_data_survives() {
    let mut daemon = Daemon::start_with_config(
        "event_hook = \"cat >> {dir}/hook.jsonl\"\nevent_hook_severity = \"info\"\n",
    );
    let uri = daemon.group_with_vd("5", 4, 64 << 20, "svc", 48 << 20);

    // Acknowledged but never flushed, and the client still connected when the stop comes.
    let data = pattern(0x7e55e7a, 8 << 20);
    let offset_bytes = 3 << 20;
    let mut client = Client::connect_str(&uri).expect("NBD connect");
    client
        .write_at(&data, offset_bytes, false)
        .expect("NBD write");
    daemon.stop(); // SIGTERM; asserts exit status 0 within 60 s
    let log = daemon.log();
    assert!(
        log.contains("all drive groups stopped cleanly"),
        "daemon log:\n{log}"
    );
    let mut byte = [0u8; 512];
    assert!(
        client.read_at(&mut byte, 0).is_err(),
        "the connection outlived the daemon"
    );

    daemon.restart();
    // Nothing to repair: a group stopped uncleanly resyncs (or replays its journal) first.
    daemon.wait_for_group("0", "the group to start", |group| {
        group["state"] != "resyncing" && group["state"] != "initializing"
    });
    let group = daemon.json(&["dg", "describe", "0"]);
    assert_eq!(group["state"], "optimal", "{group:#}");
    let repairs: Vec<serde_json::Value> = daemon
        .json(&["events"])
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["kind"] == "resync_finished" || event["kind"] == "journal_replayed")
        .cloned()
        .collect();
    assert!(
        repairs.is_empty(),
        "repaired after a clean stop: {repairs:?}"
    );
    assert_eq!(
        daemon.json(&["vd", "describe", "svc"])["size_bytes"],
        48 << 20
    );
    let mut client = Client::connect_str(&uri).expect("NBD connect after restart");
    let mut read = vec![0u8; data.len()];
    client.read_at(&mut read, offset_bytes).expect("NBD read");
    assert!(read == data, "the data written before SIGTERM changed");

    // The hook, configured in the file only, saw the daemon's info events.
    let seen = std::fs::read_to_string(daemon.path("hook.jsonl")).unwrap_or_default();
    let kinds: Vec<String> = seen
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|event| event["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        kinds.iter().any(|kind| kind == "dg_created"),
        "the hook saw {kinds:?}; daemon log:\n{}",
        daemon.log()
    );
}
