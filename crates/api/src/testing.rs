//! `FakeController`: an in-memory `Controller` with plausible rules, for tests of the server,
//! the client and the CLI (and for trying the CLI without drives). It is not the daemon: sizes
//! are invented and nothing touches a device.
//!
//! Test hooks: every drive added is 1 GiB unless its path is `memory://N` (N bytes); a path
//! starting with `/nonexistent` cannot be opened; the path `panic://` makes `create_pd` panic.
//! Every read of a drive group (`get_dg`, `list_dgs`) advances its running rebuild or scrub by
//! 25%, so a client polling with `--wait` sees progress and then the end.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::controller::Controller;
use crate::model::{
    ApiError, CreateDg, CreatePd, CreateVd, DgRef, DgState, DgView, EventView, InfoView, IoView,
    JournalMode, JournalPlacement, JournalView, KernelSpeedView, MemberView, ParityChoiceView,
    ParityEngineView, ParitySelectionView, PdIo, PdKind, PdState, PdView, RaidLevel, RebuildKind,
    RebuildView, ReplacePd, ScrubDg, ScrubResultView, ScrubView, SetVd, Severity, UpdateDg,
    VdAccessView, VdView, Zeroing, canonical_rules, validate_name,
};

/// Size of every fake drive unless its path says otherwise.
pub const FAKE_PD_BYTES: u64 = 1 << 30;
/// Where a fake member's data starts (its superblock area comes first).
pub const FAKE_DATA_OFFSET_BYTES: u64 = 1 << 20;
/// The NBD socket named in fake URIs.
pub const FAKE_NBD_SOCKET: &str = "/run/tessera/nbd.sock";
/// Progress a rebuild or scrub makes per read of its group.
const PROGRESS_STEP_PERCENT: f64 = 25.0;

#[derive(Default)]
struct State {
    pds: BTreeMap<u32, PdView>,
    next_pd: u32,
    dgs: BTreeMap<u32, DgView>,
    next_dg: u32,
    vds: BTreeMap<String, VdView>,
    events: Vec<EventView>,
}

impl State {
    fn event(&mut self, severity: Severity, kind: &str, message: String, dg: Option<u32>) {
        let seq = self.events.len() as u64 + 1;
        self.events.push(EventView {
            seq,
            time_unix_ms: 1_700_000_000_000 + seq * 1000,
            severity,
            kind: kind.to_string(),
            message,
            dg,
            pd: None,
            vd: None,
        });
    }

    fn pd(&self, id: u32) -> Result<&PdView, ApiError> {
        self.pds
            .get(&id)
            .ok_or_else(|| ApiError::not_found(format!("no physical drive {id}")))
    }

    fn dg_id(&self, dg: &DgRef) -> Result<u32, ApiError> {
        self.dgs
            .values()
            .find(|view| dg.matches(view.id, &view.name))
            .map(|view| view.id)
            .ok_or_else(|| ApiError::not_found(format!("no drive group {dg}")))
    }

