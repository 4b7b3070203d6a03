//! The NBD codecs: the server's handshake and request validation, and the client's handshake
//! and reply decoder (used for remote members). The entry points live in `tessera_nbd::fuzzing`
//! beside the codecs; these wrappers only give them their target names.

/// Client bytes into a server handshake, in pieces whose size the first byte chooses; whatever
/// follows a completed handshake is decoded and validated as transmission requests.
pub fn server_handshake(data: &[u8]) {
    tessera_nbd::fuzzing::server_handshake(data);
}

/// Request headers (and write payloads) decoded and validated against a negotiated export.
pub fn requests(data: &[u8]) {
    tessera_nbd::fuzzing::decode_requests(data);
}

/// Server bytes into the client handshake, then into the reply decoder (simple and structured)
/// with reads, a write and a block status request in flight.
pub fn client_replies(data: &[u8]) {
    tessera_nbd::fuzzing::client_replies(data);
}
