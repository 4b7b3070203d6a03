//! The operations behind the API, one method per endpoint. The daemon implements this trait;
//! the server parses requests, calls it and encodes what it returns.

use crate::model::{
    ApiError, CreateDg, CreatePd, CreateVd, DgRef, DgView, EventView, ExportUblk, InfoView, PdView,
    ReplacePd, ScrubDg, SetVd, UpdateDg, VdView,
};
use crate::model::{ImportMd, MdImportView};

/// The daemon's side of the management API. Methods are called from many connection threads at
/// once. A method that fails must change nothing (docs/api.md). A panic inside a method is caught
/// by the server and answered with `internal`, but it is still a bug.
pub trait Controller: Send + Sync {
    /// `GET /v1/info`.
    fn info(&self) -> Result<InfoView, ApiError>;

    /// `GET /v1/pds`: every physical drive, by id.
    fn list_pds(&self) -> Result<Vec<PdView>, ApiError>;
    /// `POST /v1/pds`: add a drive (answered with 201).
    fn create_pd(&self, body: CreatePd) -> Result<PdView, ApiError>;
    /// `GET /v1/pds/{id}`.
    fn get_pd(&self, id: u32) -> Result<PdView, ApiError>;
    /// `DELETE /v1/pds/{id}`: forget a drive; `conflict` while it is in a group.
    fn delete_pd(&self, id: u32) -> Result<(), ApiError>;
    /// `POST /v1/pds/{id}/fail`: take the drive offline as a failure would.
    fn fail_pd(&self, id: u32) -> Result<PdView, ApiError>;
    /// `POST /v1/pds/{id}/online`: bring an administratively failed drive back (it is rebuilt).
    fn online_pd(&self, id: u32) -> Result<PdView, ApiError>;
    /// `POST /v1/pds/{id}/replace`: rebuild or copy member `id` onto `body.new_pd`.
    fn replace_pd(&self, id: u32, body: ReplacePd) -> Result<DgView, ApiError>;

    /// `GET /v1/dgs`: every drive group, by id.
    fn list_dgs(&self) -> Result<Vec<DgView>, ApiError>;
    /// `POST /v1/dgs`: create a group (answered with 201).
    fn create_dg(&self, body: CreateDg) -> Result<DgView, ApiError>;
    /// `GET /v1/dgs/{id-or-name}`.
    fn get_dg(&self, dg: &DgRef) -> Result<DgView, ApiError>;
    /// `DELETE /v1/dgs/{id-or-name}?force=`: `conflict` while virtual drives exist, unless forced.
    fn delete_dg(&self, dg: &DgRef, force: bool) -> Result<(), ApiError>;
    /// `PATCH /v1/dgs/{id-or-name}`: change the settings present in `body`.
    fn update_dg(&self, dg: &DgRef, body: UpdateDg) -> Result<DgView, ApiError>;
    /// `POST /v1/dgs/{id-or-name}/scrub`: start a scrub.
    fn scrub_dg(&self, dg: &DgRef, body: ScrubDg) -> Result<DgView, ApiError>;

    /// `POST /v1/md-imports`: adopt an md array with its data in place (answered with 201).
    fn import_md(&self, body: ImportMd) -> Result<MdImportView, ApiError> {
        let _ = body;
        Err(ApiError::unavailable(
            "this daemon does not import md arrays",
        ))
    }

    /// `GET /v1/vds`: every virtual drive, by name.
    fn list_vds(&self) -> Result<Vec<VdView>, ApiError>;
    /// `POST /v1/vds`: create a virtual drive (answered with 201).
    fn create_vd(&self, body: CreateVd) -> Result<VdView, ApiError>;
    /// `GET /v1/vds/{name}`.
    fn get_vd(&self, name: &str) -> Result<VdView, ApiError>;
    /// `DELETE /v1/vds/{name}?force=`: `conflict` while a client is connected, unless forced.
    fn delete_vd(&self, name: &str, force: bool) -> Result<(), ApiError>;
    /// `PATCH /v1/vds/{name}`: changes the drive's access (see `SetVd`).
    fn set_vd(&self, name: &str, body: SetVd) -> Result<VdView, ApiError>;
    /// `POST /v1/vds/{name}/ublk`: create the drive's ublk block device (`/dev/ublkbN`);
    /// `conflict` if it has one, `unavailable` on a kernel without ublk.
    fn export_vd_ublk(&self, name: &str, body: ExportUblk) -> Result<VdView, ApiError> {
        let _ = (name, body);
        Err(ApiError::unavailable("this daemon has no ublk front end"))
    }
    /// `DELETE /v1/vds/{name}/ublk`: stop and delete the drive's ublk block device.
    fn unexport_vd_ublk(&self, name: &str) -> Result<VdView, ApiError> {
        let _ = name;
        Err(ApiError::unavailable("this daemon has no ublk front end"))
    }

    /// `GET /v1/events?since=N`: the events with a sequence number above `since`, oldest first.
    fn events(&self, since: u64) -> Result<Vec<EventView>, ApiError>;

    /// A request that may change something (any method but GET and HEAD) was answered with
    /// `status`; `caller` says who sent it (`uid 0 (pid 812)`, or a TCP address). The daemon
    /// records it in the event log.
    fn audit(&self, caller: &str, method: &str, target: &str, status: u16) {
        let _ = (caller, method, target, status);
    }
    /// `GET /metrics`: Prometheus text exposition format.
    fn metrics(&self) -> Result<String, ApiError>;
}
