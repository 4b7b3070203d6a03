//! Administrative operations, run on the data plane on behalf of the management API. Each
//! checks everything first and changes nothing when it refuses.

use super::group::{Group, engine_config};
use super::{DataPlane, Drive};
use crate::blob::{GroupConfig, ThinRecord, VdRecord};
use crate::devices::{Device, Probe};
use crate::log;
use crate::state::{DriveRecord, StateFile, UblkExportRecord};
use tessera_api::model::{Compression, SetVd, VdAccessView, canonical_rules};
use tessera_raid::engine::{CreateSpec, Engine};
use tessera_raid::geometry::{DEFAULT_CHUNK_BYTES, Level};
use tessera_raid::superblock::{JournalMode, Uuid};

/// What makes a new virtual drive thin.
pub struct NewThin {
    pub compression: Compression,
    /// The group space its log takes (`None`: the largest free extent).
    pub physical_bytes: Option<u64>,
    /// Free space (percent of its extent) below which a low-space event is raised.
    pub low_space_percent: u8,
}

/// Why an administrative operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// The request itself is wrong (bad value, impossible combination).
    Invalid(String),
    /// Something it names does not exist.
    NotFound(String),
    /// The state forbids it (in use, exists, wrong state).
    Conflict(String),
    /// The daemon cannot do it right now (stopping).
    Unavailable(String),
}

/// Parameters of a new drive group.
pub struct NewGroup {
    pub level: Level,
    pub chunk_bytes: Option<u64>,
    pub drives: Vec<u32>,
    pub name: Option<String>,
    pub journal_mode: JournalMode,
    /// A dedicated journal drive, instead of the members' journal areas.
    pub journal_drive: Option<u32>,
}

