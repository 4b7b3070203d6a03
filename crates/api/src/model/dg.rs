//! Drive groups.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::level::RaidLevel;
use super::pd::PdState;

/// The state of a drive group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DgState {
    /// Every member online and consistent.
    Optimal,
    /// Redundancy reduced by failed or missing members; I/O goes on.
    Degraded,
    /// A rebuild (or proactive copy) runs onto a replacement.
    Rebuilding,
    /// Parity is being made consistent after an unclean stop.
    Resyncing,
    /// A new group's background initialization runs.
    Initializing,
    /// More members lost than the level survives; no I/O.
    Failed,
    /// A state this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl DgState {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            DgState::Optimal => "optimal",
            DgState::Degraded => "degraded",
            DgState::Rebuilding => "rebuilding",
            DgState::Resyncing => "resyncing",
            DgState::Initializing => "initializing",
            DgState::Failed => "failed",
            DgState::Unknown => "unknown",
        }
    }
}

impl fmt::Display for DgState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When the write-hole journal is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalMode {
    /// Every partial-stripe write is journaled.
    AlwaysOn,
    /// Journaled only while the group is degraded (the default).
    DegradeOnly,
    /// Never journaled; the write-intent bitmap alone handles crash resync.
    AlwaysOff,
}

impl JournalMode {
    /// Every mode.
    pub const ALL: [JournalMode; 3] = [
        JournalMode::AlwaysOn,
        JournalMode::DegradeOnly,
        JournalMode::AlwaysOff,
    ];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            JournalMode::AlwaysOn => "always_on",
            JournalMode::DegradeOnly => "degrade_only",
            JournalMode::AlwaysOff => "always_off",
        }
    }

    /// The mode with this wire name.
    pub fn parse(text: &str) -> Option<JournalMode> {
        JournalMode::ALL
            .into_iter()
            .find(|mode| mode.name() == text)
    }
}

impl fmt::Display for JournalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the journal lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalPlacement {
    /// A reserved, mirrored area on the members.
    Members,
    /// A dedicated physical drive (`JournalView::pd`).
    Device,
}

/// A group's journal settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalView {
    /// When the journal is used.
    pub mode: JournalMode,
    /// Where it lives.
    pub placement: JournalPlacement,
    /// The dedicated journal drive, for `placement: device`.
    #[serde(default)]
    pub pd: Option<u32>,
    /// Stripe updates are being journaled now (always for `always_on`; while degraded for
    /// `degrade_only`).
    #[serde(default)]
    pub active: bool,
    /// The journal holds every stripe update since it was last emptied, so a power cut followed
    /// by the loss of a member loses no acknowledged write.
    #[serde(default)]
    pub covering: bool,
    /// Bytes of the journal area on each member.
    #[serde(default)]
    pub area_bytes: u64,
}

/// One member slot of a drive group, in role order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    /// The physical drive in this slot (`None` if the slot's drive is unknown to the daemon).
    pub pd: Option<u32>,
    /// That drive's path.
    pub path: String,
    /// The slot's position in the group's layout.
    pub role: u32,
    /// The member's state.
    pub state: PdState,
    /// Where the member's first chunk starts on the device.
    pub data_offset_bytes: u64,
}

/// Whether a rebuild reconstructs from redundancy or copies a live member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebuildKind {
    /// Reconstruct a failed member's contents from the others.
    #[default]
    Rebuild,
    /// Proactive replace: copy from the live member, using redundancy only where it fails.
    Copy,
}

/// A running rebuild.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RebuildView {
    /// The drive being written.
    pub pd: u32,
    /// The role it is rebuilt into.
    pub role: u32,
    /// Rebuild or proactive copy.
    #[serde(default)]
    pub kind: RebuildKind,
    /// Done so far, 0 to 100.
    pub progress_percent: f64,
    /// The share of member bandwidth given to the rebuild.
    pub rate_percent: u32,
    /// Estimated time left (`None` until there is enough progress to estimate).
    pub eta_seconds: Option<u64>,
    /// Bytes of each member covered so far.
    pub position_bytes: u64,
    /// Bytes of each member to cover.
    pub total_bytes: u64,
}

