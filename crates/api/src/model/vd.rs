//! Virtual drives.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::VdAccessView;

/// How a thin virtual drive compresses its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Stored as written.
    None,
    /// LZ4: fast, moderate ratio.
    Lz4,
    /// Zstandard: slower, better ratio.
    Zstd,
}

impl Compression {
    /// Every choice.
    pub const ALL: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The choice with this wire name.
    pub fn parse(text: &str) -> Option<Compression> {
        Compression::ALL.into_iter().find(|c| c.name() == text)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Capacity and efficiency figures of a thin virtual drive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThinStatsView {
    /// Logical bytes holding data (written and not trimmed).
    pub logical_used_bytes: u64,
    /// Member bytes those take after compression (data only, before parity).
    pub physical_used_bytes: u64,
    /// Bytes written by hosts.
    pub host_bytes_written: u64,
    /// Bytes written to members on the drive's behalf (data, parity, metadata, cleaning).
    pub member_bytes_written: u64,
    /// `member_bytes_written / host_bytes_written`.
    pub write_amplification: f64,
    /// `logical_used_bytes / physical_used_bytes`.
    pub compression_ratio: f64,
    /// Blocks whose checksum did not match when read.
    pub checksum_errors_detected: u64,
    /// Of those, blocks rewritten from redundancy.
    pub checksum_errors_repaired: u64,
    /// The group data space the drive's log may use.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Of that, space not holding any live block (whole free segments).
    #[serde(default)]
    pub free_bytes: u64,
    /// Bytes segment cleaning re-wrote to keep free segments (part of `member_bytes_written`
    /// before parity).
    #[serde(default)]
    pub cleaning_bytes_written: u64,
    /// `size_bytes / capacity_bytes`: above 1 the drive is overcommitted.
    #[serde(default)]
    pub overcommit_ratio: f64,
    /// Serving, starting (replaying its log), stopped, or failed (with why).
    #[serde(default)]
    pub state: String,
    /// Memory the drive's block map takes in the daemon.
    #[serde(default)]
    pub map_memory_bytes: u64,
}

/// A virtual drive, as `GET /v1/vds/{name}` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VdView {
    /// The drive's name, also its NBD export name.
    pub name: String,
    /// The drive group it is carved from.
    pub dg: u32,
    /// Size seen by hosts.
    pub size_bytes: u64,
    /// Where the drive starts in the group's data space (thick drives; 0 for thin ones).
    pub offset_bytes: u64,
    /// The NBD URI to connect to.
    pub nbd_uri: String,
    /// NBD connections open now.
    pub connections: u32,
    /// Thin (log-structured, compressed) rather than thick.
    pub thin: bool,
    /// Compression of a thin drive.
    #[serde(default)]
    pub compression: Option<Compression>,
    /// Capacity statistics of a thin drive.
    #[serde(default)]
    pub stats: Option<ThinStatsView>,
    /// Who may connect to its export, and how.
    #[serde(default)]
    pub access: VdAccessView,
    /// Its ublk block device, when exported through ublk.
    #[serde(default)]
    pub ublk: Option<UblkView>,
    /// Ranges of a thick drive (offsets within the drive) whose data was lost beyond the
    /// group's redundancy: reads of them fail until they are written. Empty for thin drives,
    /// where a loss in the log shows as failed reads of the blocks stored there.
    #[serde(default)]
    pub lost_ranges: Vec<super::BadRange>,
}

/// A virtual drive's ublk block device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UblkView {
    /// The block device hosts use: `/dev/ublkbN`.
    pub device: String,
    /// N of `/dev/ublkbN`.
    pub device_id: u32,
    /// Hardware queues (all served by the daemon's data-plane thread).
    pub queues: u16,
    /// Requests in flight per queue.
    pub queue_depth: u16,
    /// `starting`, `live` or `stopping`.
    pub state: String,
}

/// `POST /v1/vds/{name}/ublk`: export a virtual drive as a ublk block device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportUblk {
    /// Hardware queues (`None`: one per CPU, at most 4).
    #[serde(default)]
    pub queues: Option<u16>,
    /// Requests in flight per queue (`None`: 64).
    #[serde(default)]
    pub queue_depth: Option<u16>,
}

/// `POST /v1/vds`: create a virtual drive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVd {
    /// The drive group to carve it from.
    pub dg: u32,
    /// The drive's name, also its NBD export name (`None`: the daemon names it `vd<N>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Size seen by hosts: a positive multiple of 512.
    pub size_bytes: u64,
    /// Thin (log-structured, compressed) rather than thick.
    #[serde(default)]
    pub thin: bool,
    /// Compression of a thin drive (`None`: the daemon's default).
    #[serde(default)]
    pub compression: Option<Compression>,
    /// The group data space a thin drive's log takes (`None`: the largest free extent).
    #[serde(default)]
    pub physical_bytes: Option<u64>,
    /// A thin drive raises a low-space event when its free space falls below this share of
    /// its capacity, in percent (1 to 90; `None`: 10).
    #[serde(default)]
    pub low_space_percent: Option<u8>,
    /// Access rules (`uid:N`, `gid:N`, `net:ADDRESS/PREFIX`); none: every client.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Export it read-only.
    #[serde(default)]
    pub read_only: bool,
    /// Let several clients write at once.
    #[serde(default)]
    pub multi_conn: bool,
    /// Serve it only over TLS.
    #[serde(default)]
    pub tls_required: bool,
}

/// `PATCH /v1/vds/{name}`: change a virtual drive's access (or a thin drive's physical space);
/// absent fields stay. Connections the new rules no longer admit (or no longer let write) are
/// closed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetVd {
    /// Replaces the access rules (an empty list admits every client).
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub read_only: Option<bool>,
    #[serde(default)]
    pub multi_conn: Option<bool>,
    #[serde(default)]
    pub tls_required: Option<bool>,
    /// Thin drives: grow the physical space to this many bytes (it cannot shrink; the group
    /// space right after the drive's must be free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_bytes: Option<u64>,
}
