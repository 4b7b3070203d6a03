//! Every NBD protocol value Tessera uses, as the NBD project's `doc/proto.md` defines it.
//!
//! All multi-byte fields on the wire are big-endian. Values that arrive from the peer as raw
//! integers (option numbers, command types, error values) keep a raw form as well as a typed
//! one, because the protocol requires echoing or tolerating values we do not know.

use std::fmt;
use std::ops::BitOr;

/// `NBDMAGIC`: first 8 bytes of the server greeting.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: second 8 bytes of the newstyle greeting, and the start of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic that starts every option reply in fixed newstyle negotiation.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// `NBD_REQUEST_MAGIC`: start of every transmission-phase request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// `NBD_SIMPLE_REPLY_MAGIC`: start of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// `NBD_STRUCTURED_REPLY_MAGIC`: start of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// The NBD port assigned by IANA.
pub const DEFAULT_TCP_PORT: u16 = 10809;

/// Bytes in the server greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub const GREETING_BYTES: usize = 18;
/// Bytes of client flags that answer the greeting.
pub const CLIENT_FLAGS_BYTES: usize = 4;
/// Bytes in an option header: IHAVEOPT, option, length.
pub const OPTION_HEADER_BYTES: usize = 16;
/// Bytes in an option reply header: magic, option, reply type, length.
pub const OPTION_REPLY_HEADER_BYTES: usize = 20;
/// Bytes of the reserved zeroes after the `NBD_OPT_EXPORT_NAME` answer unless NO_ZEROES.
pub const EXPORT_NAME_ZEROES_BYTES: usize = 124;
/// Bytes in a transmission request header.
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes in a simple reply header.
pub const SIMPLE_REPLY_HEADER_BYTES: usize = 16;
/// Bytes in a structured reply chunk header.
pub const STRUCTURED_REPLY_HEADER_BYTES: usize = 20;

/// The longest string (export name, error message, context name) the protocol allows.
pub const STRING_BYTES_MAX: usize = 4096;
/// A payload this large must never be treated as abuse (2^25, 32 MiB).
pub const PAYLOAD_BYTES_NEVER_ABUSE: u32 = 1 << 25;
/// The largest minimum block size the protocol allows.
pub const MINIMUM_BLOCK_BYTES_MAX: u32 = 1 << 16;

/// Handshake flags sent by the server in the greeting (16 bits).
pub mod handshake_flags {
    /// `NBD_FLAG_FIXED_NEWSTYLE`: the server speaks fixed newstyle negotiation.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// `NBD_FLAG_NO_ZEROES`: the server can omit the 124 zero bytes after EXPORT_NAME.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags sent in answer to the greeting (32 bits).
pub mod client_flags {
    /// `NBD_FLAG_C_FIXED_NEWSTYLE`: the client speaks fixed newstyle negotiation.
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    /// `NBD_FLAG_C_NO_ZEROES`: the client asks the server to omit the 124 zero bytes.
    pub const NO_ZEROES: u32 = 1 << 1;
    /// Every client flag the protocol defines; any other bit means: close the connection.
    pub const KNOWN: u32 = FIXED_NEWSTYLE | NO_ZEROES;
}

/// Transmission flags of an export (16 bits), sent with the export's size.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TransmissionFlags(pub u16);

impl TransmissionFlags {
    /// `NBD_FLAG_HAS_FLAGS`: always set.
    pub const HAS_FLAGS: Self = Self(1 << 0);
    /// `NBD_FLAG_READ_ONLY`: the export refuses writes.
    pub const READ_ONLY: Self = Self(1 << 1);
    /// `NBD_FLAG_SEND_FLUSH`: the server accepts `NBD_CMD_FLUSH`.
    pub const SEND_FLUSH: Self = Self(1 << 2);
    /// `NBD_FLAG_SEND_FUA`: the server honours `NBD_CMD_FLAG_FUA`.
    pub const SEND_FUA: Self = Self(1 << 3);
    /// `NBD_FLAG_ROTATIONAL`: the export behaves like a spinning disk.
    pub const ROTATIONAL: Self = Self(1 << 4);
    /// `NBD_FLAG_SEND_TRIM`: the server accepts `NBD_CMD_TRIM`.
    pub const SEND_TRIM: Self = Self(1 << 5);
    /// `NBD_FLAG_SEND_WRITE_ZEROES`: the server accepts `NBD_CMD_WRITE_ZEROES` and NO_HOLE.
    pub const SEND_WRITE_ZEROES: Self = Self(1 << 6);
    /// `NBD_FLAG_SEND_DF`: the server honours `NBD_CMD_FLAG_DF` (structured replies only).
    pub const SEND_DF: Self = Self(1 << 7);
    /// `NBD_FLAG_CAN_MULTI_CONN`: FLUSH and FUA on one connection cover all connections.
    pub const CAN_MULTI_CONN: Self = Self(1 << 8);
    /// `NBD_FLAG_SEND_CACHE`: the server understands `NBD_CMD_CACHE`.
    pub const SEND_CACHE: Self = Self(1 << 10);
    /// `NBD_FLAG_SEND_FAST_ZERO`: the server honours `NBD_CMD_FLAG_FAST_ZERO`.
    pub const SEND_FAST_ZERO: Self = Self(1 << 11);

