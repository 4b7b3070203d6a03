//! The JSON objects and request bodies of the management API (docs/api.md). Field names are the
//! wire names. Answers tolerate unknown fields and unknown enum values (a newer daemon may send
//! them); request bodies refuse unknown fields, so a misspelt setting is an error, not a no-op.

mod access;
mod dg;
mod error;
mod event;
mod info;
mod level;
mod md;
mod names;
mod pd;
mod vd;

pub use access::{AccessRule, Peer, VdAccessView, admits, canonical_rules};
pub use dg::{
    BadRange, CreateDg, DgState, DgView, JournalMode, JournalPlacement, JournalView, MemberView,
    RebuildKind, RebuildView, ScrubDg, ScrubResultView, ScrubView, UpdateDg,
};
pub use error::{ApiError, ErrorBody, ErrorCode};
pub use event::{EventView, Severity};
pub use info::{
    CalibrationPointView, InfoView, IoView, KernelSpeedView, ParityChoiceView, ParityEngineView,
    ParitySelectionView,
};
pub use level::RaidLevel;
pub use md::{ImportMd, MdImportView};
pub use names::{DgRef, MAX_NAME_BYTES, validate_name};
pub use pd::{CreatePd, PdIo, PdKind, PdState, PdView, ReplacePd, Zeroing};
pub use vd::{Compression, CreateVd, ExportUblk, SetVd, ThinStatsView, UblkView, VdView};

/// The body of a successful `DELETE`: `{}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Empty {}
