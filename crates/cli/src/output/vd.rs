//! Virtual drives.

use tessera_api::VdView;

use super::{Column, Table, key_values, lost_ranges};
use crate::style::Style;
use crate::units::format_size;

fn kind(vd: &VdView) -> String {
    match (vd.thin, vd.compression) {
        (false, _) => "thick".to_string(),
        (true, Some(compression)) => format!("thin ({compression})"),
        (true, None) => "thin".to_string(),
    }
}

/// `tessera vd list`.
pub fn list_vds(style: Style, vds: &[VdView]) -> String {
    if vds.is_empty() {
        return "no virtual drives (create one with `tessera vd create DG --size SIZE`)\n"
            .to_string();
    }
    let mut table = Table::new(&[
        ("NAME", Column::Text),
        ("DG", Column::Number),
        ("SIZE", Column::Number),
        ("KIND", Column::Text),
        ("CONNS", Column::Number),
        ("NBD URI", Column::Text),
    ]);
    for vd in vds {
        table.row(vec![
            vd.name.clone(),
            vd.dg.to_string(),
            format_size(vd.size_bytes),
            kind(vd),
            vd.connections.to_string(),
            vd.nbd_uri.clone(),
        ]);
    }
    table.render(style)
}

/// `tessera vd describe`.
pub fn describe_vd(style: Style, vd: &VdView) -> String {
    let mut pairs = vec![
        ("NBD URI", vd.nbd_uri.clone()),
        ("drive group", vd.dg.to_string()),
        (
            "size",
            format!("{} ({} bytes)", format_size(vd.size_bytes), vd.size_bytes),
        ),
        ("kind", kind(vd)),
        ("connections", vd.connections.to_string()),
        (
            "allowed clients",
            if vd.access.allow.is_empty() {
                "any".to_string()
            } else {
                vd.access.allow.join(", ")
            },
        ),
        (
            "access",
            format!(
                "{}, {}",
                if vd.access.read_only {
                    "read-only"
                } else {
                    "read-write"
                },
                if vd.access.multi_conn {
                    "several writers"
                } else {
                    "one writer at a time"
                }
            ) + if vd.access.tls_required {
                ", TLS only"
            } else {
                ""
            },
        ),
    ];
    if let Some(ublk) = &vd.ublk {
        let device = format!(
            "{} ({}, {} queue(s) of depth {})",
            ublk.device, ublk.state, ublk.queues, ublk.queue_depth
        );
        pairs.insert(5, ("ublk device", device));
    }
    if !vd.thin {
        pairs.push((
            "offset",
            format!("{} bytes into the group's data space", vd.offset_bytes),
        ));
    }
    if !vd.lost_ranges.is_empty() {
        pairs.push(("lost data", lost_ranges(&vd.lost_ranges)));
    }
    if let Some(stats) = &vd.stats {
        pairs.extend([
            ("state", stats.state.clone()),
            (
                "capacity",
                format!(
                    "{} of group space, {} free{}",
                    format_size(stats.capacity_bytes),
                    format_size(stats.free_bytes),
                    if stats.overcommit_ratio > 1.0 {
                        format!(", overcommitted {:.2}x", stats.overcommit_ratio)
                    } else {
                        String::new()
                    }
                ),
            ),
            ("logical used", format_size(stats.logical_used_bytes)),
            ("physical used", format_size(stats.physical_used_bytes)),
            (
                "cleaning written",
                format_size(stats.cleaning_bytes_written),
            ),
            ("compression", format!("{:.2}x", stats.compression_ratio)),
            (
                "write amplification",
                format!("{:.3}", stats.write_amplification),
            ),
            (
                "checksum errors",
                format!(
                    "{} detected, {} repaired",
                    stats.checksum_errors_detected, stats.checksum_errors_repaired
                ),
            ),
        ]);
    }
    key_values(style, &format!("Virtual drive {}", vd.name), &pairs)
}
