//! Remote members against `tessera-nbd`'s test server and against `nbdkit memory`: data round
//! trips with many requests in flight, flush, refusals, and a server that disappears mid-run
//! (a proxy cut, an nbdkit killed), which must give "device gone" errors, not a hang.
//! The reference is the server's own memory (test server) or a model of what was written.
//!
//! The nbdkit tests print why and pass when `nbdkit` is not installed.

mod support;

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::{AlignedBuffer, Rng, ScratchDir, drivers};
use tessera_io::{AnyDriver, Completion, Driver, GONE_ERRNO, IoError, RemoteMember};
use tessera_nbd::testing::{TestServer, tool_available};
use tessera_nbd::{ExportInfo, NbdUri, Transport};

const DISK_BYTES: usize = 8 << 20;

/// The event loop's side: waits on the member's eventfd through a driver and takes
/// completions until `count` arrived; fails the test after `timeout`.
struct Loop {
    driver: AnyDriver,
    armed: bool,
}

impl Loop {
    fn new(driver: AnyDriver) -> Loop {
        Loop {
            driver,
            armed: false,
        }
    }

    fn collect(
        &mut self,
        remote: &RemoteMember,
        count: usize,
        timeout: Duration,
    ) -> Vec<Completion> {
        let out = self.collect_at_least(remote, count, timeout);
        assert_eq!(out.len(), count, "more completions than requests");
        out
    }

    fn collect_at_least(
        &mut self,
        remote: &RemoteMember,
        count: usize,
        timeout: Duration,
    ) -> Vec<Completion> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            remote.take_completions(&mut out);
            if out.len() >= count {
                return out;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "only {} of {count} completions after {timeout:?}",
                out.len()
            );
            if !self.armed {
                self.driver.submit_poll_readable(77, remote.wake_fd());
                self.armed = true;
            }
            let mut polled = Vec::new();
            self.driver.wait(&mut polled, Some(deadline - now)).unwrap();
            if let Some(completion) = polled.first() {
                assert_eq!(completion.token, 77);
                self.armed = false;
            }
        }
    }
}

/// Non-overlapping (offset, length) extents of 512-byte multiples covering much of the disk.
fn extents(rng: &mut Rng, disk_bytes: usize) -> Vec<(usize, usize)> {
    let mut extents = Vec::new();
    let mut position = 0;
    while position < disk_bytes {
        let len = ((1 + rng.below(256)) as usize * 512).min(disk_bytes - position);
        extents.push((position, len));
        position += len + rng.below(3) as usize * 4096;
    }
    extents
}

/// Writes extents with everything in flight (every third one durable on completion),
/// flushes, reads them back with everything in flight; returns the model of the disk and how
/// many writes asked to be durable.
fn round_trip(remote: &RemoteMember, event_loop: &mut Loop, seed: u64) -> (Vec<u8>, u64) {
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; remote.size_bytes() as usize];
    let mut source = AlignedBuffer::new(model.len());
    rng.fill(source.as_mut_slice());
    let extents = extents(&mut rng, model.len());
    for (token, &(offset, len)) in extents.iter().enumerate() {
        // SAFETY: `source` outlives the completions and is not modified.
        unsafe {
            remote.submit_write(
                token as u64,
                offset as u64,
                source.as_mut_ptr().wrapping_add(offset),
                len as u32,
                token % 3 == 0,
            )
        };
        model[offset..offset + len].copy_from_slice(&source.as_slice()[offset..offset + len]);
    }
    let mut seen = vec![false; extents.len()];
    for completion in event_loop.collect(remote, extents.len(), Duration::from_secs(30)) {
        let token = completion.token as usize;
        assert!(
            !std::mem::replace(&mut seen[token], true),
            "token {token} completed twice"
        );
        assert_eq!(completion.result, extents[token].1 as i32);
    }
    remote.submit_flush(u64::MAX);

    assert_eq!(
        event_loop.collect(remote, 1, Duration::from_secs(10))[0],
        Completion {
            token: u64::MAX,
            result: 0
        }
    );

    read_back(remote, event_loop, &model);
    (model, extents.len().div_ceil(3) as u64)
}

