//! NBD connections on the data plane: handshake, then requests parsed from the socket and
//! submitted to the virtual drive's engine, replies sent back (out of order, as they finish).
//!
//! Each connection keeps one receive and at most one send in flight. Write payloads land in a
//! buffer of the engine's arena (copied from the receive buffer, or received straight into it
//! when large), which the engine writes to the members without another copy; read replies are
//! sent from the arena buffer the engine filled.

use super::tls::TlsSession;
use super::{DataPlane, Requester, Token, VdIoKind, count_vd_io};
use crate::log;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessera_api::model::{Peer, admits};
use tessera_buffer::BufferId;
use tessera_io::{Driver, Operation, SEND_PARTS_MAX, SendParts};
use tessera_nbd::TlsMode;
use tessera_nbd::proto::REQUEST_HEADER_BYTES;
use tessera_nbd::reply::encode_command_reply;
use tessera_nbd::{
    BlockSizeConstraints, Command, CommandFlags, Errno, ExportCatalog, ExportFeatures, ExportInfo,
    HandshakeConfig, HandshakeStatus, Negotiated, ReadReply, Rejection, Request, ServerHandshake,
    decode_request, validate,
};
use tessera_raid::engine::{HostError, HostOp, HostRequest as EngineRequest, Reply};

const INBOX_BYTES: usize = 256 * 1024;
/// The receive buffer while handshaking: every option the daemon buffers fits (see
/// `OPTION_BYTES_MAX`). It grows to `INBOX_BYTES` once the client is admitted to a drive, so
/// connections that never get that far cost little memory.
const HANDSHAKE_INBOX_BYTES: usize = 16 * 1024;
/// Longest option payload buffered in the handshake (names are at most 4 KiB); longer options
/// are skipped and refused by the handshake.
const OPTION_BYTES_MAX: u32 = 12 * 1024;
/// Requests in flight per connection before the connection stops reading.
const MAX_IN_FLIGHT: u32 = 256;
/// NBD connections at once; more are closed as soon as they are accepted, so a flood of
/// clients costs a descriptor for a moment, not a receive buffer each.
pub(crate) const MAX_CONNECTIONS: usize = 1024;
/// A client that has not finished its handshake by then is disconnected (slow or idle
/// clients would otherwise hold connections forever).
pub(crate) const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) enum Listener {
    Unix { socket: UnixListener, path: PathBuf },
    Tcp { socket: std::net::TcpListener },
}

impl Listener {
    pub fn unix(path: &Path) -> Result<Listener, String> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        if let Ok(metadata) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !metadata.file_type().is_socket() {
                return Err(format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                ));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(format!("another server answers on {}", path.display()));
            }
            let _ = std::fs::remove_file(path);
        }
        let socket = UnixListener::bind(path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        Ok(Listener::Unix {
            socket,
            path: path.to_path_buf(),
        })
    }

    pub fn tcp(address: &str) -> Result<Listener, String> {
        let socket = std::net::TcpListener::bind(address)
            .map_err(|e| format!("cannot listen on {address}: {e}"))?;
        Ok(Listener::Tcp { socket })
    }

    pub fn fd(&self) -> RawFd {
        match self {
            Listener::Unix { socket, .. } => socket.as_raw_fd(),
            Listener::Tcp { socket } => socket.as_raw_fd(),
        }
    }

    pub fn remove(&self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A request submitted to an engine on behalf of a connection.
pub(crate) struct HostRequest {
    connection: u64,
    request: Request,
    /// When it went to the engine (for the per-drive latency in `/metrics`).
    submitted: Instant,
}

enum Phase {
    Handshake(Box<ServerHandshake>),
    Serving(Box<Serving>),
}

struct Serving {
    negotiated: Negotiated,
    group: u32,
    vd_offset_bytes: u64,
    /// Requests go to the drive's thin store, not straight to the engine.
    thin: bool,
}

/// A write payload being received into an arena buffer.
struct Payload {
    request: Request,
    buffer: BufferId,
    filled: usize,
}

/// Bytes to send: a header, optionally data from an arena buffer, and a trailer.
struct Outgoing {
    head: Vec<u8>,
    data: Option<(u32, BufferId, u32)>,
    tail: Vec<u8>,
    /// Ranges of `data` that are in pipes instead (`splice.rs`), in order; sent with
    /// `send_spliced` rather than in a batch.
    pieces: Pieces,
}

type Pieces = smallvec::SmallVec<[super::splice::SplicedPiece; 2]>;

impl Outgoing {
    fn len_bytes(&self) -> usize {
        self.head.len() + self.data.map_or(0, |(_, _, len)| len as usize) + self.tail.len()
    }
}

/// The most bytes one send gathers from several replies (a single larger reply goes alone).
const SEND_BATCH_BYTES: usize = 512 * 1024;

pub(crate) struct Connection {
    socket: OwnedFd,
    /// After `NBD_OPT_STARTTLS`: every byte in and out passes through it.
    tls: Option<Box<TlsSession>>,
    accepted: Instant,
    /// Who connected, for the export access rules.
    peer: Peer,
    phase: Phase,
    inbox: Vec<u8>,
    start: usize,
    end: usize,
    receiving: bool,
    payload: Option<Payload>,
    discard_bytes: usize,
    outbox: VecDeque<Outgoing>,
    /// The replies of the send in flight (empty when none is); kept for its capacity.
    sending: Vec<Outgoing>,
    in_flight: u32,
    /// No more requests are read; the connection closes once replies are out.
    closing: bool,
    /// A spliced reply met a full socket: a wait for room is in flight.
    waiting_writable: bool,
    /// Bytes of the spliced reply at the front of `outbox` already sent.
    spliced_sent_bytes: usize,
    /// The engine had no buffer space for the next write: retry on the next loop turn.
    stalled: bool,
}

/// The virtual drives this data plane exports, as one client may see them, for the handshake.
struct Catalog<'a> {
    plane: &'a DataPlane,
    peer: &'a Peer,
    tls: Option<&'a TlsSession>,
}

