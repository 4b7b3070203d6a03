//! A blocking client of the management API over its Unix socket, or over TLS with the API
//! token: one connection per request, typed answers, and errors that say what to do when the
//! daemon is not there.

use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::http::{HttpError, Limits, parse_response_head, percent_encode, read_body, read_head};
use crate::model::{
    ApiError, CreateDg, CreatePd, CreateVd, DgRef, DgView, Empty, ErrorBody, EventView, InfoView,
    PdView, ReplacePd, ScrubDg, SetVd, UpdateDg, VdView,
};
use crate::model::{ImportMd, MdImportView};
use crate::tls::ApiToken;

/// Why a request did not get a successful answer.
#[derive(Debug)]
pub enum ClientError {
    /// The daemon's socket (or TCP address) could not be connected to.
    Connect {
        /// The socket path, or the `https://` URL.
        endpoint: String,
        /// The failure.
        source: io::Error,
    },
    /// The connection broke or timed out during the request (over TLS: or the TLS handshake
    /// failed, for instance because the daemon's certificate is not trusted).
    Transport {
        /// The socket path, or the `https://` URL.
        endpoint: String,
        /// The failure.
        source: io::Error,
    },
    /// The answer is not the API's HTTP and JSON (something else listens on the socket, or a
    /// daemon of an incompatible version).
    Protocol(String),
    /// The daemon refused or failed the request.
    Api(ApiError),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { endpoint, source } if endpoint.starts_with("https://") => {
                write!(
                    f,
                    "cannot reach the Tessera daemon at {endpoint}: {source} — is `tessera serve --api-listen` running there (and is --api-url right)?"
                )
            }
            ClientError::Connect {
                endpoint: path,
                source,
            } => match source.kind() {
                io::ErrorKind::ConnectionRefused => write!(
                    f,
                    "cannot reach the Tessera daemon at {path}: connection refused — is `tessera serve` running?"
                ),
                io::ErrorKind::NotFound => write!(
                    f,
                    "cannot reach the Tessera daemon at {path}: no such socket — is `tessera serve` running (and is --api-socket right)?"
                ),
                io::ErrorKind::PermissionDenied => write!(
                    f,
                    "cannot reach the Tessera daemon at {path}: permission denied — the API socket is only for the daemon's user (root by default)"
                ),
                _ => write!(f, "cannot reach the Tessera daemon at {path}: {source}"),
            },
            ClientError::Transport { endpoint, source } => {
                if matches!(
                    source.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    write!(f, "the Tessera daemon at {endpoint} did not answer in time")
                } else if source.kind() == io::ErrorKind::InvalidData
                    && endpoint.starts_with("https://")
                {
                    write!(
                        f,
                        "TLS with the Tessera daemon at {endpoint} failed: {source} — does --api-ca hold the CA that signed the daemon's certificate, valid for this host name?"
                    )
                } else {
                    write!(
                        f,
                        "lost the connection to the Tessera daemon at {endpoint}: {source}"
                    )
                }
            }
            ClientError::Protocol(message) => {
                write!(f, "unexpected answer from the daemon: {message}")
            }
            ClientError::Api(error) => write!(f, "{}", error.message),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<ApiError> for ClientError {
    fn from(error: ApiError) -> Self {
        ClientError::Api(error)
    }
}

/// Limits on answers: events and listings can be long, heads cannot.
fn answer_limits() -> Limits {
    Limits {
        max_head_bytes: 64 << 10,
        max_headers: 100,
        max_body_bytes: 256 << 20,
    }
}

/// Where the daemon's management API is.
#[derive(Clone, Debug)]
enum Endpoint {
    /// Its Unix socket.
    Unix(PathBuf),
    /// `tessera serve --api-listen`: TLS over TCP, with the token.
    Tls(Arc<TlsEndpoint>),
}

#[derive(Debug)]
struct TlsEndpoint {
    /// `https://HOST:PORT`, for messages.
    url: String,
    /// `HOST:PORT`.
    address: String,
    server_name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
    token: ApiToken,
}

/// A client of one daemon.
#[derive(Clone, Debug)]
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
}

