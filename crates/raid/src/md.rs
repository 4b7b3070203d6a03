//! Linux md's version 1.2 superblock, read so that an existing md array can be adopted as a
//! drive group with its data in place (`tessera dg import-md`, `docs/md-import.md`).
//!
//! Only decoding: Tessera never writes md metadata (tests build superblocks with
//! [`MdSuperblock::encode`]). Everything read comes from drives, so every field is
//! bounds-checked and bad input is an error, never a panic.

use std::fmt;

/// md's superblock magic.
pub const MD_MAGIC: u32 = 0xa92b_4efc;
/// Where metadata version 1.2 puts the superblock on every member.
pub const MD_SUPERBLOCK_OFFSET_BYTES: u64 = 4096;
/// The bytes read for a superblock: the 256-byte header and up to 1920 device roles.
pub const MD_SUPERBLOCK_READ_BYTES: usize = 4096;
/// The fixed header before the device roles.
const HEADER_BYTES: usize = 256;
/// The most device roles a 4 KiB superblock can list.
pub const MD_MAX_DEVICES: u32 = ((MD_SUPERBLOCK_READ_BYTES - HEADER_BYTES) / 2) as u32;
/// md's "no offset": the array is in sync (`resync_offset`) or no reshape runs.
pub const MD_MAX_SECTOR: u64 = u64::MAX;
/// md's sector.
pub const MD_SECTOR_BYTES: u64 = 512;

/// `feature_map` bits.
pub const FEATURE_BITMAP_OFFSET: u32 = 1;
pub const FEATURE_RECOVERY_OFFSET: u32 = 2;
pub const FEATURE_RESHAPE_ACTIVE: u32 = 4;
pub const FEATURE_BAD_BLOCKS: u32 = 8;
pub const FEATURE_REPLACEMENT: u32 = 16;
pub const FEATURE_RESHAPE_BACKWARDS: u32 = 32;
pub const FEATURE_NEW_OFFSET: u32 = 64;
pub const FEATURE_RECOVERY_BITMAP: u32 = 128;
pub const FEATURE_CLUSTERED: u32 = 256;
pub const FEATURE_JOURNAL: u32 = 512;
pub const FEATURE_PPL: u32 = 1024;
pub const FEATURE_MULTIPLE_PPLS: u32 = 2048;
pub const FEATURE_RAID0_LAYOUT: u32 = 4096;

/// Device role values that are not a slot number.
pub const ROLE_SPARE: u16 = 0xffff;
pub const ROLE_FAULTY: u16 = 0xfffe;
pub const ROLE_JOURNAL: u16 = 0xfffd;

/// md's layout numbers for the layouts Tessera places data exactly like.
pub const LAYOUT_LEFT_SYMMETRIC: u32 = 2;
pub const LAYOUT_RAID10_NEAR2: u32 = 0x102;

/// A decoded md v1.2 superblock (the fields import needs; sizes and offsets in sectors, as md
/// stores them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MdSuperblock {
    pub feature_map: u32,
    pub set_uuid: [u8; 16],
    /// The array's name as stored (`host:name` when mdadm knew the host), NULs dropped.
    pub set_name: String,
    pub ctime: u64,
    /// md's level number: 0, 1, 4, 5, 6, 10, or negative for linear and the like.
    pub level: i32,
    pub layout: u32,
    /// Sectors of every member the array uses.
    pub size_sectors: u64,
    pub chunk_sectors: u32,
    pub raid_disks: u32,
    pub reshape_position: u64,
    pub data_offset_sectors: u64,
    pub data_size_sectors: u64,
    pub super_offset_sectors: u64,
    pub recovery_offset_sectors: u64,
    /// This device's index into `dev_roles`.
    pub dev_number: u32,
    pub device_uuid: [u8; 16],
    /// The bad-block log: its place relative to the superblock (signed sectors) and sectors.
    pub bblog_offset_sectors: i32,
    pub bblog_size_sectors: u16,
    pub utime: u64,
    pub events: u64,
    /// Sectors from the start of the data known in sync; [`MD_MAX_SECTOR`] when clean.
    pub resync_offset_sectors: u64,
    /// The role of every device the array has known, by device number.
    pub dev_roles: Vec<u16>,
}

/// Why bytes are not a usable md v1.2 superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MdDecodeError {
    /// Fewer bytes than the superblock needs.
    TooShort { needed_bytes: usize },
    /// No md magic: not an md member (or metadata other than 1.1/1.2 at this place).
    NotMd,
    /// A `major_version` other than 1.
    Version(u32),
    /// `max_dev` lists more roles than a 4 KiB superblock holds.
    MaxDevices(u32),
    /// The stored checksum does not match the contents.
    Checksum { stored: u32, computed: u32 },
    /// `super_offset` does not say 4 KiB: not a version 1.2 superblock.
    SuperOffset(u64),
}

