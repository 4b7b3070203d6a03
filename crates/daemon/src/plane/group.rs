//! Drive groups on the data plane: each engine's member commands become driver operations (or
//! immediate copies for in-memory drives, or queued requests for remote ones), and completions
//! go back to the engine.

use super::{DataPlane, Drive, Token};
use crate::blob::GroupConfig;
use crate::devices::{Device, Handle, Probe};
use crate::log;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use tessera_io::{Completion, Driver, Operation, SyncMember};
use tessera_raid::engine::{
    Command, CommandId, DeviceProbe, Engine, EngineConfig, HostError, MemberCommand, MemberError,
    MemberOp, Reply,
};
use tessera_raid::superblock::{Superblock, Uuid};

/// A drive group served by this data plane.
pub(crate) struct Group {
    pub id: u32,
    pub engine: Engine,
    /// Member index -> drive id.
    pub members: Vec<Option<u32>>,
    pub config: GroupConfig,
    /// Parity computations handed to the parity worker and not yet finished: the engine (and
    /// its buffers) must outlive them.
    pub computing: usize,
}

/// The wake descriptor of a remote drive.
pub(crate) fn remote_wake_fd(device: &Device) -> Option<RawFd> {
    match &device.handle {
        Handle::Remote(remote) => Some(remote.wake_fd()),
        _ => None,
    }
}

/// Engine settings for the daemon.
pub(crate) fn engine_config(offload_parity: bool) -> EngineConfig {
    EngineConfig {
        pool_bytes: 256 << 20,
        offload_parity,
        // 4 MiB of the replacement in flight: 64 stripes at the default 64 KiB chunk, enough
        // to keep a drive with some latency busy; 4 at 1 MiB chunks.
        rebuild_window: 64,
        rebuild_window_bytes: 4 << 20,
        ..EngineConfig::default()
    }
}

/// Rounds of inline completions `process_engines` answers before the event loop turns again:
/// enough for a stripe update's steps (reads, journal writes, in-place writes, a flush).
const INLINE_ROUNDS_PER_TURN: u32 = 4;

impl DataPlane {
    /// Opens every drive listed in the state directory and reads its superblock.
    pub(super) fn load_drives(&mut self) -> Result<(), String> {
        let state = self.state.load()?;
        self.ublk.wanted = state
            .ublk_exports
            .into_iter()
            .map(|record| {
                let body = tessera_api::model::ExportUblk {
                    queues: record.queues,
                    queue_depth: record.queue_depth,
                };
                (record.vd, body)
            })
            .collect();
        for record in state.drives {
            let mut drive = Drive {
                id: record.id,
                path: record.path.clone(),
                device: None,
                open_error: None,
                member_uuid: None,
                spare: record.spare,
                spare_for: record.spare_for,
                group: None,
                damaged: None,
            };
            match Device::open(&record.path) {
                Ok(mut device) => {
                    match device.probe() {
                        Ok(Probe::Member(superblock)) => {
                            drive.member_uuid = Some(superblock.member_uuid)
                        }
                        Ok(Probe::Blank) => {}
                        Ok(Probe::Damaged(error)) => drive.damaged = Some(error.to_string()),
                        Err(error) => drive.open_error = Some(error),
                    }
                    self.attach_device(&mut drive, device);
                }
                Err(error) => {
                    log!("drive {} ({}) is missing: {error}", record.id, record.path);
                    drive.open_error = Some(error);
                }
            }
            self.drives.insert(record.id, drive);
        }
        Ok(())
    }

    /// Gives a freshly opened device to a drive, attached to the driver as it needs.
    pub(crate) fn attach_device(&mut self, drive: &mut Drive, device: Device) {
        if let Handle::Local(member) = &device.handle {
            member.attach_to(&mut self.driver);
        }
        drive.device = Some(device);
    }

    /// Groups the drives by the group their superblocks name and assembles each group.
    pub(super) fn assemble_groups(&mut self) {
        let mut by_group: BTreeMap<Uuid, Vec<(u32, Superblock)>> = BTreeMap::new();
        let ids: Vec<u32> = self.drives.keys().copied().collect();
        for id in ids {
            let Some(device) = self
                .drives
                .get_mut(&id)
                .and_then(|drive| drive.device.as_mut())
            else {
                continue;
            };
            if let Ok(Probe::Member(superblock)) = device.probe() {
                by_group
                    .entry(superblock.group_uuid)
                    .or_default()
                    .push((id, *superblock));
            }
        }
        for (uuid, members) in by_group {
            if let Err(error) = self.assemble_group(members) {
                log!("drive group {uuid} not started: {error}");
                self.events.push_error(
                    "assemble_failed",
                    format!("drive group {uuid} not started: {error}"),
                    None,
                    None,
                );
            }
        }
    }

