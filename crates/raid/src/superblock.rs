//! The on-member superblock: encode and decode, byte for byte as `docs/disk-format.md` draws it.
//!
//! Every member carries two copies (A and B). An update writes A, flushes, then writes B and
//! flushes, so a crash leaves at least one valid copy; a reader takes the valid copy with the
//! highest generation. Decoding checks the magic, the version, the CRC32C and every bound before
//! any field is used: a damaged or foreign member yields an error, never a panic.

use crate::geometry::{Geometry, GeometryError, Level, MAX_MEMBERS};
use std::fmt;
use tessera_parity::checksum;

/// Bytes of one superblock copy.
pub const SUPERBLOCK_BYTES: usize = 16 * 1024;
/// Member offsets of copy A and copy B. The first 4 KiB are left alone (partition tables,
/// boot sectors).
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [4096, 4096 + SUPERBLOCK_BYTES as u64];
/// Where the metadata that follows the superblocks (bitmap, journal) begins.
pub const METADATA_AREA_OFFSET: u64 = 64 * 1024;
/// Current on-disk format version.
pub const FORMAT_VERSION: u32 = 1;
/// Most member records (members, replacements and dedicated spares) a group keeps.
pub const MAX_MEMBER_RECORDS: usize = 40;
/// Most bad-block ranges a group records.
pub const MAX_BAD_RANGES: usize = 119;
/// Largest configuration blob (the virtual-drive table) a superblock carries.
pub const MAX_CONFIG_BYTES: usize = SUPERBLOCK_BYTES - CONFIG_OFFSET - 4;
/// Longest group name.
pub const MAX_NAME_BYTES: usize = 64;

const MAGIC: [u8; 8] = *b"TESSERA\x01";
const MEMBER_TABLE_OFFSET: usize = 256;
const MEMBER_RECORD_BYTES: usize = 48;
const BAD_TABLE_OFFSET: usize = MEMBER_TABLE_OFFSET + MAX_MEMBER_RECORDS * MEMBER_RECORD_BYTES;
const CONFIG_OFFSET: usize = 4096;
const NO_ROLE: u8 = 0xff;

