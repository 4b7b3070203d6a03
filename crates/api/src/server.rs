//! The API server: a thread per connection, HTTP/1.1 keep-alive, on a Unix socket (the
//! management API), a TCP listener (the read-only dashboard and metrics), or TLS over TCP with
//! a bearer token (the management API from other hosts). Connection handling is generic over
//! `Read + Write`, so any byte stream can be served.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::http::{
    HttpError, Limits, Response, parse_request_head, read_body, read_head, write_response,
};
use crate::model::{ApiError, ErrorCode};
use crate::router::{Router, error_response};
use crate::tls::ApiToken;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Permission bits of the Unix socket (0600: only the daemon's user may connect).
    pub socket_mode: u32,
    /// Limits on requests.
    pub limits: Limits,
    /// Connections served at once; more are answered with 503 and closed.
    pub max_connections: usize,
    /// A connection with no byte received (or sendable) for this long is closed.
    pub idle_timeout: Duration,
    /// How long `shutdown` waits for connections to finish their current request.
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket_mode: 0o600,
            limits: Limits::default(),
            max_connections: 64,
            idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Why the server could not start.
#[derive(Debug)]
pub enum ServerError {
    /// Another process (another daemon) answers on the socket.
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket exists at the path; it is left alone.
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Creating, binding or setting up the socket failed.
    Io {
        /// What was being done.
        action: String,
        /// The failure.
        source: io::Error,
    },
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::InUse { path } => write!(
                f,
                "another daemon is already serving the API at {}",
                path.display()
            ),
            ServerError::NotASocket { path } => write!(
                f,
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
            ServerError::Io { action, source } => write!(f, "cannot {action}: {source}"),
        }
    }
}

impl std::error::Error for ServerError {}

fn io_error(action: String) -> impl FnOnce(io::Error) -> ServerError {
    move |source| ServerError::Io { action, source }
}

/// Serves HTTP requests from `stream` until the peer closes, asks to close, sends something
/// malformed, or goes idle past the stream's timeouts. Never panics on input.
pub fn serve_connection<S: Read + Write>(stream: S, router: &Router, limits: &Limits) {
    serve_connection_as(stream, router, limits, "an unidentified client");
}

/// As `serve_connection`, for a client described by `caller` (for the audit of changes).
pub fn serve_connection_as<S: Read + Write>(
    stream: S,
    router: &Router,
    limits: &Limits,
    caller: &str,
) {
    serve_requests(stream, router, limits, caller, None);
}

/// Serves requests; with `token`, each must carry it (`Authorization: Bearer`), and the first
/// that does not is answered 401 and ends the connection.
fn serve_requests<S: Read + Write>(
    stream: S,
    router: &Router,
    limits: &Limits,
    caller: &str,
    token: Option<&ApiToken>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        let head = match read_head(&mut reader, limits)
            .and_then(|head| parse_request_head(&head, limits))
        {
            Ok(head) => head,
            Err(error) => return refuse(reader.get_mut(), &error),
        };
        let length = match head.content_length() {
            Ok(length) => length,
            Err(error) => return refuse(reader.get_mut(), &error),
        };
        if length > limits.max_body_bytes {
            let error = HttpError::BodyTooLarge(format!(
                "request body of {length} bytes is larger than the limit of {} bytes",
                limits.max_body_bytes
            ));
            return refuse(reader.get_mut(), &error);
        }
        if head.expects_continue() && length > 0 {
            let stream = reader.get_mut();
            if stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .and_then(|()| stream.flush())
                .is_err()
            {
                return;
            }
        }
        let body = match read_body(&mut reader, length) {
            Ok(body) => body,
            Err(error) => return refuse(reader.get_mut(), &error),
        };
        if let Some(token) = token
            && !token.admits(head.header("authorization"))
        {
            let response = error_response(&ApiError::new(
                ErrorCode::Unauthenticated,
                "the management API over TCP needs its token: send `Authorization: Bearer TOKEN` (`tessera --api-token-file`)",
            ));
            router.audit(caller, &head.method, &head.target, response.status);
            let _ = write_response(reader.get_mut(), &response, false);
            return;
        }
        let response = router.handle(&head.method, &head.target, &body);
        router.audit(caller, &head.method, &head.target, response.status);
        let keep_alive = head.keep_alive();
        if write_response(reader.get_mut(), &response, keep_alive).is_err() || !keep_alive {
            return;
        }
    }
}