impl ExportCatalog for Catalog<'_> {
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        let (group, vd) = self.plane.find_vd(name)?;
        let mut info = ExportInfo::new(vd.name.clone(), vd.host_bytes());
        info.description = Some(format!(
            "Tessera virtual drive on drive group {}",
            group.engine.superblock().name
        ));
        let access = &vd.access;
        let tls_name = |name: &str| self.tls.is_some_and(|tls| tls.client_is(name));
        if !admits(&access.allow, self.peer, &tls_name) {
            info.refused = Some("this client is not allowed to use the virtual drive");
        }
        info.tls_required = access.tls_required;
        // One writer at a time unless multi-connection is on: later clients read.
        info.read_only =
            access.read_only || (!access.multi_conn && self.plane.vd_has_writer(&vd.name));
        info.features = ExportFeatures {
            multi_conn: access.multi_conn,
            // A thin drive knows which blocks hold data.
            block_status: vd.thin.is_some(),
            ..ExportFeatures::default()
        };
        info.block_size = BlockSizeConstraints::default();
        Some(info)
    }

    fn list(&self) -> Vec<String> {
        self.plane
            .groups
            .values()
            .flat_map(|group| group.config.virtual_drives.iter().map(|vd| vd.name.clone()))
            .collect()
    }
}