/// Reads the whole disk back with everything in flight and checks it against `model`.
fn read_back(remote: &RemoteMember, event_loop: &mut Loop, model: &[u8]) {
    // 0xEE everywhere first, so holes and unread bytes are caught.
    let mut destination = AlignedBuffer::new(model.len());
    destination.as_mut_slice().fill(0xEE);
    let piece = 96 * 1024;
    let pieces = model.len().div_ceil(piece);
    for index in 0..pieces {
        let offset = index * piece;
        let len = piece.min(model.len() - offset);
        // SAFETY: `destination` outlives the completions and is untouched until then.
        unsafe {
            remote.submit_read(
                index as u64,
                offset as u64,
                destination.as_mut_ptr().wrapping_add(offset),
                len as u32,
            )
        };
    }
    for completion in event_loop.collect(remote, pieces, Duration::from_secs(30)) {
        let offset = completion.token as usize * piece;
        assert_eq!(completion.result, piece.min(model.len() - offset) as i32);
    }
    if let Some(first) = (0..model.len()).find(|&at| destination.as_slice()[at] != model[at]) {
        panic!(
            "read back differs from the model at byte {first}: {:#x} instead of {:#x}",
            destination.as_slice()[first],
            model[first]
        );
    }
}

/// Zeroes some extents with NBD_CMD_WRITE_ZEROES (no payload), then reads everything back.
fn zero_some(remote: &RemoteMember, event_loop: &mut Loop, model: &mut [u8]) {
    assert!(remote.can_write_zeroes());
    let zeroed = [
        (4096, 64 * 1024),
        (1 << 20, 1 << 20),
        (model.len() - 512, 512),
    ];
    for (token, &(offset, len)) in zeroed.iter().enumerate() {
        remote.submit_write_zeroes(token as u64, offset as u64, len as u32);
        model[offset..offset + len].fill(0);
    }
    for completion in event_loop.collect(remote, zeroed.len(), Duration::from_secs(30)) {
        assert_eq!(
            completion.result,
            zeroed[completion.token as usize].1 as i32
        );
    }
    read_back(remote, event_loop, model);
}

#[test]
fn round_trip_against_the_test_server_over_unix_and_tcp() {
    // One export per case: the server's disks outlive connections.
    let names = ["unix-uring", "unix-poll", "tcp-uring", "tcp-poll"];
    let exports = names
        .iter()
        .map(|name| {
            let mut info = ExportInfo::new(*name, DISK_BYTES as u64);
            // Over TCP the server has a cache but no FUA: durable writes need a flush after.
            info.features.fua = !name.starts_with("tcp");
            info
        })
        .collect();
    let server = TestServer::start(exports).unwrap();
    for (case, name) in names.iter().enumerate() {
        let uri = if name.starts_with("unix") {
            server.unix_uri(name)
        } else {
            server.tcp_uri(name)
        };
        let driver = drivers().remove(case % 2).1;
        let remote = RemoteMember::connect(&uri).unwrap();
        assert_eq!(remote.size_bytes(), DISK_BYTES as u64);
        let mut event_loop = Loop::new(driver);
        let (mut model, durable_writes) = round_trip(&remote, &mut event_loop, 100 + case as u64);
        zero_some(&remote, &mut event_loop, &mut model);
        let disk = server.disk(name);
        assert!(
            *disk.lock().unwrap() == model,
            "{name}: the server's memory differs from the model"
        );
        let seen = server.durability(name);
        let (fua_writes, flushes) = (
            seen.fua_writes.load(Ordering::Relaxed),
            seen.flushes.load(Ordering::Relaxed),
        );
        // `round_trip` sends one flush of its own after the writes.
        if name.starts_with("tcp") {
            assert_eq!((fua_writes, flushes), (0, durable_writes + 1), "{name}");
        } else {
            assert_eq!((fua_writes, flushes), (durable_writes, 1), "{name}");
        }
        assert_eq!(remote.gone_reason(), None);
    }
}

