//! The API's views of drives, groups and virtual drives, built from the data plane's state.

use super::group::Group;
use super::{DataPlane, Drive};
use crate::blob::VdRecord;
use crate::devices::Handle;
use tessera_api::model::{
    BadRange, DgState, DgView, InfoView, IoView, JournalMode, JournalPlacement, JournalView,
    KernelSpeedView, MemberView, ParityChoiceView, ParityEngineView, ParitySelectionView, PdIo,
    PdKind, PdState, PdView, RaidLevel, RebuildKind, RebuildView, ScrubResultView, ScrubView,
    VdView, Zeroing,
};
use tessera_io::ZeroMethod;
use tessera_raid::engine::GroupState;
use tessera_raid::geometry::Level;

fn raid_level(level: Level) -> RaidLevel {
    match level {
        Level::Raid0 => RaidLevel::Raid0,
        Level::Raid1 => RaidLevel::Raid1,
        Level::Raid10 => RaidLevel::Raid10,
        Level::Raid5 => RaidLevel::Raid5,
        Level::Raid6 => RaidLevel::Raid6,
    }
}

fn member_state(state: &str) -> PdState {
    match state {
        // The journal drive works for its group like an online member.
        "online" | "journal" => PdState::Online,
        "rebuilding" => PdState::Rebuilding,
        "missing" => PdState::Missing,
        "hot_spare" => PdState::HotSpare,
        _ => PdState::Failed,
    }
}

fn journal_mode(mode: tessera_raid::superblock::JournalMode) -> JournalMode {
    match mode {
        tessera_raid::superblock::JournalMode::AlwaysOff => JournalMode::AlwaysOff,
        tessera_raid::superblock::JournalMode::DegradeOnly => JournalMode::DegradeOnly,
        tessera_raid::superblock::JournalMode::AlwaysOn => JournalMode::AlwaysOn,
    }
}

impl DataPlane {
    pub fn pd_views(&self) -> Vec<PdView> {
        self.drives
            .values()
            .map(|drive| self.pd_view(drive))
            .collect()
    }

    pub fn pd_view_of(&self, id: u32) -> Option<PdView> {
        self.drives.get(&id).map(|drive| self.pd_view(drive))
    }

    fn pd_view(&self, drive: &Drive) -> PdView {
        let kind = drive
            .device
            .as_ref()
            .map_or_else(|| guess_kind(&drive.path), |device| device.kind);
        let size_bytes = drive.device.as_ref().map_or(0, |device| device.size_bytes);
        let (state, role) = match (drive.group, &drive.device) {
            (Some((dg, member)), _) => {
                let group = &self.groups[&dg];
                let status = group.engine.status();
                let view = status.members.get(member);
                (
                    view.map_or(PdState::Failed, |m| member_state(m.state)),
                    view.and_then(|m| m.role).map(|r| r as u32),
                )
            }
            (None, None) => (PdState::Missing, None),
            (None, Some(_)) if drive.spare => (PdState::HotSpare, None),
            (None, Some(_)) => (PdState::Unconfigured, None),
        };
        PdView {
            id: drive.id,
            path: drive.path.clone(),
            kind,
            uuid: drive
                .member_uuid
                .map(|uuid| uuid.to_string())
                .unwrap_or_default(),
            size_bytes,
            state,
            dg: drive.group.map(|(dg, _)| dg),
            role,
            spare_for: drive.spare_for,
            io: drive.device.as_ref().map(|device| pd_io(&device.handle)),
        }
    }

    pub fn dg_views(&self) -> Vec<DgView> {
        self.groups
            .values()
            .map(|group| self.dg_view(group))
            .collect()
    }

    pub fn dg_view_of(&self, dg: u32) -> Option<DgView> {
        self.groups.get(&dg).map(|group| self.dg_view(group))
    }

