//! The bad inputs of issue 4 over real sockets with a hand-written client, and our blocking
//! client against the harness server (Unix and TCP, simple and structured replies, pipelining).
//! After every bad connection, another connection must still work and the data stay intact.

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use support::*;
use tessera_nbd::client::handshake::ClientConfig;
use tessera_nbd::testing::{ConnectionEnd, TestServer, connect_raw};
use tessera_nbd::{Client, ClientError, Errno, ExportInfo, HandshakeConfig};

const SIZE_BYTES: u64 = 4 << 20;

fn server() -> TestServer {
    let mut read_only = ExportInfo::new("ro", SIZE_BYTES);
    read_only.read_only = true;
    TestServer::start(vec![ExportInfo::new("vd0", SIZE_BYTES), read_only]).unwrap()
}

/// Handshake by hand: fixed newstyle, NO_ZEROES, GO; returns the raw stream.
fn raw_session(server: &TestServer, export: &str) -> std::os::unix::net::UnixStream {
    let mut stream = connect_raw(server).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
    let mut hello = vec![0, 0, 0, 3];
    hello.extend(option(OPT_GO, &info_data(export, &[3])));
    stream.write_all(&hello).unwrap();
    // Replies: INFO export, INFO block size, ACK.
    let mut replies = Vec::new();
    while option_replies_complete(&replies) < 3 {
        let mut piece = [0u8; 256];
        let count = stream.read(&mut piece).unwrap();
        assert!(count > 0, "server closed during the handshake");
        replies.extend_from_slice(&piece[..count]);
    }
    assert_eq!(option_replies(&replies).last().unwrap().reply_type, ACK);
    stream
}

fn option_replies_complete(bytes: &[u8]) -> usize {
    let mut count = 0;
    let mut rest = bytes;
    while rest.len() >= 20 {
        let length = u32::from_be_bytes(rest[16..20].try_into().unwrap()) as usize;
        if rest.len() < 20 + length {
            break;
        }
        count += 1;
        rest = &rest[20 + length..];
    }
    count
}

/// Reads one simple reply: (error, cookie).
fn simple_reply(stream: &mut impl Read) -> (u32, u64) {
    let mut reply = [0u8; 16];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..4], &[0x67, 0x44, 0x66, 0x98]);
    (
        u32::from_be_bytes(reply[4..8].try_into().unwrap()),
        u64::from_be_bytes(reply[8..16].try_into().unwrap()),
    )
}

fn assert_closed(stream: &mut impl Read) {
    let mut byte = [0u8; 1];
    assert_eq!(
        stream.read(&mut byte).unwrap(),
        0,
        "the server should have closed the connection"
    );
}

/// Another connection still works and sees the data written before.
fn still_serves(server: &TestServer, expected: &[u8]) {
    let mut client = Client::connect(&server.unix_uri("vd0")).unwrap();
    let mut back = vec![0u8; expected.len()];
    client.read_at(&mut back, 0).unwrap();
    assert!(back == expected);
    client.disconnect().unwrap();
}

fn seed_data(server: &TestServer) -> Vec<u8> {
    let data: Vec<u8> = (0..65536u32).map(|index| (index % 251) as u8).collect();
    let mut client = Client::connect(&server.tcp_uri("vd0")).unwrap();
    client.write_at(&data, 0, true).unwrap();
    client.disconnect().unwrap();
    data
}

#[test]
fn bad_request_magic_closes_only_that_connection() {
    let server = server();
    let data = seed_data(&server);
    let mut stream = raw_session(&server, "vd0");
    let mut bad = request(0, 0, 1, 0, 512);
    bad[0] = 0x12;
    stream.write_all(&bad).unwrap();
    assert_closed(&mut stream);
    let ends = server.wait_for_ends(2, Duration::from_secs(5));
    assert!(
        matches!(&ends[1], ConnectionEnd::Dropped(reason) if reason.contains("magic")),
        "{ends:?}"
    );
    still_serves(&server, &data);
}

#[test]
fn oversize_write_payload_closes_the_connection() {
    let server = server();
    let data = seed_data(&server);
    let mut stream = raw_session(&server, "vd0");
    stream
        .write_all(&request(0, 1, 1, 0, (32 << 20) + 4096))
        .unwrap();
    assert_closed(&mut stream);
    still_serves(&server, &data);
}

