//! Remote members: an NBD export used as a member device (disaggregated storage).
//!
//! One connection, two threads over the same socket: the sender takes requests from a queue and
//! writes them (write payloads straight from the caller's memory), the receiver decodes replies
//! with `tessera-nbd`'s sans-I/O decoder and copies read data straight into the caller's memory.
//! Any number of requests are in flight. Completions go to a queue and an eventfd is signalled;
//! the event loop polls that eventfd ([`crate::Operation::PollReadable`] on
//! [`RemoteMember::wake_fd`]) and then calls [`RemoteMember::take_completions`].
//!
//! A lost connection (end of stream, socket error, protocol violation) makes the member gone:
//! every outstanding and every later request completes with `-ENOTCONN`, which
//! [`crate::IoError::from_errno`] classifies as [`crate::IoError::DeviceGone`]. A TCP peer that
//! vanishes without a reset is noticed by keepalive and `TCP_USER_TIMEOUT` within about 30
//! seconds; a server that stays connected but never answers is not detected here.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_nbd::client::handshake::{ClientConfig, ClientHandshake, ClientStatus, ExportDetails};
use tessera_nbd::client::replies::{InFlight, ReplyDecoder, ReplyEvent};
use tessera_nbd::proto::{Command, CommandFlags, Errno, TransmissionFlags};
use tessera_nbd::request::{Request, encode_request};
use tessera_nbd::uri::{NbdUri, Transport};

use crate::driver::Completion;
use crate::error::IoError;
use crate::wake::EventFd;

/// The errno of every request of a member whose connection is lost.
pub const GONE_ERRNO: i32 = libc::ENOTCONN;

/// Limit on connecting and on the handshake, so a dead address or a silent server fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A send that makes no progress for this long means the server stopped reading: gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes the receiver reads per system call.
const RECEIVE_BUFFER_BYTES: usize = 256 * 1024;
/// Most iovecs one writev takes (IOV_MAX on Linux).
const IOVECS_PER_WRITE_MAX: usize = 1024;

/// A pointer to caller memory that crosses to the sender or receiver thread.
#[derive(Clone, Copy, Debug)]
struct RawBuffer(*mut u8);

// SAFETY: the submit contract keeps the memory valid and untouched by others until the
// completion is returned; only one thread (sender for writes, receiver for reads) uses it.
unsafe impl Send for RawBuffer {}

#[derive(Clone, Copy, Debug)]
struct Pending {
    token: u64,
    command: Command,
    offset_bytes: u64,
    buffer: RawBuffer,
    len_bytes: u32,
    durable: Durable,
}

/// How a write is made durable before it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Durable {
    /// It is not: an ordinary write (or not a write).
    No,
    /// `NBD_CMD_FLAG_FUA` on the write.
    Fua,
    /// The server has a cache but no FUA: an NBD_CMD_FLUSH is sent once the write is
    /// answered, and the write completes (with its byte count) when the flush does.
    FlushAfter,
    /// The flush sent for a `FlushAfter` write: completes with that write's byte count.
    FlushFor { written_bytes: u32 },
}

/// A request the sender has numbered and is about to send: the receiver's to track.
#[derive(Clone, Copy, Debug)]
struct Registration {
    cookie: u64,
    pending: Pending,
}

#[derive(Default)]
struct State {
    /// Submitted, not yet taken by the sender.
    queue: VecDeque<Pending>,
    /// Taken by the sender and about to be sent; the receiver moves them to its table.
    registrations: Vec<Registration>,
    /// Why the connection is lost, once it is.
    gone: Option<String>,
    /// The member is being dropped.
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when the queue grows, the member is gone, or it is stopping.
    work: Condvar,
    completions: Mutex<Vec<Completion>>,
    wake: EventFd,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("remote member state lock poisoned")
    }

    /// Publishes completions and wakes the event loop if the queue was empty.
    fn post(&self, completions: &mut Vec<Completion>) {
        if completions.is_empty() {
            return;
        }
        let mut queue = self.completions.lock().expect("completion lock poisoned");
        let was_empty = queue.is_empty();
        queue.append(completions);
        drop(queue);
        if was_empty {
            self.wake.signal();
        }
    }

    /// Marks the connection lost; returns the requests the receiver must now fail.
    fn set_gone(&self, reason: String) -> Vec<Registration> {
        let mut state = self.state();
        state.gone.get_or_insert(reason);
        let registrations = std::mem::take(&mut state.registrations);
        drop(state);
        self.work.notify_all();
        registrations
    }
}

