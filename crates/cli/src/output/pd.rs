//! Physical drives.

use tessera_api::{PdIo, PdKind, PdView, Zeroing};

use super::{Column, Table, key_values, or_dash};
use crate::style::Style;
use crate::units::format_size;

/// `tessera pd list`.
pub fn list_pds(style: Style, pds: &[PdView]) -> String {
    if pds.is_empty() {
        return "no physical drives (add one with `tessera pd add PATH`)\n".to_string();
    }
    let mut table = Table::new(&[
        ("ID", Column::Number),
        ("STATE", Column::State),
        ("SIZE", Column::Number),
        ("KIND", Column::Text),
        ("DG", Column::Number),
        ("ROLE", Column::Number),
        ("SPARE FOR", Column::Text),
        ("PATH", Column::Text),
    ]);
    for pd in pds {
        table.row(vec![
            pd.id.to_string(),
            pd.state.to_string(),
            format_size(pd.size_bytes),
            pd.kind.to_string(),
            or_dash(pd.dg),
            or_dash(pd.role),
            spare_for(pd),
            pd.path.clone(),
        ]);
    }
    table.render(style)
}

fn spare_for(pd: &PdView) -> String {
    match (pd.state, pd.spare_for) {
        (_, Some(dg)) => format!("dg {dg}"),
        (tessera_api::PdState::HotSpare, None) => "any".to_string(),
        _ => "-".to_string(),
    }
}

/// How a drive zeroes ranges, in words.
fn zeroing(kind: PdKind, io: &PdIo) -> String {
    match io.zeroing {
        Zeroing::ZeroRange if kind == PdKind::Block => "Write Zeroes (fallocate ZERO_RANGE)",
        Zeroing::ZeroRange => "fallocate ZERO_RANGE (unwritten extents)",
        Zeroing::PunchHole => "fallocate PUNCH_HOLE (tmpfs)",
        Zeroing::WriteZeroes => "NBD WRITE_ZEROES",
        Zeroing::Written => "zeroes written as data",
        Zeroing::Unknown => "unknown",
    }
    .to_string()
}

/// `tessera pd describe`.
pub fn describe_pd(style: Style, pd: &PdView) -> String {
    let group = match (pd.dg, pd.role) {
        (Some(dg), Some(role)) => format!("{dg} (role {role})"),
        (Some(dg), None) => dg.to_string(),
        _ => "-".to_string(),
    };
    key_values(
        style,
        &format!("Physical drive {}", pd.id),
        &[
            ("path", pd.path.clone()),
            ("kind", pd.kind.to_string()),
            ("state", style.state(pd.state.name())),
            (
                "size",
                format!("{} ({} bytes)", format_size(pd.size_bytes), pd.size_bytes),
            ),
            ("drive group", group),
            ("spare for", spare_for(pd)),
            (
                "direct I/O",
                match &pd.io {
                    Some(io) if io.direct => "yes (O_DIRECT)".to_string(),
                    Some(_) => "no (page cache)".to_string(),
                    None => "-".to_string(),
                },
            ),
            (
                "zeroing",
                pd.io
                    .as_ref()
                    .map_or("-".to_string(), |io| zeroing(pd.kind, io)),
            ),
            (
                "uuid",
                if pd.uuid.is_empty() {
                    "-".to_string()
                } else {
                    pd.uuid.clone()
                },
            ),
        ],
    )
}
