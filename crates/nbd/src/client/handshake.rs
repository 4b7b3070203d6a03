//! The client side of the handshake, as a sans-I/O state machine.
//!
//! Fixed newstyle: optionally `NBD_OPT_STRUCTURED_REPLY`, then (with structured replies)
//! `NBD_OPT_SET_META_CONTEXT` if contexts are wanted, then `NBD_OPT_GO` asking for the block
//! size; if the server does not know GO, `NBD_OPT_EXPORT_NAME` instead. A server that is not
//! fixed newstyle gets `NBD_OPT_EXPORT_NAME` straight away.

use std::fmt;

use crate::export::BlockSizeConstraints;
use crate::proto::{
    CLIENT_FLAGS_BYTES, EXPORT_NAME_ZEROES_BYTES, GREETING_BYTES, IHAVEOPT, InfoType, NBD_MAGIC,
    OPTION_REPLY_HEADER_BYTES, OPTION_REPLY_MAGIC, OptionReplyType, OptionType, STRING_BYTES_MAX,
    TransmissionFlags, client_flags, handshake_flags,
};
use crate::server::handshake::MetaContext;
use crate::wire::{Reader, length_u32, put_u16, put_u32, put_u64};

/// The oldstyle magic that follows NBDMAGIC in servers we do not support.
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Longest option reply payload accepted; real replies are a few KiB at most.
const OPTION_REPLY_BYTES_MAX: u32 = 64 * 1024;

/// What the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The export to use (empty: the server's default export).
    pub export_name: String,
    /// Ask for structured replies.
    pub structured_replies: bool,
    /// Metadata contexts to select (needs structured replies), e.g. `base:allocation`.
    pub meta_contexts: Vec<String>,
}

impl ClientConfig {
    /// Structured replies on, no metadata contexts.
    pub fn new(export_name: impl Into<String>) -> Self {
        Self {
            export_name: export_name.into(),
            structured_replies: true,
            meta_contexts: Vec::new(),
        }
    }
}

/// What the client learned about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportDetails {
    /// Size in bytes.
    pub size_bytes: u64,
    /// Transmission flags from the server.
    pub transmission_flags: TransmissionFlags,
    /// Constraints the server sent; None after the EXPORT_NAME fallback.
    pub block_size: Option<BlockSizeConstraints>,
    /// Whether structured replies were negotiated.
    pub structured_replies: bool,
    /// Contexts the server selected.
    pub meta_contexts: Vec<MetaContext>,
    /// Canonical name, if the server sent one.
    pub canonical_name: Option<String>,
    /// Description, if the server sent one.
    pub description: Option<String>,
}

impl ExportDetails {
    /// The constraints to obey: the server's, or the interoperable defaults (512 bytes, 32 MiB).
    pub fn effective_block_size(&self) -> BlockSizeConstraints {
        self.block_size.unwrap_or(BlockSizeConstraints::TESSERA)
    }
}

/// Progress of the client handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientStatus {
    /// More input is needed (all input was consumed).
    Continue,
    /// The transmission phase starts.
    Done(ExportDetails),
}

/// Why the client handshake failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientHandshakeError {
    /// The server's first bytes were not an NBD greeting.
    NotNbd,
    /// The server only speaks the oldstyle handshake.
    OldstyleServer,
    /// An option reply did not start with the reply magic.
    BadReplyMagic(u64),
    /// An option reply answered another option than the one sent.
    WrongOption {
        /// The option the client sent.
        expected: u32,
        /// The option the reply names.
        received: u32,
    },
    /// A reply type that makes no sense here.
    UnexpectedReply(u32),
    /// A reply longer than the client accepts.
    ReplyTooLong(u32),
    /// A reply whose payload does not match its type.
    MalformedReply(&'static str),
    /// The server refused the export (reply type and its message).
    ExportRefused {
        /// The error reply type.
        reply_type: u32,
        /// The server's message, if any.
        message: String,
    },
}

