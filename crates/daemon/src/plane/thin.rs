//! Thin virtual drives on the data plane. Each drive's store (`tessera-thin`) sits between its
//! NBD connections and its group's engine: the store's lower commands become engine requests
//! in the drive's extent, engine replies go back to the store, and the store's replies go to
//! the connections (`nbd.rs`).

use super::{DataPlane, Requester, group::Group};
use crate::blob::{ThinRecord, VdRecord};
use std::collections::VecDeque;
use std::sync::Arc;
use tessera_api::model::{Compression, ThinStatsView};
use tessera_raid::engine::{HostError, HostOp, HostRequest};
use tessera_thin::{Config, LowerCommand, LowerOp, Output, Store, ThinEvent};

/// A thin drive's store and where it lives.
pub(crate) struct ThinDrive {
    /// The drive's name (its key in `DataPlane::thin`), shared with the requests it has at
    /// its group.
    name: Arc<str>,
    pub group: u32,
    /// Where the store's extent starts in the group's data space.
    pub extent_offset_bytes: u64,
    pub store: Store,
    /// Lower commands waiting for engine buffer space, oldest first.
    backlog: VecDeque<LowerCommand>,
    /// Why the store failed, once it has.
    pub failure: Option<String>,
    low_space_reported: bool,
}

/// The store's view of a thin drive in `group`.
fn store_config(group: &Group, vd: &VdRecord, thin: &ThinRecord) -> Config {
    let geometry = group.engine.geometry();
    Config {
        store_id: thin.store_id,
        logical_bytes: thin.logical_bytes,
        extent_bytes: vd.size_bytes,
        stripe_bytes: geometry.stripe_data_bytes(),
        compression: match thin.compression {
            Compression::None => tessera_thin::Compression::None,
            Compression::Lz4 => tessera_thin::Compression::Lz4,
            Compression::Zstd => tessera_thin::Compression::Zstd,
        },
        repair_sources: geometry.read_around_sources(),
        member_bytes_per_data_byte: geometry.member_bytes_per_data_byte(),
        low_space_percent: thin.low_space_percent,
        // Every start-up of the store gets a new one (see `Config::session_id`).
        session_id: u64::from_le_bytes(
            super::admin::random_uuid().0[..8]
                .try_into()
                .expect("8 bytes"),
        ),
    }
}

/// Checks that a thin drive fits its extent (a store can be laid out in it).
/// The layout a thin drive's store would have, or why its extent cannot hold one.
pub(crate) fn check_layout(
    group: &Group,
    vd: &VdRecord,
    thin: &ThinRecord,
) -> Result<tessera_thin::layout::Layout, String> {
    let config = store_config(group, vd, thin);
    tessera_thin::layout::Layout::new(config.extent_bytes, config.stripe_bytes)
}

impl DataPlane {
    /// Starts the store of thin drive `name`: a new one (`create`) or one recovered from its log.
    pub(crate) fn start_thin(&mut self, name: &str, create: bool) -> Result<(), String> {
        let (group, vd) = self
            .find_vd(name)
            .ok_or_else(|| format!("no virtual drive {name}"))?;
        let thin = vd.thin.as_ref().ok_or("not a thin drive")?;
        let config = store_config(group, vd, thin);
        let store = if create {
            Store::create(config)?
        } else {
            Store::open(config)?
        };
        let drive = ThinDrive {
            name: Arc::from(name),
            group: group.id,
            extent_offset_bytes: vd.offset_bytes,
            store,
            backlog: VecDeque::new(),
            failure: None,
            low_space_reported: false,
        };
        self.thin.insert(name.to_string(), drive);
        Ok(())
    }

    /// Starts the stores of every thin drive of the groups assembled at start-up.
    pub(super) fn start_thin_drives(&mut self) {
        let names: Vec<(u32, String)> = self
            .groups
            .values()
            .flat_map(|group| {
                group
                    .config
                    .virtual_drives
                    .iter()
                    .filter(|vd| vd.thin.is_some())
                    .map(move |vd| (group.id, vd.name.clone()))
            })
            .collect();
        for (dg, name) in names {
            if let Err(error) = self.start_thin(&name, false) {
                crate::log!("thin virtual drive {name} not started: {error}");
                self.events.push_error(
                    "thin_start_failed",
                    format!("thin virtual drive {name} not started: {error}"),
                    Some(dg),
                    None,
                );
            }
        }
    }

