//! Background work: rebuilding a member row by row, and resyncing dirty regions after an
//! unclean shutdown. Both run as stripe operations, a few at a time, beside host I/O.

use super::members::MemberState;
use super::scrub::ScrubStats;
use super::stripe::{Kind, StripeOp};
use super::{Engine, GroupEvent};
use std::collections::{BTreeSet, VecDeque};

struct RebuildCursor {
    member: usize,
    role: usize,
    /// Next member row to start.
    next_row: u64,
    /// Rows below this are rebuilt (the member's position is `done_below * chunk`).
    done_below: u64,
    /// Rows passed over because their region was unwritten. They count as done only if the
    /// region is still unwritten when the position reaches them; otherwise they are rebuilt.
    skipped: BTreeSet<u64>,
    /// Skipped rows whose region has been written since: rebuilt before anything new.
    redo: Vec<u64>,
    in_flight: u32,
    rows: u64,
    last_checkpoint_bytes: u64,
    aborted: bool,
    /// Every row is rebuilt; the member becomes active once this superblock generation (which
    /// records the full position) is durable, so a crash cannot undo a finished rebuild.
    finishing: Option<u64>,
}

struct ResyncCursor {
    regions: VecDeque<u64>,
    /// The region being resynced: its next stripe, end stripe and ops in flight.
    current: Option<(u64, u64, u64, u32)>,
    /// Whether a stripe of the current region had to be skipped.
    current_skipped: bool,
    total: u64,
}

struct ScrubCursor {
    repair: bool,
    next_stripe: u64,
    in_flight: u32,
    stats: ScrubStats,
    started_us: u64,
}

/// How a scrub ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubResult {
    pub repair: bool,
    pub stats: ScrubStats,
    /// Whether it went over every stripe (false: the group failed or it was cancelled).
    pub completed: bool,
    pub duration_us: u64,
}

/// Shares member bandwidth between host I/O and background work: in every window of host
/// activity, background work may move `rate / (100 - rate)` times the bytes hosts moved. With no
/// host I/O, background work runs at full speed.
#[derive(Default)]
pub(crate) struct Pacer {
    window_start_us: u64,
    host_bytes_at_start: u64,
    background_bytes_at_start: u64,
    previous_host_bytes: u64,
    /// Background throughput, smoothed over windows (for ETAs).
    pub background_bytes_per_second: f64,
    /// The rate in effect when adapting to a latency target.
    pub adaptive_rate_percent: Option<u8>,
    latency_sum_us: u64,
    latency_count: u64,
}

const PACING_WINDOW_US: u64 = 100_000;

impl Pacer {
    /// Whether background work may start now: its bytes in this window, counting what is
    /// already started (`started_bytes`, not yet in `background_bytes`), stay within its share
    /// of the host's. Counting started work keeps a wide window from overshooting the share.
    fn allows(
        &mut self,
        now_us: u64,
        host_bytes: u64,
        background_bytes: u64,
        started_bytes: u64,
        rate_percent: u8,
    ) -> bool {
        if now_us >= self.window_start_us + PACING_WINDOW_US {
            let elapsed = (now_us - self.window_start_us).max(1);
            let moved = background_bytes - self.background_bytes_at_start;
            let sample = moved as f64 * 1e6 / elapsed as f64;
            self.background_bytes_per_second = if self.background_bytes_per_second == 0.0 {
                sample
            } else {
                0.7 * self.background_bytes_per_second + 0.3 * sample
            };
            self.previous_host_bytes = host_bytes - self.host_bytes_at_start;
            self.window_start_us = now_us;
            self.host_bytes_at_start = host_bytes;
            self.background_bytes_at_start = background_bytes;
        }
        if rate_percent >= 100 {
            return true;
        }
        let host = (host_bytes - self.host_bytes_at_start).max(self.previous_host_bytes);
        if host == 0 {
            return true;
        }
        let allowed = host as f64 * f64::from(rate_percent) / f64::from(100 - rate_percent);
        ((background_bytes + started_bytes - self.background_bytes_at_start) as f64) < allowed
    }

    fn next_window_us(&self) -> u64 {
        self.window_start_us + PACING_WINDOW_US
    }

    /// Records a host request's latency (for the latency-target mode).
    pub(crate) fn host_latency(&mut self, latency_us: u64) {
        self.latency_sum_us += latency_us;
        self.latency_count += 1;
    }