/// Both ends of the connection share one socket (`&TcpStream` and `&UnixStream` read and write).
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn connect(transport: &Transport) -> io::Result<Socket> {
        match transport {
            Transport::Tcp { host, port } => {
                let mut last_error = io::Error::from(io::ErrorKind::AddrNotAvailable);
                for address in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                        Ok(stream) => {
                            // The NBD spec asks both ends to disable Nagle's algorithm.
                            stream.set_nodelay(true)?;
                            set_tcp_liveness(&stream)?;
                            return Ok(Socket::Tcp(stream));
                        }
                        Err(error) => last_error = error,
                    }
                }
                Err(last_error)
            }
            Transport::Unix { socket_path } => Ok(Socket::Unix(UnixStream::connect(socket_path)?)),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(stream) => stream.set_read_timeout(timeout),
            Socket::Unix(stream) => stream.set_read_timeout(timeout),
        }
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(stream) => stream.set_write_timeout(timeout),
            Socket::Unix(stream) => stream.set_write_timeout(timeout),
        }
    }

    fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(stream) => (&*stream).read(buffer),
            Socket::Unix(stream) => (&*stream).read(buffer),
        }
    }

    fn write_vectored(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(stream) => (&*stream).write_vectored(slices),
            Socket::Unix(stream) => (&*stream).write_vectored(slices),
        }
    }

    fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Socket::Tcp(stream) => (&*stream).write_all(bytes),
            Socket::Unix(stream) => (&*stream).write_all(bytes),
        }
    }

    /// Writes every slice, resuming after short writes.
    fn write_all_vectored(&self, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        while !slices.is_empty() {
            let count = slices.len().min(IOVECS_PER_WRITE_MAX);
            match self.write_vectored(&slices[..count]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => IoSlice::advance_slices(&mut slices, written),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn shutdown(&self) {
        // Shutting down a socket that is already closed changes nothing worth reporting.
        let _ = match self {
            Socket::Tcp(stream) => stream.shutdown(Shutdown::Both),
            Socket::Unix(stream) => stream.shutdown(Shutdown::Both),
        };
    }
}

/// Keepalive after 10 s idle, probes every 5 s, and at most 30 s for unacknowledged data, so a
/// peer that vanished without a reset is noticed.
fn set_tcp_liveness(stream: &TcpStream) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    let options = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, 30_000),
    ];
    for (level, name, value) in options {
        let value: libc::c_int = value;
        // SAFETY: passes a pointer to one int and its size, as these options expect.
        let result = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Handshakes on `socket`; returns what the server said and any bytes read past the handshake.
fn handshake(socket: &Socket, export_name: &str) -> Result<(ExportDetails, Vec<u8>), String> {
    let mut handshake = ClientHandshake::new(ClientConfig::new(export_name));
    let mut buffer = vec![0u8; 64 * 1024];
    let mut output = Vec::new();
    loop {
        let received = match socket.read(&mut buffer) {
            Ok(received) => received,
            // Signals (and io_uring task work) interrupt reads on sockets with a timeout.
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(format!("handshake: {error}")),
        };
        if received == 0 {
            return Err("the server closed the connection during the handshake".into());
        }
        let (consumed, status) = handshake
            .receive(&buffer[..received])
            .map_err(|error| format!("handshake: {error}"))?;
        handshake.take_output(&mut output);
        socket
            .write_all(&output)
            .map_err(|error| format!("handshake: {error}"))?;
        output.clear();
        if let ClientStatus::Done(details) = status {
            return Ok((details, buffer[consumed..received].to_vec()));
        }
    }
}

/// A connection to one NBD export, used as a member. Dropping it disconnects.
pub struct RemoteMember {
    uri: String,
    details: ExportDetails,
    shared: Arc<Shared>,
    socket: Arc<Socket>,
    sender: Option<JoinHandle<()>>,
    receiver: Option<JoinHandle<()>>,
}

impl RemoteMember {
    /// Connects, negotiates (fixed newstyle, structured replies) and starts the threads.
    pub fn connect(uri: &NbdUri) -> Result<RemoteMember, IoError> {
        let uri_text = uri.to_string();
        let remote_error = |reason: String| IoError::Remote {
            uri: uri_text.clone(),
            reason,
        };
        if uri.tls {
            return Err(remote_error("TLS (nbds://) is not supported yet".into()));
        }
        let socket =
            Socket::connect(&uri.transport).map_err(|error| remote_error(error.to_string()))?;
        socket
            .set_read_timeout(Some(CONNECT_TIMEOUT))
            .and_then(|()| socket.set_write_timeout(Some(CONNECT_TIMEOUT)))
            .map_err(|error| remote_error(error.to_string()))?;
        let (details, leftover) = handshake(&socket, &uri.export_name).map_err(remote_error)?;
        socket
            .set_read_timeout(None)
            .and_then(|()| socket.set_write_timeout(Some(SEND_TIMEOUT)))
            .map_err(|error| remote_error(error.to_string()))?;

        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            completions: Mutex::new(Vec::new()),
            wake: EventFd::new()?,
        });
        let socket = Arc::new(socket);
        let sender = {
            let shared = Arc::clone(&shared);
            let socket = Arc::clone(&socket);
            std::thread::Builder::new()
                .name("nbd-member-send".into())
                .spawn(move || send_loop(&shared, &socket))
                .map_err(|error| remote_error(format!("cannot start a thread: {error}")))?
        };
        let receiver = {
            let shared = Arc::clone(&shared);
            let socket = Arc::clone(&socket);
            let structured = details.structured_replies;
            std::thread::Builder::new()
                .name("nbd-member-receive".into())
                .spawn(move || receive_loop(&shared, &socket, structured, leftover))
        };
        let receiver = match receiver {
            Ok(receiver) => receiver,
            Err(error) => {
                shared.set_gone("stopping".into());
                socket.shutdown();
                let _ = sender.join();
                return Err(remote_error(format!("cannot start a thread: {error}")));
            }
        };
        Ok(RemoteMember {
            uri: uri_text,
            details,
            shared,
            socket,
            sender: Some(sender),
            receiver: Some(receiver),
        })
    }

    /// The URI it was connected with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Size of the export.
    pub fn size_bytes(&self) -> u64 {
        self.details.size_bytes
    }

    /// What the server said about the export.
    pub fn details(&self) -> &ExportDetails {
        &self.details
    }

    /// Why the connection is lost, once it is.
    pub fn gone_reason(&self) -> Option<String> {
        self.shared.state().gone.clone()
    }

    /// The eventfd that becomes readable when completions are waiting.
    pub fn wake_fd(&self) -> RawFd {
        self.shared.wake.as_raw_fd()
    }

    /// Moves the completions that arrived into `out`; returns how many.
    pub fn take_completions(&self, out: &mut Vec<Completion>) -> usize {
        // Reset the counter first: a completion posted after this signals again.
        self.shared.wake.drain();
        let mut queue = self
            .shared
            .completions
            .lock()
            .expect("completion lock poisoned");
        let count = queue.len();
        out.append(&mut queue);
        count
    }

    /// Queues a read of `len_bytes` at `offset_bytes` into `buffer`; completes with
    /// `len_bytes` or a negative errno.
    ///
    /// # Safety
    ///
    /// `buffer .. buffer + len_bytes` must stay valid, and untouched by anyone else, until the
    /// completion has been taken or the member is dropped.
    pub unsafe fn submit_read(
        &self,
        token: u64,
        offset_bytes: u64,
        buffer: *mut u8,
        len_bytes: u32,
    ) {
        self.submit(Pending {
            token,
            command: Command::Read,
            offset_bytes,
            buffer: RawBuffer(buffer),
            len_bytes,
            durable: Durable::No,
        });
    }

    /// Queues a write of `len_bytes` from `buffer` at `offset_bytes`; completes with
    /// `len_bytes` or a negative errno. With `fua`, it completes only once the written
    /// bytes are durable (FUA, or a flush after it where the server has no FUA).
    ///
    /// # Safety
    ///
    /// `buffer .. buffer + len_bytes` must stay valid and unmodified until the completion has
    /// been taken or the member is dropped.
    pub unsafe fn submit_write(
        &self,
        token: u64,
        offset_bytes: u64,
        buffer: *const u8,
        len_bytes: u32,
        fua: bool,
    ) {
        let flags = self.details.transmission_flags;
        let durable = if !fua || !flags.contains(TransmissionFlags::SEND_FLUSH) {
            // A server without flush has no volatile cache: every answered write is durable.
            Durable::No
        } else if flags.contains(TransmissionFlags::SEND_FUA) {
            Durable::Fua
        } else {
            Durable::FlushAfter
        };
        self.submit(Pending {
            token,
            command: Command::Write,
            offset_bytes,
            buffer: RawBuffer(buffer as *mut u8),
            len_bytes,
            durable,
        });
    }

    /// Whether the export takes NBD_CMD_WRITE_ZEROES (and writes at all).
    pub fn can_write_zeroes(&self) -> bool {
        let flags = self.details.transmission_flags;
        flags.contains(TransmissionFlags::SEND_WRITE_ZEROES)
            && !flags.contains(TransmissionFlags::READ_ONLY)
    }

    /// Queues NBD_CMD_WRITE_ZEROES over `len_bytes` at `offset_bytes` (the server may punch a
    /// hole); completes with `len_bytes` or a negative errno. Names no memory. Only for an
    /// export that [`RemoteMember::can_write_zeroes`]; others refuse it with EOPNOTSUPP.
    pub fn submit_write_zeroes(&self, token: u64, offset_bytes: u64, len_bytes: u32) {
        if !self.can_write_zeroes() {
            self.shared.post(&mut vec![Completion {
                token,
                result: -libc::EOPNOTSUPP,
            }]);
            return;
        }
        self.submit(Pending {
            token,
            command: Command::WriteZeroes,
            offset_bytes,
            buffer: RawBuffer(std::ptr::null_mut()),
            len_bytes,
            durable: Durable::No,
        });
    }

    /// Queues NBD_CMD_FLUSH: completes with 0 once every write completed before it is
    /// durable. A server that does not advertise flush has no volatile cache (the Linux NBD
    /// client reads it the same way), so the flush completes at once.
    pub fn submit_flush(&self, token: u64) {
        if !self
            .details
            .transmission_flags
            .contains(TransmissionFlags::SEND_FLUSH)
        {
            self.shared.post(&mut vec![Completion { token, result: 0 }]);
            return;
        }
        self.submit(Pending {
            token,
            command: Command::Flush,
            offset_bytes: 0,
            buffer: RawBuffer(std::ptr::null_mut()),
            len_bytes: 0,
            durable: Durable::No,
        });
    }

    fn submit(&self, pending: Pending) {
        let maximum_bytes = self.details.effective_block_size().maximum_payload_bytes;
        let end_bytes = pending
            .offset_bytes
            .checked_add(u64::from(pending.len_bytes));
        let refusal = if pending.len_bytes > maximum_bytes
            || end_bytes.is_none_or(|end| end > self.details.size_bytes)
        {
            Some(-libc::EINVAL)
        } else if pending.command == Command::Write
            && self
                .details
                .transmission_flags
                .contains(TransmissionFlags::READ_ONLY)
        {
            Some(-libc::EROFS)
        } else {
            None
        };
        if let Some(result) = refusal {
            self.shared.post(&mut vec![Completion {
                token: pending.token,
                result,
            }]);
            return;
        }
        let mut state = self.shared.state();
        if state.gone.is_some() {
            drop(state);
            self.shared.post(&mut vec![Completion {
                token: pending.token,
                result: -GONE_ERRNO,
            }]);
            return;
        }
        state.queue.push_back(pending);
        drop(state);
        self.shared.work.notify_one();
    }
}

