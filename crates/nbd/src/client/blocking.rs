//! A blocking NBD client over TCP or a Unix socket, built on the sans-I/O client codecs.
//!
//! Simple calls (`read_at`, `write_at`, ...) wait for their reply. The pipelined calls
//! (`submit_*`, then `receive` or `wait`) keep many requests in flight and take replies in the
//! order the server sends them. Both sides block on the same socket, so keep the bytes in
//! flight within what the socket buffers hold when mixing large writes with large reads, or a
//! server that answers reads while the client is still sending writes can stall both ends.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::client::handshake::{
    ClientConfig, ClientHandshake, ClientHandshakeError, ClientStatus, ExportDetails,
};
use crate::client::replies::{InFlight, ReplyDecoder, ReplyError, ReplyEvent, ServerError};
use crate::proto::{Command, CommandFlags, TransmissionFlags};
use crate::request::{Request, encode_request};
use crate::uri::{NbdUri, Transport, UriError};

const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Why a client operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket failed.
    Io(io::Error),
    /// The URI could not be parsed.
    Uri(UriError),
    /// The URI asks for TLS, which this client does not speak yet (issue 11).
    TlsNotSupported,
    /// The server closed the connection.
    ConnectionClosed,
    /// The handshake failed.
    Handshake(ClientHandshakeError),
    /// The reply stream broke the protocol; the connection is unusable.
    Reply(ReplyError),
    /// The server answered the request with an error.
    Server(ServerError),
    /// The export does not offer this command or flag.
    NotSupported(&'static str),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(error) => write!(f, "I/O error: {error}"),
            Self::Uri(error) => write!(f, "{error}"),
            Self::TlsNotSupported => write!(f, "TLS URIs (nbds://) are not supported yet"),
            Self::ConnectionClosed => write!(f, "the server closed the connection"),
            Self::Handshake(error) => write!(f, "handshake failed: {error}"),
            Self::Reply(error) => write!(f, "protocol error in reply: {error}"),
            Self::Server(error) => write!(f, "server error: {error}"),
            Self::NotSupported(what) => write!(f, "the export does not support {what}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// The reply to a pipelined request.
#[derive(Debug)]
pub struct Completion {
    /// The cookie `submit_*` returned.
    pub cookie: u64,
    /// The command it answers.
    pub command: Command,
    /// Success or the server's error.
    pub result: Result<(), ServerError>,
    /// For a successful READ, the data; empty otherwise.
    pub data: Vec<u8>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn connect(transport: &Transport) -> io::Result<Stream> {
        Ok(match transport {
            Transport::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), *port))?;
                // The spec asks both ends to disable Nagle's algorithm.
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            Transport::Unix { socket_path } => Stream::Unix(UnixStream::connect(socket_path)?),
        })
    }

    fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => {
                stream.set_read_timeout(timeout)?;
                stream.set_write_timeout(timeout)
            }
            Stream::Unix(stream) => {
                stream.set_read_timeout(timeout)?;
                stream.set_write_timeout(timeout)
            }
        }
    }

    fn shutdown(&self) {
        // The connection is being dropped either way; a failed shutdown changes nothing.
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(std::net::Shutdown::Both),
            Stream::Unix(stream) => stream.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            Stream::Unix(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            Stream::Unix(stream) => stream.write(buffer),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.flush(),
            Stream::Unix(stream) => stream.flush(),
        }
    }
}

struct Pending {
    command: Command,
    offset_bytes: u64,
    data: Vec<u8>,
}

/// A connection to one export.
pub struct Client {
    stream: Stream,
    details: ExportDetails,
    decoder: ReplyDecoder,
    read_buffer: Vec<u8>,
    buffer_start: usize,
    buffer_end: usize,
    next_cookie: u64,
    pending: HashMap<u64, Pending>,
    completed: VecDeque<Completion>,
    header: Vec<u8>,
}

impl Client {
    /// Connects and negotiates with structured replies.
    pub fn connect(uri: &NbdUri) -> Result<Client, ClientError> {
        Self::connect_with(uri, ClientConfig::new(uri.export_name.clone()))
    }

