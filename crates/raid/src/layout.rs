//! Where a group's metadata and data go on each member.

use crate::bitmap::slot_bytes_for;
use crate::geometry::{Geometry, GeometryError, Level};
use crate::superblock::METADATA_AREA_OFFSET;

/// Default group data bytes per bitmap region (rounded up to whole stripes).
pub const DEFAULT_REGION_BYTES: u64 = 4 << 20;
/// Data areas start on this boundary.
pub const DATA_ALIGN_BYTES: u64 = 1 << 20;

/// The computed placement of metadata and data on every member of a new group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberLayout {
    pub geometry: Geometry,
    pub region_bytes: u64,
    pub bitmap_offset_bytes: u64,
    pub bitmap_slot_bytes: u64,
    pub journal_offset_bytes: u64,
    pub journal_bytes: u64,
    pub data_offset_bytes: u64,
}

/// Default journal area: 1/256 of the member, between 256 KiB and 64 MiB, in 64 KiB units,
/// and never less than the journal needs for the stripe size.
pub fn default_journal_bytes(member_bytes: u64, members: usize, chunk_bytes: u64) -> u64 {
    let share = (member_bytes / 256).clamp(256 << 10, 64 << 20);
    share
        .max(min_journal_bytes(members, chunk_bytes))
        .div_ceil(64 << 10)
        * (64 << 10)
}

/// The smallest journal area that holds two of the largest batches (one stripe update of
/// every column) and a checkpoint, so journaled writes can always make progress.
pub fn min_journal_bytes(members: usize, chunk_bytes: u64) -> u64 {
    let largest_batch = members as u64 * chunk_bytes + (8 << 10);
    2 * largest_batch + (4 << 10)
}

/// Lays out a new group over members whose smallest is `smallest_member_bytes`.
pub fn member_layout(
    level: Level,
    members: usize,
    chunk_bytes: u64,
    smallest_member_bytes: u64,
    region_bytes_hint: Option<u64>,
    journal_bytes: Option<u64>,
) -> Result<MemberLayout, GeometryError> {
    // Size the bitmap for the most data the members could hold, then place the data after it.
    let upper = Geometry::new(level, members, chunk_bytes, smallest_member_bytes)?;
    let stripe = upper.stripe_data_bytes();
    let region_bytes = region_bytes_hint
        .unwrap_or(DEFAULT_REGION_BYTES)
        .max(stripe)
        .div_ceil(stripe)
        * stripe;
    let bitmap_slot_bytes = slot_bytes_for(upper.data_bytes().div_ceil(region_bytes));
    let bitmap_offset_bytes = METADATA_AREA_OFFSET;
    let journal_offset_bytes = bitmap_offset_bytes + 2 * bitmap_slot_bytes;
    let journal_bytes = journal_bytes
        .unwrap_or_else(|| default_journal_bytes(smallest_member_bytes, members, chunk_bytes));
    assert_eq!(journal_bytes % 4096, 0, "journal size is whole pages");
    let data_offset_bytes =
        (journal_offset_bytes + journal_bytes).div_ceil(DATA_ALIGN_BYTES) * DATA_ALIGN_BYTES;
    let member_data_bytes = smallest_member_bytes.saturating_sub(data_offset_bytes);
    let geometry = Geometry::new(level, members, chunk_bytes, member_data_bytes)?;
    Ok(MemberLayout {
        geometry,
        region_bytes,
        bitmap_offset_bytes,
        bitmap_slot_bytes,
        journal_offset_bytes,
        journal_bytes,
        data_offset_bytes,
    })
}

