//! Fuzz-friendly entry points: each takes arbitrary bytes and must never panic.
//! The cargo-fuzz targets (issue 11) and the proptest suite call these.

use crate::client::handshake::{ClientConfig, ClientHandshake};
use crate::client::replies::{InFlight, ReplyDecoder};
use crate::export::{ExportCatalog, ExportFeatures, ExportInfo};
use crate::proto::{Command, REQUEST_HEADER_BYTES};
use crate::request::decode_request;
use crate::server::handshake::{HandshakeConfig, HandshakeStatus, ServerHandshake};
use crate::validate::{Rejection, validate};

/// The catalog every entry point serves: any name shorter than 8 bytes exists, the empty
/// name is `default`, `ro` is read-only and `secret` needs TLS. Public so that replayed seeds
/// can drive a server against the same exports.
pub struct FuzzCatalog;

impl ExportCatalog for FuzzCatalog {
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        let mut export = ExportInfo::new(if name.is_empty() { "default" } else { name }, 1 << 30);
        export.features = ExportFeatures {
            block_status: true,
            cache: true,
            ..ExportFeatures::TYPICAL
        };
        export.read_only = name == "ro";
        export.tls_required = name == "secret";
        (name.len() < 8).then_some(export)
    }

    fn list(&self) -> Vec<String> {
        vec!["default".into(), "ro".into(), "secret".into()]
    }
}

/// Feeds `data` to a server handshake in pieces whose sizes come from the data itself, then
/// decodes and validates whatever follows the handshake as requests.
pub fn server_handshake(data: &[u8]) {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let piece_bytes = usize::from(split % 31) + 1;
    let mut handshake = ServerHandshake::new(HandshakeConfig::default());
    let mut output = Vec::new();
    let mut position = 0;
    while position < data.len() {
        let end = (position + piece_bytes).min(data.len());
        match handshake.receive(&data[position..end], &FuzzCatalog) {
            Err(_) | Ok((_, HandshakeStatus::Close)) => return,
            Ok((consumed, HandshakeStatus::Continue)) => {
                assert_eq!(consumed, end - position);
                position = end;
            }
            Ok((_, HandshakeStatus::StartTls)) => {
                handshake.take_output(&mut output);
                handshake.tls_started();
                position = end;
            }
            Ok((consumed, HandshakeStatus::Done(negotiated))) => {
                handshake.take_output(&mut output);
                transmission(&data[position + consumed..], &negotiated);
                return;
            }
        }
        handshake.take_output(&mut output);
        output.clear();
    }
}

fn transmission(mut data: &[u8], negotiated: &crate::server::handshake::Negotiated) {
    loop {
        match decode_request(data) {
            Ok(Some(request)) => {
                data = &data[REQUEST_HEADER_BYTES..];
                match validate(&request, negotiated) {
                    Err(Rejection::Disconnect(_)) => return,
                    Ok(()) | Err(Rejection::Error { .. }) => {}
                }
                let payload_bytes = request.payload_bytes() as usize;
                data = &data[payload_bytes.min(data.len())..];
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Decodes `data` as request headers and validates each against a typical export.
pub fn decode_requests(data: &[u8]) {
    let mut handshake = ServerHandshake::new(HandshakeConfig::default());
    let mut go = vec![0, 0, 0, 1]; // client flags: fixed newstyle
    go.extend_from_slice(b"IHAVEOPT");
    go.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0]);
    match handshake.receive(&go, &FuzzCatalog) {
        Ok((_, HandshakeStatus::Done(negotiated))) => transmission(data, &negotiated),
        other => panic!("a fixed GO must succeed: {other:?}"),
    }
}

/// Feeds `data` to a client handshake, then to a reply decoder with a few reads, writes and
/// block status requests in flight.
pub fn client_replies(data: &[u8]) {
    let mut handshake = ClientHandshake::new(ClientConfig::new("disk"));
    let consumed = match handshake.receive(data) {
        Ok((consumed, _)) => consumed,
        Err(_) => 0,
    };
    for structured in [false, true] {
        let mut decoder = ReplyDecoder::new(structured);
        for cookie in 0..4u64 {
            let command = [
                Command::Read,
                Command::Write,
                Command::BlockStatus,
                Command::Read,
            ][cookie as usize];
            decoder.expect(
                cookie,
                InFlight {
                    command,
                    offset_bytes: cookie * 4096,
                    length_bytes: 4096,
                },
            );
        }
        let mut rest = &data[consumed..];
        while let Ok((used, Some(_))) = decoder.decode(rest) {
            rest = &rest[used..];
            if decoder.in_flight() == 0 {
                break;
            }
        }
    }
}
