//! Progress of a rebuild or scrub while `--wait` polls the daemon: a bar redrawn in place on a
//! terminal, otherwise one plain line each time the figures change.

use std::io::{self, Write};

use tessera_api::DgView;

use crate::output::dg_progress_line;
use crate::units::format_duration;

const BAR_CELLS: usize = 30;

/// Shows progress on one output.
pub struct Progress {
    terminal: bool,
    last_line: Option<String>,
    drawn: bool,
}

impl Progress {
    /// `terminal`: redraw a bar in place; otherwise print lines.
    pub fn new(terminal: bool) -> Progress {
        Progress {
            terminal,
            last_line: None,
            drawn: false,
        }
    }

    /// Shows the group's current progress.
    pub fn update(&mut self, out: &mut dyn Write, dg: &DgView) -> io::Result<()> {
        if self.terminal {
            write!(out, "\r\x1b[2K{}", bar_line(dg))?;
            self.drawn = true;
        } else {
            let line = dg_progress_line(dg);
            if self.last_line.as_deref() != Some(line.as_str()) {
                writeln!(out, "{line}")?;
                self.last_line = Some(line);
            }
        }
        out.flush()
    }

    /// Ends the bar's line.
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.drawn {
            writeln!(out)?;
            self.drawn = false;
        }
        out.flush()
    }
}

/// `dg0 rebuild [#########.....]  50.0%  rate 30%  ETA 8 s`.
pub fn bar_line(dg: &DgView) -> String {
    let (what, percent, rate, eta) = if let Some(rebuild) = &dg.rebuild {
        (
            "rebuild",
            rebuild.progress_percent,
            rebuild.rate_percent,
            rebuild.eta_seconds,
        )
    } else if let Some(scrub) = &dg.scrub {
        (
            if scrub.repair { "repair" } else { "scrub" },
            scrub.progress_percent,
            scrub.rate_percent,
            scrub.eta_seconds,
        )
    } else {
        return format!("{}: {}", dg.name, dg.state);
    };
    let clamped = percent.clamp(0.0, 100.0);
    let filled = ((clamped / 100.0) * BAR_CELLS as f64).round() as usize;
    let eta = eta.map_or_else(|| "estimating".to_string(), format_duration);
    format!(
        "{} {what} [{}{}] {clamped:5.1}%  rate {rate}%  ETA {eta}",
        dg.name,
        "#".repeat(filled),
        ".".repeat(BAR_CELLS - filled)
    )
}
