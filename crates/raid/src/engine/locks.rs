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
    /// Wait queues of released locks, kept with their capacity: contended writes then queue
    /// without allocating.
    spare_queues: Vec<VecDeque<OpId>>,
}

/// How many wait queues are kept for reuse.
const SPARE_QUEUES: usize = 64;

impl StripeLocks {
    /// Queues `op` for the lock of `stripe`; true when it holds the lock at once.
    pub(crate) fn acquire(&mut self, stripe: u64, op: OpId) -> bool {
        let spare_queues = &mut self.spare_queues;
        let entry = self.stripes.entry(stripe).or_insert_with(|| Entry {
            holder: None,
            queue: spare_queues.pop().unwrap_or_default(),
        });
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
        if next.is_none()
            && let Some(entry) = self.stripes.remove(&stripe)
            && entry.queue.capacity() > 0
            && self.spare_queues.len() < SPARE_QUEUES
        {
            self.spare_queues.push(entry.queue);
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