    fn assemble_group(&mut self, members: Vec<(u32, Superblock)>) -> Result<(), String> {
        let probes = members
            .iter()
            .map(|(_, superblock)| DeviceProbe {
                superblock: superblock.clone(),
            })
            .collect();
        let (engine, mapping) = Engine::assemble(
            probes,
            engine_config(self.offload_parity),
            self.parity.clone(),
        )
        .map_err(|e| e.to_string())?;
        let data_bytes = engine.data_bytes();
        let mut config = GroupConfig::decode(&engine.superblock().config, data_bytes)
            .unwrap_or_else(|error| {
                log!(
                    "drive group {}: {error}; starting with no virtual drives",
                    engine.superblock().name
                );
                GroupConfig::default()
            });
        if self.groups.contains_key(&config.dg_id) {
            let fresh = self.next_group_id();
            log!(
                "drive group {} asked for id {}, already taken: using {fresh}",
                engine.superblock().name,
                config.dg_id
            );
            config.dg_id = fresh;
        }
        let id = config.dg_id;
        let member_count = engine.superblock().members.len();
        let mut group = Group {
            id,
            engine,
            members: vec![None; member_count],
            config,
            computing: 0,
        };
        for ((drive_id, _), member) in members.iter().zip(mapping) {
            match member {
                Some(member) => {
                    group.members[member] = Some(*drive_id);
                    self.drives.get_mut(drive_id).expect("probed drive").group = Some((id, member));
                }
                None => log!("drive {drive_id} is not listed by its drive group; left alone"),
            }
        }
        log!(
            "drive group {} ({}): {} members, state {}",
            group.engine.superblock().name,
            group.engine.superblock().group_uuid,
            member_count,
            group.engine.state()
        );
        self.groups.insert(id, group);
        Ok(())
    }

    pub(crate) fn next_group_id(&self) -> u32 {
        (0..)
            .find(|id| !self.groups.contains_key(id))
            .expect("a free id")
    }

    /// Gives each group its run of the queued member completions in one call. True if there
    /// were any.
    fn hand_over_completions(&mut self) -> bool {
        // Completing cannot add to `immediate` (only carrying out commands does), so the
        // list goes back afterwards with its capacity.
        let mut immediate = std::mem::take(&mut self.immediate);
        for (group_id, run) in group_runs(&immediate, |&(id, _, _)| id) {
            if let Some(group) = self.groups.get_mut(&group_id) {
                let completions = run.iter().map(|&(_, command, result)| (command, result));
                group.engine.complete_all(completions);
            }
        }
        let any = !immediate.is_empty();
        immediate.clear();
        self.immediate = immediate;
        any
    }

    /// Gives each group its run of the queued host requests in one call. True if there were
    /// any.
    pub(super) fn hand_over_submissions(&mut self) -> bool {
        let mut submissions = std::mem::take(&mut self.submissions);
        for (group_id, run) in group_runs(&submissions, |&(id, _)| id) {
            let requests = run.iter().map(|&(_, request)| request);
            match self.groups.get_mut(&group_id) {
                Some(group) => group.engine.submit_all(requests),
                // Deleted since the requests came in: they are answered as by an engine
                // shutting down.
                None => {
                    for request in requests {
                        let result = Err(HostError::ShuttingDown);
                        self.host_reply(
                            group_id,
                            Reply {
                                id: request.id,
                                result,
                            },
                        );
                    }
                }
            }
        }
        let any = !submissions.is_empty();
        // Answering requests of a deleted group can let a connection read on and queue
        // more: those stay queued.
        submissions.clear();
        submissions.append(&mut self.submissions);
        self.submissions = submissions;
        any
    }

