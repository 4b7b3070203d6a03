//! Sans-I/O decoder of transmission-phase replies (simple and structured) for the client.
//!
//! The decoder must know every request in flight: a simple reply to a READ carries data whose
//! length only the request tells, and structured chunks are checked against the request they
//! answer. Read data is never buffered: it is handed out as slices of the input.

use std::collections::HashMap;
use std::fmt;

use crate::proto::{
    CHUNK_ERROR_BIT, ChunkType, Command, SIMPLE_REPLY_HEADER_BYTES, SIMPLE_REPLY_MAGIC,
    STRUCTURED_REPLY_HEADER_BYTES, STRUCTURED_REPLY_MAGIC, reply_flags,
};
use crate::reply::Extent;
use crate::wire::Reader;

/// Largest buffered chunk payload: a block status chunk of 2^20 extents (the spec's bound).
const CHUNK_PAYLOAD_BYTES_MAX: u32 = 4 + 8 * (1 << 20);

/// A request the decoder expects a reply to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The command sent.
    pub command: Command,
    /// Its offset.
    pub offset_bytes: u64,
    /// Its length.
    pub length_bytes: u32,
}

/// An error the server reported for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerError {
    /// The error value (see [`crate::proto::Errno`]).
    pub errno: u32,
    /// The server's message (structured replies only).
    pub message: String,
    /// Where the error happened, if the server said.
    pub offset_bytes: Option<u64>,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", crate::proto::Errno::from_u32(self.errno))?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(offset) = self.offset_bytes {
            write!(f, " at offset {offset}")?;
        }
        Ok(())
    }
}

/// Something decoded from the reply stream.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyEvent<'a> {
    /// Read data at an absolute offset: part or all of a simple reply or of a data chunk.
    Data {
        /// The request's cookie.
        cookie: u64,
        /// Where `data` belongs in the export.
        offset_bytes: u64,
        /// The bytes, borrowed from the input.
        data: &'a [u8],
    },
    /// A range of the read that reads as zeroes.
    Hole {
        /// The request's cookie.
        cookie: u64,
        /// Start of the hole.
        offset_bytes: u64,
        /// Its length.
        length_bytes: u32,
    },
    /// Block status extents of one context.
    BlockStatus {
        /// The request's cookie.
        cookie: u64,
        /// The metadata context they describe.
        context_id: u32,
        /// The extents, in order from the request's offset.
        extents: Vec<Extent>,
    },
    /// The reply to `cookie` is complete.
    Complete {
        /// The request's cookie.
        cookie: u64,
        /// Success, or the (first) error the server reported.
        result: Result<(), ServerError>,
    },
}

/// A reply stream that cannot be trusted any more: the client must hard-disconnect.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    /// A reply did not start with a known magic.
    BadMagic(u32),
    /// A reply names a cookie that is not in flight.
    UnknownCookie(u64),
    /// A structured chunk arrived although structured replies were not negotiated.
    UnexpectedStructuredReply,
    /// A simple reply to a READ although structured replies were negotiated.
    SimpleReplyToStructuredRead,
    /// A chunk of a type the client does not know and that is not an error chunk.
    UnknownChunkType(u16),
    /// A chunk that breaks the spec (wrong length, outside the request, wrong command...).
    InvalidChunk(&'static str),
    /// A chunk payload above the client's limit.
    ChunkTooLong(u32),
    /// The server claimed success without sending all the data of a read.
    IncompleteRead(u64),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic(magic) => write!(f, "bad reply magic {magic:#010x}"),
            Self::UnknownCookie(cookie) => write!(f, "reply for unknown cookie {cookie:#x}"),
            Self::UnexpectedStructuredReply => write!(f, "structured reply without negotiation"),
            Self::SimpleReplyToStructuredRead => {
                write!(f, "simple reply to a read with structured replies")
            }
            Self::UnknownChunkType(chunk_type) => write!(f, "unknown chunk type {chunk_type:#x}"),
            Self::InvalidChunk(what) => write!(f, "invalid chunk: {what}"),
            Self::ChunkTooLong(length) => write!(f, "chunk payload of {length} bytes is too long"),
            Self::IncompleteRead(cookie) => {
                write!(f, "read {cookie:#x} completed without all its data")
            }
        }
    }
}

