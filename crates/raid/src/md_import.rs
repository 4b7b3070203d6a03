//! Deciding whether an md array can be adopted, and how: a pure function of the md
//! superblocks read from the devices offered (`docs/md-import.md`). The daemon does the I/O.

use crate::geometry::{Geometry, Level, MAX_CHUNK_BYTES, MAX_MEMBERS, MIN_CHUNK_BYTES};
use crate::layout::{AdoptedLayoutError, MemberLayout, adopted_layout};
use crate::md::{
    FEATURE_BITMAP_OFFSET, FEATURE_CLUSTERED, FEATURE_JOURNAL, FEATURE_MULTIPLE_PPLS,
    FEATURE_NEW_OFFSET, FEATURE_PPL, FEATURE_RECOVERY_OFFSET, FEATURE_REPLACEMENT,
    FEATURE_RESHAPE_ACTIVE, LAYOUT_LEFT_SYMMETRIC, LAYOUT_RAID10_NEAR2, MD_MAX_SECTOR,
    MD_SECTOR_BYTES, MdSuperblock,
};
use std::fmt;

/// One device offered for import: its size and the md superblock read from it.
#[derive(Clone, Debug)]
pub struct MdDevice {
    pub path: String,
    pub size_bytes: u64,
    pub superblock: MdSuperblock,
}

/// How an md array becomes a drive group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportPlan {
    pub level: Level,
    pub chunk_bytes: u64,
    /// For every md role (slot) in order, the index of the device offered for it; `None` for
    /// a member missing from the array, which becomes a failed member.
    pub roles: Vec<Option<usize>>,
    /// Where Tessera's metadata and md's data go on every member.
    pub layout: MemberLayout,
    /// The array's size: what the virtual drive holds.
    pub array_bytes: u64,
    /// md's name for the array, without its `host:` prefix.
    pub md_name: String,
    /// md's set UUID as mdadm prints it.
    pub set_uuid: String,
}

/// Why an md array is not adopted. Each message says what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MdImportError {
    /// No devices were offered.
    NoDevices,
    /// Devices of different md arrays.
    MixedArrays { path: String, other_path: String },
    /// A member whose superblock is older than the others' (it missed writes).
    Stale {
        path: String,
        events: u64,
        newest_events: u64,
    },
    /// A device that is a spare, faulty or journal device in the array.
    NotActive { path: String },
    /// Two devices claim the same role, or a role beyond the array's member count.
    BadRole { path: String, role: u32 },
    /// A RAID level or layout Tessera does not place data like.
    Unsupported(String),
    /// The array needs a resync (it was not stopped cleanly).
    NotClean,
    /// A reshape (or a member replacement, or a recovery) is in progress.
    Busy(String),
    /// The array has an internal write-intent bitmap (or a journal, or PPL).
    Bitmap,
    /// More members are missing than the level survives.
    TooDegraded { missing: usize, level: Level },
    /// Members disagree on where the data lies or how big it is.
    Inconsistent(String),
    /// Not enough room before md's data for Tessera's metadata.
    NoRoom {
        data_offset_bytes: u64,
        needed_bytes: u64,
    },
}

impl fmt::Display for MdImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MdImportError::NoDevices => write!(f, "no devices given"),
            MdImportError::MixedArrays { path, other_path } => {
                write!(f, "{path} and {other_path} belong to different md arrays")
            }
            MdImportError::Stale {
                path,
                events,
                newest_events,
            } => write!(
                f,
                "{path} is stale (md events {events}, the array is at {newest_events}): leave it out, and it can be added back as a spare to be rebuilt"
            ),
            MdImportError::NotActive { path } => write!(
                f,
                "{path} is a spare or a faulty member of the md array, not an active one: leave it out"
            ),
            MdImportError::BadRole { path, role } => {
                write!(
                    f,
                    "{path} claims md role {role}, which is out of range or taken"
                )
            }
            MdImportError::Unsupported(what) => write!(f, "unsupported md array: {what}"),
            MdImportError::NotClean => write!(
                f,
                "the array was not stopped cleanly; run it under md until it resyncs, stop it, then import"
            ),
            MdImportError::Busy(what) => write!(
                f,
                "{what} is in progress; let md finish it, stop the array, then import"
            ),
            MdImportError::Bitmap => write!(
                f,
                "the array has an internal write-intent bitmap (or a journal or PPL); remove it with mdadm --grow --bitmap=none first"
            ),
            MdImportError::TooDegraded { missing, level } => write!(
                f,
                "{missing} members of the {level} array are missing, more than it survives"
            ),
            MdImportError::Inconsistent(what) => write!(f, "the members disagree: {what}"),
            MdImportError::NoRoom {
                data_offset_bytes,
                needed_bytes,
            } => write!(
                f,
                "md's data starts {data_offset_bytes} bytes into each member, but Tessera's metadata needs {needed_bytes} bytes before the data (recreate the array with mdadm --data-offset, or use a smaller chunk)"
            ),
        }
    }
}