impl Client {
    /// A client of the daemon listening on `socket_path`. Nothing is connected until a request.
    pub fn new(socket_path: impl Into<PathBuf>) -> Client {
        Client {
            endpoint: Endpoint::Unix(socket_path.into()),
            timeout: Duration::from_secs(300),
        }
    }

    /// A client of the daemon serving the API at `url` (`https://HOST:PORT`, from
    /// `tessera serve --api-listen`), trusting the CA certificates in `ca` and sending `token`.
    /// The certificate must be valid for HOST.
    pub fn over_tls(url: &str, ca: &Path, token: ApiToken) -> Result<Client, String> {
        let address = url
            .strip_prefix("https://")
            .map(|rest| rest.trim_end_matches('/'))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .ok_or_else(|| format!("--api-url {url}: expected https://HOST:PORT"))?;
        let host = match address.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => host,
            _ => return Err(format!("--api-url {url}: expected https://HOST:PORT")),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|_| format!("--api-url {url}: {host} is not a host name or address"))?;
        let config = crate::tls::client_config(ca)?;
        let endpoint = TlsEndpoint {
            url: format!("https://{address}"),
            address: address.to_string(),
            server_name,
            config,
            token,
        };
        Ok(Client {
            endpoint: Endpoint::Tls(Arc::new(endpoint)),
            timeout: Duration::from_secs(300),
        })
    }

    /// Sets how long a request may wait for its answer (default 300 s: creating a group over
    /// remote members can take a while).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The socket path or `https://` URL of the daemon, for messages.
    pub fn endpoint(&self) -> String {
        match &self.endpoint {
            Endpoint::Unix(path) => path.display().to_string(),
            Endpoint::Tls(tls) => tls.url.clone(),
        }
    }

    /// `GET /v1/info`.
    pub fn info(&self) -> Result<InfoView, ClientError> {
        self.get("/v1/info")
    }

    /// `GET /v1/pds`.
    pub fn list_pds(&self) -> Result<Vec<PdView>, ClientError> {
        self.get("/v1/pds")
    }

    /// `POST /v1/pds`.
    pub fn create_pd(&self, body: &CreatePd) -> Result<PdView, ClientError> {
        self.send("POST", "/v1/pds", Some(body))
    }

    /// `GET /v1/pds/{id}`.
    pub fn get_pd(&self, id: u32) -> Result<PdView, ClientError> {
        self.get(&format!("/v1/pds/{id}"))
    }

    /// `DELETE /v1/pds/{id}`.
    pub fn delete_pd(&self, id: u32) -> Result<(), ClientError> {
        self.send::<Empty, Empty>("DELETE", &format!("/v1/pds/{id}"), None)
            .map(|_| ())
    }

    /// `POST /v1/pds/{id}/fail`.
    pub fn fail_pd(&self, id: u32) -> Result<PdView, ClientError> {
        self.send::<Empty, _>("POST", &format!("/v1/pds/{id}/fail"), None)
    }

    /// `POST /v1/pds/{id}/online`.
    pub fn online_pd(&self, id: u32) -> Result<PdView, ClientError> {
        self.send::<Empty, _>("POST", &format!("/v1/pds/{id}/online"), None)
    }

    /// `POST /v1/pds/{id}/replace`.
    pub fn replace_pd(&self, id: u32, body: &ReplacePd) -> Result<DgView, ClientError> {
        self.send("POST", &format!("/v1/pds/{id}/replace"), Some(body))
    }

    /// `GET /v1/dgs`.
    pub fn list_dgs(&self) -> Result<Vec<DgView>, ClientError> {
        self.get("/v1/dgs")
    }

    /// `POST /v1/dgs`.
    pub fn create_dg(&self, body: &CreateDg) -> Result<DgView, ClientError> {
        self.send("POST", "/v1/dgs", Some(body))
    }

    /// `POST /v1/md-imports`.
    pub fn import_md(&self, body: &ImportMd) -> Result<MdImportView, ClientError> {
        self.send("POST", "/v1/md-imports", Some(body))
    }

    /// `GET /v1/dgs/{id-or-name}`.
    pub fn get_dg(&self, dg: &DgRef) -> Result<DgView, ClientError> {
        self.get(&dg_path(dg))
    }

    /// `DELETE /v1/dgs/{id-or-name}?force=`.
    pub fn delete_dg(&self, dg: &DgRef, force: bool) -> Result<(), ClientError> {
        let path = format!("{}?force={force}", dg_path(dg));
        self.send::<Empty, Empty>("DELETE", &path, None).map(|_| ())
    }

    /// `PATCH /v1/dgs/{id-or-name}`.
    pub fn update_dg(&self, dg: &DgRef, body: &UpdateDg) -> Result<DgView, ClientError> {
        self.send("PATCH", &dg_path(dg), Some(body))
    }

    /// `POST /v1/dgs/{id-or-name}/scrub`.
    pub fn scrub_dg(&self, dg: &DgRef, body: &ScrubDg) -> Result<DgView, ClientError> {
        self.send("POST", &format!("{}/scrub", dg_path(dg)), Some(body))
    }

    /// `GET /v1/vds`.
    pub fn list_vds(&self) -> Result<Vec<VdView>, ClientError> {
        self.get("/v1/vds")
    }

    /// `POST /v1/vds`.
    pub fn create_vd(&self, body: &CreateVd) -> Result<VdView, ClientError> {
        self.send("POST", "/v1/vds", Some(body))
    }

    /// `PATCH /v1/vds/{name}`.
    pub fn set_vd(&self, name: &str, body: &SetVd) -> Result<VdView, ClientError> {
        self.send(
            "PATCH",
            &format!("/v1/vds/{}", percent_encode(name)),
            Some(body),
        )
    }

    /// `GET /v1/vds/{name}`.
    pub fn get_vd(&self, name: &str) -> Result<VdView, ClientError> {
        self.get(&format!("/v1/vds/{}", percent_encode(name)))
    }

    /// `DELETE /v1/vds/{name}?force=`.
    pub fn delete_vd(&self, name: &str, force: bool) -> Result<(), ClientError> {
        let path = format!("/v1/vds/{}?force={force}", percent_encode(name));
        self.send::<Empty, Empty>("DELETE", &path, None).map(|_| ())
    }

    /// `POST /v1/vds/{name}/ublk`.
    pub fn export_vd_ublk(
        &self,
        name: &str,
        body: &crate::model::ExportUblk,
    ) -> Result<VdView, ClientError> {
        let path = format!("/v1/vds/{}/ublk", percent_encode(name));
        self.send("POST", &path, Some(body))
    }

    /// `DELETE /v1/vds/{name}/ublk`.
    pub fn unexport_vd_ublk(&self, name: &str) -> Result<VdView, ClientError> {
        let path = format!("/v1/vds/{}/ublk", percent_encode(name));
        self.send::<Empty, _>("DELETE", &path, None)
    }

    /// `GET /v1/events?since=N`: events with a sequence number above `since`.
    pub fn events(&self, since: u64) -> Result<Vec<EventView>, ClientError> {
        self.get(&format!("/v1/events?since={since}"))
    }

    /// `GET /metrics`: the Prometheus text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let (status, body) = self.exchange("GET", "/metrics", None)?;
        if !(200..300).contains(&status) {
            return Err(error_from(status, &body));
        }
        String::from_utf8(body)
            .map_err(|_| ClientError::Protocol("the metrics are not UTF-8 text".to_string()))
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send::<Empty, T>("GET", path, None)
    }

    fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let body = match body {
            Some(body) => Some(serde_json::to_vec(body).map_err(|error| {
                ClientError::Protocol(format!("the request could not be encoded: {error}"))
            })?),
            None => None,
        };
        let (status, answer) = self.exchange(method, path, body.as_deref())?;
        if !(200..300).contains(&status) {
            return Err(error_from(status, &answer));
        }
        serde_json::from_slice(&answer).map_err(|error| {
            ClientError::Protocol(format!(
                "{method} {path} answered {status} with a body this client cannot read: {error}"
            ))
        })
    }

    /// Sends one request on a fresh connection and reads the answer's status and body.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let endpoint = self.endpoint();
        let connect_error = |source| ClientError::Connect {
            endpoint: endpoint.clone(),
            source,
        };
        let transport_error = |source| ClientError::Transport {
            endpoint: endpoint.clone(),
            source,
        };
        let body = body.unwrap_or_default();
        match &self.endpoint {
            Endpoint::Unix(socket_path) => {
                let stream = UnixStream::connect(socket_path).map_err(connect_error)?;
                stream
                    .set_read_timeout(Some(self.timeout))
                    .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
                    .map_err(transport_error)?;
                exchange_on(stream, "localhost", None, method, path, body)
                    .map_err(|error| error.on(&endpoint))
            }
            Endpoint::Tls(tls) => {
                let addresses: Vec<_> = tls
                    .address
                    .to_socket_addrs()
                    .map_err(connect_error)?
                    .collect();
                let stream = addresses
                    .iter()
                    .find_map(|address| TcpStream::connect_timeout(address, self.timeout).ok())
                    .ok_or_else(|| {
                        connect_error(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            "no address of the host accepted a connection",
                        ))
                    })?;
                stream
                    .set_read_timeout(Some(self.timeout))
                    .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
                    .and_then(|()| stream.set_nodelay(true))
                    .map_err(transport_error)?;
                let session =
                    rustls::ClientConnection::new(Arc::clone(&tls.config), tls.server_name.clone())
                        .map_err(|error| ClientError::Protocol(format!("TLS: {error}")))?;
                let stream = rustls::StreamOwned::new(session, stream);
                let host = tls.address.as_str();
                exchange_on(stream, host, Some(&tls.token), method, path, body)
                    .map_err(|error| error.on(&endpoint))
            }
        }
    }
}