    /// Drains every engine's output, carrying out member commands and delivering replies,
    /// until nothing is left (in-memory completions feed straight back in).
    pub(super) fn process_engines(&mut self) {
        let mut inline_rounds = 0;
        loop {
            // Member I/O run inline (tmpfs members) has finished already: its completions go
            // to the engines now, not one turn of the event loop later. A few rounds only:
            // work that feeds itself this way (a rebuild with no host I/O) would otherwise
            // keep the loop from new requests, and the engines' clocks from moving.
            let mut progressed = false;
            if inline_rounds < INLINE_ROUNDS_PER_TURN {
                let mut ready = std::mem::take(&mut self.ready_completions);
                if self.driver.take_ready(&mut ready) > 0 {
                    inline_rounds += 1;
                    progressed = true;
                }
                for completion in ready.drain(..) {
                    self.dispatch(completion);
                }
                self.ready_completions = ready;
            }
            progressed |= self.hand_over_completions();
            progressed |= self.hand_over_submissions();
            let mut ids = std::mem::take(&mut self.group_ids);
            ids.clear();
            ids.extend(self.groups.keys().copied());
            for &id in &ids {
                while let Some(command) = self
                    .groups
                    .get_mut(&id)
                    .and_then(|group| group.engine.poll())
                {
                    progressed = true;
                    match command {
                        Command::Member(command) => self.start_member_io(id, command),
                        Command::Reply(reply) => self.host_reply(id, reply),
                        Command::Event(event) => self.group_event(id, event),
                        Command::Compute(command) => self.queue_compute(id, command),
                    }
                }
            }
            self.group_ids = ids;
            progressed |= self.pump_thin();
            progressed |= self.pump_ublk();
            self.send_compute();
            self.flush_connections();
            // A connection that was held back reads on when its sends start, queueing requests.
            if !progressed && self.submissions.is_empty() {
                break;
            }
        }
    }