impl DataPlane {
    pub(super) fn accept_connection(&mut self, listener: usize, fd: i32) {
        // SAFETY: the accept completion hands us a fresh descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        if self.connections.len() >= MAX_CONNECTIONS {
            self.refused_connections += 1;
            // One line per power of two refused, so a flood cannot flood the log too.
            if self.refused_connections.is_power_of_two() {
                log!(
                    "NBD connection refused: {MAX_CONNECTIONS} connections open already \
                     ({} refused so far)",
                    self.refused_connections
                );
            }
            return;
        }
        if matches!(self.listeners[listener], Listener::Tcp { .. }) {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt with a valid int option on a socket we own.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                )
            };
        }
        let tcp = matches!(self.listeners[listener], Listener::Tcp { .. });
        let (socket, peer) = super::peer::identify(socket, tcp);
        let mut handshake = ServerHandshake::new(HandshakeConfig {
            option_length_bytes_max: OPTION_BYTES_MAX,
            // With a certificate, clients may upgrade and drives may require it.
            tls: if self.tls.is_some() {
                TlsMode::Selective
            } else {
                TlsMode::Disabled
            },
            ..HandshakeConfig::default()
        });
        let mut greeting = Vec::new();
        handshake.take_output(&mut greeting);
        let connection = Connection {
            socket,
            tls: None,
            accepted: Instant::now(),
            peer,
            phase: Phase::Handshake(Box::new(handshake)),
            inbox: vec![0; HANDSHAKE_INBOX_BYTES],
            start: 0,
            end: 0,
            receiving: false,
            payload: None,
            discard_bytes: 0,
            outbox: VecDeque::from([Outgoing {
                head: greeting,
                data: None,
                tail: Vec::new(),
                pieces: Pieces::new(),
            }]),
            sending: Vec::new(),
            in_flight: 0,
            closing: false,
            waiting_writable: false,
            spliced_sent_bytes: 0,
            stalled: false,
        };
        let key = self.connections.insert(connection);
        self.pump_connection(key);
    }

    /// Closes a connection once its requests in flight are answered.
    pub(super) fn close_connection(&mut self, key: u64, why: &str) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        if !connection.closing {
            connection.closing = true;
            // SAFETY: shutdown(2) on a socket we own; it makes a pending recv complete.
            unsafe { libc::shutdown(connection.socket.as_raw_fd(), libc::SHUT_RD) };
            if why != "client disconnected" {
                log!("NBD connection closing: {why}");
            }
        }
        self.maybe_drop_connection(key);
    }

    fn maybe_drop_connection(&mut self, key: u64) {
        let Some(connection) = self.connections.get(key) else {
            return;
        };
        if connection.closing
            && connection.in_flight == 0
            && !connection.receiving
            && connection.sending.is_empty()
            && !connection.waiting_writable
        {
            let mut connection = self.connections.remove(key).expect("live connection");
            if let Some(payload) = connection.payload.take() {
                self.free_buffer(connection_group(&connection), payload.buffer);
            }
            for outgoing in connection.outbox.drain(..) {
                if let Some((group, buffer, _)) = outgoing.data {
                    self.free_buffer(Some(group), buffer);
                }
            }
        }
    }

    fn free_buffer(&mut self, group: Option<u32>, buffer: BufferId) {
        if let Some(group) = group.and_then(|g| self.groups.get_mut(&g)) {
            group.engine.pool_mut().free(buffer);
        }
    }

    pub(super) fn recv_done(&mut self, key: u64, result: i32) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        connection.receiving = false;
        if result <= 0 {
            if result < 0 && !connection.closing {
                log!(
                    "NBD connection receive failed: {}",
                    tessera_io::errno_text(-result)
                );
            }
            self.close_connection(key, "client disconnected");
            return;
        }
        let received = result as usize;
        match (&mut connection.tls, &mut connection.payload) {
            (Some(tls), _) => tls.received(received),
            (None, Some(payload)) => payload.filled += received,
            (None, None) => connection.end += received,
        }
        self.pump_connection(key);
    }

    pub(super) fn send_done(&mut self, key: u64, result: i32) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        assert!(!connection.sending.is_empty(), "a send was in flight");
        let mut sent = std::mem::take(&mut connection.sending);
        for outgoing in sent.drain(..) {
            if let Some((group, buffer, _)) = outgoing.data {
                self.free_buffer(Some(group), buffer);
            }
            self.spare_bytes.give(outgoing.head);
            self.spare_bytes.give(outgoing.tail);
        }
        if let Some(connection) = self.connections.get_mut(key) {
            connection.sending = sent;
        }
        if result < 0 {
            self.close_connection(key, "send failed");
            return;
        }
        self.pump_connection(key);
    }

    /// Starts queued sends on every connection (after engines produced replies).
    pub(super) fn flush_connections(&mut self) {
        let mut keys = std::mem::take(&mut self.connection_keys);
        self.connections.keys_into(&mut keys);
        for &key in &keys {
            let stalled = self.connections.get(key).is_some_and(|c| c.stalled);
            if stalled {
                self.connections.get_mut(key).expect("live").stalled = false;
                self.pump_connection(key);
            } else {
                self.start_send(key);
            }
        }
        self.connection_keys = keys;
    }

    /// Moves a connection forward: handshake bytes, requests, payloads, sends, receives.
    fn pump_connection(&mut self, key: u64) {
        loop {
            let moved = match self.tls_step(key) {
                Ok(moved) => moved,
                Err(error) => {
                    log!("NBD connection closed: {error}");
                    self.close_connection(key, "TLS failed");
                    false
                }
            };
            let Some(connection) = self.connections.get(key) else {
                return;
            };
            if connection.closing {
                break;
            }
            // Until the TLS handshake is done, there is nothing for the NBD handshake.
            let progressed = if connection.tls.as_ref().is_some_and(|tls| !tls.announced) {
                false
            } else {
                match connection.phase {
                    Phase::Handshake(_) => self.handshake_step(key),
                    Phase::Serving(_) => self.request_step(key),
                }
            };
            if !progressed && !moved {
                break;
            }
        }
        self.start_send(key);
        self.start_recv(key);
        self.maybe_drop_connection(key);
    }

    fn handshake_step(&mut self, key: u64) -> bool {
        let mut connection = self.connections.remove_for_step(key);
        let Phase::Handshake(handshake) = &mut connection.phase else {
            unreachable!()
        };
        let input = &connection.inbox[connection.start..connection.end];
        let catalog = Catalog {
            plane: self,
            peer: &connection.peer,
            tls: connection.tls.as_deref(),
        };
        let result = handshake.receive(input, &catalog);
        let mut output = Vec::new();
        handshake.take_output(&mut output);
        if !output.is_empty() {
            connection.outbox.push_back(Outgoing {
                head: output,
                data: None,
                tail: Vec::new(),
                pieces: Pieces::new(),
            });
        }
        let mut progressed = false;
        match result {
            Err(error) => {
                connection.closing = true;
                log!("NBD handshake refused: {error}");
            }
            Ok((consumed, status)) => {
                connection.start += consumed;
                progressed = consumed > 0;
                match status {
                    HandshakeStatus::Continue => {}
                    HandshakeStatus::Close => connection.closing = true,
                    HandshakeStatus::StartTls => {
                        if let Err(error) = self.start_tls(&mut connection) {
                            connection.closing = true;
                            log!("NBD STARTTLS failed: {error}");
                        }
                    }
                    HandshakeStatus::Done(negotiated) => {
                        match self.find_vd(negotiated.export_name()) {
                            Some((group, vd)) => {
                                connection.phase = Phase::Serving(Box::new(Serving {
                                    group: group.id,
                                    vd_offset_bytes: vd.offset_bytes,
                                    thin: vd.thin.is_some(),
                                    negotiated,
                                }));
                                progressed = true;
                            }
                            None => connection.closing = true,
                        }
                    }
                }
            }
        }
        compact(&mut connection);
        let closing = connection.closing;
        self.connections.restore_after_step(key, connection);
        if closing {
            self.close_connection(key, "handshake ended");
        }
        progressed && !closing
    }

    /// Parses and submits one request (or continues a payload); false when waiting for bytes.
    fn request_step(&mut self, key: u64) -> bool {
        let connection = self.connections.get_mut(key).expect("live connection");
        if connection.discard_bytes > 0 {
            let available = connection.end - connection.start;
            let dropped = available.min(connection.discard_bytes);
            connection.start += dropped;
            connection.discard_bytes -= dropped;
            compact(connection);
            return dropped > 0 && connection.discard_bytes == 0;
        }
        if let Some(payload) = &connection.payload {
            if payload.filled < payload.request.length_bytes as usize {
                return false;
            }
            let payload = connection.payload.take().expect("payload");
            self.submit_write(key, payload.request, payload.buffer);
            return true;
        }
        if connection.in_flight >= MAX_IN_FLIGHT
            || connection.end - connection.start < REQUEST_HEADER_BYTES
        {
            return false;
        }
        let request = match decode_request(&connection.inbox[connection.start..connection.end]) {
            Ok(Some(request)) => request,
            Ok(None) => return false,
            Err(error) => {
                self.close_connection(key, &format!("bad request: {error}"));
                return false;
            }
        };
        let Phase::Serving(serving) = &connection.phase else {
            unreachable!()
        };
        let negotiated = &serving.negotiated;
        if let Err(rejection) = validate(&request, negotiated) {
            connection.start += REQUEST_HEADER_BYTES;
            match rejection {
                Rejection::Disconnect(reason) => {
                    self.close_connection(key, &format!("request refused: {reason}"));
                    return false;
                }
                Rejection::Error { errno, message } => {
                    connection.discard_bytes = request.payload_bytes() as usize;
                    let outgoing = error_reply(&request, negotiated, errno, message);
                    connection.outbox.push_back(outgoing);
                    compact(connection);
                    return true;
                }
            }
        }
        let group = serving.group;
        if request.command == Command::Write {
            let Some(engine) = self.groups.get_mut(&group).map(|g| &mut g.engine) else {
                return false;
            };
            let len = request.length_bytes as usize;
            let Some(buffer) = engine.alloc_host_buffer(len) else {
                // Out of buffer space: wait for replies to free some.
                connection.stalled = true;
                return false;
            };
            connection.start += REQUEST_HEADER_BYTES;
            let available = (connection.end - connection.start).min(len);
            engine.pool_mut().slice_mut(buffer)[..available]
                .copy_from_slice(&connection.inbox[connection.start..connection.start + available]);
            connection.start += available;
            compact(connection);
            connection.payload = Some(Payload {
                request,
                buffer,
                filled: available,
            });
            return true;
        }
        connection.start += REQUEST_HEADER_BYTES;
        compact(connection);
        if request.command == Command::Disc {
            self.close_connection(key, "client disconnected");
            return false;
        }
        self.submit_request(key, request, None);
        true
    }

    fn submit_write(&mut self, key: u64, request: Request, buffer: BufferId) {
        self.submit_request(key, request, Some(buffer));
    }

    /// Hands a validated request to the engine (or answers it here when no engine work is needed).
    fn submit_request(&mut self, key: u64, request: Request, buffer: Option<BufferId>) {
        let connection = self.connections.get_mut(key).expect("live connection");
        let Phase::Serving(serving) = &connection.phase else {
            unreachable!()
        };
        if serving.thin {
            self.submit_thin(key, request, buffer);
            return;
        }
        let offset_bytes = serving.vd_offset_bytes + request.offset_bytes;
        let len_bytes = u64::from(request.length_bytes);
        let op = match request.command {
            Command::Read => HostOp::Read {
                offset_bytes,
                len_bytes,
            },
            Command::Write => HostOp::Write {
                offset_bytes,
                buffer: buffer.expect("write payload"),
                fua: request.flags.contains(CommandFlags::FUA),
            },
            Command::Flush => HostOp::Flush,
            Command::Trim => HostOp::Trim {
                offset_bytes,
                len_bytes,
            },
            Command::WriteZeroes => HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                may_deallocate: !request.flags.contains(CommandFlags::NO_HOLE),
                fast_only: request.flags.contains(CommandFlags::FAST_ZERO),
                fua: request.flags.contains(CommandFlags::FUA),
            },
            _ => {
                // CACHE is advisory and BLOCK_STATUS is not negotiated for thick drives.
                let outgoing = Outgoing {
                    head: command_reply(&request, &serving.negotiated, Ok(())),
                    data: None,
                    tail: Vec::new(),
                    pieces: Pieces::new(),
                };
                connection.outbox.push_back(outgoing);
                return;
            }
        };
        if request.command != Command::Write && len_bytes == 0 && request.command != Command::Flush
        {
            connection
                .outbox
                .push_back(empty_reply(&request, &serving.negotiated));
            return;
        }
        let group = serving.group;
        connection.in_flight += 1;
        let id = self.requests.insert(Requester::Host(HostRequest {
            connection: key,
            request,
            submitted: self.woke,
        }));
        if self.groups.contains_key(&group) {
            self.submissions.push((group, EngineRequest { id, op }));
        } else {
            self.requests.remove(id);
            let connection = self.connections.get_mut(key).expect("live connection");
            connection.in_flight -= 1;
            self.close_connection(key, "virtual drive gone");
        }
    }

    /// A request to a thin drive: answered by its store (or here, for block status).
    fn submit_thin(&mut self, key: u64, request: Request, buffer: Option<BufferId>) {
        let connection = self.connections.get_mut(key).expect("live connection");
        let Phase::Serving(serving) = &connection.phase else {
            unreachable!()
        };
        let negotiated = &serving.negotiated;
        let offset_bytes = request.offset_bytes;
        let len_bytes = u64::from(request.length_bytes);
        let fua = request.flags.contains(CommandFlags::FUA);
        if let Some(buffer) = buffer
            && let Some(group) = self.groups.get_mut(&serving.group)
        {
            // The store gives the buffer back once it holds the data, for the next write.
            let mut data = self
                .thin
                .get_mut(negotiated.export_name())
                .map(|drive| drive.store.spare_buffer())
                .unwrap_or_default();
            data.extend_from_slice(&group.engine.pool().slice(buffer)[..len_bytes as usize]);
            group.engine.pool_mut().free(buffer);
            if request.command == Command::Write {
                return self.submit_thin_op(
                    key,
                    request,
                    tessera_thin::HostOp::Write {
                        offset_bytes,
                        data,
                        fua,
                    },
                );
            }
        }
        let op = match request.command {
            _ if len_bytes == 0 && request.command != Command::Flush => {
                connection
                    .outbox
                    .push_back(empty_reply(&request, negotiated));
                return;
            }
            Command::Read => tessera_thin::HostOp::Read {
                offset_bytes,
                len_bytes,
            },
            Command::Flush => tessera_thin::HostOp::Flush,
            Command::Trim => tessera_thin::HostOp::Trim {
                offset_bytes,
                len_bytes,
            },
            // Zeroes never take space on a thin drive, so NO_HOLE and FAST_ZERO change nothing.
            Command::WriteZeroes => tessera_thin::HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
            },
            Command::BlockStatus => {
                let name = negotiated.export_name().to_string();
                let runs = self.thin_block_status(&name, offset_bytes, len_bytes);
                let connection = self.connections.get_mut(key).expect("live connection");
                let Phase::Serving(serving) = &connection.phase else {
                    unreachable!()
                };
                let outgoing = block_status_reply(&request, &serving.negotiated, &runs);
                connection.outbox.push_back(outgoing);
                return;
            }
            _ => {
                // CACHE is advisory; a write whose group vanished is refused below.
                let outgoing = Outgoing {
                    head: command_reply(&request, negotiated, Ok(())),
                    data: None,
                    tail: Vec::new(),
                    pieces: Pieces::new(),
                };
                connection.outbox.push_back(outgoing);
                return;
            }
        };
        self.submit_thin_op(key, request, op);
    }

    fn submit_thin_op(&mut self, key: u64, request: Request, op: tessera_thin::HostOp) {
        let id = self.requests.insert(Requester::Host(HostRequest {
            connection: key,
            request,
            submitted: self.woke,
        }));
        let connection = self.connections.get_mut(key).expect("live connection");
        let Phase::Serving(serving) = &connection.phase else {
            unreachable!()
        };
        match self.thin.get_mut(serving.negotiated.export_name()) {
            Some(drive) => {
                connection.in_flight += 1;
                drive.store.submit(id, op);
            }
            None => {
                self.requests.remove(id);
                self.close_connection(key, "virtual drive not serving");
            }
        }
    }

    /// Counts an answered request on its connection and drive; false if the connection is
    /// gone.
    fn book_answer(&mut self, pending: &HostRequest) -> bool {
        let Some(connection) = self.connections.get_mut(pending.connection) else {
            return false;
        };
        connection.in_flight -= 1;
        let Phase::Serving(serving) = &connection.phase else {
            unreachable!("requests only while serving")
        };
        let kind = match pending.request.command {
            Command::Read => VdIoKind::Read,
            Command::Write => VdIoKind::Write,
            _ => return true,
        };
        count_vd_io(
            &mut self.vd_io,
            serving.negotiated.export_name(),
            kind,
            u64::from(pending.request.length_bytes),
            self.woke.saturating_duration_since(pending.submitted),
        );
        true
    }

    /// Books an answered request and queues the reply `build` makes from the request and the
    /// connection's negotiated options. False when nothing was queued (the connection is gone
    /// or closing): whatever the reply would have carried is the caller's to release.
    fn deliver(
        &mut self,
        pending: &HostRequest,
        build: impl FnOnce(&Request, &Negotiated) -> Outgoing,
    ) -> bool {
        if !self.book_answer(pending) {
            return false;
        }
        let connection = self
            .connections
            .get_mut(pending.connection)
            .expect("booked");
        let delivered = !connection.closing;
        if delivered {
            let Phase::Serving(serving) = &connection.phase else {
                unreachable!("requests only while serving")
            };
            let outgoing = build(&pending.request, &serving.negotiated);
            connection.outbox.push_back(outgoing);
        }
        self.maybe_drop_connection(pending.connection);
        delivered
    }

    /// A thin drive's store answered a request.
    /// A thin drive's store answered a request; gives back the reply's data buffer, for the
    /// store to reuse.
    pub(super) fn thin_host_reply(
        &mut self,
        id: u64,
        result: Result<Option<Vec<u8>>, tessera_thin::ThinError>,
    ) -> Option<Vec<u8>> {
        let pending = match self.requests.remove(id) {
            Some(Requester::Host(pending)) => pending,
            Some(Requester::Ublk(pending)) => return self.ublk_thin_reply(pending, result),
            _ => return None,
        };
        let mut head = self.spare_bytes.take();
        let mut tail = self.spare_bytes.take();
        self.deliver(&pending, |request, negotiated| match &result {
            Ok(Some(data)) => {
                let mut read = ReadReply::new(request, negotiated);
                read.data(&mut head, request.offset_bytes, request.length_bytes);
                assert_eq!(data.len(), request.length_bytes as usize);
                head.extend_from_slice(data);
                if read.is_structured() {
                    read.finish(&mut tail);
                }
                Outgoing {
                    head,
                    data: None,
                    tail,
                    pieces: Pieces::new(),
                }
            }
            Ok(None) => success_reply(head, tail, request, negotiated),
            Err(error) => {
                let errno = match error {
                    tessera_thin::ThinError::OutOfRange => Errno::Inval,
                    tessera_thin::ThinError::Io => Errno::Io,
                    tessera_thin::ThinError::NoSpace => Errno::NoSpc,
                    tessera_thin::ThinError::Unavailable => Errno::Shutdown,
                };
                error_reply(request, negotiated, errno, &error.to_string())
            }
        });
        result.ok().flatten()
    }

    /// An engine answered a request.
    pub(super) fn host_reply(&mut self, group: u32, reply: Reply) {
        let pending = match self.requests.remove(reply.id) {
            Some(Requester::Host(pending)) => pending,
            Some(Requester::Thin {
                vd,
                lower_id,
                read_bytes,
            }) => {
                self.thin_engine_reply(group, &vd, lower_id, read_bytes, reply.result);
                return;
            }
            Some(Requester::Ublk(pending)) => {
                self.ublk_engine_reply(group, pending, reply.result);
                return;
            }
            None => {
                self.splicing.discard(reply.id);
                return;
            }
        };
        let data = match reply.result {
            Ok(Some(buffer)) => Some(buffer),
            _ => None,
        };
        let mut pieces = match data {
            Some(_) => self.splicing.take(reply.id),
            None => {
                self.splicing.discard(reply.id);
                Pieces::new()
            }
        };
        let mut head = self.spare_bytes.take();
        let mut tail = self.spare_bytes.take();
        let delivered = self.deliver(&pending, |request, negotiated| match reply.result {
            Ok(Some(buffer)) => {
                let mut read = ReadReply::new(request, negotiated);
                read.data(&mut head, request.offset_bytes, request.length_bytes);
                if read.is_structured() {
                    read.finish(&mut tail);
                }
                Outgoing {
                    head,
                    data: Some((group, buffer, request.length_bytes)),
                    tail,
                    pieces: std::mem::take(&mut pieces),
                }
            }
            Ok(None) => success_reply(head, tail, request, negotiated),
            Err(error) => {
                let errno = match error {
                    HostError::OutOfRange => Errno::Inval,
                    HostError::Io => Errno::Io,
                    HostError::NotFast => Errno::NotSup,
                    HostError::ShuttingDown => Errno::Shutdown,
                };
                error_reply(request, negotiated, errno, &error.to_string())
            }
        });
        if !delivered && let Some(buffer) = data {
            self.free_buffer(Some(group), buffer);
        }
    }

    fn start_send(&mut self, key: u64) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        if !connection.sending.is_empty() {
            return;
        }
        if connection.tls.is_some() {
            self.start_tls_send(key);
            return;
        }
        if connection.waiting_writable {
            return;
        }
        // Spliced replies at the front go out first, by themselves.
        if connection
            .outbox
            .front()
            .is_some_and(|next| !next.pieces.is_empty())
            && !self.send_spliced(key)
        {
            return;
        }
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        // Replies waiting together leave in one send: at queue depth, one system call and one
        // socket buffer carry many replies instead of one each.
        let batch = &mut connection.sending;
        let mut parts_used = 0;
        let mut batch_bytes = 0;
        while let Some(next) = connection.outbox.front() {
            if !next.pieces.is_empty() {
                // Goes out by itself once this batch is sent (`send_done` comes back here).
                break;
            }
            let head_only = next.data.is_none() && next.tail.is_empty();
            let merges = head_only
                && batch
                    .last()
                    .is_some_and(|last| last.data.is_none() && last.tail.is_empty());
            let parts_needed = if merges {
                0
            } else {
                1 + usize::from(next.data.is_some()) + usize::from(!next.tail.is_empty())
            };
            if !batch.is_empty()
                && (parts_used + parts_needed > SEND_PARTS_MAX
                    || batch_bytes + next.len_bytes() > SEND_BATCH_BYTES)
            {
                break;
            }
            let next = connection.outbox.pop_front().expect("front");
            parts_used += parts_needed;
            batch_bytes += next.len_bytes();
            match batch.last_mut() {
                // Headers without data join the previous header: one part, not one each.
                Some(last) if merges => {
                    last.head.extend_from_slice(&next.head);
                    self.spare_bytes.give(next.head);
                    self.spare_bytes.give(next.tail);
                }
                _ => batch.push(next),
            }
        }
        if batch.is_empty() {
            return;
        }
        let mut parts = SendParts::new();
        for outgoing in batch.iter() {
            parts.push(outgoing.head.as_ptr(), outgoing.head.len() as u32);
            if let Some((group, buffer, len)) = outgoing.data {
                let engine = &self.groups.get(&group).expect("group of a reply").engine;
                let slice = engine.pool().full(buffer);
                assert_eq!(slice.len_bytes, len);
                parts.push(engine.pool().as_mut_ptr(slice), len);
            }
            if !outgoing.tail.is_empty() {
                parts.push(outgoing.tail.as_ptr(), outgoing.tail.len() as u32);
            }
        }
        let fd = connection.socket.as_raw_fd();
        let token = self.tokens.insert(Token::Send { connection: key });
        // SAFETY: the head and tail vectors stay in `sending`, which is neither reordered nor
        // pushed to until `send_done`, so they do not move; the arena buffers stay allocated
        // until `send_done` frees them; nothing writes to either meanwhile.
        unsafe { self.driver.submit(token, Operation::Send { fd, parts }) };
    }

    /// Sends the spliced replies at the front of the outbox, each its header, its data (the
    /// pipes' contents and whatever ranges the engine filled in memory, in order) and its
    /// trailer, with non-blocking calls. True when they are all out; false when the socket is
    /// full (a wait for room is in flight) or the connection failed.
    fn send_spliced(&mut self, key: u64) -> bool {
        loop {
            let Some(connection) = self.connections.get_mut(key) else {
                return false;
            };
            let fd = connection.socket.as_raw_fd();
            let Some(outgoing) = connection
                .outbox
                .front_mut()
                .filter(|next| !next.pieces.is_empty())
            else {
                return true;
            };
            let (group, buffer, data_len) = outgoing.data.expect("spliced replies carry data");
            let data_len = data_len as usize;
            let head_len = outgoing.head.len();
            let done = connection.spliced_sent_bytes;
            let step = if done < head_len {
                tessera_io::send_nonblocking(fd, &outgoing.head[done..])
            } else if done < head_len + data_len {
                let at = done - head_len;
                let next_piece = outgoing
                    .pieces
                    .iter_mut()
                    .find(|piece| (piece.offset_bytes + piece.len_bytes) as usize > at);
                match next_piece {
                    Some(piece) if piece.offset_bytes as usize <= at => {
                        let left = (piece.offset_bytes + piece.len_bytes) as usize - at;
                        let step = piece.pipe.pipe.drain_to(fd, left);
                        if let Ok(moved) = step {
                            self.splicing.spliced_bytes += moved as u64;
                        }
                        step
                    }
                    // A range the engine filled itself (zeroes, a recovered piece).
                    other => {
                        let end = other.map_or(data_len, |piece| piece.offset_bytes as usize);
                        let engine = &self.groups.get(&group).expect("group of a reply").engine;
                        let bytes = &engine.pool().slice(buffer)[at..end];
                        tessera_io::send_nonblocking(fd, bytes)
                    }
                }
            } else if done < head_len + data_len + outgoing.tail.len() {
                tessera_io::send_nonblocking(fd, &outgoing.tail[done - head_len - data_len..])
            } else {
                let outgoing = connection.outbox.pop_front().expect("front");
                connection.spliced_sent_bytes = 0;
                for piece in outgoing.pieces {
                    self.splicing.give_back(piece.pipe);
                }
                self.spare_bytes.give(outgoing.head);
                self.spare_bytes.give(outgoing.tail);
                self.free_buffer(Some(group), buffer);
                continue;
            };
            match step {
                Ok(0) => {
                    self.close_connection(key, "spliced reply ran dry");
                    return false;
                }
                Ok(sent) => {
                    let connection = self.connections.get_mut(key).expect("live connection");
                    connection.spliced_sent_bytes += sent;
                }
                Err(errno) if errno == libc::EAGAIN || errno == libc::EWOULDBLOCK => {
                    let connection = self.connections.get_mut(key).expect("live connection");
                    connection.waiting_writable = true;
                    let token = self.tokens.insert(Token::Writable { connection: key });
                    self.driver.submit_poll_writable(token, fd);
                    return false;
                }
                Err(_) => {
                    self.close_connection(key, "send failed");
                    return false;
                }
            }
        }
    }

    /// A connection's socket has room again (or failed) after a spliced reply filled it.
    pub(super) fn writable(&mut self, key: u64, result: i32) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        connection.waiting_writable = false;
        if result < 0 {
            self.close_connection(key, "send failed");
            return;
        }
        self.pump_connection(key);
    }

    /// Whether engine request `request` answers an NBD connection without TLS (whose replies
    /// may carry spliced pieces).
    pub(super) fn answers_plain_nbd(&self, request: u64) -> bool {
        let Some(Requester::Host(pending)) = self.requests.get(request) else {
            return false;
        };
        self.connections
            .get(pending.connection)
            .is_some_and(|connection| connection.tls.is_none())
    }

    fn start_recv(&mut self, key: u64) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        if connection.receiving || connection.closing || connection.stalled {
            return;
        }
        let (pointer, len) = match (&mut connection.tls, &connection.payload) {
            (Some(tls), _) => {
                // Ciphertext goes to the session's own buffer; `tls_step` takes plaintext out.
                let room = tls.receive_room();
                if room.is_empty() {
                    return;
                }
                (room.as_mut_ptr(), room.len())
            }
            (None, Some(payload)) => {
                let remaining = payload.request.length_bytes as usize - payload.filled;
                if remaining == 0 {
                    return;
                }
                let Phase::Serving(serving) = &connection.phase else {
                    unreachable!()
                };
                let engine = &self.groups.get(&serving.group).expect("group").engine;
                let slice = engine.pool().full(payload.buffer);
                // SAFETY: `filled < len` of a live arena buffer.
                (
                    unsafe { engine.pool().as_mut_ptr(slice).add(payload.filled) },
                    remaining,
                )
            }
            (None, None) => {
                if matches!(connection.phase, Phase::Serving(_))
                    && connection.inbox.len() < INBOX_BYTES
                {
                    // No receive is in flight here (checked above), so nothing points into it.
                    connection.inbox.resize(INBOX_BYTES, 0);
                }
                if connection.in_flight >= MAX_IN_FLIGHT || connection.end == connection.inbox.len()
                {
                    return;
                }
                let room = connection.inbox.len() - connection.end;
                // SAFETY: `end < len` of the inbox vector.
                (
                    unsafe { connection.inbox.as_mut_ptr().add(connection.end) },
                    room,
                )
            }
        };
        connection.receiving = true;
        let fd = connection.socket.as_raw_fd();
        let token = self.tokens.insert(Token::Recv { connection: key });
        // SAFETY: the inbox is only resized (above) and compacted while no receive is in
        // flight; a TLS session's buffer is never resized and `tls_step` compacts it only when
        // no receive is in flight; a payload buffer stays allocated until the write is
        // submitted, which happens only after this receive completes.
        unsafe {
            self.driver.submit(
                token,
                Operation::Recv {
                    fd,
                    buffer: pointer,
                    len_bytes: len as u32,
                },
            )
        };
    }
}