impl Drop for RemoteMember {
    /// Sends NBD_CMD_DISC after what is queued, then closes and joins both threads, so no
    /// thread touches caller memory once this returns.
    fn drop(&mut self) {
        self.shared.state().stopping = true;
        self.shared.work.notify_all();
        if let Some(sender) = self.sender.take() {
            // A panicked thread has already reported itself; the member is going away anyway.
            let _ = sender.join();
        }
        self.socket.shutdown();
        if let Some(receiver) = self.receiver.take() {
            let _ = receiver.join();
        }
    }
}

/// The sender: numbers queued requests, registers them for the receiver, and writes them.
fn send_loop(shared: &Shared, socket: &Socket) {
    let mut next_cookie: u64 = 1;
    let mut batch: VecDeque<Pending> = VecDeque::new();
    let mut headers: Vec<u8> = Vec::new();
    let mut failed: Vec<Completion> = Vec::new();
    loop {
        let mut state = shared.state();
        while state.queue.is_empty() && state.gone.is_none() && !state.stopping {
            state = shared
                .work
                .wait(state)
                .expect("remote member state lock poisoned");
        }
        if state.gone.is_some() {
            failed.extend(state.queue.drain(..).map(|pending| Completion {
                token: pending.token,
                result: -GONE_ERRNO,
            }));
            drop(state);
            shared.post(&mut failed);
            return;
        }
        if state.queue.is_empty() {
            assert!(state.stopping);
            drop(state);
            let mut disconnect = Vec::new();
            let request = Request {
                flags: CommandFlags::NONE,
                command: Command::Disc,
                cookie: next_cookie,
                offset_bytes: 0,
                length_bytes: 0,
            };
            encode_request(&request, &mut disconnect);
            // Best effort: the socket is shut down right after either way.
            let _ = socket.write_all(&disconnect);
            return;
        }
        std::mem::swap(&mut batch, &mut state.queue);
        for pending in &batch {
            state.registrations.push(Registration {
                cookie: next_cookie,
                pending: *pending,
            });
            next_cookie += 1;
        }
        drop(state);

        let first_cookie = next_cookie - batch.len() as u64;
        headers.clear();
        for (index, pending) in batch.iter().enumerate() {
            let request = Request {
                flags: if pending.durable == Durable::Fua {
                    CommandFlags::FUA
                } else {
                    CommandFlags::NONE
                },
                command: pending.command,
                cookie: first_cookie + index as u64,
                offset_bytes: pending.offset_bytes,
                length_bytes: pending.len_bytes,
            };
            encode_request(&request, &mut headers);
        }
        let header_bytes = headers.len() / batch.len();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
        for (index, pending) in batch.iter().enumerate() {
            slices.push(IoSlice::new(
                &headers[index * header_bytes..(index + 1) * header_bytes],
            ));
            if pending.command == Command::Write && pending.len_bytes > 0 {
                // SAFETY: `submit_write`'s contract keeps the payload valid and unmodified
                // until its completion, which cannot come before it is sent.
                let payload = unsafe {
                    std::slice::from_raw_parts(pending.buffer.0, pending.len_bytes as usize)
                };
                slices.push(IoSlice::new(payload));
            }
        }
        let result = socket.write_all_vectored(&mut slices);
        drop(slices);
        batch.clear();
        if let Err(error) = result {
            // The receiver fails everything registered; wake it by closing the socket.
            let mut registrations = shared.set_gone(format!("send failed: {error}"));
            socket.shutdown();
            // Registrations the receiver had not taken yet are failed here.
            failed.extend(registrations.drain(..).map(|registration| Completion {
                token: registration.pending.token,
                result: -GONE_ERRNO,
            }));
            shared.post(&mut failed);
        }
    }
}