    fn start_member_io(&mut self, group_id: u32, command: MemberCommand) {
        // A host read's own piece, large enough and for a plain NBD connection: spliced if
        // its member is a page-cache file (below).
        let splice = match command.op {
            MemberOp::Read {
                offset_bytes,
                buffer,
                for_host: Some(request),
            } if self.may_splice(request, buffer.len_bytes) => {
                Some((request, offset_bytes, buffer))
            }
            _ => None,
        };
        let group = self.groups.get_mut(&group_id).expect("live group");
        let drive_id = group.members.get(command.member).copied().flatten();
        let Some(device) = drive_id
            .and_then(|id| self.drives.get_mut(&id))
            .and_then(|drive| drive.device.as_mut())
        else {
            self.immediate
                .push((group_id, command.id, Err(MemberError::Gone)));
            return;
        };
        if let (Some((request, offset_bytes, buffer)), Handle::Local(member)) =
            (splice, &device.handle)
            && !member.nowait_io()
            && let Some(result) = self.splicing.read_piece(
                request,
                member.buffered_fd(),
                offset_bytes,
                buffer.offset_bytes,
                buffer.len_bytes,
            )
        {
            let outcome = result.map_err(|error| member_error(error.errno().unwrap_or(libc::EIO)));
            self.immediate.push((group_id, command.id, outcome));
            return;
        }
        let pool = group.engine.pool_mut();
        match &mut device.handle {
            Handle::Memory(member) => {
                let result = match command.op.zeroes_as_write() {
                    MemberOp::Read {
                        offset_bytes,
                        buffer,
                        ..
                    } => member.read_at(offset_bytes, pool.bytes_mut(buffer)),
                    MemberOp::Write {
                        offset_bytes,
                        buffer,
                        fua,
                    } => member
                        .write_at(offset_bytes, pool.bytes(buffer))
                        .and_then(|()| if fua { member.flush() } else { Ok(()) }),
                    MemberOp::Flush => member.flush(),
                    MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
                };
                self.immediate
                    .push((group_id, command.id, result.map_err(|_| MemberError::Io)));
            }
            Handle::Local(member) => {
                if let MemberOp::WriteZeroes {
                    offset_bytes,
                    buffer,
                } = command.op
                    && let Some(operation) =
                        member.zero_operation(offset_bytes, u64::from(buffer.len_bytes))
                {
                    let token = self.tokens.insert(Token::Zeroes {
                        group: group_id,
                        command,
                    });
                    // SAFETY: a zero operation names no memory; the device keeps its
                    // descriptors open.
                    unsafe { self.driver.submit(token, operation) };
                    return;
                }
                let token = self.tokens.insert(Token::Member {
                    group: group_id,
                    command: command.id,
                });
                match command.op.zeroes_as_write() {
                    MemberOp::Read {
                        offset_bytes,
                        buffer,
                        ..
                    } => {
                        let pointer = pool.as_mut_ptr(buffer);
                        let fd = member.fd_for(offset_bytes, buffer.len_bytes, pointer);
                        let operation = Operation::Read {
                            fd,
                            offset_bytes,
                            buffer: pointer,
                            len_bytes: buffer.len_bytes,
                        };
                        // SAFETY: the engine keeps the buffer live and untouched until this
                        // command completes (engine invariant), and the device keeps `fd` open.
                        unsafe { self.driver.submit(token, operation) };
                    }
                    MemberOp::Write {
                        offset_bytes,
                        buffer,
                        fua,
                    } => {
                        let pointer = pool.as_mut_ptr(buffer);
                        let fd = member.fd_for(offset_bytes, buffer.len_bytes, pointer);
                        let operation = Operation::Write {
                            fd,
                            offset_bytes,
                            buffer: pointer,
                            len_bytes: buffer.len_bytes,
                            fua,
                        };
                        // SAFETY: as for reads; the engine does not modify a buffer in flight.
                        unsafe { self.driver.submit(token, operation) };
                    }
                    MemberOp::Flush => self.driver.submit_fsync(token, member.flush_fd()),
                    MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
                }
            }
            Handle::Remote(remote) => {
                let token = self.tokens.insert(Token::Member {
                    group: group_id,
                    command: command.id,
                });
                if let MemberOp::WriteZeroes {
                    offset_bytes,
                    buffer,
                } = command.op
                    && remote.can_write_zeroes()
                {
                    remote.submit_write_zeroes(token, offset_bytes, buffer.len_bytes);
                    return;
                }
                match command.op.zeroes_as_write() {
                    MemberOp::Read {
                        offset_bytes,
                        buffer,
                        ..
                    } => {
                        let pointer = pool.as_mut_ptr(buffer);
                        // SAFETY: the engine keeps the buffer live and untouched until completion.
                        unsafe {
                            remote.submit_read(token, offset_bytes, pointer, buffer.len_bytes)
                        };
                    }
                    MemberOp::Write {
                        offset_bytes,
                        buffer,
                        fua,
                    } => {
                        let pointer = pool.as_mut_ptr(buffer);
                        // SAFETY: as for reads.
                        unsafe {
                            remote.submit_write(token, offset_bytes, pointer, buffer.len_bytes, fua)
                        };
                    }
                    MemberOp::Flush => remote.submit_flush(token),
                    MemberOp::WriteZeroes { .. } => unreachable!("taken as a write"),
                }
            }
        }
    }

    /// A member's zero operation finished. A member that refuses it (a file system without
    /// ZERO_RANGE) is written with the zeroes instead, from now on.
    pub(super) fn zeroes_done(&mut self, group_id: u32, command: MemberCommand, result: i32) {
        let drive_id = self
            .groups
            .get(&group_id)
            .and_then(|group| group.members.get(command.member).copied().flatten());
        let member = drive_id
            .and_then(|id| self.drives.get_mut(&id))
            .and_then(|drive| drive.device.as_mut())
            .and_then(|device| match &mut device.handle {
                Handle::Local(member) => Some(member),
                _ => None,
            });
        let refused = result < 0 && member.is_some_and(|member| member.zeroing_refused(-result));
        if refused {
            log!(
                "physical drive {}: zeroing by fallocate refused ({}); writing zeroes instead",
                drive_id.expect("a refusal comes from a drive"),
                tessera_io::errno_text(-result)
            );
            self.start_member_io(group_id, command);
        } else {
            self.member_done(group_id, command.id, result);
        }
    }

    /// A member operation finished: reads and writes must move every byte. Its engine hears
    /// of it in the next `process_engines`, with the others reaped alongside.
    pub(super) fn member_done(&mut self, group_id: u32, command: CommandId, result: i32) {
        if !self.groups.contains_key(&group_id) {
            return;
        }
        let outcome = if result >= 0 {
            Ok(())
        } else {
            Err(member_error(-result))
        };
        // Short transfers cannot happen inside a member's size; the engine sees them as errors
        // only through a negative result.
        self.immediate.push((group_id, command, outcome));
    }

