//! Transmission-phase request header: 28 bytes, optionally followed by a write payload.

use std::fmt;

use crate::proto::{Command, CommandFlags, REQUEST_HEADER_BYTES, REQUEST_MAGIC};
use crate::wire::{Reader, put_u16, put_u32, put_u64};

/// One request from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Command flags as sent (validated separately).
    pub flags: CommandFlags,
    /// The command.
    pub command: Command,
    /// Opaque value the reply must echo.
    pub cookie: u64,
    /// Where the command applies in the export.
    pub offset_bytes: u64,
    /// How many bytes the command covers (for WRITE: the payload that follows).
    pub length_bytes: u32,
}

impl Request {
    /// Bytes of payload that follow this header on the wire (only WRITE carries one).
    pub fn payload_bytes(&self) -> u32 {
        if self.command == Command::Write {
            self.length_bytes
        } else {
            0
        }
    }
}

/// A transmission-phase message that cannot be parsed: the connection must be dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A request did not start with `NBD_REQUEST_MAGIC`; the stream cannot be resynchronised.
    BadRequestMagic(u32),
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadRequestMagic(magic) => write!(f, "bad request magic {magic:#010x}"),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Decodes a request header from the start of `input`; None until 28 bytes are there.
pub fn decode_request(input: &[u8]) -> Result<Option<Request>, ProtocolError> {
    if input.len() < REQUEST_HEADER_BYTES {
        return Ok(None);
    }
    let mut reader = Reader::new(&input[..REQUEST_HEADER_BYTES]);
    let magic = reader.u32().expect("28 bytes present");
    if magic != REQUEST_MAGIC {
        return Err(ProtocolError::BadRequestMagic(magic));
    }
    Ok(Some(Request {
        flags: CommandFlags(reader.u16().expect("28 bytes present")),
        command: Command::from_u16(reader.u16().expect("28 bytes present")),
        cookie: reader.u64().expect("28 bytes present"),
        offset_bytes: reader.u64().expect("28 bytes present"),
        length_bytes: reader.u32().expect("28 bytes present"),
    }))
}

/// Appends the 28-byte header of `request` (the client side; a write payload follows).
pub fn encode_request(request: &Request, out: &mut Vec<u8>) {
    put_u32(out, REQUEST_MAGIC);
    put_u16(out, request.flags.0);
    put_u16(out, request.command.to_u16());
    put_u64(out, request.cookie);
    put_u64(out, request.offset_bytes);
    put_u32(out, request.length_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WRITE with FUA, cookie 0x0102030405060708, offset 4096, length 512, laid out by hand
    /// from the spec's "Request message".
    const WRITE_FUA: [u8; 28] = [
        0x25, 0x60, 0x95, 0x13, // NBD_REQUEST_MAGIC
        0x00, 0x01, // flags: FUA
        0x00, 0x01, // type: NBD_CMD_WRITE
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // cookie
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // offset 4096
        0x00, 0x00, 0x02, 0x00, // length 512
    ];

    #[test]
    fn decodes_a_request_header_laid_out_by_hand() {
        let request = decode_request(&WRITE_FUA).unwrap().unwrap();
        assert_eq!(
            request,
            Request {
                flags: CommandFlags::FUA,
                command: Command::Write,
                cookie: 0x0102_0304_0506_0708,
                offset_bytes: 4096,
                length_bytes: 512,
            }
        );
        assert_eq!(request.payload_bytes(), 512);
    }

    #[test]
    fn encodes_the_same_bytes() {
        let request = decode_request(&WRITE_FUA).unwrap().unwrap();
        let mut out = Vec::new();
        encode_request(&request, &mut out);
        assert_eq!(out, WRITE_FUA);
    }

    #[test]
    fn waits_for_a_whole_header_and_ignores_what_follows() {
        assert_eq!(decode_request(&WRITE_FUA[..27]), Ok(None));
        assert_eq!(decode_request(&[]), Ok(None));
        let mut longer = WRITE_FUA.to_vec();
        longer.extend_from_slice(&[0xaa; 5]);
        assert!(decode_request(&longer).unwrap().is_some());
    }

    #[test]
    fn bad_magic_is_a_protocol_error() {
        let mut bad = WRITE_FUA;
        bad[3] = 0x14;
        assert_eq!(
            decode_request(&bad),
            Err(ProtocolError::BadRequestMagic(0x2560_9514))
        );
    }

    #[test]
    fn unknown_commands_decode_without_payload() {
        let mut unknown = WRITE_FUA;
        unknown[7] = 0x2a;
        let request = decode_request(&unknown).unwrap().unwrap();
        assert_eq!(request.command, Command::Unknown(42));
        assert_eq!(request.payload_bytes(), 0);
    }
}
