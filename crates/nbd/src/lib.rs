//! The NBD protocol for Tessera, as the NBD project's `doc/proto.md` specifies it.
//!
//! **Architecture invariant:** the codecs are sans-I/O. The server handshake, the request
//! decoder, the validator, the reply encoders and the client codecs take bytes in and give bytes
//! out; they never touch a socket, so the daemon can drive them from its io_uring event loops
//! and fuzzers can drive them from a byte slice. Only [`client::blocking::Client`] and the
//! `testing` harness (cargo feature `testing`) do socket I/O.
//!
//! Server side, one connection:
//! 1. [`ServerHandshake`] sends the greeting and answers options until
//!    [`HandshakeStatus::Done`] hands over the [`Negotiated`] state.
//! 2. For each request: [`decode_request`] (28 bytes), [`validate()`] against what was
//!    negotiated, then the daemon executes it and answers with the encoders in [`reply`]
//!    ([`ReadReply`] for READ, which enforces the simple/structured rules).
//!
//! Client side: [`client::handshake::ClientHandshake`] and [`client::replies::ReplyDecoder`],
//! wrapped by the blocking [`Client`] (`Client::connect(&NbdUri)`).
//!
//! Tests: `cargo test -p tessera-nbd` (a few seconds). `tests/real_clients.rs` drives nbdinfo,
//! qemu-img, nbdcopy, fio's nbd engine and nbdkit, and skips each with a message when the tool
//! is missing. `PROPTEST_CASES=200000 cargo test -p tessera-nbd --test no_panic` runs the
//! random-input suite longer.

pub mod client;
pub mod export;
pub mod fuzzing;
pub mod proto;
pub mod read_reply;
pub mod reply;
pub mod request;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
pub mod uri;
pub mod validate;
mod wire;

pub use client::blocking::{Client, ClientError, Completion};
pub use export::{BlockSizeConstraints, ExportCatalog, ExportFeatures, ExportInfo};
pub use proto::{Command, CommandFlags, Errno, TransmissionFlags};
pub use read_reply::{ReadErrorOutcome, ReadReply};
pub use request::{ProtocolError, Request, decode_request, encode_request};
pub use server::handshake::{
    HandshakeConfig, HandshakeError, HandshakeStatus, MetaContext, Negotiated, ServerHandshake,
    TlsMode,
};
pub use uri::{NbdUri, Transport, UriError};
pub use validate::{DisconnectReason, Rejection, validate};