pub(crate) fn random_uuid() -> Uuid {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most 16 bytes into the array.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    assert_eq!(filled, 16, "the kernel gives random bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid(bytes)
}

pub(super) fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl DataPlane {
    /// Writes the state directory's file: the drives managed and the ublk exports wanted.
    fn save_state(&self) -> Result<(), AdminError> {
        let state = StateFile {
            drives: self
                .drives
                .values()
                .map(|drive| DriveRecord {
                    id: drive.id,
                    path: drive.path.clone(),
                    spare: drive.spare,
                    spare_for: drive.spare_for,
                })
                .collect(),
            ublk_exports: self
                .ublk
                .wanted
                .iter()
                .map(|(vd, body)| UblkExportRecord {
                    vd: vd.clone(),
                    queues: body.queues,
                    queue_depth: body.queue_depth,
                })
                .collect(),
        };
        self.state.save(&state).map_err(AdminError::Unavailable)
    }

    pub(super) fn save_state_or_log(&self) {
        if let Err(error) = self.save_state() {
            log!("saving the state directory: {error:?}");
        }
    }

    fn drive(&self, id: u32) -> Result<&Drive, AdminError> {
        self.drives
            .get(&id)
            .ok_or_else(|| AdminError::NotFound(format!("no physical drive {id}")))
    }

    /// `pd add`: starts managing a device.
    pub fn add_drive(
        &mut self,
        path: &str,
        spare: bool,
        spare_for: Option<u32>,
    ) -> Result<u32, AdminError> {
        if self.stopping {
            return Err(AdminError::Unavailable("the daemon is stopping".into()));
        }
        if path.is_empty() {
            return Err(AdminError::Invalid("the drive path is empty".into()));
        }
        if let Some(existing) = self.drives.values().find(|drive| drive.path == path) {
            return Err(AdminError::Conflict(format!(
                "{path} is already physical drive {}",
                existing.id
            )));
        }
        if let Some(dg) = spare_for.filter(|dg| !self.groups.contains_key(dg)) {
            return Err(AdminError::NotFound(format!(
                "no drive group {dg} to dedicate the spare to"
            )));
        }
        let mut device =
            Device::open(path).map_err(|e| AdminError::Invalid(format!("cannot open {e}")))?;
        match device.probe().map_err(AdminError::Invalid)? {
            Probe::Blank => {}
            Probe::Member(superblock) => {
                return Err(AdminError::Conflict(format!(
                    "{path} belongs to drive group {} ({}); it is left untouched",
                    superblock.name, superblock.group_uuid
                )));
            }
            Probe::Damaged(error) => {
                return Err(AdminError::Conflict(format!(
                    "{path} carries damaged Tessera metadata ({error}); it is left untouched"
                )));
            }
        }
        let id = (0..)
            .find(|id| !self.drives.contains_key(id))
            .expect("a free id");
        let mut drive = Drive {
            id,
            path: path.into(),
            device: None,
            open_error: None,
            member_uuid: None,
            spare: spare || spare_for.is_some(),
            spare_for,
            group: None,
            damaged: None,
        };
        self.attach_device(&mut drive, device);
        if let Some(fd) = drive.device.as_ref().and_then(super::group::remote_wake_fd) {
            self.arm_remote_wake(id, fd);
        }
        self.drives.insert(id, drive);
        if let Err(error) = self.save_state() {
            self.drives.remove(&id);
            return Err(error);
        }
        log!(
            "physical drive {id} added: {path}{}",
            if spare { " (hot spare)" } else { "" }
        );
        self.events.push_info(
            "pd_added",
            format!("physical drive {id} added: {path}"),
            None,
            Some(id),
        );
        if spare || spare_for.is_some() {
            let groups: Vec<u32> = self.groups.keys().copied().collect();
            for group in groups {
                self.take_spare(group);
            }
        }
        Ok(id)
    }

    /// `pd remove`: stops managing a drive that is in no group.
    pub fn remove_drive(&mut self, id: u32) -> Result<(), AdminError> {
        let drive = self.drive(id)?;
        if let Some((dg, _)) = drive.group {
            return Err(AdminError::Conflict(format!(
                "physical drive {id} is a member of drive group {dg}"
            )));
        }
        let mut drive = self.drives.remove(&id).expect("checked");
        if let Some(tessera_io_member) =
            drive
                .device
                .as_ref()
                .and_then(|device| match &device.handle {
                    crate::devices::Handle::Local(member) => Some(member),
                    _ => None,
                })
        {
            tessera_io_member.detach_from(&mut self.driver);
        }
        drive.device = None;
        self.save_state()?;
        self.events.push_info(
            "pd_removed",
            format!("physical drive {id} removed"),
            None,
            Some(id),
        );
        Ok(())
    }

    /// `pd fail`: takes a member out of service as a failure would.
    pub fn fail_drive(&mut self, id: u32) -> Result<(), AdminError> {
        let (dg, member) = self.drive(id)?.group.ok_or_else(|| {
            AdminError::Conflict(format!("physical drive {id} is in no drive group"))
        })?;
        let group = self.groups.get_mut(&dg).expect("drive's group exists");
        group.engine.fail_member_admin(member);
        self.events.push_warning(
            "pd_fail_requested",
            format!("physical drive {id} failed by administrator"),
            Some(dg),
            Some(id),
        );
        Ok(())
    }

    /// `pd online`: a failed member comes back and is rebuilt.
    pub fn online_drive(&mut self, id: u32) -> Result<(), AdminError> {
        let (dg, member) = self.drive(id)?.group.ok_or_else(|| {
            AdminError::Conflict(format!("physical drive {id} is in no drive group"))
        })?;
        let group = self.groups.get_mut(&dg).expect("drive's group exists");
        group
            .engine
            .readmit_member(member)
            .map_err(|e| AdminError::Conflict(format!("physical drive {id}: {e}")))?;
        self.events.push_info(
            "pd_online",
            format!("physical drive {id} back online; rebuilding it"),
            Some(dg),
            Some(id),
        );
        Ok(())
    }

    /// `pd replace OLD NEW`: rebuilds (or copies) member OLD's role onto drive NEW.
    pub fn replace_drive(&mut self, old: u32, new: u32) -> Result<u32, AdminError> {
        let (dg, member) = self.drive(old)?.group.ok_or_else(|| {
            AdminError::Conflict(format!("physical drive {old} is in no drive group"))
        })?;
        let new_drive = self.drive(new)?;
        if new_drive.group.is_some() {
            return Err(AdminError::Conflict(format!(
                "physical drive {new} is already in a drive group"
            )));
        }
        let Some(device) = &new_drive.device else {
            return Err(AdminError::Conflict(format!(
                "physical drive {new} is missing"
            )));
        };
        let size_bytes = device.size_bytes;
        let group = self.groups.get_mut(&dg).expect("drive's group exists");
        let role = group
            .engine
            .superblock()
            .members
            .iter()
            .find(|record| Some(record.uuid) == self.drives[&old].member_uuid)
            .and_then(|record| record.role)
            .map(usize::from);
        let role = role
            .or_else(|| {
                group
                    .engine
                    .status()
                    .members
                    .get(member)
                    .and_then(|m| m.role)
            })
            .ok_or_else(|| AdminError::Conflict(format!("physical drive {old} holds no role")))?;
        let uuid = random_uuid();
        let index = group
            .engine
            .replace_member(role, uuid, size_bytes)
            .map_err(|e| AdminError::Conflict(e.to_string()))?;
        if group.members.len() <= index {
            group.members.resize(index + 1, None);
        }
        group.members[index] = Some(new);
        let drive = self.drives.get_mut(&new).expect("checked");
        drive.group = Some((dg, index));
        drive.member_uuid = Some(uuid);
        drive.spare = false;
        drive.spare_for = None;
        let _ = self.save_state();
        self.events.push_info(
            "pd_replace",
            format!("physical drive {new} replaces drive {old} in drive group {dg}"),
            Some(dg),
            Some(new),
        );
        Ok(dg)
    }

    /// After a member failed: a suitable hot spare, dedicated first, takes its role.
    pub(crate) fn take_spare(&mut self, dg: u32) {
        let was_waiting = self.spare_retry.remove(&dg);
        let Some(group) = self.groups.get(&dg) else {
            return;
        };
        let status = group.engine.status();
        if status.rebuild.is_some() || status.state == tessera_raid::engine::GroupState::Failed {
            return;
        }
        let roles = group.engine.geometry().members();
        let needed = group.engine.superblock().data_offset_bytes
            + group.engine.geometry().member_data_bytes();
        let Some(role) = (0..roles).find(|&role| {
            !status
                .members
                .iter()
                .any(|m| m.role == Some(role) && (m.state == "online" || m.state == "rebuilding"))
        }) else {
            return;
        };
        let mut candidates: Vec<&Drive> = self
            .drives
            .values()
            .filter(|drive| {
                drive.spare
                    && drive.group.is_none()
                    && drive.spare_for.is_none_or(|for_dg| for_dg == dg)
            })
            .filter(|drive| {
                drive
                    .device
                    .as_ref()
                    .is_some_and(|device| device.size_bytes >= needed)
            })
            .collect();
        candidates.sort_by_key(|drive| {
            (
                drive.spare_for.is_none(),
                drive.device.as_ref().map(|d| d.size_bytes),
            )
        });
        let Some(spare) = candidates.first().map(|drive| drive.id) else {
            self.events.push_warning(
                "no_spare",
                format!("drive group {dg} is degraded and no hot spare fits"),
                Some(dg),
                None,
            );
            return;
        };
        let old = status
            .members
            .iter()
            .enumerate()
            .find(|(_, m)| m.role == Some(role))
            .and_then(|(index, _)| group.members.get(index).copied().flatten());
        let size_bytes = self.drives[&spare]
            .device
            .as_ref()
            .expect("checked")
            .size_bytes;
        let uuid = random_uuid();
        let group = self.groups.get_mut(&dg).expect("checked");
        match group.engine.replace_member(role, uuid, size_bytes) {
            Ok(index) => {
                if group.members.len() <= index {
                    group.members.resize(index + 1, None);
                }
                group.members[index] = Some(spare);
                let drive = self.drives.get_mut(&spare).expect("checked");
                drive.group = Some((dg, index));
                drive.member_uuid = Some(uuid);
                drive.spare = false;
                drive.spare_for = None;
                let _ = self.save_state();
                log!("hot spare {spare} takes role {role} of drive group {dg}");
                self.events.push_warning(
                    "spare_taken",
                    format!(
                        "hot spare {spare} replaces {} in drive group {dg}",
                        old.map_or("a lost member".into(), |d| format!("drive {d}"))
                    ),
                    Some(dg),
                    Some(spare),
                );
            }
            Err(tessera_raid::engine::AdminError::PoolFull) => {
                // Host I/O holds every buffer for now; the spare must not be forgotten.
                self.spare_retry.insert(dg);
                if !was_waiting {
                    log!("hot spare {spare} waits for buffers to join drive group {dg}");
                }
            }
            Err(error) => log!("hot spare {spare} not used: {error}"),
        }
    }

    /// `dg create`.
    pub fn create_group(&mut self, request: NewGroup) -> Result<u32, AdminError> {
        if self.stopping {
            return Err(AdminError::Unavailable("the daemon is stopping".into()));
        }
        if request.drives.is_empty() {
            return Err(AdminError::Invalid(
                "a drive group needs physical drives".into(),
            ));
        }
        // The journal drive, if any, is checked like the members and becomes the member after
        // the last role.
        let all_drives: Vec<u32> = request
            .drives
            .iter()
            .copied()
            .chain(request.journal_drive)
            .collect();
        for (i, id) in all_drives.iter().enumerate() {
            if all_drives[..i].contains(id) {
                return Err(AdminError::Invalid(format!(
                    "physical drive {id} is listed twice"
                )));
            }
            let drive = self.drive(*id)?;
            if let Some((dg, _)) = drive.group {
                return Err(AdminError::Conflict(format!(
                    "physical drive {id} is already in drive group {dg}"
                )));
            }
            if drive.spare {
                return Err(AdminError::Conflict(format!(
                    "physical drive {id} is a hot spare"
                )));
            }
            if drive.device.is_none() {
                return Err(AdminError::Conflict(format!(
                    "physical drive {id} is missing"
                )));
            }
            if let Some(damaged) = &drive.damaged {
                return Err(AdminError::Conflict(format!(
                    "physical drive {id} carries damaged Tessera metadata ({damaged})"
                )));
            }
        }
        let name = match request.name {
            Some(name) => {
                if self
                    .groups
                    .values()
                    .any(|group| group.engine.superblock().name == name)
                {
                    return Err(AdminError::Conflict(format!(
                        "a drive group is already named {name}"
                    )));
                }
                name
            }
            None => (0..)
                .map(|n| format!("dg{n}"))
                .find(|n| {
                    !self
                        .groups
                        .values()
                        .any(|g| &g.engine.superblock().name == n)
                })
                .expect("a name"),
        };
        let id = self.next_group_id();
        let member_uuids: Vec<Uuid> = all_drives.iter().map(|_| random_uuid()).collect();
        let size_of = |drive: &u32| {
            self.drives[drive]
                .device
                .as_ref()
                .expect("checked")
                .size_bytes
        };
        let spec = CreateSpec {
            group_uuid: random_uuid(),
            name: name.clone(),
            level: request.level,
            chunk_bytes: request.chunk_bytes.unwrap_or(DEFAULT_CHUNK_BYTES),
            members: request
                .drives
                .iter()
                .zip(&member_uuids)
                .map(|(drive, uuid)| (*uuid, size_of(drive)))
                .collect(),
            created_unix_seconds: unix_seconds(),
            region_bytes: None,
            journal_bytes: None,
            journal_mode: request.journal_mode,
            journal_device: request
                .journal_drive
                .map(|drive| (member_uuids[request.drives.len()], size_of(&drive))),
            rebuild_rate_percent: 30,
            config: GroupConfig {
                dg_id: id,
                virtual_drives: Vec::new(),
            }
            .encode(),
        };
        let engine = Engine::create(
            spec,
            engine_config(self.offload_parity),
            self.parity.clone(),
        )
        .map_err(|e| AdminError::Invalid(e.to_string()))?;
        let size = engine.data_bytes();
        let members = all_drives.iter().map(|d| Some(*d)).collect();
        let config = GroupConfig {
            dg_id: id,
            virtual_drives: Vec::new(),
        };
        self.install_group(id, engine, members, &member_uuids, config);
        log!(
            "drive group {id} ({name}) created: {} over {} drives, {size} bytes",
            request.level,
            request.drives.len()
        );
        self.events.push_info(
            "dg_created",
            format!("drive group {id} ({name}) created: {}", request.level),
            Some(id),
            None,
        );
        Ok(id)
    }

    /// Takes a new engine in as drive group `id`: `members` names the physical drive of each
    /// member (none for a missing role), which learns its place and member UUID.
    pub(super) fn install_group(
        &mut self,
        id: u32,
        engine: Engine,
        members: Vec<Option<u32>>,
        member_uuids: &[Uuid],
        config: GroupConfig,
    ) {
        assert_eq!(members.len(), member_uuids.len(), "a UUID per member");
        for (index, (drive, uuid)) in members.iter().zip(member_uuids).enumerate() {
            let Some(drive) = drive else { continue };
            let drive = self.drives.get_mut(drive).expect("a managed drive");
            drive.group = Some((id, index));
            drive.member_uuid = Some(*uuid);
        }
        self.groups.insert(
            id,
            Group {
                id,
                engine,
                members,
                config,
                computing: 0,
            },
        );
    }

    /// Finds a group by id or name.
    pub fn find_group(&self, reference: &tessera_api::model::DgRef) -> Result<u32, AdminError> {
        self.groups
            .values()
            .find(|group| reference.matches(group.id, &group.engine.superblock().name))
            .map(|group| group.id)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {reference}")))
    }

    /// `dg delete`, first step: refuses or stops the group. Returns true when the group can be
    /// removed at once (call `finish_delete_group` once it has stopped).
    pub fn begin_delete_group(&mut self, dg: u32, force: bool) -> Result<(), AdminError> {
        let group = self
            .groups
            .get(&dg)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {dg}")))?;
        if !group.config.virtual_drives.is_empty() && !force {
            let names: Vec<&str> = group
                .config
                .virtual_drives
                .iter()
                .map(|vd| vd.name.as_str())
                .collect();
            return Err(AdminError::Conflict(format!(
                "drive group {dg} still holds virtual drives ({}); delete them or use --force",
                names.join(", ")
            )));
        }
        let names: Vec<String> = group
            .config
            .virtual_drives
            .iter()
            .map(|vd| vd.name.clone())
            .collect();
        // With --force, the API removed the drives' live ublk devices before this call.
        if let Some((name, device)) = names
            .iter()
            .find_map(|name| Some((name, self.ublk_device_of(name)?)))
        {
            return Err(AdminError::Conflict(format!(
                "virtual drive {name} of drive group {dg} is exported over ublk as {device}; \
                 remove it with `tessera vd unexport {name} --ublk` first"
            )));
        }
        for name in names {
            self.close_vd_connections(&name);
            self.drop_thin(&name);
        }
        self.groups.get_mut(&dg).expect("checked").engine.stop();
        Ok(())
    }

    /// Whether a stopping group has stopped.
    pub fn group_stopped(&self, dg: u32) -> bool {
        self.groups.get(&dg).is_none_or(|group| {
            group.computing == 0
                && (group.engine.is_stopped()
                    || group.engine.state() == tessera_raid::engine::GroupState::Failed)
        })
    }

    /// `dg delete`, last step: erases the members' superblocks and forgets the group.
    pub fn finish_delete_group(&mut self, dg: u32) -> Result<(), AdminError> {
        let group = self
            .groups
            .remove(&dg)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {dg}")))?;
        for vd in &group.config.virtual_drives {
            self.forget_ublk_export(&vd.name);
        }
        for drive_id in group.members.iter().flatten() {
            if let Some(drive) = self.drives.get_mut(drive_id) {
                drive.group = None;
                drive.member_uuid = None;
                if let Some(device) = drive.device.as_mut()
                    && let Err(error) = device.erase_superblocks()
                {
                    log!("drive {drive_id}: could not erase its superblocks: {error}");
                }
            }
        }
        self.events.push_info(
            "dg_deleted",
            format!("drive group {dg} deleted"),
            Some(dg),
            None,
        );
        Ok(())
    }

    /// The alignment of virtual drives in a group: whole stripes, and at least 1 MiB.
    fn vd_alignment(group: &Group) -> u64 {
        let stripe = group.engine.geometry().stripe_data_bytes();
        (1u64 << 20).div_ceil(stripe) * stripe
    }

    /// `vd create`: places the drive and records it; returns the superblock generation that
    /// will carry it (the caller waits until it is durable).
    pub fn create_vd(
        &mut self,
        dg: u32,
        name: Option<String>,
        size_bytes: u64,
        access: VdAccessView,
        thin: Option<NewThin>,
    ) -> Result<(String, u64), AdminError> {
        let access = VdAccessView {
            allow: canonical_rules(&access.allow).map_err(AdminError::Invalid)?,
            ..access
        };
        if size_bytes == 0 {
            return Err(AdminError::Invalid(
                "the size must be more than 0 bytes".into(),
            ));
        }
        let name = match name {
            Some(name) => {
                tessera_api::model::validate_name(&name).map_err(AdminError::Invalid)?;
                name
            }
            None => (0..)
                .map(|n| format!("vd{n}"))
                .find(|n| self.find_vd(n).is_none())
                .expect("a name"),
        };
        if self.find_vd(&name).is_some() {
            return Err(AdminError::Conflict(format!(
                "a virtual drive is already named {name}"
            )));
        }
        let group = self
            .groups
            .get_mut(&dg)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {dg}")))?;
        let size_bytes = size_bytes.div_ceil(4096) * 4096;
        let data_bytes = group.engine.data_bytes();
        let align = DataPlane::vd_alignment(group);
        let extent_bytes = match &thin {
            None => size_bytes,
            Some(NewThin {
                physical_bytes: Some(physical),
                ..
            }) => physical.div_ceil(align) * align,
            Some(NewThin {
                physical_bytes: None,
                ..
            }) => group
                .config
                .largest_space(align, data_bytes)
                .map_or(0, |(_, size)| size / align * align),
        };
        let offset_bytes = group
            .config
            .find_space(extent_bytes, align, data_bytes)
            .filter(|_| extent_bytes > 0)
            .ok_or_else(|| {
                let free = group.config.free_bytes(data_bytes);
                AdminError::Conflict(if extent_bytes == 0 {
                    format!("drive group {dg} has no free space for a thin drive's log ({free} bytes free in all)")
                } else {
                    format!("drive group {dg} has no free extent of {extent_bytes} bytes ({free} bytes free in all)")
                })
            })?;
        let record = VdRecord {
            name: name.clone(),
            offset_bytes,
            size_bytes: extent_bytes,
            access,
            thin: thin.map(|thin| ThinRecord {
                logical_bytes: size_bytes,
                compression: thin.compression,
                low_space_percent: thin.low_space_percent,
                store_id: u64::from_le_bytes(random_uuid().0[..8].try_into().expect("8 bytes")),
            }),
        };
        // The space a thin drive's log can use: its extent less the checkpoint slots.
        let mut capacity_bytes = extent_bytes;
        if let Some(thin) = &record.thin {
            let layout = super::thin::check_layout(group, &record, thin).map_err(|error| {
                AdminError::Conflict(format!(
                    "a thin drive cannot live in {extent_bytes} bytes of drive group {dg}: {error}"
                ))
            })?;
            capacity_bytes = layout.data_bytes();
        }
        let mut config = group.config.clone();
        config.virtual_drives.push(record.clone());
        let generation = store_config(
            group,
            config,
            "holds as many virtual drives as its superblock can record",
        )?;
        let message = match &record.thin {
            None => format!("virtual drive {name} created on drive group {dg}: {size_bytes} bytes"),
            Some(thin) => format!(
                "thin virtual drive {name} created on drive group {dg}: {size_bytes} bytes seen by hosts over {capacity_bytes} bytes of the group (overcommitted {:.2}x), {} compression",
                size_bytes as f64 / capacity_bytes as f64,
                thin.compression
            ),
        };
        self.events.push_info("vd_created", message, Some(dg), None);
        if record.thin.is_some() {
            self.start_thin(&name, true).map_err(AdminError::Invalid)?;
        }
        Ok((name, generation))
    }

    /// `vd delete`.
    pub fn delete_vd(&mut self, name: &str, force: bool) -> Result<(u32, u64), AdminError> {
        let (group, _) = self
            .find_vd(name)
            .ok_or_else(|| AdminError::NotFound(format!("no virtual drive {name}")))?;
        let dg = group.id;
        let connections = self.vd_connections(name);
        if connections > 0 && !force {
            return Err(AdminError::Conflict(format!(
                "virtual drive {name} has {connections} client connection(s); disconnect them or use --force"
            )));
        }
        // With --force, the API removed a live ublk device before this call (its removal
        // needs the data plane); one starting or stopping meanwhile keeps the drive.
        if let Some(device) = self.ublk_device_of(name) {
            return Err(AdminError::Conflict(if force {
                format!("virtual drive {name}: {device} is starting or stopping; try again")
            } else {
                format!(
                    "virtual drive {name} is exported over ublk as {device}; remove it with \
                     `tessera vd unexport {name} --ublk` or use --force"
                )
            }));
        }
        self.close_vd_connections(name);
        self.drop_thin(name);
        self.forget_ublk_export(name);
        let group = self.groups.get_mut(&dg).expect("found");
        group.config.virtual_drives.retain(|vd| vd.name != name);
        let generation = group.engine.set_config(group.config.encode());
        self.events.push_info(
            "vd_deleted",
            format!("virtual drive {name} deleted"),
            Some(dg),
            None,
        );
        Ok((dg, generation))
    }

    /// `dg set`: rebuild and scrub rates, and the rebuild latency target. Returns the superblock
    /// generation that records them.
    pub fn update_group(
        &mut self,
        dg: u32,
        rebuild_rate: Option<u32>,
        scrub_rate: Option<u32>,
        latency_target_us: Option<u32>,
        journal: Option<JournalMode>,
    ) -> Result<u64, AdminError> {
        let group = self
            .groups
            .get_mut(&dg)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {dg}")))?;
        let percent = |value: u32, what: &str| -> Result<u8, AdminError> {
            u8::try_from(value)
                .ok()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| {
                    AdminError::Invalid(format!(
                        "the {what} rate is a percentage from 1 to 100, not {value}"
                    ))
                })
        };
        let rebuild = rebuild_rate.map(|v| percent(v, "rebuild")).transpose()?;
        let scrub = scrub_rate.map(|v| percent(v, "scrub")).transpose()?;
        if let Some(rate) = rebuild {
            group
                .engine
                .set_rebuild_rate(rate)
                .map_err(|e| AdminError::Invalid(e.to_string()))?;
        }
        if let Some(rate) = scrub {
            group
                .engine
                .set_scrub_rate(rate)
                .map_err(|e| AdminError::Invalid(e.to_string()))?;
        }
        if let Some(target) = latency_target_us {
            group.engine.set_rebuild_latency_target(target);
        }
        if let Some(mode) = journal {
            group
                .engine
                .set_journal_mode(mode)
                .map_err(|e| AdminError::Invalid(e.to_string()))?;
        }
        let generation = group.engine.set_config(group.config.encode());
        self.events.push_info(
            "dg_settings",
            format!(
                "drive group {dg}: settings changed (rebuild rate {:?}, scrub rate {:?}, latency target {:?} us, journal {:?})",
                rebuild,
                scrub,
                latency_target_us,
                journal.map(|mode| mode.name())
            ),
            Some(dg),
            None,
        );
        Ok(generation)
    }

    /// `dg scrub`.
    pub fn scrub_group(&mut self, dg: u32, repair: bool) -> Result<(), AdminError> {
        let group = self
            .groups
            .get_mut(&dg)
            .ok_or_else(|| AdminError::NotFound(format!("no drive group {dg}")))?;
        group
            .engine
            .start_scrub(repair)
            .map_err(|e| AdminError::Conflict(format!("drive group {dg}: {e}")))?;
        // Thin drives check every live block against its checksum as well (a bad one is
        // always repaired: it is moved, nothing is overwritten).
        let thin: Vec<String> = self
            .thin
            .iter_mut()
            .filter(|(_, drive)| drive.group == dg)
            .filter_map(|(name, drive)| drive.store.start_scrub().then(|| name.clone()))
            .collect();
        self.events.push_info(
            "scrub_started",
            format!(
                "drive group {dg}: scrub{} started{}",
                if repair { " (repair)" } else { "" },
                if thin.is_empty() {
                    String::new()
                } else {
                    format!("; checksums of thin virtual drives {}", thin.join(", "))
                }
            ),
            Some(dg),
            None,
        );
        Ok(())
    }

    /// Whether superblock generation `generation` of group `dg` is durable.
    pub fn generation_durable(&self, dg: u32, generation: u64) -> bool {
        self.groups
            .get(&dg)
            .is_none_or(|group| group.engine.durable_generation() >= generation)
    }

    /// `vd set`: changes a drive's access and closes the connections it no longer allows.
    /// Returns the group and the superblock generation that will carry the change.
    pub fn set_vd_access(&mut self, name: &str, change: SetVd) -> Result<(u32, u64), AdminError> {
        let (group, vd) = self
            .find_vd(name)
            .ok_or_else(|| AdminError::NotFound(format!("no virtual drive {name}")))?;
        let dg = group.id;
        let mut access = vd.access.clone();
        if let Some(allow) = &change.allow {
            access.allow = canonical_rules(allow).map_err(AdminError::Invalid)?;
        }
        access.read_only = change.read_only.unwrap_or(access.read_only);
        access.multi_conn = change.multi_conn.unwrap_or(access.multi_conn);
        access.tls_required = change.tls_required.unwrap_or(access.tls_required);
        let grown = match change.physical_bytes {
            Some(physical_bytes) => self.grown_extent(name, physical_bytes)?,
            None => None,
        };
        let group = self.groups.get_mut(&dg).expect("found");
        let mut config = group.config.clone();
        let record = config
            .virtual_drives
            .iter_mut()
            .find(|vd| vd.name == name)
            .expect("found");
        record.access = access.clone();
        if let Some(extent_bytes) = grown {
            let before = record.size_bytes;
            record.size_bytes = extent_bytes;
            self.events.push_info(
                "thin_grown",
                format!(
                    "thin virtual drive {name}: physical space grown from {before} to {extent_bytes} bytes of drive group {dg}"
                ),
                Some(dg),
                None,
            );
        }
        let generation = store_config(
            group,
            config,
            "has no room in its superblock for these access rules",
        )?;
        let closed = self.enforce_vd_access(name);
        self.ublk_access_changed(name);
        let rules = if access.allow.is_empty() {
            "any client".to_string()
        } else {
            access.allow.join(", ")
        };
        self.events.push_info(
            "vd_access_changed",
            format!(
                "virtual drive {name}: allowed {rules}; {}, {}; {closed} connection(s) closed",
                if access.read_only {
                    "read-only"
                } else {
                    "writable"
                },
                if access.multi_conn {
                    "several writers"
                } else {
                    "one writer at a time"
                }
            ),
            Some(dg),
            None,
        );
        Ok((dg, generation))
    }

    /// The extent thin drive `name` takes when its physical space grows to `physical_bytes`
    /// (rounded up like at creation), or `None` when that is its size already. Refused for a
    /// thick drive, a store that is not serving, a smaller size, or group space after the
    /// drive's that another drive holds or that does not exist.
    fn grown_extent(&self, name: &str, physical_bytes: u64) -> Result<Option<u64>, AdminError> {
        let (group, vd) = self.find_vd(name).expect("found by the caller");
        let Some(thin) = &vd.thin else {
            return Err(AdminError::Invalid(format!(
                "virtual drive {name} is not thin: only a thin drive's physical space can grow"
            )));
        };
        if !self
            .thin
            .get(name)
            .is_some_and(|drive| drive.store.is_ready())
        {
            return Err(AdminError::Conflict(format!(
                "thin virtual drive {name} is not serving (starting, stopping or failed); try again when it is"
            )));
        }
        let align = DataPlane::vd_alignment(group);
        let extent_bytes = physical_bytes.div_ceil(align) * align;
        if extent_bytes == vd.size_bytes {
            return Ok(None);
        }
        if extent_bytes < vd.size_bytes {
            return Err(AdminError::Invalid(format!(
                "thin virtual drive {name} takes {} bytes of its group; its physical space can grow, not shrink",
                vd.size_bytes
            )));
        }
        let end = vd.offset_bytes + extent_bytes;
        let data_bytes = group.engine.data_bytes();
        if end > data_bytes {
            return Err(AdminError::Conflict(format!(
                "drive group {} ends {} bytes after the start of {name}; it cannot take {extent_bytes} bytes",
                group.id,
                data_bytes - vd.offset_bytes
            )));
        }
        if let Some(next) = group.config.virtual_drives.iter().find(|other| {
            other.name != name
                && other.offset_bytes < end
                && other.offset_bytes + other.size_bytes > vd.offset_bytes
        }) {
            return Err(AdminError::Conflict(format!(
                "the group space after thin virtual drive {name} is taken by virtual drive {}; it can grow by at most {} bytes",
                next.name,
                next.offset_bytes
                    .saturating_sub(vd.offset_bytes + vd.size_bytes)
            )));
        }
        let mut grown = vd.clone();
        grown.size_bytes = extent_bytes;
        super::thin::check_layout(group, &grown, thin).map_err(AdminError::Invalid)?;
        Ok(Some(extent_bytes))
    }

    pub(crate) fn find_vd(&self, name: &str) -> Option<(&Group, &VdRecord)> {
        self.groups.values().find_map(|group| {
            group
                .config
                .virtual_drives
                .iter()
                .find(|vd| vd.name == name)
                .map(|vd| (group, vd))
        })
    }
}

/// Makes `config` the group's configuration, recorded in the next superblock; refused (saying
/// the group `too_big`) when the blob does not fit. Returns that superblock's generation.
fn store_config(group: &mut Group, config: GroupConfig, too_big: &str) -> Result<u64, AdminError> {
    let blob = config.encode();
    if blob.len() > tessera_raid::superblock::MAX_CONFIG_BYTES {
        return Err(AdminError::Conflict(format!(
            "drive group {} {too_big}",
            group.id
        )));
    }
    group.config = config;
    Ok(group.engine.set_config(blob))
}