/// The receiver: decodes replies, places read data, posts completions; on a lost connection
/// fails everything outstanding.
fn receive_loop(shared: &Shared, socket: &Socket, structured_replies: bool, leftover: Vec<u8>) {
    let mut decoder = ReplyDecoder::new(structured_replies);
    let mut table: HashMap<u64, Pending> = HashMap::new();
    let mut buffer = vec![0u8; RECEIVE_BUFFER_BYTES.max(leftover.len())];
    buffer[..leftover.len()].copy_from_slice(&leftover);
    let mut end = leftover.len();
    let mut completions: Vec<Completion> = Vec::new();
    // Flushes owed to writes answered in this pass (`Durable::FlushAfter`).
    let mut follow_ups: Vec<Pending> = Vec::new();
    let reason = loop {
        if end == 0 {
            match socket.read(&mut buffer) {
                Ok(0) => break "the server closed the connection".to_string(),
                Ok(received) => end = received,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => break format!("receive failed: {error}"),
            }
        }
        // Every reply in the buffer answers a request registered before it was sent.
        for registration in shared.state().registrations.drain(..) {
            decoder.expect(
                registration.cookie,
                InFlight {
                    command: registration.pending.command,
                    offset_bytes: registration.pending.offset_bytes,
                    length_bytes: registration.pending.len_bytes,
                },
            );
            table.insert(registration.cookie, registration.pending);
        }
        let decoded = decode_all(
            &mut decoder,
            &mut table,
            &buffer[..end],
            &mut completions,
            &mut follow_ups,
        );
        if let Err(reason) = decoded {
            break reason;
        }
        end = 0;
        shared.post(&mut completions);
        if !follow_ups.is_empty() {
            let mut state = shared.state();
            if state.gone.is_none() {
                state.queue.extend(follow_ups.drain(..));
                drop(state);
                shared.work.notify_one();
            } else {
                drop(state);
                completions.extend(follow_ups.drain(..).map(|pending| Completion {
                    token: pending.token,
                    result: -GONE_ERRNO,
                }));
                shared.post(&mut completions);
            }
        }
    };
    shared.post(&mut completions);
    let registrations = shared.set_gone(reason);
    socket.shutdown();
    completions.extend(
        table
            .into_values()
            .chain(
                registrations
                    .into_iter()
                    .map(|registration| registration.pending),
            )
            .map(|pending| Completion {
                token: pending.token,
                result: -GONE_ERRNO,
            }),
    );
    shared.post(&mut completions);
}

