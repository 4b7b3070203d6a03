//! Server handshake scenarios, driven by a hand-written client: every option, every error
//! path, the limits, abort, unknown flags, TLS modes. Expected bytes come from the spec.

mod support;

use support::*;
use tessera_nbd::export::ExportFeatures;
use tessera_nbd::{
    ExportInfo, HandshakeConfig, HandshakeError, HandshakeStatus, Negotiated, ServerHandshake,
    TlsMode,
};

const FIXED_NEWSTYLE: [u8; 4] = [0, 0, 0, 1];
const FIXED_NO_ZEROES: [u8; 4] = [0, 0, 0, 3];

fn catalog() -> TestCatalog {
    let mut disk = ExportInfo::new("disk", 1 << 30);
    disk.description = Some("the first disk".into());
    disk.features = ExportFeatures {
        block_status: true,
        ..ExportFeatures::TYPICAL
    };
    let mut read_only = ExportInfo::new("ro", 1 << 20);
    read_only.read_only = true;
    let mut secret = ExportInfo::new("secret", 1 << 20);
    secret.tls_required = true;
    let mut private = ExportInfo::new("private", 1 << 20);
    private.refused = Some("not for this client");
    TestCatalog {
        exports: vec![disk, read_only, secret, private],
    }
}

/// A handshake past the greeting and client flags.
fn started(config: HandshakeConfig, flags: [u8; 4]) -> ServerHandshake {
    let mut handshake = ServerHandshake::new(config);
    let mut greeting = Vec::new();
    handshake.take_output(&mut greeting);
    let (consumed, status) = handshake.receive(&flags, &catalog()).unwrap();
    assert_eq!((consumed, status), (4, HandshakeStatus::Continue));
    handshake
}

/// Sends bytes, returns the status and the option replies.
fn send(handshake: &mut ServerHandshake, bytes: &[u8]) -> (HandshakeStatus, Vec<OptionReply>) {
    let (consumed, status) = handshake.receive(bytes, &catalog()).unwrap();
    if status == HandshakeStatus::Continue {
        assert_eq!(consumed, bytes.len());
    }
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    (status, option_replies(&output))
}

fn single_reply(handshake: &mut ServerHandshake, bytes: &[u8]) -> OptionReply {
    let (status, replies) = send(handshake, bytes);
    assert_eq!(status, HandshakeStatus::Continue);
    assert_eq!(replies.len(), 1, "{replies:?}");
    replies.into_iter().next().unwrap()
}

fn done(status: HandshakeStatus) -> Negotiated {
    match status {
        HandshakeStatus::Done(negotiated) => negotiated,
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn greeting_is_nbdmagic_ihaveopt_and_flags() {
    let mut handshake = ServerHandshake::new(HandshakeConfig::default());
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    let mut expected = b"NBDMAGICIHAVEOPT".to_vec();
    expected.extend_from_slice(&[0x00, 0x03]); // FIXED_NEWSTYLE | NO_ZEROES
    assert_eq!(output, expected);

    let config = HandshakeConfig {
        no_zeroes: false,
        ..HandshakeConfig::default()
    };
    let mut handshake = ServerHandshake::new(config);
    output.clear();
    handshake.take_output(&mut output);
    assert_eq!(&output[16..], &[0x00, 0x01]);
}

#[test]
fn unknown_client_flags_close_the_connection() {
    for flags in [[0, 0, 0, 4], [0x80, 0, 0, 1], [0, 0, 1, 0]] {
        let mut handshake = ServerHandshake::new(HandshakeConfig::default());
        let error = handshake.receive(&flags, &catalog()).unwrap_err();
        assert_eq!(
            error,
            HandshakeError::UnknownClientFlags(u32::from_be_bytes(flags))
        );
    }
    // NO_ZEROES is unknown when the server did not offer it.
    let config = HandshakeConfig {
        no_zeroes: false,
        ..HandshakeConfig::default()
    };
    let mut handshake = ServerHandshake::new(config);
    assert!(handshake.receive(&FIXED_NO_ZEROES, &catalog()).is_err());
}

#[test]
fn go_sends_export_info_block_size_then_ack() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (status, replies) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[3])));
    let negotiated = done(status);
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert!(replies.iter().all(|reply| reply.option == OPT_GO));
    // NBD_INFO_EXPORT: type 0, size 1 GiB, flags HAS|FLUSH|FUA|TRIM|WRITE_ZEROES|FAST_ZERO.
    assert_eq!(replies[0].reply_type, INFO);
    assert_eq!(
        replies[0].data,
        [0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0x08, 0x6d]
    );
    // NBD_INFO_BLOCK_SIZE: type 3, 512, 4096, 32 MiB.
    assert_eq!(replies[1].reply_type, INFO);
    assert_eq!(
        replies[1].data,
        [0, 3, 0, 0, 2, 0, 0, 0, 0x10, 0, 0x02, 0, 0, 0]
    );
    assert_eq!(
        replies[2],
        OptionReply {
            option: OPT_GO,
            reply_type: ACK,
            data: vec![]
        }
    );
    assert_eq!(negotiated.export_name(), "disk");
    assert!(negotiated.block_size_requested);
    assert!(!negotiated.structured_replies);
    assert!(!negotiated.no_zeroes);
    assert!(negotiated.meta_contexts.is_empty());
    assert_eq!(negotiated.transmission_flags.0, 0x086d);
}