/// Answers a request that cannot be read, then the caller closes the connection (the rest of
/// the byte stream cannot be trusted to start at a request boundary).
fn refuse<W: Write>(writer: &mut W, error: &HttpError) {
    let response = match error {
        HttpError::Closed | HttpError::Io(_) => return,
        HttpError::Malformed(message) => error_response(&ApiError::invalid_argument(format!(
            "bad request: {message}"
        ))),
        HttpError::HeadTooLarge(message) => {
            let mut response = error_response(&ApiError::invalid_argument(format!(
                "bad request: {message}"
            )));
            response.status = 431;
            response
        }
        HttpError::BodyTooLarge(message) => {
            error_response(&ApiError::new(ErrorCode::PayloadTooLarge, message.clone()))
        }
    };
    let _ = write_response(writer, &response, false);
}

/// Closes one live connection from another thread.
type Closer = Box<dyn Fn() + Send>;

/// A listening socket the accept loop can serve.
trait Transport: Send + Sync + 'static {
    type Stream: Read + Write + Send + 'static;
    fn accept(&self) -> io::Result<Self::Stream>;
    /// Applies timeouts and returns a way to close the stream from another thread.
    fn prepare(stream: &Self::Stream, timeout: Duration) -> io::Result<Closer>;
    /// Who is at the other end, for the audit of changes.
    fn caller(stream: &Self::Stream) -> String;
    /// Makes a blocked `accept` return; false if it could not (the socket file was removed
    /// under the daemon, say), and the accept thread is then left behind, still blocked.
    fn wake(&self) -> bool;
    /// Serves one accepted connection, on its own thread.
    fn serve(&self, stream: Self::Stream, router: &Router, limits: &Limits, caller: &str) {
        serve_connection_as(stream, router, limits, caller);
    }
}

struct UnixTransport {
    listener: UnixListener,
    path: PathBuf,
}

impl Transport for UnixTransport {
    type Stream = UnixStream;

    fn accept(&self) -> io::Result<UnixStream> {
        self.listener.accept().map(|(stream, _)| stream)
    }

    fn caller(stream: &UnixStream) -> String {
        match crate::peer::credentials(std::os::fd::AsRawFd::as_raw_fd(stream)) {
            Some(peer) => format!("uid {} (pid {})", peer.uid, peer.pid),
            None => "a local client".to_string(),
        }
    }

    fn prepare(stream: &UnixStream, timeout: Duration) -> io::Result<Closer> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let clone = stream.try_clone()?;
        Ok(Box::new(move || {
            let _ = clone.shutdown(Shutdown::Both);
        }))
    }

    fn wake(&self) -> bool {
        UnixStream::connect(&self.path).is_ok()
    }
}

struct TcpTransport {
    listener: TcpListener,
}

impl TcpTransport {
    /// Listens on `address`; returns the transport and the `ip:port` bound.
    fn bind(address: &str) -> Result<(TcpTransport, String), ServerError> {
        let addresses: Vec<_> = address
            .to_socket_addrs()
            .map_err(io_error(format!("resolve {address}")))?
            .collect();
        let listener =
            TcpListener::bind(&addresses[..]).map_err(io_error(format!("listen on {address}")))?;
        let local_address = listener
            .local_addr()
            .map_err(io_error(format!("inspect {address}")))?
            .to_string();
        Ok((TcpTransport { listener }, local_address))
    }
}

impl Transport for TcpTransport {
    type Stream = TcpStream;

    fn accept(&self) -> io::Result<TcpStream> {
        self.listener.accept().map(|(stream, _)| stream)
    }

    fn caller(stream: &TcpStream) -> String {
        stream
            .peer_addr()
            .map(|address| address.to_string())
            .unwrap_or_else(|_| "a TCP client".to_string())
    }

    fn prepare(stream: &TcpStream, timeout: Duration) -> io::Result<Closer> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        let clone = stream.try_clone()?;
        Ok(Box::new(move || {
            let _ = clone.shutdown(Shutdown::Both);
        }))
    }

    fn wake(&self) -> bool {
        if let Ok(mut address) = self.listener.local_addr() {
            if address.ip().is_unspecified() {
                let loopback: std::net::IpAddr = if address.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                };
                address.set_ip(loopback);
            }
            return TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok();
        }
        false
    }
}

/// TLS over TCP, every request checked against the API token. The TLS handshake runs on the
/// connection's thread (under its timeouts), so a slow client cannot hold up the accept loop.
struct TlsTransport {
    tcp: TcpTransport,
    tls: Arc<rustls::ServerConfig>,
    token: ApiToken,
}