    pub(super) fn remote_wake(&mut self, drive_id: u32) {
        let mut completions: Vec<Completion> = Vec::new();
        let fd = match self
            .drives
            .get(&drive_id)
            .and_then(|drive| drive.device.as_ref())
            .map(|device| &device.handle)
        {
            Some(Handle::Remote(remote)) => {
                remote.take_completions(&mut completions);
                Some(remote.wake_fd())
            }
            _ => None,
        };
        for completion in completions {
            if let Some(Token::Member { group, command }) = self.tokens.remove(completion.token) {
                self.member_done(group, command, completion.result);
            }
        }
        if let Some(fd) = fd {
            self.arm_remote_wake(drive_id, fd);
        }
    }

    fn group_event(&mut self, group_id: u32, event: tessera_raid::engine::GroupEvent) {
        use tessera_raid::engine::GroupEvent;
        let name = self
            .groups
            .get(&group_id)
            .map(|g| g.engine.superblock().name)
            .unwrap_or_default();
        let pd_of = |plane: &DataPlane, member: usize| {
            plane
                .groups
                .get(&group_id)
                .and_then(|g| g.members.get(member).copied().flatten())
        };
        match event {
            GroupEvent::StateChanged { from, to } => {
                let severity_error = matches!(to, tessera_raid::engine::GroupState::Failed);
                let message = format!("drive group {name}: {from} -> {to}");
                log!("{message}");
                if severity_error {
                    self.events
                        .push_error("dg_state", message, Some(group_id), None);
                } else if matches!(to, tessera_raid::engine::GroupState::Degraded) {
                    self.events
                        .push_warning("dg_state", message, Some(group_id), None);
                } else {
                    self.events
                        .push_info("dg_state", message, Some(group_id), None);
                }
            }
            GroupEvent::MemberFailed { member, reason, .. } => {
                let pd = pd_of(self, member);
                let message = format!(
                    "drive group {name}: member {member} (drive {}) failed: {reason}",
                    pd.map_or("?".into(), |p| p.to_string())
                );
                log!("{message}");
                self.events
                    .push_error("pd_failed", message, Some(group_id), pd);
                self.take_spare(group_id);
            }
            GroupEvent::RebuildStarted { member, role } => {
                let pd = pd_of(self, member);
                let message = format!(
                    "drive group {name}: rebuild of role {role} onto drive {} started",
                    pd.map_or("?".into(), |p| p.to_string())
                );
                log!("{message}");
                self.events
                    .push_info("rebuild_started", message, Some(group_id), pd);
            }
            GroupEvent::RebuildFinished { member, role } => {
                let pd = pd_of(self, member);
                let message = format!(
                    "drive group {name}: rebuild of role {role} onto drive {} finished",
                    pd.map_or("?".into(), |p| p.to_string())
                );
                log!("{message}");
                self.events
                    .push_info("rebuild_finished", message, Some(group_id), pd);
                self.release_replaced_members(group_id);
                // A second lost member (RAID6) waited for this rebuild: its spare goes next.
                self.take_spare(group_id);
            }
            GroupEvent::ReadErrorRepaired {
                member,
                offset_bytes,
                len_bytes,
            } => {
                let pd = pd_of(self, member);
                self.events.push_warning(
                    "read_error_repaired",
                    format!("drive group {name}: read error on member {member} at {offset_bytes}+{len_bytes} repaired from redundancy"),
                    Some(group_id),
                    pd,
                );
            }
            GroupEvent::DataLost {
                offset_bytes,
                len_bytes,
            } => {
                let drives = self
                    .groups
                    .get(&group_id)
                    .map(|g| g.config.where_lost(offset_bytes, len_bytes))
                    .unwrap_or_default();
                let within = if drives.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", drives.join(", "))
                };
                let message = format!(
                    "drive group {name}: data at {offset_bytes}+{len_bytes}{within} lost beyond redundancy; reads of it fail"
                );
                log!("{message}");
                self.events
                    .push_critical("data_lost", message, Some(group_id), None);
            }
            GroupEvent::JournalReplayed { entries, complete } => {
                let message = if complete {
                    format!(
                        "drive group {name}: journal replayed ({entries} stripe updates redone)"
                    )
                } else {
                    format!(
                        "drive group {name}: journal could not be read whole ({entries} stripe updates redone); falling back to resync"
                    )
                };
                log!("{message}");
                if complete {
                    self.events
                        .push_info("journal_replayed", message, Some(group_id), None);
                } else {
                    self.events
                        .push_warning("journal_replayed", message, Some(group_id), None);
                }
            }
            GroupEvent::ResyncFinished { regions } => {
                self.events.push_info(
                    "resync_finished",
                    format!("drive group {name}: resync of {regions} regions finished"),
                    Some(group_id),
                    None,
                );
            }
            GroupEvent::ScrubFinished(result) => {
                let message = format!(
                    "drive group {name}: scrub{} {}: {} stripes checked, {} mismatches, {} repaired, {} unrecoverable, {} read errors repaired",
                    if result.repair { " (repair)" } else { "" },
                    if result.completed {
                        "finished"
                    } else {
                        "stopped early"
                    },
                    result.stats.stripes_checked,
                    result.stats.mismatches,
                    result.stats.repaired,
                    result.stats.unrecoverable,
                    result.stats.read_errors_repaired
                );
                log!("{message}");
                if result.stats.mismatches > 0 || result.stats.unrecoverable > 0 {
                    self.events
                        .push_warning("scrub_finished", message, Some(group_id), None);
                } else {
                    self.events
                        .push_info("scrub_finished", message, Some(group_id), None);
                }
                self.scrub_finished_unix_ms
                    .insert(group_id, crate::plane::unix_ms());
            }
            GroupEvent::Started => {
                self.events.push_info(
                    "dg_started",
                    format!("drive group {name} started"),
                    Some(group_id),
                    None,
                );
            }
        }
    }

    /// After a rebuild, drives that no longer hold a role in the group leave it.
    fn release_replaced_members(&mut self, group_id: u32) {
        let Some(group) = self.groups.get(&group_id) else {
            return;
        };
        let superblock = group.engine.superblock();
        let listed: Vec<Uuid> = superblock
            .members
            .iter()
            .map(|member| member.uuid)
            .collect();
        let leaving: Vec<u32> = group
            .members
            .iter()
            .flatten()
            .copied()
            .filter(|drive| {
                self.drives
                    .get(drive)
                    .and_then(|d| d.member_uuid)
                    .is_none_or(|uuid| !listed.contains(&uuid))
            })
            .collect();
        for drive_id in leaving {
            if let Some(drive) = self.drives.get_mut(&drive_id) {
                drive.group = None;
                log!("drive {drive_id} left drive group {group_id}");
            }
            if let Some(group) = self.groups.get_mut(&group_id) {
                for slot in group.members.iter_mut() {
                    if *slot == Some(drive_id) {
                        *slot = None;
                    }
                }
            }
        }
    }
}