#[test]
fn go_with_name_and_description_requests() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    // The empty name is the default export; NAME (1) tells its canonical name.
    let (status, replies) = send(
        &mut handshake,
        &option(OPT_GO, &info_data("", &[1, 2, 999])),
    );
    let negotiated = done(status);
    assert_eq!(negotiated.export_name(), "disk");
    assert!(!negotiated.block_size_requested);
    let infos: Vec<&[u8]> = replies
        .iter()
        .filter(|r| r.reply_type == INFO)
        .map(|r| &r.data[..])
        .collect();
    assert!(infos.contains(&&b"\x00\x01disk"[..]), "{infos:?}");
    assert!(infos.contains(&&b"\x00\x02the first disk"[..]), "{infos:?}");
    assert_eq!(replies.last().unwrap().reply_type, ACK);
}

#[test]
fn info_does_not_end_the_handshake_and_unknown_exports_are_errors() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (status, replies) = send(&mut handshake, &option(OPT_INFO, &info_data("disk", &[])));
    assert_eq!(status, HandshakeStatus::Continue);
    assert_eq!(replies.last().unwrap().reply_type, ACK);
    let reply = single_reply(&mut handshake, &option(OPT_GO, &info_data("nope", &[])));
    assert_eq!((reply.option, reply.reply_type), (OPT_GO, ERR_UNKNOWN));
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("ro", &[])));
    let negotiated = done(status);
    assert!(negotiated.export.read_only);
    assert_eq!(negotiated.transmission_flags.0 & 0x0002, 0x0002);
}

#[test]
fn malformed_info_and_go_are_invalid() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    // Name length larger than the data.
    let mut data = info_data("disk", &[]);
    data[3] = 200;
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &data)).reply_type,
        ERR_INVALID
    );
    // Request count larger than the data.
    let mut data = info_data("disk", &[3]);
    let count_at = data.len() - 4;
    data[count_at + 1] = 2;
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_INFO, &data)).reply_type,
        ERR_INVALID
    );
    // A name with NUL.
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &info_data("d\0k", &[]))).reply_type,
        ERR_INVALID
    );
    // Still usable afterwards.
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    done(status);
}

#[test]
fn export_name_answers_size_flags_and_zeroes() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (consumed, status) = handshake
        .receive(&option(OPT_EXPORT_NAME, b"disk"), &catalog())
        .unwrap();
    assert_eq!(consumed, 20);
    let negotiated = done(status);
    assert!(!negotiated.block_size_requested);
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    let mut expected = vec![0, 0, 0, 0, 0x40, 0, 0, 0, 0x08, 0x6d];
    expected.extend_from_slice(&[0; 124]);
    assert_eq!(output, expected);

    // With NO_ZEROES agreed, only the 10 bytes.
    let mut handshake = started(HandshakeConfig::default(), FIXED_NO_ZEROES);
    let (_, status) = handshake
        .receive(&option(OPT_EXPORT_NAME, b""), &catalog())
        .unwrap();
    assert!(done(status).no_zeroes);
    output.clear();
    handshake.take_output(&mut output);
    assert_eq!(output.len(), 10);
}