    /// Whether every bit of `other` is set in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for TransmissionFlags {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl fmt::Debug for TransmissionFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransmissionFlags({:#06x})", self.0)
    }
}

/// Option numbers sent by the client during option haggling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OptionType {
    /// `NBD_OPT_EXPORT_NAME` (1): choose an export and enter transmission; cannot fail politely.
    ExportName,
    /// `NBD_OPT_ABORT` (2): the client ends the session (soft disconnect).
    Abort,
    /// `NBD_OPT_LIST` (3): list the exports.
    List,
    /// `NBD_OPT_PEEK_EXPORT` (4): withdrawn extension; answered as unsupported.
    PeekExport,
    /// `NBD_OPT_STARTTLS` (5): upgrade the connection to TLS.
    StartTls,
    /// `NBD_OPT_INFO` (6): describe an export without entering transmission.
    Info,
    /// `NBD_OPT_GO` (7): describe an export and enter transmission.
    Go,
    /// `NBD_OPT_STRUCTURED_REPLY` (8): use structured replies in transmission.
    StructuredReply,
    /// `NBD_OPT_LIST_META_CONTEXT` (9): list metadata contexts.
    ListMetaContext,
    /// `NBD_OPT_SET_META_CONTEXT` (10): select metadata contexts for block status.
    SetMetaContext,
    /// `NBD_OPT_EXTENDED_HEADERS` (11): experimental extension; answered as unsupported.
    ExtendedHeaders,
}

impl OptionType {
    /// The option number on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            Self::ExportName => 1,
            Self::Abort => 2,
            Self::List => 3,
            Self::PeekExport => 4,
            Self::StartTls => 5,
            Self::Info => 6,
            Self::Go => 7,
            Self::StructuredReply => 8,
            Self::ListMetaContext => 9,
            Self::SetMetaContext => 10,
            Self::ExtendedHeaders => 11,
        }
    }

    /// The option for a wire number, or None for a number the protocol does not define.
    pub fn from_u32(value: u32) -> Option<Self> {
        Some(match value {
            1 => Self::ExportName,
            2 => Self::Abort,
            3 => Self::List,
            4 => Self::PeekExport,
            5 => Self::StartTls,
            6 => Self::Info,
            7 => Self::Go,
            8 => Self::StructuredReply,
            9 => Self::ListMetaContext,
            10 => Self::SetMetaContext,
            11 => Self::ExtendedHeaders,
            _ => return None,
        })
    }
}

/// Bit 31 marks an option reply type as an error.
pub const OPTION_REPLY_ERROR_BIT: u32 = 1 << 31;

