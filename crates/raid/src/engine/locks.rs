//! Stripe locks: writes (and anything that needs a stable stripe: recovery, rebuild, resync)
//! to one stripe run one at a time, in arrival order; different stripes run in parallel.

use super::OpId;
use super::hashing::NumberMap;
use std::collections::VecDeque;

#[derive(Default)]
struct Entry {
    holder: Option<OpId>,
    queue: VecDeque<OpId>,
}

#[derive(Default)]
pub(crate) struct StripeLocks {
    stripes: NumberMap<Entry>,
}

impl StripeLocks {
    /// Queues `op` for the lock of `stripe`; true when it holds the lock at once.
    pub(crate) fn acquire(&mut self, stripe: u64, op: OpId) -> bool {
        let entry = self.stripes.entry(stripe).or_default();
        if entry.holder.is_none() && entry.queue.is_empty() {
            entry.holder = Some(op);
            true
        } else {
            entry.queue.push_back(op);
            false
        }
    }

    /// Releases the lock held by `op`; returns the op that now holds it, if any.
    pub(crate) fn release(&mut self, stripe: u64, op: OpId) -> Option<OpId> {
        let entry = self
            .stripes
            .get_mut(&stripe)
            .expect("releasing a held stripe lock");
        assert_eq!(
            entry.holder,
            Some(op),
            "stripe {stripe} released by a non-holder"
        );
        entry.holder = None;
        let next = entry.queue.pop_front();
        entry.holder = next;
        if next.is_none() {
            self.stripes.remove(&stripe);
        }
        next
    }

    /// The op queued last for `stripe` that has not got the lock yet.
    pub(crate) fn last_waiting(&self, stripe: u64) -> Option<OpId> {
        self.stripes.get(&stripe)?.queue.back().copied()
    }

    pub(crate) fn holder(&self, stripe: u64) -> Option<OpId> {
        self.stripes.get(&stripe)?.holder
    }
}