#[test]
fn bad_requests_are_refused_locally_or_by_the_server() {
    let server = TestServer::start(vec![ExportInfo::new("disk", 1 << 20)]).unwrap();
    let remote = RemoteMember::connect(&server.unix_uri("disk")).unwrap();
    let (_, driver) = drivers().remove(1);
    let mut event_loop = Loop::new(driver);
    let mut buffer = vec![0u8; 8192];
    // SAFETY: `buffer` outlives the completions.
    unsafe {
        remote.submit_read(1, (1 << 20) - 4096, buffer.as_mut_ptr(), 8192);
        remote.submit_write(2, u64::MAX - 10, buffer.as_ptr(), 512, false);
        remote.submit_read(3, 0, buffer.as_mut_ptr(), 0);
        // Not a multiple of the export's 512-byte minimum block: the server refuses it.
        remote.submit_read(4, 3, buffer.as_mut_ptr(), 100);
    }
    let mut completions = event_loop.collect(&remote, 4, Duration::from_secs(10));
    completions.sort_by_key(|completion| completion.token);
    assert_eq!(completions[0].result, -libc::EINVAL);
    assert_eq!(completions[1].result, -libc::EINVAL);
    assert_eq!(completions[2].result, 0, "a zero-length read is legal");
    assert_eq!(
        completions[3].result,
        -libc::EINVAL,
        "the server's error reply"
    );
    // The connection survives a refused request.
    remote.submit_flush(5);
    assert_eq!(
        event_loop.collect(&remote, 1, Duration::from_secs(10))[0].result,
        0
    );
    assert_eq!(remote.gone_reason(), None);
}