/// Decodes every event in `input`, placing read data and collecting completions.
fn decode_all(
    decoder: &mut ReplyDecoder,
    table: &mut HashMap<u64, Pending>,
    input: &[u8],
    completions: &mut Vec<Completion>,
    follow_ups: &mut Vec<Pending>,
) -> Result<(), String> {
    let mut start = 0;
    loop {
        let (consumed, event) = decoder
            .decode(&input[start..])
            .map_err(|error| format!("bad reply: {error}"))?;
        start += consumed;
        let Some(event) = event else {
            assert_eq!(
                start,
                input.len(),
                "the decoder consumes all input before asking for more"
            );
            return Ok(());
        };
        match event {
            ReplyEvent::Data {
                cookie,
                offset_bytes,
                data,
            } => {
                let pending = table[&cookie];
                let at = offset_bytes - pending.offset_bytes;
                assert!(at + data.len() as u64 <= u64::from(pending.len_bytes));
                // SAFETY: the decoder checked the range lies within the request, whose buffer
                // `submit_read`'s contract keeps valid and ours until completion.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        pending.buffer.0.add(at as usize),
                        data.len(),
                    );
                }
            }
            ReplyEvent::Hole {
                cookie,
                offset_bytes,
                length_bytes,
            } => {
                let pending = table[&cookie];
                let at = offset_bytes - pending.offset_bytes;
                assert!(at + u64::from(length_bytes) <= u64::from(pending.len_bytes));
                // SAFETY: as for data: within the request's buffer.
                unsafe {
                    std::ptr::write_bytes(
                        pending.buffer.0.add(at as usize),
                        0,
                        length_bytes as usize,
                    )
                };
            }
            // This client selects no metadata context, so none can arrive.
            ReplyEvent::BlockStatus { .. } => return Err("unrequested block status".into()),
            ReplyEvent::Complete { cookie, result } => {
                let pending = table.remove(&cookie).expect("the decoder knows the cookie");
                if pending.durable == Durable::FlushAfter && result.is_ok() {
                    follow_ups.push(Pending {
                        token: pending.token,
                        command: Command::Flush,
                        offset_bytes: 0,
                        buffer: RawBuffer(std::ptr::null_mut()),
                        len_bytes: 0,
                        durable: Durable::FlushFor {
                            written_bytes: pending.len_bytes,
                        },
                    });
                    continue;
                }
                let result = match (result, pending.durable) {
                    (Ok(()), Durable::FlushFor { written_bytes }) => written_bytes as i32,
                    (Ok(()), _) => pending.len_bytes as i32,
                    (Err(error), _) => -(Errno::from_u32(error.errno).to_u32() as i32),
                };
                completions.push(Completion {
                    token: pending.token,
                    result,
                });
            }
        }
    }
}
