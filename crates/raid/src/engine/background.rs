//! Background work: rebuilding a member row by row, and resyncing dirty regions after an
//! unclean shutdown. Both run as stripe operations, a few at a time, beside host I/O.

use super::members::MemberState;
use super::stripe::{Kind, Stage, StripeOp};
use super::{Engine, GroupEvent};
use std::collections::{BTreeSet, VecDeque};

struct RebuildCursor {
    member: usize,
    role: usize,
    /// Next member row to start.
    next_row: u64,
    /// Rows below this are rebuilt (the member's position is `done_below * chunk`).
    done_below: u64,
    finished_rows: BTreeSet<u64>,
    in_flight: u32,
    rows: u64,
    last_checkpoint_bytes: u64,
    aborted: bool,
}

struct ResyncCursor {
    regions: VecDeque<u64>,
    /// The region being resynced: its next stripe, end stripe and ops in flight.
    current: Option<(u64, u64, u64, u32)>,
    /// Whether a stripe of the current region had to be skipped.
    current_skipped: bool,
    total: u64,
}

#[derive(Default)]
pub(crate) struct Background {
    rebuild: Option<RebuildCursor>,
    resync: Option<ResyncCursor>,
}

impl Background {
    /// Called when the engine starts serving: picks up a rebuild recorded in the superblock
    /// and the regions left dirty by an unclean shutdown.
    pub(crate) fn start(&mut self, regions: Vec<u64>) {
        if !regions.is_empty() {
            let total = regions.len() as u64;
            self.resync = Some(ResyncCursor { regions: regions.into(), current: None, current_skipped: false, total });
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.rebuild.is_some() || self.resync.is_some()
    }

    pub(crate) fn resync_pending(&self) -> bool {
        self.resync.is_some()
    }

    pub(crate) fn resync_regions_left(&self) -> u64 {
        self.resync.as_ref().map_or(0, |cursor| cursor.regions.len() as u64 + u64::from(cursor.current.is_some()))
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
    pub(super) fn pump_background(&mut self) -> bool {
        if self.phase != super::Phase::Running {
            return false;
        }
        let mut progressed = self.pump_rebuild();
        progressed |= self.pump_resync();
        progressed
    }

    fn pump_rebuild(&mut self) -> bool {
        if self.background.rebuild.is_none() {
            let Some(member) = self.members.rebuilding() else { return false };
            let MemberState::Rebuilding { position_bytes } = self.members.list[member].state else { unreachable!() };
            let role = self.members.list[member].role.expect("a rebuilding member has a role");
            let chunk = self.geometry.chunk_bytes();
            let start = position_bytes / chunk;
            self.background.rebuild = Some(RebuildCursor {
                member,
                role,
                next_row: start,
                done_below: start,
                finished_rows: BTreeSet::new(),
                in_flight: 0,
                rows: self.geometry.member_rows(),
                last_checkpoint_bytes: position_bytes,
                aborted: false,
            });
            self.emit_event(GroupEvent::RebuildStarted { member, role });
            return true;
        }
        let mut progressed = false;
        loop {
            let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
            if cursor.aborted {
                if cursor.in_flight == 0 {
                    self.background.rebuild = None;
                    return true;
                }
                return progressed;
            }
            if cursor.done_below == cursor.rows && cursor.in_flight == 0 {
                self.finish_rebuild();
                return true;
            }
            if cursor.in_flight as usize >= self.config.rebuild_window || cursor.next_row >= cursor.rows {
                return progressed;
            }
            let (row, role, member) = (cursor.next_row, cursor.role, cursor.member);
            cursor.next_row += 1;
            progressed = true;
            let Some((stripe, column)) = self.geometry.column_at(role, row) else {
                self.rebuild_row_done(row);
                continue;
            };
            let region = self.regions.region_of_stripe(stripe, &self.geometry);
            if self.regions.is_unwritten(region) {
                // Never written (or trimmed): reads are zeroes without touching the member, and a
                // first write zero-fills the whole region, this member included.
                self.rebuild_row_done(row);
                continue;
            }
            let target_offset_bytes = self.superblock.data_offset_bytes + row * self.geometry.chunk_bytes();
            let op = StripeOp::new(stripe, region, Kind::Rebuild { target: member, column, row, target_offset_bytes });
            self.background.rebuild.as_mut().expect("rebuild cursor").in_flight += 1;
            let id = self.ops.insert(op);
            if self.locks.acquire(stripe, id) {
                self.ops.get_mut(id).expect("new op").stage = Stage::Gate;
                self.ready.push_back(id);
            }
        }
    }

    /// A rebuild op for `row` of the target finished.
    pub(super) fn rebuild_step_done(&mut self, row: u64) {
        let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
        cursor.in_flight -= 1;
        if cursor.aborted {
            return;
        }
        self.counters.rebuilt_bytes += self.geometry.chunk_bytes();
        self.rebuild_row_done(row);
    }

    fn rebuild_row_done(&mut self, row: u64) {
        let chunk = self.geometry.chunk_bytes();
        let checkpoint_every = self.config.rebuild_checkpoint_bytes;
        let cursor = self.background.rebuild.as_mut().expect("rebuild cursor");
        cursor.finished_rows.insert(row);
        while cursor.finished_rows.remove(&cursor.done_below) {
            cursor.done_below += 1;
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
        let replacing = self.members.list[cursor.member].replacing;
        if replacing {
            // The member it replaced leaves the group.
            for index in 0..self.members.list.len() {
                let other = &mut self.members.list[index];
                if index != cursor.member && other.role == Some(cursor.role) && other.state == MemberState::Active {
                    other.state = MemberState::Failed(super::FailReason::Admin);
                    other.role = None;
                }
            }
        }
        let member = &mut self.members.list[cursor.member];
        member.state = MemberState::Active;
        member.replacing = false;
        self.request_superblock_update();
        self.emit_event(GroupEvent::RebuildFinished { member: cursor.member, role: cursor.role });
        // Stripes a degraded resync had to skip can be resynced now.
        if self.background.resync.is_none() {
            let unsynced = self.regions.unsynced_regions();
            self.background.start(unsynced);
        }
    }

    fn pump_resync(&mut self) -> bool {
        let mut progressed = false;
        loop {
            let Some(cursor) = self.background.resync.as_mut() else { return progressed };
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
            if in_flight as usize >= self.config.resync_window {
                return progressed;
            }
            cursor.current = Some((region, next + 1, end, in_flight + 1));
            let id = self.ops.insert(StripeOp::new(next, region, Kind::Resync));
            if self.locks.acquire(next, id) {
                self.ops.get_mut(id).expect("new op").stage = Stage::Gate;
                self.ready.push_back(id);
            }
            progressed = true;
        }
    }

    pub(super) fn resync_step_done(&mut self, skipped: bool) {
        let cursor = self.background.resync.as_mut().expect("resync cursor");
        let (_, _, _, in_flight) = cursor.current.as_mut().expect("current region");
        *in_flight -= 1;
        cursor.current_skipped |= skipped;
        self.counters.resynced_stripes += u64::from(!skipped);
    }
}