fn connection_group(connection: &Connection) -> Option<u32> {
    match &connection.phase {
        Phase::Serving(serving) => Some(serving.group),
        Phase::Handshake(_) => None,
    }
}

/// Moves unread bytes to the front of the inbox (only while no receive is in flight).
fn compact(connection: &mut Connection) {
    if connection.receiving {
        return;
    }
    if connection.start == connection.end {
        connection.start = 0;
        connection.end = 0;
    } else if connection.start > connection.inbox.len() / 2 {
        connection
            .inbox
            .copy_within(connection.start..connection.end, 0);
        connection.end -= connection.start;
        connection.start = 0;
    }
}

/// The answer to a zero-length request other than a flush.
fn empty_reply(request: &Request, negotiated: &Negotiated) -> Outgoing {
    let head = if request.command == Command::Read {
        let mut head = Vec::new();
        let mut reply = ReadReply::new(request, negotiated);
        if reply.is_structured() {
            reply.finish(&mut head);
        } else {
            reply.data(&mut head, request.offset_bytes, 0);
        }
        head
    } else {
        command_reply(request, negotiated, Ok(()))
    };
    Outgoing {
        head,
        data: None,
        tail: Vec::new(),
        pieces: Pieces::new(),
    }
}

/// `NBD_CMD_BLOCK_STATUS` for `base:allocation`: holes read as zeroes.
fn block_status_reply(
    request: &Request,
    negotiated: &Negotiated,
    runs: &[(u64, bool)],
) -> Outgoing {
    use tessera_nbd::proto::allocation_flags::{HOLE, ZERO};
    use tessera_nbd::reply::{Extent, encode_block_status};
    let mut extents: Vec<Extent> = runs
        .iter()
        .map(|&(length_bytes, allocated)| Extent {
            length_bytes: length_bytes as u32,
            flags: if allocated { 0 } else { HOLE | ZERO },
        })
        .collect();
    if request.flags.contains(CommandFlags::REQ_ONE) {
        extents.truncate(1);
    }
    let mut head = Vec::new();
    let contexts = &negotiated.meta_contexts;
    for (index, context) in contexts.iter().enumerate() {
        encode_block_status(
            &mut head,
            request.cookie,
            context.id,
            &extents,
            index + 1 == contexts.len(),
        );
    }
    Outgoing {
        head,
        data: None,
        tail: Vec::new(),
        pieces: Pieces::new(),
    }
}

