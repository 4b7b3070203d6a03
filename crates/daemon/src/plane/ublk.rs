//! Virtual drives exported as ublk block devices (`/dev/ublkbN`).
//!
//! The device's life is `tessera-ublk`'s; its queues are served here, on the data plane's own
//! io_uring: the plane submits each queue's fetches as `URING_CMD`s, a completed fetch is a
//! request, submitted to the drive's engine (thick drives, in the drive's extent) or thin
//! store exactly as NBD requests are, and its answer goes back as a commit-and-fetch
//! submitted before the loop next waits. No other thread is woken on the way. Write payloads
//! are copied from the tag's buffer into an arena buffer (the engine writes members from the
//! arena); read data is copied from the engine's arena buffer into the tag's buffer.
//!
//! Creating and removing a device block on the driver (START_DEV reads the partition table,
//! STOP_DEV flushes the page cache through the queues, DEL_DEV waits for the queues to be
//! dropped), so they run on the API thread (or, at shutdown, a thread of their own) while the
//! data plane keeps serving the device's requests.

use super::{DataPlane, PlaneHandle, Requester, Token, VdIoKind, count_vd_io};
use crate::log;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tessera_api::model::{ApiError, ExportUblk, UblkView};
use tessera_io::{Driver, DriverKind, Operation};
use tessera_raid::engine::{HostError, HostOp, HostRequest as EngineRequest};
use tessera_ublk::{
    BlockOp, BlockRequest, Device, DeviceConfig, QueueCommand, ServedQueue, UblkError,
};

/// Requests in flight per queue unless asked otherwise.
pub(crate) const DEFAULT_QUEUE_DEPTH: u16 = 64;
/// The most queues chosen by default (one per CPU up to this).
const DEFAULT_QUEUES_MAX: u16 = 4;
/// Marks ublk devices as Tessera's ("TESSERA\0" as a little-endian number), so that a daemon
/// can delete the ones a crashed daemon left behind.
const DEVICE_OWNER: u64 = u64::from_le_bytes(*b"TESSERA\0");
/// Held while a device is set up (see `export`).
static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where an export is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UblkState {
    /// The device is being created (its requests are served already).
    Starting,
    Live,
    /// The device is being stopped and deleted (its requests are served until it is gone).
    Stopping,
}

/// A virtual drive's ublk export.
pub(crate) struct UblkExport {
    /// Tells this export from an earlier one of the same drive.
    id: u64,
    group: u32,
    vd_offset_bytes: u64,
    size_bytes: u64,
    thin: bool,
    /// Writes are refused (EROFS); follows the drive's access (`vd set --read-only`).
    read_only: bool,
    queues: u16,
    queue_depth: u16,
    state: UblkState,
    /// The device while it is live (taken out to be removed).
    device: Option<Device>,
    device_id: Option<u32>,
    /// Requests waiting for arena space for their payload, in arrival order.
    waiting: VecDeque<BlockRequest>,
    /// To post the end of a removal started on the data plane (shutdown).
    plane: PlaneHandle,
}

/// A queue of an export's device, served by the data plane.
struct PlaneQueue {
    /// Shared with each request the queue fetches, so a request costs no copy of the name.
    vd: Arc<str>,
    export: u64,
    queue: ServedQueue,
}

/// The ublk exports of the data plane, by virtual drive name.
#[derive(Default)]
pub(crate) struct UblkExports {
    exports: BTreeMap<String, UblkExport>,
    next_id: u64,
    /// The queues the plane serves, by key (kept until every tag is finished, since their
    /// commands name their buffers; dropping one releases its share of `/dev/ublkcN`).
    queues: BTreeMap<u64, PlaneQueue>,
    next_queue: u64,
    /// Commit-and-fetch commands gathered in one pass (kept for its allocation).
    commits: Vec<QueueCommand>,
    /// The exports made again when the daemon starts, as `vd export --ublk` asked for them:
    /// kept in the state directory from the export until `vd unexport --ublk` or the drive's
    /// deletion (a daemon that stops removes its devices but keeps this).
    pub(super) wanted: BTreeMap<String, ExportUblk>,
}