    /// Moves running rebuilds and scrubs of group `id` one step on.
    fn advance(&mut self, id: u32) {
        let Some(dg) = self.dgs.get_mut(&id) else {
            return;
        };
        let mut finished_rebuild = None;
        if let Some(rebuild) = &mut dg.rebuild {
            rebuild.progress_percent =
                (rebuild.progress_percent + PROGRESS_STEP_PERCENT).min(100.0);
            rebuild.position_bytes =
                (rebuild.total_bytes as f64 * rebuild.progress_percent / 100.0) as u64;
            rebuild.eta_seconds = Some(((100.0 - rebuild.progress_percent) / 10.0) as u64);
            if rebuild.progress_percent >= 100.0 {
                finished_rebuild = Some(rebuild.pd);
            }
        }
        if let Some(pd) = finished_rebuild {
            dg.rebuild = None;
            for member in &mut dg.members {
                if member.pd == Some(pd) {
                    member.state = PdState::Online;
                }
            }
            dg.state = group_state(dg);
            dg.generation += 1;
            if let Some(view) = self.pds.get_mut(&pd) {
                view.state = PdState::Online;
            }
            self.event(
                Severity::Info,
                "rebuild_finished",
                format!("rebuild of drive group {id} onto physical drive {pd} finished"),
                Some(id),
            );
        }
        let Some(dg) = self.dgs.get_mut(&id) else {
            return;
        };
        if let Some(scrub) = &mut dg.scrub {
            scrub.progress_percent = (scrub.progress_percent + PROGRESS_STEP_PERCENT).min(100.0);
            scrub.position_bytes =
                (scrub.total_bytes as f64 * scrub.progress_percent / 100.0) as u64;
            scrub.eta_seconds = Some(((100.0 - scrub.progress_percent) / 10.0) as u64);
            if scrub.progress_percent >= 100.0 {
                dg.last_scrub = Some(ScrubResultView {
                    repair: scrub.repair,
                    finished_unix_ms: 1_700_000_000_000,
                    completed: true,
                    mismatches: scrub.mismatches,
                    repaired: scrub.repaired,
                    unrecoverable: 0,
                });
                dg.scrub = None;
                self.event(
                    Severity::Info,
                    "scrub_finished",
                    format!("scrub of drive group {id} finished: 0 mismatches"),
                    Some(id),
                );
            }
        }
    }
}

/// Redundancy of a level: members it can lose.
fn redundancy(level: RaidLevel) -> usize {
    match level {
        RaidLevel::Raid0 => 0,
        RaidLevel::Raid1 | RaidLevel::Raid10 | RaidLevel::Raid5 => 1,
        RaidLevel::Raid6 => 2,
    }
}

/// The state a group's members imply (a running rebuild wins over `degraded`).
fn group_state(dg: &DgView) -> DgState {
    let down = dg
        .members
        .iter()
        .filter(|member| member.state != PdState::Online)
        .count();
    let limit = if dg.level == RaidLevel::Raid1 {
        dg.members.len() - 1
    } else {
        redundancy(dg.level)
    };
    if down > limit {
        DgState::Failed
    } else if dg.rebuild.is_some() {
        DgState::Rebuilding
    } else if down > 0 {
        DgState::Degraded
    } else {
        DgState::Optimal
    }
}

fn data_members(level: RaidLevel, members: usize) -> u64 {
    let members = members as u64;
    match level {
        RaidLevel::Raid0 => members,
        RaidLevel::Raid1 => 1,
        RaidLevel::Raid10 => members / 2,
        RaidLevel::Raid5 => members - 1,
        RaidLevel::Raid6 => members - 2,
    }
}

fn pd_kind(path: &str) -> PdKind {
    if path.starts_with("nbd://") || path.starts_with("nbd+unix://") {
        PdKind::Nbd
    } else if path.starts_with("memory://") {
        PdKind::Memory
    } else if path.starts_with("/dev/") {
        PdKind::Block
    } else {
        PdKind::File
    }
}

/// An in-memory `Controller` (see the module documentation).
#[derive(Default)]
pub struct FakeController {
    state: Mutex<State>,
}

impl FakeController {
    /// An empty fake daemon.
    pub fn new() -> FakeController {
        FakeController::default()
    }