impl Transport for TlsTransport {
    type Stream = TcpStream;

    fn accept(&self) -> io::Result<TcpStream> {
        self.tcp.accept()
    }

    fn caller(stream: &TcpStream) -> String {
        format!("{} (API token over TLS)", TcpTransport::caller(stream))
    }

    fn prepare(stream: &TcpStream, timeout: Duration) -> io::Result<Closer> {
        TcpTransport::prepare(stream, timeout)
    }

    fn wake(&self) -> bool {
        self.tcp.wake()
    }

    fn serve(&self, stream: TcpStream, router: &Router, limits: &Limits, caller: &str) {
        let Ok(session) = rustls::ServerConnection::new(Arc::clone(&self.tls)) else {
            return;
        };
        let stream = rustls::StreamOwned::new(session, stream);
        serve_requests(stream, router, limits, caller, Some(&self.token));
    }
}

/// The live connections, so `shutdown` can close them and wait for their threads.
#[derive(Default)]
struct Connections {
    open: Mutex<HashMap<u64, Closer>>,
    changed: Condvar,
    next_id: AtomicU64,
}

impl Connections {
    /// Registers a connection, or returns `None` at the limit.
    fn register(&self, closer: Closer, limit: usize) -> Option<u64> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= limit {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(id, closer);
        Some(id)
    }

    fn unregister(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(&id);
        self.changed.notify_all();
    }

    /// Closes every connection and waits up to `grace` for their threads to end.
    fn close_all(&self, grace: Duration) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for closer in open.values() {
            closer();
        }
        let _ = self
            .changed
            .wait_timeout_while(open, grace, |open| !open.is_empty());
    }
}

/// The socket file the server created, removed on shutdown if it is still the same file.
struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl SocketFile {
    fn remove_if_ours(&self) {
        if let Ok(metadata) = std::fs::symlink_metadata(&self.path)
            && metadata.dev() == self.device
            && metadata.ino() == self.inode
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A running API server. Dropping it shuts it down.
pub struct ApiServer {
    stop: Arc<AtomicBool>,
    wake: Box<dyn Fn() -> bool + Send + Sync>,
    accept_thread: Option<JoinHandle<()>>,
    connections: Arc<Connections>,
    socket_file: Option<SocketFile>,
    grace: Duration,
    local_address: String,
}

impl ApiServer {
    /// Binds the management API on the Unix socket `path` (mode `config.socket_mode`) and
    /// serves it on a background thread. Creates the parent directory if needed. A stale socket
    /// file (nothing answers) is replaced; a live one is `ServerError::InUse`; anything that is
    /// not a socket is left alone (`ServerError::NotASocket`).
    pub fn bind_unix(
        path: &Path,
        config: ServerConfig,
        router: Router,
    ) -> Result<ApiServer, ServerError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(io_error(format!("create directory {}", parent.display())))?;
        }
        remove_stale_socket(path)?;
        let listener = bind_with_mode(path, config.socket_mode)?;
        let metadata = std::fs::symlink_metadata(path)
            .map_err(io_error(format!("inspect {}", path.display())))?;
        let socket_file = SocketFile {
            path: path.to_path_buf(),
            device: metadata.dev(),
            inode: metadata.ino(),
        };
        let transport = UnixTransport {
            listener,
            path: path.to_path_buf(),
        };
        let local_address = path.display().to_string();
        ApiServer::start(transport, config, router, Some(socket_file), local_address)
    }

    /// Serves `router` on a TCP address (`host:port`; port 0 picks one: see `local_address`).
    pub fn bind_tcp(
        address: &str,
        config: ServerConfig,
        router: Router,
    ) -> Result<ApiServer, ServerError> {
        let (tcp, local_address) = TcpTransport::bind(address)?;
        ApiServer::start(tcp, config, router, None, local_address)
    }

    /// Serves `router` over TLS on a TCP address, every request required to carry `token`.
    pub fn bind_tls(
        address: &str,
        config: ServerConfig,
        router: Router,
        tls: Arc<rustls::ServerConfig>,
        token: ApiToken,
    ) -> Result<ApiServer, ServerError> {
        let (tcp, local_address) = TcpTransport::bind(address)?;
        let transport = TlsTransport { tcp, tls, token };
        ApiServer::start(transport, config, router, None, local_address)
    }

    fn start<T: Transport>(
        transport: T,
        config: ServerConfig,
        router: Router,
        socket_file: Option<SocketFile>,
        local_address: String,
    ) -> Result<ApiServer, ServerError> {
        let transport = Arc::new(transport);
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Connections::default());
        let grace = config.shutdown_grace;
        let accept_thread = {
            let transport = Arc::clone(&transport);
            let stop = Arc::clone(&stop);
            let connections = Arc::clone(&connections);
            std::thread::Builder::new()
                .name("api-accept".to_string())
                .spawn(move || accept_loop(&transport, &config, &router, &stop, &connections))
                .map_err(io_error("start the API accept thread".to_string()))?
        };
        Ok(ApiServer {
            stop,
            wake: Box::new(move || transport.wake()),
            accept_thread: Some(accept_thread),
            connections,
            socket_file,
            grace,
            local_address,
        })
    }

    /// The socket path or the TCP `ip:port` served.
    pub fn local_address(&self) -> &str {
        &self.local_address
    }

    /// Stops accepting, closes live connections (waiting up to `shutdown_grace` for them), and
    /// removes the socket file.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let Some(accept_thread) = self.accept_thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // A thread that cannot be woken blocks in accept until the process exits; waiting for
        // it would stop a clean shutdown from ever finishing.
        if (self.wake)() {
            let _ = accept_thread.join();
        }
        self.connections.close_all(self.grace);
        if let Some(socket_file) = &self.socket_file {
            socket_file.remove_if_ours();
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn accept_loop<T: Transport>(
    transport: &Arc<T>,
    config: &ServerConfig,
    router: &Router,
    stop: &AtomicBool,
    connections: &Arc<Connections>,
) {
    loop {
        let accepted = transport.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok(stream) => stream,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // rather than spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Ok(closer) = T::prepare(&stream, config.idle_timeout) else {
            continue;
        };
        let Some(id) = connections.register(closer, config.max_connections) else {
            refuse_busy(stream, config.max_connections);
            continue;
        };
        let router = router.clone();
        let limits = config.limits.clone();
        let thread_connections = Arc::clone(connections);
        let caller = T::caller(&stream);
        let transport = Arc::clone(transport);
        let spawned = std::thread::Builder::new()
            .name("api-conn".to_string())
            .spawn(move || {
                transport.serve(stream, &router, &limits, &caller);
                thread_connections.unregister(id);
            });
        if spawned.is_err() {
            connections.unregister(id);
        }
    }
}