/// A request of a ublk device submitted to an engine or a thin store.
pub(crate) struct UblkRequest {
    vd: Arc<str>,
    request: BlockRequest,
    submitted: Instant,
}

fn ublk_api_error(error: UblkError) -> ApiError {
    match error {
        UblkError::NotAvailable | UblkError::Server(_) => ApiError::unavailable(error.to_string()),
        UblkError::Invalid(message) => ApiError::invalid_argument(message),
        other => ApiError::internal(other.to_string()),
    }
}

fn stopping() -> ApiError {
    ApiError::unavailable("the daemon is stopping")
}

/// `vd export --ublk`: creates the drive's ublk device; returns once `/dev/ublkbN` is live.
pub(crate) fn export(plane: &PlaneHandle, name: &str, body: ExportUblk) -> Result<(), ApiError> {
    let queues = body.queues.unwrap_or_else(default_queues);
    let queue_depth = body.queue_depth.unwrap_or(DEFAULT_QUEUE_DEPTH);
    if !tessera_ublk::available() {
        return Err(ublk_api_error(UblkError::NotAvailable));
    }
    // One device is set up at a time, so none of ours is mistaken for an abandoned one.
    let _creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    match tessera_ublk::remove_abandoned(DEVICE_OWNER) {
        Ok(removed) if !removed.is_empty() => {
            log!("deleted ublk devices left by a daemon that died: {removed:?}");
        }
        Ok(_) => {}
        Err(error) => log!("looking for abandoned ublk devices: {error}"),
    }
    let owned = name.to_string();
    let handle = plane.clone();
    let (id, size_bytes, read_only) = plane
        .call(move |plane| plane.prepare_ublk(&owned, queues, queue_depth, handle))
        .ok_or_else(stopping)??;
    let config = DeviceConfig {
        queues,
        queue_depth,
        size_bytes,
        read_only,
        owner: DEVICE_OWNER,
    };
    let owned = name.to_string();
    let serve = |queues: Vec<ServedQueue>| {
        let owned = name.to_string();
        plane
            .call(move |plane| plane.serve_ublk_queues(&owned, id, queues))
            .unwrap_or_else(|| Err(UblkError::Server("the daemon is stopping".into())))
    };
    match Device::create(config, serve) {
        Ok(device) => {
            let path = device.block_path();
            let refused = plane.call(move |plane| plane.ublk_started(&owned, id, device));
            if let Some(Some(mut device)) = refused {
                // The drive was deleted, or the daemon began stopping, meanwhile.
                let _ = device.remove();
                return Err(ApiError::conflict(format!(
                    "virtual drive {name} went away while {path} was starting"
                )));
            }
            let owned = name.to_string();
            plane.call(move |plane| plane.remember_ublk_export(&owned, body));
            Ok(())
        }
        Err(error) => {
            plane.call(move |plane| plane.ublk_forget(&owned, id));
            Err(ublk_api_error(error))
        }
    }
}

/// Exports again, on a thread of its own, the drives that were exported over ublk when the
/// daemon last stopped; what cannot be exported is logged and raised as a warning event, and
/// stays wanted (a missing member or module may be back at the next start).
pub(crate) fn restore(plane: &PlaneHandle) {
    let Some(wanted) = plane.call(|plane| plane.ublk.wanted.clone()) else {
        return;
    };
    if wanted.is_empty() {
        return;
    }
    let plane = plane.clone();
    let spawned = std::thread::Builder::new()
        .name("ublk-restore".into())
        .spawn(move || {
            for (name, body) in wanted {
                if let Err(error) = export(&plane, &name, body) {
                    let message = format!(
                        "virtual drive {name}: its ublk export was not made again: {}",
                        error.message
                    );
                    log!("{message}");
                    plane.post(move |plane| {
                        plane
                            .events
                            .push_warning("ublk_not_restored", message, None, None)
                    });
                }
            }
        });
    if let Err(error) = spawned {
        log!("cannot start a thread to restore ublk exports: {error}");
    }
}

/// `vd unexport --ublk`: stops and deletes the drive's ublk device; returns once it is gone.
pub(crate) fn unexport(plane: &PlaneHandle, name: &str) -> Result<(), ApiError> {
    let owned = name.to_string();
    let (id, mut device) = plane
        .call(move |plane| plane.begin_ublk_removal(&owned))
        .ok_or_else(stopping)??;
    let result = device.remove();
    let owned = name.to_string();
    plane.call(move |plane| plane.ublk_removed(&owned, id));
    result.map_err(ublk_api_error)
}

