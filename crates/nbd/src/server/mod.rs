//! The server side of the handshake.

pub mod handshake;
mod options;