/// Option reply types sent by the server in fixed newstyle negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OptionReplyType {
    /// `NBD_REP_ACK` (1): the option succeeded, or the list of replies is complete.
    Ack,
    /// `NBD_REP_SERVER` (2): one export in answer to `NBD_OPT_LIST`.
    Server,
    /// `NBD_REP_INFO` (3): one piece of information about an export.
    Info,
    /// `NBD_REP_META_CONTEXT` (4): one metadata context.
    MetaContext,
    /// `NBD_REP_ERR_UNSUP`: the option is unknown to this server.
    ErrUnsup,
    /// `NBD_REP_ERR_POLICY`: the option is known and valid but forbidden by policy.
    ErrPolicy,
    /// `NBD_REP_ERR_INVALID`: the option is syntactically or semantically invalid.
    ErrInvalid,
    /// `NBD_REP_ERR_PLATFORM`: the option is unsupported on this platform or build.
    ErrPlatform,
    /// `NBD_REP_ERR_TLS_REQD`: TLS must be started first.
    ErrTlsReqd,
    /// `NBD_REP_ERR_UNKNOWN`: the requested export is not available.
    ErrUnknown,
    /// `NBD_REP_ERR_SHUTDOWN`: the server is shutting down.
    ErrShutdown,
    /// `NBD_REP_ERR_BLOCK_SIZE_REQD`: the client must request `NBD_INFO_BLOCK_SIZE` first.
    ErrBlockSizeReqd,
    /// `NBD_REP_ERR_TOO_BIG`: the request or the reply is too large to process.
    ErrTooBig,
    /// `NBD_REP_ERR_EXT_HEADER_REQD`: experimental extended headers are required.
    ErrExtHeaderReqd,
}

impl OptionReplyType {
    /// The reply type on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            Self::Ack => 1,
            Self::Server => 2,
            Self::Info => 3,
            Self::MetaContext => 4,
            Self::ErrUnsup => OPTION_REPLY_ERROR_BIT | 1,
            Self::ErrPolicy => OPTION_REPLY_ERROR_BIT | 2,
            Self::ErrInvalid => OPTION_REPLY_ERROR_BIT | 3,
            Self::ErrPlatform => OPTION_REPLY_ERROR_BIT | 4,
            Self::ErrTlsReqd => OPTION_REPLY_ERROR_BIT | 5,
            Self::ErrUnknown => OPTION_REPLY_ERROR_BIT | 6,
            Self::ErrShutdown => OPTION_REPLY_ERROR_BIT | 7,
            Self::ErrBlockSizeReqd => OPTION_REPLY_ERROR_BIT | 8,
            Self::ErrTooBig => OPTION_REPLY_ERROR_BIT | 9,
            Self::ErrExtHeaderReqd => OPTION_REPLY_ERROR_BIT | 10,
        }
    }

    /// The reply type for a wire value, or None for a value the protocol does not define.
    pub fn from_u32(value: u32) -> Option<Self> {
        const ALL: [OptionReplyType; 14] = [
            OptionReplyType::Ack,
            OptionReplyType::Server,
            OptionReplyType::Info,
            OptionReplyType::MetaContext,
            OptionReplyType::ErrUnsup,
            OptionReplyType::ErrPolicy,
            OptionReplyType::ErrInvalid,
            OptionReplyType::ErrPlatform,
            OptionReplyType::ErrTlsReqd,
            OptionReplyType::ErrUnknown,
            OptionReplyType::ErrShutdown,
            OptionReplyType::ErrBlockSizeReqd,
            OptionReplyType::ErrTooBig,
            OptionReplyType::ErrExtHeaderReqd,
        ];
        ALL.into_iter()
            .find(|reply_type| reply_type.to_u32() == value)
    }

    /// Whether this reply type reports an error (bit 31 set).
    pub fn is_error(self) -> bool {
        self.to_u32() & OPTION_REPLY_ERROR_BIT != 0
    }
}

/// Information types carried by `NBD_REP_INFO` and requested by `NBD_OPT_INFO`/`NBD_OPT_GO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InfoType {
    /// `NBD_INFO_EXPORT` (0): size and transmission flags; mandatory before success.
    Export,
    /// `NBD_INFO_NAME` (1): the export's canonical name.
    Name,
    /// `NBD_INFO_DESCRIPTION` (2): a description for humans.
    Description,
    /// `NBD_INFO_BLOCK_SIZE` (3): minimum, preferred and maximum block sizes.
    BlockSize,
}