#[test]
fn unknown_commands_and_flags_get_einval_and_the_connection_goes_on() {
    let server = server();
    let data = seed_data(&server);
    let mut stream = raw_session(&server, "vd0");
    stream.write_all(&request(0, 42, 1, 0, 512)).unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 1));
    stream.write_all(&request(0x0100, 0, 2, 0, 512)).unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 2));
    // An invalid write still has its payload read and discarded.
    let mut write = request(0x0002, 1, 3, 0, 512);
    write.extend_from_slice(&[0xee; 512]);
    stream.write_all(&write).unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 3));
    // The stream is still in step: a good read works.
    stream.write_all(&request(0, 0, 4, 0, 512)).unwrap();
    assert_eq!(simple_reply(&mut stream), (0, 4));
    let mut back = [0u8; 512];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(&back[..], &data[..512]);
    still_serves(&server, &data);
}

#[test]
fn out_of_range_requests_get_einval_or_enospc() {
    let server = server();
    let data = seed_data(&server);
    let mut stream = raw_session(&server, "vd0");
    stream
        .write_all(&request(0, 0, 1, SIZE_BYTES, 512))
        .unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 1), "read past the end");
    let mut write = request(0, 1, 2, SIZE_BYTES - 512, 1024);
    write.extend_from_slice(&[0xee; 1024]);
    stream.write_all(&write).unwrap();
    assert_eq!(simple_reply(&mut stream), (28, 2), "write past the end");
    stream.write_all(&request(0, 0, 3, 100, 512)).unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 3), "misaligned read");
    stream
        .write_all(&request(0, 4, 4, SIZE_BYTES, 4096))
        .unwrap();
    assert_eq!(simple_reply(&mut stream), (22, 4), "trim past the end");
    // Zero-length requests are legal.
    stream.write_all(&request(0, 1, 5, 0, 0)).unwrap();
    assert_eq!(simple_reply(&mut stream), (0, 5));
    // Soft disconnect.
    stream.write_all(&request(0, 2, 6, 0, 0)).unwrap();
    assert_closed(&mut stream);
    still_serves(&server, &data);
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let server = server();
    let mut client = Client::connect(&server.unix_uri("ro")).unwrap();
    match client.write_at(&[1u8; 4096], 0, false) {
        Err(ClientError::Server(error)) => {
            assert_eq!(error.errno, Errno::Perm.to_u32());
            assert_eq!(error.message, "export is read-only");
        }
        other => panic!("expected EPERM, got {other:?}"),
    }
    let mut back = vec![1u8; 4096];
    client.read_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&byte| byte == 0));
}

#[test]
fn garbage_and_abrupt_ends_during_the_handshake() {
    let server = server();
    let data = seed_data(&server);
    // Unknown client flags.
    let mut stream = connect_raw(&server).unwrap();
    stream.write_all(&[0, 0, 0, 0x10]).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    assert_closed(&mut stream);
    // Garbage instead of an option.
    let mut stream = connect_raw(&server).unwrap();
    stream
        .write_all(b"\x00\x00\x00\x01GET / HTTP/1.1\r\n\r\n")
        .unwrap();
    stream.read_exact(&mut greeting).unwrap();
    assert_closed(&mut stream);
    // Half an option, then gone.
    let mut stream = connect_raw(&server).unwrap();
    stream.write_all(&[0, 0, 0, 1, b'I', b'H']).unwrap();
    drop(stream);
    // NBD_OPT_ABORT.
    let mut stream = connect_raw(&server).unwrap();
    let mut abort = vec![0, 0, 0, 1];
    abort.extend(option(OPT_ABORT, &[]));
    stream.write_all(&abort).unwrap();
    stream.read_exact(&mut greeting).unwrap();
    let mut ack = [0u8; 20];
    stream.read_exact(&mut ack).unwrap();
    assert_eq!(option_replies(&ack)[0].reply_type, ACK);
    assert_closed(&mut stream);
    let ends = server.wait_for_ends(5, Duration::from_secs(5));
    assert!(ends.contains(&ConnectionEnd::SoftDisconnect), "{ends:?}");
    // The half option ends as ClientClosed, or as a failed greeting write if the client was
    // gone before the server wrote it: either way only that connection ended.
    assert_eq!(ends.len(), 5, "{ends:?}");
    still_serves(&server, &data);
}