    /// Adapts the rate toward a latency target, once per window: multiplicative decrease when
    /// hosts wait longer than the target, additive increase when they do not.
    fn adapt(&mut self, target_us: u32, base_rate: u8) -> u8 {
        let rate = self.adaptive_rate_percent.unwrap_or(base_rate);
        if self.latency_count < 8 {
            return rate;
        }
        let average = self.latency_sum_us / self.latency_count;
        self.latency_sum_us = 0;
        self.latency_count = 0;
        let next = if average > u64::from(target_us) {
            (rate as u32 * 7 / 10).max(1) as u8
        } else {
            (rate + 5).min(100)
        };
        self.adaptive_rate_percent = Some(next);
        next
    }
}

#[derive(Default)]
pub(crate) struct Background {
    rebuild: Option<RebuildCursor>,
    resync: Option<ResyncCursor>,
    scrub: Option<ScrubCursor>,
    pub last_scrub: Option<ScrubResult>,
    pub pacer: Pacer,
}

impl Background {
    /// Called when the engine starts serving: picks up a rebuild recorded in the superblock
    /// and the regions left dirty by an unclean shutdown.
    pub(crate) fn start(&mut self, regions: Vec<u64>) {
        if !regions.is_empty() {
            let total = regions.len() as u64;
            self.resync = Some(ResyncCursor {
                regions: regions.into(),
                current: None,
                current_skipped: false,
                total,
            });
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.rebuild.is_some() || self.resync.is_some() || self.scrub.is_some()
    }

    pub(crate) fn scrub_stats_mut(&mut self) -> &mut ScrubStats {
        &mut self.scrub.as_mut().expect("a scrub is running").stats
    }

    /// Progress of a running scrub: (repair, next stripe, stats).
    pub(crate) fn scrub_progress(&self) -> Option<(bool, u64, ScrubStats)> {
        self.scrub
            .as_ref()
            .map(|cursor| (cursor.repair, cursor.next_stripe, cursor.stats))
    }

    pub(crate) fn resync_pending(&self) -> bool {
        self.resync.is_some()
    }

    pub(crate) fn resync_regions_left(&self) -> u64 {
        self.resync.as_ref().map_or(0, |cursor| {
            cursor.regions.len() as u64 + u64::from(cursor.current.is_some())
        })
    }

    pub(crate) fn member_failed(&mut self, member: usize) {
        if let Some(cursor) = &mut self.rebuild
            && cursor.member == member
        {
            cursor.aborted = true;
        }
    }
}

impl Engine {
    /// Stripes a rebuild or scrub keeps in flight: `rebuild_window`, fewer for large chunks.
    fn background_window(&self) -> usize {
        let by_bytes = (self.config.rebuild_window_bytes / self.geometry.chunk_bytes()).max(1);
        self.config
            .rebuild_window
            .min(usize::try_from(by_bytes).unwrap_or(usize::MAX))
    }

    pub(super) fn pump_background(&mut self) -> bool {
        if self.phase != super::Phase::Running {
            return false;
        }
        let mut progressed = self.pump_rebuild();
        progressed |= self.pump_resync();
        progressed |= self.pump_scrub();
        progressed
    }

