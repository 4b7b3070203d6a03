//! NBD over TLS: the server configuration (certificate, key, optional client CA; loaded by
//! `tessera_api::tls`, shared with the management API over TCP) and one connection's TLS session after `NBD_OPT_STARTTLS`. The session sits between the socket and
//! the connection's plaintext buffers: ciphertext is received into its own buffer and fed to
//! rustls, plaintext is read out into the inbox (or a write payload), and everything sent after
//! the switch is sealed into TLS records first.

use rustls::{ServerConfig, ServerConnection};
use std::io::{Read, Write};
use std::sync::Arc;

/// Ciphertext received and not yet taken by rustls (a TLS record is at most ~16 KiB).
const CIPHER_BUFFER_BYTES: usize = 64 * 1024;

pub(crate) use tessera_api::tls::server_config;

/// One connection's TLS session.
pub(crate) struct TlsSession {
    connection: ServerConnection,
    cipher: Vec<u8>,
    cipher_end: usize,
    /// The NBD handshake was told that TLS is up (`tls_started`).
    pub announced: bool,
    /// Bytes queued before the switch (the STARTTLS acknowledgement): sent as they are.
    pub raw_before: Vec<u8>,
}

impl TlsSession {
    pub fn new(config: Arc<ServerConfig>) -> Result<TlsSession, String> {
        let mut connection = ServerConnection::new(config).map_err(|e| format!("TLS: {e}"))?;
        // Sealed records are taken out at once (`records`), so rustls need not hold back.
        connection.set_buffer_limit(None);
        Ok(TlsSession {
            connection,
            cipher: vec![0; CIPHER_BUFFER_BYTES],
            cipher_end: 0,
            announced: false,
            raw_before: Vec::new(),
        })
    }

    /// Where the next receive of ciphertext goes (empty when the buffer is full).
    pub fn receive_room(&mut self) -> &mut [u8] {
        &mut self.cipher[self.cipher_end..]
    }

    /// Ciphertext received (`bytes` of the room, or bytes that arrived before the switch).
    pub fn received(&mut self, bytes: usize) {
        self.cipher_end += bytes;
        assert!(self.cipher_end <= self.cipher.len());
    }

    /// Adds ciphertext that arrived in the plaintext buffer before the switch.
    pub fn received_early(&mut self, bytes: &[u8]) -> Result<(), String> {
        let room = self.receive_room();
        if bytes.len() > room.len() {
            return Err("too much data before the TLS handshake".into());
        }
        room[..bytes.len()].copy_from_slice(bytes);
        self.received(bytes.len());
        Ok(())
    }

    /// Hands received ciphertext to rustls and decrypts what it can. Plaintext rustls holds
    /// back (its buffer full) waits for `read_plain`; the rest of the ciphertext stays here.
    /// Returns whether any ciphertext was taken.
    pub fn feed(&mut self) -> Result<bool, String> {
        let mut consumed = 0;
        while consumed < self.cipher_end {
            let mut input = &self.cipher[consumed..self.cipher_end];
            match self.connection.read_tls(&mut input) {
                Ok(0) => break,
                Ok(taken) => consumed += taken,
                // rustls refuses more while its plaintext buffer is full.
                Err(_) => break,
            }
            self.connection
                .process_new_packets()
                .map_err(|e| format!("TLS: {e}"))?;
        }
        self.cipher.copy_within(consumed..self.cipher_end, 0);
        self.cipher_end -= consumed;
        Ok(consumed > 0)
    }

    /// Decrypted bytes into `out`; 0 when none are waiting.
    pub fn read_plain(&mut self, out: &mut [u8]) -> usize {
        if out.is_empty() {
            return 0;
        }
        self.connection.reader().read(out).unwrap_or_default()
    }

    /// Seals plaintext into TLS records, returned for sending.
    pub fn seal(&mut self, parts: &[&[u8]]) -> Result<Vec<u8>, String> {
        for part in parts {
            self.connection
                .writer()
                .write_all(part)
                .map_err(|e| format!("TLS: {e}"))?;
        }
        Ok(self.records())
    }

    /// TLS records rustls wants sent (handshake messages, sealed data, alerts).
    pub fn records(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while self.connection.wants_write() {
            if self.connection.write_tls(&mut out).is_err() {
                break;
            }
        }
        out
    }

    /// Whether the client presented a certificate (verified against `--tls-client-ca` during
    /// the handshake) that is valid for DNS name `name`.
    pub fn client_is(&self, name: &str) -> bool {
        let Some(certificate) = self
            .connection
            .peer_certificates()
            .and_then(|chain| chain.first())
        else {
            return false;
        };
        let Ok(certificate) = webpki::EndEntityCert::try_from(certificate) else {
            return false;
        };
        let Ok(name) = rustls::pki_types::ServerName::try_from(name) else {
            return false;
        };
        certificate.verify_is_valid_for_subject_name(&name).is_ok()
    }

    /// The TLS handshake is still going on.
    pub fn handshaking(&self) -> bool {
        self.connection.is_handshaking()
    }
}