#[test]
fn client_round_trips_over_unix_and_tcp_with_both_reply_kinds() {
    for structured in [true, false] {
        let config = HandshakeConfig {
            structured_replies: structured,
            ..HandshakeConfig::default()
        };
        let server =
            TestServer::start_with(vec![ExportInfo::new("vd0", SIZE_BYTES)], config).unwrap();
        for uri in [server.unix_uri("vd0"), server.tcp_uri("vd0")] {
            let mut client = Client::connect(&uri).unwrap();
            assert_eq!(client.details().structured_replies, structured);
            assert_eq!(client.size_bytes(), SIZE_BYTES);
            // Data with zero stretches so structured reads mix data and hole chunks.
            let mut data = vec![0u8; 1 << 20];
            for (index, byte) in data.iter_mut().enumerate() {
                if (index / 8192) % 2 == 0 {
                    *byte = (index % 253) as u8 + 1;
                }
            }
            client.write_at(&data, 512 * 3, false).unwrap();
            client.flush().unwrap();
            let mut back = vec![0u8; data.len()];
            client.read_at(&mut back, 512 * 3).unwrap();
            assert!(back == data);
            client.write_zeroes(512 * 3, 8192, true).unwrap();
            client.trim(1 << 21, 4096).unwrap();
            let mut zeroes = vec![1u8; 8192];
            client.read_at(&mut zeroes, 512 * 3).unwrap();
            assert!(zeroes.iter().all(|&byte| byte == 0));
            assert!(
                server.disk("vd0").lock().unwrap()[512 * 3 + 8192..512 * 3 + 8192 + 100]
                    == data[8192..8192 + 100]
            );
            client.disconnect().unwrap();
        }
    }
}

#[test]
fn pipelined_requests_complete_by_cookie() {
    let server = server();
    let mut client = Client::connect(&server.unix_uri("vd0")).unwrap();
    let mut writes = Vec::new();
    for block in 0..64u64 {
        writes.push(
            client
                .submit_write(block * 4096, &[block as u8 + 1; 4096], false)
                .unwrap(),
        );
    }
    assert_eq!(client.in_flight(), 64);
    for cookie in writes.iter().rev() {
        assert!(client.wait(*cookie).unwrap().result.is_ok());
    }
    let reads: Vec<u64> = (0..64u64)
        .map(|block| client.submit_read(block * 4096, 4096).unwrap())
        .collect();
    let mut seen = 0;
    while client.in_flight() > 0 {
        let completion = client.receive().unwrap();
        let block = reads
            .iter()
            .position(|cookie| *cookie == completion.cookie)
            .unwrap();
        assert!(completion.data.iter().all(|&byte| byte == block as u8 + 1));
        seen += 1;
    }
    assert_eq!(seen, 64);
    client.disconnect().unwrap();
}

#[test]
fn client_checks_advertised_features_and_reports_unknown_exports() {
    let server = server();
    let mut client = Client::connect(&server.unix_uri("vd0")).unwrap();
    assert!(matches!(
        client.submit(
            tessera_nbd::Command::Cache,
            tessera_nbd::CommandFlags::NONE,
            0,
            512,
            &[]
        ),
        Err(ClientError::NotSupported("cache"))
    ));
    let missing = Client::connect(&server.unix_uri("nope"));
    assert!(
        matches!(missing, Err(ClientError::Handshake(_))),
        "{:?}",
        missing.err()
    );
    let config = ClientConfig {
        structured_replies: false,
        ..ClientConfig::new("vd0")
    };
    let client = Client::connect_with(&server.tcp_uri("vd0"), config).unwrap();
    assert!(!client.details().structured_replies);
    let tls = Client::connect_str("nbds://127.0.0.1/vd0");
    assert!(matches!(tls, Err(ClientError::TlsNotSupported)));
}