    fn pump_rebuild(&mut self) -> bool {
        if self.members.group_state(&self.geometry) == super::GroupState::Failed {
            // Nothing to rebuild from: the member stays where it is until the group is
            // assembled again with enough members.
            if let Some(cursor) = &mut self.background.rebuild
                && !cursor.aborted
            {
                cursor.aborted = true;
                return true;
            }
            if self
                .background
                .rebuild
                .as_ref()
                .is_some_and(|cursor| cursor.in_flight == 0)
            {
                self.background.rebuild = None;
                self.members.ahead.rows.clear();
                return true;
            }
            return false;
        }
        if self.background.rebuild.is_none() {
            let Some(member) = self.members.rebuilding() else {
                return false;
            };
            let MemberState::Rebuilding { position_bytes } = self.members.list[member].state else {
                unreachable!()
            };
            let role = self.members.list[member]
                .role
                .expect("a rebuilding member has a role");
            let chunk = self.geometry.chunk_bytes();
            let start = position_bytes / chunk;
            assert!(self.members.ahead.rows.is_empty());
            self.members.ahead.member = Some(member);
            self.background.rebuild = Some(RebuildCursor {
                member,
                role,
                next_row: start,
                done_below: start,
                skipped: BTreeSet::new(),
                redo: Vec::new(),
                in_flight: 0,
                rows: self.geometry.member_rows(),
                last_checkpoint_bytes: position_bytes,
                aborted: false,
                finishing: None,
            });
            self.emit_event(GroupEvent::RebuildStarted { member, role });
            return true;
        }
        let mut progressed = false;
        let window = self.background_window();
        loop {
            let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
            if cursor.aborted {
                if cursor.in_flight == 0 {
                    self.background.rebuild = None;
                    self.members.ahead.rows.clear();
                    return true;
                }
                return progressed;
            }
            if cursor.done_below == cursor.rows && cursor.in_flight == 0 {
                match cursor.finishing {
                    None => {
                        let generation = self.request_superblock_update();
                        self.background
                            .rebuild
                            .as_mut()
                            .expect("rebuild cursor")
                            .finishing = Some(generation);
                        return true;
                    }
                    Some(generation) if generation <= self.meta.durable_generation => {
                        self.finish_rebuild();
                        return true;
                    }
                    Some(_) => return progressed,
                }
            }
            if cursor.in_flight as usize >= window {
                return progressed;
            }
            let started_bytes = u64::from(cursor.in_flight) * self.geometry.chunk_bytes();
            let rate = self.rebuild_rate();
            if !self.background_may_run(rate, started_bytes) {
                return progressed;
            }
            let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
            let (row, redo) = match cursor.redo.pop() {
                Some(row) => (row, true),
                None if cursor.next_row < cursor.rows => {
                    cursor.next_row += 1;
                    (cursor.next_row - 1, false)
                }
                None => return progressed,
            };
            let (role, member) = (cursor.role, cursor.member);
            progressed = true;
            let Some((stripe, column)) = self.geometry.column_at(role, row) else {
                self.rebuild_row_done(row, false);
                continue;
            };
            let region = self.regions.region_of_stripe(stripe, &self.geometry);
            if !redo && self.regions.is_unwritten(region) {
                // Never written (or trimmed): reads are zeroes without touching the member, and a
                // first write zero-fills the region on every member in sync.
                self.rebuild_row_done(row, true);
                continue;
            }
            let target_offset_bytes =
                self.superblock.data_offset_bytes + row * self.geometry.chunk_bytes();
            let op = StripeOp::new(
                stripe,
                region,
                Kind::Rebuild {
                    target: member,
                    column,
                    row,
                    target_offset_bytes,
                },
            );
            self.background
                .rebuild
                .as_mut()
                .expect("rebuild cursor")
                .in_flight += 1;
            self.start_stripe_op(Box::new(op));
        }
    }

    /// A rebuild op for `row` of the target finished.
    pub(super) fn rebuild_step_done(&mut self, row: u64) {
        let failed = self.members.group_state(&self.geometry) == super::GroupState::Failed;
        let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
        cursor.in_flight -= 1;
        // A step that ended because the group failed rebuilt nothing and recorded nothing.
        cursor.aborted |= failed;
        if cursor.aborted {
            return;
        }
        self.counters.rebuilt_bytes += self.geometry.chunk_bytes();
        self.rebuild_row_done(row, false);
    }

    /// A row is rebuilt (or `skipped`); moves the contiguous position forward as far as it can.
    fn rebuild_row_done(&mut self, row: u64, skipped: bool) {
        let chunk = self.geometry.chunk_bytes();
        let checkpoint_every = self.config.rebuild_checkpoint_bytes;
        let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
        if skipped {
            cursor.skipped.insert(row);
        } else {
            self.members.ahead.rows.insert(row);
        }
        loop {
            let next = cursor.done_below;
            if self.members.ahead.rows.remove(&next) {
                cursor.done_below += 1;
            } else if cursor.skipped.remove(&next) {
                let still_unwritten =
                    self.geometry
                        .column_at(cursor.role, next)
                        .is_none_or(|(stripe, _)| {
                            self.regions
                                .is_unwritten(self.regions.region_of_stripe(stripe, &self.geometry))
                        });
                if still_unwritten {
                    cursor.done_below += 1;
                } else {
                    cursor.redo.push(next);
                    break;
                }
            } else {
                break;
            }
        }
        let position_bytes = cursor.done_below * chunk;
        let member = cursor.member;
        let checkpoint = position_bytes >= cursor.last_checkpoint_bytes + checkpoint_every;
        if checkpoint {
            cursor.last_checkpoint_bytes = position_bytes;
        }
        self.members.list[member].state = MemberState::Rebuilding { position_bytes };
        if checkpoint {
            self.request_superblock_update();
        }
    }

