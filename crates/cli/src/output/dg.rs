//! Drive groups.

use tessera_api::{DgView, JournalPlacement, PdState, RebuildKind, RebuildView, ScrubView};

use super::{Column, Table, key_values, lost_ranges, or_dash};
use crate::style::Style;
use crate::units::{format_duration, format_size, format_size_short, format_unix_ms};

fn eta(eta_seconds: Option<u64>) -> String {
    eta_seconds.map_or_else(|| "estimating".to_string(), format_duration)
}

fn rebuild_text(rebuild: &RebuildView) -> String {
    let what = match rebuild.kind {
        RebuildKind::Rebuild => "rebuilding",
        RebuildKind::Copy => "copying onto",
    };
    format!(
        "{what} physical drive {} (role {}): {:.1}%, rate {}%, ETA {}",
        rebuild.pd,
        rebuild.role,
        rebuild.progress_percent,
        rebuild.rate_percent,
        eta(rebuild.eta_seconds)
    )
}

fn scrub_text(scrub: &ScrubView) -> String {
    format!(
        "{}: {:.1}%, rate {}%, ETA {}, {} mismatches, {} repaired",
        if scrub.repair { "repair" } else { "check" },
        scrub.progress_percent,
        scrub.rate_percent,
        eta(scrub.eta_seconds),
        scrub.mismatches,
        scrub.repaired
    )
}

/// One line saying what a group's background work is doing, for `--wait` on a pipe.
pub fn dg_progress_line(dg: &DgView) -> String {
    if let Some(rebuild) = &dg.rebuild {
        return format!("drive group {}: {}", dg.id, rebuild_text(rebuild));
    }
    if let Some(scrub) = &dg.scrub {
        return format!("drive group {}: scrub {}", dg.id, scrub_text(scrub));
    }
    format!("drive group {}: {}", dg.id, dg.state)
}

/// `tessera dg list`.
pub fn list_dgs(style: Style, dgs: &[DgView]) -> String {
    if dgs.is_empty() {
        return "no drive groups (create one with `tessera dg create --level L PD...`)\n"
            .to_string();
    }
    let mut table = Table::new(&[
        ("ID", Column::Number),
        ("NAME", Column::Text),
        ("LEVEL", Column::Text),
        ("STATE", Column::State),
        ("SIZE", Column::Number),
        ("FREE", Column::Number),
        ("CHUNK", Column::Number),
        ("MEMBERS", Column::Number),
        ("VDS", Column::Number),
        ("ACTIVITY", Column::Text),
    ]);
    for dg in dgs {
        let online = dg
            .members
            .iter()
            .filter(|member| member.state == PdState::Online)
            .count();
        let activity = match (&dg.rebuild, &dg.scrub) {
            (Some(rebuild), _) => format!("rebuild {:.1}%", rebuild.progress_percent),
            (None, Some(scrub)) => format!("scrub {:.1}%", scrub.progress_percent),
            (None, None) => "-".to_string(),
        };
        table.row(vec![
            dg.id.to_string(),
            dg.name.clone(),
            dg.level.to_string(),
            dg.state.to_string(),
            format_size(dg.size_bytes),
            format_size(dg.free_bytes),
            format_size_short(dg.chunk_bytes),
            format!("{online}/{}", dg.members.len()),
            dg.virtual_drives.len().to_string(),
            activity,
        ]);
    }
    table.render(style)
}

/// `tessera dg describe`.
pub fn describe_dg(style: Style, dg: &DgView) -> String {
    let journal = match (dg.journal.placement, dg.journal.pd) {
        (JournalPlacement::Members, _) => format!("{}, on the members", dg.journal.mode),
        (JournalPlacement::Device, pd) => {
            format!("{}, on physical drive {}", dg.journal.mode, or_dash(pd))
        }
    };
    let mut pairs = vec![
        ("level", format!("{} ({})", dg.level, dg.layout)),
        ("state", style.state(dg.state.name())),
        (
            "size",
            format!(
                "{} ({} bytes), {} free",
                format_size(dg.size_bytes),
                dg.size_bytes,
                format_size(dg.free_bytes)
            ),
        ),
        (
            "chunk",
            format!(
                "{} ({} bytes)",
                format_size_short(dg.chunk_bytes),
                dg.chunk_bytes
            ),
        ),
        ("journal", journal),
        ("rebuild rate", format!("{}%", dg.rebuild_rate_percent)),
    ];
    if let Some(rate) = dg.scrub_rate_percent {
        pairs.push(("scrub rate", format!("{rate}%")));
    }
    if let Some(rebuild) = &dg.rebuild {
        pairs.push(("rebuild", rebuild_text(rebuild)));
    }
    if let Some(scrub) = &dg.scrub {
        pairs.push(("scrub", scrub_text(scrub)));
    }
    if let Some(last) = &dg.last_scrub {
        pairs.push((
            "last scrub",
            format!(
                "{} {}{}: {} mismatches, {} repaired, {} unrecoverable",
                if last.repair { "repair" } else { "check" },
                if last.completed {
                    "finished "
                } else {
                    "stopped "
                },
                format_unix_ms(last.finished_unix_ms),
                last.mismatches,
                last.repaired,
                last.unrecoverable
            ),
        ));
    }
    pairs.push(("bad ranges", lost_ranges(&dg.bad_ranges)));
    pairs.push((
        "virtual drives",
        if dg.virtual_drives.is_empty() {
            "none".to_string()
        } else {
            dg.virtual_drives.join(", ")
        },
    ));
    pairs.push(("uuid", dg.uuid.clone()));
    pairs.push(("generation", dg.generation.to_string()));
    let mut out = key_values(
        style,
        &format!("Drive group {} ({})", dg.id, dg.name),
        &pairs,
    );
    out.push('\n');
    let mut members = Table::new(&[
        ("ROLE", Column::Number),
        ("PD", Column::Number),
        ("STATE", Column::State),
        ("DATA OFFSET", Column::Number),
        ("PATH", Column::Text),
    ]);
    for member in &dg.members {
        members.row(vec![
            member.role.to_string(),
            or_dash(member.pd),
            member.state.to_string(),
            format_size(member.data_offset_bytes),
            member.path.clone(),
        ]);
    }
    out.push_str(&members.render(style));
    out
}
