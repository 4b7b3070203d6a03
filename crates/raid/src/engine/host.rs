//! Admission of host requests and the healthy read path.
//!
//! A healthy read goes straight to the member holding each chunk, into the reply buffer, with
//! no lock and no parity. Pieces whose chunk cannot be read (lost member, read error) are
//! handed to a stripe recovery operation.

use super::stripe::{Fragment, Kind, Stage, StripeOp};
use super::{
    Engine, GroupState, HostError, HostOp, HostRequest, Key, MemberError, MemberOp, Owner, Phase,
    Request,
};
use crate::geometry::SECTOR_BYTES;
use crate::plan::ChunkRange;
use tessera_buffer::BufferSlice;

/// How many coalescing windows a stream's partial-stripe write waits for its partner while
/// the journal is on: at least (fast writes), and at most (slow ones); see `gather_window_us`.
const JOURNALED_WINDOW_FACTOR: u64 = 10;
const JOURNALED_WINDOW_FACTOR_MAX: u64 = 50;

/// One chunk-sized (or smaller) piece of a host read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadPiece {
    pub stripe: u64,
    pub index: usize,
    /// Byte offset within the chunk.
    pub within_bytes: u64,
    pub len_bytes: u64,
    /// Where the piece goes in the request's buffer.
    pub buffer_offset_bytes: u64,
    pub region: u64,
}