    fn finish_rebuild(&mut self) {
        let cursor = self.background.rebuild.take().expect("rebuild cursor");
        assert!(cursor.skipped.is_empty() && cursor.redo.is_empty());
        self.members.ahead.rows.clear();
        let replacing = self.members.list[cursor.member].replacing;
        if replacing {
            // The member it replaced leaves the group.
            for index in 0..self.members.list.len() {
                let other = &mut self.members.list[index];
                if index != cursor.member
                    && other.role == Some(cursor.role)
                    && other.state == MemberState::Active
                {
                    other.state = MemberState::Failed(super::FailReason::Admin);
                    other.role = None;
                }
            }
        }
        // Failed members of the role have nothing left to give: they leave the group.
        for (index, other) in self.members.list.iter_mut().enumerate() {
            if index != cursor.member && other.role == Some(cursor.role) && other.is_failed() {
                other.role = None;
            }
        }
        let member = &mut self.members.list[cursor.member];
        member.state = MemberState::Active;
        member.replacing = false;
        self.request_superblock_update();
        self.emit_event(GroupEvent::RebuildFinished {
            member: cursor.member,
            role: cursor.role,
        });
        // Stripes a degraded resync had to skip can be resynced now.
        if self.background.resync.is_none() {
            let unsynced = self.regions.unsynced_regions();
            self.background.start(unsynced);
        }
    }

    fn pump_resync(&mut self) -> bool {
        if self.members.group_state(&self.geometry) == super::GroupState::Failed {
            // Nothing can be resynced without enough members; the regions stay unsynced in the
            // bitmap and the next assembly with enough members resyncs them. Walking them anyway
            // would fail every stripe at once, which on a large group is millions of steps.
            let Some(cursor) = &self.background.resync else {
                return false;
            };
            if cursor.current.is_some_and(|(.., in_flight)| in_flight > 0) {
                return false;
            }
            self.background.resync = None;
            return true;
        }
        let mut progressed = false;
        loop {
            let Some(cursor) = self.background.resync.as_mut() else {
                return progressed;
            };
            let Some((region, next, end, in_flight)) = cursor.current else {
                match cursor.regions.pop_front() {
                    Some(region) => {
                        let stripes = self.regions.stripes(region, &self.geometry);
                        cursor.current = Some((region, stripes.start, stripes.end, 0));
                        progressed = true;
                        continue;
                    }
                    None => {
                        let total = cursor.total;
                        self.background.resync = None;
                        self.emit_event(GroupEvent::ResyncFinished { regions: total });
                        return true;
                    }
                }
            };
            if next == end {
                if in_flight > 0 {
                    return progressed;
                }
                cursor.current = None;
                if !std::mem::take(&mut cursor.current_skipped) {
                    self.regions.mark_synced(region);
                }
                progressed = true;
                continue;
            }
            if self.regions.stripe_in_sync(region, next) {
                // Resynced ahead of the cursor for a read.
                cursor.current = Some((region, next + 1, end, in_flight));
                progressed = true;
                continue;
            }
            if in_flight as usize >= self.config.resync_window {
                return progressed;
            }
            cursor.current = Some((region, next + 1, end, in_flight + 1));
            self.start_stripe_op(Box::new(StripeOp::new(next, region, Kind::Resync)));
            progressed = true;
        }
    }

    /// The rebuild rate in effect: the configured one, or the one adapted to the latency
    /// target.
    pub(super) fn rebuild_rate(&mut self) -> u8 {
        let base = self.superblock.rebuild_rate_percent;
        match self.superblock.rebuild_latency_target_us {
            0 => base,
            target => self.background.pacer.adapt(target, base),
        }
    }

    fn scrub_rate(&self) -> u8 {
        match self.superblock.scrub_rate_percent {
            0 => 30,
            rate => rate,
        }
    }

    /// Whether one more background step may start; `started_bytes` is what the steps in
    /// flight will add when they finish.
    fn background_may_run(&mut self, rate_percent: u8, started_bytes: u64) -> bool {
        let host = self.counters.host_read_bytes + self.counters.host_write_bytes;
        let background = self.counters.rebuilt_bytes + self.counters.scrubbed_bytes;
        self.background
            .pacer
            .allows(self.now_us, host, background, started_bytes, rate_percent)
    }

    /// When paced background work may next start (for `next_deadline_us`).
    pub(super) fn background_deadline(&self) -> Option<u64> {
        // A window that already ended is not a reason to wake: pacing rolls it over whenever
        // it is consulted, so only a future window can be what holds background work back.
        (self.background.rebuild.is_some() || self.background.scrub.is_some())
            .then(|| self.background.pacer.next_window_us())
            .filter(|&at| at > self.now_us)
    }

