//! Adopting an existing Linux md array (`POST /v1/md-imports`, `tessera dg import-md`).

use super::{DgView, VdView};
use serde::{Deserialize, Serialize};

/// `POST /v1/md-imports`: adopt the md array on these devices, data in place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportMd {
    /// The array's member devices (paths), in any order; md's roles decide the order. A
    /// missing member (within redundancy) becomes a failed member to rebuild.
    pub devices: Vec<String>,
    /// The name of the new drive group and of its virtual drive (`None`: md's array name when
    /// it is a valid name and free, else `dg<N>` and `vd<N>`).
    #[serde(default)]
    pub name: Option<String>,
}

/// What an import made: the drive group, its one virtual drive holding the array's contents,
/// and which md array it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MdImportView {
    pub dg: DgView,
    pub vd: VdView,
    /// md's set UUID, as mdadm prints it.
    pub md_uuid: String,
    /// md's array name (without the `host:` prefix).
    pub md_name: String,
    /// The physical drive id of each device, in the order given.
    pub pds: Vec<u32>,
}