fn default_queues() -> u16 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus.min(usize::from(DEFAULT_QUEUES_MAX))) as u16
}

fn errno_of(error: HostError) -> i32 {
    match error {
        HostError::OutOfRange => libc::EINVAL,
        HostError::Io => libc::EIO,
        HostError::NotFast => libc::EOPNOTSUPP,
        HostError::ShuttingDown => libc::ESHUTDOWN,
    }
}

fn thin_errno_of(error: tessera_thin::ThinError) -> i32 {
    match error {
        tessera_thin::ThinError::OutOfRange => libc::EINVAL,
        tessera_thin::ThinError::Io => libc::EIO,
        tessera_thin::ThinError::NoSpace => libc::ENOSPC,
        tessera_thin::ThinError::Unavailable => libc::ESHUTDOWN,
    }
}

impl DataPlane {
    /// Registers a starting export (it serves requests from now on). Returns its id, the
    /// drive's size and whether it is read-only.
    fn prepare_ublk(
        &mut self,
        name: &str,
        queues: u16,
        queue_depth: u16,
        plane: PlaneHandle,
    ) -> Result<(u64, u64, bool), ApiError> {
        if self.stopping {
            return Err(stopping());
        }
        if self.driver.kind() != DriverKind::Uring {
            let reason = self.driver_report.1.clone().unwrap_or_default();
            return Err(ApiError::unavailable(format!(
                "ublk needs the io_uring data plane, and this daemon runs on poll(2) ({reason})"
            )));
        }
        let (group, vd) = self
            .find_vd(name)
            .ok_or_else(|| ApiError::not_found(format!("no virtual drive {name}")))?;
        if let Some(export) = self.ublk.exports.get(name) {
            let device = export
                .device_id
                .map(|id| format!(" as /dev/ublkb{id}"))
                .unwrap_or_default();
            return Err(ApiError::conflict(format!(
                "virtual drive {name} is exported over ublk already{device}"
            )));
        }
        DeviceConfig {
            queues,
            queue_depth,
            size_bytes: vd.host_bytes(),
            read_only: vd.access.read_only,
            owner: DEVICE_OWNER,
        }
        .validate()
        .map_err(ublk_api_error)?;
        let (group, vd_offset_bytes, size_bytes, thin, read_only) = (
            group.id,
            vd.offset_bytes,
            vd.host_bytes(),
            vd.thin.is_some(),
            vd.access.read_only,
        );
        self.ublk.next_id += 1;
        let id = self.ublk.next_id;
        let export = UblkExport {
            id,
            group,
            vd_offset_bytes,
            size_bytes,
            thin,
            read_only,
            queues,
            queue_depth,
            state: UblkState::Starting,
            device: None,
            device_id: None,
            waiting: VecDeque::new(),
            plane,
        };
        self.ublk.exports.insert(name.to_string(), export);
        Ok((id, size_bytes, read_only))
    }

    /// The device of a starting export is live; gives it back if the export is gone (or the
    /// daemon is stopping), for the caller to remove.
    fn ublk_started(&mut self, name: &str, id: u64, device: Device) -> Option<Device> {
        let stopping = self.stopping;
        let Some(export) = self.ublk.exports.get_mut(name).filter(|e| e.id == id) else {
            return Some(device);
        };
        export.device_id = Some(device.id());
        if stopping {
            export.state = UblkState::Stopping;
            self.ublk_removed(name, id);
            return Some(device);
        }
        let path = device.block_path();
        export.queues = device.queues();
        export.device = Some(device);
        export.state = UblkState::Live;
        self.events.push_info(
            "vd_exported",
            format!("virtual drive {name} exported as {path}"),
            Some(export.group),
            None,
        );
        log!("virtual drive {name} exported as {path}");
        None
    }

    /// A starting export failed.
    fn ublk_forget(&mut self, name: &str, id: u64) {
        if self.ublk.exports.get(name).is_some_and(|e| e.id == id) {
            let export = self.ublk.exports.remove(name).expect("present");
            for request in export.waiting {
                request.complete(Err(libc::ENODEV));
            }
            self.ublk_maybe_finish_shutdown();
        }
    }