    fn dg_view(&self, group: &Group) -> DgView {
        let engine = &group.engine;
        let superblock = engine.superblock();
        let status = engine.status();
        let geometry = engine.geometry();
        let members = status
            .members
            .iter()
            .enumerate()
            .filter(|(_, member)| member.role.is_some())
            .map(|(index, member)| {
                let pd = group.members.get(index).copied().flatten();
                MemberView {
                    pd,
                    path: pd
                        .and_then(|id| self.drives.get(&id))
                        .map(|d| d.path.clone())
                        .unwrap_or_default(),
                    role: member.role.expect("filtered") as u32,
                    state: member_state(member.state),
                    data_offset_bytes: superblock.data_offset_bytes,
                }
            })
            .collect::<Vec<_>>();
        let mut members = members;
        members.sort_by_key(|member| (member.role, member.state != PdState::Online));
        let rebuild = status.rebuild.map(|rebuild| {
            let progress = if rebuild.total_bytes == 0 {
                100.0
            } else {
                rebuild.position_bytes as f64 * 100.0 / rebuild.total_bytes as f64
            };
            let replacing = superblock.members.iter().any(|m| m.replacing);
            RebuildView {
                pd: group
                    .members
                    .get(rebuild.member)
                    .copied()
                    .flatten()
                    .unwrap_or(u32::MAX),
                role: rebuild.role as u32,
                kind: if replacing {
                    RebuildKind::Copy
                } else {
                    RebuildKind::Rebuild
                },
                progress_percent: (progress * 10.0).round() / 10.0,
                rate_percent: u32::from(engine.effective_rebuild_rate()),
                eta_seconds: eta(
                    rebuild.total_bytes - rebuild.position_bytes,
                    engine.background_bytes_per_second(),
                ),
                position_bytes: rebuild.position_bytes,
                total_bytes: rebuild.total_bytes,
            }
        });
        DgView {
            id: group.id,
            name: superblock.name.clone(),
            uuid: superblock.group_uuid.to_string(),
            level: raid_level(geometry.level()),
            layout: geometry.level().layout_name().into(),
            state: match status.state {
                GroupState::Starting => DgState::Initializing,
                GroupState::Optimal => DgState::Optimal,
                GroupState::Degraded => DgState::Degraded,
                GroupState::Rebuilding => DgState::Rebuilding,
                GroupState::Resyncing => DgState::Resyncing,
                GroupState::Failed => DgState::Failed,
            },
            chunk_bytes: geometry.chunk_bytes(),
            size_bytes: engine.data_bytes(),
            free_bytes: group.config.free_bytes(engine.data_bytes()),
            generation: status.generation,
            members,
            rebuild,
            scrub: engine.scrub_progress().map(|(repair, done, total, stats)| {
                let stripe = geometry.stripe_data_bytes();
                ScrubView {
                    repair,
                    progress_percent: if total == 0 {
                        100.0
                    } else {
                        (done as f64 * 1000.0 / total as f64).round() / 10.0
                    },
                    rate_percent: u32::from(superblock.scrub_rate_percent.max(1)),
                    eta_seconds: eta(
                        (total - done) * stripe,
                        engine.background_bytes_per_second(),
                    ),
                    position_bytes: done * stripe,
                    total_bytes: total * stripe,
                    mismatches: stats.mismatches,
                    repaired: stats.repaired,
                }
            }),
            last_scrub: engine.last_scrub().map(|result| ScrubResultView {
                repair: result.repair,
                finished_unix_ms: self
                    .scrub_finished_unix_ms
                    .get(&group.id)
                    .copied()
                    .unwrap_or(0),
                completed: result.completed,
                mismatches: result.stats.mismatches,
                repaired: result.stats.repaired,
                unrecoverable: result.stats.unrecoverable,
            }),
            journal: {
                let device = status
                    .members
                    .iter()
                    .position(|member| member.state == "journal");
                let status = engine.journal_status();
                JournalView {
                    mode: journal_mode(superblock.journal_mode),
                    placement: if device.is_some() {
                        JournalPlacement::Device
                    } else {
                        JournalPlacement::Members
                    },
                    pd: device.and_then(|index| group.members.get(index).copied().flatten()),
                    active: status.active,
                    covering: engine.journal_covering(),
                    area_bytes: status.ring_bytes,
                }
            },
            rebuild_rate_percent: u32::from(superblock.rebuild_rate_percent),
            scrub_rate_percent: Some(u32::from(if superblock.scrub_rate_percent == 0 {
                30
            } else {
                superblock.scrub_rate_percent
            })),
            bad_ranges: superblock
                .bad_ranges
                .iter()
                .map(|r| BadRange {
                    offset_bytes: r.offset_bytes,
                    len_bytes: r.len_bytes,
                })
                .collect(),
            virtual_drives: group
                .config
                .virtual_drives
                .iter()
                .map(|vd| vd.name.clone())
                .collect(),
        }
    }

    pub fn vd_views(&self) -> Vec<VdView> {
        self.groups
            .values()
            .flat_map(|group| {
                group
                    .config
                    .virtual_drives
                    .iter()
                    .map(move |vd| (group, vd))
            })
            .map(|(group, vd)| self.vd_view(group, vd))
            .collect()
    }

    pub fn vd_view_of(&self, name: &str) -> Option<VdView> {
        let (group, vd) = self.find_vd(name)?;
        Some(self.vd_view(group, vd))
    }

    fn vd_view(&self, group: &Group, vd: &VdRecord) -> VdView {
        VdView {
            name: vd.name.clone(),
            dg: group.id,
            size_bytes: vd.host_bytes(),
            offset_bytes: vd.offset_bytes,
            nbd_uri: format!(
                "nbd+unix:///{}?socket={}",
                vd.name,
                self.options.nbd_socket.display()
            ),
            connections: self.vd_connections(&vd.name),
            thin: vd.thin.is_some(),
            compression: vd.thin.as_ref().map(|thin| thin.compression),
            stats: self.thin_stats(vd),
            access: vd.access.clone(),
            ublk: self.ublk_view(&vd.name),
            lost_ranges: group
                .engine
                .superblock()
                .bad_ranges
                .iter()
                .filter_map(|bad| vd.lost_range(bad.offset_bytes, bad.len_bytes))
                .map(|(offset_bytes, len_bytes)| BadRange {
                    offset_bytes,
                    len_bytes,
                })
                .collect(),
        }
    }