#[test]
fn export_name_failures_close_the_connection() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    assert!(matches!(
        handshake.receive(&option(OPT_EXPORT_NAME, b"nope"), &catalog()),
        Err(HandshakeError::ExportNameRefused(_))
    ));
    let config = HandshakeConfig {
        export_name_bytes_max: 8,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    assert!(matches!(
        handshake.receive(&option(OPT_EXPORT_NAME, b"much-too-long"), &catalog()),
        Err(HandshakeError::ExportNameRefused(_))
    ));
}

#[test]
fn refused_exports_answer_policy_close_export_name_and_are_not_listed() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    for known in [OPT_INFO, OPT_GO] {
        let reply = single_reply(&mut handshake, &option(known, &info_data("private", &[])));
        assert_eq!((reply.option, reply.reply_type), (known, ERR_POLICY));
        assert_eq!(&reply.data[..], b"not for this client");
    }
    // The handshake goes on: another export can still be chosen.
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    assert_eq!(done(status).export.name, "disk");
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    assert!(matches!(
        handshake.receive(&option(OPT_EXPORT_NAME, b"private"), &catalog()),
        Err(HandshakeError::ExportNameRefused(_))
    ));
}

#[test]
fn abort_is_acknowledged_then_closes() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (status, replies) = send(&mut handshake, &option(OPT_ABORT, &[]));
    assert_eq!(status, HandshakeStatus::Close);
    assert_eq!(
        replies,
        vec![OptionReply {
            option: OPT_ABORT,
            reply_type: ACK,
            data: vec![]
        }]
    );
    // Data with ABORT is ignored rather than refused.
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (status, replies) = send(&mut handshake, &option(OPT_ABORT, b"bye"));
    assert_eq!(status, HandshakeStatus::Close);
    assert_eq!(replies[0].reply_type, ACK);
}

#[test]
fn list_names_every_export_except_tls_only_ones() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let (_, replies) = send(&mut handshake, &option(OPT_LIST, &[]));
    assert_eq!(replies.len(), 3, "{replies:?}");
    let mut first = vec![0, 0, 0, 4];
    first.extend_from_slice(b"diskthe first disk");
    assert_eq!(
        replies[0],
        OptionReply {
            option: OPT_LIST,
            reply_type: SERVER,
            data: first
        }
    );
    assert_eq!(replies[1].data, b"\x00\x00\x00\x02ro");
    assert_eq!(replies[2].reply_type, ACK);
    // With data: invalid.
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_LIST, b"x")).reply_type,
        ERR_INVALID
    );
}

#[test]
fn unknown_options_are_unsupported_and_parsing_goes_on() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    for unknown in [0u32, 4, 11, 42, 0xffff_ffff] {
        let reply = single_reply(&mut handshake, &option(unknown, b"some data"));
        assert_eq!((reply.option, reply.reply_type), (unknown, ERR_UNSUP));
    }
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    done(status);
}

#[test]
fn oversized_options_are_skipped_without_buffering_and_refused() {
    let config = HandshakeConfig {
        option_length_bytes_max: 4096,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    // A 1 MiB GO arrives in 4 KiB pieces; nothing is answered until the last byte.
    let big = option(OPT_GO, &vec![0u8; 1 << 20]);
    for piece in big.chunks(4096) {
        let (consumed, status) = handshake.receive(piece, &catalog()).unwrap();
        assert_eq!((consumed, status), (piece.len(), HandshakeStatus::Continue));
    }
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    let replies = option_replies(&output);
    assert_eq!(replies.len(), 1);
    assert_eq!(
        (replies[0].option, replies[0].reply_type),
        (OPT_GO, ERR_TOO_BIG)
    );
    // An unknown option that is also oversized is still "unsupported".
    let reply = single_reply(&mut handshake, &option(99, &vec![0u8; 10_000]));
    assert_eq!(reply.reply_type, ERR_UNSUP);
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    done(status);
}

#[test]
fn export_name_limit_applies_to_info_and_go() {
    let config = HandshakeConfig {
        export_name_bytes_max: 4,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &info_data("secret", &[]))).reply_type,
        ERR_INVALID
    );
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    done(status);
}

