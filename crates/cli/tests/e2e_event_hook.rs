//! The event command hook on a running daemon: a member failure reaches the hook as JSON on its
//! standard input and in its environment; events below the chosen severity do not.

mod daemon;
use daemon::Daemon;

#[test]
fn a_member_failure_reaches_the_hook() {
    let scratch = tempfile::tempdir().unwrap();
    let seen = scratch.path().join("events.jsonl");
    let kinds = scratch.path().join("kinds.txt");
    let hook = format!(
        "cat >> {}; echo \"$TESSERA_EVENT_SEVERITY $TESSERA_EVENT_KIND\" >> {}",
        seen.display(),
        kinds.display()
    );
    let daemon = Daemon::start_with(&["--event-hook", &hook, "--event-hook-severity", "warning"]);
    daemon.group_with_vd("5", 3, 64 << 20, "hooked", 8 << 20);
    let member = daemon.group_members("0")[1]["pd"].to_string();
    daemon.ok(&["pd", "fail", &member]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&kinds).unwrap_or_default();
        if text.contains("pd_failed") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(text.lines().any(|line| line == "error pd_failed"), "{text}");
    // Info events (the group and drive created) stay below the threshold.
    assert!(!text.contains("info"), "{text}");
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON event per line"))
        .collect();
    let failed = events
        .iter()
        .find(|event| event["kind"] == "pd_failed")
        .expect("the failure event");
    assert_eq!(failed["severity"], "error");
    assert_eq!(failed["pd"].to_string(), member);
    // The same event as the API shows it.
    let api = daemon.json(&["events"]);
    assert!(
        api.as_array()
            .unwrap()
            .iter()
            .any(|event| event["seq"] == failed["seq"] && event["kind"] == "pd_failed")
    );
}
