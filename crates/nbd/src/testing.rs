//! Test harness (cargo feature `testing`): a small threaded NBD server over in-memory disks,
//! built only from this crate's codecs, listening on a Unix socket and on TCP (127.0.0.1).
//!
//! One thread per connection, requests handled in order. Reads with structured replies are
//! split into data and hole chunks at 4 KiB granularity (zero blocks become holes) so real
//! clients exercise chunk reassembly; `base:allocation` reports zero blocks as HOLE|ZERO.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::export::{ExportCatalog, ExportInfo};
use crate::proto::{Command, CommandFlags, Errno, REQUEST_HEADER_BYTES, allocation_flags};
use crate::read_reply::{ReadErrorOutcome, ReadReply};
use crate::reply::{Extent, encode_block_status, encode_command_reply, encode_error};
use crate::request::{Request, decode_request};
use crate::server::handshake::{HandshakeConfig, HandshakeStatus, Negotiated, ServerHandshake};
use crate::uri::{NbdUri, Transport};
use crate::validate::{Rejection, validate};

/// Granularity of holes in read replies and of block status extents.
const HOLE_BYTES: u64 = 4096;
/// Block status looks at most this far per request (the spec allows short answers).
const BLOCK_STATUS_SCAN_BYTES: u64 = 64 << 20;

/// An export and the memory behind it.
pub struct MemoryExport {
    /// What the server advertises.
    pub info: ExportInfo,
    /// The contents; shared by every connection.
    pub disk: Arc<Mutex<Vec<u8>>>,
    /// Durability requests seen, over every connection.
    pub durability: Arc<DurabilityCounts>,
}

/// What a test server saw of durability, so a client's FUA and flush use can be checked.
#[derive(Debug, Default)]
pub struct DurabilityCounts {
    /// Writes carrying `NBD_CMD_FLAG_FUA`.
    pub fua_writes: AtomicU64,
    /// `NBD_CMD_FLUSH` requests.
    pub flushes: AtomicU64,
}

/// A catalog of in-memory exports; the first one is the default export.
pub struct MemoryCatalog {
    exports: Vec<MemoryExport>,
}

impl MemoryCatalog {
    /// Zero-filled disks for `exports`.
    pub fn new(exports: Vec<ExportInfo>) -> Self {
        let exports = exports
            .into_iter()
            .map(|info| {
                let size = usize::try_from(info.size_bytes).expect("test disks fit in memory");
                MemoryExport {
                    info,
                    disk: Arc::new(Mutex::new(vec![0u8; size])),
                    durability: Arc::default(),
                }
            })
            .collect();
        Self { exports }
    }

    fn find(&self, name: &str) -> Option<&MemoryExport> {
        if name.is_empty() {
            return self.exports.first();
        }
        self.exports.iter().find(|export| export.info.name == name)
    }
}

impl ExportCatalog for MemoryCatalog {
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        self.find(name).map(|export| export.info.clone())
    }

    fn list(&self) -> Vec<String> {
        self.exports
            .iter()
            .map(|export| export.info.name.clone())
            .collect()
    }
}

/// How a connection ended, recorded for tests to inspect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The client sent NBD_OPT_ABORT or NBD_CMD_DISC.
    SoftDisconnect,
    /// The client closed the socket.
    ClientClosed,
    /// The server dropped the connection for this reason.
    Dropped(String),
}

struct Shared {
    catalog: MemoryCatalog,
    config: HandshakeConfig,
    stop: AtomicBool,
    connections: AtomicU64,
    ends: Mutex<Vec<ConnectionEnd>>,
}

/// A running test server; stops listening when dropped.
pub struct TestServer {
    shared: Arc<Shared>,
    directory: PathBuf,
    socket_path: PathBuf,
    tcp_address: SocketAddr,
    acceptors: Vec<JoinHandle<()>>,
}