/// A 128-bit identifier (group or member).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            b[0],
            b[1],
            b[2],
            b[3],
            b[4],
            b[5],
            b[6],
            b[7],
            b[8],
            b[9],
            b[10],
            b[11],
            b[12],
            b[13],
            b[14],
            b[15]
        )
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Journal mode of a group (see `docs/fault-model.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JournalMode {
    AlwaysOff,
    DegradeOnly,
    AlwaysOn,
}

impl JournalMode {
    fn code(self) -> u8 {
        match self {
            JournalMode::AlwaysOff => 0,
            JournalMode::DegradeOnly => 1,
            JournalMode::AlwaysOn => 2,
        }
    }

    fn from_code(code: u8) -> Option<JournalMode> {
        match code {
            0 => Some(JournalMode::AlwaysOff),
            1 => Some(JournalMode::DegradeOnly),
            2 => Some(JournalMode::AlwaysOn),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JournalMode::AlwaysOff => "always_off",
            JournalMode::DegradeOnly => "degrade_only",
            JournalMode::AlwaysOn => "always_on",
        }
    }

    pub fn from_name(name: &str) -> Option<JournalMode> {
        [
            JournalMode::AlwaysOff,
            JournalMode::DegradeOnly,
            JournalMode::AlwaysOn,
        ]
        .into_iter()
        .find(|mode| mode.name() == name)
    }
}

/// The recorded state of one member device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberRecordState {
    /// In sync, holding its role.
    Active,
    /// Being rebuilt into its role; in sync below `rebuild_position_bytes`.
    Rebuilding,
    /// Failed or removed: not trusted for data until rebuilt.
    Failed,
    /// A hot spare dedicated to this group, holding no role.
    Spare,
    /// The group's dedicated journal device, holding no role: the write journal's ring is on it
    /// (`journal_device_bytes` from `journal_offset_bytes`) instead of on the members.
    Journal,
}

impl MemberRecordState {
    fn code(self) -> u8 {
        match self {
            MemberRecordState::Active => 1,
            MemberRecordState::Rebuilding => 2,
            MemberRecordState::Failed => 3,
            MemberRecordState::Spare => 4,
            MemberRecordState::Journal => 5,
        }
    }

    fn from_code(code: u8) -> Option<MemberRecordState> {
        match code {
            1 => Some(MemberRecordState::Active),
            2 => Some(MemberRecordState::Rebuilding),
            3 => Some(MemberRecordState::Failed),
            4 => Some(MemberRecordState::Spare),
            5 => Some(MemberRecordState::Journal),
            _ => None,
        }
    }
}

/// One row of the member table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    pub uuid: Uuid,
    pub size_bytes: u64,
    /// The role (column of the layout) it holds or is being rebuilt into.
    pub role: Option<u8>,
    pub state: MemberRecordState,
    /// For a rebuilding member: bytes of its data area (from the start) that are in sync.
    pub rebuild_position_bytes: u64,
    /// A rebuilding member that replaces a live one (proactive replace) rather than a lost one.
    pub replacing: bool,
}

/// A range of the group's data space whose contents are lost (unreadable beyond redundancy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BadRange {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// The whole superblock of a group, as seen from one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub group_uuid: Uuid,
    /// The member this copy was written to.
    pub member_uuid: Uuid,
    /// Bumped on every update; the highest generation among a group's members is authoritative.
    pub generation: u64,
    pub created_unix_seconds: u64,
    pub level: Level,
    /// Number of roles (the layout's member count).
    pub member_count: u8,
    pub chunk_bytes: u32,
    pub member_data_bytes: u64,
    pub data_offset_bytes: u64,
    pub bitmap_offset_bytes: u64,
    /// Bytes of one of the two bitmap slots.
    pub bitmap_slot_bytes: u64,
    /// Group data bytes covered by one bitmap region.
    pub region_bytes: u64,
    pub journal_offset_bytes: u64,
    pub journal_bytes: u64,
    pub journal_mode: JournalMode,
    /// Set by an orderly shutdown, cleared before the first write after assembly.
    pub clean: bool,
    /// Rebuild rate in percent of member bandwidth (1..=100).
    pub rebuild_rate_percent: u8,
    /// Scrub rate in percent of member bandwidth (1..=100; 0 in images written before this
    /// field existed, read as the default).
    pub scrub_rate_percent: u8,
    /// When set, the rebuild rate adapts so host request latency stays near this target.
    pub rebuild_latency_target_us: u32,
    /// Every stripe update since `journal_floor_sequence` is in the journal, and no region
    /// awaits resync from before: after a crash, replaying the journal alone makes every stripe
    /// consistent.
    pub journal_covering: bool,
    /// Journal batches below this sequence number are never replayed.
    pub journal_floor_sequence: u64,
    /// Bytes of the journal ring on the dedicated journal device (the member recorded as
    /// `Journal`), from `journal_offset_bytes`; 0 when the journal lives on the members.
    pub journal_device_bytes: u64,
    pub name: String,
    pub members: Vec<MemberRecord>,
    pub bad_ranges: Vec<BadRange>,
    /// Owned by the layer above (the virtual-drive table); opaque here.
    pub config: Vec<u8>,
}

/// Why a superblock copy was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuperblockError {
    /// Fewer bytes than a superblock copy.
    Truncated,
    /// No Tessera magic: not a member of any Tessera group (or wiped).
    NotTessera,
    /// A format version this build does not read.
    UnsupportedVersion(u32),
    /// The CRC32C does not match: the copy is torn or damaged.
    Checksum,
    /// A field holds a value outside its domain; the string names it.
    Invalid(&'static str),
    /// The recorded geometry is not one this build accepts.
    Geometry(GeometryError),
}

impl fmt::Display for SuperblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuperblockError::Truncated => write!(f, "superblock truncated"),
            SuperblockError::NotTessera => write!(f, "no Tessera superblock"),
            SuperblockError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "superblock format version {v} is not supported (this build reads {FORMAT_VERSION})"
                )
            }
            SuperblockError::Checksum => {
                write!(f, "superblock checksum mismatch (torn or damaged)")
            }
            SuperblockError::Invalid(field) => write!(f, "superblock field `{field}` is invalid"),
            SuperblockError::Geometry(error) => write!(f, "superblock geometry: {error}"),
        }
    }
}

impl std::error::Error for SuperblockError {}

impl Superblock {
    /// The group geometry this superblock describes.
    pub fn geometry(&self) -> Result<Geometry, GeometryError> {
        Geometry::new(
            self.level,
            usize::from(self.member_count),
            u64::from(self.chunk_bytes),
            self.member_data_bytes,
        )
    }

    /// The record of the member this copy was written to.
    pub fn this_member(&self) -> Option<&MemberRecord> {
        self.members
            .iter()
            .find(|record| record.uuid == self.member_uuid)
    }

    /// Encodes one copy.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.members.len() <= MAX_MEMBER_RECORDS);
        assert!(self.bad_ranges.len() <= MAX_BAD_RANGES);
        assert!(self.config.len() <= MAX_CONFIG_BYTES);
        assert!(self.name.len() <= MAX_NAME_BYTES);
        let mut out = vec![0u8; SUPERBLOCK_BYTES];
        let mut w = Writer { out: &mut out };
        w.bytes(0, &MAGIC);
        w.u32(8, FORMAT_VERSION);
        w.bytes(16, &self.group_uuid.0);
        w.bytes(32, &self.member_uuid.0);
        w.u64(48, self.generation);
        w.u64(56, self.created_unix_seconds);
        w.u8(
            64,
            u8::try_from(self.level.number()).expect("level number fits u8"),
        );
        w.u8(65, 0);
        w.u8(66, self.member_count);
        let role = self
            .this_member()
            .and_then(|record| record.role)
            .unwrap_or(NO_ROLE);
        w.u8(67, role);
        w.u32(68, self.chunk_bytes);
        w.u64(72, self.member_data_bytes);
        w.u64(80, self.data_offset_bytes);
        w.u64(88, self.bitmap_offset_bytes);
        w.u64(96, self.bitmap_slot_bytes);
        w.u64(104, self.region_bytes);
        w.u64(112, self.journal_offset_bytes);
        w.u64(120, self.journal_bytes);
        w.u8(128, self.journal_mode.code());
        w.u8(129, u8::from(self.clean));
        w.u8(130, self.rebuild_rate_percent);
        w.u8(
            131,
            u8::try_from(self.members.len()).expect("member records fit u8"),
        );
        w.u16(
            132,
            u16::try_from(self.bad_ranges.len()).expect("bad ranges fit u16"),
        );
        w.u8(134, self.scrub_rate_percent);
        w.u32(136, self.rebuild_latency_target_us);
        w.u8(140, u8::from(self.journal_covering));
        w.u64(144, self.journal_floor_sequence);
        w.u64(152, self.journal_device_bytes);
        w.bytes(192, self.name.as_bytes());
        for (i, record) in self.members.iter().enumerate() {
            let at = MEMBER_TABLE_OFFSET + i * MEMBER_RECORD_BYTES;
            w.bytes(at, &record.uuid.0);
            w.u64(at + 16, record.size_bytes);
            w.u8(at + 24, record.role.unwrap_or(NO_ROLE));
            w.u8(at + 25, record.state.code());
            w.u8(at + 26, u8::from(record.replacing));
            w.u64(at + 32, record.rebuild_position_bytes);
        }
        for (i, range) in self.bad_ranges.iter().enumerate() {
            let at = BAD_TABLE_OFFSET + i * 16;
            w.u64(at, range.offset_bytes);
            w.u64(at + 8, range.len_bytes);
        }
        w.u32(
            CONFIG_OFFSET,
            u32::try_from(self.config.len()).expect("config fits u32"),
        );
        w.bytes(CONFIG_OFFSET + 4, &self.config);
        let crc = checksum::crc32c(&out);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and validates one copy.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, SuperblockError> {
        if bytes.len() < SUPERBLOCK_BYTES {
            return Err(SuperblockError::Truncated);
        }
        let bytes = &bytes[..SUPERBLOCK_BYTES];
        let r = Reader { bytes };
        if r.bytes(0, 8) != MAGIC {
            return Err(SuperblockError::NotTessera);
        }
        let version = r.u32(8);
        if version != FORMAT_VERSION {
            return Err(SuperblockError::UnsupportedVersion(version));
        }
        let stored_crc = r.u32(12);
        let mut zeroed = bytes.to_vec();
        zeroed[12..16].fill(0);
        if checksum::crc32c(&zeroed) != stored_crc {
            return Err(SuperblockError::Checksum);
        }
        let level =
            Level::from_number(u32::from(r.u8(64))).ok_or(SuperblockError::Invalid("level"))?;
        if r.u8(65) != 0 {
            return Err(SuperblockError::Invalid("layout"));
        }
        let member_count = r.u8(66);
        let journal_mode =
            JournalMode::from_code(r.u8(128)).ok_or(SuperblockError::Invalid("journal_mode"))?;
        let clean = match r.u8(129) {
            0 => false,
            1 => true,
            _ => return Err(SuperblockError::Invalid("clean")),
        };
        let rebuild_rate_percent = r.u8(130);
        if !(1..=100).contains(&rebuild_rate_percent) {
            return Err(SuperblockError::Invalid("rebuild_rate_percent"));
        }
        let scrub_rate_percent = r.u8(134);
        if scrub_rate_percent > 100 {
            return Err(SuperblockError::Invalid("scrub_rate_percent"));
        }
        let rebuild_latency_target_us = r.u32(136);
        let journal_covering = match r.u8(140) {
            0 => false,
            1 => true,
            _ => return Err(SuperblockError::Invalid("journal_covering")),
        };
        let journal_floor_sequence = r.u64(144);
        let journal_device_bytes = r.u64(152);
        let record_count = usize::from(r.u8(131));
        if record_count > MAX_MEMBER_RECORDS {
            return Err(SuperblockError::Invalid("member_records"));
        }
        let bad_count = usize::from(r.u16(132));
        if bad_count > MAX_BAD_RANGES {
            return Err(SuperblockError::Invalid("bad_ranges"));
        }
        let name_bytes = r.bytes(192, MAX_NAME_BYTES);
        let name_len = name_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_NAME_BYTES);
        let name = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| SuperblockError::Invalid("name"))?
            .to_string();
        let mut members = Vec::with_capacity(record_count);
        for i in 0..record_count {
            let at = MEMBER_TABLE_OFFSET + i * MEMBER_RECORD_BYTES;
            let role = match r.u8(at + 24) {
                NO_ROLE => None,
                role if role < member_count => Some(role),
                _ => return Err(SuperblockError::Invalid("member_role")),
            };
            let state = MemberRecordState::from_code(r.u8(at + 25))
                .ok_or(SuperblockError::Invalid("member_state"))?;
            let roleless = matches!(state, MemberRecordState::Spare | MemberRecordState::Journal);
            if role.is_none() != roleless && state != MemberRecordState::Failed {
                return Err(SuperblockError::Invalid("member_role"));
            }
            let replacing = match r.u8(at + 26) {
                0 => false,
                1 => true,
                _ => return Err(SuperblockError::Invalid("member_replacing")),
            };
            members.push(MemberRecord {
                uuid: Uuid(r.bytes(at, 16).try_into().expect("16 bytes")),
                size_bytes: r.u64(at + 16),
                role,
                state,
                rebuild_position_bytes: r.u64(at + 32),
                replacing,
            });
        }
        let mut bad_ranges = Vec::with_capacity(bad_count);
        for i in 0..bad_count {
            let at = BAD_TABLE_OFFSET + i * 16;
            bad_ranges.push(BadRange {
                offset_bytes: r.u64(at),
                len_bytes: r.u64(at + 8),
            });
        }
        let config_len = r.u32(CONFIG_OFFSET) as usize;
        if config_len > MAX_CONFIG_BYTES {
            return Err(SuperblockError::Invalid("config_len"));
        }
        let superblock = Superblock {
            group_uuid: Uuid(r.bytes(16, 16).try_into().expect("16 bytes")),
            member_uuid: Uuid(r.bytes(32, 16).try_into().expect("16 bytes")),
            generation: r.u64(48),
            created_unix_seconds: r.u64(56),
            level,
            member_count,
            chunk_bytes: r.u32(68),
            member_data_bytes: r.u64(72),
            data_offset_bytes: r.u64(80),
            bitmap_offset_bytes: r.u64(88),
            bitmap_slot_bytes: r.u64(96),
            region_bytes: r.u64(104),
            journal_offset_bytes: r.u64(112),
            journal_bytes: r.u64(120),
            journal_mode,
            clean,
            rebuild_rate_percent,
            scrub_rate_percent,
            rebuild_latency_target_us,
            journal_covering,
            journal_floor_sequence,
            journal_device_bytes,
            name,
            members,
            bad_ranges,
            config: r.bytes(CONFIG_OFFSET + 4, config_len).to_vec(),
        };
        superblock.validate()?;
        Ok(superblock)
    }

    /// Cross-field checks: the layout must be self-consistent before anything trusts it.
    fn validate(&self) -> Result<(), SuperblockError> {
        let geometry = self.geometry().map_err(SuperblockError::Geometry)?;
        if usize::from(self.member_count) > MAX_MEMBERS {
            return Err(SuperblockError::Invalid("member_count"));
        }
        if geometry.member_data_bytes() != self.member_data_bytes {
            return Err(SuperblockError::Invalid("member_data_bytes"));
        }
        let metadata_end = self
            .bitmap_offset_bytes
            .checked_add(
                self.bitmap_slot_bytes
                    .checked_mul(2)
                    .ok_or(SuperblockError::Invalid("bitmap_slot_bytes"))?,
            )
            .ok_or(SuperblockError::Invalid("bitmap_slot_bytes"))?;
        if self.bitmap_offset_bytes < METADATA_AREA_OFFSET
            || !self.bitmap_slot_bytes.is_multiple_of(4096)
        {
            return Err(SuperblockError::Invalid("bitmap_offset_bytes"));
        }
        let journal_end = self
            .journal_offset_bytes
            .checked_add(self.journal_bytes)
            .ok_or(SuperblockError::Invalid("journal_bytes"))?;
        if self.journal_bytes > 0 && self.journal_offset_bytes < metadata_end {
            return Err(SuperblockError::Invalid("journal_offset_bytes"));
        }
        if self.data_offset_bytes < metadata_end.max(journal_end)
            || !self.data_offset_bytes.is_multiple_of(4096)
        {
            return Err(SuperblockError::Invalid("data_offset_bytes"));
        }
        // The group's data space (no more than the member data size times the member count)
        // must be representable, or its arithmetic overflows.
        if self
            .data_offset_bytes
            .checked_add(self.member_data_bytes)
            .is_none()
            || self
                .member_data_bytes
                .checked_mul(u64::from(self.member_count))
                .is_none()
        {
            return Err(SuperblockError::Invalid("member_data_bytes"));
        }
        if self.region_bytes == 0
            || !self
                .region_bytes
                .is_multiple_of(geometry.stripe_data_bytes())
        {
            return Err(SuperblockError::Invalid("region_bytes"));
        }
        let regions = geometry.data_bytes().div_ceil(self.region_bytes);
        if crate::bitmap::slot_bytes_for(regions) != self.bitmap_slot_bytes {
            return Err(SuperblockError::Invalid("bitmap_slot_bytes"));
        }
        if self.this_member().is_none() {
            return Err(SuperblockError::Invalid("member_uuid"));
        }
        for (i, record) in self.members.iter().enumerate() {
            if self.members[..i]
                .iter()
                .any(|other| other.uuid == record.uuid)
            {
                return Err(SuperblockError::Invalid("member_uuid"));
            }
            if record.rebuild_position_bytes > self.member_data_bytes {
                return Err(SuperblockError::Invalid("rebuild_position_bytes"));
            }
        }
        for role in 0..self.member_count {
            let holders = self
                .members
                .iter()
                .filter(|record| {
                    record.role == Some(role) && record.state == MemberRecordState::Active
                })
                .count();
            if holders > 1 {
                return Err(SuperblockError::Invalid("member_role"));
            }
        }
        for range in &self.bad_ranges {
            let end = range.offset_bytes.checked_add(range.len_bytes);
            if range.len_bytes == 0 || end.is_none_or(|end| end > geometry.data_bytes()) {
                return Err(SuperblockError::Invalid("bad_ranges"));
            }
        }
        Ok(())
    }
}

/// Picks the copy to trust from the two copies read from one member: the valid one with the
/// highest generation. Returns the error of copy A when neither is valid.
pub fn newest_copy(copy_a: &[u8], copy_b: &[u8]) -> Result<Superblock, SuperblockError> {
    match (Superblock::decode(copy_a), Superblock::decode(copy_b)) {
        (Ok(a), Ok(b)) => Ok(if b.generation > a.generation { b } else { a }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(error), Err(_)) => Err(error),
    }
}

struct Writer<'a> {
    out: &'a mut [u8],
}

impl Writer<'_> {
    fn bytes(&mut self, at: usize, value: &[u8]) {
        self.out[at..at + value.len()].copy_from_slice(value);
    }
    fn u8(&mut self, at: usize, value: u8) {
        self.out[at] = value;
    }
    fn u16(&mut self, at: usize, value: u16) {
        self.bytes(at, &value.to_le_bytes());
    }
    fn u32(&mut self, at: usize, value: u32) {
        self.bytes(at, &value.to_le_bytes());
    }
    fn u64(&mut self, at: usize, value: u64) {
        self.bytes(at, &value.to_le_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.bytes[at..at + len]
    }
    fn u8(&self, at: usize) -> u8 {
        self.bytes[at]
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.bytes(at, 2).try_into().expect("2 bytes"))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes(at, 4).try_into().expect("4 bytes"))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes(at, 8).try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            group_uuid: Uuid([7; 16]),
            member_uuid: Uuid([1; 16]),
            generation: 3,
            created_unix_seconds: 1,
            level: Level::Raid5,
            member_count: 3,
            chunk_bytes: 4096,
            member_data_bytes: 1 << 20,
            data_offset_bytes: 1 << 20,
            bitmap_offset_bytes: METADATA_AREA_OFFSET,
            bitmap_slot_bytes: 4096,
            region_bytes: 8192 * 4,
            journal_offset_bytes: METADATA_AREA_OFFSET + 8192,
            journal_bytes: 256 << 10,
            journal_mode: JournalMode::AlwaysOff,
            clean: false,
            rebuild_rate_percent: 30,
            scrub_rate_percent: 30,
            rebuild_latency_target_us: 0,
            journal_covering: true,
            journal_floor_sequence: 17,
            journal_device_bytes: 3 << 20,
            name: "dg".into(),
            members: (1..=3)
                .map(|n| MemberRecord {
                    uuid: Uuid([n; 16]),
                    size_bytes: 4 << 20,
                    role: Some(n - 1),
                    state: MemberRecordState::Active,
                    rebuild_position_bytes: 0,
                    replacing: false,
                })
                .collect(),
            bad_ranges: Vec::new(),
            config: b"{}".to_vec(),
        }
    }

    /// Re-seals an edited image so only the edited field is wrong.
    fn reseal(image: &mut [u8]) {
        image[12..16].fill(0);
        let crc = checksum::crc32c(image);
        image[12..16].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        let superblock = sample();
        assert_eq!(Superblock::decode(&superblock.encode()), Ok(superblock));
    }

    #[test]
    fn damage_is_detected() {
        let image = sample().encode();
        let mut torn = image.clone();
        torn[9000] ^= 0x10;
        assert_eq!(Superblock::decode(&torn), Err(SuperblockError::Checksum));
        assert_eq!(
            Superblock::decode(&image[..100]),
            Err(SuperblockError::Truncated)
        );
        assert_eq!(
            Superblock::decode(&[0u8; SUPERBLOCK_BYTES]),
            Err(SuperblockError::NotTessera)
        );
        let mut future = image.clone();
        future[8] = 9;
        reseal(&mut future);
        assert_eq!(
            Superblock::decode(&future),
            Err(SuperblockError::UnsupportedVersion(9))
        );
    }

    #[test]
    fn invalid_fields_are_refused() {
        let cases: [(usize, u8, &str); 6] = [
            (64, 7, "level"),
            (128, 9, "journal_mode"),
            (130, 0, "rebuild_rate_percent"),
            (131, 200, "member_records"),
            (256 + 24, 9, "member_role"),
            (256 + 25, 0, "member_state"),
        ];
        for (offset, value, field) in cases {
            let mut image = sample().encode();
            image[offset] = value;
            reseal(&mut image);
            assert_eq!(
                Superblock::decode(&image),
                Err(SuperblockError::Invalid(field)),
                "{field}"
            );
        }
        let mut overlapping = sample();
        overlapping.data_offset_bytes = METADATA_AREA_OFFSET;
        assert_eq!(
            Superblock::decode(&overlapping.encode()),
            Err(SuperblockError::Invalid("data_offset_bytes"))
        );
        let mut two_holders = sample();
        two_holders.members[1].role = Some(0);
        assert_eq!(
            Superblock::decode(&two_holders.encode()),
            Err(SuperblockError::Invalid("member_role"))
        );
    }

    #[test]
    fn newest_valid_copy_wins() {
        let old = sample();
        let mut new = sample();
        new.generation = 4;
        let mut torn_new = new.encode();
        torn_new[5000] ^= 1;
        assert_eq!(
            newest_copy(&old.encode(), &new.encode())
                .unwrap()
                .generation,
            4
        );
        assert_eq!(newest_copy(&old.encode(), &torn_new).unwrap().generation, 3);
        assert!(newest_copy(&torn_new, &torn_new).is_err());
    }

    proptest::proptest! {
        /// Arbitrary bytes, sealed with a valid CRC so the field checks are reached, never
        /// panic the decoder.
        #[test]
        fn random_images_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, SUPERBLOCK_BYTES), seal in proptest::bool::ANY) {
            let mut image = bytes;
            image[0..8].copy_from_slice(&MAGIC);
            image[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            if seal {
                reseal(&mut image);
            }
            let _ = Superblock::decode(&image);
        }

        /// Single-byte edits of a valid image either decode or are refused, never panic.
        #[test]
        fn edited_images_never_panic(offset in 16usize..SUPERBLOCK_BYTES, value in proptest::num::u8::ANY) {
            let mut image = sample().encode();
            image[offset] = value;
            reseal(&mut image);
            let _ = Superblock::decode(&image);
        }
    }
}
