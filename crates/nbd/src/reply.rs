//! Transmission-phase reply encoders: the simple reply and each structured reply chunk.
//!
//! Encoders append headers (and small payloads) to a Vec; read data is never copied here: the
//! caller sends it from its own buffer after the header (writev or a linked io_uring send).

use crate::proto::{
    ChunkType, Errno, SIMPLE_REPLY_MAGIC, STRING_BYTES_MAX, STRUCTURED_REPLY_MAGIC, reply_flags,
};
use crate::wire::{length_u32, put_u16, put_u32, put_u64, truncate_to_char_boundary};

/// One extent of a block status chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length of the extent, nonzero.
    pub length_bytes: u32,
    /// Status flags defined by the metadata context (e.g. `allocation_flags`).
    pub flags: u32,
}

/// Appends a 16-byte simple reply; for a successful simple READ the data follows it.
pub fn encode_simple_reply(out: &mut Vec<u8>, cookie: u64, error: Option<Errno>) {
    put_u32(out, SIMPLE_REPLY_MAGIC);
    put_u32(out, error.map_or(0, Errno::to_u32));
    put_u64(out, cookie);
}

/// Appends a 20-byte structured chunk header.
pub fn encode_chunk_header(
    out: &mut Vec<u8>,
    cookie: u64,
    chunk_type: ChunkType,
    done: bool,
    length_bytes: u32,
) {
    put_u32(out, STRUCTURED_REPLY_MAGIC);
    put_u16(out, if done { reply_flags::DONE } else { 0 });
    put_u16(out, chunk_type.to_u16());
    put_u64(out, cookie);
    put_u32(out, length_bytes);
}

/// Appends `NBD_REPLY_TYPE_NONE` with DONE: the final chunk of a reply.
pub fn encode_none(out: &mut Vec<u8>, cookie: u64) {
    encode_chunk_header(out, cookie, ChunkType::None, true, 0);
}

/// Appends the 28 bytes that precede `data_bytes` of read data at `offset_bytes`
/// (`NBD_REPLY_TYPE_OFFSET_DATA`). The caller sends the data itself, and must send all of it
/// (zero-padded on a late error) once this header is out.
pub fn encode_offset_data_header(
    out: &mut Vec<u8>,
    cookie: u64,
    offset_bytes: u64,
    data_bytes: u32,
    done: bool,
) {
    assert!(data_bytes > 0, "a data chunk describes at least one byte");
    let length_bytes = data_bytes
        .checked_add(8)
        .expect("read data chunk above 4 GiB");
    encode_chunk_header(out, cookie, ChunkType::OffsetData, done, length_bytes);
    put_u64(out, offset_bytes);
}

/// Appends `NBD_REPLY_TYPE_OFFSET_HOLE`: `hole_bytes` at `offset_bytes` read as zeroes.
pub fn encode_offset_hole(
    out: &mut Vec<u8>,
    cookie: u64,
    offset_bytes: u64,
    hole_bytes: u32,
    done: bool,
) {
    assert!(hole_bytes > 0, "a hole chunk describes at least one byte");
    encode_chunk_header(out, cookie, ChunkType::OffsetHole, done, 12);
    put_u64(out, offset_bytes);
    put_u32(out, hole_bytes);
}

/// Appends `NBD_REPLY_TYPE_BLOCK_STATUS` for one metadata context.
pub fn encode_block_status(
    out: &mut Vec<u8>,
    cookie: u64,
    context_id: u32,
    extents: &[Extent],
    done: bool,
) {
    assert!(
        !extents.is_empty(),
        "a block status chunk has at least one extent"
    );
    let length_bytes = extents
        .len()
        .checked_mul(8)
        .and_then(|bytes| bytes.checked_add(4))
        .and_then(|bytes| u32::try_from(bytes).ok())
        .expect("block status chunk above 4 GiB");
    encode_chunk_header(out, cookie, ChunkType::BlockStatus, done, length_bytes);
    put_u32(out, context_id);
    for extent in extents {
        assert!(extent.length_bytes > 0, "extents have nonzero length");
        put_u32(out, extent.length_bytes);
        put_u32(out, extent.flags);
    }
}

/// Appends `NBD_REPLY_TYPE_ERROR`; the message is cut to the protocol's 4096-byte limit.
pub fn encode_error(out: &mut Vec<u8>, cookie: u64, errno: Errno, message: &str, done: bool) {
    let message = truncate_to_char_boundary(message, STRING_BYTES_MAX);
    let length_bytes = 6 + length_u32(message.as_bytes());
    encode_chunk_header(out, cookie, ChunkType::Error, done, length_bytes);
    put_u32(out, errno.to_u32());
    put_u16(out, message.len() as u16);
    out.extend_from_slice(message.as_bytes());
}

/// Appends `NBD_REPLY_TYPE_ERROR_OFFSET`: the request failed at `offset_bytes`.
pub fn encode_error_offset(
    out: &mut Vec<u8>,
    cookie: u64,
    errno: Errno,
    message: &str,
    offset_bytes: u64,
    done: bool,
) {
    let message = truncate_to_char_boundary(message, STRING_BYTES_MAX);
    let length_bytes = 14 + length_u32(message.as_bytes());
    encode_chunk_header(out, cookie, ChunkType::ErrorOffset, done, length_bytes);
    put_u32(out, errno.to_u32());
    put_u16(out, message.len() as u16);
    out.extend_from_slice(message.as_bytes());
    put_u64(out, offset_bytes);
}