impl InfoType {
    /// The information type on the wire.
    pub fn to_u16(self) -> u16 {
        match self {
            Self::Export => 0,
            Self::Name => 1,
            Self::Description => 2,
            Self::BlockSize => 3,
        }
    }

    /// The information type for a wire value, or None if unknown (which must be ignored).
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0 => Self::Export,
            1 => Self::Name,
            2 => Self::Description,
            3 => Self::BlockSize,
            _ => return None,
        })
    }
}

/// Transmission-phase command types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `NBD_CMD_READ` (0).
    Read,
    /// `NBD_CMD_WRITE` (1): the only request followed by a payload.
    Write,
    /// `NBD_CMD_DISC` (2): soft disconnect; no reply.
    Disc,
    /// `NBD_CMD_FLUSH` (3).
    Flush,
    /// `NBD_CMD_TRIM` (4).
    Trim,
    /// `NBD_CMD_CACHE` (5).
    Cache,
    /// `NBD_CMD_WRITE_ZEROES` (6).
    WriteZeroes,
    /// `NBD_CMD_BLOCK_STATUS` (7).
    BlockStatus,
    /// A command number this implementation does not know (answered with EINVAL).
    Unknown(u16),
}

impl Command {
    /// The command type on the wire.
    pub fn to_u16(self) -> u16 {
        match self {
            Self::Read => 0,
            Self::Write => 1,
            Self::Disc => 2,
            Self::Flush => 3,
            Self::Trim => 4,
            Self::Cache => 5,
            Self::WriteZeroes => 6,
            Self::BlockStatus => 7,
            Self::Unknown(value) => value,
        }
    }

    /// The command for a wire value.
    pub fn from_u16(value: u16) -> Self {
        match value {
            0 => Self::Read,
            1 => Self::Write,
            2 => Self::Disc,
            3 => Self::Flush,
            4 => Self::Trim,
            5 => Self::Cache,
            6 => Self::WriteZeroes,
            7 => Self::BlockStatus,
            other => Self::Unknown(other),
        }
    }
}

/// Command flags of a request (16 bits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommandFlags(pub u16);

impl CommandFlags {
    /// No flag set.
    pub const NONE: Self = Self(0);
    /// `NBD_CMD_FLAG_FUA`: do not reply before the written data is durable.
    pub const FUA: Self = Self(1 << 0);
    /// `NBD_CMD_FLAG_NO_HOLE`: WRITE_ZEROES must leave the range allocated.
    pub const NO_HOLE: Self = Self(1 << 1);
    /// `NBD_CMD_FLAG_DF`: READ must be answered with at most one content chunk.
    pub const DF: Self = Self(1 << 2);
    /// `NBD_CMD_FLAG_REQ_ONE`: BLOCK_STATUS must return one extent per context.
    pub const REQ_ONE: Self = Self(1 << 3);
    /// `NBD_CMD_FLAG_FAST_ZERO`: WRITE_ZEROES must fail with ENOTSUP unless it is fast.
    pub const FAST_ZERO: Self = Self(1 << 4);

    /// Whether every bit of `other` is set in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for CommandFlags {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl fmt::Debug for CommandFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CommandFlags({:#06x})", self.0)
    }
}

/// Structured reply chunk flags (16 bits).
pub mod reply_flags {
    /// `NBD_REPLY_FLAG_DONE`: this is the last chunk of the reply.
    pub const DONE: u16 = 1 << 0;
}

/// Bit 15 marks a structured reply chunk type as an error chunk.
pub const CHUNK_ERROR_BIT: u16 = 1 << 15;