/// Lays out a group adopted with its data in place (an md array): the data area is given
/// (`data_offset_bytes`, `member_data_bytes` per member), and the metadata must fit before it;
/// the journal takes what room there is, up to its default size (RAID5/6 need at least
/// `min_journal_bytes`; other levels never journal). Returns the bytes the metadata needs
/// before the data when it does not fit.
pub fn adopted_layout(
    level: Level,
    members: usize,
    chunk_bytes: u64,
    member_bytes: u64,
    member_data_bytes: u64,
    data_offset_bytes: u64,
) -> Result<MemberLayout, AdoptedLayoutError> {
    let geometry = Geometry::new(level, members, chunk_bytes, member_data_bytes)
        .map_err(AdoptedLayoutError::Geometry)?;
    let stripe = geometry.stripe_data_bytes();
    let region_bytes = DEFAULT_REGION_BYTES.max(stripe).div_ceil(stripe) * stripe;
    let bitmap_slot_bytes = slot_bytes_for(geometry.data_bytes().div_ceil(region_bytes));
    let bitmap_offset_bytes = METADATA_AREA_OFFSET;
    let journal_offset_bytes = bitmap_offset_bytes + 2 * bitmap_slot_bytes;
    let needed_journal_bytes = min_journal_bytes(members, chunk_bytes).div_ceil(4096) * 4096;
    let room_bytes = data_offset_bytes.saturating_sub(journal_offset_bytes) / 4096 * 4096;
    // Levels without parity never journal, so they need no room for it (mdadm's default
    // 512 KiB chunks and 1 MiB data offset leave none on small disks).
    let journals = geometry.parity_chunks() > 0;
    if (journals && room_bytes < needed_journal_bytes) || !data_offset_bytes.is_multiple_of(4096) {
        return Err(AdoptedLayoutError::NoRoom {
            needed_bytes: journal_offset_bytes + needed_journal_bytes,
        });
    }
    let journal_bytes = default_journal_bytes(member_bytes, members, chunk_bytes).min(room_bytes);
    Ok(MemberLayout {
        geometry,
        region_bytes,
        bitmap_offset_bytes,
        bitmap_slot_bytes,
        journal_offset_bytes,
        journal_bytes,
        data_offset_bytes,
    })
}

/// Why an adopted data area cannot take Tessera's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdoptedLayoutError {
    /// The geometry is not one Tessera supports.
    Geometry(GeometryError),
    /// The metadata needs this many bytes before the data (or the data offset is not 4 KiB
    /// aligned).
    NoRoom { needed_bytes: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_a_typical_group() {
        let layout = member_layout(Level::Raid5, 5, 64 << 10, 1 << 30, None, None).unwrap();
        assert_eq!(layout.region_bytes, 4 << 20);
        assert_eq!(layout.bitmap_offset_bytes, 64 << 10);
        assert_eq!(layout.journal_offset_bytes, (64 << 10) + 2 * 4096);
        assert_eq!(layout.journal_bytes, 4 << 20);
        assert_eq!(layout.data_offset_bytes, 5 << 20);
        assert_eq!(layout.geometry.member_data_bytes(), (1 << 30) - (5 << 20));
    }

    #[test]
    fn regions_are_whole_stripes() {
        let layout = member_layout(Level::Raid6, 9, 1 << 20, 8 << 30, None, None).unwrap();
        assert_eq!(layout.region_bytes, 7 << 20);
    }

    #[test]
    fn adopted_layout_fits_the_journal_in_the_room_there_is() {
        let layout =
            adopted_layout(Level::Raid5, 4, 64 << 10, 1 << 30, 256 << 20, 1 << 20).unwrap();
        assert_eq!(layout.data_offset_bytes, 1 << 20);
        assert_eq!(layout.geometry.member_data_bytes(), 256 << 20);
        assert_eq!(layout.journal_offset_bytes, (64 << 10) + 2 * 4096);
        assert_eq!(layout.journal_bytes, (1 << 20) - (64 << 10) - 2 * 4096);
        let roomy = adopted_layout(Level::Raid5, 4, 64 << 10, 1 << 30, 256 << 20, 128 << 20);
        assert_eq!(roomy.unwrap().journal_bytes, 4 << 20);
        assert_eq!(
            adopted_layout(Level::Raid6, 8, 512 << 10, 1 << 30, 256 << 20, 1 << 20),
            Err(AdoptedLayoutError::NoRoom {
                needed_bytes: (64 << 10) + 2 * 4096 + 2 * (8 * (512 << 10) + (8 << 10)) + 4096
            })
        );
    }

    #[test]
    fn levels_without_parity_need_no_journal_room() {
        // mdadm's defaults on small disks: 512 KiB chunks, data at 1 MiB.
        for (level, members) in [(Level::Raid0, 4), (Level::Raid10, 4), (Level::Raid1, 2)] {
            let layout = adopted_layout(level, members, 512 << 10, 1 << 30, 256 << 20, 1 << 20)
                .unwrap_or_else(|error| panic!("{level:?}: {error:?}"));
            assert_eq!(layout.data_offset_bytes, 1 << 20, "{level:?}");
            assert!(
                layout.journal_offset_bytes + layout.journal_bytes <= 1 << 20,
                "{level:?}: the journal area stays before the data"
            );
        }
        assert!(matches!(
            adopted_layout(Level::Raid5, 4, 512 << 10, 1 << 30, 256 << 20, 1 << 20),
            Err(AdoptedLayoutError::NoRoom { .. })
        ));
    }
}
