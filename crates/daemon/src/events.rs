//! The event log: every state change as a structured record, kept in a bounded ring and
//! echoed to the daemon's log.

use std::collections::VecDeque;
use tessera_api::model::{EventView, Severity};

pub struct EventLog {
    ring: VecDeque<EventView>,
    capacity: usize,
    next_seq: u64,
    /// The command hook, if one is configured.
    hook: Option<crate::hook::EventHook>,
}

impl EventLog {
    pub fn new(capacity: usize) -> EventLog {
        EventLog {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            next_seq: 1,
            hook: None,
        }
    }

    /// Hands every event from now on (at or above its severity) to a command hook.
    pub fn set_hook(&mut self, hook: crate::hook::EventHook) {
        self.hook = Some(hook);
    }

    pub fn push(
        &mut self,
        severity: Severity,
        kind: &str,
        message: String,
        dg: Option<u32>,
        pd: Option<u32>,
    ) {
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        let time_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let event = EventView {
            seq: self.next_seq,
            time_unix_ms,
            severity,
            kind: kind.into(),
            message,
            dg,
            pd,
            vd: None,
        };
        if let Some(hook) = &mut self.hook {
            hook.offer(&event);
        }
        self.ring.push_back(event);
        self.next_seq += 1;
    }

    pub fn push_info(&mut self, kind: &str, message: String, dg: Option<u32>, pd: Option<u32>) {
        self.push(Severity::Info, kind, message, dg, pd);
    }

    pub fn push_warning(&mut self, kind: &str, message: String, dg: Option<u32>, pd: Option<u32>) {
        self.push(Severity::Warning, kind, message, dg, pd);
    }

    pub fn push_error(&mut self, kind: &str, message: String, dg: Option<u32>, pd: Option<u32>) {
        self.push(Severity::Error, kind, message, dg, pd);
    }

    pub fn push_critical(&mut self, kind: &str, message: String, dg: Option<u32>, pd: Option<u32>) {
        self.push(Severity::Critical, kind, message, dg, pd);
    }

    /// Events with a sequence number above `since`, oldest first.
    pub fn since(&self, since: u64) -> Vec<EventView> {
        self.ring
            .iter()
            .filter(|event| event.seq > since)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_ordered() {
        let mut log = EventLog::new(3);
        for n in 0..5 {
            log.push_info("test", format!("event {n}"), None, None);
        }
        let all = log.since(0);
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(log.since(4).len(), 1);
    }

    #[test]
    fn a_stuck_event_hook_never_holds_up_push() {
        let mut log = EventLog::new(100);
        // The hook's first run hangs for longer than the pushes take: the queue fills at once.
        // (`exec` and the redirection: no process outlives it holding the test's stderr.)
        let hook = "exec sleep 5 2>/dev/null".to_string();
        log.set_hook(crate::hook::EventHook::start(hook, Severity::Info).unwrap());
        let started = std::time::Instant::now();
        for n in 0..5000 {
            log.push_critical("test", format!("event {n}"), None, None);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "5000 pushes took {:?}",
            started.elapsed()
        );
        // The event log itself lost nothing it keeps.
        assert_eq!(log.since(0).len(), 100);
        assert_eq!(log.since(0).last().map(|event| event.seq), Some(5000));
    }
}
