//! The client side: handshake and reply codecs (sans-I/O) and a blocking client.

pub mod blocking;
pub mod handshake;
pub mod replies;
