//! Hostile NBD input against the daemon, with a hand-written client: each bad request gets the
//! protocol's answer (an error, or the connection closed), and nothing else is disturbed.

mod daemon;
use daemon::Daemon;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use tessera_nbd::proto::{Command, CommandFlags, Errno};
use tessera_nbd::{Client, Request, encode_request};

const MIB: u64 = 1 << 20;

/// A raw transmission-phase connection: the oldest handshake a fixed-newstyle client can do
/// (NBD_OPT_EXPORT_NAME, simple replies), written out by hand.
fn raw_connection(daemon: &Daemon, export: &str) -> UnixStream {
    let mut stream = UnixStream::connect(daemon.nbd_socket()).expect("connect");
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    assert_eq!(&greeting[8..16], b"IHAVEOPT");
    let flags = u16::from_be_bytes([greeting[16], greeting[17]]);
    assert_eq!(flags & 3, 3, "fixed newstyle and no-zeroes offered");
    stream.write_all(&3u32.to_be_bytes()).unwrap();
    let mut option = Vec::new();
    option.extend_from_slice(b"IHAVEOPT");
    option.extend_from_slice(&1u32.to_be_bytes());
    option.extend_from_slice(&(export.len() as u32).to_be_bytes());
    option.extend_from_slice(export.as_bytes());
    stream.write_all(&option).unwrap();
    let mut answer = [0u8; 10];
    stream.read_exact(&mut answer).unwrap();
    stream
}

fn send(stream: &mut UnixStream, request: Request, payload: &[u8]) {
    let mut bytes = Vec::new();
    encode_request(&request, &mut bytes);
    bytes.extend_from_slice(payload);
    stream.write_all(&bytes).unwrap();
}

/// Reads one simple reply: (cookie, error).
fn simple_reply(stream: &mut UnixStream) -> (u64, u32) {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).unwrap();
    assert_eq!(
        &header[..4],
        &0x6744_6698u32.to_be_bytes(),
        "simple reply magic"
    );
    let error = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let cookie = u64::from_be_bytes(header[8..16].try_into().unwrap());
    (cookie, error)
}

fn request(command: Command, cookie: u64, offset_bytes: u64, length_bytes: u32) -> Request {
    Request {
        flags: CommandFlags::NONE,
        command,
        cookie,
        offset_bytes,
        length_bytes,
    }
}

fn closed(stream: &mut UnixStream) -> bool {
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0) | Err(_))
}