static SERVER_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestServer {
    /// Starts a server for `exports` with the default handshake configuration.
    pub fn start(exports: Vec<ExportInfo>) -> io::Result<TestServer> {
        Self::start_with(exports, HandshakeConfig::default())
    }

    /// Starts a server with an explicit handshake configuration.
    pub fn start_with(exports: Vec<ExportInfo>, config: HandshakeConfig) -> io::Result<TestServer> {
        let directory = std::env::temp_dir().join(format!(
            "tessera-nbd-test-{}-{}",
            std::process::id(),
            SERVER_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&directory)?;
        let socket_path = directory.join("nbd.sock");
        let unix_listener = UnixListener::bind(&socket_path)?;
        unix_listener.set_nonblocking(true)?;
        let tcp_listener = TcpListener::bind("127.0.0.1:0")?;
        tcp_listener.set_nonblocking(true)?;
        let tcp_address = tcp_listener.local_addr()?;
        let shared = Arc::new(Shared {
            catalog: MemoryCatalog::new(exports),
            config,
            stop: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            ends: Mutex::new(Vec::new()),
        });
        let unix_shared = Arc::clone(&shared);
        let tcp_shared = Arc::clone(&shared);
        let acceptors = vec![
            thread::spawn(move || {
                accept_loop(
                    &unix_shared,
                    || unix_listener.accept().map(|(stream, _)| stream),
                    |stream| stream.set_nonblocking(false),
                )
            }),
            thread::spawn(move || {
                accept_loop(
                    &tcp_shared,
                    || tcp_listener.accept().map(|(stream, _)| stream),
                    |stream: &TcpStream| {
                        stream.set_nonblocking(false)?;
                        stream.set_nodelay(true)
                    },
                )
            }),
        ];
        Ok(TestServer {
            shared,
            directory,
            socket_path,
            tcp_address,
            acceptors,
        })
    }

    /// Path of the Unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// Address of the TCP listener.
    pub fn tcp_address(&self) -> SocketAddr {
        self.tcp_address
    }

    /// `nbd+unix:///NAME?socket=PATH`.
    pub fn unix_uri(&self, export_name: &str) -> NbdUri {
        NbdUri {
            transport: Transport::Unix {
                socket_path: self.socket_path.clone(),
            },
            export_name: export_name.to_owned(),
            tls: false,
        }
    }

    /// `nbd://127.0.0.1:PORT/NAME`.
    pub fn tcp_uri(&self, export_name: &str) -> NbdUri {
        NbdUri {
            transport: Transport::Tcp {
                host: self.tcp_address.ip().to_string(),
                port: self.tcp_address.port(),
            },
            export_name: export_name.to_owned(),
            tls: false,
        }
    }

    fn export(&self, export_name: &str) -> &MemoryExport {
        self.shared
            .catalog
            .find(export_name)
            .expect("export exists")
    }

    /// The memory behind an export.
    pub fn disk(&self, export_name: &str) -> Arc<Mutex<Vec<u8>>> {
        Arc::clone(&self.export(export_name).disk)
    }

    /// The FUA writes and flushes an export has seen.
    pub fn durability(&self, export_name: &str) -> Arc<DurabilityCounts> {
        Arc::clone(&self.export(export_name).durability)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// How finished connections ended, in order of ending.
    pub fn connection_ends(&self) -> Vec<ConnectionEnd> {
        self.shared.ends.lock().expect("not poisoned").clone()
    }

    /// Waits until `count` connections have ended (or `timeout` passes) and returns the ends.
    pub fn wait_for_ends(&self, count: usize, timeout: Duration) -> Vec<ConnectionEnd> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let ends = self.connection_ends();
            if ends.len() >= count || std::time::Instant::now() > deadline {
                return ends;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for acceptor in self.acceptors.drain(..) {
            // An acceptor that panicked already failed its test; nothing to add here.
            let _ = acceptor.join();
        }
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

fn accept_loop<S, A, P>(shared: &Arc<Shared>, accept: A, prepare: P)
where
    S: Read + Write + Send + 'static,
    A: Fn() -> io::Result<S>,
    P: Fn(&S) -> io::Result<()>,
{
    while !shared.stop.load(Ordering::SeqCst) {
        match accept() {
            Ok(stream) => {
                if prepare(&stream).is_err() {
                    continue;
                }
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let shared = Arc::clone(shared);
                thread::spawn(move || {
                    let end = serve_connection(stream, &shared.catalog, &shared.config);
                    shared.ends.lock().expect("not poisoned").push(end);
                });
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2))
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Buffered input of one connection.
struct Input<S> {
    stream: S,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
}

impl<S: Read + Write> Input<S> {
    /// Makes at least `count` bytes available; false on end of stream.
    fn want(&mut self, count: usize) -> io::Result<bool> {
        if self.start + count > self.buffer.len() {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if count > self.buffer.len() {
                self.buffer.resize(count, 0);
            }
        }
        while self.end - self.start < count {
            let received = self.stream.read(&mut self.buffer[self.end..])?;
            if received == 0 {
                return Ok(false);
            }
            self.end += received;
        }
        Ok(true)
    }

    fn available(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    fn consume(&mut self, count: usize) {
        assert!(count <= self.end - self.start);
        self.start += count;
    }

    /// Reads and drops `count` bytes of payload without holding them all.
    fn discard(&mut self, mut count: usize) -> io::Result<bool> {
        while count > 0 {
            let piece = count.min(64 * 1024);
            if !self.want(piece)? {
                return Ok(false);
            }
            self.consume(piece);
            count -= piece;
        }
        Ok(true)
    }
}

/// Serves one connection to the end.
pub fn serve_connection<S: Read + Write>(
    stream: S,
    catalog: &MemoryCatalog,
    config: &HandshakeConfig,
) -> ConnectionEnd {
    let mut input = Input {
        stream,
        buffer: vec![0u8; 256 * 1024],
        start: 0,
        end: 0,
    };
    match serve(&mut input, catalog, config) {
        Ok(end) => end,
        Err(error) => ConnectionEnd::Dropped(format!("I/O error: {error}")),
    }
}

fn serve<S: Read + Write>(
    input: &mut Input<S>,
    catalog: &MemoryCatalog,
    config: &HandshakeConfig,
) -> io::Result<ConnectionEnd> {
    let mut handshake = ServerHandshake::new(config.clone());
    let mut output = Vec::new();
    handshake.take_output(&mut output);
    input.stream.write_all(&output)?;
    let negotiated = loop {
        if input.available().is_empty() && !input.want(1)? {
            return Ok(ConnectionEnd::ClientClosed);
        }
        let result = handshake.receive(input.available(), catalog);
        output.clear();
        handshake.take_output(&mut output);
        input.stream.write_all(&output)?;
        match result {
            Err(error) => return Ok(ConnectionEnd::Dropped(error.to_string())),
            Ok((consumed, status)) => {
                input.consume(consumed);
                match status {
                    HandshakeStatus::Continue => {}
                    HandshakeStatus::Close => return Ok(ConnectionEnd::SoftDisconnect),
                    HandshakeStatus::StartTls => {
                        return Ok(ConnectionEnd::Dropped("the test server has no TLS".into()));
                    }
                    HandshakeStatus::Done(negotiated) => break negotiated,
                }
            }
        }
    };
    let export = catalog
        .find(negotiated.export_name())
        .expect("negotiated exports exist");
    loop {
        if !input.want(REQUEST_HEADER_BYTES)? {
            return Ok(ConnectionEnd::ClientClosed);
        }
        let request = match decode_request(input.available()) {
            Ok(Some(request)) => request,
            Ok(None) => unreachable!("28 bytes are available"),
            Err(error) => return Ok(ConnectionEnd::Dropped(error.to_string())),
        };
        input.consume(REQUEST_HEADER_BYTES);
        output.clear();
        match validate(&request, &negotiated) {
            Err(Rejection::Disconnect(reason)) => {
                return Ok(ConnectionEnd::Dropped(reason.to_string()));
            }
            Err(Rejection::Error { errno, message }) => {
                if !input.discard(request.payload_bytes() as usize)? {
                    return Ok(ConnectionEnd::ClientClosed);
                }
                if request.command == Command::Read {
                    let outcome =
                        ReadReply::new(&request, &negotiated).error(&mut output, errno, message);
                    assert_eq!(outcome, ReadErrorOutcome::Reported);
                } else if request.command == Command::BlockStatus && negotiated.structured_replies {
                    encode_error(&mut output, request.cookie, errno, message, true);
                } else {
                    encode_command_reply(
                        &mut output,
                        request.cookie,
                        negotiated.structured_replies,
                        Err((errno, message)),
                    );
                }
                input.stream.write_all(&output)?;
            }
            Ok(()) => {
                if request.command == Command::Disc {
                    return Ok(ConnectionEnd::SoftDisconnect);
                }
                if !execute(input, &request, &negotiated, export, &mut output)? {
                    return Ok(ConnectionEnd::ClientClosed);
                }
            }
        }
    }
}

/// Executes a valid request and sends its reply; false if the client went away.
fn execute<S: Read + Write>(
    input: &mut Input<S>,
    request: &Request,
    negotiated: &Negotiated,
    export: &MemoryExport,
    output: &mut Vec<u8>,
) -> io::Result<bool> {
    let start = request.offset_bytes as usize;
    let end = start + request.length_bytes as usize;
    match request.command {
        Command::Read => {
            let data = export.disk.lock().expect("not poisoned")[start..end].to_vec();
            send_read(&mut input.stream, request, negotiated, &data, output)?;
            return Ok(true);
        }
        Command::Write => {
            if !input.want(request.length_bytes as usize)? {
                return Ok(false);
            }
            export.disk.lock().expect("not poisoned")[start..end]
                .copy_from_slice(&input.available()[..request.length_bytes as usize]);
            input.consume(request.length_bytes as usize);
            if request.flags.contains(CommandFlags::FUA) {
                export.durability.fua_writes.fetch_add(1, Ordering::Relaxed);
            }
        }
        Command::Trim | Command::WriteZeroes => {
            export.disk.lock().expect("not poisoned")[start..end].fill(0);
        }
        Command::BlockStatus => {
            if request.length_bytes == 0 {
                encode_error(
                    output,
                    request.cookie,
                    Errno::Inval,
                    "zero-length block status",
                    true,
                );
            } else {
                let disk = export.disk.lock().expect("not poisoned");
                let extents = allocation_extents(&disk, request);
                drop(disk);
                let context = &negotiated.meta_contexts[0];
                assert_eq!(negotiated.meta_contexts.len(), 1);
                encode_block_status(output, request.cookie, context.id, &extents, true);
            }
            input.stream.write_all(output)?;
            return Ok(true);
        }
        Command::Flush => {
            export.durability.flushes.fetch_add(1, Ordering::Relaxed);
        }
        Command::Cache => {}
        Command::Disc | Command::Unknown(_) => {
            unreachable!("handled by the caller and the validator")
        }
    }
    encode_command_reply(
        output,
        request.cookie,
        negotiated.structured_replies,
        Ok(()),
    );
    input.stream.write_all(output)?;
    Ok(true)
}

fn send_read<S: Write>(
    stream: &mut S,
    request: &Request,
    negotiated: &Negotiated,
    data: &[u8],
    output: &mut Vec<u8>,
) -> io::Result<()> {
    let mut reply = ReadReply::new(request, negotiated);
    if !reply.is_structured() {
        reply.data(output, request.offset_bytes, request.length_bytes);
        stream.write_all(output)?;
        return stream.write_all(data);
    }
    let runs = if request.flags.contains(CommandFlags::DF) {
        vec![(0, data.len(), false)]
    } else {
        zero_runs(data, request.offset_bytes)
    };
    for (start, end, zero) in runs.into_iter().filter(|(start, end, _)| end > start) {
        let offset = request.offset_bytes + start as u64;
        let bytes = (end - start) as u32;
        if zero {
            reply.hole(output, offset, bytes);
        } else {
            reply.data(output, offset, bytes);
            stream.write_all(output)?;
            output.clear();
            stream.write_all(&data[start..end])?;
        }
    }
    reply.finish(output);
    stream.write_all(output)
}

/// Splits `data` (found at `offset_bytes` in the export) into runs of whole 4 KiB blocks of
/// the export that are all zero or not: (start, end, zero), relative to `data`.
fn zero_runs(data: &[u8], offset_bytes: u64) -> Vec<(usize, usize, bool)> {
    let mut runs: Vec<(usize, usize, bool)> = Vec::new();
    let mut position = 0;
    while position < data.len() {
        let absolute = offset_bytes + position as u64;
        let block_end =
            (((absolute / HOLE_BYTES + 1) * HOLE_BYTES - offset_bytes) as usize).min(data.len());
        let zero = data[position..block_end].iter().all(|&byte| byte == 0);
        match runs.last_mut() {
            Some((_, end, run_zero)) if *run_zero == zero => *end = block_end,
            _ => runs.push((position, block_end, zero)),
        }
        position = block_end;
    }
    runs
}

/// `base:allocation` extents from the request's offset: zero blocks are HOLE|ZERO.
fn allocation_extents(disk: &[u8], request: &Request) -> Vec<Extent> {
    let start = request.offset_bytes as usize;
    let scan_bytes = u64::from(request.length_bytes).min(BLOCK_STATUS_SCAN_BYTES) as usize;
    let mut extents: Vec<Extent> =
        zero_runs(&disk[start..start + scan_bytes], request.offset_bytes)
            .into_iter()
            .map(|(run_start, run_end, zero)| Extent {
                length_bytes: (run_end - run_start) as u32,
                flags: if zero {
                    allocation_flags::HOLE | allocation_flags::ZERO
                } else {
                    0
                },
            })
            .collect();
    if request.flags.contains(CommandFlags::REQ_ONE) {
        extents.truncate(1);
    }
    extents
}

/// Whether an external tool is installed; tests that need it print why they skip.
pub fn tool_available(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

/// Connects a raw Unix stream to the server (for hand-written clients).
pub fn connect_raw(server: &TestServer) -> io::Result<UnixStream> {
    let stream = UnixStream::connect(server.socket_path())?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(stream)
}
