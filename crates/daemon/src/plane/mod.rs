//! The data plane: one thread with one event loop that owns the drives, the engines of the
//! drive groups and the NBD connections. Everything else talks to it through `PlaneHandle::call`,
//! which runs a closure on the loop thread between events, so the plane needs no locks.

mod admin;
mod compute;
mod group;
mod md_import;
mod nbd;
mod peer;
mod splice;
mod thin;
mod tls;
mod ublk;
mod views;

use crate::ServeOptions;
use crate::devices::Device;
use crate::events::EventLog;
use crate::log;
use crate::state::StateDir;
use group::Group;
use nbd::{Connection, Listener};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tessera_io::{AnyDriver, Completion, Driver, EventFd};
use tessera_raid::engine::{CommandId, MemberCommand};
use tessera_raid::superblock::Uuid;

pub use admin::{AdminError, NewGroup, NewThin};
pub(crate) use ublk::{export as export_ublk, restore as restore_ublk, unexport as unexport_ublk};

/// A closure the control plane runs on the loop thread.
pub type Call = Box<dyn FnOnce(&mut DataPlane) + Send>;

/// How the control plane reaches the data plane.
#[derive(Clone)]
pub struct PlaneHandle {
    sender: mpsc::Sender<Call>,
    wake: Arc<EventFd>,
}

impl PlaneHandle {
    /// Runs `work` on the data plane and returns its result; `None` if the data plane is gone
    /// (shutting down).
    pub fn call<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut DataPlane) -> R + Send + 'static,
    ) -> Option<R> {
        let (reply, answer) = mpsc::sync_channel(1);
        let call: Call = Box::new(move |plane| {
            let _ = reply.send(work(plane));
        });
        self.sender.send(call).ok()?;
        self.wake.signal();
        answer.recv().ok()
    }

    /// Runs `work` on the data plane without waiting for it (dropped if the plane is gone).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub fn post(&self, work: impl FnOnce(&mut DataPlane) + Send + 'static) {
        if self.sender.send(Box::new(work)).is_ok() {
            self.wake.signal();
        }
    }
}

/// What a driver completion belongs to. `Ublk` is a command of a ublk queue (its key in
/// `ublk::UblkExports::queues`) for one of its tags.
#[derive(Clone, Copy, Debug)]
enum Token {
    Member { group: u32, command: CommandId },
    // A member's zero operation (`fallocate`), written instead if the member refuses it.
    Zeroes { group: u32, command: MemberCommand },
    RemoteWake { drive: u32 },
    Accept { listener: usize },
    Recv { connection: u64 },
    Send { connection: u64 },
    // A spliced reply met a full socket, which has room now.
    Writable { connection: u64 },
    Ublk { queue: u64, tag: u16 },
    Calls,
    Signal,
}

/// One physical drive the daemon manages.
pub(crate) struct Drive {
    pub id: u32,
    pub path: String,
    pub device: Option<Device>,
    /// Why the device could not be opened, if it could not.
    pub open_error: Option<String>,
    pub member_uuid: Option<Uuid>,
    pub spare: bool,
    pub spare_for: Option<u32>,
    /// The group and member index it serves, if any.
    pub group: Option<(u32, usize)>,
    /// A read of its superblock found Tessera metadata that cannot be trusted.
    pub damaged: Option<String>,
}

