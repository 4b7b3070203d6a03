//! The client codecs against server bytes written by hand from the spec.

mod support;

use support::*;
use tessera_nbd::client::handshake::{
    ClientConfig, ClientHandshake, ClientHandshakeError, ClientStatus,
};
use tessera_nbd::client::replies::{InFlight, ReplyDecoder, ReplyError, ReplyEvent, ServerError};
use tessera_nbd::reply::Extent;
use tessera_nbd::{BlockSizeConstraints, Command};

fn greeting(flags: u16) -> Vec<u8> {
    let mut bytes = b"NBDMAGICIHAVEOPT".to_vec();
    bytes.extend_from_slice(&flags.to_be_bytes());
    bytes
}

fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9];
    bytes.extend_from_slice(&option.to_be_bytes());
    bytes.extend_from_slice(&reply_type.to_be_bytes());
    bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
    bytes.extend_from_slice(data);
    bytes
}

fn export_info(size: u64, flags: u16) -> Vec<u8> {
    let mut data = vec![0, 0];
    data.extend_from_slice(&size.to_be_bytes());
    data.extend_from_slice(&flags.to_be_bytes());
    data
}

fn output(handshake: &mut ClientHandshake) -> Vec<u8> {
    let mut bytes = Vec::new();
    handshake.take_output(&mut bytes);
    bytes
}

#[test]
fn client_negotiates_structured_replies_then_go() {
    let mut config = ClientConfig::new("vd0");
    config.meta_contexts = vec!["base:allocation".into()];
    let mut handshake = ClientHandshake::new(config);
    assert_eq!(
        handshake.receive(&greeting(3)).unwrap(),
        (18, ClientStatus::Continue)
    );
    let mut expected = vec![0, 0, 0, 3];
    expected.extend(option(OPT_STRUCTURED_REPLY, &[]));
    assert_eq!(output(&mut handshake), expected);

    handshake
        .receive(&option_reply(OPT_STRUCTURED_REPLY, ACK, &[]))
        .unwrap();
    assert_eq!(
        output(&mut handshake),
        option(
            OPT_SET_META_CONTEXT,
            &meta_data("vd0", &["base:allocation"])
        )
    );

    let mut replies = option_reply(
        OPT_SET_META_CONTEXT,
        META_CONTEXT,
        b"\x00\x00\x00\x07base:allocation",
    );
    replies.extend(option_reply(OPT_SET_META_CONTEXT, ACK, &[]));
    handshake.receive(&replies).unwrap();
    // GO asks for BLOCK_SIZE, NAME and DESCRIPTION.
    assert_eq!(
        output(&mut handshake),
        option(OPT_GO, &info_data("vd0", &[3, 1, 2]))
    );

    let mut replies = option_reply(OPT_GO, INFO, &export_info(1 << 30, 0x08ed));
    replies.extend(option_reply(
        OPT_GO,
        INFO,
        &[0, 3, 0, 0, 2, 0, 0, 0, 0x10, 0, 0, 0x10, 0, 0],
    ));
    replies.extend(option_reply(OPT_GO, INFO, b"\x00\x02my disk"));
    replies.extend(option_reply(OPT_GO, INFO, b"\x00\x63unknown info type"));
    replies.extend(option_reply(OPT_GO, ACK, &[]));
    let trailing = [0x67u8, 0x44];
    let mut input = replies.clone();
    input.extend_from_slice(&trailing);
    let (consumed, status) = handshake.receive(&input).unwrap();
    assert_eq!(consumed, replies.len());
    let ClientStatus::Done(details) = status else {
        panic!("expected Done")
    };
    assert_eq!(details.size_bytes, 1 << 30);
    assert_eq!(details.transmission_flags.0, 0x08ed);
    assert!(details.structured_replies);
    assert_eq!(
        details.block_size,
        Some(BlockSizeConstraints {
            minimum_bytes: 512,
            preferred_bytes: 4096,
            maximum_payload_bytes: 1 << 20
        })
    );
    assert_eq!(details.description.as_deref(), Some("my disk"));
    assert_eq!(details.meta_contexts.len(), 1);
    assert_eq!(details.meta_contexts[0].id, 7);
}

#[test]
fn client_falls_back_to_export_name_when_go_is_unsupported() {
    let mut handshake = ClientHandshake::new(ClientConfig::new("vd0"));
    handshake.receive(&greeting(1)).unwrap();
    output(&mut handshake);
    handshake
        .receive(&option_reply(OPT_STRUCTURED_REPLY, ERR_UNSUP, &[]))
        .unwrap();
    output(&mut handshake);
    handshake
        .receive(&option_reply(OPT_GO, ERR_UNSUP, &[]))
        .unwrap();
    assert_eq!(output(&mut handshake), option(OPT_EXPORT_NAME, b"vd0"));
    // No NO_ZEROES from this server: size, flags and 124 zeroes.
    let mut answer = (4096u64).to_be_bytes().to_vec();
    answer.extend_from_slice(&[0, 1]);
    answer.extend_from_slice(&[0; 124]);
    let (consumed, status) = handshake.receive(&answer).unwrap();
    assert_eq!(consumed, 134);
    let ClientStatus::Done(details) = status else {
        panic!("expected Done")
    };
    assert_eq!(details.size_bytes, 4096);
    assert!(!details.structured_replies);
    assert_eq!(details.block_size, None);
}