/// A failure of one exchange, before it is tied to the endpoint.
enum ExchangeError {
    Io(io::Error),
    Protocol(String),
}

impl ExchangeError {
    fn on(self, endpoint: &str) -> ClientError {
        match self {
            ExchangeError::Io(source) => ClientError::Transport {
                endpoint: endpoint.to_string(),
                source,
            },
            ExchangeError::Protocol(message) => ClientError::Protocol(message),
        }
    }
}

/// Writes one request on `stream` and reads the answer's status and body.
fn exchange_on<S: Read + Write>(
    mut stream: S,
    host: &str,
    token: Option<&ApiToken>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), ExchangeError> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tessera/{}\r\nAccept: application/json\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {}\r\n", token.secret()));
    }
    if !body.is_empty() || method != "GET" {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    let mut message = request.into_bytes();
    message.extend_from_slice(body);
    stream
        .write_all(&message)
        .and_then(|()| stream.flush())
        .map_err(ExchangeError::Io)?;

    let limits = answer_limits();
    let mut reader = BufReader::new(stream);
    let http_error = |error: HttpError| match error {
        HttpError::Io(source) => ExchangeError::Io(source),
        HttpError::Closed => ExchangeError::Protocol(
            "the daemon closed the connection without answering".to_string(),
        ),
        other => ExchangeError::Protocol(other.to_string()),
    };
    let head = read_head(&mut reader, &limits)
        .and_then(|head| parse_response_head(&head, &limits))
        .map_err(http_error)?;
    let length = head.content_length().map_err(http_error)?;
    if length > limits.max_body_bytes {
        return Err(ExchangeError::Protocol(format!(
            "the answer of {length} bytes is larger than {} bytes",
            limits.max_body_bytes
        )));
    }
    let answer = read_body(&mut reader, length).map_err(http_error)?;
    Ok((head.status, answer))
}

fn dg_path(dg: &DgRef) -> String {
    format!("/v1/dgs/{}", percent_encode(&dg.to_string()))
}

/// The `ClientError` for a non-2xx answer: the API's error object if the body is one.
fn error_from(status: u16, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(envelope) => ClientError::Api(envelope.error),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let excerpt: String = text.chars().take(200).collect();
            ClientError::Protocol(format!("HTTP status {status}: {excerpt}"))
        }
    }
}