    /// Starts a scrub of every written stripe.
    pub fn start_scrub(&mut self, repair: bool) -> Result<(), super::AdminError> {
        if self.background.scrub.is_some() {
            return Err(super::AdminError::ScrubRunning);
        }
        if self.members.group_state(&self.geometry) != super::GroupState::Optimal {
            return Err(super::AdminError::NotOptimal);
        }
        self.background.scrub = Some(ScrubCursor {
            repair,
            next_stripe: 0,
            in_flight: 0,
            stats: ScrubStats::default(),
            started_us: self.now_us,
        });
        self.pump();
        Ok(())
    }

    /// Stops a running scrub after the stripes in flight.
    pub fn cancel_scrub(&mut self) {
        if let Some(cursor) = &mut self.background.scrub {
            cursor.next_stripe = self.geometry.stripe_count();
        }
    }

    fn pump_scrub(&mut self) -> bool {
        let Some(cursor) = &self.background.scrub else {
            return false;
        };
        let failed = self.members.group_state(&self.geometry) == super::GroupState::Failed;
        if (cursor.next_stripe >= self.geometry.stripe_count() || failed) && cursor.in_flight == 0 {
            let cursor = self.background.scrub.take().expect("scrub cursor");
            let result = ScrubResult {
                repair: cursor.repair,
                stats: cursor.stats,
                completed: !failed,
                duration_us: self.now_us - cursor.started_us,
            };
            self.background.last_scrub = Some(result);
            self.emit_event(GroupEvent::ScrubFinished(result));
            return true;
        }
        let mut progressed = false;
        loop {
            let cursor = self.background.scrub.as_ref().expect("scrub cursor");
            if failed
                || cursor.in_flight as usize >= self.background_window()
                || cursor.next_stripe >= self.geometry.stripe_count()
            {
                return progressed;
            }
            let (stripe, repair) = (cursor.next_stripe, cursor.repair);
            let started_bytes = u64::from(cursor.in_flight)
                * self.geometry.chunk_bytes()
                * self.geometry.members() as u64;
            let rate = self.scrub_rate();
            if !self.background_may_run(rate, started_bytes) {
                return progressed;
            }
            let region = self.regions.region_of_stripe(stripe, &self.geometry);
            let cursor = self.background.scrub.as_mut().expect("scrub cursor");
            if !self.regions.is_written(region) || self.regions.is_unsynced(region) {
                // Skip the whole region: it holds no data, or a crash may have left its stripes
                // torn, which is not damage to locate and repair: resync recomputes their parity.
                cursor.next_stripe = self.regions.stripes(region, &self.geometry).end;
                progressed = true;
                continue;
            }
            cursor.next_stripe += 1;
            cursor.in_flight += 1;
            self.start_stripe_op(Box::new(StripeOp::new(
                stripe,
                region,
                Kind::Scrub { repair },
            )));
            progressed = true;
        }
    }

    pub(super) fn scrub_step_done(&mut self, lost: bool) {
        let chunk = self.geometry.chunk_bytes();
        let members = self.geometry.members() as u64;
        let cursor = self.background.scrub.as_mut().expect("scrub cursor");
        cursor.in_flight -= 1;
        if lost {
            cursor.stats.unrecoverable += 1;
        }
        self.counters.scrubbed_bytes += chunk * members;
    }

    pub(super) fn resync_step_done(&mut self, skipped: bool) {
        let cursor = self.background.resync.as_mut().expect("resync cursor");
        let (_, _, _, in_flight) = cursor.current.as_mut().expect("current region");
        *in_flight -= 1;
        cursor.current_skipped |= skipped;
        self.counters.resynced_stripes += u64::from(!skipped);
    }
}

#[cfg(test)]
mod tests {
    use super::{PACING_WINDOW_US, Pacer};

    #[test]
    fn the_share_counts_work_already_started() {
        let mut pacer = Pacer::default();
        // One window in which hosts moved 7,000 bytes; at 30% background may move 3,000.
        assert!(pacer.allows(0, 0, 0, 0, 30), "no host I/O: no limit");
        let now = PACING_WINDOW_US;
        assert!(pacer.allows(now, 7_000, 0, 0, 30));
        assert!(pacer.allows(now, 7_000, 0, 2_999, 30));
        assert!(
            !pacer.allows(now, 7_000, 0, 3_000, 30),
            "started work counts"
        );
        assert!(
            !pacer.allows(now, 7_000, 1_000, 2_000, 30),
            "finished and started add up"
        );
        assert!(pacer.allows(now, 7_000, 1_000, 1_999, 30));
        assert!(
            pacer.allows(now, 7_000, 0, 1 << 40, 100),
            "100% is no limit"
        );
    }
}
