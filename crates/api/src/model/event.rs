//! `GET /v1/events`: the event log.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How much an event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Routine (a group created, a rebuild finished).
    Info,
    /// Redundancy reduced or something needs attention (a member failed).
    Warning,
    /// Data lost or an operation failed (a bad range recorded).
    Error,
    /// A group went offline.
    Critical,
    /// A severity this client does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

impl Severity {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
            Severity::Critical => "critical",
            Severity::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One event: a state change or an operation's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    /// Sequence number: 1 for the daemon's first event, then one more each time.
    pub seq: u64,
    /// When it happened (milliseconds since the Unix epoch, UTC).
    pub time_unix_ms: u64,
    /// How much it matters.
    pub severity: Severity,
    /// Stable event name for scripts (`member_failed`, `spare_taken`, `rebuild_finished`, ...).
    pub kind: String,
    /// One human sentence.
    pub message: String,
    /// The drive group concerned, if any.
    #[serde(default)]
    pub dg: Option<u32>,
    /// The physical drive concerned, if any.
    #[serde(default)]
    pub pd: Option<u32>,
    /// The virtual drive concerned, if any.
    #[serde(default)]
    pub vd: Option<String>,
}