    /// Takes a live export's device out to be removed (its requests are served until then).
    fn begin_ublk_removal(&mut self, name: &str) -> Result<(u64, Device), ApiError> {
        let export = self.ublk.exports.get_mut(name).ok_or_else(|| {
            ApiError::not_found(format!("virtual drive {name} has no ublk export"))
        })?;
        match export.state {
            UblkState::Live => {}
            UblkState::Starting => {
                return Err(ApiError::conflict(format!(
                    "the ublk export of {name} is still starting"
                )));
            }
            UblkState::Stopping => {
                return Err(ApiError::conflict(format!(
                    "the ublk export of {name} is being removed already"
                )));
            }
        }
        export.state = UblkState::Stopping;
        let device = export.device.take().expect("a live export has its device");
        Ok((export.id, device))
    }

    /// A removed export's device is gone.
    fn ublk_removed(&mut self, name: &str, id: u64) {
        if self.ublk.exports.get(name).is_none_or(|e| e.id != id) {
            return;
        }
        let export = self.ublk.exports.remove(name).expect("present");
        for request in export.waiting {
            request.complete(Err(libc::ENODEV));
        }
        if let Some(device_id) = export.device_id {
            self.events.push_info(
                "vd_unexported",
                format!("virtual drive {name}: /dev/ublkb{device_id} removed"),
                Some(export.group),
                None,
            );
            log!("virtual drive {name}: /dev/ublkb{device_id} removed");
        }
        self.ublk_maybe_finish_shutdown();
    }