/// Largest reply header buffer kept for reuse (merged headers of a deep queue fit).
pub(super) const SPARE_BYTES_MAX_CAPACITY: usize = 64 << 10;
/// How many reply header buffers are kept for reuse.
pub(super) const SPARE_BYTES_MAX: usize = 1024;

/// The reply to a request answered without data, in reused header buffers.
fn success_reply(
    mut head: Vec<u8>,
    tail: Vec<u8>,
    request: &Request,
    negotiated: &Negotiated,
) -> Outgoing {
    encode_command_reply(
        &mut head,
        request.cookie,
        negotiated.structured_replies,
        Ok(()),
    );
    Outgoing {
        head,
        data: None,
        tail,
        pieces: Pieces::new(),
    }
}

fn command_reply(
    request: &Request,
    negotiated: &Negotiated,
    result: Result<(), (Errno, &str)>,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command_reply(
        &mut out,
        request.cookie,
        negotiated.structured_replies,
        result,
    );
    out
}

fn error_reply(
    request: &Request,
    negotiated: &Negotiated,
    errno: Errno,
    message: &str,
) -> Outgoing {
    let mut head = Vec::new();
    if request.command == Command::Read {
        let outcome = ReadReply::new(request, negotiated).error(&mut head, errno, message);
        assert_eq!(
            outcome,
            tessera_nbd::ReadErrorOutcome::Reported,
            "nothing was sent before the error"
        );
    } else {
        encode_command_reply(
            &mut head,
            request.cookie,
            negotiated.structured_replies,
            Err((errno, message)),
        );
    }
    Outgoing {
        head,
        data: None,
        tail: Vec::new(),
        pieces: Pieces::new(),
    }
}

