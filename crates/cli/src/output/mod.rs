//! Human-readable renderings of the API objects. Every function returns the text, so tests
//! compare it with literal expectations; `--json` bypasses all of this.

mod dg;
mod events;
mod info;
mod pd;
mod table;
mod vd;

pub use dg::{describe_dg, dg_progress_line, list_dgs};
pub use events::{event_line, list_events};
pub use info::describe_info;
pub use pd::{describe_pd, list_pds};
pub use table::{Column, Table};
pub use vd::{describe_vd, list_vds};

use crate::style::Style;
use crate::units::format_size;

/// A title line and `key: value` lines with the values aligned.
pub(crate) fn key_values(style: Style, title: &str, pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
    let mut out = format!("{}\n", style.bold(title));
    for (key, value) in pairs {
        let label = format!("{key}:");
        out.push_str(&format!("  {label:<w$}  {value}\n", w = width + 1));
    }
    out
}

/// `Some(x)` as text, `None` as `-`.
pub(crate) fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// How many bad ranges the description lists before it summarises the rest.
const BAD_RANGES_LISTED: usize = 4;

/// Lost data (a group's bad ranges, or a drive's share of them): every range when there are
/// few, else a count, the bytes lost and the first few (losses are recorded a sector at a
/// time, so the table can hold a hundred).
pub(super) fn lost_ranges(ranges: &[tessera_api::BadRange]) -> String {
    if ranges.is_empty() {
        return "none".to_string();
    }
    let listed: Vec<String> = ranges
        .iter()
        .take(BAD_RANGES_LISTED)
        .map(|range| format!("{}+{}", range.offset_bytes, range.len_bytes))
        .collect();
    if ranges.len() <= BAD_RANGES_LISTED {
        return listed.join(", ");
    }
    let lost_bytes: u64 = ranges.iter().map(|range| range.len_bytes).sum();
    format!(
        "{} ranges, {} in all: {}, ... (--json lists every range)",
        ranges.len(),
        format_size(lost_bytes),
        listed.join(", ")
    )
}