pub struct DataPlane {
    pub(crate) options: ServeOptions,
    pub(crate) parity: Arc<tessera_parity::Parity>,
    driver: AnyDriver,
    pub(crate) driver_report: (String, Option<String>),
    tokens: tokens::Tokens<Token>,
    pub(crate) drives: BTreeMap<u32, Drive>,
    pub(crate) groups: BTreeMap<u32, Group>,
    connections: tokens::Tokens<Connection>,
    listeners: Vec<Listener>,
    /// Engine request id (a key of this table) -> whom it answers. Requests to thin drives'
    /// stores take their ids from here too.
    requests: tokens::Tokens<Requester>,
    /// The stores of thin virtual drives, by drive name.
    pub(crate) thin: BTreeMap<String, thin::ThinDrive>,
    /// Virtual drives exported as ublk block devices.
    ublk: ublk::UblkExports,
    calls: mpsc::Receiver<Call>,
    wake: Arc<EventFd>,
    signal_fd: Option<OwnedFd>,
    pub(crate) events: EventLog,
    pub(crate) state: StateDir,
    pub(crate) started: Instant,
    stopping: bool,
    /// Member completions not yet handed to their engines: those of in-memory members, done
    /// at once, and those the driver reaped. `process_engines` gives each group its run of
    /// them in one call, so that an engine moves on once per batch, not once per completion.
    immediate: Vec<(
        u32,
        CommandId,
        Result<(), tessera_raid::engine::MemberError>,
    )>,
    /// Host requests for thick drives not yet handed to their engines, as `immediate` is
    /// for completions: the requests one read of a socket or one ublk fetch brings go to an
    /// engine in one call.
    submissions: Vec<(u32, tessera_raid::engine::HostRequest)>,
    completions: Vec<Completion>,
    /// Completions taken between waits (`Driver::take_ready`), kept for their capacity.
    ready_completions: Vec<Completion>,
    /// Reply header buffers whose sends finished, kept for the next replies so that
    /// answering a request allocates nothing once the plane is warm.
    spare_bytes: tessera_buffer::SpareVecs,
    /// Group ids of the current `process_engines` pass, kept between passes for the same
    /// reason.
    group_ids: Vec<u32>,
    /// Connection keys of the current `flush_connections` pass, likewise.
    connection_keys: Vec<u64>,
    /// Thin drive names of the current `pump_thin` pass, likewise.
    thin_names: Vec<Arc<str>>,
    /// When each group's last scrub ended.
    pub(crate) scrub_finished_unix_ms: BTreeMap<u32, u64>,
    /// Host I/O counters per virtual drive (by name), for `/metrics`.
    pub(crate) vd_io: BTreeMap<String, VdIo>,
    /// Whether engines hand full-stripe parity work out to the parity worker.
    pub(crate) offload_parity: bool,
    /// NBD connections closed at once because `nbd::MAX_CONNECTIONS` were open.
    pub(crate) refused_connections: u64,
    /// NBD clients disconnected for not finishing the handshake in time.
    pub(crate) handshake_timeouts: u64,
    /// When handshakes were last checked for their deadline.
    last_handshake_sweep: Instant,
    /// Pipes of host reads spliced from page-cache members (`splice.rs`).
    pub(crate) splicing: splice::Splicing,
    /// When the loop last woke: the one clock reading of a pass, which stamps the requests
    /// that arrive and the answers that leave in it (a request's latency is counted from the
    /// pass that read it to the pass that answered it), and drives the engines' timers.
    /// Reading the clock per request or per step cost a few percent of the plane's CPU.
    pub(crate) woke: Instant,
    /// Degraded groups whose engine had no buffers to take a hot spare; tried again each
    /// second until one is taken or none is needed.
    pub(crate) spare_retry: std::collections::BTreeSet<u32>,
    /// The TLS server configuration, when NBD over TLS is offered.
    tls: Option<Arc<rustls::ServerConfig>>,
    #[cfg(feature = "gpu")]
    pub(crate) parity_worker: Option<crate::compute::ParityWorker>,
    /// Handed-out parity work gathered in this pass of the loop.
    #[cfg(feature = "gpu")]
    compute_batch: Vec<crate::compute::RawJob>,
}

/// Whom an engine request (or a thin store's host request) answers.
pub(crate) enum Requester {
    /// A request of an NBD connection.
    Host(nbd::HostRequest),
    /// A request of a ublk device.
    Ublk(ublk::UblkRequest),
    /// A lower command of a thin drive's store.
    Thin {
        vd: Arc<str>,
        lower_id: u64,
        /// For reads, the length asked for (the engine's buffer may be larger).
        read_bytes: usize,
    },
}