impl fmt::Display for MdDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MdDecodeError::TooShort { needed_bytes } => {
                write!(f, "md superblock cut short: {needed_bytes} bytes needed")
            }
            MdDecodeError::NotMd => write!(f, "no md superblock (version 1.2) at 4 KiB"),
            MdDecodeError::Version(version) => {
                write!(f, "md superblock major version {version}, not 1")
            }
            MdDecodeError::MaxDevices(count) => {
                write!(f, "md superblock lists {count} device roles, more than fit")
            }
            MdDecodeError::Checksum { stored, computed } => write!(
                f,
                "md superblock checksum {stored:#010x} does not match its contents ({computed:#010x})"
            ),
            MdDecodeError::SuperOffset(sectors) => write!(
                f,
                "md superblock says it lives at sector {sectors}, not 8: not metadata 1.2"
            ),
        }
    }
}

impl std::error::Error for MdDecodeError {}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// md's superblock checksum over the header and `max_dev` roles (`bytes` holds at least
/// that much): the little-endian 32-bit words summed into 64 bits with the checksum field
/// taken as zero, a trailing 16-bit word added, and the two halves of the sum folded.
pub fn checksum(bytes: &[u8], max_dev: u32) -> u32 {
    let len = HEADER_BYTES + 2 * max_dev as usize;
    assert!(bytes.len() >= len, "the caller checked the length");
    let mut sum: u64 = 0;
    let mut at = 0;
    while at + 4 <= len {
        if at != 216 {
            sum += u64::from(u32_at(bytes, at));
        }
        at += 4;
    }
    if at + 2 <= len {
        sum += u64::from(u16_at(bytes, at));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

impl MdSuperblock {
    /// Decodes the superblock at the start of `bytes` (the 4 KiB read at
    /// [`MD_SUPERBLOCK_OFFSET_BYTES`]). Pure, and safe on any input.
    pub fn decode(bytes: &[u8]) -> Result<MdSuperblock, MdDecodeError> {
        if bytes.len() < HEADER_BYTES {
            return Err(MdDecodeError::TooShort {
                needed_bytes: HEADER_BYTES,
            });
        }
        if u32_at(bytes, 0) != MD_MAGIC {
            return Err(MdDecodeError::NotMd);
        }
        let version = u32_at(bytes, 4);
        if version != 1 {
            return Err(MdDecodeError::Version(version));
        }
        let max_dev = u32_at(bytes, 220);
        if max_dev > MD_MAX_DEVICES {
            return Err(MdDecodeError::MaxDevices(max_dev));
        }
        let len = HEADER_BYTES + 2 * max_dev as usize;
        if bytes.len() < len {
            return Err(MdDecodeError::TooShort { needed_bytes: len });
        }
        let stored = u32_at(bytes, 216);
        let computed = checksum(bytes, max_dev);
        if stored != computed {
            return Err(MdDecodeError::Checksum { stored, computed });
        }
        let super_offset_sectors = u64_at(bytes, 144);
        if super_offset_sectors != MD_SUPERBLOCK_OFFSET_BYTES / MD_SECTOR_BYTES {
            return Err(MdDecodeError::SuperOffset(super_offset_sectors));
        }
        let name_bytes = &bytes[32..64];
        let name_end = name_bytes.iter().position(|&b| b == 0).unwrap_or(32);
        Ok(MdSuperblock {
            feature_map: u32_at(bytes, 8),
            set_uuid: bytes[16..32].try_into().expect("16 bytes"),
            set_name: String::from_utf8_lossy(&name_bytes[..name_end]).into_owned(),
            ctime: u64_at(bytes, 64),
            level: u32_at(bytes, 72) as i32,
            layout: u32_at(bytes, 76),
            size_sectors: u64_at(bytes, 80),
            chunk_sectors: u32_at(bytes, 88),
            raid_disks: u32_at(bytes, 92),
            reshape_position: u64_at(bytes, 104),
            data_offset_sectors: u64_at(bytes, 128),
            data_size_sectors: u64_at(bytes, 136),
            super_offset_sectors,
            recovery_offset_sectors: u64_at(bytes, 152),
            dev_number: u32_at(bytes, 160),
            device_uuid: bytes[168..184].try_into().expect("16 bytes"),
            bblog_size_sectors: u16_at(bytes, 186),
            bblog_offset_sectors: u32_at(bytes, 188) as i32,
            utime: u64_at(bytes, 192),
            events: u64_at(bytes, 200),
            resync_offset_sectors: u64_at(bytes, 208),
            dev_roles: (0..max_dev as usize)
                .map(|i| u16_at(bytes, HEADER_BYTES + 2 * i))
                .collect(),
        })
    }

    /// This device's role: `Some(slot)`, or `None` for a spare, faulty or journal device (or
    /// a device number beyond the role table).
    pub fn role(&self) -> Option<u32> {
        let role = *self.dev_roles.get(self.dev_number as usize)?;
        (role < ROLE_JOURNAL).then_some(u32::from(role))
    }

    /// The array's name without the `host:` prefix mdadm adds.
    pub fn short_name(&self) -> &str {
        self.set_name
            .rsplit_once(':')
            .map_or(self.set_name.as_str(), |(_, name)| name)
    }

    /// The set UUID as mdadm prints it (`xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx`).
    pub fn set_uuid_text(&self) -> String {
        let hex: Vec<String> = self
            .set_uuid
            .chunks(4)
            .map(|word| word.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        hex.join(":")
    }

    /// Whether md's bad-block log lists any bad block. `area` holds the device's bytes from
    /// the superblock on (4 KiB onward). The log is a list of 64-bit entries (a range of
    /// sectors each), ended by an entry of all ones, which is also what an empty log holds.
    /// A log outside `area` is not read (`None`).
    pub fn bad_blocks_recorded(&self, area: &[u8]) -> Option<bool> {
        if self.feature_map & FEATURE_BAD_BLOCKS == 0 || self.bblog_size_sectors == 0 {
            return Some(false);
        }
        let start = usize::try_from(self.bblog_offset_sectors).ok()? * MD_SECTOR_BYTES as usize;
        let len = usize::from(self.bblog_size_sectors) * MD_SECTOR_BYTES as usize;
        let log = area.get(start..start.checked_add(len)?)?;
        Some(
            log.chunks_exact(8)
                .map(|entry| u64::from_le_bytes(entry.try_into().expect("8 bytes")))
                .take_while(|&entry| entry != u64::MAX)
                .next()
                .is_some(),
        )
    }

    /// Encodes a superblock (4 KiB) with a correct checksum: for tests and test fixtures.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.dev_roles.len() <= MD_MAX_DEVICES as usize);
        let mut out = vec![0u8; MD_SUPERBLOCK_READ_BYTES];
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &MD_MAGIC.to_le_bytes());
        put(4, &1u32.to_le_bytes());
        put(8, &self.feature_map.to_le_bytes());
        put(16, &self.set_uuid);
        let name = self.set_name.as_bytes();
        put(32, &name[..name.len().min(32)]);
        put(64, &self.ctime.to_le_bytes());
        put(72, &self.level.to_le_bytes());
        put(76, &self.layout.to_le_bytes());
        put(80, &self.size_sectors.to_le_bytes());
        put(88, &self.chunk_sectors.to_le_bytes());
        put(92, &self.raid_disks.to_le_bytes());
        put(104, &self.reshape_position.to_le_bytes());
        put(128, &self.data_offset_sectors.to_le_bytes());
        put(136, &self.data_size_sectors.to_le_bytes());
        put(144, &self.super_offset_sectors.to_le_bytes());
        put(152, &self.recovery_offset_sectors.to_le_bytes());
        put(160, &self.dev_number.to_le_bytes());
        put(168, &self.device_uuid);
        put(186, &self.bblog_size_sectors.to_le_bytes());
        put(188, &self.bblog_offset_sectors.to_le_bytes());
        put(192, &self.utime.to_le_bytes());
        put(200, &self.events.to_le_bytes());
        put(208, &self.resync_offset_sectors.to_le_bytes());
        put(220, &(self.dev_roles.len() as u32).to_le_bytes());
        for (i, role) in self.dev_roles.iter().enumerate() {
            put(HEADER_BYTES + 2 * i, &role.to_le_bytes());
        }
        let sum = checksum(&out, self.dev_roles.len() as u32);
        out[216..220].copy_from_slice(&sum.to_le_bytes());
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A clean member `dev_number` of a 4-member RAID5 (64 KiB chunks, 1 MiB data offset).
    pub(crate) fn raid5_member(dev_number: u32) -> MdSuperblock {
        MdSuperblock {
            feature_map: 0,
            set_uuid: [7; 16],
            set_name: "host:data".into(),
            ctime: 1,
            level: 5,
            layout: LAYOUT_LEFT_SYMMETRIC,
            size_sectors: 2 * 8192,
            chunk_sectors: 128,
            raid_disks: 4,
            reshape_position: 0,
            data_offset_sectors: 2048,
            data_size_sectors: 2 * 8192 + 100,
            super_offset_sectors: 8,
            recovery_offset_sectors: 0,
            dev_number,
            device_uuid: [dev_number as u8 + 1; 16],
            bblog_offset_sectors: 8,
            bblog_size_sectors: 8,
            utime: 2,
            events: 19,
            resync_offset_sectors: MD_MAX_SECTOR,
            dev_roles: vec![0, 1, 2, 3],
        }
    }

    #[test]
    fn round_trip() {
        let superblock = raid5_member(2);
        let bytes = superblock.encode();
        assert_eq!(MdSuperblock::decode(&bytes), Ok(superblock.clone()));
        assert_eq!(superblock.role(), Some(2));
        assert_eq!(superblock.short_name(), "data");
        assert_eq!(
            superblock.set_uuid_text(),
            "07070707:07070707:07070707:07070707"
        );
    }

    #[test]
    fn checksum_folds_the_carry_and_adds_an_odd_role() {
        // Three roles: the sum ends with one 16-bit word; big words make the sum carry.
        let mut superblock = raid5_member(0);
        superblock.dev_roles = vec![0, 1, 2];
        superblock.size_sectors = u64::MAX - 5;
        superblock.data_size_sectors = u64::MAX - 7;
        let bytes = superblock.encode();
        let mut sum: u64 = 0;
        for word in 0..(256 + 6) / 4 {
            if word * 4 != 216 {
                sum += u64::from(u32_at(&bytes, word * 4));
            }
        }
        sum += u64::from(u16_at(&bytes, 260));
        assert!(sum >> 32 > 0);
        assert_eq!(
            u32_at(&bytes, 216),
            ((sum & 0xffff_ffff) + (sum >> 32)) as u32
        );
        assert_eq!(MdSuperblock::decode(&bytes), Ok(superblock));
    }

    #[test]
    fn corrupt_superblocks_are_refused() {
        let good = raid5_member(0).encode();
        assert_eq!(
            MdSuperblock::decode(&good[..100]),
            Err(MdDecodeError::TooShort { needed_bytes: 256 })
        );
        assert_eq!(
            MdSuperblock::decode(&[0u8; 4096]),
            Err(MdDecodeError::NotMd)
        );
        let mut flipped = good.clone();
        flipped[100] ^= 1;
        assert!(matches!(
            MdSuperblock::decode(&flipped),
            Err(MdDecodeError::Checksum { .. })
        ));
        let mut version = good.clone();
        version[4] = 0;
        assert_eq!(
            MdSuperblock::decode(&version),
            Err(MdDecodeError::Version(0))
        );
        let mut roles = good.clone();
        roles[220..224].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(
            MdSuperblock::decode(&roles),
            Err(MdDecodeError::MaxDevices(5000))
        );
        assert_eq!(
            MdSuperblock::decode(&good[..257]),
            Err(MdDecodeError::TooShort { needed_bytes: 264 })
        );
        let mut v10 = raid5_member(0);
        v10.super_offset_sectors = 0;
        assert_eq!(
            MdSuperblock::decode(&v10.encode()),
            Err(MdDecodeError::SuperOffset(0))
        );
    }

    #[test]
    fn bad_block_log() {
        let mut superblock = raid5_member(0);
        superblock.feature_map = FEATURE_BAD_BLOCKS;
        let mut area = vec![0xffu8; 16384];
        assert_eq!(superblock.bad_blocks_recorded(&area), Some(false));
        area[4096..4104].copy_from_slice(&((1000u64 << 10) | 7).to_le_bytes());
        assert_eq!(superblock.bad_blocks_recorded(&area), Some(true));
        assert_eq!(superblock.bad_blocks_recorded(&area[..4000]), None);
        superblock.bblog_offset_sectors = -8;
        assert_eq!(superblock.bad_blocks_recorded(&area), None);
        superblock.feature_map = 0;
        assert_eq!(superblock.bad_blocks_recorded(&area), Some(false));
    }

    #[test]
    fn roles_out_of_the_table_are_none() {
        let mut superblock = raid5_member(9);
        assert_eq!(superblock.role(), None);
        superblock.dev_number = 1;
        superblock.dev_roles[1] = ROLE_SPARE;
        assert_eq!(superblock.role(), None);
        superblock.dev_roles[1] = ROLE_FAULTY;
        assert_eq!(superblock.role(), None);
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic generator: every length and many byte patterns, with the
        // magic and version planted so decoding reaches the deeper checks.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..2000 {
            let len = round % 600 + (round % 3) * 3000;
            let mut bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if len >= 8 && round % 2 == 0 {
                bytes[0..4].copy_from_slice(&MD_MAGIC.to_le_bytes());
                bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
            }
            if len >= 224 && round % 4 == 0 {
                bytes[220..224].copy_from_slice(&((round as u32) % 2000).to_le_bytes());
            }
            let _ = MdSuperblock::decode(&bytes);
        }
    }
}