impl std::error::Error for ReplyError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ChunkHeader {
    done: bool,
    chunk_type: u16,
    cookie: u64,
    length_bytes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Magic,
    SimpleHeader,
    ChunkHeader,
    ChunkPayload(ChunkHeader),
    OffsetDataPrefix(ChunkHeader),
    Data {
        cookie: u64,
        offset_bytes: u64,
        remaining_bytes: u32,
        then: AfterData,
    },
    /// A final chunk produced an event; its completion is the next event.
    CompleteNext(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterData {
    /// A simple reply: complete the request.
    CompleteSimple,
    /// A data chunk: complete the request if the chunk had DONE.
    Chunk { done: bool },
}

#[derive(Clone, Debug)]
struct Tracked {
    request: InFlight,
    covered_bytes: u64,
    error: Option<ServerError>,
}

/// Decodes the replies of one connection.
pub struct ReplyDecoder {
    structured_replies: bool,
    state: State,
    pending: Vec<u8>,
    in_flight: HashMap<u64, Tracked>,
}

impl ReplyDecoder {
    /// A decoder for a connection that did (or did not) negotiate structured replies.
    pub fn new(structured_replies: bool) -> Self {
        Self {
            structured_replies,
            state: State::Magic,
            pending: Vec::new(),
            in_flight: HashMap::new(),
        }
    }

    /// Registers a request sent with `cookie`; DISC has no reply and must not be registered.
    pub fn expect(&mut self, cookie: u64, request: InFlight) {
        assert_ne!(request.command, Command::Disc, "NBD_CMD_DISC has no reply");
        let previous = self.in_flight.insert(
            cookie,
            Tracked {
                request,
                covered_bytes: 0,
                error: None,
            },
        );
        assert!(previous.is_none(), "cookie {cookie:#x} already in flight");
    }

    /// Requests still waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Decodes from `input`. Returns the bytes consumed and at most one event; `None` means all
    /// input was consumed and more is needed.
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<(usize, Option<ReplyEvent<'a>>), ReplyError> {
        let mut consumed = 0;
        loop {
            match self.state {
                State::Magic => {
                    if !self.fill(input, &mut consumed, 4) {
                        return Ok((consumed, None));
                    }
                    let magic = Reader::new(&self.pending).u32().expect("filled");
                    self.state = match magic {
                        SIMPLE_REPLY_MAGIC => State::SimpleHeader,
                        STRUCTURED_REPLY_MAGIC if self.structured_replies => State::ChunkHeader,
                        STRUCTURED_REPLY_MAGIC => {
                            return Err(ReplyError::UnexpectedStructuredReply);
                        }
                        other => return Err(ReplyError::BadMagic(other)),
                    };
                }
                State::SimpleHeader => {
                    if !self.fill(input, &mut consumed, SIMPLE_REPLY_HEADER_BYTES) {
                        return Ok((consumed, None));
                    }
                    if let Some(event) = self.simple_header()? {
                        return Ok((consumed, Some(event)));
                    }
                }
                State::ChunkHeader => {
                    if !self.fill(input, &mut consumed, STRUCTURED_REPLY_HEADER_BYTES) {
                        return Ok((consumed, None));
                    }
                    if let Some(event) = self.chunk_header()? {
                        return Ok((consumed, Some(event)));
                    }
                }
                State::OffsetDataPrefix(header) => {
                    if !self.fill(input, &mut consumed, 8) {
                        return Ok((consumed, None));
                    }
                    let offset_bytes = Reader::new(&self.pending).u64().expect("filled");
                    self.pending.clear();
                    let data_bytes = header.length_bytes - 8;
                    self.cover(header.cookie, offset_bytes, data_bytes)?;
                    self.state = State::Data {
                        cookie: header.cookie,
                        offset_bytes,
                        remaining_bytes: data_bytes,
                        then: AfterData::Chunk { done: header.done },
                    };
                }
                State::ChunkPayload(header) => {
                    if !self.fill(input, &mut consumed, header.length_bytes as usize) {
                        return Ok((consumed, None));
                    }
                    let payload = std::mem::take(&mut self.pending);
                    let result = self.chunk_payload(header, &payload);
                    self.pending = payload;
                    self.pending.clear();
                    if let Some(event) = result? {
                        return Ok((consumed, Some(event)));
                    }
                }
                State::CompleteNext(cookie) => {
                    self.state = State::Magic;
                    return Ok((consumed, Some(self.complete(cookie)?)));
                }
                State::Data {
                    cookie,
                    offset_bytes,
                    remaining_bytes,
                    then,
                } => {
                    if remaining_bytes == 0 {
                        self.state = State::Magic;
                        let done = match then {
                            AfterData::CompleteSimple => true,
                            AfterData::Chunk { done } => done,
                        };
                        if done {
                            return Ok((consumed, Some(self.complete(cookie)?)));
                        }
                        continue;
                    }
                    let available = input.len() - consumed;
                    if available == 0 {
                        return Ok((consumed, None));
                    }
                    let taken = available.min(remaining_bytes as usize);
                    let data = &input[consumed..consumed + taken];
                    consumed += taken;
                    self.state = State::Data {
                        cookie,
                        offset_bytes: offset_bytes + taken as u64,
                        remaining_bytes: remaining_bytes - taken as u32,
                        then,
                    };
                    return Ok((
                        consumed,
                        Some(ReplyEvent::Data {
                            cookie,
                            offset_bytes,
                            data,
                        }),
                    ));
                }
            }
        }
    }

    fn fill(&mut self, input: &[u8], consumed: &mut usize, needed: usize) -> bool {
        let wanted = needed - self.pending.len();
        let taken = wanted.min(input.len() - *consumed);
        self.pending
            .extend_from_slice(&input[*consumed..*consumed + taken]);
        *consumed += taken;
        self.pending.len() == needed
    }

    fn tracked(&mut self, cookie: u64) -> Result<&mut Tracked, ReplyError> {
        self.in_flight
            .get_mut(&cookie)
            .ok_or(ReplyError::UnknownCookie(cookie))
    }

    fn simple_header<'a>(&mut self) -> Result<Option<ReplyEvent<'a>>, ReplyError> {
        let mut reader = Reader::new(&self.pending[4..]);
        let errno = reader.u32().expect("filled");
        let cookie = reader.u64().expect("filled");
        self.pending.clear();
        self.state = State::Magic;
        let structured = self.structured_replies;
        let tracked = self.tracked(cookie)?;
        let request = tracked.request;
        if request.command == Command::Read && structured {
            return Err(ReplyError::SimpleReplyToStructuredRead);
        }
        if errno != 0 {
            tracked.error = Some(ServerError {
                errno,
                message: String::new(),
                offset_bytes: None,
            });
            return self.complete(cookie).map(Some);
        }
        if request.command == Command::Read {
            tracked.covered_bytes = u64::from(request.length_bytes);
            self.state = State::Data {
                cookie,
                offset_bytes: request.offset_bytes,
                remaining_bytes: request.length_bytes,
                then: AfterData::CompleteSimple,
            };
            return Ok(None);
        }
        self.complete(cookie).map(Some)
    }

    fn chunk_header<'a>(&mut self) -> Result<Option<ReplyEvent<'a>>, ReplyError> {
        let mut reader = Reader::new(&self.pending[4..]);
        let flags = reader.u16().expect("filled");
        let chunk_type = reader.u16().expect("filled");
        let cookie = reader.u64().expect("filled");
        let length_bytes = reader.u32().expect("filled");
        self.pending.clear();
        let header = ChunkHeader {
            done: flags & reply_flags::DONE != 0,
            chunk_type,
            cookie,
            length_bytes,
        };
        let command = self.tracked(cookie)?.request.command;
        match ChunkType::from_u16(chunk_type) {
            Some(ChunkType::None) => {
                if length_bytes != 0 || !header.done {
                    return Err(ReplyError::InvalidChunk(
                        "NONE chunk must be empty and final",
                    ));
                }
                self.state = State::Magic;
                self.complete(cookie).map(Some)
            }
            Some(ChunkType::OffsetData) => {
                if command != Command::Read {
                    return Err(ReplyError::InvalidChunk(
                        "data chunk for a command other than READ",
                    ));
                }
                if length_bytes < 9 {
                    return Err(ReplyError::InvalidChunk("data chunk shorter than 9 bytes"));
                }
                self.state = State::OffsetDataPrefix(header);
                Ok(None)
            }
            _ if length_bytes > CHUNK_PAYLOAD_BYTES_MAX => {
                Err(ReplyError::ChunkTooLong(length_bytes))
            }
            Some(_) => {
                self.state = State::ChunkPayload(header);
                Ok(None)
            }
            None if chunk_type & CHUNK_ERROR_BIT != 0 => {
                self.state = State::ChunkPayload(header);
                Ok(None)
            }
            None => Err(ReplyError::UnknownChunkType(chunk_type)),
        }
    }

    /// Handles a buffered chunk payload (every type except data).
    fn chunk_payload<'a>(
        &mut self,
        header: ChunkHeader,
        payload: &[u8],
    ) -> Result<Option<ReplyEvent<'a>>, ReplyError> {
        self.state = State::Magic;
        let cookie = header.cookie;
        let command = self.tracked(cookie)?.request.command;
        let mut reader = Reader::new(payload);
        let event = match ChunkType::from_u16(header.chunk_type) {
            Some(ChunkType::OffsetHole) => {
                if command != Command::Read || payload.len() != 12 {
                    return Err(ReplyError::InvalidChunk(
                        "hole chunk must be 12 bytes and answer a READ",
                    ));
                }
                let offset_bytes = reader.u64().expect("length checked");
                let length_bytes = reader.u32().expect("length checked");
                if length_bytes == 0 {
                    return Err(ReplyError::InvalidChunk("empty hole"));
                }
                self.cover(cookie, offset_bytes, length_bytes)?;
                Some(ReplyEvent::Hole {
                    cookie,
                    offset_bytes,
                    length_bytes,
                })
            }
            Some(ChunkType::BlockStatus) => {
                if command != Command::BlockStatus
                    || payload.len() < 12
                    || !(payload.len() - 4).is_multiple_of(8)
                {
                    return Err(ReplyError::InvalidChunk(
                        "block status chunk must be 4 + 8n bytes, n > 0",
                    ));
                }
                let context_id = reader.u32().expect("length checked");
                let mut extents = Vec::with_capacity((payload.len() - 4) / 8);
                while reader.remaining() > 0 {
                    let length_bytes = reader.u32().expect("length checked");
                    let flags = reader.u32().expect("length checked");
                    if length_bytes == 0 {
                        return Err(ReplyError::InvalidChunk("empty extent"));
                    }
                    extents.push(Extent {
                        length_bytes,
                        flags,
                    });
                }
                Some(ReplyEvent::BlockStatus {
                    cookie,
                    context_id,
                    extents,
                })
            }
            Some(ChunkType::Error | ChunkType::ErrorOffset) | None => {
                // Known error chunks, and unknown ones (bit 15 set): the reply has failed.
                let error = error_chunk(header.chunk_type, payload)?;
                let tracked = self.tracked(cookie)?;
                if tracked.error.is_none() {
                    tracked.error = Some(error);
                }
                None
            }
            Some(ChunkType::None | ChunkType::OffsetData) => {
                unreachable!("handled with the header")
            }
        };
        if header.done {
            return match event {
                // The event goes out now; completion follows with the next call.
                Some(event) => {
                    self.state = State::CompleteNext(cookie);
                    Ok(Some(event))
                }
                None => self.complete(cookie).map(Some),
            };
        }
        Ok(event)
    }

