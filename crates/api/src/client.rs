//! A blocking client of the management API over its Unix socket: one connection per request,
//! typed answers, and errors that say what to do when the daemon is not there.

use std::fmt;
use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::http::{HttpError, Limits, parse_response_head, percent_encode, read_body, read_head};
use crate::model::{
    ApiError, CreateDg, CreatePd, CreateVd, DgRef, DgView, Empty, ErrorBody, EventView, InfoView,
    PdView, ReplacePd, ScrubDg, SetVd, UpdateDg, VdView,
};

/// Why a request did not get a successful answer.
#[derive(Debug)]
pub enum ClientError {
    /// The daemon's socket could not be connected to.
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The connection broke or timed out during the request.
    Transport {
        /// The socket path.
        path: PathBuf,
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
            ClientError::Connect { path, source } => {
                let path = path.display();
                match source.kind() {
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
                }
            }
            ClientError::Transport { path, source } => {
                if matches!(
                    source.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    write!(
                        f,
                        "the Tessera daemon at {} did not answer in time",
                        path.display()
                    )
                } else {
                    write!(
                        f,
                        "lost the connection to the Tessera daemon at {}: {source}",
                        path.display()
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

/// A client of one daemon.
#[derive(Clone, Debug)]
pub struct Client {
    socket_path: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client of the daemon listening on `socket_path`. Nothing is connected until a request.
    pub fn new(socket_path: impl Into<PathBuf>) -> Client {
        Client {
            socket_path: socket_path.into(),
            timeout: Duration::from_secs(300),
        }
    }

    /// Sets how long a request may wait for its answer (default 300 s: creating a group over
    /// remote members can take a while).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The socket path.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
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
        let connect_error = |source| ClientError::Connect {
            path: self.socket_path.clone(),
            source,
        };
        let transport_error = |source| ClientError::Transport {
            path: self.socket_path.clone(),
            source,
        };
        let mut stream = UnixStream::connect(&self.socket_path).map_err(connect_error)?;
        stream
            .set_read_timeout(Some(self.timeout))
            .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
            .map_err(transport_error)?;
        let body = body.unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tessera/{}\r\nAccept: application/json\r\nConnection: close\r\n",
            env!("CARGO_PKG_VERSION")
        );
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
            .map_err(transport_error)?;

        let limits = answer_limits();
        let mut reader = BufReader::new(stream);
        let http_error = |error: HttpError| match error {
            HttpError::Io(source) => transport_error(source),
            HttpError::Closed => ClientError::Protocol(
                "the daemon closed the connection without answering".to_string(),
            ),
            other => ClientError::Protocol(other.to_string()),
        };
        let head = read_head(&mut reader, &limits)
            .and_then(|head| parse_response_head(&head, &limits))
            .map_err(http_error)?;
        let length = head.content_length().map_err(http_error)?;
        if length > limits.max_body_bytes {
            return Err(ClientError::Protocol(format!(
                "the answer of {length} bytes is larger than {} bytes",
                limits.max_body_bytes
            )));
        }
        let answer = read_body(&mut reader, length).map_err(http_error)?;
        Ok((head.status, answer))
    }
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
