//! TLS and the API token for the daemon's TCP listeners: rustls configurations loaded from PEM
//! files (the server side, shared with NBD over TLS; the client side, trusting given CAs), and
//! the bearer token the management API requires over TCP.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A token shorter than this is refused: it could be guessed.
pub const MIN_TOKEN_CHARS: usize = 16;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates in a PEM file, as a trust store.
fn roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
    {
        let ca = ca.map_err(|e| format!("{what} {}: {e}", path.display()))?;
        roots
            .add(ca)
            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{what} {}: no certificate in it", path.display()));
    }
    Ok(roots)
}

/// The server side of TLS, from PEM files. With `client_ca`, a client certificate is verified
/// against it when one is presented (none is required).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {}: no certificate in it",
            cert.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("TLS key {}: {e}", key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = roots(path, "TLS client CA")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("TLS client CA {}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    Ok(Arc::new(config))
}

/// The client side of TLS: trusts the CAs in the PEM file `ca` (and nothing else).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    let roots = roots(ca, "API CA")?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The shared secret a client of the management API over TCP presents as
/// `Authorization: Bearer TOKEN`.
#[derive(Clone)]
pub struct ApiToken(String);

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(..)")
    }
}

impl ApiToken {
    /// A token from its text (surrounding whitespace removed). Refused when shorter than
    /// `MIN_TOKEN_CHARS` or when it holds characters an HTTP header cannot carry.
    pub fn new(text: &str) -> Result<ApiToken, String> {
        let token = text.trim();
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "the API token must be at least {MIN_TOKEN_CHARS} characters long"
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the API token may hold only printable ASCII characters without spaces".into(),
            );
        }
        Ok(ApiToken(token.to_string()))
    }

    /// The token in the file `path`, which only its owner may read or write (the daemon
    /// refuses a token others can read, as ssh refuses such a key).
    pub fn from_owner_only_file(path: &Path) -> Result<ApiToken, String> {
        let metadata = std::fs::metadata(path)
            .map_err(|e| format!("API token file {}: {e}", path.display()))?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "API token file {} can be read or changed by others (mode {mode:03o}); `chmod 600` it",
                path.display()
            ));
        }
        ApiToken::from_file(path)
    }

    /// The token in the file `path` (the client side: no check of the mode).
    pub fn from_file(path: &Path) -> Result<ApiToken, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("API token file {}: {e}", path.display()))?;
        ApiToken::new(&text).map_err(|e| format!("API token file {}: {e}", path.display()))
    }

    /// The token, for the `Authorization` header.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Whether the `Authorization` header value `header` carries this token. Takes the same
    /// time wherever the first difference is, so the token cannot be found byte by byte.
    pub fn admits(&self, header: Option<&str>) -> bool {
        let Some(presented) = header.and_then(|value| value.strip_prefix("Bearer ")) else {
            return false;
        };
        let expected = self.0.as_bytes();
        let presented = presented.trim().as_bytes();
        let mut difference = u8::from(expected.len() != presented.len());
        for (index, byte) in expected.iter().enumerate() {
            difference |= byte ^ presented.get(index).copied().unwrap_or(0);
        }
        difference == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_admitted_only_when_equal() {
        let token = ApiToken::new("  0123456789abcdefXYZ\n").unwrap();
        assert!(token.admits(Some("Bearer 0123456789abcdefXYZ")));
        for wrong in [
            None,
            Some("0123456789abcdefXYZ"),
            Some("Bearer 0123456789abcdefXY"),
            Some("Bearer 0123456789abcdefXYZZ"),
            Some("Bearer 0123456789abcdefXYz"),
            Some("Bearer "),
            Some("Basic 0123456789abcdefXYZ"),
        ] {
            assert!(!token.admits(wrong), "{wrong:?} admitted");
        }
    }

    #[test]
    fn short_or_unprintable_tokens_are_refused() {
        assert!(ApiToken::new("short").is_err());
        assert!(ApiToken::new("0123456789 abcdefgh").is_err());
        assert!(ApiToken::new("0123456789abcdef\u{e9}").is_err());
    }

    #[test]
    fn token_files_readable_by_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = ApiToken::from_owner_only_file(&path).unwrap_err();
        assert!(error.contains("chmod 600"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let token = ApiToken::from_owner_only_file(&path).unwrap();
        assert_eq!(token.secret(), "0123456789abcdef0123");
    }
}
