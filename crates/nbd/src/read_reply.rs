//! The reply to one READ, with the spec's rules enforced: simple replies carry the whole
//! request's data after one header; once structured replies are negotiated a READ must be
//! answered with chunks (never a simple reply, not even an early EINVAL), ending with DONE.
//!
//! Errors: with a simple reply, an error found after the success header went out cannot be
//! reported, so the connection must be dropped ([`ReadErrorOutcome::Disconnect`]). With
//! structured replies an error chunk may follow data chunks, so the reply can always report it,
//! provided the data chunk in progress is completed (zero-padded) first.

use crate::proto::{Command, Errno};
use crate::reply::{
    encode_error, encode_error_offset, encode_none, encode_offset_data_header, encode_offset_hole,
    encode_simple_reply,
};
use crate::request::Request;
use crate::server::handshake::Negotiated;

/// What became of an error reported on a READ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum ReadErrorOutcome {
    /// The error was encoded; the reply is complete.
    Reported,
    /// Data was already promised by a simple reply header: drop the connection, send nothing.
    Disconnect,
}

/// Builds the reply to one READ request.
#[derive(Debug)]
pub struct ReadReply {
    cookie: u64,
    offset_bytes: u64,
    length_bytes: u32,
    structured: bool,
    dont_fragment: bool,
    covered_bytes: u64,
    content_chunks: u32,
    simple_header_sent: bool,
    errored: bool,
    finished: bool,
}

impl ReadReply {
    /// Starts the reply to `request`, a READ that passed validation.
    pub fn new(request: &Request, negotiated: &Negotiated) -> Self {
        assert_eq!(request.command, Command::Read);
        Self {
            cookie: request.cookie,
            offset_bytes: request.offset_bytes,
            length_bytes: request.length_bytes,
            structured: negotiated.structured_replies,
            dont_fragment: request.flags.contains(crate::proto::CommandFlags::DF),
            covered_bytes: 0,
            content_chunks: 0,
            simple_header_sent: false,
            errored: false,
            finished: false,
        }
    }

    /// Whether the reply is made of structured chunks.
    pub fn is_structured(&self) -> bool {
        self.structured
    }

    /// Appends the header for `data_bytes` of data at `offset_bytes`; the caller sends exactly
    /// that many bytes after it. With simple replies there is one call covering the whole
    /// request; with structured replies any number of non-overlapping pieces (one with DF).
    pub fn data(&mut self, out: &mut Vec<u8>, offset_bytes: u64, data_bytes: u32) {
        assert!(!self.finished && !self.errored);
        if self.structured {
            self.content(offset_bytes, data_bytes);
            encode_offset_data_header(out, self.cookie, offset_bytes, data_bytes, false);
        } else {
            assert!(!self.simple_header_sent, "a simple reply has one header");
            assert_eq!(
                offset_bytes, self.offset_bytes,
                "a simple reply covers the whole request"
            );
            assert_eq!(
                data_bytes, self.length_bytes,
                "a simple reply covers the whole request"
            );
            self.simple_header_sent = true;
            self.covered_bytes = u64::from(data_bytes);
            encode_simple_reply(out, self.cookie, None);
        }
    }

    /// Appends a chunk saying `hole_bytes` at `offset_bytes` read as zeroes (structured only,
    /// and not when the client asked for DF).
    pub fn hole(&mut self, out: &mut Vec<u8>, offset_bytes: u64, hole_bytes: u32) {
        assert!(!self.finished && !self.errored);
        assert!(self.structured, "holes need structured replies");
        assert!(!self.dont_fragment, "DF reads must send zeroes as data");
        self.content(offset_bytes, hole_bytes);
        encode_offset_hole(out, self.cookie, offset_bytes, hole_bytes, false);
    }

    /// Reports that the read failed; the reply ends here.
    pub fn error(&mut self, out: &mut Vec<u8>, errno: Errno, message: &str) -> ReadErrorOutcome {
        assert!(!self.finished);
        self.finished = true;
        self.errored = true;
        if self.structured {
            encode_error(out, self.cookie, errno, message, true);
            return ReadErrorOutcome::Reported;
        }
        if self.simple_header_sent {
            return ReadErrorOutcome::Disconnect;
        }
        encode_simple_reply(out, self.cookie, Some(errno));
        ReadErrorOutcome::Reported
    }

    /// Reports that the read failed at `offset_bytes`; with structured replies more chunks may
    /// follow and [`ReadReply::finish`] ends the reply; with simple replies this is `error`.
    pub fn error_at(
        &mut self,
        out: &mut Vec<u8>,
        errno: Errno,
        message: &str,
        offset_bytes: u64,
    ) -> ReadErrorOutcome {
        if !self.structured {
            return self.error(out, errno, message);
        }
        assert!(!self.finished);
        assert!(
            self.within(offset_bytes, 1),
            "error offset outside the request"
        );
        self.errored = true;
        encode_error_offset(out, self.cookie, errno, message, offset_bytes, false);
        ReadErrorOutcome::Reported
    }

    /// Ends a reply: the final NONE chunk with DONE for structured replies; for a simple reply
    /// to a zero-length read, the header. Without errors, the data must cover the request.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        assert!(!self.finished);
        self.finished = true;
        if self.structured {
            assert!(
                self.errored || self.covered_bytes == u64::from(self.length_bytes),
                "a successful read reply covers the whole request"
            );
            encode_none(out, self.cookie);
            return;
        }
        if !self.simple_header_sent {
            assert_eq!(
                self.length_bytes, 0,
                "send the data header before finishing"
            );
            encode_simple_reply(out, self.cookie, None);
        }
    }

    fn content(&mut self, offset_bytes: u64, bytes: u32) {
        assert!(bytes > 0, "chunks describe at least one byte");
        assert!(
            self.within(offset_bytes, bytes),
            "chunk outside the request"
        );
        assert!(
            !self.dont_fragment || self.content_chunks == 0,
            "DF allows one content chunk"
        );
        self.content_chunks += 1;
        self.covered_bytes += u64::from(bytes);
        assert!(
            self.covered_bytes <= u64::from(self.length_bytes),
            "chunks overlap"
        );
    }

    fn within(&self, offset_bytes: u64, bytes: u32) -> bool {
        let request_end = self.offset_bytes + u64::from(self.length_bytes);
        offset_bytes >= self.offset_bytes
            && offset_bytes
                .checked_add(u64::from(bytes))
                .is_some_and(|end| end <= request_end)
    }
}