/// Structured reply chunk types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkType {
    /// `NBD_REPLY_TYPE_NONE` (0): empty final chunk.
    None,
    /// `NBD_REPLY_TYPE_OFFSET_DATA` (1): read data at an offset.
    OffsetData,
    /// `NBD_REPLY_TYPE_OFFSET_HOLE` (2): a range of a read that reads as zeroes.
    OffsetHole,
    /// `NBD_REPLY_TYPE_BLOCK_STATUS` (5): extents of one metadata context.
    BlockStatus,
    /// `NBD_REPLY_TYPE_ERROR` (2^15 + 1): the request failed.
    Error,
    /// `NBD_REPLY_TYPE_ERROR_OFFSET` (2^15 + 2): the request failed at an offset.
    ErrorOffset,
}

impl ChunkType {
    /// The chunk type on the wire.
    pub fn to_u16(self) -> u16 {
        match self {
            Self::None => 0,
            Self::OffsetData => 1,
            Self::OffsetHole => 2,
            Self::BlockStatus => 5,
            Self::Error => CHUNK_ERROR_BIT | 1,
            Self::ErrorOffset => CHUNK_ERROR_BIT | 2,
        }
    }

    /// The chunk type for a wire value, or None if unknown.
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0 => Self::None,
            1 => Self::OffsetData,
            2 => Self::OffsetHole,
            5 => Self::BlockStatus,
            0x8001 => Self::Error,
            0x8002 => Self::ErrorOffset,
            _ => return None,
        })
    }
}

/// Error values of the transmission phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `NBD_EPERM` (1): operation not permitted (e.g. write to a read-only export).
    Perm,
    /// `NBD_EIO` (5): input/output error.
    Io,
    /// `NBD_ENOMEM` (12): cannot allocate memory.
    NoMem,
    /// `NBD_EINVAL` (22): invalid argument (unknown command or flag, out of range, misaligned).
    Inval,
    /// `NBD_ENOSPC` (28): no space left (write past the end, thin drive full).
    NoSpc,
    /// `NBD_EOVERFLOW` (75): value too large (read too large for DF or for one reply).
    Overflow,
    /// `NBD_ENOTSUP` (95): operation not supported (FAST_ZERO that would not be fast).
    NotSup,
    /// `NBD_ESHUTDOWN` (108): the server is shutting down.
    Shutdown,
}

impl Errno {
    /// The error value on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            Self::Perm => 1,
            Self::Io => 5,
            Self::NoMem => 12,
            Self::Inval => 22,
            Self::NoSpc => 28,
            Self::Overflow => 75,
            Self::NotSup => 95,
            Self::Shutdown => 108,
        }
    }

    /// The error for a nonzero wire value; unknown values read as EINVAL, as the spec asks.
    pub fn from_u32(value: u32) -> Self {
        match value {
            1 => Self::Perm,
            5 => Self::Io,
            12 => Self::NoMem,
            28 => Self::NoSpc,
            75 => Self::Overflow,
            95 => Self::NotSup,
            108 => Self::Shutdown,
            _ => Self::Inval,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::Perm => "operation not permitted (EPERM)",
            Self::Io => "input/output error (EIO)",
            Self::NoMem => "cannot allocate memory (ENOMEM)",
            Self::Inval => "invalid argument (EINVAL)",
            Self::NoSpc => "no space left on device (ENOSPC)",
            Self::Overflow => "value too large (EOVERFLOW)",
            Self::NotSup => "operation not supported (ENOTSUP)",
            Self::Shutdown => "server shutting down (ESHUTDOWN)",
        };
        f.write_str(text)
    }
}

