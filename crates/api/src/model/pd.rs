//! Physical drives.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What backs a physical drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PdKind {
    /// A block device (`/dev/nvme0n1`).
    Block,
    /// A regular file.
    File,
    /// A remote NBD export (`nbd://host:port/name`, `nbd+unix:///name?socket=PATH`).
    Nbd,
    /// An in-memory device (`memory://SIZE`), for tests.
    Memory,
    /// A kind this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl PdKind {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            PdKind::Block => "block",
            PdKind::File => "file",
            PdKind::Nbd => "nbd",
            PdKind::Memory => "memory",
            PdKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for PdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The state of a physical drive, and of a member slot of a drive group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PdState {
    /// Working and in use (or ready for use).
    Online,
    /// Failed by an I/O error or by `pd fail`; holds no trusted data until rebuilt.
    Failed,
    /// Expected by a group but not found.
    Missing,
    /// Being written by a rebuild or a proactive copy.
    Rebuilding,
    /// Waiting to replace a failed member.
    HotSpare,
    /// Known to the daemon but in no group and not a spare.
    Unconfigured,
    /// A state this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl PdState {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            PdState::Online => "online",
            PdState::Failed => "failed",
            PdState::Missing => "missing",
            PdState::Rebuilding => "rebuilding",
            PdState::HotSpare => "hot_spare",
            PdState::Unconfigured => "unconfigured",
            PdState::Unknown => "unknown",
        }
    }
}

impl fmt::Display for PdState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the daemon zeroes a range of a drive (a region's zero-fill before its first write, a
/// host's zeroes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Zeroing {
    /// `fallocate(FALLOC_FL_ZERO_RANGE)`: Write Zeroes on a block device, unwritten extents in
    /// a file; no data is moved.
    ZeroRange,
    /// `fallocate(FALLOC_FL_PUNCH_HOLE)` (tmpfs); no data is moved.
    PunchHole,
    /// `NBD_CMD_WRITE_ZEROES` to a remote export; no data is sent.
    WriteZeroes,
    /// Zeroes are written like data (the drive refused the others, or has none).
    Written,
    /// A method this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl Zeroing {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Zeroing::ZeroRange => "zero_range",
            Zeroing::PunchHole => "punch_hole",
            Zeroing::WriteZeroes => "write_zeroes",
            Zeroing::Written => "written",
            Zeroing::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Zeroing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the daemon does I/O on an open drive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PdIo {
    /// Requests that meet the drive's alignment bypass the page cache (O_DIRECT); false for a
    /// file system that refused O_DIRECT, and for remote and in-memory drives.
    pub direct: bool,
    /// How ranges are zeroed.
    pub zeroing: Zeroing,
}

/// A physical drive, as `GET /v1/pds/{id}` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PdView {
    /// The daemon's id for the drive (stable while the daemon runs).
    pub id: u32,
    /// Device path, file path or remote URI, as added.
    pub path: String,
    /// What backs the drive.
    pub kind: PdKind,
    /// The drive's Tessera UUID (from its superblock), empty if it has none yet.
    pub uuid: String,
    /// Usable size of the device.
    pub size_bytes: u64,
    /// Current state.
    pub state: PdState,
    /// The drive group this drive is a member of, if any.
    pub dg: Option<u32>,
    /// The member's role (position) in its group, if it is a member.
    pub role: Option<u32>,
    /// The group a dedicated spare belongs to (`None` for a global spare or a non-spare).
    pub spare_for: Option<u32>,
    /// How the daemon does I/O on it; `None` while it is not open (missing).
    #[serde(default)]
    pub io: Option<PdIo>,
}

/// `POST /v1/pds`: add a physical drive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePd {
    /// Block device, file or remote export URI.
    pub path: String,
    /// Make the drive a hot spare.
    #[serde(default)]
    pub spare: bool,
    /// With `spare`: dedicate the spare to this drive group (`None`: a global spare).
    #[serde(default)]
    pub spare_for: Option<u32>,
}

/// `POST /v1/pds/{id}/replace`: rebuild or copy the member `{id}` onto `new_pd`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacePd {
    /// The drive that takes the member's place.
    pub new_pd: u32,
}