impl fmt::Display for ClientHandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotNbd => write!(f, "the server did not send an NBD greeting"),
            Self::OldstyleServer => write!(f, "the server only speaks the oldstyle handshake"),
            Self::BadReplyMagic(magic) => write!(f, "bad option reply magic {magic:#x}"),
            Self::WrongOption { expected, received } => {
                write!(
                    f,
                    "reply for option {received} while waiting for option {expected}"
                )
            }
            Self::UnexpectedReply(reply_type) => {
                write!(f, "unexpected option reply type {reply_type:#x}")
            }
            Self::ReplyTooLong(length) => write!(f, "option reply of {length} bytes is too long"),
            Self::MalformedReply(what) => write!(f, "malformed option reply: {what}"),
            Self::ExportRefused {
                reply_type,
                message,
            } => {
                let name = OptionReplyType::from_u32(*reply_type)
                    .map_or_else(|| format!("{reply_type:#x}"), |known| format!("{known:?}"));
                write!(f, "the server refused the export ({name}): {message}")
            }
        }
    }
}

impl std::error::Error for ClientHandshakeError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    StructuredReply,
    SetMetaContext,
    Go,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Greeting,
    ReplyHeader(Waiting),
    ReplyPayload {
        waiting: Waiting,
        reply_type: u32,
        length_bytes: u32,
    },
    ExportNameReply,
    Finished,
}

/// The client handshake of one connection.
pub struct ClientHandshake {
    config: ClientConfig,
    state: State,
    pending: Vec<u8>,
    output: Vec<u8>,
    no_zeroes: bool,
    structured_replies: bool,
    meta_contexts: Vec<MetaContext>,
    size_and_flags: Option<(u64, TransmissionFlags)>,
    block_size: Option<BlockSizeConstraints>,
    canonical_name: Option<String>,
    description: Option<String>,
}

impl ClientHandshake {
    /// Starts a handshake; nothing is sent until the server's greeting arrives.
    pub fn new(config: ClientConfig) -> Self {
        assert!(
            config.export_name.len() <= STRING_BYTES_MAX,
            "export name longer than 4096 bytes"
        );
        Self {
            config,
            state: State::Greeting,
            pending: Vec::new(),
            output: Vec::new(),
            no_zeroes: false,
            structured_replies: false,
            meta_contexts: Vec::new(),
            size_and_flags: None,
            block_size: None,
            canonical_name: None,
            description: None,
        }
    }