    /// Passes host requests of an NBD connection to a thin drive's store.
    pub(super) fn thin_submit(&mut self, name: &str, id: u64, op: tessera_thin::HostOp) -> bool {
        match self.thin.get_mut(name) {
            Some(drive) => {
                drive.store.submit(id, op);
                true
            }
            None => false,
        }
    }

    /// Carries out every store's output; true if anything happened.
    pub(super) fn pump_thin(&mut self) -> bool {
        let mut progressed = false;
        let mut names = std::mem::take(&mut self.thin_names);
        names.extend(self.thin.values().map(|drive| Arc::clone(&drive.name)));
        for name in &names {
            progressed |= self.retry_backlog(name);
            while let Some(output) = self
                .thin
                .get_mut(&**name)
                .and_then(|drive| drive.store.poll())
            {
                progressed = true;
                match output {
                    Output::Lower(command) => self.thin_lower(name, command),
                    Output::Reply(reply) => {
                        if let Some(data) = self.thin_host_reply(reply.id, reply.result)
                            && let Some(drive) = self.thin.get_mut(&**name)
                        {
                            drive.store.recycle(data);
                        }
                    }
                    Output::Event(event) => self.thin_event(name, event),
                }
            }
        }
        names.clear();
        self.thin_names = names;
        progressed
    }

    /// Sends lower commands that waited for buffer space; true if any went.
    fn retry_backlog(&mut self, name: &str) -> bool {
        let mut sent = false;
        while let Some(command) = self
            .thin
            .get_mut(name)
            .and_then(|drive| drive.backlog.pop_front())
        {
            if !self.send_lower(name, command) {
                return sent;
            }
            sent = true;
        }
        sent
    }

    fn thin_lower(&mut self, name: &str, command: LowerCommand) {
        let waiting = self
            .thin
            .get(name)
            .is_some_and(|drive| !drive.backlog.is_empty());
        if waiting {
            self.thin
                .get_mut(name)
                .expect("live")
                .backlog
                .push_back(command);
            return;
        }
        self.send_lower(name, command);
    }

    /// Hands one lower command to the engine; false (and kept first in the backlog) when the
    /// engine has no buffer for its data yet.
    fn send_lower(&mut self, name: &str, command: LowerCommand) -> bool {
        let drive = self.thin.get_mut(name).expect("live thin drive");
        let base = drive.extent_offset_bytes;
        let Some(group) = self.groups.get_mut(&drive.group) else {
            drive.store.lower_done(command.id, Err(()));
            return true;
        };
        let mut read_bytes = 0;
        let op = match &command.op {
            LowerOp::Read {
                offset_bytes,
                len_bytes,
            } => {
                read_bytes = *len_bytes as usize;
                HostOp::Read {
                    offset_bytes: base + offset_bytes,
                    len_bytes: *len_bytes,
                }
            }
            LowerOp::ReadAround {
                offset_bytes,
                len_bytes,
                copy,
            } => {
                read_bytes = *len_bytes as usize;
                HostOp::ReadAround {
                    offset_bytes: base + offset_bytes,
                    len_bytes: *len_bytes,
                    copy: *copy,
                }
            }
            LowerOp::Write { offset_bytes, data } => {
                let Some(buffer) = group.engine.alloc_host_buffer(data.len()) else {
                    drive.backlog.push_front(command);
                    return false;
                };
                group.engine.pool_mut().slice_mut(buffer)[..data.len()].copy_from_slice(data);
                HostOp::Write {
                    offset_bytes: base + offset_bytes,
                    buffer,
                    fua: false,
                }
            }
            LowerOp::Flush => HostOp::Flush,
            // The engine applies it when admitted, before anything the store issues later
            // (the backlog keeps the order), which is what the store relies on.
            LowerOp::Trim {
                offset_bytes,
                len_bytes,
            } => HostOp::Trim {
                offset_bytes: base + offset_bytes,
                len_bytes: *len_bytes,
            },
        };
        let id = self.requests.insert(Requester::Thin {
            vd: Arc::clone(&drive.name),
            lower_id: command.id,
            read_bytes,
        });
        group.engine.submit(HostRequest { id, op });
        true
    }

