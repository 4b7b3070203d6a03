//! The server side of the fixed newstyle handshake, as a sans-I/O state machine.
//!
//! The caller owns the socket: it sends what [`ServerHandshake::take_output`] gives, and feeds
//! received bytes to [`ServerHandshake::receive`], which consumes whole messages only up to the
//! end of the handshake, so bytes after `NBD_OPT_GO` (the first requests) are left to the
//! caller. Memory is bounded: an option longer than the configured limit is never buffered; its
//! bytes are skipped as they arrive and the option is refused.

use std::fmt;

use crate::export::{ExportCatalog, ExportInfo};
use crate::proto::{
    BASE_ALLOCATION, CLIENT_FLAGS_BYTES, EXPORT_NAME_ZEROES_BYTES, IHAVEOPT, InfoType, NBD_MAGIC,
    OPTION_HEADER_BYTES, OPTION_REPLY_MAGIC, OptionReplyType, OptionType, STRING_BYTES_MAX,
    TransmissionFlags, client_flags, handshake_flags,
};
use crate::server::options::{
    PayloadError, export_name, parse_info_request, parse_meta_context_request,
};
use crate::wire::{Reader, length_u32, put_u16, put_u32, put_u64, truncate_to_char_boundary};

/// How the server offers TLS (the spec's three modes). TLS itself arrives with issue 11; the
/// state machine already answers as each mode requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// NOTLS: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    Disabled,
    /// SELECTIVETLS: TLS is optional, but exports marked `tls_required` need it.
    Selective,
    /// FORCEDTLS: every option except STARTTLS and ABORT needs TLS first.
    Forced,
}

/// Limits and choices of the server handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeConfig {
    /// Longest option payload that is buffered; longer ones are skipped and refused.
    pub option_length_bytes_max: u32,
    /// Longest export name accepted (the protocol's own limit is 4096).
    pub export_name_bytes_max: usize,
    /// Options allowed in one handshake; one more closes the connection.
    pub options_max: u32,
    /// Queries allowed in one metadata context option.
    pub meta_context_queries_max: u32,
    /// Whether `NBD_OPT_STRUCTURED_REPLY` is accepted (refused as unsupported otherwise).
    pub structured_replies: bool,
    /// Whether `NBD_FLAG_NO_ZEROES` is offered in the greeting.
    pub no_zeroes: bool,
    /// How TLS is offered.
    pub tls: TlsMode,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        Self {
            option_length_bytes_max: 64 * 1024,
            export_name_bytes_max: STRING_BYTES_MAX,
            options_max: 1024,
            meta_context_queries_max: 16,
            structured_replies: true,
            no_zeroes: true,
            tls: TlsMode::Disabled,
        }
    }
}

/// A metadata context selected with `NBD_OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaContext {
    /// The ID the server assigned; block status chunks carry it.
    pub id: u32,
    /// The context name, e.g. `base:allocation`.
    pub name: String,
}

/// The ID this server gives `base:allocation`.
pub const BASE_ALLOCATION_CONTEXT_ID: u32 = 1;

/// What the handshake agreed on; everything the transmission phase needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The export chosen, as the catalog described it (its `name` is the canonical name).
    pub export: ExportInfo,
    /// The transmission flags sent to the client.
    pub transmission_flags: TransmissionFlags,
    /// Whether structured replies were negotiated.
    pub structured_replies: bool,
    /// Metadata contexts for `NBD_CMD_BLOCK_STATUS` (empty: block status is refused).
    pub meta_contexts: Vec<MetaContext>,
    /// Whether the client asked for NO_ZEROES.
    pub no_zeroes: bool,
    /// Whether the client requested `NBD_INFO_BLOCK_SIZE` in its `NBD_OPT_GO`, and so
    /// promised to honour the block size constraints.
    pub block_size_requested: bool,
    /// Whether the connection runs over TLS.
    pub tls: bool,
}

impl Negotiated {
    /// The canonical name of the chosen export.
    pub fn export_name(&self) -> &str {
        &self.export.name
    }
}