impl super::tokens::Tokens<Connection> {
    /// Takes a connection out for a step that needs the rest of the plane; `restore_after_step`
    /// puts it back under the same key.
    fn remove_for_step(&mut self, key: u64) -> Connection {
        self.take(key)
    }

    fn restore_after_step(&mut self, key: u64, connection: Connection) {
        self.put_back(key, connection);
    }
}

impl DataPlane {
    /// Client connections to a virtual drive.
    pub(crate) fn vd_connections(&self, name: &str) -> u32 {
        self.connections
            .keys()
            .into_iter()
            .filter(|&key| {
                self.connection_export(key)
                    .is_some_and(|export| export == name)
            })
            .count() as u32
    }

    /// Closes every connection to a virtual drive (it is being deleted).
    pub(crate) fn close_vd_connections(&mut self, name: &str) {
        let keys: Vec<u64> = self
            .connections
            .keys()
            .into_iter()
            .filter(|&key| {
                self.connection_export(key)
                    .is_some_and(|export| export == name)
            })
            .collect();
        for key in keys {
            self.close_connection(key, "virtual drive deleted");
        }
        self.vd_io.remove(name);
    }

    /// `NBD_OPT_STARTTLS` was acknowledged: what is queued (the acknowledgement) still goes out
    /// in plaintext, what follows is TLS.
    fn start_tls(&self, connection: &mut Connection) -> Result<(), String> {
        let config = self.tls.clone().ok_or("TLS is not configured")?;
        if connection.receiving {
            // A plaintext receive into the inbox would land after the switch.
            return Err("STARTTLS handled while a receive was in flight".into());
        }
        let mut session = TlsSession::new(config)?;
        for outgoing in connection.outbox.drain(..) {
            assert!(outgoing.data.is_none() && outgoing.tail.is_empty());
            session.raw_before.extend_from_slice(&outgoing.head);
        }
        // A client sends its TLS hello only after the acknowledgement, but bytes it sent early
        // are ciphertext all the same.
        session.received_early(&connection.inbox[connection.start..connection.end])?;
        connection.start = 0;
        connection.end = 0;
        connection.tls = Some(Box::new(session));
        Ok(())
    }

