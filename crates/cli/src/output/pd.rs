//! Physical drives.

use tessera_api::PdView;

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
