//! Prometheus text exposition of the daemon's state.

use crate::plane::DataPlane;
use std::fmt::Write;

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
        let _ = writeln!(
            out,
            "# HELP tessera_dg_host_read_bytes_total Bytes read by hosts from a drive group."
        );
        let _ = writeln!(out, "# TYPE tessera_dg_host_read_bytes_total counter");
        for group in self.groups.values() {
            let counters = group.engine.status().counters;
            let _ = writeln!(
                out,
                "tessera_dg_host_read_bytes_total{{dg=\"{}\"}} {}",
                group.id, counters.host_read_bytes
            );
        }
        let _ = writeln!(
            out,
            "# HELP tessera_dg_host_write_bytes_total Bytes written by hosts to a drive group."
        );
        let _ = writeln!(out, "# TYPE tessera_dg_host_write_bytes_total counter");
        for group in self.groups.values() {
            let counters = group.engine.status().counters;
            let _ = writeln!(
                out,
                "tessera_dg_host_write_bytes_total{{dg=\"{}\"}} {}",
                group.id, counters.host_write_bytes
            );
        }
        let _ = writeln!(
            out,
            "# HELP tessera_dg_member_write_bytes_total Bytes written to members by a drive group."
        );
        let _ = writeln!(out, "# TYPE tessera_dg_member_write_bytes_total counter");
        for group in self.groups.values() {
            let counters = group.engine.status().counters;
            let _ = writeln!(
                out,
                "tessera_dg_member_write_bytes_total{{dg=\"{}\"}} {}",
                group.id, counters.member_write_bytes
            );
        }
        out
    }
}