impl std::error::Error for MdImportError {}

/// The largest power-of-two chunk up to 64 KiB that divides `bytes` (RAID1 has no chunk in
/// md; Tessera's stripes must tile md's per-member size exactly).
fn mirror_chunk_bytes(bytes: u64) -> u64 {
    let mut chunk = 64 << 10;
    while chunk > MIN_CHUNK_BYTES && !bytes.is_multiple_of(chunk) {
        chunk /= 2;
    }
    chunk
}

/// Checks the devices and plans the adoption.
pub fn plan_import(devices: &[MdDevice]) -> Result<ImportPlan, MdImportError> {
    let first = devices.first().ok_or(MdImportError::NoDevices)?;
    for device in &devices[1..] {
        if device.superblock.set_uuid != first.superblock.set_uuid {
            return Err(MdImportError::MixedArrays {
                path: first.path.clone(),
                other_path: device.path.clone(),
            });
        }
    }
    let newest_events = devices
        .iter()
        .map(|d| d.superblock.events)
        .max()
        .expect("at least one device");
    if let Some(stale) = devices.iter().find(|d| d.superblock.events < newest_events) {
        return Err(MdImportError::Stale {
            path: stale.path.clone(),
            events: stale.superblock.events,
            newest_events,
        });
    }
    // Every member of one events count carries the same array-wide fields; check them once.
    let sb = &first.superblock;
    let level = match sb.level {
        0 => Level::Raid0,
        1 => Level::Raid1,
        5 => Level::Raid5,
        6 => Level::Raid6,
        10 => Level::Raid10,
        other => return Err(MdImportError::Unsupported(format!("md level {other}"))),
    };
    let layout_ok = match level {
        Level::Raid5 | Level::Raid6 => sb.layout == LAYOUT_LEFT_SYMMETRIC,
        Level::Raid10 => sb.layout == LAYOUT_RAID10_NEAR2,
        // RAID1 has no layout; RAID0's layout only matters with members of unequal sizes,
        // which are refused below.
        Level::Raid0 | Level::Raid1 => true,
    };
    if !layout_ok {
        return Err(MdImportError::Unsupported(format!(
            "{level} layout {:#x} (only {} is supported)",
            sb.layout,
            level.layout_name()
        )));
    }
    let members = sb.raid_disks as usize;
    if members < level.min_members() || members > MAX_MEMBERS {
        return Err(MdImportError::Unsupported(format!(
            "{members} members for {level}"
        )));
    }
    for device in devices {
        let features = device.superblock.feature_map;
        if features & FEATURE_RESHAPE_ACTIVE != 0 || features & FEATURE_NEW_OFFSET != 0 {
            return Err(MdImportError::Busy("a reshape".into()));
        }
        if features & FEATURE_REPLACEMENT != 0 {
            return Err(MdImportError::Busy(format!(
                "a replacement onto {}",
                device.path
            )));
        }
        if features & FEATURE_RECOVERY_OFFSET != 0 {
            return Err(MdImportError::Busy(format!(
                "the recovery of {}",
                device.path
            )));
        }
        if features
            & (FEATURE_BITMAP_OFFSET | FEATURE_JOURNAL | FEATURE_PPL | FEATURE_MULTIPLE_PPLS)
            != 0
        {
            return Err(MdImportError::Bitmap);
        }
        if features & FEATURE_CLUSTERED != 0 {
            return Err(MdImportError::Unsupported("a clustered array".into()));
        }
        if device.superblock.resync_offset_sectors != MD_MAX_SECTOR {
            return Err(MdImportError::NotClean);
        }
    }
    // Roles.
    let mut roles: Vec<Option<usize>> = vec![None; members];
    for (index, device) in devices.iter().enumerate() {
        let role = device
            .superblock
            .role()
            .ok_or_else(|| MdImportError::NotActive {
                path: device.path.clone(),
            })?;
        let slot = roles
            .get_mut(role as usize)
            .filter(|slot| slot.is_none())
            .ok_or_else(|| MdImportError::BadRole {
                path: device.path.clone(),
                role,
            })?;
        *slot = Some(index);
    }
    // Where the data lies: the same on every member (Tessera's layout is per group).
    let data_offset_sectors = sb.data_offset_sectors;
    if let Some(other) = devices
        .iter()
        .find(|d| d.superblock.data_offset_sectors != data_offset_sectors)
    {
        return Err(MdImportError::Inconsistent(format!(
            "{} has its data at sector {}, {} at sector {data_offset_sectors}",
            other.path, other.superblock.data_offset_sectors, first.path
        )));
    }
    let data_offset_bytes = data_offset_sectors
        .checked_mul(MD_SECTOR_BYTES)
        .ok_or_else(|| MdImportError::Inconsistent("data offset out of range".into()))?;
    let chunk_bytes = match level {
        Level::Raid1 => mirror_chunk_bytes(sb.size_sectors.saturating_mul(MD_SECTOR_BYTES)),
        _ => u64::from(sb.chunk_sectors) * MD_SECTOR_BYTES,
    };
    if !chunk_bytes.is_power_of_two() || !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&chunk_bytes)
    {
        return Err(MdImportError::Unsupported(format!(
            "chunk of {chunk_bytes} bytes (4 KiB to 1 MiB, a power of two, are supported)"
        )));
    }
    let member_data_bytes = match level {
        Level::Raid0 => {
            let data_size = sb.data_size_sectors;
            if let Some(other) = devices
                .iter()
                .find(|d| d.superblock.data_size_sectors != data_size)
            {
                return Err(MdImportError::Unsupported(format!(
                    "RAID0 over members of different sizes ({} and {})",
                    first.path, other.path
                )));
            }
            data_size.saturating_mul(MD_SECTOR_BYTES) / chunk_bytes * chunk_bytes
        }
        _ => {
            let bytes = sb.size_sectors.saturating_mul(MD_SECTOR_BYTES);
            if !bytes.is_multiple_of(chunk_bytes) {
                return Err(MdImportError::Unsupported(format!(
                    "a member size of {bytes} bytes, not a whole number of {chunk_bytes}-byte chunks"
                )));
            }
            bytes
        }
    };
    for device in devices {
        let end = data_offset_bytes.checked_add(member_data_bytes);
        if end.is_none_or(|end| end > device.size_bytes) {
            return Err(MdImportError::Inconsistent(format!(
                "{} ({} bytes) is smaller than md's data on it",
                device.path, device.size_bytes
            )));
        }
    }
    let geometry = Geometry::new(level, members, chunk_bytes, member_data_bytes)
        .map_err(|e| MdImportError::Unsupported(e.to_string()))?;
    let missing: Vec<bool> = roles.iter().map(Option::is_none).collect();
    let missing_count = missing.iter().filter(|&&m| m).count();
    if missing_count > 0 && !geometry.survives(&missing) {
        return Err(MdImportError::TooDegraded {
            missing: missing_count,
            level,
        });
    }
    let smallest_bytes = devices
        .iter()
        .map(|d| d.size_bytes)
        .min()
        .expect("at least one device");
    let layout = adopted_layout(
        level,
        members,
        chunk_bytes,
        smallest_bytes,
        member_data_bytes,
        data_offset_bytes,
    )
    .map_err(|error| match error {
        AdoptedLayoutError::Geometry(e) => MdImportError::Unsupported(e.to_string()),
        AdoptedLayoutError::NoRoom { needed_bytes } => MdImportError::NoRoom {
            data_offset_bytes,
            needed_bytes,
        },
    })?;
    Ok(ImportPlan {
        level,
        chunk_bytes,
        roles,
        array_bytes: geometry.data_bytes(),
        layout,
        md_name: sb.short_name().to_string(),
        set_uuid: sb.set_uuid_text(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::md::tests::raid5_member;
    use crate::md::{FEATURE_BAD_BLOCKS, ROLE_SPARE};

    fn devices(superblocks: Vec<MdSuperblock>) -> Vec<MdDevice> {
        superblocks
            .into_iter()
            .enumerate()
            .map(|(i, superblock)| MdDevice {
                path: format!("/dev/vd{}", (b'a' + i as u8) as char),
                size_bytes: 64 << 20,
                superblock,
            })
            .collect()
    }

    fn raid5() -> Vec<MdDevice> {
        devices((0..4).map(raid5_member).collect())
    }

    #[test]
    fn a_clean_raid5_is_planned() {
        let plan = plan_import(&raid5()).unwrap();
        assert_eq!(plan.level, Level::Raid5);
        assert_eq!(plan.chunk_bytes, 64 << 10);
        assert_eq!(plan.roles, vec![Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(plan.layout.data_offset_bytes, 1 << 20);
        assert_eq!(plan.layout.geometry.member_data_bytes(), 8 << 20);
        assert_eq!(plan.array_bytes, 3 * (8 << 20));
        assert_eq!(plan.md_name, "data");
    }

    #[test]
    fn roles_follow_md_not_the_order_given() {
        let mut given = raid5();
        given.swap(0, 3);
        given[0].superblock.feature_map |= FEATURE_BAD_BLOCKS;
        let plan = plan_import(&given).unwrap();
        assert_eq!(plan.roles, vec![Some(3), Some(1), Some(2), Some(0)]);
    }

    #[test]
    fn a_missing_member_is_allowed_within_redundancy() {
        let mut given = raid5();
        given.remove(2);
        assert_eq!(
            plan_import(&given).unwrap().roles,
            vec![Some(0), Some(1), None, Some(2)]
        );
        given.remove(0);
        assert_eq!(
            plan_import(&given),
            Err(MdImportError::TooDegraded {
                missing: 2,
                level: Level::Raid5
            })
        );
    }

    #[test]
    fn refusals() {
        let check = |change: &dyn Fn(&mut Vec<MdDevice>), expected: &str| {
            let mut given = raid5();
            change(&mut given);
            let error = plan_import(&given).unwrap_err().to_string();
            assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        };
        check(&|d| d[1].superblock.set_uuid[0] = 9, "different md arrays");
        check(&|d| d[2].superblock.events -= 1, "/dev/vdc is stale");
        check(
            &|d| {
                d.iter_mut()
                    .for_each(|d| d.superblock.resync_offset_sectors = 0)
            },
            "not stopped cleanly",
        );
        check(
            &|d| d[0].superblock.feature_map |= FEATURE_RESHAPE_ACTIVE,
            "a reshape is in progress",
        );
        check(
            &|d| d[0].superblock.feature_map |= FEATURE_BITMAP_OFFSET,
            "mdadm --grow --bitmap=none",
        );
        check(&|d| d[0].superblock.level = 4, "md level 4");
        check(&|d| d[0].superblock.layout = 0, "raid5 layout 0x0");
        check(
            &|d| d[0].superblock.dev_roles[0] = ROLE_SPARE,
            "/dev/vda is a spare",
        );
        check(&|d| d[1].superblock.dev_number = 0, "md role 0");
        check(
            &|d| {
                d.iter_mut()
                    .for_each(|d| d.superblock.data_offset_sectors = 128)
            },
            "Tessera's metadata needs",
        );
        check(
            &|d| d[3].superblock.data_offset_sectors = 4096,
            "has its data at sector 4096",
        );
        check(&|d| d[0].size_bytes = 4 << 20, "is smaller than md's data");
        check(
            &|d| d.iter_mut().for_each(|d| d.superblock.chunk_sectors = 3),
            "chunk of 1536 bytes",
        );
        check(
            &|d| d[1].superblock.feature_map |= FEATURE_RECOVERY_OFFSET,
            "recovery",
        );
    }

    #[test]
    fn raid0_needs_equal_members_and_raid1_picks_a_chunk() {
        let mut raid0 = raid5();
        for d in &mut raid0 {
            d.superblock.level = 0;
            d.superblock.layout = 0;
            d.superblock.size_sectors = 0;
        }
        let plan = plan_import(&raid0).unwrap();
        assert_eq!(plan.layout.geometry.member_data_bytes(), 8 << 20);
        assert_eq!(plan.array_bytes, 4 * (8 << 20));
        raid0[2].superblock.data_size_sectors += 128;
        assert!(
            plan_import(&raid0)
                .unwrap_err()
                .to_string()
                .contains("different sizes")
        );
        let mut raid1 = devices((0..2).map(raid5_member).collect());
        for d in &mut raid1 {
            d.superblock.level = 1;
            d.superblock.layout = 0;
            d.superblock.raid_disks = 2;
            d.superblock.chunk_sectors = 0;
            d.superblock.size_sectors = 16392; // 8 MiB + 4 KiB
            d.superblock.dev_roles = vec![0, 1];
        }
        let plan = plan_import(&raid1).unwrap();
        assert_eq!(plan.chunk_bytes, 4096);
        assert_eq!(plan.array_bytes, (8 << 20) + 4096);
    }

    #[test]
    fn raid10_near2_with_a_missing_member() {
        let mut raid10 = raid5();
        for d in &mut raid10 {
            d.superblock.level = 10;
            d.superblock.layout = LAYOUT_RAID10_NEAR2;
        }
        raid10.remove(1);
        let plan = plan_import(&raid10).unwrap();
        assert_eq!(plan.array_bytes, 2 * (8 << 20));
        raid10.remove(0);
        assert!(matches!(
            plan_import(&raid10),
            Err(MdImportError::TooDegraded { missing: 2, .. })
        ));
    }
}