/// Host reads and writes answered for one virtual drive since the daemon started.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct VdIo {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Sum of the times from submission to the engine to its answer, in microseconds.
    pub read_latency_us: u64,
    pub write_latency_us: u64,
}

/// Which counters of [`VdIo`] an answered request adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VdIoKind {
    Read,
    Write,
}

/// Adds an answered read or write of `vd` to its counters, whichever front end (NBD, ublk)
/// answered it.
pub(crate) fn count_vd_io(
    vd_io: &mut BTreeMap<String, VdIo>,
    vd: &str,
    kind: VdIoKind,
    bytes: u64,
    latency: Duration,
) {
    let latency_us = latency.as_micros() as u64;
    // The drive's name is cloned only the first time it answers.
    let counters = match vd_io.get_mut(vd) {
        Some(counters) => counters,
        None => vd_io.entry(vd.to_string()).or_default(),
    };
    match kind {
        VdIoKind::Read => {
            counters.reads += 1;
            counters.read_bytes += bytes;
            counters.read_latency_us += latency_us;
        }
        VdIoKind::Write => {
            counters.writes += 1;
            counters.write_bytes += bytes;
            counters.write_latency_us += latency_us;
        }
    }
}

pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

mod tokens {
    /// A table of live entries keyed by a u64 that is never reused while the entry lives.
    pub struct Tokens<T> {
        entries: Vec<(u64, Option<T>)>,
        free: Vec<usize>,
        next_generation: u64,
        live: usize,
    }

    impl<T> Tokens<T> {
        pub fn new() -> Tokens<T> {
            Tokens {
                entries: Vec::new(),
                free: Vec::new(),
                next_generation: 1,
                live: 0,
            }
        }

        pub fn insert(&mut self, value: T) -> u64 {
            let generation = self.next_generation;
            self.next_generation += 1;
            let index = match self.free.pop() {
                Some(index) => index,
                None => {
                    self.entries.push((0, None));
                    self.entries.len() - 1
                }
            };
            assert!(index < 1 << 24, "token table full");
            self.entries[index] = (generation, Some(value));
            self.live += 1;
            (generation << 24) | index as u64
        }

        fn locate(&self, key: u64) -> Option<usize> {
            let index = (key & 0xff_ffff) as usize;
            match self.entries.get(index) {
                Some((generation, _)) if *generation == key >> 24 => Some(index),
                _ => None,
            }
        }

        pub fn get(&self, key: u64) -> Option<&T> {
            self.locate(key)
                .and_then(|index| self.entries[index].1.as_ref())
        }

        pub fn get_mut(&mut self, key: u64) -> Option<&mut T> {
            let index = self.locate(key)?;
            self.entries[index].1.as_mut()
        }

        pub fn remove(&mut self, key: u64) -> Option<T> {
            let index = self.locate(key)?;
            let value = self.entries[index].1.take()?;
            self.entries[index].0 = 0;
            self.free.push(index);
            self.live -= 1;
            Some(value)
        }

        /// Takes a value out, keeping its key reserved until `put_back`.
        pub fn take(&mut self, key: u64) -> T {
            let index = self.locate(key).expect("live key");
            self.entries[index].1.take().expect("value present")
        }

        pub fn put_back(&mut self, key: u64, value: T) {
            let index = self.locate(key).expect("reserved key");
            assert!(self.entries[index].1.is_none());
            self.entries[index].1 = Some(value);
        }

        pub fn keys(&self) -> Vec<u64> {
            let mut keys = Vec::new();
            self.keys_into(&mut keys);
            keys
        }

        /// The keys of every live entry, into `keys` (cleared first): for loops that run
        /// on every pass of the plane and should not allocate.
        pub fn keys_into(&self, keys: &mut Vec<u64>) {
            keys.clear();
            keys.extend(
                self.entries
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, value))| value.is_some())
                    .map(|(index, (generation, _))| (generation << 24) | index as u64),
            );
        }

        pub fn len(&self) -> usize {
            self.live
        }
    }
}