/// The one metadata context the specification defines.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// Status flags of the `base:allocation` metadata context.
pub mod allocation_flags {
    /// `NBD_STATE_HOLE`: the extent is not allocated.
    pub const HOLE: u32 = 1 << 0;
    /// `NBD_STATE_ZERO`: the extent reads as zeroes.
    pub const ZERO: u32 = 1 << 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_spell_their_ascii_names() {
        assert_eq!(&NBD_MAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    }

    #[test]
    fn option_numbers_match_the_spec() {
        // Literal values from doc/proto.md, "Option types".
        let expected = [
            (OptionType::ExportName, 1),
            (OptionType::Abort, 2),
            (OptionType::List, 3),
            (OptionType::PeekExport, 4),
            (OptionType::StartTls, 5),
            (OptionType::Info, 6),
            (OptionType::Go, 7),
            (OptionType::StructuredReply, 8),
            (OptionType::ListMetaContext, 9),
            (OptionType::SetMetaContext, 10),
            (OptionType::ExtendedHeaders, 11),
        ];
        for (option, number) in expected {
            assert_eq!(option.to_u32(), number);
            assert_eq!(OptionType::from_u32(number), Some(option));
        }
        assert_eq!(OptionType::from_u32(0), None);
        assert_eq!(OptionType::from_u32(12), None);
    }

    #[test]
    fn option_reply_types_match_the_spec() {
        let expected = [
            (OptionReplyType::Ack, 1),
            (OptionReplyType::Server, 2),
            (OptionReplyType::Info, 3),
            (OptionReplyType::MetaContext, 4),
            (OptionReplyType::ErrUnsup, 0x8000_0001),
            (OptionReplyType::ErrPolicy, 0x8000_0002),
            (OptionReplyType::ErrInvalid, 0x8000_0003),
            (OptionReplyType::ErrPlatform, 0x8000_0004),
            (OptionReplyType::ErrTlsReqd, 0x8000_0005),
            (OptionReplyType::ErrUnknown, 0x8000_0006),
            (OptionReplyType::ErrShutdown, 0x8000_0007),
            (OptionReplyType::ErrBlockSizeReqd, 0x8000_0008),
            (OptionReplyType::ErrTooBig, 0x8000_0009),
            (OptionReplyType::ErrExtHeaderReqd, 0x8000_000a),
        ];
        for (reply_type, number) in expected {
            assert_eq!(reply_type.to_u32(), number);
            assert_eq!(OptionReplyType::from_u32(number), Some(reply_type));
            assert_eq!(reply_type.is_error(), number >= 0x8000_0000);
        }
        assert_eq!(OptionReplyType::from_u32(5), None);
    }

    #[test]
    fn command_and_chunk_and_error_values_match_the_spec() {
        for (command, number) in [
            (Command::Read, 0),
            (Command::Write, 1),
            (Command::Disc, 2),
            (Command::Flush, 3),
            (Command::Trim, 4),
            (Command::Cache, 5),
            (Command::WriteZeroes, 6),
            (Command::BlockStatus, 7),
            (Command::Unknown(8), 8),
        ] {
            assert_eq!(command.to_u16(), number);
            assert_eq!(Command::from_u16(number), command);
        }
        for (chunk, number) in [
            (ChunkType::None, 0),
            (ChunkType::OffsetData, 1),
            (ChunkType::OffsetHole, 2),
            (ChunkType::BlockStatus, 5),
            (ChunkType::Error, 32769),
            (ChunkType::ErrorOffset, 32770),
        ] {
            assert_eq!(chunk.to_u16(), number);
            assert_eq!(ChunkType::from_u16(number), Some(chunk));
        }
        for (errno, number) in [
            (Errno::Perm, 1),
            (Errno::Io, 5),
            (Errno::NoMem, 12),
            (Errno::Inval, 22),
            (Errno::NoSpc, 28),
            (Errno::Overflow, 75),
            (Errno::NotSup, 95),
            (Errno::Shutdown, 108),
        ] {
            assert_eq!(errno.to_u32(), number);
            assert_eq!(Errno::from_u32(number), errno);
        }
        assert_eq!(Errno::from_u32(4242), Errno::Inval);
    }

    #[test]
    fn flag_bits_match_the_spec() {
        assert_eq!(TransmissionFlags::SEND_CACHE.0, 0x0400);
        assert_eq!(TransmissionFlags::SEND_FAST_ZERO.0, 0x0800);
        assert_eq!(TransmissionFlags::CAN_MULTI_CONN.0, 0x0100);
        assert_eq!(CommandFlags::FAST_ZERO.0, 0x0010);
        assert_eq!(CommandFlags::REQ_ONE.0, 0x0008);
    }
}