    /// Parses `uri` and connects.
    pub fn connect_str(uri: &str) -> Result<Client, ClientError> {
        Self::connect(&uri.parse().map_err(ClientError::Uri)?)
    }

    /// Connects with explicit handshake choices (the export name comes from `config`).
    pub fn connect_with(uri: &NbdUri, config: ClientConfig) -> Result<Client, ClientError> {
        if uri.tls {
            return Err(ClientError::TlsNotSupported);
        }
        let mut stream = Stream::connect(&uri.transport)?;
        let mut handshake = ClientHandshake::new(config);
        let mut read_buffer = vec![0u8; READ_BUFFER_BYTES];
        let mut output = Vec::new();
        loop {
            let received = stream.read(&mut read_buffer)?;
            if received == 0 {
                return Err(ClientError::ConnectionClosed);
            }
            let (consumed, status) = handshake
                .receive(&read_buffer[..received])
                .map_err(ClientError::Handshake)?;
            handshake.take_output(&mut output);
            stream.write_all(&output)?;
            output.clear();
            if let ClientStatus::Done(details) = status {
                let decoder = ReplyDecoder::new(details.structured_replies);
                return Ok(Client {
                    stream,
                    details,
                    decoder,
                    read_buffer,
                    buffer_start: consumed,
                    buffer_end: received,
                    next_cookie: 1,
                    pending: HashMap::new(),
                    completed: VecDeque::new(),
                    header: Vec::with_capacity(32),
                });
            }
        }
    }

    /// What the server said about the export.
    pub fn details(&self) -> &ExportDetails {
        &self.details
    }