fn refuse_busy<S: Write>(mut stream: S, limit: usize) {
    let response: Response = error_response(&ApiError::unavailable(format!(
        "the daemon is already serving {limit} API connections; try again"
    )));
    let _ = write_response(&mut stream, &response, false);
}

/// Removes a socket file nobody answers on. Errors if someone answers or if it is not a socket.
fn remove_stale_socket(path: &Path) -> Result<(), ServerError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(ServerError::Io {
                action: format!("inspect {}", path.display()),
                source: error,
            });
        }
    };
    if !metadata.file_type().is_socket() {
        return Err(ServerError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(ServerError::InUse {
            path: path.to_path_buf(),
        }),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(io_error(format!(
                "remove the stale socket {}",
                path.display()
            )))
        }
        Err(error) => Err(ServerError::Io {
            action: format!("probe the existing socket {}", path.display()),
            source: error,
        }),
    }
}

/// Binds at a temporary name beside `path`, sets the mode, then renames into place, so the
/// socket is never reachable at `path` with looser permissions than asked. Falls back to binding
/// in place (then chmod) when the temporary name does not fit in a socket address.
fn bind_with_mode(path: &Path, mode: u32) -> Result<UnixListener, ServerError> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let _ = std::fs::remove_file(&temporary);
    let (listener, bound_at) = match UnixListener::bind(&temporary) {
        Ok(listener) => (listener, temporary),
        Err(error) if error.kind() == io::ErrorKind::InvalidInput => {
            let listener =
                UnixListener::bind(path).map_err(io_error(format!("bind {}", path.display())))?;
            (listener, path.to_path_buf())
        }
        Err(error) => {
            return Err(ServerError::Io {
                action: format!("bind {}", path.display()),
                source: error,
            });
        }
    };
    let result = std::fs::set_permissions(&bound_at, std::fs::Permissions::from_mode(mode))
        .map_err(io_error(format!("set the mode of {}", path.display())))
        .and_then(|()| {
            if bound_at == path {
                Ok(())
            } else {
                std::fs::rename(&bound_at, path)
                    .map_err(io_error(format!("move the socket to {}", path.display())))
            }
        });
    if let Err(error) = result {
        let _ = std::fs::remove_file(&bound_at);
        return Err(error);
    }
    Ok(listener)
}