/// A running scrub.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScrubView {
    /// Whether mismatches are repaired or only counted.
    pub repair: bool,
    /// Done so far, 0 to 100.
    pub progress_percent: f64,
    /// The share of member bandwidth given to the scrub.
    pub rate_percent: u32,
    /// Estimated time left (`None` until there is enough progress to estimate).
    pub eta_seconds: Option<u64>,
    /// Bytes of each member checked so far.
    pub position_bytes: u64,
    /// Bytes of each member to check.
    pub total_bytes: u64,
    /// Stripes whose parity (or mirror) disagreed so far.
    pub mismatches: u64,
    /// Of those, stripes repaired.
    pub repaired: u64,
}

/// The outcome of the last finished scrub.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScrubResultView {
    /// Whether it ran in repair mode.
    pub repair: bool,
    /// When it ended (milliseconds since the Unix epoch, UTC).
    pub finished_unix_ms: u64,
    /// Whether it covered the whole group (false: stopped early).
    pub completed: bool,
    /// Stripes whose parity (or mirror) disagreed.
    pub mismatches: u64,
    /// Of those, stripes repaired.
    pub repaired: u64,
    /// Stripes that could not be read or repaired (added to `bad_ranges`).
    pub unrecoverable: u64,
}

/// A range of the group's data space whose contents were lost (reads of it fail).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRange {
    /// Start in the group's data space.
    pub offset_bytes: u64,
    /// Length.
    pub len_bytes: u64,
}

/// A drive group, as `GET /v1/dgs/{id-or-name}` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DgView {
    /// The daemon's id for the group.
    pub id: u32,
    /// The group's name (unique).
    pub name: String,
    /// The group's UUID, kept in every member's superblock.
    pub uuid: String,
    /// RAID level.
    pub level: RaidLevel,
    /// Member layout (`left-symmetric`, `near-2`, `striped`, `mirrored`).
    pub layout: String,
    /// Current state.
    pub state: DgState,
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Usable data capacity.
    pub size_bytes: u64,
    /// Capacity not yet given to virtual drives.
    pub free_bytes: u64,
    /// Metadata generation counter (grows with every superblock update).
    pub generation: u64,
    /// Member slots in role order.
    pub members: Vec<MemberView>,
    /// The running rebuild, if any.
    pub rebuild: Option<RebuildView>,
    /// The running scrub, if any.
    #[serde(default)]
    pub scrub: Option<ScrubView>,
    /// The last finished scrub, if any.
    #[serde(default)]
    pub last_scrub: Option<ScrubResultView>,
    /// Journal settings.
    pub journal: JournalView,
    /// Rebuild share of member bandwidth, 1 to 100.
    pub rebuild_rate_percent: u32,
    /// Scrub share of member bandwidth, 1 to 100.
    #[serde(default)]
    pub scrub_rate_percent: Option<u32>,
    /// Ranges whose data was lost (reads of them fail).
    pub bad_ranges: Vec<BadRange>,
    /// Names of the virtual drives carved from the group.
    pub virtual_drives: Vec<String>,
}

/// `POST /v1/dgs`: create a drive group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateDg {
    /// RAID level (`5` or `"raid5"`).
    pub level: RaidLevel,
    /// Bytes per chunk: a power of two from 4 KiB to 1 MiB (`None`: 64 KiB).
    #[serde(default)]
    pub chunk_bytes: Option<u64>,
    /// Member drives in role order.
    pub pds: Vec<u32>,
    /// The group's name (`None`: the daemon names it `dg<ID>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Journal mode (`None`: `degrade_only`).
    #[serde(default)]
    pub journal: Option<JournalMode>,
    /// A dedicated journal drive (`None`: a reserved area on the members).
    #[serde(default)]
    pub journal_pd: Option<u32>,
}

/// `PATCH /v1/dgs/{id-or-name}`: change settings; absent fields stay as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateDg {
    /// Rebuild share of member bandwidth, 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild_rate_percent: Option<u32>,
    /// Scrub share of member bandwidth, 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_rate_percent: Option<u32>,
    /// Journal mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalMode>,
    /// Host latency the rebuild rate adapts to, microseconds (0 returns to the fixed rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild_latency_target_us: Option<u32>,
}

/// `POST /v1/dgs/{id-or-name}/scrub`: start a scrub (an empty body means `repair: false`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrubDg {
    /// Repair mismatches instead of only counting them.
    #[serde(default)]
    pub repair: bool,
}