    /// Removes every live ublk device on threads of their own (daemon shutdown); the data
    /// plane serves their last requests meanwhile.
    pub(super) fn remove_ublk_devices(&mut self) {
        let names: Vec<String> = self
            .ublk
            .exports
            .iter()
            .filter(|(_, export)| export.state == UblkState::Live)
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            let Ok((id, mut device)) = self.begin_ublk_removal(&name) else {
                continue;
            };
            let plane = self.ublk.exports[&name].plane.clone();
            let spawned = std::thread::Builder::new()
                .name("ublk-remove".into())
                .spawn(move || {
                    if let Err(error) = device.remove() {
                        log!("removing the ublk device of {name}: {error}");
                    }
                    plane.post(move |plane| plane.ublk_removed(&name, id));
                });
            if let Err(error) = spawned {
                log!("cannot start a thread to remove a ublk device: {error}");
            }
        }
    }

    /// Records a drive's export as wanted at the next start (saved at once; a failed save is
    /// logged: the device exists either way).
    pub(crate) fn remember_ublk_export(&mut self, name: &str, body: ExportUblk) {
        if self.ublk.wanted.get(name) == Some(&body) {
            return;
        }
        self.ublk.wanted.insert(name.to_string(), body);
        self.save_state_or_log();
    }

    /// The drive is no longer exported over ublk at start (unexported or deleted).
    pub(crate) fn forget_ublk_export(&mut self, name: &str) {
        if self.ublk.wanted.remove(name).is_some() {
            self.save_state_or_log();
        }
    }

    /// Whether every ublk export is gone (shutdown waits for it before stopping engines).
    pub(super) fn ublk_idle(&self) -> bool {
        self.ublk.exports.is_empty()
    }

    /// Once the last ublk device is gone during shutdown, thin drives and groups stop.
    fn ublk_maybe_finish_shutdown(&mut self) {
        if self.stopping && self.ublk_idle() {
            self.shutdown_thin();
            self.stop_groups_without_thin();
        }
    }

    /// The drive's access changed: its device follows `read_only` from the next request (the
    /// kernel still shows the device as it was created).
    pub(crate) fn ublk_access_changed(&mut self, name: &str) {
        let Some(read_only) = self.find_vd(name).map(|(_, vd)| vd.access.read_only) else {
            return;
        };
        if let Some(export) = self.ublk.exports.get_mut(name) {
            export.read_only = read_only;
        }
    }

    /// The ublk device of a virtual drive, for its view.
    pub(crate) fn ublk_view(&self, name: &str) -> Option<UblkView> {
        let export = self.ublk.exports.get(name)?;
        let device_id = export.device_id?;
        Some(UblkView {
            device: format!("/dev/ublkb{device_id}"),
            device_id,
            queues: export.queues,
            queue_depth: export.queue_depth,
            state: match export.state {
                UblkState::Starting => "starting",
                UblkState::Live => "live",
                UblkState::Stopping => "stopping",
            }
            .to_string(),
        })
    }

    /// The drives of group `dg` that have a ublk export.
    pub(crate) fn ublk_exported_in_group(&self, dg: u32) -> Vec<String> {
        self.ublk
            .exports
            .iter()
            .filter(|(_, export)| export.group == dg)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The drive's ublk device path, if it has one (for messages).
    pub(crate) fn ublk_device_of(&self, name: &str) -> Option<String> {
        self.ublk
            .exports
            .get(name)
            .map(|export| match export.device_id {
                Some(id) => format!("/dev/ublkb{id}"),
                None => "a ublk device (starting)".to_string(),
            })
    }

    /// Takes the queues of a starting export's device and submits every tag's first fetch
    /// from this thread, which becomes the queues' daemon (the driver takes their commands
    /// from it alone).
    fn serve_ublk_queues(
        &mut self,
        name: &str,
        id: u64,
        queues: Vec<ServedQueue>,
    ) -> Result<(), UblkError> {
        if self.stopping || self.ublk.exports.get(name).is_none_or(|e| e.id != id) {
            return Err(UblkError::Server(format!(
                "virtual drive {name} went away, or the daemon began stopping"
            )));
        }
        let vd: Arc<str> = Arc::from(name);
        for mut queue in queues {
            let key = self.ublk.next_queue;
            self.ublk.next_queue += 1;
            let fd = queue.char_device_fd();
            for command in queue.initial_fetches() {
                Self::submit_ublk_command(&mut self.tokens, &mut self.driver, key, fd, command);
            }
            self.ublk.queues.insert(
                key,
                PlaneQueue {
                    vd: Arc::clone(&vd),
                    export: id,
                    queue,
                },
            );
        }
        self.driver
            .flush_submissions()
            .map_err(|error| UblkError::Server(format!("submitting the fetches: {error}")))
    }

    /// Submits one command of queue `queue` (its key) on the plane's ring.
    fn submit_ublk_command(
        tokens: &mut super::tokens::Tokens<Token>,
        driver: &mut tessera_io::AnyDriver,
        queue: u64,
        fd: std::os::fd::RawFd,
        command: QueueCommand,
    ) {
        let token = tokens.insert(Token::Ublk {
            queue,
            tag: command.tag,
        });
        // SAFETY: the command names its tag's buffer in the queue's mapping, which the plane
        // keeps (in `ublk.queues`) until every command of the queue has completed; the driver,
        // dropped before the exports, cancels what is still in flight first. `fd` is the
        // queue's `/dev/ublkcN`, open as long as the queue is kept.
        unsafe {
            driver.submit(
                token,
                Operation::UringCmd {
                    fd,
                    cmd_op: command.cmd_op,
                    cmd: command.cmd,
                },
            )
        };
    }

    /// A command of a ublk queue completed: a fetched request goes to its drive; a queue
    /// whose tags have all finished (its device stopped) is dropped.
    pub(super) fn ublk_command_done(&mut self, queue: u64, tag: u16, result: i32) {
        let Some(entry) = self.ublk.queues.get_mut(&queue) else {
            return;
        };
        match entry.queue.completed(tag, result) {
            Some(request) => {
                let (vd, export) = (Arc::clone(&entry.vd), entry.export);
                self.ublk_request(&vd, export, request);
            }
            None => {
                if result != tessera_ublk::uapi::IO_RES_ABORT {
                    log!(
                        "virtual drive {}: the ublk driver refused a fetch of queue {} tag {tag}: {}",
                        entry.vd,
                        entry.queue.queue(),
                        tessera_io::errno_text(-result)
                    );
                }
                if entry.queue.is_finished() {
                    self.ublk.queues.remove(&queue);
                }
            }
        }
    }

    /// Submits the commits of every answer given since the last pass; the loop calls it just
    /// before it waits, so no answer waits for a later event.
    pub(super) fn commit_ublk_answers(&mut self) {
        let UblkExports {
            queues, commits, ..
        } = &mut self.ublk;
        for (&key, entry) in queues.iter_mut() {
            let fd = entry.queue.char_device_fd();
            entry.queue.take_commits(commits);
            for command in commits.drain(..) {
                Self::submit_ublk_command(&mut self.tokens, &mut self.driver, key, fd, command);
            }
        }
    }

    /// A request a queue fetched.
    fn ublk_request(&mut self, vd: &Arc<str>, export: u64, request: BlockRequest) {
        let Some(entry) = self.ublk.exports.get_mut(&**vd).filter(|e| e.id == export) else {
            request.complete(Err(libc::ENODEV));
            return;
        };
        if !entry.waiting.is_empty() {
            entry.waiting.push_back(request);
            return;
        }
        if let Some(request) = self.ublk_submit(vd, request) {
            let entry = self.ublk.exports.get_mut(&**vd).expect("looked up above");
            entry.waiting.push_back(request);
        }
    }

    /// Submits what waited for arena space, in order; true if anything went.
    pub(super) fn pump_ublk(&mut self) -> bool {
        let mut progressed = false;
        let names: Vec<Arc<str>> = self
            .ublk
            .exports
            .iter()
            .filter(|(_, export)| !export.waiting.is_empty())
            .map(|(name, _)| Arc::from(name.as_str()))
            .collect();
        for name in names {
            loop {
                let export = self.ublk.exports.get_mut(&*name).expect("listed");
                let Some(request) = export.waiting.pop_front() else {
                    break;
                };
                if let Some(request) = self.ublk_submit(&name, request) {
                    let export = self.ublk.exports.get_mut(&*name).expect("listed");
                    export.waiting.push_front(request);
                    break;
                }
                progressed = true;
            }
        }
        progressed
    }

    /// Submits one request to the drive's engine or thin store, or answers it here. Gives it
    /// back when a write finds no arena space (it waits for replies to free some).
    fn ublk_submit(&mut self, vd: &Arc<str>, request: BlockRequest) -> Option<BlockRequest> {
        let export = self.ublk.exports.get(&**vd).expect("caller looked it up");
        let len_bytes = u64::from(request.len_bytes);
        // A flush has no range (the block layer leaves its sector at -1).
        let in_range = request.op == BlockOp::Flush
            || request
                .offset_bytes
                .checked_add(len_bytes)
                .is_some_and(|end| end <= export.size_bytes);
        let carries_data = matches!(request.op, BlockOp::Read | BlockOp::Write { .. });
        if !in_range || (carries_data && request.data().len() as u64 != len_bytes) {
            request.complete(Err(libc::EINVAL));
            return None;
        }
        if let BlockOp::Unsupported(_) = request.op {
            request.complete(Err(libc::EOPNOTSUPP));
            return None;
        }
        let changes = !matches!(request.op, BlockOp::Read | BlockOp::Flush);
        if changes && export.read_only {
            request.complete(Err(libc::EROFS));
            return None;
        }
        if len_bytes == 0 && request.op != BlockOp::Flush {
            request.complete(Ok(()));
            return None;
        }
        if export.thin {
            self.ublk_submit_thin(vd, request);
            return None;
        }
        let group_id = export.group;
        let offset_bytes = export.vd_offset_bytes + request.offset_bytes;
        let Some(group) = self.groups.get_mut(&group_id) else {
            request.complete(Err(libc::ENODEV));
            return None;
        };
        let op = match request.op {
            BlockOp::Read => HostOp::Read {
                offset_bytes,
                len_bytes,
            },
            BlockOp::Write { fua } => {
                let Some(buffer) = group.engine.alloc_host_buffer(len_bytes as usize) else {
                    return Some(request);
                };
                group.engine.pool_mut().slice_mut(buffer)[..len_bytes as usize]
                    .copy_from_slice(request.data());
                HostOp::Write {
                    offset_bytes,
                    buffer,
                    fua,
                }
            }
            BlockOp::Flush => HostOp::Flush,
            BlockOp::Discard => HostOp::Trim {
                offset_bytes,
                len_bytes,
            },
            BlockOp::WriteZeroes { fua, unmap } => HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                may_deallocate: unmap,
                fast_only: false,
                fua,
            },
            BlockOp::Unsupported(_) => unreachable!("answered above"),
        };
        let id = self.requests.insert(Requester::Ublk(UblkRequest {
            vd: Arc::clone(vd),
            request,
            submitted: self.woke,
        }));
        self.submissions.push((group_id, EngineRequest { id, op }));
        None
    }

    fn ublk_submit_thin(&mut self, vd: &Arc<str>, request: BlockRequest) {
        let offset_bytes = request.offset_bytes;
        let len_bytes = u64::from(request.len_bytes);
        let op = match request.op {
            BlockOp::Read => tessera_thin::HostOp::Read {
                offset_bytes,
                len_bytes,
            },
            BlockOp::Write { fua } => {
                let mut data = self
                    .thin
                    .get_mut(&**vd)
                    .map(|drive| drive.store.spare_buffer())
                    .unwrap_or_default();
                data.extend_from_slice(request.data());
                tessera_thin::HostOp::Write {
                    offset_bytes,
                    data,
                    fua,
                }
            }
            BlockOp::Flush => tessera_thin::HostOp::Flush,
            BlockOp::Discard => tessera_thin::HostOp::Trim {
                offset_bytes,
                len_bytes,
            },
            // Zeroes never take space on a thin drive.
            BlockOp::WriteZeroes { fua, .. } => tessera_thin::HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
            },
            BlockOp::Unsupported(_) => unreachable!("answered by ublk_submit"),
        };
        let id = self.requests.insert(Requester::Ublk(UblkRequest {
            vd: Arc::clone(vd),
            request,
            submitted: self.woke,
        }));
        if !self.thin_submit(vd, id, op)
            && let Some(Requester::Ublk(pending)) = self.requests.remove(id)
        {
            pending.request.complete(Err(libc::ENODEV));
        }
    }

    /// An engine answered a ublk request.
    pub(super) fn ublk_engine_reply(
        &mut self,
        group: u32,
        pending: UblkRequest,
        result: Result<Option<tessera_buffer::BufferId>, HostError>,
    ) {
        let UblkRequest {
            vd,
            mut request,
            submitted,
        } = pending;
        self.count_ublk_io(&vd, &request, submitted);
        match result {
            Ok(Some(buffer)) => {
                let len = request.len_bytes as usize;
                if let Some(group) = self.groups.get_mut(&group) {
                    request
                        .data_mut()
                        .copy_from_slice(&group.engine.pool().slice(buffer)[..len]);
                    group.engine.pool_mut().free(buffer);
                    request.complete(Ok(()));
                } else {
                    request.complete(Err(libc::EIO));
                }
            }
            Ok(None) => request.complete(Ok(())),
            Err(error) => request.complete(Err(errno_of(error))),
        }
    }

    /// A thin store answered a ublk request.
    pub(super) fn ublk_thin_reply(
        &mut self,
        pending: UblkRequest,
        result: Result<Option<Vec<u8>>, tessera_thin::ThinError>,
    ) -> Option<Vec<u8>> {
        let UblkRequest {
            vd,
            mut request,
            submitted,
        } = pending;
        self.count_ublk_io(&vd, &request, submitted);
        match result {
            Ok(Some(data)) => {
                assert_eq!(data.len(), request.len_bytes as usize);
                request.data_mut().copy_from_slice(&data);
                request.complete(Ok(()));
                Some(data)
            }
            Ok(None) => {
                request.complete(Ok(()));
                None
            }
            Err(error) => {
                request.complete(Err(thin_errno_of(error)));
                None
            }
        }
    }

    /// Adds an answered read or write to its drive's counters (`/metrics`).
    fn count_ublk_io(&mut self, vd: &str, request: &BlockRequest, submitted: Instant) {
        let kind = match request.op {
            BlockOp::Read => VdIoKind::Read,
            BlockOp::Write { .. } => VdIoKind::Write,
            _ => return,
        };
        count_vd_io(
            &mut self.vd_io,
            vd,
            kind,
            u64::from(request.len_bytes),
            self.woke.saturating_duration_since(submitted),
        );
    }
}
