//! The spec's rules for requests, applied before the daemon touches a virtual drive.
//!
//! Order matters for WRITE: its payload follows the header, so a rejected write must still have
//! its payload read and discarded to keep the stream in step. That is only safe when the length
//! is bounded, so the payload length is checked first, and a length beyond
//! max(advertised maximum payload, 32 MiB) disconnects: the spec lets either side hard-disconnect
//! on a payload large enough to be abuse and says payloads up to 32 MiB are never abuse;
//! discarding up to 4 GiB per request instead would let one client keep the server busy reading
//! garbage. Every other violation is answered with an error and the connection goes on.

use std::fmt;

use crate::proto::{Command, CommandFlags, Errno, PAYLOAD_BYTES_NEVER_ABUSE, TransmissionFlags};
use crate::request::Request;
use crate::server::handshake::Negotiated;

/// How to refuse a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Reply with this error (for WRITE, after reading and discarding the payload, whose
    /// length has been checked).
    Error {
        /// The error value for the reply.
        errno: Errno,
        /// A short explanation, for structured error chunks.
        message: &'static str,
    },
    /// Drop the connection without a reply.
    Disconnect(DisconnectReason),
}

/// Why a request forces a hard disconnect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// A write payload too large to read and discard safely.
    PayloadTooLarge {
        /// The length the client announced.
        length_bytes: u32,
        /// The largest payload this connection reads.
        limit_bytes: u32,
    },
}

impl fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PayloadTooLarge {
                length_bytes,
                limit_bytes,
            } => {
                write!(
                    f,
                    "write payload of {length_bytes} bytes exceeds the limit of {limit_bytes}"
                )
            }
        }
    }
}

/// The largest write payload a connection reads, even just to discard it.
pub fn payload_bytes_limit(negotiated: &Negotiated) -> u32 {
    negotiated
        .export
        .block_size
        .maximum_payload_bytes
        .max(PAYLOAD_BYTES_NEVER_ABUSE)
}

fn error(errno: Errno, message: &'static str) -> Result<(), Rejection> {
    Err(Rejection::Error { errno, message })
}

/// Checks a request against the spec and what was negotiated. `Ok` means the daemon may
/// execute it (FAST_ZERO's "fail fast with ENOTSUP" and ESHUTDOWN remain the daemon's call).
pub fn validate(request: &Request, negotiated: &Negotiated) -> Result<(), Rejection> {
    let export = &negotiated.export;
    let advertised = negotiated.transmission_flags;
    let command = request.command;
    let length_bytes = request.length_bytes;
    let offset_bytes = request.offset_bytes;

    if command == Command::Write {
        let limit_bytes = payload_bytes_limit(negotiated);
        if length_bytes > limit_bytes {
            return Err(Rejection::Disconnect(DisconnectReason::PayloadTooLarge {
                length_bytes,
                limit_bytes,
            }));
        }
    }
    if command == Command::Disc {
        return Ok(());
    }

    let mut allowed = CommandFlags::NONE;
    let mut allow = |condition: bool, flag: CommandFlags| {
        if condition {
            allowed = allowed | flag;
        }
    };
    // FUA is valid on every command once advertised (servers must accept it, even by ignoring it).
    allow(
        advertised.contains(TransmissionFlags::SEND_FUA),
        CommandFlags::FUA,
    );
    match command {
        Command::Read => allow(
            advertised.contains(TransmissionFlags::SEND_DF),
            CommandFlags::DF,
        ),
        Command::WriteZeroes => {
            allow(true, CommandFlags::NO_HOLE);
            allow(
                advertised.contains(TransmissionFlags::SEND_FAST_ZERO),
                CommandFlags::FAST_ZERO,
            );
        }
        Command::BlockStatus => allow(true, CommandFlags::REQ_ONE),
        Command::Write | Command::Flush | Command::Trim | Command::Cache => {}
        Command::Disc => unreachable!("handled above"),
        Command::Unknown(_) => return error(Errno::Inval, "unknown command"),
    }
    if request.flags.0 & !allowed.0 != 0 {
        return error(
            Errno::Inval,
            "command flags not valid for this command or not negotiated",
        );
    }

    let supported = match command {
        Command::Flush => advertised.contains(TransmissionFlags::SEND_FLUSH),
        Command::Trim => advertised.contains(TransmissionFlags::SEND_TRIM),
        Command::WriteZeroes => advertised.contains(TransmissionFlags::SEND_WRITE_ZEROES),
        Command::Cache => advertised.contains(TransmissionFlags::SEND_CACHE),
        Command::BlockStatus => {
            negotiated.structured_replies && !negotiated.meta_contexts.is_empty()
        }
        _ => true,
    };
    if !supported {
        return error(Errno::Inval, "command not negotiated");
    }

    let writes = matches!(
        command,
        Command::Write | Command::Trim | Command::WriteZeroes
    );
    if writes && export.read_only {
        return error(Errno::Perm, "export is read-only");
    }

    if command == Command::Flush {
        if offset_bytes != 0 || length_bytes != 0 {
            return error(Errno::Inval, "flush offset and length must be zero");
        }
        return Ok(());
    }

    let minimum_bytes = u64::from(export.block_size.minimum_bytes);
    if !offset_bytes.is_multiple_of(minimum_bytes)
        || !u64::from(length_bytes).is_multiple_of(minimum_bytes)
    {
        return error(
            Errno::Inval,
            "offset or length not aligned to the minimum block size",
        );
    }

    let within = offset_bytes
        .checked_add(u64::from(length_bytes))
        .is_some_and(|end_bytes| end_bytes <= export.size_bytes);
    if !within {
        // The spec: ENOSPC for writes and write-zeroes past the end, EINVAL for the others.
        return match command {
            Command::Write | Command::WriteZeroes => {
                error(Errno::NoSpc, "request extends past the end of the export")
            }
            _ => error(Errno::Inval, "request extends past the end of the export"),
        };
    }

    let maximum_payload_bytes = export.block_size.maximum_payload_bytes;
    if length_bytes > maximum_payload_bytes {
        match command {
            Command::Write => return error(Errno::Inval, "write larger than the maximum payload"),
            // The spec allows refusing large structured reads up front with EOVERFLOW; with
            // simple replies the client must not exceed the maximum at all.
            Command::Read if negotiated.structured_replies => {
                return error(Errno::Overflow, "read larger than the maximum payload");
            }
            Command::Read => return error(Errno::Inval, "read larger than the maximum payload"),
            _ => {}
        }
    }
    Ok(())
}