    pub fn info_view(&self) -> InfoView {
        let report = self.parity.report();
        let choices = serde_json::to_value(report).ok();
        InfoView {
            version: env!("CARGO_PKG_VERSION").into(),
            parity_engine: self.options.parity_engine.clone(),
            parity: parity_selection(choices),
            parity_engines: self.parity_engine_views(),
            parity_offload: self.offload_parity,
            io: IoView {
                driver: self.driver_report.0.clone(),
                io_uring: self.driver_report.0 == "io_uring",
                reason: self.driver_report.1.clone(),
            },
            nbd_socket: Some(self.options.nbd_socket.display().to_string()),
            nbd_listen: self.options.nbd_listen.clone(),
            uptime_seconds: self.started.elapsed().as_secs(),
        }
    }
}

impl DataPlane {
    /// The calibrated engines, once the parity worker has them; the CPU kernels until then.
    fn parity_engine_views(&self) -> Vec<ParityEngineView> {
        #[cfg(feature = "gpu")]
        if let Some(worker) = &self.parity_worker {
            let figures = worker.figures.lock().expect("figures").clone();
            if let Some(reports) = &figures.reports {
                return reports
                    .iter()
                    .map(|report| ParityEngineView {
                        name: report.name.clone(),
                        kind: match report.kind {
                            tessera_parity_gpu::EngineKind::Cpu => "cpu".to_string(),
                            tessera_parity_gpu::EngineKind::Gpu => "gpu".to_string(),
                        },
                        adapter: report.adapter.clone(),
                        submit_latency_us: report.submit_latency_us,
                        calibration: report
                            .calibration
                            .iter()
                            .map(|point| tessera_api::model::CalibrationPointView {
                                batch_bytes: point.batch_bytes,
                                gbps: point.gbps,
                            })
                            .collect(),
                        min_batch_bytes: report.min_batch_bytes,
                        failure: report.failure.clone(),
                        batches: figures.batches.get(&report.name).copied().unwrap_or(0),
                        computed_bytes: figures.bytes.get(&report.name).copied().unwrap_or(0),
                    })
                    .collect();
            }
        }
        vec![ParityEngineView::cpu_kernels()]
    }
}

/// Seconds left at the recent rate, once there is one.
fn eta(remaining_bytes: u64, bytes_per_second: f64) -> Option<u64> {
    (bytes_per_second > 0.0).then(|| (remaining_bytes as f64 / bytes_per_second).ceil() as u64)
}

fn guess_kind(path: &str) -> PdKind {
    if path.starts_with("nbd") {
        PdKind::Nbd
    } else if path.starts_with("memory://") {
        PdKind::Memory
    } else if path.starts_with("/dev/") {
        PdKind::Block
    } else {
        PdKind::File
    }
}

/// The parity selection report in the API's shape, read through its serialized form so the
/// two crates stay independent.
fn parity_selection(report: Option<serde_json::Value>) -> ParitySelectionView {
    let report = report.unwrap_or_default();
    let source = report
        .get("source")
        .map(|s| s.to_string().trim_matches('"').to_string())
        .unwrap_or_else(|| "benchmark".into());
    let choices = report
        .get("choices")
        .and_then(|c| c.as_array())
        .map(|choices| {
            choices
                .iter()
                .map(|choice| ParityChoiceView {
                    operation: choice
                        .get("operation")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .into(),
                    kernel: choice
                        .get("kernel")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .into(),
                    streaming_kernel: choice
                        .get("streaming_kernel")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .into(),
                    speeds: choice
                        .get("speeds")
                        .and_then(|s| s.as_array())
                        .map(|speeds| {
                            speeds
                                .iter()
                                .map(|speed| KernelSpeedView {
                                    kernel: speed
                                        .get("kernel")
                                        .and_then(|v| v.as_str())
                                        .unwrap_or_default()
                                        .into(),
                                    gbps: speed
                                        .get("gbps")
                                        .and_then(|v| v.as_f64())
                                        .unwrap_or_default(),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    ParitySelectionView { source, choices }
}

/// How the daemon does I/O on an open drive, for its view.
fn pd_io(handle: &Handle) -> PdIo {
    match handle {
        Handle::Local(member) => PdIo {
            direct: member.direct(),
            zeroing: match member.zero_method() {
                ZeroMethod::ZeroRange => Zeroing::ZeroRange,
                ZeroMethod::PunchHole => Zeroing::PunchHole,
                ZeroMethod::Write => Zeroing::Written,
            },
        },
        Handle::Remote(remote) => PdIo {
            direct: false,
            zeroing: if remote.can_write_zeroes() {
                Zeroing::WriteZeroes
            } else {
                Zeroing::Written
            },
        },
        Handle::Memory(_) => PdIo {
            direct: false,
            zeroing: Zeroing::Written,
        },
    }
}
