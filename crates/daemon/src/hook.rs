//! The event command hook (`tessera serve --event-hook CMD`): each event at or above a severity
//! is handed to `/bin/sh -c CMD` (for mail or paging), as one JSON line on standard input and
//! in `TESSERA_EVENT_*` variables. A thread of its own runs the commands one at a time, so a
//! slow or stuck hook never holds up the data plane: events wait in a bounded queue, and when
//! it is full they are dropped (and counted) rather than queued without end.

use crate::log;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tessera_api::model::{EventView, Severity};

/// Events waiting for the hook.
const QUEUE_EVENTS: usize = 256;
/// A hook still running after this is killed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// The data plane's side of the hook.
pub(crate) struct EventHook {
    queue: mpsc::SyncSender<EventView>,
    minimum: Severity,
    dropped: u64,
}

impl EventHook {
    /// Starts the thread that runs `command` for every event of `minimum` severity or more.
    pub fn start(command: String, minimum: Severity) -> Result<EventHook, String> {
        EventHook::start_with_timeout(command, minimum, HOOK_TIMEOUT)
    }

    /// `start`, with the time a hook may run before it is killed.
    fn start_with_timeout(
        command: String,
        minimum: Severity,
        timeout: Duration,
    ) -> Result<EventHook, String> {
        let (queue, events) = mpsc::sync_channel(QUEUE_EVENTS);
        std::thread::Builder::new()
            .name("tessera-hook".into())
            .spawn(move || {
                for event in events {
                    run_hook(&command, &event, timeout);
                }
            })
            .map_err(|error| format!("cannot start the event hook: {error}"))?;
        Ok(EventHook {
            queue,
            minimum,
            dropped: 0,
        })
    }

    /// Queues an event for the hook, if it matters enough; never blocks.
    pub fn offer(&mut self, event: &EventView) {
        if event.severity < self.minimum {
            return;
        }
        if self.queue.try_send(event.clone()).is_err() {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                log!(
                    "event hook too slow: {} events not handed to it so far",
                    self.dropped
                );
            }
        }
    }
}

/// Runs the hook for one event and waits for it (at most `timeout`).
fn run_hook(command: &str, event: &EventView, timeout: Duration) {
    let line = match serde_json::to_string(event) {
        Ok(json) => json + "\n",
        Err(error) => {
            log!("event hook: cannot encode event {}: {error}", event.seq);
            return;
        }
    };
    let spawned = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env("TESSERA_EVENT_SEQ", event.seq.to_string())
        .env("TESSERA_EVENT_KIND", &event.kind)
        .env("TESSERA_EVENT_SEVERITY", event.severity.name())
        .env("TESSERA_EVENT_MESSAGE", &event.message)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        // A group of its own, so that a hook over its time is killed with everything it
        // started (`sh -c "mail ...; sleep"` leaves children behind a killed shell). Standard
        // error stays the daemon's, so what a hook complains about lands in the daemon's log.
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            log!("event hook {command:?} could not start: {error}");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // One event is a few hundred bytes, far below a pipe's buffer, so this never waits
        // for the hook. A hook that does not read its input is not an error.
        let _ = stdin.write_all(line.as_bytes());
    }
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return,
            Ok(Some(status)) => {
                log!(
                    "event hook {command:?} failed for event {}: {status}",
                    event.seq
                );
                return;
            }
            Ok(None) if started.elapsed() > timeout => {
                kill_group(&mut child);
                log!(
                    "event hook {command:?} killed after {:.1} s (event {})",
                    timeout.as_secs_f64(),
                    event.seq
                );
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => {
                log!("event hook {command:?}: {error}");
                kill_group(&mut child);
                return;
            }
        }
    }
}

/// Kills a hook and every process in its group, and reaps it.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on the process group the hook leads (it was spawned with
        // `process_group(0)` and is not yet reaped, so the id is still its own).
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The severity named `text` (`info`, `warning`, `error`, `critical`).
pub fn parse_severity(text: &str) -> Result<Severity, String> {
    match text {
        "info" => Ok(Severity::Info),
        "warning" => Ok(Severity::Warning),
        "error" => Ok(Severity::Error),
        "critical" => Ok(Severity::Critical),
        other => Err(format!(
            "{other:?} is not a severity (info, warning, error, critical)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, severity: Severity) -> EventView {
        EventView {
            seq,
            time_unix_ms: 0,
            severity,
            kind: "pd_failed".into(),
            message: format!("event {seq}"),
            dg: Some(0),
            pd: Some(1),
            vd: None,
        }
    }

    #[test]
    fn a_stuck_hook_never_blocks_and_only_matching_events_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seen");
        // The first event's hook hangs for longer than the offers take; the queue fills up.
        let command = format!(
            "cat >> {}; echo \"$TESSERA_EVENT_SEVERITY $TESSERA_EVENT_KIND\" >> {}; \
             exec sleep 5 2>/dev/null",
            out.display(),
            out.display()
        );
        let mut hook = EventHook::start(command, Severity::Warning).unwrap();
        let started = Instant::now();
        for seq in 0..2000 {
            let severity = if seq == 0 {
                Severity::Info
            } else {
                Severity::Error
            };
            hook.offer(&event(seq, severity));
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "offering events blocked for {:?}",
            started.elapsed()
        );
        assert!(
            hook.dropped >= 2000 - 1 - QUEUE_EVENTS as u64 - 1,
            "{}",
            hook.dropped
        );
        // The first event handed over is the first at or above the minimum.
        let deadline = Instant::now() + Duration::from_secs(5);
        let seen = loop {
            let seen = std::fs::read_to_string(&out).unwrap_or_default();
            if seen.lines().count() >= 2 || Instant::now() > deadline {
                break seen;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut lines = seen.lines();
        let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(json["seq"], 1);
        assert_eq!(json["severity"], "error");
        assert_eq!(lines.next(), Some("error pd_failed"));
    }

    /// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
    fn ended(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name in parentheses.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => true,
        }
    }

    #[test]
    fn a_hook_over_its_time_is_killed_with_its_children_and_the_next_event_still_runs() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // Each run records its shell and a child that would outlive the shell, then hangs.
        let command = format!(
            "sleep 30 2>/dev/null & echo \"$TESSERA_EVENT_SEQ $$ $!\" >> {}; wait",
            pids.display()
        );
        let mut hook =
            EventHook::start_with_timeout(command, Severity::Info, Duration::from_millis(300))
                .unwrap();
        hook.offer(&event(1, Severity::Warning));
        hook.offer(&event(2, Severity::Warning));
        let deadline = Instant::now() + Duration::from_secs(10);
        let all_ended =
            |runs: &[Vec<String>]| runs.iter().all(|run| run[1..].iter().all(|pid| ended(pid)));
        let runs = loop {
            let text = std::fs::read_to_string(&pids).unwrap_or_default();
            let runs: Vec<Vec<String>> = text
                .lines()
                .map(|line| line.split(' ').map(str::to_string).collect())
                .collect();
            if (runs.len() == 2 && all_ended(&runs)) || Instant::now() > deadline {
                break runs;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Each run was killed, its child too, and the second event's run came after the first.
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!((runs[0][0].as_str(), runs[1][0].as_str()), ("1", "2"));
        assert!(
            all_ended(&runs),
            "a timed-out hook or its child still runs: {runs:?}"
        );
    }

    #[test]
    fn severities_parse_by_name() {
        assert_eq!(parse_severity("warning"), Ok(Severity::Warning));
        assert!(parse_severity("loud").is_err());
    }
}