#[test]
fn too_many_options_close_the_connection() {
    let config = HandshakeConfig {
        options_max: 3,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    for _ in 0..3 {
        let (status, _) = send(&mut handshake, &option(OPT_LIST, &[]));
        assert_eq!(status, HandshakeStatus::Continue);
    }
    assert_eq!(
        handshake.receive(&option(OPT_LIST, &[]), &catalog()),
        Err(HandshakeError::TooManyOptions(3))
    );
}

#[test]
fn bad_option_magic_closes_the_connection() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let mut bad = option(OPT_LIST, &[]);
    bad[0] = b'X';
    assert!(matches!(
        handshake.receive(&bad, &catalog()),
        Err(HandshakeError::BadOptionMagic(_))
    ));
}

#[test]
fn structured_replies_once_and_without_data() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, b"x")).reply_type,
        ERR_INVALID
    );
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[])).reply_type,
        ACK
    );
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[])).reply_type,
        ERR_INVALID
    );
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[])));
    let negotiated = done(status);
    assert!(negotiated.structured_replies);
    // DF (0x80) only appears with structured replies.
    assert_eq!(negotiated.transmission_flags.0, 0x08ed);

    let config = HandshakeConfig {
        structured_replies: false,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[])).reply_type,
        ERR_UNSUP
    );
}

#[test]
fn set_meta_context_selects_base_allocation_for_the_go_export() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    let set = option(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["base:allocation"]),
    );
    // Needs structured replies first.
    assert_eq!(single_reply(&mut handshake, &set).reply_type, ERR_INVALID);
    single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[]));
    let (_, replies) = send(&mut handshake, &set);
    let mut context = vec![0, 0, 0, 1];
    context.extend_from_slice(b"base:allocation");
    assert_eq!(
        replies[0],
        OptionReply {
            option: OPT_SET_META_CONTEXT,
            reply_type: META_CONTEXT,
            data: context
        }
    );
    assert_eq!(replies[1].reply_type, ACK);
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("disk", &[3])));
    let negotiated = done(status);
    assert_eq!(negotiated.meta_contexts.len(), 1);
    assert_eq!(
        (
            negotiated.meta_contexts[0].id,
            negotiated.meta_contexts[0].name.as_str()
        ),
        (1, "base:allocation")
    );
}

#[test]
fn meta_contexts_only_count_for_the_same_export() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[]));
    send(
        &mut handshake,
        &option(
            OPT_SET_META_CONTEXT,
            &meta_data("disk", &["base:allocation"]),
        ),
    );
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("", &[])));
    assert!(done(status).meta_contexts.is_empty());
}

#[test]
fn meta_context_queries_follow_the_base_namespace_rules() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[]));
    // List without queries: everything, with ID 0.
    let (_, replies) = send(
        &mut handshake,
        &option(OPT_LIST_META_CONTEXT, &meta_data("disk", &[])),
    );
    assert_eq!(replies[0].data, b"\x00\x00\x00\x00base:allocation");
    assert_eq!(replies[1].reply_type, ACK);
    // "base:" lists base contexts; unknown leaves and namespaces are ignored.
    let (_, replies) = send(
        &mut handshake,
        &option(
            OPT_LIST_META_CONTEXT,
            &meta_data("disk", &["base:", "qemu:dirty", "base:nope"]),
        ),
    );
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].reply_type, META_CONTEXT);
    // "base:" selects nothing when setting.
    let (_, replies) = send(
        &mut handshake,
        &option(OPT_SET_META_CONTEXT, &meta_data("disk", &["base:"])),
    );
    assert_eq!(
        replies,
        vec![OptionReply {
            option: OPT_SET_META_CONTEXT,
            reply_type: ACK,
            data: vec![]
        }]
    );
    // A query without a colon is invalid; an unknown export is unknown.
    let reply = single_reply(
        &mut handshake,
        &option(OPT_SET_META_CONTEXT, &meta_data("disk", &["base"])),
    );
    assert_eq!(reply.reply_type, ERR_INVALID);
    let reply = single_reply(
        &mut handshake,
        &option(OPT_LIST_META_CONTEXT, &meta_data("nope", &[])),
    );
    assert_eq!(reply.reply_type, ERR_UNKNOWN);
    // An export without block status offers no context.
    let (_, replies) = send(
        &mut handshake,
        &option(OPT_LIST_META_CONTEXT, &meta_data("ro", &[])),
    );
    assert_eq!(replies.len(), 1);
}

#[test]
fn starttls_is_refused_by_policy_when_disabled() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STARTTLS, &[])).reply_type,
        ERR_POLICY
    );
    // In NOTLS mode a TLS-only export is refused by policy, never with TLS_REQD.
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &info_data("secret", &[]))).reply_type,
        ERR_POLICY
    );
}

