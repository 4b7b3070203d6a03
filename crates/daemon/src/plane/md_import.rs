//! `dg import-md`: adopting an existing Linux md array (metadata 1.2) as a drive group and one
//! thick virtual drive, with its data in place (`docs/md-import.md`).
//!
//! Everything is read and checked before anything is written. Then each device's original md
//! metadata (the 16 KiB from 4 KiB that Tessera's superblock copy A takes) is saved at
//! [`SAVED_MD_OFFSET_BYTES`], in the reserved zero area of Tessera's layout, and the engine
//! writes the bitmap and the superblocks (which carry the virtual drive) over md's metadata
//! area, before md's data offset.

use super::DataPlane;
use super::admin::{AdminError, random_uuid, unix_seconds};
use super::group::engine_config;
use crate::blob::{GroupConfig, VdRecord};
use crate::devices::{Device, Probe};
use crate::log;
use tessera_api::model::{VdAccessView, validate_name};
use tessera_raid::engine::{CreateSpec, Engine};
use tessera_raid::md::{MD_SUPERBLOCK_OFFSET_BYTES, MD_SUPERBLOCK_READ_BYTES, MdSuperblock};
use tessera_raid::md_import::{MdDevice, plan_import};
use tessera_raid::superblock::{JournalMode, SUPERBLOCK_BYTES};

/// Where each device's original md metadata area is kept: Tessera's reserved zero area
/// (36 KiB to 64 KiB).
pub const SAVED_MD_OFFSET_BYTES: u64 = 36 << 10;
/// How much of md's metadata area is kept: what superblock copy A overwrites (4 KiB to
/// 20 KiB), that is md's superblock and, where mdadm puts it, its bad-block log.
pub const SAVED_MD_BYTES: usize = SUPERBLOCK_BYTES;

/// What an import made.
pub struct MdImported {
    pub dg: u32,
    pub vd: String,
    pub md_uuid: String,
    pub md_name: String,
    pub pds: Vec<u32>,
}

/// One device read for import: opened, with its md metadata area.
struct Candidate {
    device: Device,
    area: Vec<u8>,
}

fn read_candidate(path: &str) -> Result<Candidate, AdminError> {
    let mut device =
        Device::open(path).map_err(|e| AdminError::Invalid(format!("cannot open {e}")))?;
    match device.probe().map_err(AdminError::Invalid)? {
        Probe::Blank => {}
        Probe::Member(superblock) => {
            return Err(AdminError::Conflict(format!(
                "{path} already belongs to drive group {} ({})",
                superblock.name, superblock.group_uuid
            )));
        }
        Probe::Damaged(error) => {
            return Err(AdminError::Conflict(format!(
                "{path} carries damaged Tessera metadata ({error}); it is left untouched"
            )));
        }
    }
    let end = MD_SUPERBLOCK_OFFSET_BYTES + SAVED_MD_BYTES as u64;
    if device.size_bytes < end {
        return Err(AdminError::Invalid(format!(
            "{path} is too small to be an md member"
        )));
    }
    let area = device
        .read_sync(MD_SUPERBLOCK_OFFSET_BYTES, SAVED_MD_BYTES)
        .map_err(AdminError::Invalid)?;
    Ok(Candidate { device, area })
}

impl DataPlane {
    fn name_is_free(&self, name: &str) -> bool {
        self.find_vd(name).is_none()
            && !self
                .groups
                .values()
                .any(|group| group.engine.superblock().name == name)
    }

