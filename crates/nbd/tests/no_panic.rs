//! Random bytes into the parsers must never panic (fuzz-style; cargo-fuzz targets come with
//! issue 11 and call the same `tessera_nbd::fuzzing` entry points). Case counts are kept small
//! for CI; raise them with PROPTEST_CASES for a longer run.

use proptest::prelude::*;
use tessera_nbd::fuzzing;

/// A valid handshake prefix, so random tails reach option and request parsing.
fn handshake_prefix() -> impl Strategy<Value = Vec<u8>> {
    let go: Vec<u8> = [
        &[5u8][..], // piece size selector for the fuzz entry point
        &[0, 0, 0, 3],
        b"IHAVEOPT",
        &[0, 0, 0, 8, 0, 0, 0, 0],
        b"IHAVEOPT",
        &[0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 2, b'r', b'o', 0, 0],
    ]
    .concat();
    prop_oneof![Just(Vec::new()), Just(go[..5].to_vec()), Just(go)]
}

/// A request header with random fields, the magic usually right.
fn request_like() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        any::<u16>(),
        0u16..10,
        any::<u64>(),
        prop_oneof![any::<u64>(), 0u64..(1 << 31)],
        any::<u32>(),
    )
        .prop_map(|(good_magic, flags, command, cookie, offset, length)| {
            let mut bytes = if good_magic {
                vec![0x25, 0x60, 0x95, 0x13]
            } else {
                vec![0x25, 0x60, 0x95, 0x14]
            };
            bytes.extend_from_slice(&flags.to_be_bytes());
            bytes.extend_from_slice(&command.to_be_bytes());
            bytes.extend_from_slice(&cookie.to_be_bytes());
            bytes.extend_from_slice(&offset.to_be_bytes());
            bytes.extend_from_slice(&(length % 70_000).to_be_bytes());
            bytes
        })
}

/// 512 cases per property unless PROPTEST_CASES says otherwise.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn server_handshake_never_panics(prefix in handshake_prefix(), tail in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut data = prefix;
        data.extend_from_slice(&tail);
        fuzzing::server_handshake(&data);
    }

    #[test]
    fn option_like_input_never_panics(
        options in proptest::collection::vec((0u32..14, proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
    ) {
        let mut data = vec![3u8, 0, 0, 0, 1];
        for (option, payload) in options {
            data.extend_from_slice(b"IHAVEOPT");
            data.extend_from_slice(&option.to_be_bytes());
            data.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            data.extend_from_slice(&payload);
        }
        fuzzing::server_handshake(&data);
    }

    #[test]
    fn request_decoder_never_panics(requests in proptest::collection::vec(request_like(), 0..8), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut data = requests.concat();
        data.extend_from_slice(&tail);
        fuzzing::decode_requests(&data);
    }

    #[test]
    fn client_reply_decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::client_replies(&data);
    }

    #[test]
    fn client_chunk_like_input_never_panics(
        chunks in proptest::collection::vec((any::<bool>(), 0u16..3, prop_oneof![Just(0u16), Just(1), Just(2), Just(5), Just(0x8001), Just(0x8002), any::<u16>()], 0u64..5, proptest::collection::vec(any::<u8>(), 0..40)), 0..6),
    ) {
        let mut data = Vec::new();
        for (structured, flags, chunk_type, cookie, payload) in chunks {
            if structured {
                data.extend_from_slice(&[0x66, 0x8e, 0x33, 0xef]);
                data.extend_from_slice(&flags.to_be_bytes());
                data.extend_from_slice(&chunk_type.to_be_bytes());
                data.extend_from_slice(&cookie.to_be_bytes());
                data.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            } else {
                data.extend_from_slice(&[0x67, 0x44, 0x66, 0x98]);
                data.extend_from_slice(&u32::from(flags).to_be_bytes());
                data.extend_from_slice(&cookie.to_be_bytes());
            }
            data.extend_from_slice(&payload);
        }
        fuzzing::client_replies(&data);
    }
}