/// What the engine hears of a member I/O that failed with `errno`.
fn member_error(errno: i32) -> MemberError {
    if tessera_io::errno_means_gone(errno) {
        MemberError::Gone
    } else {
        MemberError::Io
    }
}

/// The runs of consecutive `items` bound for one group, with that group's id, in order.
fn group_runs<T>(items: &[T], group_of: impl Fn(&T) -> u32) -> impl Iterator<Item = (u32, &[T])> {
    let mut rest = items;
    std::iter::from_fn(move || {
        let group_id = group_of(rest.first()?);
        let len = rest
            .iter()
            .take_while(|item| group_of(item) == group_id)
            .count();
        let (run, after) = rest.split_at(len);
        rest = after;
        Some((group_id, run))
    })
}

#[cfg(test)]
mod tests {
    use super::group_runs;

    #[test]
    fn runs_split_where_the_group_changes_and_keep_order() {
        let items = [(1, 'a'), (1, 'b'), (2, 'c'), (1, 'd'), (3, 'e'), (3, 'f')];
        let runs: Vec<(u32, Vec<char>)> = group_runs(&items, |&(id, _)| id)
            .map(|(id, run)| (id, run.iter().map(|&(_, c)| c).collect()))
            .collect();
        assert_eq!(
            runs,
            vec![
                (1, vec!['a', 'b']),
                (2, vec!['c']),
                (1, vec!['d']),
                (3, vec!['e', 'f'])
            ]
        );
        assert_eq!(group_runs(&[] as &[(u32, char)], |&(id, _)| id).count(), 0);
    }
}