/// Appends the whole reply to a command other than READ and BLOCK_STATUS (no payload). A
/// success is a simple reply, which the spec allows even with structured replies; an error is a
/// structured error chunk when negotiated, so the client can show the message.
pub fn encode_command_reply(
    out: &mut Vec<u8>,
    cookie: u64,
    structured_replies: bool,
    result: Result<(), (Errno, &str)>,
) {
    match result {
        Ok(()) => encode_simple_reply(out, cookie, None),
        Err((errno, message)) if structured_replies => {
            encode_error(out, cookie, errno, message, true)
        }
        Err((errno, _)) => encode_simple_reply(out, cookie, Some(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOKIE: u64 = 0x1122_3344_5566_7788;
    const COOKIE_BYTES: [u8; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];

    fn header(flags: u16, chunk_type: u16, length: u32) -> Vec<u8> {
        let mut bytes = vec![0x66, 0x8e, 0x33, 0xef];
        bytes.extend_from_slice(&flags.to_be_bytes());
        bytes.extend_from_slice(&chunk_type.to_be_bytes());
        bytes.extend_from_slice(&COOKIE_BYTES);
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes
    }

    #[test]
    fn simple_reply_bytes() {
        let mut out = Vec::new();
        encode_simple_reply(&mut out, COOKIE, Some(Errno::NoSpc));
        let mut expected = vec![0x67, 0x44, 0x66, 0x98, 0, 0, 0, 28];
        expected.extend_from_slice(&COOKIE_BYTES);
        assert_eq!(out, expected);
        out.clear();
        encode_simple_reply(&mut out, COOKIE, None);
        assert_eq!(&out[4..8], &[0, 0, 0, 0]);
        assert_eq!(out.len(), 16);
    }

    #[test]
    fn none_chunk_bytes() {
        let mut out = Vec::new();
        encode_none(&mut out, COOKIE);
        assert_eq!(out, header(1, 0, 0));
    }

    #[test]
    fn offset_data_header_bytes() {
        let mut out = Vec::new();
        encode_offset_data_header(&mut out, COOKIE, 0x200, 4096, false);
        // length = 8 (offset) + 4096 (data) = 0x1008.
        let mut expected = header(0, 1, 0x1008);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x02, 0x00]);
        assert_eq!(out, expected);
    }

    #[test]
    fn offset_hole_bytes() {
        let mut out = Vec::new();
        encode_offset_hole(&mut out, COOKIE, 0x1000, 0x2000, true);
        let mut expected = header(1, 2, 12);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0x00, 0, 0, 0x20, 0x00]);
        assert_eq!(out, expected);
    }

    #[test]
    fn block_status_bytes() {
        let mut out = Vec::new();
        let extents = [
            Extent {
                length_bytes: 0x1000,
                flags: 3,
            },
            Extent {
                length_bytes: 0x200,
                flags: 0,
            },
        ];
        encode_block_status(&mut out, COOKIE, 1, &extents, true);
        let mut expected = header(1, 5, 20);
        expected.extend_from_slice(&[0, 0, 0, 1]);
        expected.extend_from_slice(&[0, 0, 0x10, 0x00, 0, 0, 0, 3]);
        expected.extend_from_slice(&[0, 0, 0x02, 0x00, 0, 0, 0, 0]);
        assert_eq!(out, expected);
    }

    #[test]
    fn error_chunk_bytes() {
        let mut out = Vec::new();
        encode_error(&mut out, COOKIE, Errno::Inval, "bad", true);
        let mut expected = header(1, 0x8001, 9);
        expected.extend_from_slice(&[0, 0, 0, 22, 0, 3, b'b', b'a', b'd']);
        assert_eq!(out, expected);
    }

    #[test]
    fn error_offset_chunk_bytes() {
        let mut out = Vec::new();
        encode_error_offset(&mut out, COOKIE, Errno::Io, "", 0x400, false);
        let mut expected = header(0, 0x8002, 14);
        expected.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x00]);
        assert_eq!(out, expected);
    }

    #[test]
    fn error_messages_are_cut_to_the_string_limit() {
        let mut out = Vec::new();
        let long = "x".repeat(5000);
        encode_error(&mut out, COOKIE, Errno::Io, &long, true);
        assert_eq!(out.len(), 20 + 6 + 4096);
        assert_eq!(&out[24..26], &[0x10, 0x00]);
    }

    #[test]
    fn command_reply_uses_structured_errors_only_when_negotiated() {
        let mut out = Vec::new();
        encode_command_reply(&mut out, COOKIE, true, Ok(()));
        assert_eq!(&out[..4], &[0x67, 0x44, 0x66, 0x98]);
        out.clear();
        encode_command_reply(&mut out, COOKIE, true, Err((Errno::Perm, "ro")));
        assert_eq!(&out[..4], &[0x66, 0x8e, 0x33, 0xef]);
        out.clear();
        encode_command_reply(&mut out, COOKIE, false, Err((Errno::Perm, "ro")));
        assert_eq!(&out[..8], &[0x67, 0x44, 0x66, 0x98, 0, 0, 0, 1]);
    }
}