#[test]
fn client_uses_export_name_with_a_non_fixed_server() {
    let mut handshake = ClientHandshake::new(ClientConfig::new("x"));
    handshake.receive(&greeting(0)).unwrap();
    let mut expected = vec![0, 0, 0, 0];
    expected.extend(option(OPT_EXPORT_NAME, b"x"));
    assert_eq!(output(&mut handshake), expected);
}

#[test]
fn client_reports_refusals_and_garbage() {
    let mut handshake = ClientHandshake::new(ClientConfig {
        structured_replies: false,
        ..ClientConfig::new("x")
    });
    handshake.receive(&greeting(3)).unwrap();
    let error = handshake
        .receive(&option_reply(OPT_GO, ERR_UNKNOWN, b"no such export"))
        .unwrap_err();
    assert_eq!(
        error,
        ClientHandshakeError::ExportRefused {
            reply_type: ERR_UNKNOWN,
            message: "no such export".into()
        }
    );
    assert!(error.to_string().contains("no such export"));

    let mut handshake = ClientHandshake::new(ClientConfig::new("x"));
    assert_eq!(
        handshake
            .receive(b"HTTP/1.1 400 Bad Request\r\n")
            .unwrap_err(),
        ClientHandshakeError::NotNbd
    );

    let mut handshake = ClientHandshake::new(ClientConfig {
        structured_replies: false,
        ..ClientConfig::new("x")
    });
    handshake.receive(&greeting(3)).unwrap();
    // ACK without NBD_INFO_EXPORT first.
    assert!(matches!(
        handshake.receive(&option_reply(OPT_GO, ACK, &[])),
        Err(ClientHandshakeError::MalformedReply(_))
    ));
}

fn simple(cookie: u64, error: u32) -> Vec<u8> {
    let mut bytes = vec![0x67, 0x44, 0x66, 0x98];
    bytes.extend_from_slice(&error.to_be_bytes());
    bytes.extend_from_slice(&cookie.to_be_bytes());
    bytes
}

