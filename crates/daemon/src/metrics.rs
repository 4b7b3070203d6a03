//! Prometheus text exposition of the daemon's state.

use crate::plane::{DataPlane, VdIo};
use std::fmt::Write;

/// A per-virtual-drive counter: name, help text, and its value as text.
type VdSeries = (&'static str, &'static str, fn(&VdIo) -> String);

/// A per-thin-drive series: name, type, help text, and its value as text.
type ThinSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&tessera_thin::Stats) -> String,
);

/// A per-parity-engine series: name, type, help text, and its value.
type EngineSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&tessera_api::model::ParityEngineView) -> u64,
);

impl DataPlane {
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP tessera_dg_state Drive group state (1 for the current state)."
        );
        let _ = writeln!(out, "# TYPE tessera_dg_state gauge");
        for view in self.dg_views() {
            let _ = writeln!(
                out,
                "tessera_dg_state{{dg=\"{}\",name=\"{}\",state=\"{}\"}} 1",
                view.id, view.name, view.state
            );
        }
        type Field = fn(&tessera_raid::engine::Counters) -> u64;
        let series: [(&str, &str, Field); 22] = [
            (
                "tessera_dg_host_read_bytes_total",
                "Bytes read by hosts from a drive group.",
                |c| c.host_read_bytes,
            ),
            (
                "tessera_dg_host_write_bytes_total",
                "Bytes written by hosts to a drive group.",
                |c| c.host_write_bytes,
            ),
            (
                "tessera_dg_member_read_bytes_total",
                "Bytes read from members by a drive group.",
                |c| c.member_read_bytes,
            ),
            (
                "tessera_dg_member_write_bytes_total",
                "Bytes written to members by a drive group.",
                |c| c.member_write_bytes,
            ),
            (
                "tessera_dg_member_zeroed_bytes_total",
                "Bytes of members zeroed by a drive group (a region's zero-fill before its first write, zeroes a host wrote): Write Zeroes or fallocate where the member has it, written zeroes otherwise; not in member_write_bytes.",
                |c| c.member_zeroed_bytes,
            ),
            (
                "tessera_dg_host_reads_total",
                "Host reads answered by a drive group.",
                |c| c.host_reads,
            ),
            (
                "tessera_dg_host_writes_total",
                "Host writes answered by a drive group.",
                |c| c.host_writes,
            ),
            (
                "tessera_dg_full_stripe_writes_total",
                "Stripe updates that wrote whole stripes, parity computed from the new data alone.",
                |c| c.full_stripe_writes,
            ),
            (
                "tessera_dg_read_modify_writes_total",
                "Stripe updates that read the old data and parity.",
                |c| c.read_modify_writes,
            ),
            (
                "tessera_dg_reconstruct_writes_total",
                "Stripe updates that read the rest of the stripe.",
                |c| c.reconstruct_writes,
            ),
            (
                "tessera_dg_coalesced_writes_total",
                "Host writes merged with others into one stripe update.",
                |c| c.coalesced_writes,
            ),
            (
                "tessera_dg_degraded_reads_total",
                "Host read pieces reconstructed around a missing or failing member.",
                |c| c.degraded_reads,
            ),
            (
                "tessera_dg_member_read_errors_total",
                "Member reads that failed.",
                |c| c.read_errors,
            ),
            (
                "tessera_dg_repaired_reads_total",
                "Member read errors repaired by rewriting from redundancy.",
                |c| c.repaired_reads,
            ),
            (
                "tessera_dg_synced_reads_total",
                "Mirrored reads awaiting resync written to every copy before the answer.",
                |c| c.synced_reads,
            ),
            (
                "tessera_dg_resynced_ahead_stripes_total",
                "Parity-level stripes awaiting resync resynced first because a read needed them.",
                |c| c.resynced_ahead_stripes,
            ),
            (
                "tessera_dg_journal_batches_total",
                "Write journal batches written (each to every journal copy).",
                |c| c.journal_batches,
            ),
            (
                "tessera_dg_journal_home_batches_total",
                "Write journal batches written to their stripes' parity members alone.",
                |c| c.journal_home_batches,
            ),
            (
                "tessera_dg_journal_reserve_batches_total",
                "Write journal batches written from the reserved batch buffer (no pool room).",
                |c| c.journal_reserve_batches,
            ),
            (
                "tessera_dg_journal_entries_total",
                "Stripe updates recorded in the write journal.",
                |c| c.journal_entries,
            ),
            (
                "tessera_dg_journal_bytes_total",
                "Bytes written to journal areas, every copy counted.",
                |c| c.journal_bytes,
            ),
            (
                "tessera_dg_parity_offloaded_bytes_total",
                "Data bytes of full-stripe parity work a drive group handed to the parity engines.",
                |c| c.offloaded_parity_bytes,
            ),
        ];
        let counters: Vec<(u32, tessera_raid::engine::Counters)> = self
            .groups
            .values()
            .map(|group| (group.id, group.engine.status().counters))
            .collect();
        for (name, help, field) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (dg, counters) in &counters {
                let _ = writeln!(out, "{name}{{dg=\"{dg}\"}} {}", field(counters));
            }
        }
        self.vd_metrics(&mut out);
        self.thin_metrics(&mut out);
        self.parity_engine_metrics(&mut out);
        self.nbd_metrics(&mut out);
        out
    }

    /// The NBD server's connections and what its limits turned away.
    fn nbd_metrics(&self, out: &mut String) {
        for (name, kind, help, value) in [
            (
                "tessera_nbd_connections",
                "gauge",
                "NBD connections open (handshaking or serving).",
                self.nbd_connection_count() as u64,
            ),
            (
                "tessera_nbd_connections_refused_total",
                "counter",
                "NBD connections closed at once because the connection limit was reached.",
                self.refused_connections,
            ),
            (
                "tessera_nbd_handshake_timeouts_total",
                "counter",
                "NBD clients disconnected for not finishing the handshake in time.",
                self.handshake_timeouts,
            ),
            (
                "tessera_nbd_spliced_bytes_total",
                "counter",
                "Bytes of host reads carried from page-cache members to the socket by splice, \
                 past the engine's buffers.",
                self.splicing.spliced_bytes,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        }
    }

    /// Per parity engine: whether it is in service, and the handed-out work it computed.
    fn parity_engine_metrics(&self, out: &mut String) {
        let engines = self.info_view().parity_engines;
        let series: [EngineSeries; 3] = [
            (
                "tessera_parity_engine_up",
                "gauge",
                "Whether a parity engine is in service (0 after a GPU failed).",
                |engine| u64::from(engine.failure.is_none()),
            ),
            (
                "tessera_parity_engine_batches_total",
                "counter",
                "Batches of handed-out parity work a parity engine computed.",
                |engine| engine.batches,
            ),
            (
                "tessera_parity_engine_bytes_total",
                "counter",
                "Data bytes of handed-out parity work a parity engine computed.",
                |engine| engine.computed_bytes,
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for engine in &engines {
                let _ = writeln!(
                    out,
                    "{name}{{engine=\"{}\",kind=\"{}\"}} {}",
                    engine.name,
                    engine.kind,
                    value(engine)
                );
            }
        }
    }

    /// Per virtual drive: host reads and writes answered, their bytes, and the summed time
    /// from submission to the engine to its answer (average latency = sum / count).
    fn vd_metrics(&self, out: &mut String) {
        let vds: Vec<(String, u32, VdIo)> = self
            .groups
            .values()
            .flat_map(|group| {
                group.config.virtual_drives.iter().map(|vd| {
                    let io = self.vd_io.get(&vd.name).copied().unwrap_or_default();
                    (vd.name.clone(), group.id, io)
                })
            })
            .collect();
        let series: [VdSeries; 6] = [
            (
                "tessera_vd_reads_total",
                "Host reads answered for a virtual drive.",
                |io| io.reads.to_string(),
            ),
            (
                "tessera_vd_writes_total",
                "Host writes answered for a virtual drive.",
                |io| io.writes.to_string(),
            ),
            (
                "tessera_vd_read_bytes_total",
                "Bytes read by hosts from a virtual drive.",
                |io| io.read_bytes.to_string(),
            ),
            (
                "tessera_vd_write_bytes_total",
                "Bytes written by hosts to a virtual drive.",
                |io| io.write_bytes.to_string(),
            ),
            (
                "tessera_vd_read_latency_seconds_total",
                "Summed latency of the host reads of a virtual drive.",
                |io| format!("{:.6}", io.read_latency_us as f64 / 1e6),
            ),
            (
                "tessera_vd_write_latency_seconds_total",
                "Summed latency of the host writes of a virtual drive.",
                |io| format!("{:.6}", io.write_latency_us as f64 / 1e6),
            ),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (vd, dg, io) in &vds {
                let _ = writeln!(out, "{name}{{vd=\"{vd}\",dg=\"{dg}\"}} {}", value(io));
            }
        }
    }

    /// Per thin virtual drive: capacity, compression, write amplification and checksums.
    fn thin_metrics(&self, out: &mut String) {
        let series: [ThinSeries; 12] = [
            (
                "tessera_thin_logical_bytes",
                "gauge",
                "Size hosts see.",
                |s| s.logical_bytes.to_string(),
            ),
            (
                "tessera_thin_capacity_bytes",
                "gauge",
                "Group space the drive's log may use.",
                |s| s.physical_bytes.to_string(),
            ),
            (
                "tessera_thin_logical_used_bytes",
                "gauge",
                "Logical bytes holding data.",
                |s| s.logical_used_bytes.to_string(),
            ),
            (
                "tessera_thin_stored_bytes",
                "gauge",
                "Bytes the live blocks take after compression.",
                |s| s.stored_bytes.to_string(),
            ),
            (
                "tessera_thin_free_bytes",
                "gauge",
                "Group space of free segments.",
                |s| s.free_bytes.to_string(),
            ),
            (
                "tessera_thin_compression_ratio",
                "gauge",
                "Logical bytes in use per stored byte.",
                |s| format!("{:.4}", s.compression_ratio),
            ),
            (
                "tessera_thin_write_amplification_ratio",
                "gauge",
                "Member bytes written per host byte written.",
                |s| format!("{:.4}", s.write_amplification),
            ),
            (
                "tessera_thin_host_write_bytes_total",
                "counter",
                "Bytes written by hosts.",
                |s| s.host_bytes_written.to_string(),
            ),
            (
                "tessera_thin_member_write_bytes_total",
                "counter",
                "Bytes written to members for the drive, parity included.",
                |s| s.member_bytes_written.to_string(),
            ),
            (
                "tessera_thin_cleaning_write_bytes_total",
                "counter",
                "Bytes segment cleaning re-wrote.",
                |s| s.cleaning_bytes.to_string(),
            ),
            (
                "tessera_thin_checksum_errors_total",
                "counter",
                "Blocks that failed their checksum when read.",
                |s| s.checksum_errors_detected.to_string(),
            ),
            (
                "tessera_thin_checksum_repairs_total",
                "counter",
                "Blocks that failed their checksum and were rewritten from redundancy.",
                |s| s.checksum_errors_repaired.to_string(),
            ),
        ];
        let drives: Vec<(&String, u32, tessera_thin::Stats)> = self
            .thin
            .iter()
            .map(|(name, drive)| (name, drive.group, drive.store.stats()))
            .collect();
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (vd, dg, stats) in &drives {
                let _ = writeln!(out, "{name}{{vd=\"{vd}\",dg=\"{dg}\"}} {}", value(stats));
            }
        }
    }
}