    /// Records read content at `offset_bytes` after checking it lies within the request.
    fn cover(&mut self, cookie: u64, offset_bytes: u64, bytes: u32) -> Result<(), ReplyError> {
        let tracked = self.tracked(cookie)?;
        let request = tracked.request;
        let request_end = request.offset_bytes + u64::from(request.length_bytes);
        let within = offset_bytes >= request.offset_bytes
            && offset_bytes
                .checked_add(u64::from(bytes))
                .is_some_and(|end| end <= request_end);
        if !within {
            return Err(ReplyError::InvalidChunk("content outside the request"));
        }
        tracked.covered_bytes += u64::from(bytes);
        if tracked.covered_bytes > u64::from(request.length_bytes) {
            return Err(ReplyError::InvalidChunk("overlapping content chunks"));
        }
        Ok(())
    }

    fn complete<'a>(&mut self, cookie: u64) -> Result<ReplyEvent<'a>, ReplyError> {
        let tracked = self
            .in_flight
            .remove(&cookie)
            .ok_or(ReplyError::UnknownCookie(cookie))?;
        let result = match tracked.error {
            Some(error) => Err(error),
            None if tracked.request.command == Command::Read
                && tracked.covered_bytes != u64::from(tracked.request.length_bytes) =>
            {
                return Err(ReplyError::IncompleteRead(cookie));
            }
            None => Ok(()),
        };
        Ok(ReplyEvent::Complete { cookie, result })
    }
}

/// Parses the common start of every error chunk: errno, message length, message; for
/// ERROR_OFFSET the offset follows the message.
fn error_chunk(chunk_type: u16, payload: &[u8]) -> Result<ServerError, ReplyError> {
    let mut reader = Reader::new(payload);
    let errno = reader
        .u32()
        .ok_or(ReplyError::InvalidChunk("error chunk shorter than 6 bytes"))?;
    let message_length = reader
        .u16()
        .ok_or(ReplyError::InvalidChunk("error chunk shorter than 6 bytes"))?;
    let message = reader
        .bytes(usize::from(message_length))
        .ok_or(ReplyError::InvalidChunk(
            "error message longer than the chunk",
        ))?;
    let message = String::from_utf8_lossy(message).into_owned();
    let offset_bytes = if ChunkType::from_u16(chunk_type) == Some(ChunkType::ErrorOffset) {
        Some(reader.u64().ok_or(ReplyError::InvalidChunk(
            "error offset chunk without offset",
        ))?)
    } else {
        None
    };
    if errno == 0 {
        return Err(ReplyError::InvalidChunk("error chunk with error zero"));
    }
    Ok(ServerError {
        errno,
        message,
        offset_bytes,
    })
}