fn chunk(flags: u16, chunk_type: u16, cookie: u64, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x66, 0x8e, 0x33, 0xef];
    bytes.extend_from_slice(&flags.to_be_bytes());
    bytes.extend_from_slice(&chunk_type.to_be_bytes());
    bytes.extend_from_slice(&cookie.to_be_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// Decodes everything, copying data events to owned form.
fn events(decoder: &mut ReplyDecoder, mut input: &[u8]) -> Result<Vec<String>, ReplyError> {
    let mut seen = Vec::new();
    loop {
        let (consumed, event) = decoder.decode(input)?;
        input = &input[consumed..];
        match event {
            None => return Ok(seen),
            Some(ReplyEvent::Data {
                cookie,
                offset_bytes,
                data,
            }) => seen.push(format!("data {cookie} @{offset_bytes} {:?}", data)),
            Some(ReplyEvent::Hole {
                cookie,
                offset_bytes,
                length_bytes,
            }) => seen.push(format!("hole {cookie} @{offset_bytes} +{length_bytes}")),
            Some(ReplyEvent::BlockStatus {
                cookie,
                context_id,
                extents,
            }) => seen.push(format!("status {cookie} ctx{context_id} {extents:?}")),
            Some(ReplyEvent::Complete { cookie, result }) => {
                seen.push(format!("complete {cookie} {result:?}"))
            }
        }
    }
}

#[test]
fn simple_replies_carry_read_data_by_request_length() {
    let mut decoder = ReplyDecoder::new(false);
    decoder.expect(
        1,
        InFlight {
            command: Command::Read,
            offset_bytes: 100,
            length_bytes: 3,
        },
    );
    decoder.expect(
        2,
        InFlight {
            command: Command::Write,
            offset_bytes: 0,
            length_bytes: 512,
        },
    );
    let mut input = simple(2, 28);
    input.extend(simple(1, 0));
    input.extend_from_slice(&[7, 8, 9]);
    let seen = events(&mut decoder, &input).unwrap();
    let no_space = ServerError {
        errno: 28,
        message: String::new(),
        offset_bytes: None,
    };
    assert_eq!(
        seen,
        vec![
            format!("complete 2 {:?}", Err::<(), _>(no_space)),
            "data 1 @100 [7, 8, 9]".into(),
            "complete 1 Ok(())".into()
        ]
    );
    assert_eq!(decoder.in_flight(), 0);
}

#[test]
fn data_split_across_inputs_is_handed_out_in_pieces() {
    let mut decoder = ReplyDecoder::new(false);
    decoder.expect(
        1,
        InFlight {
            command: Command::Read,
            offset_bytes: 0,
            length_bytes: 4,
        },
    );
    let mut input = simple(1, 0);
    input.extend_from_slice(&[1, 2, 3, 4]);
    let mut seen = events(&mut decoder, &input[..18]).unwrap();
    seen.extend(events(&mut decoder, &input[18..]).unwrap());
    assert_eq!(
        seen,
        vec!["data 1 @0 [1, 2]", "data 1 @2 [3, 4]", "complete 1 Ok(())"]
    );
}

#[test]
fn structured_chunks_are_decoded_and_checked() {
    let mut decoder = ReplyDecoder::new(true);
    decoder.expect(
        5,
        InFlight {
            command: Command::Read,
            offset_bytes: 4096,
            length_bytes: 8,
        },
    );
    decoder.expect(
        6,
        InFlight {
            command: Command::BlockStatus,
            offset_bytes: 0,
            length_bytes: 8192,
        },
    );
    decoder.expect(
        7,
        InFlight {
            command: Command::Trim,
            offset_bytes: 0,
            length_bytes: 512,
        },
    );
    let mut input = chunk(0, 2, 5, &[0, 0, 0, 0, 0, 0, 0x10, 0x04, 0, 0, 0, 4]);
    input.extend(chunk(
        0,
        1,
        5,
        &[0, 0, 0, 0, 0, 0, 0x10, 0x00, 0xa, 0xb, 0xc, 0xd],
    ));
    input.extend(chunk(1, 5, 6, &[0, 0, 0, 1, 0, 0, 0x20, 0, 0, 0, 0, 3]));
    input.extend(chunk(1, 0x8001, 7, &[0, 0, 0, 1, 0, 2, b'r', b'o']));
    input.extend(chunk(1, 0, 5, &[]));
    let seen = events(&mut decoder, &input).unwrap();
    let permission = ServerError {
        errno: 1,
        message: "ro".into(),
        offset_bytes: None,
    };
    assert_eq!(
        seen,
        vec![
            "hole 5 @4100 +4".to_string(),
            "data 5 @4096 [10, 11, 12, 13]".into(),
            format!(
                "status 6 ctx1 {:?}",
                vec![Extent {
                    length_bytes: 8192,
                    flags: 3
                }]
            ),
            "complete 6 Ok(())".into(),
            format!("complete 7 {:?}", Err::<(), _>(permission)),
            "complete 5 Ok(())".into(),
        ]
    );
}

#[test]
fn broken_reply_streams_are_errors() {
    let read = InFlight {
        command: Command::Read,
        offset_bytes: 0,
        length_bytes: 8,
    };
    let cases: Vec<(bool, Vec<u8>, ReplyError)> = vec![
        (
            false,
            vec![0xde, 0xad, 0xbe, 0xef],
            ReplyError::BadMagic(0xdead_beef),
        ),
        (false, simple(99, 0), ReplyError::UnknownCookie(99)),
        (
            false,
            chunk(1, 0, 1, &[]),
            ReplyError::UnexpectedStructuredReply,
        ),
        (true, simple(1, 0), ReplyError::SimpleReplyToStructuredRead),
        (true, chunk(1, 0, 1, &[]), ReplyError::IncompleteRead(1)),
        (true, chunk(1, 42, 1, &[]), ReplyError::UnknownChunkType(42)),
        (
            true,
            chunk(0, 1, 1, &[0, 0, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4, 5]),
            ReplyError::InvalidChunk("content outside the request"),
        ),
        (
            true,
            chunk(1, 0x8001, 1, &[0, 0, 0, 0, 0, 0]),
            ReplyError::InvalidChunk("error chunk with error zero"),
        ),
        (
            true,
            chunk(1, 0x8001, 1, &[0, 0, 0, 5, 0, 9, b'x']),
            ReplyError::InvalidChunk("error message longer than the chunk"),
        ),
    ];
    for (structured, input, expected) in cases {
        let mut decoder = ReplyDecoder::new(structured);
        decoder.expect(1, read);
        assert_eq!(
            events(&mut decoder, &input),
            Err(expected.clone()),
            "{expected:?}"
        );
    }
}

#[test]
fn unknown_error_chunks_fail_the_request_but_not_the_stream() {
    let mut decoder = ReplyDecoder::new(true);
    decoder.expect(
        1,
        InFlight {
            command: Command::Flush,
            offset_bytes: 0,
            length_bytes: 0,
        },
    );
    let input = chunk(1, 0x8abc, 1, &[0, 0, 0, 5, 0, 0]);
    let seen = events(&mut decoder, &input).unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].starts_with("complete 1 Err"), "{seen:?}");
}