impl Engine {
    /// Starts a host request; false if it must wait for buffer space (it is then queued again
    /// at the front).
    pub(super) fn admit(&mut self, request: HostRequest) -> bool {
        assert_ne!(self.phase, Phase::Starting);
        if self.members.group_state(&self.geometry) == GroupState::Failed {
            self.reject(request, HostError::Io);
            return true;
        }
        match request.op {
            HostOp::Read {
                offset_bytes,
                len_bytes,
            }
            | HostOp::ReadAround {
                offset_bytes,
                len_bytes,
                ..
            } => {
                let around = match request.op {
                    HostOp::ReadAround { copy, .. } => Some(copy),
                    _ => None,
                };
                if !self.in_range(offset_bytes, len_bytes) {
                    self.reject(request, HostError::OutOfRange);
                    return true;
                }
                let buffer =
                    if self.pool.used_bytes() + len_bytes as usize <= self.host_pool_limit() {
                        self.pool.alloc(len_bytes as usize)
                    } else {
                        None
                    };
                let Some(buffer) = buffer else {
                    self.deferred.push_front(request);
                    return false;
                };
                self.counters.host_reads += 1;
                self.counters.host_read_bytes += len_bytes;
                self.start_read(request.id, offset_bytes, len_bytes, buffer, around);
            }
            HostOp::Write {
                offset_bytes,
                buffer,
                fua,
            } => {
                let len_bytes = self.pool.len(buffer) as u64;
                if !self.in_range(offset_bytes, len_bytes) {
                    self.reject(request, HostError::OutOfRange);
                    return true;
                }
                self.counters.host_writes += 1;
                self.counters.host_write_bytes += len_bytes;
                let key = self.new_request(request.id, None, Some(buffer), true, fua);
                let gather_us = self.gather_window_us(offset_bytes);
                self.last_write_end_bytes = offset_bytes + len_bytes;
                self.last_write = Some((key, request.id));
                self.split_write(key, offset_bytes, self.pool.full(buffer), gather_us);
                self.finish_part(key, Ok(()));
            }
            HostOp::Flush => {
                let key = self.new_request(request.id, None, None, true, false);
                self.start_flush(Some(key), None);
            }
            HostOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                if !self.in_range(offset_bytes, len_bytes) {
                    self.reject(request, HostError::OutOfRange);
                    return true;
                }
                let key = self.new_request(request.id, None, None, true, false);
                for region in self.whole_regions(offset_bytes, len_bytes) {
                    self.regions.drop_region(region);
                }
                self.finish_part(key, Ok(()));
            }
            HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                may_deallocate,
                fast_only,
                fua,
            } => {
                if !self.in_range(offset_bytes, len_bytes) {
                    self.reject(request, HostError::OutOfRange);
                    return true;
                }
                self.write_zeroes(
                    request.id,
                    offset_bytes,
                    len_bytes,
                    may_deallocate,
                    fast_only,
                    fua,
                );
            }
        }
        true
    }

    fn in_range(&self, offset_bytes: u64, len_bytes: u64) -> bool {
        offset_bytes.is_multiple_of(SECTOR_BYTES)
            && len_bytes.is_multiple_of(SECTOR_BYTES)
            && offset_bytes
                .checked_add(len_bytes)
                .is_some_and(|end| end <= self.geometry.data_bytes())
    }

    fn new_request(
        &mut self,
        id: u64,
        read_buffer: Option<tessera_buffer::BufferId>,
        write_buffer: Option<tessera_buffer::BufferId>,
        waits_for_metadata: bool,
        fua: bool,
    ) -> Key {
        // One part stands for the submission itself, so the request cannot finish while its
        // parts are still being issued.
        self.requests.insert(Request {
            id,
            parts_pending: 1,
            error: None,
            read_buffer,
            read_range: (0, 0),
            write_buffer,
            waits_for_metadata,
            fua_members: 0,
            fua,
            fua_bitmap: false,
            submit_us: self.now_us,
        })
    }

    /// Regions entirely inside `offset .. offset + len`.
    fn whole_regions(&self, offset_bytes: u64, len_bytes: u64) -> std::ops::Range<u64> {
        let region_bytes = self.regions.region_bytes();
        let first = offset_bytes.div_ceil(region_bytes);
        let end = (offset_bytes + len_bytes) / region_bytes;
        first..end.max(first)
    }

    fn write_zeroes(
        &mut self,
        id: u64,
        offset_bytes: u64,
        len_bytes: u64,
        may_deallocate: bool,
        fast_only: bool,
        fua: bool,
    ) {
        let region_bytes = self.regions.region_bytes();
        let whole = self.whole_regions(offset_bytes, len_bytes);
        let droppable =
            |engine: &Engine, region: u64| may_deallocate && engine.regions.can_drop(region);
        // The byte ranges that need zeroes written rather than a region dropped.
        let mut explicit: Vec<(u64, u64)> = Vec::new();
        let mut cursor = offset_bytes;
        let end = offset_bytes + len_bytes;
        while cursor < end {
            let region = cursor / region_bytes;
            let region_end = ((region + 1) * region_bytes).min(end);
            let is_whole = whole.contains(&region);
            if !(is_whole && (droppable(self, region) || self.regions.is_unwritten(region))) {
                explicit.push((cursor, region_end - cursor));
            }
            cursor = region_end;
        }
        if fast_only && !explicit.is_empty() {
            self.out.push_back(super::Command::Reply(super::Reply {
                id,
                result: Err(HostError::NotFast),
            }));
            return;
        }
        let key = self.new_request(id, None, None, true, fua);
        for region in whole {
            // A region dropped now, or unwritten already (perhaps by a trim not yet on the
            // members): either way FUA must make its unwritten bit durable.
            if droppable(self, region) {
                self.regions.drop_region(region);
                self.requests.get_mut(key).expect("request").fua_bitmap = true;
            } else if self.regions.is_unwritten(region) {
                self.requests.get_mut(key).expect("request").fua_bitmap = true;
            }
        }
        for (offset, len) in explicit {
            self.split_zero_write(key, offset, len);
        }
        self.finish_part(key, Ok(()));
    }

    /// Writes zeroes over a range through the normal write path, from the shared zero buffer.
    fn split_zero_write(&mut self, request: Key, offset_bytes: u64, len_bytes: u64) {
        let chunk = self.geometry.chunk_bytes();
        let mut cursor = offset_bytes;
        let end = offset_bytes + len_bytes;
        while cursor < end {
            let (stripe, _, _) = self.geometry.locate(cursor);
            let stripe_end = self.geometry.stripe_offset_bytes(stripe + 1).min(end);
            let mut fragments = self.new_fragments();
            let mut at = cursor;
            while at < stripe_end {
                let (_, index, within) = self.geometry.locate(at);
                let len = (chunk - within).min(stripe_end - at);
                let buffer = BufferSlice::new(self.zero_buffer, 0, len as usize);
                fragments.push(Fragment {
                    request,
                    index,
                    range: ChunkRange::new(within, within + len),
                    buffer,
                });
                at += len;
            }
            self.enqueue_write(stripe, fragments, 0);
            cursor = stripe_end;
        }
    }

    /// How long a partial-stripe piece of a write starting at `offset_bytes` may wait for the
    /// rest of its stripe (0: not at all).
    fn gather_window_us(&self, offset_bytes: u64) -> u64 {
        if offset_bytes != self.last_write_end_bytes || self.geometry.parity_chunks() == 0 {
            return 0;
        }
        // A write alone in the engine comes from a client that waits for each answer (queue
        // depth 1): its next write cannot arrive while this one waits for it, so holding it
        // back to coalesce would only add the window to its latency.
        if self.requests.len() <= 1 {
            return 0;
        }
        // With the journal on, a partial-stripe write costs a journal entry with its contents
        // (and a later write to the stripe waits for it), where a full stripe costs none: the
        // partner is worth a longer wait, but only behind a write still in flight, which is a
        // stream (a client that waited for the write this one continues, such as a log
        // written and synced in turn beside other I/O, keeps the short window). The partner
        // comes when the client refills its queue, as its writes are answered: in an emulated
        // guest, degraded 128 KiB journaled writes took ~40 ms each and one stripe in seven
        // went out in halves with a fixed 2 ms wait, none with 10 ms. So the wait follows the
        // average write latency, between 10 and 50 windows: a fast drive keeps the short
        // wait, and a slow one, whose writes take longer than the wait, pays it only at the
        // end of a stream.
        let stream = self
            .last_write
            .is_some_and(|(previous, id)| self.requests.get(previous).is_some_and(|r| r.id == id));
        let base_us = self.config.coalesce_window_us;
        if stream && self.journal.active {
            self.write_latency_average_us.clamp(
                base_us * JOURNALED_WINDOW_FACTOR,
                base_us * JOURNALED_WINDOW_FACTOR_MAX,
            )
        } else {
            base_us
        }
    }

    /// Splits a host write into per-stripe fragments and queues them; partial-stripe pieces
    /// wait up to `gather_us` for the rest of their stripe.
    fn split_write(
        &mut self,
        request: Key,
        offset_bytes: u64,
        buffer: BufferSlice,
        gather_us: u64,
    ) {
        let chunk = self.geometry.chunk_bytes();
        let end = offset_bytes + buffer.len() as u64;
        let mut cursor = offset_bytes;
        while cursor < end {
            let (stripe, _, _) = self.geometry.locate(cursor);
            let stripe_end = self.geometry.stripe_offset_bytes(stripe + 1).min(end);
            let mut fragments = self.new_fragments();
            let mut at = cursor;
            while at < stripe_end {
                let (_, index, within) = self.geometry.locate(at);
                let len = (chunk - within).min(stripe_end - at);
                let slice = buffer.sub((at - offset_bytes) as usize, len as usize);
                fragments.push(Fragment {
                    request,
                    index,
                    range: ChunkRange::new(within, within + len),
                    buffer: slice,
                });
                at += len;
            }
            self.enqueue_write(stripe, fragments, gather_us);
            cursor = stripe_end;
        }
    }

    /// Adds a stripe's fragments to the last queued write of that stripe when they fit
    /// (coalescing), or queues a new stripe write, which waits up to `gather_us` for the rest
    /// of its stripe if it is partial.
    pub(super) fn enqueue_write(&mut self, stripe: u64, fragments: Vec<Fragment>, gather_us: u64) {
        for fragment in &fragments {
            self.requests
                .get_mut(fragment.request)
                .expect("request in flight")
                .parts_pending += 1;
        }
        let candidate = self.locks.last_waiting(stripe).or_else(|| {
            self.locks
                .holder(stripe)
                .filter(|&op| self.ops.get(op).is_some_and(|op| op.is_gathering()))
        });
        if let Some(op_id) = candidate {
            let op = self.ops.get_mut(op_id).expect("queued op is live");
            if op.try_merge(&fragments) {
                self.counters.coalesced_writes += 1;
                let full =
                    op.covers_full_stripe(self.geometry.data_chunks(), self.geometry.chunk_bytes());
                if full && op.is_gathering() {
                    op.stage = Stage::Gate;
                    self.ready.push_back(op_id);
                }
                self.recycle_fragments(fragments);
                return;
            }
        }
        let region = self.regions.region_of_stripe(stripe, &self.geometry);
        let op = self.new_stripe_op(stripe, region, Kind::write(fragments));
        let full = op.covers_full_stripe(self.geometry.data_chunks(), self.geometry.chunk_bytes());
        let op_id = self.ops.insert(op);
        if self.locks.acquire(stripe, op_id) {
            let op = self.ops.get_mut(op_id).expect("new op is live");
            if gather_us > 0 && !full {
                op.stage = Stage::Gathering {
                    until_us: self.now_us + gather_us,
                };
            } else {
                op.stage = Stage::Gate;
                self.ready.push_back(op_id);
            }
        }
    }

    /// Starts the pieces of a read (`around`: of a `ReadAround` that copy).
    fn start_read(
        &mut self,
        id: u64,
        offset_bytes: u64,
        len_bytes: u64,
        buffer: tessera_buffer::BufferId,
        around: Option<u8>,
    ) {
        let key = self.new_request(id, Some(buffer), None, false, false);
        self.requests.get_mut(key).expect("new request").read_range = (offset_bytes, len_bytes);
        let chunk = self.geometry.chunk_bytes();
        let end = offset_bytes + len_bytes;
        let mut cursor = offset_bytes;
        // On parity levels a read around copy `k` reconstructs only the k-th chunk the range
        // touches: reconstructing a clean chunk would go through the bad one.
        let parity = self.geometry.parity_chunks() > 0;
        let pieces = (end.div_ceil(chunk) - offset_bytes / chunk).max(1);
        if let Some(copy) = around
            && parity
            && u64::from(copy) >= pieces
        {
            self.finish_part(key, Err(HostError::Io));
            return;
        }
        let mut ordinal = 0u64;
        while cursor < end {
            let (stripe, index, within) = self.geometry.locate(cursor);
            let len = (chunk - within).min(end - cursor);
            let region = self.regions.region_of_stripe(stripe, &self.geometry);
            let piece = ReadPiece {
                stripe,
                index,
                within_bytes: within,
                len_bytes: len,
                buffer_offset_bytes: cursor - offset_bytes,
                region,
            };
            self.requests
                .get_mut(key)
                .expect("request in flight")
                .parts_pending += 1;
            let piece_around = match around {
                Some(copy) if parity => (u64::from(copy) == ordinal).then_some(0),
                other => other,
            };
            self.route_read_piece(key, piece, cursor, piece_around, true);
            cursor += len;
            ordinal += 1;
        }
        self.finish_part(key, Ok(()));
    }

    /// Sends a read piece on its way. With `may_resync_ahead`, a piece of a parity-level
    /// stripe awaiting resync first waits for that stripe's resync (`ahead.rs`).
    pub(super) fn route_read_piece(
        &mut self,
        request: Key,
        piece: ReadPiece,
        group_offset_bytes: u64,
        around: Option<u8>,
        may_resync_ahead: bool,
    ) {
        if self.overlaps_bad(group_offset_bytes, piece.len_bytes) {
            self.finish_part(request, Err(HostError::Io));
            return;
        }
        let buffer = self
            .requests
            .get(request)
            .and_then(|r| r.read_buffer)
            .expect("read request has a buffer");
        if !self.regions.is_written(piece.region) {
            self.pool
                .bytes_mut(self.slice(buffer, piece.buffer_offset_bytes, piece.len_bytes))
                .fill(0);
            self.finish_part(request, Ok(()));
            return;
        }
        if may_resync_ahead && self.needs_resync_ahead(&piece) {
            self.resync_ahead(request, piece, group_offset_bytes, around);
            return;
        }
        let in_sync = self.regions.stripe_in_sync(piece.region, piece.stripe);
        // Copies of a region awaiting resync may disagree, and its parity is not trusted: a
        // read around one copy there is a plain read.
        if let Some(copy) = around
            && in_sync
        {
            self.read_around(request, piece, copy);
            return;
        }
        if !in_sync && self.geometry.copies() > 1 {
            // The first copy answers and the answer reaches the other copies first (under the
            // stripe lock, as resync would copy it): otherwise losing that copy before resync
            // gets here would make a later read return what another copy held.
            self.recover_piece(request, piece, None, false);
            return;
        }
        match self.data_reader(piece.stripe, piece.index, piece.within_bytes, false, 0) {
            Some((member, offset_bytes)) => {
                self.regions.enter(piece.region);
                let slice = self.slice(buffer, piece.buffer_offset_bytes, piece.len_bytes);
                let for_host = self.requests.get(request).map(|r| r.id);
                self.issue(
                    member,
                    MemberOp::Read {
                        offset_bytes,
                        buffer: slice,
                        for_host,
                    },
                    Owner::HostRead { request, piece },
                );
            }
            None => {
                self.counters.degraded_reads += 1;
                self.recover_piece(request, piece, None, false);
            }
        }
    }

    pub(super) fn host_read_done(
        &mut self,
        request: Key,
        piece: ReadPiece,
        member: usize,
        result: Result<(), MemberError>,
    ) {
        self.regions.leave(piece.region, self.now_us, None);
        match result {
            Ok(()) => self.finish_part(request, Ok(())),
            Err(error) => {
                let repair = (error == MemberError::Io && !self.members.list[member].is_failed())
                    .then_some(member);
                self.recover_piece(request, piece, repair, repair.is_some());
            }
        }
    }

    /// A piece of a `ReadAround`: recovered without reading the member that holds `copy`.
    fn read_around(&mut self, request: Key, piece: ReadPiece, copy: u8) {
        let copies = self.geometry.copies();
        let sources = if self.geometry.parity_chunks() > 0 {
            1
        } else {
            copies
        };
        if usize::from(copy) >= sources || self.geometry.redundancy() == 0 {
            self.finish_part(request, Err(HostError::Io));
            return;
        }
        let placement = self
            .geometry
            .data_placement(piece.stripe, piece.index, usize::from(copy));
        let avoid = self
            .members
            .reader(placement.member, placement.offset_bytes);
        self.recover_piece(request, piece, avoid, false);
    }

    /// Hands a read piece to a stripe recovery operation (merging with one already queued).
    /// `avoid` is a member not to read the piece from; with `rewrite`, what is recovered is
    /// written back to it (a read error repaired).
    fn recover_piece(
        &mut self,
        request: Key,
        piece: ReadPiece,
        avoid: Option<usize>,
        rewrite: bool,
    ) {
        let repair_member = avoid;
        let buffer = self
            .requests
            .get(request)
            .and_then(|r| r.read_buffer)
            .expect("read request has a buffer");
        let target = self.slice(buffer, piece.buffer_offset_bytes, piece.len_bytes);
        if let Some(op_id) = self.locks.last_waiting(piece.stripe) {
            let op = self.ops.get_mut(op_id).expect("queued op is live");
            if op.try_add_recovery(request, piece, target, repair_member, rewrite) {
                return;
            }
        }
        let op = StripeOp::new(
            piece.stripe,
            piece.region,
            Kind::recover(request, piece, target, repair_member, rewrite),
        );
        self.start_stripe_op(Box::new(op));
    }

    /// Gathering writes whose window expired start now.
    pub(super) fn release_gathering_ops(&mut self) {
        for (key, op) in self.ops.iter_mut() {
            if let Stage::Gathering { until_us } = op.stage
                && until_us <= self.now_us
            {
                op.stage = Stage::Gate;
                self.ready.push_back(key);
            }
        }
    }

    pub(super) fn gathering_deadline(&self) -> Option<u64> {
        self.ops
            .iter()
            .filter_map(|(_, op)| match op.stage {
                Stage::Gathering { until_us } => Some(until_us),
                _ => None,
            })
            .min()
    }
}