    /// Moves the bytes to send into `out`.
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.output);
    }

    /// Consumes server bytes; with `Continue` all input was consumed.
    pub fn receive(&mut self, input: &[u8]) -> Result<(usize, ClientStatus), ClientHandshakeError> {
        let mut consumed = 0;
        loop {
            match self.state {
                State::Greeting => {
                    if !self.fill(input, &mut consumed, GREETING_BYTES) {
                        return Ok((consumed, ClientStatus::Continue));
                    }
                    self.greeting()?;
                }
                State::ReplyHeader(waiting) => {
                    if !self.fill(input, &mut consumed, OPTION_REPLY_HEADER_BYTES) {
                        return Ok((consumed, ClientStatus::Continue));
                    }
                    self.reply_header(waiting)?;
                }
                State::ReplyPayload {
                    waiting,
                    reply_type,
                    length_bytes,
                } => {
                    if !self.fill(input, &mut consumed, length_bytes as usize) {
                        return Ok((consumed, ClientStatus::Continue));
                    }
                    let payload = std::mem::take(&mut self.pending);
                    let status = self.reply(waiting, reply_type, &payload);
                    self.pending = payload;
                    self.pending.clear();
                    if let Some(details) = status? {
                        return Ok((consumed, ClientStatus::Done(details)));
                    }
                }
                State::ExportNameReply => {
                    let needed = 10
                        + if self.no_zeroes {
                            0
                        } else {
                            EXPORT_NAME_ZEROES_BYTES
                        };
                    if !self.fill(input, &mut consumed, needed) {
                        return Ok((consumed, ClientStatus::Continue));
                    }
                    let mut reader = Reader::new(&self.pending);
                    let size_bytes = reader.u64().expect("filled");
                    let flags = TransmissionFlags(reader.u16().expect("filled"));
                    self.pending.clear();
                    self.size_and_flags = Some((size_bytes, flags));
                    return Ok((consumed, ClientStatus::Done(self.details())));
                }
                State::Finished => panic!("receive called after the handshake ended"),
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

    fn greeting(&mut self) -> Result<(), ClientHandshakeError> {
        let mut reader = Reader::new(&self.pending);
        let magic = reader.u64().expect("filled");
        let second = reader.u64().expect("filled");
        let flags = reader.u16().expect("filled");
        self.pending.clear();
        if magic != NBD_MAGIC {
            return Err(ClientHandshakeError::NotNbd);
        }
        if second == OLDSTYLE_MAGIC {
            return Err(ClientHandshakeError::OldstyleServer);
        }
        if second != IHAVEOPT {
            return Err(ClientHandshakeError::NotNbd);
        }
        let fixed_newstyle = flags & handshake_flags::FIXED_NEWSTYLE != 0;
        self.no_zeroes = flags & handshake_flags::NO_ZEROES != 0;
        let mut reply_flags = 0;
        if fixed_newstyle {
            reply_flags |= client_flags::FIXED_NEWSTYLE;
        }
        if self.no_zeroes {
            reply_flags |= client_flags::NO_ZEROES;
        }
        put_u32(&mut self.output, reply_flags);
        debug_assert_eq!(CLIENT_FLAGS_BYTES, 4);
        if fixed_newstyle {
            self.next_option(None);
        } else {
            self.send_export_name();
        }
        Ok(())
    }

    /// Sends the option that follows `after` in the sequence.
    fn next_option(&mut self, after: Option<Waiting>) {
        let wants_contexts = self.structured_replies && !self.config.meta_contexts.is_empty();
        let next = match after {
            None if self.config.structured_replies => Waiting::StructuredReply,
            Some(Waiting::StructuredReply) if wants_contexts => Waiting::SetMetaContext,
            _ => Waiting::Go,
        };
        let mut data = Vec::new();
        let option = match next {
            Waiting::StructuredReply => OptionType::StructuredReply,
            Waiting::SetMetaContext => {
                let name = self.config.export_name.as_bytes();
                put_u32(&mut data, length_u32(name));
                data.extend_from_slice(name);
                put_u32(&mut data, self.config.meta_contexts.len() as u32);
                for context in &self.config.meta_contexts {
                    put_u32(&mut data, length_u32(context.as_bytes()));
                    data.extend_from_slice(context.as_bytes());
                }
                OptionType::SetMetaContext
            }
            Waiting::Go => {
                let name = self.config.export_name.as_bytes();
                put_u32(&mut data, length_u32(name));
                data.extend_from_slice(name);
                let requests = [InfoType::BlockSize, InfoType::Name, InfoType::Description];
                put_u16(&mut data, requests.len() as u16);
                for request in requests {
                    put_u16(&mut data, request.to_u16());
                }
                OptionType::Go
            }
        };
        self.send_option(option, &data);
        self.state = State::ReplyHeader(next);
    }

    fn send_option(&mut self, option: OptionType, data: &[u8]) {
        put_u64(&mut self.output, IHAVEOPT);
        put_u32(&mut self.output, option.to_u32());
        put_u32(&mut self.output, length_u32(data));
        self.output.extend_from_slice(data);
    }

    fn send_export_name(&mut self) {
        let name = self.config.export_name.clone();
        self.send_option(OptionType::ExportName, name.as_bytes());
        self.state = State::ExportNameReply;
    }

    fn reply_header(&mut self, waiting: Waiting) -> Result<(), ClientHandshakeError> {
        let mut reader = Reader::new(&self.pending);
        let magic = reader.u64().expect("filled");
        let option = reader.u32().expect("filled");
        let reply_type = reader.u32().expect("filled");
        let length_bytes = reader.u32().expect("filled");
        self.pending.clear();
        if magic != OPTION_REPLY_MAGIC {
            return Err(ClientHandshakeError::BadReplyMagic(magic));
        }
        let expected = match waiting {
            Waiting::StructuredReply => OptionType::StructuredReply,
            Waiting::SetMetaContext => OptionType::SetMetaContext,
            Waiting::Go => OptionType::Go,
        }
        .to_u32();
        if option != expected {
            return Err(ClientHandshakeError::WrongOption {
                expected,
                received: option,
            });
        }
        if length_bytes > OPTION_REPLY_BYTES_MAX {
            return Err(ClientHandshakeError::ReplyTooLong(length_bytes));
        }
        self.state = State::ReplyPayload {
            waiting,
            reply_type,
            length_bytes,
        };
        Ok(())
    }

    /// Handles one complete option reply; Some when the handshake is done.
    fn reply(
        &mut self,
        waiting: Waiting,
        reply_type: u32,
        payload: &[u8],
    ) -> Result<Option<ExportDetails>, ClientHandshakeError> {
        self.state = State::ReplyHeader(waiting);
        let known = OptionReplyType::from_u32(reply_type);
        let is_error = reply_type & crate::proto::OPTION_REPLY_ERROR_BIT != 0;
        match (waiting, known) {
            (Waiting::StructuredReply, Some(OptionReplyType::Ack)) => {
                self.structured_replies = true;
                self.next_option(Some(waiting));
            }
            // Any error: go on with simple replies.
            (Waiting::StructuredReply, _) if is_error => self.next_option(Some(waiting)),
            (Waiting::SetMetaContext, Some(OptionReplyType::MetaContext)) => {
                let mut reader = Reader::new(payload);
                let id = reader
                    .u32()
                    .ok_or(ClientHandshakeError::MalformedReply("short meta context"))?;
                let name = String::from_utf8(reader.rest().to_vec()).map_err(|_| {
                    ClientHandshakeError::MalformedReply("meta context name is not UTF-8")
                })?;
                self.meta_contexts.push(MetaContext { id, name });
            }
            (Waiting::SetMetaContext, Some(OptionReplyType::Ack)) => {
                self.next_option(Some(waiting))
            }
            (Waiting::SetMetaContext, _) if is_error => {
                // The spec: disregard contexts sent before an error.
                self.meta_contexts.clear();
                self.next_option(Some(waiting));
            }
            (Waiting::Go, Some(OptionReplyType::Info)) => self.info(payload)?,
            (Waiting::Go, Some(OptionReplyType::Ack)) => {
                if self.size_and_flags.is_none() {
                    return Err(ClientHandshakeError::MalformedReply(
                        "success without NBD_INFO_EXPORT",
                    ));
                }
                self.state = State::Finished;
                return Ok(Some(self.details()));
            }
            (Waiting::Go, Some(OptionReplyType::ErrUnsup)) => {
                // An old server without NBD_OPT_GO: what INFO told us does not count.
                self.size_and_flags = None;
                self.block_size = None;
                self.send_export_name();
            }
            (Waiting::Go, _) if is_error => {
                return Err(ClientHandshakeError::ExportRefused {
                    reply_type,
                    message: String::from_utf8_lossy(payload).into_owned(),
                });
            }
            _ => return Err(ClientHandshakeError::UnexpectedReply(reply_type)),
        }
        Ok(None)
    }

    fn info(&mut self, payload: &[u8]) -> Result<(), ClientHandshakeError> {
        let mut reader = Reader::new(payload);
        let info_type = reader
            .u16()
            .ok_or(ClientHandshakeError::MalformedReply("short NBD_REP_INFO"))?;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        match InfoType::from_u16(info_type) {
            Some(InfoType::Export) => {
                if payload.len() != 12 {
                    return Err(ClientHandshakeError::MalformedReply(
                        "NBD_INFO_EXPORT length is not 12",
                    ));
                }
                let size_bytes = reader.u64().expect("length checked");
                let flags = TransmissionFlags(reader.u16().expect("length checked"));
                self.size_and_flags = Some((size_bytes, flags));
            }
            Some(InfoType::BlockSize) => {
                if payload.len() != 14 {
                    return Err(ClientHandshakeError::MalformedReply(
                        "NBD_INFO_BLOCK_SIZE length is not 14",
                    ));
                }
                let constraints = BlockSizeConstraints {
                    minimum_bytes: reader.u32().expect("length checked"),
                    preferred_bytes: reader.u32().expect("length checked"),
                    maximum_payload_bytes: reader.u32().expect("length checked"),
                };
                constraints
                    .check()
                    .map_err(ClientHandshakeError::MalformedReply)?;
                self.block_size = Some(constraints);
            }
            Some(InfoType::Name) => self.canonical_name = Some(text(reader.rest())),
            Some(InfoType::Description) => self.description = Some(text(reader.rest())),
            // The spec: ignore information types we do not know.
            None => {}
        }
        Ok(())
    }

    fn details(&self) -> ExportDetails {
        let (size_bytes, transmission_flags) = self.size_and_flags.expect("export info received");
        ExportDetails {
            size_bytes,
            transmission_flags,
            block_size: self.block_size,
            structured_replies: self.structured_replies,
            meta_contexts: self.meta_contexts.clone(),
            canonical_name: self.canonical_name.clone(),
            description: self.description.clone(),
        }
    }
}