#[test]
fn bad_requests_get_protocol_answers_and_disturb_nothing() {
    let daemon = Daemon::start();
    daemon.group_with_vd("5", 3, 64 << 20, "target", 16 * MIB);
    // Several writers at once, so the raw connections below may write beside `good`.
    daemon.ok(&["vd", "set", "target", "--multi-conn", "on"]);
    // Known content through a well-behaved client.
    let mut good = Client::connect_str(&daemon.uri("target")).unwrap();
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i * 7 % 251) as u8).collect();
    good.write_at(&pattern, 0, false).unwrap();
    good.flush().unwrap();

    let mut stream = raw_connection(&daemon, "target");
    send(&mut stream, request(Command::Read, 1, 16 * MIB, 4096), &[]);
    assert_eq!(
        simple_reply(&mut stream),
        (1, Errno::Inval.to_u32()),
        "read past the end"
    );
    send(
        &mut stream,
        request(Command::Write, 2, 16 * MIB - 512, 1024),
        &[0u8; 1024],
    );
    assert_eq!(
        simple_reply(&mut stream),
        (2, Errno::NoSpc.to_u32()),
        "write past the end"
    );
    send(&mut stream, request(Command::Unknown(77), 3, 0, 0), &[]);
    assert_eq!(
        simple_reply(&mut stream),
        (3, Errno::Inval.to_u32()),
        "unknown command"
    );
    send(&mut stream, request(Command::Read, 4, 100, 512), &[]);
    assert_eq!(
        simple_reply(&mut stream),
        (4, Errno::Inval.to_u32()),
        "misaligned read"
    );
    // The connection still works after the errors.
    send(&mut stream, request(Command::Flush, 5, 0, 0), &[]);
    assert_eq!(simple_reply(&mut stream), (5, 0));

    // Bad magic: the connection is closed.
    let mut bad_magic = raw_connection(&daemon, "target");
    bad_magic.write_all(&[0xde; 28]).unwrap();
    assert!(closed(&mut bad_magic), "bad magic closes the connection");

    // An absurd payload length: closed, without reading gigabytes.
    let mut oversize = raw_connection(&daemon, "target");
    send(&mut oversize, request(Command::Write, 6, 0, u32::MAX), &[]);
    assert!(
        closed(&mut oversize),
        "an absurd payload closes the connection"
    );

    // An abrupt disconnect in the middle of a write payload.
    let mut abrupt = raw_connection(&daemon, "target");
    send(
        &mut abrupt,
        request(Command::Write, 7, 0, 65536),
        &[0xee; 1000],
    );
    drop(abrupt);

    // Nothing else was disturbed: the data and other connections are intact.
    let mut back = vec![0u8; MIB as usize];
    good.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern);
    let mut fresh = Client::connect_str(&daemon.uri("target")).unwrap();
    let mut again = vec![0u8; 4096];
    fresh.read_at(&mut again, 4096).unwrap();
    assert_eq!(&again[..], &pattern[4096..8192]);
}

#[test]
fn connection_floods_and_stalled_handshakes_are_cut_off() {
    let daemon = Daemon::start();
    daemon.group_with_vd("5", 3, 64 << 20, "target", 16 * MIB);
    let mut good = Client::connect_str(&daemon.uri("target")).unwrap();
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i * 13 % 241) as u8).collect();
    good.write_at(&pattern, 0, false).unwrap();
    good.flush().unwrap();

    // Stalled handshakes: one client says nothing after the greeting, one stops half-way
    // through its flags.
    let mut silent = UnixStream::connect(daemon.nbd_socket()).unwrap();
    let mut half = UnixStream::connect(daemon.nbd_socket()).unwrap();
    let stalled_at = std::time::Instant::now();
    let mut greeting = [0u8; 18];
    silent.read_exact(&mut greeting).unwrap();
    half.read_exact(&mut greeting).unwrap();
    half.write_all(&[0, 0]).unwrap();

    // A flood: 1,500 connections at once. The daemon keeps 1,024 and closes the rest.
    let flood: Vec<UnixStream> = (0..1500)
        .map(|_| UnixStream::connect(daemon.nbd_socket()).expect("connect"))
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let refused = daemon
            .metric("tessera_nbd_connections_refused_total")
            .unwrap_or(0);
        if refused >= 1500 + 3 - 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {refused} connections refused; open: {:?}",
            daemon.metric("tessera_nbd_connections")
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(daemon.metric("tessera_nbd_connections"), Some(1024));
    // The serving client is unaffected by the flood.
    let mut back = vec![0u8; MIB as usize];
    good.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern);
    drop(flood);

    // Handshakes that stall are closed after 10 s; the serving connection stays.
    for stream in [&mut silent, &mut half] {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => {}
            Err(error)
                if !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("a stalled handshake was kept, or answered: {other:?}"),
        }
    }
    let waited = stalled_at.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(9),
        "closed after {waited:?}, before the handshake deadline"
    );
    assert!(
        daemon
            .metric("tessera_nbd_handshake_timeouts_total")
            .unwrap_or(0)
            >= 2
    );
    good.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern, "the serving client reads on");
    let mut fresh =
        Client::connect_str(&daemon.uri("target")).expect("a new client after the flood");
    fresh.read_at(&mut back, 0).unwrap();
    assert_eq!(back, pattern);
}