impl DataPlane {
    /// Sets up the data plane: the driver, the NBD listeners, and every drive and group found
    /// through the state directory.
    pub fn new(
        options: ServeOptions,
        parity: Arc<tessera_parity::Parity>,
        signal_fd: Option<OwnedFd>,
    ) -> Result<(DataPlane, PlaneHandle), String> {
        let mut opened = tessera_io::open_driver(tessera_io::DriverChoice::Auto)
            .map_err(|e| format!("cannot start I/O: {e}"))?;
        let driver_report = (
            opened.driver.kind().to_string(),
            opened.fallback_reason.clone(),
        );
        if let Some(reason) = &opened.fallback_reason {
            log!("{reason}; using poll(2) and synchronous file I/O instead");
        }
        opened
            .driver
            .set_busy_poll(Duration::from_micros(u64::from(options.busy_poll_us)));
        let state = StateDir::open(&options.state_dir)?;
        let tls = match (&options.tls_cert, &options.tls_key) {
            (Some(cert), Some(key)) => Some(tls::server_config(
                cert,
                key,
                options.tls_client_ca.as_deref(),
            )?),
            (None, None) => None,
            _ => return Err("TLS needs both a certificate and its key".into()),
        };
        let wake = Arc::new(EventFd::new().map_err(|e| format!("cannot create an eventfd: {e}"))?);
        let (sender, calls) = mpsc::channel();
        let mut listeners = vec![Listener::unix(&options.nbd_socket)?];
        if let Some(address) = &options.nbd_listen {
            listeners.push(Listener::tcp(address)?);
        }
        let mut events = EventLog::new(4096);
        if let Some(command) = &options.event_hook {
            let minimum = crate::hook::parse_severity(&options.event_hook_severity)?;
            events.set_hook(crate::hook::EventHook::start(command.clone(), minimum)?);
        }
        let mut plane = DataPlane {
            options,
            parity,
            driver: opened.driver,
            driver_report,
            tokens: tokens::Tokens::new(),
            drives: BTreeMap::new(),
            groups: BTreeMap::new(),
            connections: tokens::Tokens::new(),
            listeners,
            requests: tokens::Tokens::new(),
            thin: BTreeMap::new(),
            ublk: ublk::UblkExports::default(),
            calls,
            wake: wake.clone(),
            signal_fd,
            events,
            state,
            started: Instant::now(),
            stopping: false,
            immediate: Vec::new(),
            submissions: Vec::new(),
            spare_bytes: tessera_buffer::SpareVecs::new(
                nbd::SPARE_BYTES_MAX,
                nbd::SPARE_BYTES_MAX_CAPACITY,
            ),
            group_ids: Vec::new(),
            connection_keys: Vec::new(),
            thin_names: Vec::new(),
            completions: Vec::new(),
            ready_completions: Vec::new(),
            scrub_finished_unix_ms: BTreeMap::new(),
            vd_io: BTreeMap::new(),
            offload_parity: false,
            refused_connections: 0,
            handshake_timeouts: 0,
            last_handshake_sweep: Instant::now(),
            woke: Instant::now(),
            splicing: splice::Splicing::default(),
            spare_retry: std::collections::BTreeSet::new(),
            tls,
            #[cfg(feature = "gpu")]
            parity_worker: None,
            #[cfg(feature = "gpu")]
            compute_batch: Vec::new(),
        };
        plane.load_drives()?;
        plane.assemble_groups();
        plane.start_thin_drives();
        let handle = PlaneHandle { sender, wake };
        plane.start_parity_worker(&handle)?;
        Ok((plane, handle))
    }