    /// Pretends `connections` NBD clients are connected to virtual drive `name`.
    pub fn set_connections(&self, name: &str, connections: u32) {
        let mut state = self.lock();
        if let Some(vd) = state.vds.get_mut(name) {
            vd.connections = connections;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Controller for FakeController {
    fn info(&self) -> Result<InfoView, ApiError> {
        Ok(InfoView {
            version: env!("CARGO_PKG_VERSION").to_string(),
            parity_engine: "auto".to_string(),
            parity: ParitySelectionView {
                source: "measured".to_string(),
                choices: vec![ParityChoiceView {
                    operation: "pq_gen".to_string(),
                    kernel: "scalar".to_string(),
                    streaming_kernel: "scalar".to_string(),
                    speeds: vec![
                        KernelSpeedView {
                            kernel: "naive".to_string(),
                            gbps: 0.5,
                        },
                        KernelSpeedView {
                            kernel: "scalar".to_string(),
                            gbps: 4.0,
                        },
                    ],
                }],
            },
            parity_engines: vec![ParityEngineView::cpu_kernels()],
            parity_offload: false,
            io: IoView {
                driver: "poll".to_string(),
                io_uring: false,
                reason: Some("fake controller".to_string()),
            },
            nbd_socket: Some(FAKE_NBD_SOCKET.to_string()),
            nbd_listen: None,
            uptime_seconds: 42,
        })
    }

    fn list_pds(&self) -> Result<Vec<PdView>, ApiError> {
        Ok(self.lock().pds.values().cloned().collect())
    }

    fn create_pd(&self, body: CreatePd) -> Result<PdView, ApiError> {
        assert!(
            body.path != "panic://",
            "test hook: create_pd panics on panic://"
        );
        let mut state = self.lock();
        if body.path.is_empty() {
            return Err(ApiError::invalid_argument("the drive path is empty"));
        }
        if body.path.starts_with("/nonexistent") {
            return Err(ApiError::invalid_argument(format!(
                "cannot open {}: No such file or directory",
                body.path
            )));
        }
        if let Some(existing) = state.pds.values().find(|pd| pd.path == body.path) {
            return Err(ApiError::conflict(format!(
                "{} is already physical drive {}",
                body.path, existing.id
            )));
        }
        if let Some(dg) = body.spare_for {
            if !body.spare {
                return Err(ApiError::invalid_argument(
                    "spare_for is only meaningful with spare: true",
                ));
            }
            state.dg_id(&DgRef::Id(dg))?;
        }
        let size_bytes = match body.path.strip_prefix("memory://") {
            Some(size) => size.parse().map_err(|_| {
                ApiError::invalid_argument(format!("memory drive size {size:?} is not a number"))
            })?,
            None => FAKE_PD_BYTES,
        };
        let id = state.next_pd;
        state.next_pd += 1;
        let view = PdView {
            id,
            path: body.path.clone(),
            kind: pd_kind(&body.path),
            uuid: format!("00000000-0000-4000-8000-{id:012x}"),
            size_bytes,
            state: if body.spare {
                PdState::HotSpare
            } else {
                PdState::Unconfigured
            },
            dg: None,
            role: None,
            spare_for: body.spare_for,
            io: Some(PdIo {
                direct: false,
                zeroing: Zeroing::Written,
            }),
        };
        state.pds.insert(id, view.clone());
        state.event(
            Severity::Info,
            "pd_added",
            format!("physical drive {id} added: {}", body.path),
            None,
        );
        Ok(view)
    }

    fn get_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.lock().pd(id).cloned()
    }

    fn delete_pd(&self, id: u32) -> Result<(), ApiError> {
        let mut state = self.lock();
        let pd = state.pd(id)?;
        if let Some(dg) = pd.dg {
            return Err(ApiError::conflict(format!(
                "physical drive {id} is a member of drive group {dg}"
            )));
        }
        state.pds.remove(&id);
        state.event(
            Severity::Info,
            "pd_removed",
            format!("physical drive {id} removed"),
            None,
        );
        Ok(())
    }

    fn fail_pd(&self, id: u32) -> Result<PdView, ApiError> {
        let mut state = self.lock();
        let pd = state.pd(id)?.clone();
        if pd.state == PdState::Failed {
            return Err(ApiError::conflict(format!(
                "physical drive {id} has already failed"
            )));
        }
        if let Some(dg_id) = pd.dg {
            let dg = state.dgs.get_mut(&dg_id).expect("a member's group exists");
            for member in &mut dg.members {
                if member.pd == Some(id) {
                    member.state = PdState::Failed;
                }
            }
            if dg.rebuild.as_ref().is_some_and(|rebuild| rebuild.pd == id) {
                dg.rebuild = None;
            }
            dg.state = group_state(dg);
            dg.generation += 1;
        }
        let view = state.pds.get_mut(&id).expect("looked up above");
        view.state = PdState::Failed;
        let view = view.clone();
        state.event(
            Severity::Warning,
            "member_failed",
            format!("physical drive {id} failed (administrative)"),
            pd.dg,
        );
        Ok(view)
    }

    fn online_pd(&self, id: u32) -> Result<PdView, ApiError> {
        let mut state = self.lock();
        let pd = state.pd(id)?.clone();
        if pd.state != PdState::Failed {
            return Err(ApiError::conflict(format!(
                "physical drive {id} is {}, not failed",
                pd.state
            )));
        }
        let new_state = match (pd.dg, pd.role) {
            (Some(dg_id), Some(role)) => {
                let dg = state.dgs.get_mut(&dg_id).expect("a member's group exists");
                for member in &mut dg.members {
                    if member.pd == Some(id) {
                        member.state = PdState::Rebuilding;
                    }
                }
                dg.rebuild = Some(RebuildView {
                    pd: id,
                    role,
                    kind: RebuildKind::Rebuild,
                    progress_percent: 0.0,
                    rate_percent: dg.rebuild_rate_percent,
                    eta_seconds: None,
                    position_bytes: 0,
                    total_bytes: pd.size_bytes - FAKE_DATA_OFFSET_BYTES,
                });
                dg.state = group_state(dg);
                PdState::Rebuilding
            }
            _ => PdState::Unconfigured,
        };
        let view = state.pds.get_mut(&id).expect("looked up above");
        view.state = new_state;
        Ok(view.clone())
    }

    fn replace_pd(&self, id: u32, body: ReplacePd) -> Result<DgView, ApiError> {
        let mut state = self.lock();
        let old = state.pd(id)?.clone();
        let new = state.pd(body.new_pd)?.clone();
        let (Some(dg_id), Some(role)) = (old.dg, old.role) else {
            return Err(ApiError::conflict(format!(
                "physical drive {id} is not a member of a drive group"
            )));
        };
        if !matches!(new.state, PdState::Unconfigured | PdState::HotSpare) || new.dg.is_some() {
            return Err(ApiError::conflict(format!(
                "physical drive {} is {}; a replacement must be unconfigured or a hot spare",
                new.id, new.state
            )));
        }
        if new.size_bytes < old.size_bytes {
            return Err(ApiError::conflict(format!(
                "physical drive {} is smaller than physical drive {id}",
                new.id
            )));
        }
        let dg = state.dgs.get_mut(&dg_id).expect("a member's group exists");
        if dg.rebuild.is_some() {
            return Err(ApiError::conflict(format!(
                "drive group {dg_id} is already rebuilding"
            )));
        }
        let kind = if old.state == PdState::Failed {
            RebuildKind::Rebuild
        } else {
            RebuildKind::Copy
        };
        let member = &mut dg.members[role as usize];
        member.pd = Some(new.id);
        member.path = new.path.clone();
        member.state = PdState::Rebuilding;
        dg.rebuild = Some(RebuildView {
            pd: new.id,
            role,
            kind,
            progress_percent: 0.0,
            rate_percent: dg.rebuild_rate_percent,
            eta_seconds: None,
            position_bytes: 0,
            total_bytes: old.size_bytes - FAKE_DATA_OFFSET_BYTES,
        });
        dg.state = group_state(dg);
        dg.generation += 1;
        let view = dg.clone();
        let old_view = state.pds.get_mut(&id).expect("looked up above");
        old_view.dg = None;
        old_view.role = None;
        old_view.state = PdState::Unconfigured;
        let new_view = state.pds.get_mut(&new.id).expect("looked up above");
        new_view.dg = Some(dg_id);
        new_view.role = Some(role);
        new_view.spare_for = None;
        new_view.state = PdState::Rebuilding;
        state.event(
            Severity::Info,
            "rebuild_started",
            format!(
                "drive group {dg_id}: physical drive {} replaces {id}",
                new.id
            ),
            Some(dg_id),
        );
        Ok(view)
    }

    fn list_dgs(&self) -> Result<Vec<DgView>, ApiError> {
        let mut state = self.lock();
        let ids: Vec<u32> = state.dgs.keys().copied().collect();
        for id in ids {
            state.advance(id);
        }
        Ok(state.dgs.values().cloned().collect())
    }

    fn create_dg(&self, body: CreateDg) -> Result<DgView, ApiError> {
        let mut state = self.lock();
        let minimum = if body.level == RaidLevel::Raid6 { 4 } else { 2 };
        if body.pds.len() < minimum || body.pds.len() > 32 {
            return Err(ApiError::invalid_argument(format!(
                "{} needs {minimum} to 32 members, got {}",
                body.level,
                body.pds.len()
            )));
        }
        let chunk_bytes = body.chunk_bytes.unwrap_or(64 << 10);
        if !chunk_bytes.is_power_of_two() || !(4096..=1 << 20).contains(&chunk_bytes) {
            return Err(ApiError::invalid_argument(format!(
                "chunk size {chunk_bytes} is not a power of two between 4096 and 1048576"
            )));
        }
        let mut members = Vec::new();
        for (role, &id) in body.pds.iter().enumerate() {
            let pd = state.pd(id)?;
            if body.pds[..role].contains(&id) {
                return Err(ApiError::invalid_argument(format!(
                    "physical drive {id} is listed twice"
                )));
            }
            if pd.state != PdState::Unconfigured {
                return Err(ApiError::conflict(format!(
                    "physical drive {id} is {}, not unconfigured",
                    pd.state
                )));
            }
            members.push(MemberView {
                pd: Some(id),
                path: pd.path.clone(),
                role: role as u32,
                state: PdState::Online,
                data_offset_bytes: FAKE_DATA_OFFSET_BYTES,
            });
        }
        let id = state.next_dg;
        let name = body.name.clone().unwrap_or_else(|| format!("dg{id}"));
        validate_name(&name).map_err(ApiError::invalid_argument)?;
        if state.dgs.values().any(|dg| dg.name == name) {
            return Err(ApiError::conflict(format!(
                "a drive group named {name} exists"
            )));
        }
        if let Some(journal_pd) = body.journal_pd {
            state.pd(journal_pd)?;
        }
        let smallest = body
            .pds
            .iter()
            .map(|id| state.pds[id].size_bytes)
            .min()
            .expect("at least two members");
        let member_data_bytes =
            smallest.saturating_sub(FAKE_DATA_OFFSET_BYTES) / chunk_bytes * chunk_bytes;
        let size_bytes = member_data_bytes * data_members(body.level, body.pds.len());
        state.next_dg += 1;
        let view = DgView {
            id,
            name: name.clone(),
            uuid: format!("11111111-0000-4000-8000-{id:012x}"),
            level: body.level,
            layout: match body.level {
                RaidLevel::Raid0 => "striped",
                RaidLevel::Raid1 => "mirrored",
                RaidLevel::Raid10 => "near-2",
                RaidLevel::Raid5 | RaidLevel::Raid6 => "left-symmetric",
            }
            .to_string(),
            state: DgState::Optimal,
            chunk_bytes,
            size_bytes,
            free_bytes: size_bytes,
            generation: 1,
            members,
            rebuild: None,
            scrub: None,
            last_scrub: None,
            journal: JournalView {
                mode: body.journal.unwrap_or(JournalMode::DegradeOnly),
                placement: if body.journal_pd.is_some() {
                    JournalPlacement::Device
                } else {
                    JournalPlacement::Members
                },
                pd: body.journal_pd,
                active: false,
                covering: false,
                area_bytes: 1 << 20,
            },
            rebuild_rate_percent: 30,
            scrub_rate_percent: Some(30),
            bad_ranges: Vec::new(),
            virtual_drives: Vec::new(),
        };
        for (role, pd) in body.pds.iter().enumerate() {
            let pd = state.pds.get_mut(pd).expect("checked above");
            pd.dg = Some(id);
            pd.role = Some(role as u32);
            pd.state = PdState::Online;
        }
        state.dgs.insert(id, view.clone());
        state.event(
            Severity::Info,
            "dg_created",
            format!("drive group {id} ({name}) created: {}", body.level),
            Some(id),
        );
        Ok(view)
    }

    fn get_dg(&self, dg: &DgRef) -> Result<DgView, ApiError> {
        let mut state = self.lock();
        let id = state.dg_id(dg)?;
        state.advance(id);
        Ok(state.dgs[&id].clone())
    }

    fn delete_dg(&self, dg: &DgRef, force: bool) -> Result<(), ApiError> {
        let mut state = self.lock();
        let id = state.dg_id(dg)?;
        let view = state.dgs[&id].clone();
        if !view.virtual_drives.is_empty() && !force {
            return Err(ApiError::conflict(format!(
                "drive group {dg} holds virtual drives ({}); delete them or force",
                view.virtual_drives.join(", ")
            )));
        }
        for name in &view.virtual_drives {
            state.vds.remove(name);
        }
        for member in &view.members {
            if let Some(pd) = member.pd.and_then(|pd| state.pds.get_mut(&pd)) {
                pd.dg = None;
                pd.role = None;
                pd.state = PdState::Unconfigured;
            }
        }
        state.dgs.remove(&id);
        state.event(
            Severity::Info,
            "dg_deleted",
            format!("drive group {id} deleted"),
            Some(id),
        );
        Ok(())
    }

    fn update_dg(&self, dg: &DgRef, body: UpdateDg) -> Result<DgView, ApiError> {
        let mut state = self.lock();
        let id = state.dg_id(dg)?;
        for rate in [body.rebuild_rate_percent, body.scrub_rate_percent]
            .into_iter()
            .flatten()
        {
            if !(1..=100).contains(&rate) {
                return Err(ApiError::invalid_argument(format!(
                    "rate {rate}% is not between 1 and 100"
                )));
            }
        }
        let view = state.dgs.get_mut(&id).expect("looked up above");
        if let Some(rate) = body.rebuild_rate_percent {
            view.rebuild_rate_percent = rate;
            if let Some(rebuild) = &mut view.rebuild {
                rebuild.rate_percent = rate;
            }
        }
        if let Some(rate) = body.scrub_rate_percent {
            view.scrub_rate_percent = Some(rate);
        }
        if let Some(mode) = body.journal {
            view.journal.mode = mode;
        }
        view.generation += 1;
        Ok(view.clone())
    }

    fn scrub_dg(&self, dg: &DgRef, body: ScrubDg) -> Result<DgView, ApiError> {
        let mut state = self.lock();
        let id = state.dg_id(dg)?;
        let view = state.dgs.get_mut(&id).expect("looked up above");
        if view.scrub.is_some() {
            return Err(ApiError::conflict(format!(
                "drive group {dg} is already being scrubbed"
            )));
        }
        if view.state != DgState::Optimal {
            return Err(ApiError::conflict(format!(
                "drive group {dg} is {}; scrub needs an optimal group",
                view.state
            )));
        }
        let total_bytes = view.size_bytes / data_members(view.level, view.members.len());
        view.scrub = Some(ScrubView {
            repair: body.repair,
            progress_percent: 0.0,
            rate_percent: view.scrub_rate_percent.unwrap_or(30),
            eta_seconds: None,
            position_bytes: 0,
            total_bytes,
            mismatches: 0,
            repaired: 0,
        });
        let view = view.clone();
        state.event(
            Severity::Info,
            "scrub_started",
            format!("scrub of drive group {id} started"),
            Some(id),
        );
        Ok(view)
    }

    fn list_vds(&self) -> Result<Vec<VdView>, ApiError> {
        Ok(self.lock().vds.values().cloned().collect())
    }

    fn create_vd(&self, body: CreateVd) -> Result<VdView, ApiError> {
        let mut state = self.lock();
        let dg_id = state.dg_id(&DgRef::Id(body.dg))?;
        let name = match body.name {
            Some(name) => name,
            None => (0..)
                .map(|n| format!("vd{n}"))
                .find(|name| !state.vds.contains_key(name))
                .expect("some vd<N> is free"),
        };
        validate_name(&name).map_err(ApiError::invalid_argument)?;
        if state.vds.contains_key(&name) {
            return Err(ApiError::conflict(format!(
                "a virtual drive named {name} exists"
            )));
        }
        if body.size_bytes == 0 || !body.size_bytes.is_multiple_of(512) {
            return Err(ApiError::invalid_argument(format!(
                "size {} is not a positive multiple of 512",
                body.size_bytes
            )));
        }
        let dg = state.dgs.get_mut(&dg_id).expect("looked up above");
        if body.size_bytes > dg.free_bytes {
            return Err(ApiError::conflict(format!(
                "drive group {dg_id} has {} bytes free, {} asked",
                dg.free_bytes, body.size_bytes
            )));
        }
        let offset_bytes = dg.size_bytes - dg.free_bytes;
        dg.free_bytes -= body.size_bytes;
        dg.virtual_drives.push(name.clone());
        let view = VdView {
            name: name.clone(),
            dg: dg_id,
            size_bytes: body.size_bytes,
            offset_bytes,
            nbd_uri: format!("nbd+unix:///{name}?socket={FAKE_NBD_SOCKET}"),
            connections: 0,
            thin: body.thin,
            compression: body.compression,
            stats: None,
            access: VdAccessView {
                allow: canonical_rules(&body.allow).map_err(ApiError::invalid_argument)?,
                read_only: body.read_only,
                multi_conn: body.multi_conn,
                tls_required: body.tls_required,
            },
            ublk: None,
            lost_ranges: Vec::new(),
        };
        state.vds.insert(name.clone(), view.clone());
        state.event(
            Severity::Info,
            "vd_created",
            format!("virtual drive {name} created"),
            Some(dg_id),
        );
        Ok(view)
    }

    fn get_vd(&self, name: &str) -> Result<VdView, ApiError> {
        self.lock()
            .vds
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no virtual drive {name}")))
    }

    fn set_vd(&self, name: &str, body: SetVd) -> Result<VdView, ApiError> {
        let mut state = self.lock();
        let Some(vd) = state.vds.get_mut(name) else {
            return Err(ApiError::not_found(format!("no virtual drive {name}")));
        };
        if let Some(allow) = &body.allow {
            vd.access.allow = canonical_rules(allow).map_err(ApiError::invalid_argument)?;
        }
        vd.access.read_only = body.read_only.unwrap_or(vd.access.read_only);
        vd.access.multi_conn = body.multi_conn.unwrap_or(vd.access.multi_conn);
        vd.access.tls_required = body.tls_required.unwrap_or(vd.access.tls_required);
        Ok(vd.clone())
    }

    fn delete_vd(&self, name: &str, force: bool) -> Result<(), ApiError> {
        let mut state = self.lock();
        let Some(vd) = state.vds.get(name).cloned() else {
            return Err(ApiError::not_found(format!("no virtual drive {name}")));
        };
        if vd.connections > 0 && !force {
            return Err(ApiError::conflict(format!(
                "virtual drive {name} has {} client connection(s); disconnect them or force",
                vd.connections
            )));
        }
        state.vds.remove(name);
        if let Some(dg) = state.dgs.get_mut(&vd.dg) {
            dg.virtual_drives.retain(|other| other != name);
            // Space is only given back when it is the last extent, as a bump allocator would.
            if vd.offset_bytes + vd.size_bytes == dg.size_bytes - dg.free_bytes {
                dg.free_bytes += vd.size_bytes;
            }
        }
        state.event(
            Severity::Info,
            "vd_deleted",
            format!("virtual drive {name} deleted"),
            Some(vd.dg),
        );
        Ok(())
    }

    fn events(&self, since: u64) -> Result<Vec<EventView>, ApiError> {
        Ok(self
            .lock()
            .events
            .iter()
            .filter(|event| event.seq > since)
            .cloned()
            .collect())
    }

    fn metrics(&self) -> Result<String, ApiError> {
        let state = self.lock();
        Ok(format!(
            "# HELP tessera_physical_drives Physical drives known to the daemon.\n\
             # TYPE tessera_physical_drives gauge\n\
             tessera_physical_drives {}\n\
             # HELP tessera_drive_groups Drive groups.\n\
             # TYPE tessera_drive_groups gauge\n\
             tessera_drive_groups {}\n",
            state.pds.len(),
            state.dgs.len()
        ))
    }
}