    /// Moves bytes through a connection's TLS session: ciphertext received into rustls,
    /// plaintext out into the write payload or the inbox, and tells the NBD handshake when the
    /// TLS handshake is done. Nothing to do without TLS. Returns whether any bytes moved.
    fn tls_step(&mut self, key: u64) -> Result<bool, String> {
        let Some(connection) = self.connections.get_mut(key) else {
            return Ok(false);
        };
        let Some(tls) = connection.tls.as_mut() else {
            return Ok(false);
        };
        let mut moved = false;
        if !connection.receiving {
            moved |= tls.feed()?;
        }
        if !tls.announced && !tls.handshaking() {
            if let Phase::Handshake(handshake) = &mut connection.phase {
                handshake.tls_started();
            }
            tls.announced = true;
            moved = true;
        }
        if !tls.announced {
            return Ok(moved);
        }
        match (&mut connection.payload, &connection.phase) {
            (Some(payload), Phase::Serving(serving)) => {
                let pool = self
                    .groups
                    .get_mut(&serving.group)
                    .expect("group of a payload")
                    .engine
                    .pool_mut();
                let bytes = pool.slice_mut(payload.buffer);
                let wanted = payload.request.length_bytes as usize;
                let read = tls.read_plain(&mut bytes[payload.filled..wanted]);
                payload.filled += read;
                moved |= read > 0;
            }
            _ => {
                if matches!(connection.phase, Phase::Serving(_))
                    && connection.inbox.len() < INBOX_BYTES
                {
                    connection.inbox.resize(INBOX_BYTES, 0);
                }
                let end = connection.end;
                let read = tls.read_plain(&mut connection.inbox[end..]);
                connection.end += read;
                moved |= read > 0;
            }
        }
        Ok(moved)
    }