    /// Starts the parity worker unless parity stays on the CPU kernels.
    fn start_parity_worker(&mut self, handle: &PlaneHandle) -> Result<(), String> {
        #[cfg(feature = "gpu")]
        {
            let mode: tessera_parity_gpu::EngineMode = self.options.parity_engine.parse()?;
            if mode != tessera_parity_gpu::EngineMode::Cpu {
                self.parity_worker = Some(crate::compute::ParityWorker::start(
                    mode,
                    self.parity.clone(),
                    handle.clone(),
                )?);
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = handle;
            if self.options.parity_engine == "gpu" {
                return Err(
                    "--parity-engine gpu: this build has no GPU support (feature `gpu`)".into(),
                );
            }
        }
        Ok(())
    }

    /// Microseconds from the plane's start to `at`: the engines' clock.
    fn us_since_start(&self, at: Instant) -> u64 {
        at.duration_since(self.started).as_micros() as u64
    }

    /// Runs until a stop signal finishes an orderly shutdown.
    pub fn run(mut self) {
        self.arm_fixed_waits();
        loop {
            self.process_engines();
            if self.stopping && self.shutdown_done() {
                log!("all drive groups stopped cleanly");
                break;
            }
            self.commit_ublk_answers();
            let timeout = self.next_timeout();
            self.completions.clear();
            let mut completions = std::mem::take(&mut self.completions);
            if let Err(error) = self.driver.wait(&mut completions, timeout) {
                log!("event loop wait failed: {error}");
            }
            self.woke = Instant::now();
            let now = self.us_since_start(self.woke);
            for group in self.groups.values_mut() {
                group.engine.advance_clock(now);
            }
            for completion in &completions {
                self.dispatch(*completion);
            }
            self.completions = completions;
            for group in self.groups.values_mut() {
                group.engine.tick(now);
            }
            self.tick_thin(now);
            // Engines serve ublk devices until they are gone (their removal flushes).
            if self.stopping && self.ublk_idle() {
                // Requests that came in before the stop are served, as they would have been
                // had they reached their engines one at a time.
                self.hand_over_submissions();
                self.stop_groups_without_thin();
            }
            // The loop wakes at least once a second, so deadlines are kept to about a second.
            if self.woke.duration_since(self.last_handshake_sweep) >= Duration::from_secs(1) {
                self.last_handshake_sweep = self.woke;
                self.expire_handshakes();
                for group in self.spare_retry.clone() {
                    self.take_spare(group);
                }
            }
        }
        for listener in &self.listeners {
            listener.remove();
        }
    }

    fn arm_fixed_waits(&mut self) {
        let calls = self.tokens.insert(Token::Calls);
        self.driver
            .submit_poll_readable(calls, self.wake.as_raw_fd());
        if let Some(fd) = &self.signal_fd {
            let token = self.tokens.insert(Token::Signal);
            self.driver.submit_poll_readable(token, fd.as_raw_fd());
        }
        for index in 0..self.listeners.len() {
            self.arm_accept(index);
        }
        let remote: Vec<(u32, RawFd)> = self
            .drives
            .values()
            .filter_map(|drive| Some((drive.id, group::remote_wake_fd(drive.device.as_ref()?)?)))
            .collect();
        for (drive, fd) in remote {
            self.arm_remote_wake(drive, fd);
        }
    }

    fn arm_accept(&mut self, listener: usize) {
        if self.stopping {
            return;
        }
        let token = self.tokens.insert(Token::Accept { listener });
        self.driver
            .submit_accept(token, self.listeners[listener].fd());
    }

    pub(crate) fn arm_remote_wake(&mut self, drive: u32, fd: RawFd) {
        let token = self.tokens.insert(Token::RemoteWake { drive });
        self.driver.submit_poll_readable(token, fd);
    }

    /// How long the loop may sleep: until the earliest engine timer, at most a second.
    fn next_timeout(&self) -> Option<Duration> {
        if !self.immediate.is_empty() || !self.submissions.is_empty() {
            return Some(Duration::ZERO);
        }
        let earliest = self
            .groups
            .values()
            .filter_map(|group| group.engine.next_deadline_us())
            .chain(self.thin_deadline_us())
            .min();
        // The pass's clock is older by however long the engines just ran, so a timer may fire
        // that much late: short when the loop is idle, and a busy loop wakes for completions.
        let now = self.us_since_start(self.woke);
        let wait_us = earliest.map_or(1_000_000, |deadline| {
            deadline.saturating_sub(now).min(1_000_000)
        });
        Some(Duration::from_micros(wait_us))
    }

    fn dispatch(&mut self, completion: Completion) {
        let Some(token) = self.tokens.remove(completion.token) else {
            return;
        };
        match token {
            Token::Member { group, command } => self.member_done(group, command, completion.result),
            Token::Zeroes { group, command } => self.zeroes_done(group, command, completion.result),
            Token::RemoteWake { drive } => self.remote_wake(drive),
            Token::Accept { listener } => {
                if completion.result >= 0 {
                    self.accept_connection(listener, completion.result);
                } else if !self.stopping {
                    log!(
                        "accept failed: {}",
                        tessera_io::errno_text(-completion.result)
                    );
                }
                self.arm_accept(listener);
            }
            Token::Recv { connection } => self.recv_done(connection, completion.result),
            Token::Send { connection } => self.send_done(connection, completion.result),
            Token::Writable { connection } => self.writable(connection, completion.result),
            Token::Ublk { queue, tag } => self.ublk_command_done(queue, tag, completion.result),
            Token::Calls => {
                self.wake.drain();
                while let Ok(call) = self.calls.try_recv() {
                    call(self);
                }
                let token = self.tokens.insert(Token::Calls);
                self.driver
                    .submit_poll_readable(token, self.wake.as_raw_fd());
            }
            Token::Signal => {
                log!("stop requested: finishing requests in flight and stopping drive groups");
                self.begin_shutdown();
            }
        }
    }

    fn begin_shutdown(&mut self) {
        self.stopping = true;
        for key in self.connections.keys() {
            self.close_connection(key, "daemon stopping");
        }
        // ublk devices are removed first, their last writes served; then the rest stops.
        self.remove_ublk_devices();
        if !self.ublk_idle() {
            return;
        }
        // Thin drives write their last checkpoint through their group's engine first.
        self.shutdown_thin();
        self.stop_groups_without_thin();
    }

    /// Stops the engines whose thin drives have all stopped.
    fn stop_groups_without_thin(&mut self) {
        let ids: Vec<u32> = self.groups.keys().copied().collect();
        for id in ids {
            if self.thin_stopped(id) {
                self.groups.get_mut(&id).expect("listed").engine.stop();
            }
        }
    }

    fn shutdown_done(&self) -> bool {
        self.connections.len() == 0
            && self.ublk_idle()
            && self.thin.values().all(|drive| drive.store.is_stopped())
            && self.groups.values().all(|group| {
                group.computing == 0
                    && (group.engine.is_stopped()
                        || group.engine.state() == tessera_raid::engine::GroupState::Failed)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_requests_add_up_per_drive_and_direction() {
        let mut vd_io = BTreeMap::new();
        for (vd, kind, bytes, latency_us) in [
            ("a", VdIoKind::Read, 4096, 10),
            ("a", VdIoKind::Read, 512, 7),
            ("a", VdIoKind::Write, 8192, 30),
            ("b", VdIoKind::Write, 1024, 2000),
        ] {
            count_vd_io(
                &mut vd_io,
                vd,
                kind,
                bytes,
                Duration::from_micros(latency_us),
            );
        }
        let a = vd_io["a"];
        assert_eq!((a.reads, a.read_bytes, a.read_latency_us), (2, 4608, 17));
        assert_eq!((a.writes, a.write_bytes, a.write_latency_us), (1, 8192, 30));
        let b = vd_io["b"];
        assert_eq!((b.reads, b.read_bytes, b.read_latency_us), (0, 0, 0));
        assert_eq!(
            (b.writes, b.write_bytes, b.write_latency_us),
            (1, 1024, 2000)
        );
        assert_eq!(vd_io.len(), 2);
    }
}
