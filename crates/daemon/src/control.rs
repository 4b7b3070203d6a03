//! The management API's operations, carried out on the data plane.

use crate::plane::{AdminError, PlaneHandle};
use crate::plane::{NewGroup, NewThin};
use std::time::{Duration, Instant};
use tessera_api::controller::Controller;
use tessera_api::model::{
    ApiError, Compression, CreateDg, CreatePd, CreateVd, DgRef, DgView, ErrorCode, EventView,
    ExportUblk, InfoView, PdView, ReplacePd, ScrubDg, SetVd, UpdateDg, VdAccessView, VdView,
};
use tessera_api::model::{ImportMd, MdImportView};
use tessera_raid::geometry::{Level, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES};
use tessera_raid::superblock::JournalMode;

/// How long a change may take to become durable before the API gives up waiting.
const DURABLE_WAIT: Duration = Duration::from_secs(30);

pub struct Control {
    plane: PlaneHandle,
}

impl Control {
    pub fn new(plane: PlaneHandle) -> Control {
        Control { plane }
    }

    fn call<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut crate::plane::DataPlane) -> R + Send + 'static,
    ) -> Result<R, ApiError> {
        self.plane
            .call(work)
            .ok_or_else(|| ApiError::unavailable("the daemon is stopping"))
    }

    /// Polls the data plane until `ready` holds.
    fn wait_until(
        &self,
        what: &str,
        ready: impl Fn(&crate::plane::DataPlane) -> bool + Send + Sync + Clone + 'static,
    ) -> Result<(), ApiError> {
        let deadline = Instant::now() + DURABLE_WAIT;
        loop {
            let check = ready.clone();
            if self.call(move |plane| check(plane))? {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ApiError::internal(format!(
                    "{what} did not finish within {} s",
                    DURABLE_WAIT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn api_error(error: AdminError) -> ApiError {
    match error {
        AdminError::Invalid(message) => ApiError::invalid_argument(message),
        AdminError::NotFound(message) => ApiError::not_found(message),
        AdminError::Conflict(message) => ApiError::conflict(message),
        AdminError::Unavailable(message) => ApiError::unavailable(message),
    }
}

fn journal_mode(mode: tessera_api::model::JournalMode) -> JournalMode {
    match mode {
        tessera_api::model::JournalMode::AlwaysOn => JournalMode::AlwaysOn,
        tessera_api::model::JournalMode::DegradeOnly => JournalMode::DegradeOnly,
        tessera_api::model::JournalMode::AlwaysOff => JournalMode::AlwaysOff,
    }
}

impl Controller for Control {
    fn info(&self) -> Result<InfoView, ApiError> {
        self.call(|plane| plane.info_view())
    }

    fn list_pds(&self) -> Result<Vec<PdView>, ApiError> {
        self.call(|plane| plane.pd_views())
    }

    fn create_pd(&self, body: CreatePd) -> Result<PdView, ApiError> {
        self.call(move |plane| {
            let id = plane.add_drive(&body.path, body.spare, body.spare_for)?;
            Ok(plane.pd_view_of(id).expect("just added"))
        })?
        .map_err(api_error)
    }

    fn get_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.call(move |plane| plane.pd_view_of(id))?
            .ok_or_else(|| ApiError::not_found(format!("no physical drive {id}")))
    }

    fn delete_pd(&self, id: u32) -> Result<(), ApiError> {
        self.call(move |plane| plane.remove_drive(id))?
            .map_err(api_error)
    }

    fn fail_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.call(move |plane| plane.fail_drive(id))?
            .map_err(api_error)?;
        self.get_pd(id)
    }

    fn online_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.call(move |plane| plane.online_drive(id))?
            .map_err(api_error)?;
        self.get_pd(id)
    }

    fn replace_pd(&self, id: u32, body: ReplacePd) -> Result<DgView, ApiError> {
        let dg = self
            .call(move |plane| plane.replace_drive(id, body.new_pd))?
            .map_err(api_error)?;
        self.get_dg(&DgRef::Id(dg))
    }

    fn list_dgs(&self) -> Result<Vec<DgView>, ApiError> {
        self.call(|plane| plane.dg_views())
    }

    fn create_dg(&self, body: CreateDg) -> Result<DgView, ApiError> {
        let level = Level::from_number(body.level.number())
            .ok_or_else(|| ApiError::invalid_argument("unknown RAID level"))?;
        if let Some(chunk) = body.chunk_bytes
            && (!chunk.is_power_of_two() || !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&chunk))
        {
            return Err(ApiError::invalid_argument(format!(
                "chunk size {chunk} is not a power of two between 4K and 1M"
            )));
        }
        if let Some(name) = &body.name {
            tessera_api::model::validate_name(name).map_err(ApiError::invalid_argument)?;
        }
        let request = NewGroup {
            level,
            chunk_bytes: body.chunk_bytes,
            drives: body.pds,
            name: body.name,
            journal_mode: body
                .journal
                .map(journal_mode)
                .unwrap_or(JournalMode::DegradeOnly),
            journal_drive: body.journal_pd,
        };
        let dg = self
            .call(move |plane| plane.create_group(request))?
            .map_err(api_error)?;
        // The group exists once its superblocks are on the members.
        self.wait_until("writing the new group's metadata", move |plane| {
            plane
                .dg_view_of(dg)
                .is_none_or(|view| view.state != tessera_api::model::DgState::Initializing)
        })?;
        self.get_dg(&DgRef::Id(dg))
    }

    fn import_md(&self, body: ImportMd) -> Result<MdImportView, ApiError> {
        let imported = self
            .call(move |plane| plane.import_md(body.devices, body.name))?
            .map_err(api_error)?;
        let dg = imported.dg;
        // The group and its drive exist once the superblocks carrying them are on the members.
        self.wait_until("writing the adopted group's metadata", move |plane| {
            plane
                .dg_view_of(dg)
                .is_none_or(|view| view.state != tessera_api::model::DgState::Initializing)
        })?;
        Ok(MdImportView {
            dg: self.get_dg(&DgRef::Id(dg))?,
            vd: self.get_vd(&imported.vd)?,
            md_uuid: imported.md_uuid,
            md_name: imported.md_name,
            pds: imported.pds,
        })
    }

    fn get_dg(&self, dg: &DgRef) -> Result<DgView, ApiError> {
        let dg = dg.clone();
        self.call(move |plane| {
            let id = plane.find_group(&dg)?;
            Ok(plane.dg_view_of(id).expect("found"))
        })?
        .map_err(api_error)
    }

    fn delete_dg(&self, dg: &DgRef, force: bool) -> Result<(), ApiError> {
        if force {
            // The drives' ublk devices are removed first (their last writes need the group).
            let reference = dg.clone();
            let exported = self.call(move |plane| {
                let id = plane.find_group(&reference)?;
                Ok::<_, crate::plane::AdminError>(plane.ublk_exported_in_group(id))
            })?;
            for name in exported.unwrap_or_default() {
                match crate::plane::unexport_ublk(&self.plane, &name) {
                    Err(error) if error.code != ErrorCode::NotFound => return Err(error),
                    _ => {}
                }
            }
        }
        let reference = dg.clone();
        let id = self
            .call(move |plane| {
                let id = plane.find_group(&reference)?;
                plane.begin_delete_group(id, force)?;
                Ok(id)
            })?
            .map_err(api_error)?;
        self.wait_until("stopping the drive group", move |plane| {
            plane.group_stopped(id)
        })?;
        self.call(move |plane| plane.finish_delete_group(id))?
            .map_err(api_error)
    }

    fn update_dg(&self, dg: &DgRef, body: UpdateDg) -> Result<DgView, ApiError> {
        let reference = dg.clone();
        let journal = body.journal.map(journal_mode);
        let (id, generation) = self
            .call(move |plane| {
                let id = plane.find_group(&reference)?;
                let generation = plane.update_group(
                    id,
                    body.rebuild_rate_percent,
                    body.scrub_rate_percent,
                    body.rebuild_latency_target_us,
                    journal,
                )?;
                Ok((id, generation))
            })?
            .map_err(api_error)?;
        self.wait_until("recording the settings", move |plane| {
            plane.generation_durable(id, generation)
        })?;
        self.get_dg(&DgRef::Id(id))
    }

    fn scrub_dg(&self, dg: &DgRef, body: ScrubDg) -> Result<DgView, ApiError> {
        let reference = dg.clone();
        self.call(move |plane| {
            let id = plane.find_group(&reference)?;
            plane.scrub_group(id, body.repair)?;
            Ok(plane.dg_view_of(id).expect("found"))
        })?
        .map_err(api_error)
    }

    fn list_vds(&self) -> Result<Vec<VdView>, ApiError> {
        self.call(|plane| plane.vd_views())
    }

    fn create_vd(&self, body: CreateVd) -> Result<VdView, ApiError> {
        if !body.thin
            && (body.compression.is_some()
                || body.physical_bytes.is_some()
                || body.low_space_percent.is_some())
        {
            return Err(ApiError::invalid_argument(
                "compression, physical size and low-space threshold apply only to thin virtual drives",
            ));
        }
        let low_space_percent = body.low_space_percent.unwrap_or(10);
        if !(1..=90).contains(&low_space_percent) {
            return Err(ApiError::invalid_argument(
                "the low-space threshold is a percentage from 1 to 90",
            ));
        }
        let thin = body.thin.then(|| NewThin {
            compression: body.compression.unwrap_or(Compression::Lz4),
            physical_bytes: body.physical_bytes,
            low_space_percent,
        });
        let (name, generation) = self
            .call(move |plane| {
                let access = VdAccessView {
                    allow: body.allow,
                    read_only: body.read_only,
                    multi_conn: body.multi_conn,
                    tls_required: body.tls_required,
                };
                plane.create_vd(body.dg, body.name, body.size_bytes, access, thin)
            })?
            .map_err(api_error)?;
        let dg = body.dg;
        self.wait_until("recording the virtual drive", move |plane| {
            plane.generation_durable(dg, generation)
        })?;
        self.get_vd(&name)
    }

    fn get_vd(&self, name: &str) -> Result<VdView, ApiError> {
        let name = name.to_string();
        self.call(move |plane| {
            plane
                .vd_view_of(&name)
                .ok_or_else(|| ApiError::not_found(format!("no virtual drive {name}")))
        })?
    }

    fn set_vd(&self, name: &str, body: SetVd) -> Result<VdView, ApiError> {
        let grows = body.physical_bytes.is_some();
        let owned = name.to_string();
        let (dg, generation) = self
            .call(move |plane| plane.set_vd_access(&owned, body))?
            .map_err(api_error)?;
        self.wait_until("recording the change", move |plane| {
            plane.generation_durable(dg, generation)
        })?;
        if grows {
            // Only once the larger extent is durable may the store write into it.
            let owned = name.to_string();
            self.call(move |plane| plane.grow_thin(&owned))?
                .map_err(ApiError::conflict)?;
        }
        self.get_vd(name)
    }

    fn delete_vd(&self, name: &str, force: bool) -> Result<(), ApiError> {
        if force {
            // A ublk device is removed before the drive (its last writes need the drive).
            match crate::plane::unexport_ublk(&self.plane, name) {
                Err(error) if error.code != ErrorCode::NotFound => return Err(error),
                _ => {}
            }
        }
        let name = name.to_string();
        let (dg, generation) = self
            .call(move |plane| plane.delete_vd(&name, force))?
            .map_err(api_error)?;
        self.wait_until("recording the deletion", move |plane| {
            plane.generation_durable(dg, generation)
        })
    }

    fn export_vd_ublk(&self, name: &str, body: ExportUblk) -> Result<VdView, ApiError> {
        crate::plane::export_ublk(&self.plane, name, body)?;
        self.get_vd(name)
    }

    fn unexport_vd_ublk(&self, name: &str) -> Result<VdView, ApiError> {
        crate::plane::unexport_ublk(&self.plane, name)?;
        let owned = name.to_string();
        self.call(move |plane| plane.forget_ublk_export(&owned))?;
        self.get_vd(name)
    }

    fn events(&self, since: u64) -> Result<Vec<EventView>, ApiError> {
        self.call(move |plane| plane.events.since(since))
    }

    fn audit(&self, caller: &str, method: &str, target: &str, status: u16) {
        let message = format!("{method} {target} by {caller}: {status}");
        let refused = status >= 400;
        let _ = self.call(move |plane| {
            if refused {
                plane
                    .events
                    .push_warning("api_request", message, None, None);
            } else {
                plane.events.push_info("api_request", message, None, None);
            }
        });
    }

    fn metrics(&self) -> Result<String, ApiError> {
        self.call(|plane| plane.metrics_text())
    }
}
