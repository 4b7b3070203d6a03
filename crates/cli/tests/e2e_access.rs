//! Export access control per virtual drive, end to end: Unix-socket clients by user id, TCP
//! clients by network, read-only exports, one writer at a time unless multi-connection is on,
//! revocation closing connections, and the rules kept across a restart.

mod daemon;
use daemon::{Daemon, have, nbdinfo_opens};
use tessera_nbd::proto::TransmissionFlags;
use tessera_nbd::{Client, ClientError};

const MIB: u64 = 1 << 20;

fn my_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn free_tcp_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

fn flags(client: &Client) -> TransmissionFlags {
    client.details().transmission_flags
}

fn is_read_only(client: &Client) -> bool {
    flags(client).0 & TransmissionFlags::READ_ONLY.0 != 0
}

#[test]
fn access_rules_admit_refuse_and_limit_writers() {
    let port = free_tcp_port();
    let listen = format!("127.0.0.1:{port}");
    let mut daemon = Daemon::start_with(&["--nbd-listen", &listen]);
    let ids = daemon.add_file_drives(3, 64 << 20);
    let mut args = vec!["dg", "create", "--level", "5", "--chunk", "64K"];
    args.extend(ids.iter().map(String::as_str));
    daemon.ok(&args);
    let other_uid = format!("uid:{}", my_uid() + 4242);
    let my_uid_rule = format!("uid:{}", my_uid());
    let vd = daemon.json(&[
        "vd", "create", "0", "--size", "16M", "--name", "guarded", "--allow", &other_uid,
    ]);
    assert_eq!(vd["access"]["allow"][0], other_uid.as_str(), "{vd:#}");
    let unix_uri = daemon.uri("guarded");
    let tcp_uri = format!("nbd://{listen}/guarded");

    // Unix socket, by user id: refused with NBD_REP_ERR_POLICY, then admitted.
    match Client::connect_str(&unix_uri) {
        Err(ClientError::Handshake(error)) => {
            let text = error.to_string();
            assert!(text.contains("not allowed"), "{text}");
        }
        other => panic!(
            "a client outside the rules connected: {:?}",
            other.map(|_| ())
        ),
    }
    if have("nbdinfo") {
        assert!(!nbdinfo_opens(&unix_uri), "nbdinfo was let in");
    }
    // Nor is the drive listed to it, while an open drive is.
    daemon.ok(&["vd", "create", "0", "--size", "4M", "--name", "open"]);
    if have("nbdinfo") {
        let list = daemon::sh(
            "nbdinfo",
            &[
                "--list",
                &format!("nbd+unix://?socket={}", daemon.nbd_socket().display()),
            ],
        );
        assert!(list.contains("open") && !list.contains("guarded"), "{list}");
    }
    let allow_me_and = |network: &str| {
        daemon.ok(&[
            "vd",
            "set",
            "guarded",
            "--allow",
            &my_uid_rule,
            "--allow",
            network,
        ]);
    };
    allow_me_and("net:10.0.0.0/8");
    let mut writer = Client::connect_str(&unix_uri).expect("admitted by uid");
    assert!(!is_read_only(&writer), "the first client writes");
    if have("nbdinfo") {
        assert!(nbdinfo_opens(&unix_uri), "nbdinfo refused by its uid");
    }
    // TCP from 127.0.0.1 matches no rule (uid rules are for the Unix socket).
    assert!(
        Client::connect_str(&tcp_uri).is_err(),
        "TCP client outside 10/8 let in"
    );

    // One writer at a time: a second client reads only; with multi-conn both write.
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i % 253) as u8).collect();
    writer.write_at(&pattern, 0, false).expect("write");
    writer.flush().unwrap();
    let mut reader = Client::connect_str(&unix_uri).expect("second client");
    assert!(is_read_only(&reader), "a second writer was allowed");
    assert!(reader.write_at(&pattern, MIB, false).is_err());
    let mut back = vec![0u8; MIB as usize];
    reader.read_at(&mut back, 0).unwrap();
    assert_eq!(
        back, pattern,
        "the second client reads the first one's data"
    );
    assert_eq!(flags(&writer).0 & TransmissionFlags::CAN_MULTI_CONN.0, 0);
    reader.disconnect().unwrap();
    daemon.ok(&["vd", "set", "guarded", "--multi-conn", "on"]);
    let mut second = Client::connect_str(&unix_uri).expect("second writer");
    assert!(!is_read_only(&second));
    assert_ne!(flags(&second).0 & TransmissionFlags::CAN_MULTI_CONN.0, 0);
    second
        .write_at(&pattern, MIB, false)
        .expect("second writer writes");
    second.disconnect().unwrap();

    // TCP by network: 127.0.0.0/8 admits the loopback client.
    allow_me_and("net:127.0.0.0/8");
    let mut tcp = Client::connect_str(&tcp_uri).expect("TCP client by network");
    tcp.read_at(&mut back, MIB).unwrap();
    assert_eq!(back, pattern);
    tcp.disconnect().unwrap();

    // Read-only: writers are closed, new clients cannot write.
    daemon.ok(&["vd", "set", "guarded", "--read-only", "on"]);
    assert!(
        writer.write_at(&pattern, 0, false).is_err(),
        "a writer kept writing to a drive made read-only"
    );
    let mut read_only = Client::connect_str(&unix_uri).expect("read-only client");
    assert!(is_read_only(&read_only));
    read_only.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern);
    if have("qemu-io") {
        let output = std::process::Command::new("qemu-io")
            .args(["-f", "raw", "-c", "write 0 4k", &unix_uri])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() || text.contains("denied") || text.contains("read-only"),
            "qemu-io wrote to a read-only export: {text}"
        );
    }

    // Revocation closes the connections the rules no longer admit.
    daemon.ok(&["vd", "set", "guarded", "--allow", &other_uid]);
    assert!(
        read_only.read_at(&mut back, 0).is_err(),
        "a revoked client kept reading"
    );
    let events = daemon.json(&["events"]);
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|event| event["kind"] == "vd_access_changed"),
        "no event for the access change"
    );
    // Every change through the API is in the event log with who asked for it.
    let who = format!("PATCH /v1/vds/guarded by uid {}", my_uid());
    assert!(
        events.as_array().unwrap().iter().any(|event| {
            event["kind"] == "api_request" && event["message"].as_str().unwrap().starts_with(&who)
        }),
        "no audit event naming the caller: {events:#}"
    );

    // The rules live in the superblock: they are back after a restart.
    daemon.restart();
    let vd = daemon.json(&["vd", "describe", "guarded"]);
    assert_eq!(
        vd["access"]["allow"],
        serde_json::json!([other_uid]),
        "{vd:#}"
    );
    assert_eq!(vd["access"]["read_only"], true);
    assert_eq!(vd["access"]["multi_conn"], true);
    assert!(Client::connect_str(&unix_uri).is_err());
    daemon.ok(&["vd", "set", "guarded", "--allow-any", "--read-only", "off"]);
    let mut client = Client::connect_str(&unix_uri).expect("open to all again");
    client.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern, "the data is intact");

    // A bad rule is refused before it reaches the daemon.
    let refused = daemon.run(&["vd", "set", "guarded", "--allow", "uid:nobody"]);
    assert_eq!(refused.status.code(), Some(2));
}