/// Progress of the handshake after some input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeStatus {
    /// More input is needed (all input was consumed).
    Continue,
    /// `NBD_OPT_STARTTLS` was accepted: send the pending output in plain text, then run the
    /// TLS handshake on the stream, call [`ServerHandshake::tls_started`] and go on feeding
    /// the decrypted bytes. Bytes after the option (the TLS ClientHello) were not consumed.
    StartTls,
    /// The transmission phase starts: send the pending output, then serve requests. Bytes after
    /// the final option were not consumed: they are the first requests.
    Done(Negotiated),
    /// The client aborted (soft disconnect): send the pending output, then close.
    Close,
}

/// Why the server must drop the connection during the handshake (a hard disconnect).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The client set a flag the server does not know or did not offer.
    UnknownClientFlags(u32),
    /// An option did not start with IHAVEOPT.
    BadOptionMagic(u64),
    /// The client sent more options than the configured limit.
    TooManyOptions(u32),
    /// `NBD_OPT_EXPORT_NAME` could not be satisfied; it has no error reply, so the session ends.
    ExportNameRefused(&'static str),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownClientFlags(flags) => write!(f, "unknown client flags {flags:#x}"),
            Self::BadOptionMagic(magic) => write!(f, "bad option magic {magic:#x}"),
            Self::TooManyOptions(limit) => write!(f, "more than {limit} options in one handshake"),
            Self::ExportNameRefused(reason) => write!(f, "NBD_OPT_EXPORT_NAME refused: {reason}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// What to answer once the payload of a skipped option has gone by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterSkip {
    /// An error reply with a message.
    Refuse(OptionReplyType, &'static str),
    /// `NBD_OPT_ABORT`: its payload is ignored, the reply is ACK.
    Abort,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData {
        option: u32,
        length_bytes: u32,
    },
    SkipOptionData {
        option: u32,
        remaining_bytes: u32,
        then: AfterSkip,
    },
    AwaitTlsStart,
    Finished,
}

/// Metadata contexts selected by the last `NBD_OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug)]
struct MetaSelection {
    export_name: String,
    contexts: Vec<MetaContext>,
}

/// The server handshake of one connection.
pub struct ServerHandshake {
    config: HandshakeConfig,
    state: State,
    /// The message being assembled; never longer than an option header or the option limit.
    pending: Vec<u8>,
    output: Vec<u8>,
    options_received: u32,
    client_fixed_newstyle: bool,
    client_no_zeroes: bool,
    tls_active: bool,
    structured_replies: bool,
    meta_selection: Option<MetaSelection>,
    shutting_down: bool,
}

impl ServerHandshake {
    /// Starts a handshake; the greeting is queued as output.
    pub fn new(config: HandshakeConfig) -> Self {
        // An export name must fit in an option, or NBD_OPT_EXPORT_NAME could not be served.
        assert!(
            config.option_length_bytes_max as usize
                >= config.export_name_bytes_max.min(STRING_BYTES_MAX)
        );
        let mut flags = handshake_flags::FIXED_NEWSTYLE;
        if config.no_zeroes {
            flags |= handshake_flags::NO_ZEROES;
        }
        let mut output = Vec::with_capacity(64);
        put_u64(&mut output, NBD_MAGIC);
        put_u64(&mut output, IHAVEOPT);
        put_u16(&mut output, flags);
        Self {
            config,
            state: State::ClientFlags,
            pending: Vec::new(),
            output,
            options_received: 0,
            client_fixed_newstyle: false,
            client_no_zeroes: false,
            tls_active: false,
            structured_replies: false,
            meta_selection: None,
            shutting_down: false,
        }
    }

    /// Moves the bytes to send into `out`.
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.output);
    }

    /// Whether output is waiting to be sent.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// The server is shutting down: further options (except ABORT) get `NBD_REP_ERR_SHUTDOWN`.
    pub fn set_shutting_down(&mut self) {
        self.shutting_down = true;
    }

    /// The TLS handshake that followed [`HandshakeStatus::StartTls`] succeeded; negotiation
    /// goes on over TLS from a clean state, as the spec requires.
    pub fn tls_started(&mut self) {
        assert_eq!(
            self.state,
            State::AwaitTlsStart,
            "tls_started without StartTls"
        );
        self.tls_active = true;
        self.structured_replies = false;
        self.meta_selection = None;
        self.state = State::OptionHeader;
    }

    /// Consumes input. With `Continue` all of `input` was consumed; with any other status the
    /// count tells where the handshake ended, and the rest belongs to the next phase.
    pub fn receive(
        &mut self,
        input: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<(usize, HandshakeStatus), HandshakeError> {
        let mut consumed = 0;
        loop {
            match self.state {
                State::ClientFlags => {
                    if !self.fill(input, &mut consumed, CLIENT_FLAGS_BYTES) {
                        return Ok((consumed, HandshakeStatus::Continue));
                    }
                    self.client_flags()?;
                }
                State::OptionHeader => {
                    if !self.fill(input, &mut consumed, OPTION_HEADER_BYTES) {
                        return Ok((consumed, HandshakeStatus::Continue));
                    }
                    self.option_header()?;
                }
                State::OptionData {
                    option,
                    length_bytes,
                } => {
                    if !self.fill(input, &mut consumed, length_bytes as usize) {
                        return Ok((consumed, HandshakeStatus::Continue));
                    }
                    let data = std::mem::take(&mut self.pending);
                    self.state = State::OptionHeader;
                    let status = self.option(option, &data, catalog);
                    self.pending = data;
                    self.pending.clear();
                    match status? {
                        HandshakeStatus::Continue => {}
                        other => return Ok((consumed, other)),
                    }
                }
                State::SkipOptionData {
                    option,
                    remaining_bytes,
                    then,
                } => {
                    let available = input.len() - consumed;
                    let skipped = available.min(remaining_bytes as usize);
                    consumed += skipped;
                    let remaining_bytes = remaining_bytes - skipped as u32;
                    if remaining_bytes > 0 {
                        self.state = State::SkipOptionData {
                            option,
                            remaining_bytes,
                            then,
                        };
                        return Ok((consumed, HandshakeStatus::Continue));
                    }
                    self.state = State::OptionHeader;
                    match then {
                        AfterSkip::Refuse(reply_type, message) => {
                            self.reply_error(option, reply_type, message);
                        }
                        AfterSkip::Abort => return Ok((consumed, self.abort(option))),
                    }
                }
                State::AwaitTlsStart | State::Finished => {
                    panic!(
                        "receive called after the handshake ended ({:?})",
                        self.state
                    );
                }
            }
        }
    }

    /// Copies from `input` until `pending` holds `needed` bytes; true when it does.
    fn fill(&mut self, input: &[u8], consumed: &mut usize, needed: usize) -> bool {
        assert!(self.pending.len() <= needed);
        let wanted = needed - self.pending.len();
        let available = input.len() - *consumed;
        let taken = wanted.min(available);
        self.pending
            .extend_from_slice(&input[*consumed..*consumed + taken]);
        *consumed += taken;
        self.pending.len() == needed
    }

    fn client_flags(&mut self) -> Result<(), HandshakeError> {
        let flags = Reader::new(&self.pending)
            .u32()
            .expect("four bytes were filled");
        self.pending.clear();
        let mut allowed = client_flags::FIXED_NEWSTYLE;
        if self.config.no_zeroes {
            allowed |= client_flags::NO_ZEROES;
        }
        if flags & !allowed != 0 {
            return Err(HandshakeError::UnknownClientFlags(flags));
        }
        self.client_fixed_newstyle = flags & client_flags::FIXED_NEWSTYLE != 0;
        self.client_no_zeroes = flags & client_flags::NO_ZEROES != 0;
        self.state = State::OptionHeader;
        Ok(())
    }

    fn option_header(&mut self) -> Result<(), HandshakeError> {
        let mut reader = Reader::new(&self.pending);
        let magic = reader.u64().expect("header was filled");
        let option = reader.u32().expect("header was filled");
        let length_bytes = reader.u32().expect("header was filled");
        self.pending.clear();
        if magic != IHAVEOPT {
            return Err(HandshakeError::BadOptionMagic(magic));
        }
        self.options_received += 1;
        if self.options_received > self.config.options_max {
            return Err(HandshakeError::TooManyOptions(self.config.options_max));
        }
        let known = OptionType::from_u32(option);
        let skip = |then| State::SkipOptionData {
            option,
            remaining_bytes: length_bytes,
            then,
        };
        self.state = match known {
            Some(OptionType::Abort) => skip(AfterSkip::Abort),
            Some(OptionType::ExportName) if self.shutting_down => {
                return Err(HandshakeError::ExportNameRefused("server shutting down"));
            }
            _ if self.shutting_down => skip(AfterSkip::Refuse(
                OptionReplyType::ErrShutdown,
                "server shutting down",
            )),
            Some(OptionType::StartTls) if length_bytes != 0 => skip(AfterSkip::Refuse(
                OptionReplyType::ErrInvalid,
                "NBD_OPT_STARTTLS takes no data",
            )),
            Some(OptionType::StartTls) => State::OptionData {
                option,
                length_bytes: 0,
            },
            Some(OptionType::ExportName) if self.tls_forced_but_inactive() => {
                return Err(HandshakeError::ExportNameRefused("TLS required"));
            }
            _ if self.tls_forced_but_inactive() => skip(AfterSkip::Refuse(
                OptionReplyType::ErrTlsReqd,
                "TLS required",
            )),
            None | Some(OptionType::PeekExport | OptionType::ExtendedHeaders) => skip(
                AfterSkip::Refuse(OptionReplyType::ErrUnsup, "option not supported"),
            ),
            Some(OptionType::ExportName)
                if length_bytes as usize
                    > self.config.export_name_bytes_max.min(STRING_BYTES_MAX) =>
            {
                return Err(HandshakeError::ExportNameRefused("export name too long"));
            }
            Some(_) if length_bytes > self.config.option_length_bytes_max => skip(
                AfterSkip::Refuse(OptionReplyType::ErrTooBig, "option data too long"),
            ),
            Some(_) => State::OptionData {
                option,
                length_bytes,
            },
        };
        Ok(())
    }

    fn tls_forced_but_inactive(&self) -> bool {
        self.effective_tls_mode() == TlsMode::Forced && !self.tls_active
    }

    /// TLS is only possible once both sides agreed on fixed newstyle.
    fn effective_tls_mode(&self) -> TlsMode {
        if self.client_fixed_newstyle {
            self.config.tls
        } else {
            TlsMode::Disabled
        }
    }

    /// Handles one complete option (header already checked).
    fn option(
        &mut self,
        option: u32,
        data: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<HandshakeStatus, HandshakeError> {
        let known = OptionType::from_u32(option).expect("unknown options are skipped");
        match known {
            OptionType::ExportName => self.export_name(data, catalog),
            OptionType::List => {
                self.list(option, data, catalog);
                Ok(HandshakeStatus::Continue)
            }
            OptionType::StartTls => Ok(self.start_tls(option)),
            OptionType::Info | OptionType::Go => Ok(self.info_or_go(known, data, catalog)),
            OptionType::StructuredReply => {
                self.structured_reply(option, data);
                Ok(HandshakeStatus::Continue)
            }
            OptionType::ListMetaContext => {
                self.list_meta_context(option, data, catalog);
                Ok(HandshakeStatus::Continue)
            }
            OptionType::SetMetaContext => {
                self.set_meta_context(option, data, catalog);
                Ok(HandshakeStatus::Continue)
            }
            OptionType::Abort | OptionType::PeekExport | OptionType::ExtendedHeaders => {
                unreachable!("handled while reading the header")
            }
        }
    }

    fn abort(&mut self, option: u32) -> HandshakeStatus {
        self.reply(option, OptionReplyType::Ack, &[]);
        self.state = State::Finished;
        HandshakeStatus::Close
    }

    fn export_name(
        &mut self,
        data: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<HandshakeStatus, HandshakeError> {
        let name = export_name(data, self.config.export_name_bytes_max)
            .map_err(|_| HandshakeError::ExportNameRefused("invalid export name"))?;
        let export = self
            .find_export(name, catalog)
            .map_err(|(_, reason)| HandshakeError::ExportNameRefused(reason))?;
        let flags = export.transmission_flags(self.structured_replies);
        put_u64(&mut self.output, export.size_bytes);
        put_u16(&mut self.output, flags.0);
        if !self.client_no_zeroes {
            self.output
                .extend_from_slice(&[0; EXPORT_NAME_ZEROES_BYTES]);
        }
        Ok(self.finish(name, export, false))
    }

    fn list(&mut self, option: u32, data: &[u8], catalog: &dyn ExportCatalog) {
        if !data.is_empty() {
            self.reply_error(
                option,
                OptionReplyType::ErrInvalid,
                "NBD_OPT_LIST takes no data",
            );
            return;
        }
        for name in catalog.list() {
            let Some(export) = catalog.lookup(&name) else {
                continue;
            };
            if (export.tls_required && !self.tls_active) || export.refused.is_some() {
                continue;
            }
            let name = truncate_to_char_boundary(&export.name, STRING_BYTES_MAX);
            let description = export.description.as_deref().unwrap_or("");
            let description = truncate_to_char_boundary(description, STRING_BYTES_MAX);
            let mut payload = Vec::with_capacity(4 + name.len() + description.len());
            put_u32(&mut payload, length_u32(name.as_bytes()));
            payload.extend_from_slice(name.as_bytes());
            payload.extend_from_slice(description.as_bytes());
            self.reply(option, OptionReplyType::Server, &payload);
        }
        self.reply(option, OptionReplyType::Ack, &[]);
    }

    fn start_tls(&mut self, option: u32) -> HandshakeStatus {
        if self.effective_tls_mode() == TlsMode::Disabled {
            self.reply_error(
                option,
                OptionReplyType::ErrPolicy,
                "TLS is not enabled on this server",
            );
            return HandshakeStatus::Continue;
        }
        if self.tls_active {
            self.reply_error(option, OptionReplyType::ErrInvalid, "TLS already started");
            return HandshakeStatus::Continue;
        }
        self.reply(option, OptionReplyType::Ack, &[]);
        self.state = State::AwaitTlsStart;
        HandshakeStatus::StartTls
    }

    fn info_or_go(
        &mut self,
        known: OptionType,
        data: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> HandshakeStatus {
        let option = known.to_u32();
        let request = match parse_info_request(data, self.config.export_name_bytes_max) {
            Ok(request) => request,
            Err(error) => {
                self.reply_payload_error(option, error);
                return HandshakeStatus::Continue;
            }
        };
        let export = match self.find_export(request.export_name, catalog) {
            Ok(export) => export,
            Err((reply_type, message)) => {
                self.reply_error(option, reply_type, message);
                return HandshakeStatus::Continue;
            }
        };
        let requested = |info: InfoType| request.info_types.contains(&info.to_u16());
        let flags = export.transmission_flags(self.structured_replies);

        let mut payload = Vec::with_capacity(64);
        put_u16(&mut payload, InfoType::Export.to_u16());
        put_u64(&mut payload, export.size_bytes);
        put_u16(&mut payload, flags.0);
        self.reply(option, OptionReplyType::Info, &payload);

        if requested(InfoType::Name) {
            payload.clear();
            put_u16(&mut payload, InfoType::Name.to_u16());
            payload.extend_from_slice(
                truncate_to_char_boundary(&export.name, STRING_BYTES_MAX).as_bytes(),
            );
            self.reply(option, OptionReplyType::Info, &payload);
        }
        if let (true, Some(description)) = (requested(InfoType::Description), &export.description) {
            payload.clear();
            put_u16(&mut payload, InfoType::Description.to_u16());
            payload.extend_from_slice(
                truncate_to_char_boundary(description, STRING_BYTES_MAX).as_bytes(),
            );
            self.reply(option, OptionReplyType::Info, &payload);
        }
        // Sent even when not requested: our minimum (512) differs from the default (1), and
        // clients that did not ask simply ignore it; requests that break it get EINVAL.
        payload.clear();
        put_u16(&mut payload, InfoType::BlockSize.to_u16());
        put_u32(&mut payload, export.block_size.minimum_bytes);
        put_u32(&mut payload, export.block_size.preferred_bytes);
        put_u32(&mut payload, export.block_size.maximum_payload_bytes);
        self.reply(option, OptionReplyType::Info, &payload);

        self.reply(option, OptionReplyType::Ack, &[]);
        if known == OptionType::Info {
            return HandshakeStatus::Continue;
        }
        let block_size_requested = requested(InfoType::BlockSize);
        let name = request.export_name.to_owned();
        self.finish(&name, export, block_size_requested)
    }

    fn structured_reply(&mut self, option: u32, data: &[u8]) {
        if !self.config.structured_replies {
            self.reply_error(
                option,
                OptionReplyType::ErrUnsup,
                "structured replies are disabled",
            );
        } else if !data.is_empty() {
            self.reply_error(
                option,
                OptionReplyType::ErrInvalid,
                "NBD_OPT_STRUCTURED_REPLY takes no data",
            );
        } else if self.structured_replies {
            self.reply_error(
                option,
                OptionReplyType::ErrInvalid,
                "structured replies already negotiated",
            );
        } else {
            self.structured_replies = true;
            self.reply(option, OptionReplyType::Ack, &[]);
        }
    }

    fn list_meta_context(&mut self, option: u32, data: &[u8], catalog: &dyn ExportCatalog) {
        let request = match parse_meta_context_request(
            data,
            self.config.export_name_bytes_max,
            self.config.meta_context_queries_max,
        ) {
            Ok(request) => request,
            Err(error) => return self.reply_payload_error(option, error),
        };
        let export = match self.find_export_for_meta_context(request.export_name, catalog) {
            Ok(export) => export,
            Err((reply_type, message)) => return self.reply_error(option, reply_type, message),
        };
        let listed = if request.queries.is_empty() {
            available_contexts(&export)
        } else {
            let mut listed = Vec::new();
            for query in &request.queries {
                for context in matching_contexts(&export, query, true) {
                    if !listed.contains(&context) {
                        listed.push(context);
                    }
                }
            }
            listed
        };
        for name in listed {
            // The spec reserves the ID in list replies: zero.
            self.reply_meta_context(option, 0, name);
        }
        self.reply(option, OptionReplyType::Ack, &[]);
    }

    fn set_meta_context(&mut self, option: u32, data: &[u8], catalog: &dyn ExportCatalog) {
        // The spec: the selection is replaced even when the option fails.
        self.meta_selection = None;
        if !self.structured_replies {
            return self.reply_error(
                option,
                OptionReplyType::ErrInvalid,
                "negotiate structured replies first",
            );
        }
        let request = match parse_meta_context_request(
            data,
            self.config.export_name_bytes_max,
            self.config.meta_context_queries_max,
        ) {
            Ok(request) => request,
            Err(error) => return self.reply_payload_error(option, error),
        };
        let export = match self.find_export_for_meta_context(request.export_name, catalog) {
            Ok(export) => export,
            Err((reply_type, message)) => return self.reply_error(option, reply_type, message),
        };
        let mut contexts: Vec<MetaContext> = Vec::new();
        for query in &request.queries {
            for name in matching_contexts(&export, query, false) {
                if !contexts.iter().any(|context| context.name == name) {
                    contexts.push(MetaContext {
                        id: context_id(name),
                        name: name.to_owned(),
                    });
                }
            }
        }
        for context in &contexts {
            self.reply_meta_context(option, context.id, &context.name);
        }
        self.reply(option, OptionReplyType::Ack, &[]);
        self.meta_selection = Some(MetaSelection {
            export_name: request.export_name.to_owned(),
            contexts,
        });
    }

    /// Looks an export up and applies the TLS rules; the error is the reply to send.
    fn find_export(
        &self,
        name: &str,
        catalog: &dyn ExportCatalog,
    ) -> Result<ExportInfo, (OptionReplyType, &'static str)> {
        let export = catalog
            .lookup(name)
            .ok_or((OptionReplyType::ErrUnknown, "unknown export"))?;
        if export.tls_required && !self.tls_active {
            return Err(match self.effective_tls_mode() {
                // NOTLS mode must never answer TLS_REQD.
                TlsMode::Disabled => (
                    OptionReplyType::ErrPolicy,
                    "export requires TLS, which is not enabled",
                ),
                TlsMode::Selective | TlsMode::Forced => {
                    (OptionReplyType::ErrTlsReqd, "export requires TLS")
                }
            });
        }
        // After the TLS rule: a client may need TLS before it can be told apart.
        if let Some(reason) = export.refused {
            return Err((OptionReplyType::ErrPolicy, reason));
        }
        Ok(export)
    }

    /// As `find_export`, but TLS_REQD is reserved to INFO, GO and EXPORT_NAME: answer POLICY.
    fn find_export_for_meta_context(
        &self,
        name: &str,
        catalog: &dyn ExportCatalog,
    ) -> Result<ExportInfo, (OptionReplyType, &'static str)> {
        self.find_export(name, catalog)
            .map_err(|(reply_type, message)| match reply_type {
                OptionReplyType::ErrTlsReqd => (OptionReplyType::ErrPolicy, message),
                other => (other, message),
            })
    }

    fn finish(
        &mut self,
        requested_name: &str,
        export: ExportInfo,
        block_size_requested: bool,
    ) -> HandshakeStatus {
        let meta_contexts = match self.meta_selection.take() {
            Some(selection)
                if selection.export_name == requested_name && self.structured_replies =>
            {
                selection.contexts
            }
            _ => Vec::new(),
        };
        self.state = State::Finished;
        HandshakeStatus::Done(Negotiated {
            transmission_flags: export.transmission_flags(self.structured_replies),
            export,
            structured_replies: self.structured_replies,
            meta_contexts,
            no_zeroes: self.client_no_zeroes,
            block_size_requested,
            tls: self.tls_active,
        })
    }

    fn reply(&mut self, option: u32, reply_type: OptionReplyType, payload: &[u8]) {
        put_u64(&mut self.output, OPTION_REPLY_MAGIC);
        put_u32(&mut self.output, option);
        put_u32(&mut self.output, reply_type.to_u32());
        put_u32(&mut self.output, length_u32(payload));
        self.output.extend_from_slice(payload);
    }

    fn reply_error(&mut self, option: u32, reply_type: OptionReplyType, message: &str) {
        assert!(reply_type.is_error());
        self.reply(option, reply_type, message.as_bytes());
    }

    fn reply_payload_error(&mut self, option: u32, error: PayloadError) {
        match error {
            PayloadError::Invalid(message) => {
                self.reply_error(option, OptionReplyType::ErrInvalid, message)
            }
            PayloadError::TooBig(message) => {
                self.reply_error(option, OptionReplyType::ErrTooBig, message)
            }
        }
    }

    fn reply_meta_context(&mut self, option: u32, id: u32, name: &str) {
        let mut payload = Vec::with_capacity(4 + name.len());
        put_u32(&mut payload, id);
        payload.extend_from_slice(name.as_bytes());
        self.reply(option, OptionReplyType::MetaContext, &payload);
    }
}

/// The contexts an export offers.
fn available_contexts(export: &ExportInfo) -> Vec<&'static str> {
    if export.features.block_status {
        vec![BASE_ALLOCATION]
    } else {
        Vec::new()
    }
}

/// The contexts a query names. `base:` is a wildcard when listing and selects nothing when
/// setting; unknown leaves and unknown namespaces select nothing, as the spec requires.
fn matching_contexts(export: &ExportInfo, query: &str, listing: bool) -> Vec<&'static str> {
    available_contexts(export)
        .into_iter()
        .filter(|context| {
            *context == query || (listing && query == "base:" && context.starts_with("base:"))
        })
        .collect()
}

fn context_id(name: &str) -> u32 {
    assert_eq!(name, BASE_ALLOCATION, "the only context this server offers");
    BASE_ALLOCATION_CONTEXT_ID
}