    /// The engine answered a store's lower command.
    pub(super) fn thin_engine_reply(
        &mut self,
        group: u32,
        name: &str,
        lower_id: u64,
        read_bytes: usize,
        result: Result<Option<tessera_buffer::BufferId>, HostError>,
    ) {
        let mut drive = self.thin.get_mut(name);
        let result = match result {
            Ok(Some(buffer)) => {
                let engine = &mut self.groups.get_mut(&group).expect("replying group").engine;
                let mut data = drive
                    .as_deref_mut()
                    .map(|drive| drive.store.spare_buffer())
                    .unwrap_or_default();
                data.extend_from_slice(&engine.pool().slice(buffer)[..read_bytes]);
                engine.pool_mut().free(buffer);
                Ok(Some(data))
            }
            Ok(None) => Ok(None),
            Err(_) => Err(()),
        };
        if let Some(drive) = drive {
            drive.store.lower_done(lower_id, result);
        }
    }

    fn thin_event(&mut self, name: &str, event: ThinEvent) {
        let Some(drive) = self.thin.get_mut(name) else {
            return;
        };
        let dg = Some(drive.group);
        match event {
            ThinEvent::ChecksumRepaired { lba } => self.events.push_warning(
                "checksum_repaired",
                format!("thin virtual drive {name}: block {lba} failed its checksum and was rewritten from redundancy"),
                dg,
                None,
            ),
            ThinEvent::ChecksumUnrepairable { lba } => self.events.push_error(
                "checksum_unrepairable",
                format!("thin virtual drive {name}: block {lba} failed its checksum and has no good copy; reads of it fail"),
                dg,
                None,
            ),
            ThinEvent::LowSpace { free_bytes } => {
                if !drive.low_space_reported {
                    drive.low_space_reported = true;
                    self.events.push_warning(
                        "low_space",
                        format!("thin virtual drive {name}: only {free_bytes} bytes of physical space left"),
                        dg,
                        None,
                    );
                }
            }
            ThinEvent::NoSpace => self.events.push_error(
                "no_space",
                format!("thin virtual drive {name}: out of physical space; writes fail with ENOSPC until space is freed"),
                dg,
                None,
            ),
            ThinEvent::Recovered {
                checkpoint_id,
                records_replayed,
                torn_blocks_dropped,
            } => self.events.push_info(
                "thin_recovered",
                format!(
                    "thin virtual drive {name} started from checkpoint {checkpoint_id} and {records_replayed} log records{}",
                    if torn_blocks_dropped > 0 {
                        format!("; {torn_blocks_dropped} blocks written but never flushed before a crash were dropped")
                    } else {
                        String::new()
                    }
                ),
                dg,
                None,
            ),
            ThinEvent::ScrubFinished {
                checked_blocks,
                errors_detected,
                errors_repaired,
            } => {
                let message = format!(
                    "thin virtual drive {name}: scrub checked {checked_blocks} blocks, {errors_detected} failed their checksum, {errors_repaired} repaired"
                );
                if errors_detected > errors_repaired {
                    self.events.push_error("thin_scrub_finished", message, dg, None);
                } else if errors_detected > 0 {
                    self.events.push_warning("thin_scrub_finished", message, dg, None);
                } else {
                    self.events.push_info("thin_scrub_finished", message, dg, None);
                }
            }
            ThinEvent::StartFailed { reason } => {
                drive.failure = Some(reason.clone());
                self.events.push_critical(
                    "thin_failed",
                    format!("thin virtual drive {name} cannot start: {reason}"),
                    dg,
                    None,
                );
            }
            ThinEvent::Failed { reason } => {
                drive.failure = Some(reason.clone());
                self.events.push_critical(
                    "thin_failed",
                    format!("thin virtual drive {name} failed while serving: {reason}"),
                    dg,
                    None,
                );
            }
        }
    }

    /// Lets time pass for every store.
    pub(super) fn tick_thin(&mut self, now_us: u64) {
        for drive in self.thin.values_mut() {
            drive.store.tick(now_us);
        }
    }