    /// Size of the export in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.details.size_bytes
    }

    /// Read and write timeout on the socket (None: block forever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        Ok(self.stream.set_timeout(timeout)?)
    }

    /// Requests waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Reads `buffer.len()` bytes at `offset_bytes`, split by the maximum payload and pipelined.
    pub fn read_at(&mut self, buffer: &mut [u8], offset_bytes: u64) -> Result<(), ClientError> {
        let piece_bytes = self.piece_bytes();
        let mut cookies = Vec::new();
        for (index, piece) in buffer.chunks(piece_bytes).enumerate() {
            let piece_offset = offset_bytes + (index * piece_bytes) as u64;
            cookies.push(self.submit_read(piece_offset, piece.len() as u32)?);
        }
        let mut first_error = None;
        for (index, cookie) in cookies.into_iter().enumerate() {
            let completion = self.wait(cookie)?;
            match completion.result {
                Ok(()) => {
                    let start = index * piece_bytes;
                    buffer[start..start + completion.data.len()].copy_from_slice(&completion.data);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), |error| Err(ClientError::Server(error)))
    }

    /// Writes `data` at `offset_bytes`, split by the maximum payload and pipelined.
    pub fn write_at(
        &mut self,
        data: &[u8],
        offset_bytes: u64,
        fua: bool,
    ) -> Result<(), ClientError> {
        let piece_bytes = self.piece_bytes();
        let mut cookies = Vec::new();
        for (index, piece) in data.chunks(piece_bytes).enumerate() {
            cookies.push(self.submit_write(
                offset_bytes + (index * piece_bytes) as u64,
                piece,
                fua,
            )?);
        }
        self.wait_all(cookies)
    }

    /// Makes every completed write durable.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let cookie = self.submit_flush()?;
        self.wait_ok(cookie)
    }

    /// Tells the server the range is no longer needed.
    pub fn trim(&mut self, offset_bytes: u64, length_bytes: u32) -> Result<(), ClientError> {
        let cookie = self.submit_trim(offset_bytes, length_bytes)?;
        self.wait_ok(cookie)
    }

    /// Zeroes a range; `no_hole` asks the server to keep it allocated.
    pub fn write_zeroes(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        no_hole: bool,
    ) -> Result<(), ClientError> {
        let flags = if no_hole {
            CommandFlags::NO_HOLE
        } else {
            CommandFlags::NONE
        };
        let cookie = self.submit_write_zeroes(offset_bytes, length_bytes, flags)?;
        self.wait_ok(cookie)
    }

    /// Waits for requests in flight, sends `NBD_CMD_DISC` and closes (soft disconnect).
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        while !self.pending.is_empty() {
            self.receive()?;
        }
        let request = Request {
            flags: CommandFlags::NONE,
            command: Command::Disc,
            cookie: self.take_cookie(),
            offset_bytes: 0,
            length_bytes: 0,
        };
        self.header.clear();
        encode_request(&request, &mut self.header);
        self.stream.write_all(&self.header)?;
        self.stream.shutdown();
        Ok(())
    }

    /// Sends a READ; its completion carries the data.
    pub fn submit_read(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
    ) -> Result<u64, ClientError> {
        self.submit(
            Command::Read,
            CommandFlags::NONE,
            offset_bytes,
            length_bytes,
            &[],
        )
    }

    /// Sends a WRITE of `data`.
    pub fn submit_write(
        &mut self,
        offset_bytes: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<u64, ClientError> {
        let flags = if fua {
            CommandFlags::FUA
        } else {
            CommandFlags::NONE
        };
        let length_bytes = u32::try_from(data.len())
            .map_err(|_| ClientError::NotSupported("writes of 4 GiB or more"))?;
        self.submit(Command::Write, flags, offset_bytes, length_bytes, data)
    }

    /// Sends a FLUSH.
    pub fn submit_flush(&mut self) -> Result<u64, ClientError> {
        self.submit(Command::Flush, CommandFlags::NONE, 0, 0, &[])
    }

    /// Sends a TRIM.
    pub fn submit_trim(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
    ) -> Result<u64, ClientError> {
        self.submit(
            Command::Trim,
            CommandFlags::NONE,
            offset_bytes,
            length_bytes,
            &[],
        )
    }

    /// Sends a WRITE_ZEROES with NO_HOLE, FAST_ZERO or FUA as given.
    pub fn submit_write_zeroes(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        flags: CommandFlags,
    ) -> Result<u64, ClientError> {
        self.submit(Command::WriteZeroes, flags, offset_bytes, length_bytes, &[])
    }

    /// Sends any request (DISC excepted); `payload` is the WRITE data and empty otherwise.
    /// Checks that the export advertised the command and flags, as the spec requires.
    pub fn submit(
        &mut self,
        command: Command,
        flags: CommandFlags,
        offset_bytes: u64,
        length_bytes: u32,
        payload: &[u8],
    ) -> Result<u64, ClientError> {
        assert_ne!(command, Command::Disc, "use disconnect()");
        assert_eq!(
            payload.len(),
            if command == Command::Write {
                length_bytes as usize
            } else {
                0
            }
        );
        self.check_advertised(command, flags)?;
        let cookie = self.take_cookie();
        let request = Request {
            flags,
            command,
            cookie,
            offset_bytes,
            length_bytes,
        };
        self.header.clear();
        encode_request(&request, &mut self.header);
        // Register before sending, so the reply always finds its request.
        self.decoder.expect(
            cookie,
            InFlight {
                command,
                offset_bytes,
                length_bytes,
            },
        );
        let data = if command == Command::Read {
            vec![0u8; length_bytes as usize]
        } else {
            Vec::new()
        };
        self.pending.insert(
            cookie,
            Pending {
                command,
                offset_bytes,
                data,
            },
        );
        if payload.len() <= 64 * 1024 {
            self.header.extend_from_slice(payload);
            self.stream.write_all(&self.header)?;
        } else {
            self.stream.write_all(&self.header)?;
            self.stream.write_all(payload)?;
        }
        Ok(cookie)
    }

    /// The next reply to arrive, whichever request it answers.
    pub fn receive(&mut self) -> Result<Completion, ClientError> {
        if let Some(completion) = self.completed.pop_front() {
            return Ok(completion);
        }
        self.next_from_stream()
    }

    /// Decodes replies until one completes.
    fn next_from_stream(&mut self) -> Result<Completion, ClientError> {
        assert!(!self.pending.is_empty(), "receive with nothing in flight");
        loop {
            let (consumed, event) = self
                .decoder
                .decode(&self.read_buffer[self.buffer_start..self.buffer_end])
                .map_err(ClientError::Reply)?;
            self.buffer_start += consumed;
            match event {
                None => {
                    assert_eq!(self.buffer_start, self.buffer_end);
                    self.buffer_start = 0;
                    self.buffer_end = self.stream.read(&mut self.read_buffer)?;
                    if self.buffer_end == 0 {
                        return Err(ClientError::ConnectionClosed);
                    }
                }
                Some(ReplyEvent::Data {
                    cookie,
                    offset_bytes,
                    data,
                }) => {
                    let pending = self
                        .pending
                        .get_mut(&cookie)
                        .expect("decoder knows the cookie");
                    let at = (offset_bytes - pending.offset_bytes) as usize;
                    pending.data[at..at + data.len()].copy_from_slice(data);
                }
                Some(ReplyEvent::Hole {
                    cookie,
                    offset_bytes,
                    length_bytes,
                }) => {
                    let pending = self
                        .pending
                        .get_mut(&cookie)
                        .expect("decoder knows the cookie");
                    let at = (offset_bytes - pending.offset_bytes) as usize;
                    pending.data[at..at + length_bytes as usize].fill(0);
                }
                // Block status is not requested by this client.
                Some(ReplyEvent::BlockStatus { .. }) => {}
                Some(ReplyEvent::Complete { cookie, result }) => {
                    let pending = self
                        .pending
                        .remove(&cookie)
                        .expect("decoder knows the cookie");
                    let data = if result.is_ok() {
                        pending.data
                    } else {
                        Vec::new()
                    };
                    return Ok(Completion {
                        cookie,
                        command: pending.command,
                        result,
                        data,
                    });
                }
            }
        }
    }

    /// Waits for the reply to `cookie`, keeping other replies for `receive`.
    pub fn wait(&mut self, cookie: u64) -> Result<Completion, ClientError> {
        if let Some(index) = self
            .completed
            .iter()
            .position(|completion| completion.cookie == cookie)
        {
            return Ok(self.completed.remove(index).expect("index found"));
        }
        assert!(
            self.pending.contains_key(&cookie),
            "cookie {cookie:#x} is not in flight"
        );
        loop {
            let completion = self.next_from_stream()?;
            if completion.cookie == cookie {
                return Ok(completion);
            }
            self.completed.push_back(completion);
        }
    }

    fn wait_ok(&mut self, cookie: u64) -> Result<(), ClientError> {
        self.wait(cookie)?.result.map_err(ClientError::Server)
    }

    fn wait_all(&mut self, cookies: Vec<u64>) -> Result<(), ClientError> {
        let mut first_error = None;
        for cookie in cookies {
            if let Err(error) = self.wait(cookie)?.result {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), |error| Err(ClientError::Server(error)))
    }

    fn take_cookie(&mut self) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        cookie
    }

    fn piece_bytes(&self) -> usize {
        self.details
            .effective_block_size()
            .maximum_payload_bytes
            .min(32 << 20) as usize
    }

    fn check_advertised(&self, command: Command, flags: CommandFlags) -> Result<(), ClientError> {
        let advertised = self.details.transmission_flags;
        let needs = |flag: TransmissionFlags, what: &'static str| {
            if advertised.contains(flag) {
                Ok(())
            } else {
                Err(ClientError::NotSupported(what))
            }
        };
        match command {
            Command::Flush => needs(TransmissionFlags::SEND_FLUSH, "flush")?,
            Command::Trim => needs(TransmissionFlags::SEND_TRIM, "trim")?,
            Command::WriteZeroes => needs(TransmissionFlags::SEND_WRITE_ZEROES, "write zeroes")?,
            Command::Cache => needs(TransmissionFlags::SEND_CACHE, "cache")?,
            _ => {}
        }
        if flags.contains(CommandFlags::FUA) {
            needs(TransmissionFlags::SEND_FUA, "FUA")?;
        }
        if flags.contains(CommandFlags::FAST_ZERO) {
            needs(TransmissionFlags::SEND_FAST_ZERO, "fast zero")?;
        }
        if flags.contains(CommandFlags::DF) {
            needs(TransmissionFlags::SEND_DF, "don't fragment")?;
        }
        Ok(())
    }
}