#[test]
fn selective_tls_upgrades_and_resets_state() {
    let config = HandshakeConfig {
        tls: TlsMode::Selective,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config, FIXED_NEWSTYLE);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &info_data("secret", &[]))).reply_type,
        ERR_TLS_REQD
    );
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STARTTLS, b"x")).reply_type,
        ERR_INVALID
    );
    single_reply(&mut handshake, &option(OPT_STRUCTURED_REPLY, &[]));
    // STARTTLS stops right after itself: the TLS ClientHello that follows is not consumed.
    let mut bytes = option(OPT_STARTTLS, &[]);
    bytes.extend_from_slice(b"\x16\x03\x01");
    let (consumed, status) = handshake.receive(&bytes, &catalog()).unwrap();
    assert_eq!((consumed, status), (16, HandshakeStatus::StartTls));
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    assert_eq!(option_replies(&output)[0].reply_type, ACK);
    handshake.tls_started();
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STARTTLS, &[])).reply_type,
        ERR_INVALID
    );
    let (status, _) = send(&mut handshake, &option(OPT_GO, &info_data("secret", &[])));
    let negotiated = done(status);
    assert!(negotiated.tls);
    // Structured replies negotiated before STARTTLS do not survive it.
    assert!(!negotiated.structured_replies);
}

#[test]
fn forced_tls_refuses_everything_but_starttls_and_abort() {
    let config = HandshakeConfig {
        tls: TlsMode::Forced,
        ..HandshakeConfig::default()
    };
    let mut handshake = started(config.clone(), FIXED_NEWSTYLE);
    for opt in [OPT_LIST, OPT_INFO, OPT_STRUCTURED_REPLY, 42] {
        assert_eq!(
            single_reply(&mut handshake, &option(opt, &[])).reply_type,
            ERR_TLS_REQD
        );
    }
    assert!(
        handshake
            .receive(&option(OPT_EXPORT_NAME, b"disk"), &catalog())
            .is_err()
    );
    // A client that did not agree on fixed newstyle cannot do TLS at all: NOTLS applies.
    let mut handshake = started(config, [0, 0, 0, 0]);
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_STARTTLS, &[])).reply_type,
        ERR_POLICY
    );
}

#[test]
fn shutting_down_refuses_options_but_abort() {
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    handshake.set_shutting_down();
    assert_eq!(
        single_reply(&mut handshake, &option(OPT_GO, &info_data("disk", &[]))).reply_type,
        ERR_SHUTDOWN
    );
    assert!(
        handshake
            .receive(&option(OPT_EXPORT_NAME, b"disk"), &catalog())
            .is_err()
    );
    let mut handshake = started(HandshakeConfig::default(), FIXED_NEWSTYLE);
    handshake.set_shutting_down();
    let (status, _) = send(&mut handshake, &option(OPT_ABORT, &[]));
    assert_eq!(status, HandshakeStatus::Close);
}

#[test]
fn byte_by_byte_input_gives_the_same_result_and_leaves_requests_alone() {
    let mut script = FIXED_NO_ZEROES.to_vec();
    script.extend(option(OPT_STRUCTURED_REPLY, &[]));
    script.extend(option(OPT_LIST, &[]));
    script.extend(option(OPT_GO, &info_data("disk", &[3])));
    let request = request(0, 0, 7, 0, 512);
    script.extend_from_slice(&request);

    let mut whole = ServerHandshake::new(HandshakeConfig::default());
    let (consumed, status) = whole.receive(&script, &catalog()).unwrap();
    assert_eq!(
        consumed,
        script.len() - 28,
        "the request after GO is not consumed"
    );
    let expected = done(status);
    let mut whole_output = Vec::new();
    whole.take_output(&mut whole_output);

    let mut split = ServerHandshake::new(HandshakeConfig::default());
    let mut split_output = Vec::new();
    for (index, byte) in script.iter().enumerate() {
        let (consumed, status) = split
            .receive(std::slice::from_ref(byte), &catalog())
            .unwrap();
        split.take_output(&mut split_output);
        if status != HandshakeStatus::Continue {
            assert_eq!(consumed, 1);
            assert_eq!(index, script.len() - 29);
            assert_eq!(done(status), expected);
            break;
        }
    }
    assert_eq!(split_output, whole_output);
}