    /// Sends what is queued on a TLS connection: bytes from before the switch as they are,
    /// then everything else sealed into TLS records (data copied out of the arena, whose
    /// buffers are freed at once).
    fn start_tls_send(&mut self, key: u64) {
        let mut freed = Vec::new();
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let Some(tls) = connection.tls.as_mut() else {
            return;
        };
        let mut bytes = std::mem::take(&mut tls.raw_before);
        let mut failed = None;
        {
            while let Some(outgoing) = connection.outbox.pop_front() {
                let data: &[u8] = match outgoing.data {
                    Some((group, buffer, len)) => {
                        freed.push((group, buffer));
                        let pool = self
                            .groups
                            .get(&group)
                            .expect("group of a reply")
                            .engine
                            .pool();
                        &pool.slice(buffer)[..len as usize]
                    }
                    None => &[],
                };
                match tls.seal(&[&outgoing.head, data, &outgoing.tail]) {
                    Ok(sealed) => bytes.extend_from_slice(&sealed),
                    Err(error) => failed = Some(error),
                }
            }
        }
        bytes.extend_from_slice(&tls.records());
        let fd = connection.socket.as_raw_fd();
        let sending = (!bytes.is_empty()).then(|| Outgoing {
            head: bytes,
            data: None,
            tail: Vec::new(),
            pieces: Pieces::new(),
        });
        for (group, buffer) in freed {
            self.free_buffer(Some(group), buffer);
        }
        if let Some(error) = failed {
            log!("NBD connection closed: {error}");
            self.close_connection(key, "TLS failed");
            return;
        }
        let Some(outgoing) = sending else {
            return;
        };
        let connection = self.connections.get_mut(key).expect("live connection");
        let mut parts = SendParts::new();
        parts.push(outgoing.head.as_ptr(), outgoing.head.len() as u32);
        connection.sending.push(outgoing);
        let token = self.tokens.insert(Token::Send { connection: key });
        // SAFETY: the head vector moves into `sending` without reallocating and nothing writes
        // to it until `send_done`.
        unsafe { self.driver.submit(token, Operation::Send { fd, parts }) };
    }

    /// NBD connections open.
    pub(crate) fn nbd_connection_count(&self) -> usize {
        self.connections.len()
    }

    /// Disconnects clients whose handshake has run longer than `HANDSHAKE_TIMEOUT`.
    pub(super) fn expire_handshakes(&mut self) {
        let now = self.woke;
        let late: Vec<u64> = self
            .connections
            .keys()
            .into_iter()
            .filter(|&key| {
                self.connections.get(key).is_some_and(|connection| {
                    !connection.closing
                        && matches!(connection.phase, Phase::Handshake(_))
                        && now.duration_since(connection.accepted) > HANDSHAKE_TIMEOUT
                })
            })
            .collect();
        for key in late {
            self.handshake_timeouts += 1;
            self.close_connection(key, "handshake timed out");
        }
    }

    /// Whether a client has the virtual drive open for writing.
    pub(crate) fn vd_has_writer(&self, name: &str) -> bool {
        self.connections.keys().into_iter().any(|key| {
            self.serving(key).is_some_and(|serving| {
                serving.negotiated.export_name() == name && !serving.negotiated.export.read_only
            })
        })
    }

    /// Closes the connections to a virtual drive that its access no longer allows: clients
    /// the rules do not admit, and writers of a drive made read-only. Returns how many.
    pub(crate) fn enforce_vd_access(&mut self, name: &str) -> usize {
        let Some(access) = self.find_vd(name).map(|(_, vd)| vd.access.clone()) else {
            return 0;
        };
        let keys: Vec<u64> = self
            .connections
            .keys()
            .into_iter()
            .filter(|&key| {
                let Some(serving) = self.serving(key) else {
                    return false;
                };
                let writer = !serving.negotiated.export.read_only;
                let connection = self.connections.get(key).expect("live");
                let tls = connection.tls.as_deref();
                let tls_name = |name: &str| tls.is_some_and(|tls| tls.client_is(name));
                serving.negotiated.export_name() == name
                    && (!admits(&access.allow, &connection.peer, &tls_name)
                        || (writer && access.read_only))
            })
            .collect();
        for &key in &keys {
            self.close_connection(key, "access to the virtual drive changed");
        }
        keys.len()
    }

    fn serving(&self, key: u64) -> Option<&Serving> {
        let connection = self.connections.get(key)?;
        match &connection.phase {
            Phase::Serving(serving) if !connection.closing => Some(serving),
            _ => None,
        }
    }

    fn connection_export(&self, key: u64) -> Option<&str> {
        let connection = self.connections.get(key)?;
        if connection.closing {
            return None;
        }
        match &connection.phase {
            Phase::Serving(serving) => Some(serving.negotiated.export_name()),
            Phase::Handshake(_) => None,
        }
    }
}