#[test]
fn connecting_to_nothing_is_a_clear_error() {
    let scratch = ScratchDir::new();
    let uri = NbdUri {
        transport: Transport::Unix {
            socket_path: scratch.file("no-such-socket"),
        },
        export_name: "disk".into(),
        tls: false,
    };
    match RemoteMember::connect(&uri) {
        Err(IoError::Remote { uri: text, reason }) => {
            assert!(text.starts_with("nbd+unix:///disk?socket="), "{text}");
            assert!(reason.contains("No such file"), "{reason}");
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
    let server = TestServer::start(vec![ExportInfo::new("disk", 1 << 20)]).unwrap();
    let error = RemoteMember::connect(&server.unix_uri("other"))
        .err()
        .expect("unknown export");
    assert!(matches!(error, IoError::Remote { .. }), "{error}");
}

/// A Unix-socket proxy in front of a server, which the test can cut like a pulled cable.
struct Proxy {
    socket_path: PathBuf,
    streams: Arc<Mutex<Vec<UnixStream>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(target: &Path, socket_path: PathBuf) -> Proxy {
        let listener = UnixListener::bind(&socket_path).unwrap();
        let streams = Arc::new(Mutex::new(Vec::new()));
        let target = target.to_owned();
        let kept = Arc::clone(&streams);
        let acceptor = std::thread::spawn(move || {
            let (client, _) = listener.accept().unwrap();
            let server = UnixStream::connect(&target).unwrap();
            kept.lock()
                .unwrap()
                .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
            let pump = |mut from: UnixStream, mut to: UnixStream| {
                std::thread::spawn(move || {
                    let _ = io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                })
            };
            let one = pump(client.try_clone().unwrap(), server.try_clone().unwrap());
            let two = pump(server, client);
            let _ = one.join();
            let _ = two.join();
        });
        Proxy {
            socket_path,
            streams,
            acceptor: Some(acceptor),
        }
    }

    fn uri(&self, export_name: &str) -> NbdUri {
        NbdUri {
            transport: Transport::Unix {
                socket_path: self.socket_path.clone(),
            },
            export_name: export_name.into(),
            tls: false,
        }
    }

    fn cut(&mut self) {
        for stream in self.streams.lock().unwrap().iter() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        self.acceptor.take().unwrap().join().unwrap();
    }
}

/// Keeps `depth` reads in flight until `stop_after` completed, then calls `cut` and checks
/// that every outstanding and every later request fails with "device gone".
fn keep_busy_then_cut(
    remote: &RemoteMember,
    event_loop: &mut Loop,
    depth: usize,
    cut: impl FnOnce(),
) {
    let mut buffers = AlignedBuffer::new(depth * 65536);
    let base = buffers.as_mut_ptr();
    let mut rng = Rng::new(5);
    let size = remote.size_bytes();
    let submit = |slot: usize, rng: &mut Rng| {
        let offset = rng.below(size / 65536) * 65536;
        // SAFETY: each slot's 64 KiB is used by one read at a time and `buffers` outlives the
        // member's requests (it is dropped after the collect that ends them all).
        unsafe { remote.submit_read(slot as u64, offset, base.wrapping_add(slot * 65536), 65536) };
    };
    for slot in 0..depth {
        submit(slot, &mut rng);
    }
    let mut completed = 0;
    while completed < 500 {
        for completion in event_loop.collect_at_least(remote, 1, Duration::from_secs(10)) {
            assert_eq!(completion.result, 65536);
            completed += 1;
            submit(completion.token as usize, &mut rng);
        }
    }
    cut();
    // Every request in flight completes, with an error or (if it got through first) data.
    let mut gone = 0;
    for completion in event_loop.collect(remote, depth, Duration::from_secs(15)) {
        assert!(
            completion.result == 65536 || completion.result == -GONE_ERRNO,
            "{completion:?}"
        );
        gone += usize::from(completion.result < 0);
    }
    assert!(gone > 0, "the cut failed no request");
    let error = Completion {
        token: 0,
        result: -GONE_ERRNO,
    }
    .value()
    .unwrap_err();
    assert!(error.is_device_gone(), "{error}");
    assert!(remote.gone_reason().is_some());
    // Later requests fail at once.
    // SAFETY: as above.
    unsafe { remote.submit_read(1, 0, base, 4096) };
    remote.submit_flush(2);
    for completion in event_loop.collect(remote, 2, Duration::from_secs(5)) {
        assert_eq!(completion.result, -GONE_ERRNO);
    }
    drop(buffers);
}

#[test]
fn a_server_that_disappears_gives_device_gone_not_a_hang() {
    let server = TestServer::start(vec![ExportInfo::new("disk", DISK_BYTES as u64)]).unwrap();
    let scratch = ScratchDir::new();
    for (name, driver) in drivers() {
        let mut proxy = Proxy::start(server.socket_path(), scratch.file(&format!("proxy-{name}")));
        let remote = RemoteMember::connect(&proxy.uri("disk")).unwrap();
        let mut event_loop = Loop::new(driver);
        keep_busy_then_cut(&remote, &mut event_loop, 32, || proxy.cut());
        // Dropping a gone member returns promptly.
        let start = Instant::now();
        drop(remote);
        assert!(start.elapsed() < Duration::from_secs(5), "{name}");
    }
}

/// `nbdkit memory` on a Unix socket; killed when dropped.
struct Nbdkit {
    child: Child,
    socket_path: PathBuf,
}

impl Nbdkit {
    fn start(socket_path: PathBuf, size: &str) -> Option<Nbdkit> {
        if !tool_available("nbdkit") {
            eprintln!("skipping: nbdkit is not installed");
            return None;
        }
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(&socket_path)
            .args(["memory", size])
            .stdout(Stdio::null())
            .spawn()
            .expect("nbdkit starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket_path.exists() {
            assert!(
                Instant::now() < deadline,
                "nbdkit did not create its socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(Nbdkit { child, socket_path })
    }

    fn uri(&self) -> NbdUri {
        NbdUri {
            transport: Transport::Unix {
                socket_path: self.socket_path.clone(),
            },
            export_name: String::new(),
            tls: false,
        }
    }

    fn kill(&mut self) {
        // Our own child, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn round_trip_against_nbdkit_memory() {
    let scratch = ScratchDir::new();
    let Some(nbdkit) = Nbdkit::start(scratch.file("nbdkit.sock"), "8M") else {
        return;
    };
    for (_, driver) in drivers() {
        let remote = RemoteMember::connect(&nbdkit.uri()).unwrap();
        assert_eq!(remote.size_bytes(), DISK_BYTES as u64);
        let mut event_loop = Loop::new(driver);
        let (mut model, _) = round_trip(&remote, &mut event_loop, 200);
        zero_some(&remote, &mut event_loop, &mut model);
    }
}

#[test]
fn a_killed_nbdkit_gives_device_gone_not_a_hang() {
    let scratch = ScratchDir::new();
    for (name, driver) in drivers() {
        let Some(mut nbdkit) = Nbdkit::start(scratch.file(&format!("{name}.sock")), "64M") else {
            return;
        };
        let remote = RemoteMember::connect(&nbdkit.uri()).unwrap();
        let mut event_loop = Loop::new(driver);
        keep_busy_then_cut(&remote, &mut event_loop, 32, || nbdkit.kill());
        assert!(remote.wake_fd().as_raw_fd() >= 0);
    }
}