    /// The earliest store deadline.
    pub(super) fn thin_deadline_us(&self) -> Option<u64> {
        self.thin
            .values()
            .filter_map(|drive| drive.store.next_deadline_us())
            .min()
    }

    /// Asks every store to write its final checkpoint.
    pub(super) fn shutdown_thin(&mut self) {
        for drive in self.thin.values_mut() {
            drive.store.shutdown();
        }
    }

    /// Whether the group's thin drives have all stopped (so the engine may stop).
    pub(super) fn thin_stopped(&self, group: u32) -> bool {
        self.thin
            .values()
            .filter(|drive| drive.group == group)
            .all(|drive| drive.store.is_stopped())
    }

    /// Gives thin drive `name`'s store the extent its (durable) record now names.
    pub(crate) fn grow_thin(&mut self, name: &str) -> Result<(), String> {
        let extent_bytes = self
            .find_vd(name)
            .map(|(_, vd)| vd.size_bytes)
            .ok_or_else(|| format!("no virtual drive {name}"))?;
        let drive = self
            .thin
            .get_mut(name)
            .ok_or_else(|| format!("virtual drive {name} is not a running thin drive"))?;
        drive.store.grow(extent_bytes)?;
        // The trims of the new space go out with the store's other commands.
        self.pump_thin();
        Ok(())
    }

    /// Stops and forgets a thin drive's store (the drive is being deleted).
    pub(crate) fn drop_thin(&mut self, name: &str) {
        if let Some(mut drive) = self.thin.remove(name) {
            drive.store.shutdown();
        }
    }

    /// The statistics `vd describe` shows.
    pub(crate) fn thin_stats(&self, vd: &VdRecord) -> Option<ThinStatsView> {
        let thin = vd.thin.as_ref()?;
        let Some(drive) = self.thin.get(&vd.name) else {
            return Some(ThinStatsView {
                logical_used_bytes: 0,
                physical_used_bytes: 0,
                host_bytes_written: 0,
                member_bytes_written: 0,
                write_amplification: 0.0,
                compression_ratio: 1.0,
                checksum_errors_detected: 0,
                checksum_errors_repaired: 0,
                capacity_bytes: 0,
                free_bytes: 0,
                cleaning_bytes_written: 0,
                overcommit_ratio: 0.0,
                state: "not started".into(),
                map_memory_bytes: 0,
            });
        };
        let stats = drive.store.stats();
        let state = match &drive.failure {
            Some(reason) => format!("failed: {reason}"),
            None if drive.store.is_ready() => match drive.store.scrub_progress() {
                Some(progress) => format!(
                    "serving, scrubbing {:.1}%",
                    progress.position_blocks as f64 * 100.0 / progress.total_blocks.max(1) as f64
                ),
                None => "serving".into(),
            },
            None if drive.store.is_stopped() => "stopped".into(),
            None => "starting".into(),
        };
        Some(ThinStatsView {
            logical_used_bytes: stats.logical_used_bytes,
            physical_used_bytes: stats.stored_bytes,
            host_bytes_written: stats.host_bytes_written,
            member_bytes_written: stats.member_bytes_written,
            write_amplification: stats.write_amplification,
            compression_ratio: stats.compression_ratio,
            checksum_errors_detected: stats.checksum_errors_detected,
            checksum_errors_repaired: stats.checksum_errors_repaired,
            capacity_bytes: stats.physical_bytes,
            free_bytes: stats.free_bytes,
            cleaning_bytes_written: stats.cleaning_bytes,
            overcommit_ratio: thin.logical_bytes as f64 / stats.physical_bytes.max(1) as f64,
            state,
            map_memory_bytes: stats.map_memory_bytes,
        })
    }

    /// Which parts of a thin drive's range hold data: `(length, allocated)` runs.
    pub(super) fn thin_block_status(
        &self,
        name: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Vec<(u64, bool)> {
        match self.thin.get(name) {
            Some(drive) if drive.store.is_ready() => {
                drive.store.block_status(offset_bytes, len_bytes)
            }
            // Not known yet: say everything holds data, which is always safe.
            _ => vec![(len_bytes, true)],
        }
    }
}
