//! The event log.

use tessera_api::EventView;

use super::{Column, Table};
use crate::style::Style;
use crate::units::format_unix_ms;

/// `tessera events`.
pub fn list_events(style: Style, events: &[EventView]) -> String {
    if events.is_empty() {
        return "no events\n".to_string();
    }
    let mut table = Table::new(&[
        ("SEQ", Column::Number),
        ("TIME", Column::Text),
        ("SEVERITY", Column::State),
        ("KIND", Column::Text),
        ("MESSAGE", Column::Text),
    ]);
    for event in events {
        table.row(vec![
            event.seq.to_string(),
            format_unix_ms(event.time_unix_ms),
            event.severity.to_string(),
            event.kind.clone(),
            event.message.clone(),
        ]);
    }
    table.render(style)
}

/// One event as a line, for `tessera events --follow`.
pub fn event_line(style: Style, event: &EventView) -> String {
    format!(
        "{} {} {} {}: {}\n",
        event.seq,
        format_unix_ms(event.time_unix_ms),
        style.state(event.severity.name()),
        event.kind,
        event.message
    )
}