    /// `dg import-md`: checks the devices and the array, then adopts it. Changes nothing when
    /// it refuses.
    pub fn import_md(
        &mut self,
        paths: Vec<String>,
        name: Option<String>,
    ) -> Result<MdImported, AdminError> {
        if self.stopping {
            return Err(AdminError::Unavailable("the daemon is stopping".into()));
        }
        if paths.is_empty() {
            return Err(AdminError::Invalid("no devices given".into()));
        }
        for (i, path) in paths.iter().enumerate() {
            if paths[..i].contains(path) {
                return Err(AdminError::Invalid(format!("{path} is listed twice")));
            }
            if let Some(drive) = self.drives.values().find(|drive| &drive.path == path) {
                return Err(AdminError::Conflict(format!(
                    "{path} is already physical drive {}",
                    drive.id
                )));
            }
        }
        if let Some(name) = &name {
            validate_name(name).map_err(AdminError::Invalid)?;
            if !self.name_is_free(name) {
                return Err(AdminError::Conflict(format!(
                    "a drive group or virtual drive is already named {name}"
                )));
            }
        }
        // Read and check everything first.
        let mut candidates = Vec::new();
        let mut md_devices = Vec::new();
        for path in &paths {
            let candidate = read_candidate(path)?;
            let superblock = MdSuperblock::decode(&candidate.area[..MD_SUPERBLOCK_READ_BYTES])
                .map_err(|error| AdminError::Invalid(format!("{path}: {error}")))?;
            match superblock.bad_blocks_recorded(&candidate.area) {
                Some(false) => {}
                Some(true) => {
                    return Err(AdminError::Invalid(format!(
                        "md recorded bad blocks on {path} (mdadm --examine-badblocks {path}); replace the device under md first"
                    )));
                }
                None => {
                    return Err(AdminError::Invalid(format!(
                        "md's bad-block log on {path} lies outside the 16 KiB from 4 KiB that the import keeps"
                    )));
                }
            }
            md_devices.push(MdDevice {
                path: path.clone(),
                size_bytes: candidate.device.size_bytes,
                superblock,
            });
            candidates.push(candidate);
        }
        let plan =
            plan_import(&md_devices).map_err(|error| AdminError::Invalid(error.to_string()))?;
        let name = name.or_else(|| {
            let md_name = plan.md_name.clone();
            (validate_name(&md_name).is_ok() && self.name_is_free(&md_name)).then_some(md_name)
        });
        let group_name = name.clone().unwrap_or_else(|| {
            (0..)
                .map(|n| format!("dg{n}"))
                .find(|n| self.name_is_free(n))
                .expect("a name")
        });
        let vd_name = name.unwrap_or_else(|| {
            (0..)
                .map(|n| format!("vd{n}"))
                .find(|n| self.name_is_free(n) && *n != group_name)
                .expect("a name")
        });

        // Keep md's metadata where md never looks and Tessera never writes.
        for (candidate, path) in candidates.iter_mut().zip(&paths) {
            candidate
                .device
                .write_sync(SAVED_MD_OFFSET_BYTES, &candidate.area)
                .map_err(|error| {
                    AdminError::Unavailable(format!("saving the md superblock of {path}: {error}"))
                })?;
        }
        drop(candidates);

        // Manage the devices; undo on failure.
        let mut pds = Vec::new();
        for path in &paths {
            match self.add_drive(path, false, None) {
                Ok(id) => pds.push(id),
                Err(error) => {
                    self.forget_drives(&pds);
                    return Err(error);
                }
            }
        }
        let id = self.next_group_id();
        let smallest_bytes = md_devices
            .iter()
            .map(|d| d.size_bytes)
            .min()
            .expect("devices");
        let member_uuids: Vec<_> = plan.roles.iter().map(|_| random_uuid()).collect();
        let missing_roles: Vec<usize> = (0..plan.roles.len())
            .filter(|&role| plan.roles[role].is_none())
            .collect();
        let config = GroupConfig {
            dg_id: id,
            virtual_drives: vec![VdRecord {
                name: vd_name.clone(),
                offset_bytes: 0,
                size_bytes: plan.array_bytes,
                access: VdAccessView::default(),
                thin: None,
            }],
        };
        let spec = CreateSpec {
            group_uuid: random_uuid(),
            name: group_name.clone(),
            level: plan.level,
            chunk_bytes: plan.chunk_bytes,
            members: plan
                .roles
                .iter()
                .zip(&member_uuids)
                .map(|(device, uuid)| {
                    let size = device.map_or(smallest_bytes, |index| md_devices[index].size_bytes);
                    (*uuid, size)
                })
                .collect(),
            created_unix_seconds: unix_seconds(),
            region_bytes: None,
            journal_bytes: None,
            journal_mode: JournalMode::DegradeOnly,
            journal_device: None,
            rebuild_rate_percent: 30,
            config: config.encode(),
        };
        let engine = match Engine::adopt(
            spec,
            plan.layout,
            &missing_roles,
            engine_config(self.offload_parity),
            self.parity.clone(),
        ) {
            Ok(engine) => engine,
            Err(error) => {
                self.forget_drives(&pds);
                return Err(AdminError::Invalid(error.to_string()));
            }
        };
        let members: Vec<Option<u32>> = plan
            .roles
            .iter()
            .map(|device| device.map(|index| pds[index]))
            .collect();
        self.install_group(id, engine, members, &member_uuids, config);
        log!(
            "md array {} ({}) adopted as drive group {id} ({group_name}), {} over {} roles ({} missing), virtual drive {vd_name} of {} bytes",
            plan.md_name,
            plan.set_uuid,
            plan.level,
            plan.roles.len(),
            missing_roles.len(),
            plan.array_bytes
        );
        self.events.push_info(
            "dg_created",
            format!(
                "drive group {id} ({group_name}) adopted from md array {} ({}): {}, virtual drive {vd_name}",
                plan.md_name, plan.set_uuid, plan.level
            ),
            Some(id),
            None,
        );
        if !missing_roles.is_empty() {
            self.take_spare(id);
        }
        Ok(MdImported {
            dg: id,
            vd: vd_name,
            md_uuid: plan.set_uuid,
            md_name: plan.md_name,
            pds,
        })
    }

    /// Stops managing drives an import added before it failed.
    fn forget_drives(&mut self, pds: &[u32]) {
        for &pd in pds {
            if let Err(error) = self.remove_drive(pd) {
                log!("physical drive {pd} could not be removed after a failed import: {error:?}");
            }
        }
    }
}
