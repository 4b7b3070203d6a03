//! Regions: the written and dirty (write-intent) bits, their persistence in the on-member
//! bitmap, zero-fill of a region before its first write, and lazy clearing of dirty bits.
//! See `crate::bitmap` for what the bits mean and how blocks are stored.

use super::hashing::NumberMap;
use super::{Engine, MemberOp, OpId, Owner};
use crate::bitmap::{self, Bits, REGIONS_PER_BLOCK};
use crate::geometry::{Column, Geometry};
use std::collections::{BTreeMap, BTreeSet};
use tessera_buffer::{BufferId, BufferSlice};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ZeroFillStage {
    /// Waiting for I/O already in the region to drain.
    WaitIdle,
    Writing {
        pending: u32,
    },
    Flushing {
        pending: u32,
    },
    /// Waiting for the written and dirty bits to be durable.
    Marking,
}

#[derive(Clone, Copy, Debug)]
struct Activity {
    last_write_us: u64,
    /// The flush epoch started when the last write finished: a flush with a later epoch
    /// covers it.
    epoch: u64,
}

struct BlockWrite {
    sequence: u64,
    pending: u32,
    flushing: bool,
    buffer: BufferId,
    written: Vec<u8>,
    dirty: Vec<u8>,
}

#[derive(Default)]
struct Block {
    sequence: u64,
    writing: Option<BlockWrite>,
}

/// Best copy of a block found while loading.
struct Loaded {
    sequence: u64,
    written: Vec<u8>,
    dirty: Vec<u8>,
}

pub(crate) struct Regions {
    region_bytes: u64,
    count: u64,
    group_tag: u64,
    bitmap_offset_bytes: u64,
    slot_bytes: u64,
    written: Bits,
    dirty: Bits,
    durable_written: Bits,
    durable_dirty: Bits,
    unsynced: Bits,
    /// Stripes of regions awaiting resync that were resynced ahead of the rest (region,
    /// stripe): their parity is trusted.
    synced_ahead: BTreeSet<(u64, u64)>,
    zero_fills: BTreeMap<u64, ZeroFillStage>,
    in_flight: NumberMap<u32>,
    activity: BTreeMap<u64, Activity>,
    /// `activity` ordered by when each region is next looked at for clearing.
    clear_queue: BTreeSet<(u64, u64)>,
    blocks: Vec<Block>,
    needs_write: BTreeSet<u32>,
    gate_waiters: BTreeMap<u64, Vec<OpId>>,
    flush_epoch_started: u64,
    flush_epoch_done: u64,
    internal_flush_running: bool,
    guessed: bool,
    loading: Option<(u32, Vec<Option<Loaded>>)>,
}

impl Regions {
    pub(crate) fn new(
        geometry: &Geometry,
        region_bytes: u64,
        group_tag: u64,
        bitmap_offset_bytes: u64,
        slot_bytes: u64,
    ) -> Regions {
        let count = geometry.data_bytes().div_ceil(region_bytes);
        let blocks = count.div_ceil(REGIONS_PER_BLOCK).max(1) as usize;
        assert!(blocks as u64 * bitmap::BLOCK_BYTES as u64 <= slot_bytes);
        Regions {
            region_bytes,
            count,
            group_tag,
            bitmap_offset_bytes,
            slot_bytes,
            written: Bits::new(count),
            dirty: Bits::new(count),
            durable_written: Bits::new(count),
            durable_dirty: Bits::new(count),
            unsynced: Bits::new(count),
            synced_ahead: BTreeSet::new(),
            zero_fills: BTreeMap::new(),
            in_flight: NumberMap::default(),
            activity: BTreeMap::new(),
            clear_queue: BTreeSet::new(),
            blocks: (0..blocks).map(|_| Block::default()).collect(),
            needs_write: BTreeSet::new(),
            gate_waiters: BTreeMap::new(),
            flush_epoch_started: 0,
            flush_epoch_done: 0,
            internal_flush_running: false,
            guessed: false,
            loading: None,
        }
    }

    pub(crate) fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Every region written, in memory and as the members will hold it once the new group's
    /// bitmap is formatted (adopted data: nothing reads as zeroes, rebuild copies everything).
    pub(crate) fn mark_all_written(&mut self) {
        for region in 0..self.count {
            self.written.set(region, true);
            self.durable_written.set(region, true);
        }
    }

    pub(crate) fn block_count(&self) -> u32 {
        u32::try_from(self.blocks.len()).expect("block count fits u32")
    }

    pub(crate) fn region_of_stripe(&self, stripe: u64, geometry: &Geometry) -> u64 {
        geometry.stripe_offset_bytes(stripe) / self.region_bytes
    }

    /// Stripes of a region.
    pub(crate) fn stripes(&self, region: u64, geometry: &Geometry) -> std::ops::Range<u64> {
        let per_region = self.region_bytes / geometry.stripe_data_bytes();
        let first = region * per_region;
        first..((region + 1) * per_region).min(geometry.stripe_count())
    }

    /// Whether the region holds data (reads go to the members).
    pub(crate) fn is_written(&self, region: u64) -> bool {
        self.written.get(region)
    }

    pub(crate) fn is_unwritten(&self, region: u64) -> bool {
        !self.written.get(region) && !self.zero_fills.contains_key(&region)
    }

    pub(crate) fn is_unsynced(&self, region: u64) -> bool {
        self.unsynced.get(region)
    }

    pub(crate) fn mark_synced(&mut self, region: u64) {
        self.unsynced.set(region, false);
        self.synced_ahead.retain(|&(ahead, _)| ahead != region);
    }

    /// Whether a stripe's parity agrees with its data as far as the bitmap knows: its region
    /// does not await resync, or the stripe was resynced ahead.
    pub(crate) fn stripe_in_sync(&self, region: u64, stripe: u64) -> bool {
        !self.unsynced.get(region) || self.synced_ahead.contains(&(region, stripe))
    }

    /// A stripe of a region awaiting resync was resynced ahead of the rest.
    pub(crate) fn mark_stripe_synced(&mut self, region: u64, stripe: u64) {
        if self.unsynced.get(region) {
            self.synced_ahead.insert((region, stripe));
        }
    }

    pub(crate) fn unsynced_regions(&self) -> Vec<u64> {
        (0..self.count)
            .filter(|&region| self.unsynced.get(region))
            .collect()
    }

    pub(crate) fn written_count(&self) -> u64 {
        self.written.count_ones()
    }

    pub(crate) fn dirty_count(&self) -> u64 {
        self.dirty.count_ones()
    }

    /// Whether a whole region may be dropped (made unwritten) by trim or write-zeroes.
    pub(crate) fn can_drop(&self, region: u64) -> bool {
        self.written.get(region) && !self.zero_fills.contains_key(&region)
    }

    /// Makes a region unwritten: it reads as zeroes at once; the bit reaches the members
    /// lazily (and with the next flush).
    pub(crate) fn drop_region(&mut self, region: u64) {
        if !self.can_drop(region) {
            return;
        }
        self.written.set(region, false);
        self.needs_write.insert(bitmap::block_of(region));
    }

    pub(crate) fn enter(&mut self, region: u64) {
        *self.in_flight.entry(region).or_insert(0) += 1;
    }

    /// An operation leaves the region; `wrote` records the time of a write for lazy clearing,
    /// which is looked at `delay_us` later.
    pub(crate) fn leave(&mut self, region: u64, now_us: u64, wrote: Option<u64>) {
        let count = self
            .in_flight
            .get_mut(&region)
            .expect("leaving a region that was entered");
        *count -= 1;
        if *count == 0 {
            self.in_flight.remove(&region);
        }
        if let Some(delay_us) = wrote {
            let activity = Activity {
                last_write_us: now_us,
                epoch: self.flush_epoch_started,
            };
            if self.activity.insert(region, activity).is_none() {
                self.clear_queue.insert((now_us + delay_us, region));
            }
        }
    }

    fn idle(&self, region: u64) -> bool {
        !self.in_flight.contains_key(&region)
    }

    pub(crate) fn next_flush_epoch(&mut self) -> u64 {
        self.flush_epoch_started += 1;
        self.flush_epoch_started
    }

    /// The newest flush epoch handed out.
    pub(crate) fn flush_epoch_started(&self) -> u64 {
        self.flush_epoch_started
    }

    /// The newest flush epoch finished.
    pub(crate) fn flush_epoch_done(&self) -> u64 {
        self.flush_epoch_done
    }

    pub(crate) fn unsynced_count(&self) -> u64 {
        self.unsynced.count_ones()
    }

    /// Whether a bitmap block had no valid copy at load (its regions were assumed written and
    /// dirty).
    pub(crate) fn bitmap_guessed(&self) -> bool {
        self.guessed
    }

    pub(crate) fn finish_flush_epoch(&mut self, epoch: u64) {
        self.flush_epoch_done = self.flush_epoch_done.max(epoch);
        self.internal_flush_running = false;
    }

    pub(crate) fn all_blocks_clean(&self) -> bool {
        self.needs_write.is_empty() && self.blocks.iter().all(|block| block.writing.is_none())
    }

    /// Nothing to do here: pending block writes go out as soon as the writer is free.
    pub(crate) fn request_all_pending_writes(&mut self) {}

    pub(crate) fn has_pending_cleanup(&self) -> bool {
        !self.activity.is_empty() || !self.all_blocks_clean() || !self.zero_fills.is_empty()
    }

    /// When lazy clearing next has something to look at.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.clear_queue.first().map(|(at, _)| *at)
    }

    /// Whether the members (and any block write in flight) say the region is unwritten.
    fn durably_unwritten(&self, region: u64) -> bool {
        let in_flight_agrees = match &self.blocks[bitmap::block_of(region) as usize].writing {
            None => true,
            Some(write) => {
                let at = (region % REGIONS_PER_BLOCK) as usize;
                write
                    .written
                    .get(at / 8)
                    .is_none_or(|byte| byte & (1 << (at % 8)) == 0)
            }
        };
        !self.durable_written.get(region) && in_flight_agrees
    }

    /// Whether the region is written and dirty in memory, on the members, and in any block
    /// write in flight (which would otherwise land later and undo what the members say).
    fn bits_durable(&self, region: u64) -> bool {
        let in_flight_agrees = match &self.blocks[bitmap::block_of(region) as usize].writing {
            None => true,
            Some(write) => {
                let at = (region % REGIONS_PER_BLOCK) as usize;
                let bit = |bytes: &[u8]| {
                    bytes
                        .get(at / 8)
                        .is_some_and(|byte| byte & (1 << (at % 8)) != 0)
                };
                bit(&write.written) && bit(&write.dirty)
            }
        };
        self.written.get(region)
            && self.dirty.get(region)
            && self.durable_written.get(region)
            && self.durable_dirty.get(region)
            && in_flight_agrees
    }

    /// Applies a durable block image to the durable bits.
    fn block_durable(&mut self, block: u32, written: &[u8], dirty: &[u8]) {
        self.durable_written.load_block(block, written);
        self.durable_dirty.load_block(block, dirty);
    }
}

/// The outcome of asking a region to accept writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The region is written and durably dirty: write away.
    Open,
    /// Wait: zero-fill or a bitmap update is under way; the op is woken when it is done.
    Wait,
}

impl Engine {
    /// Asks region `region` to accept a write by `op`.
    pub(super) fn write_gate(&mut self, region: u64, op: OpId) -> Gate {
        let regions = &mut self.regions;
        if regions.bits_durable(region) && !regions.zero_fills.contains_key(&region) {
            return Gate::Open;
        }
        if !regions.written.get(region) {
            regions
                .zero_fills
                .entry(region)
                .or_insert(ZeroFillStage::WaitIdle);
        } else if !regions.zero_fills.contains_key(&region) {
            regions.dirty.set(region, true);
            regions.needs_write.insert(bitmap::block_of(region));
        }
        regions.gate_waiters.entry(region).or_default().push(op);
        Gate::Wait
    }

    /// Asks region `region` to accept a read or background op: `Some(true)` to proceed,
    /// `Some(false)` when the region is unwritten (nothing to do), `None` to wait (zero-fill
    /// under way; the op is woken).
    pub(super) fn read_gate(&mut self, region: u64, op: OpId) -> Option<bool> {
        if self.regions.zero_fills.contains_key(&region) {
            self.regions
                .gate_waiters
                .entry(region)
                .or_default()
                .push(op);
            return None;
        }
        Some(self.regions.written.get(region))
    }

    fn wake_region(&mut self, region: u64) {
        if let Some(waiters) = self.regions.gate_waiters.remove(&region) {
            self.ready.extend(waiters);
        }
    }

    // ----- bitmap writer -----

    pub(super) fn pump_bitmap(&mut self) -> bool {
        let mut progressed = false;
        let pending: Vec<u32> = self.regions.needs_write.iter().copied().collect();
        for block in pending {
            if self.regions.blocks[block as usize].writing.is_some() {
                continue;
            }
            let Some(buffer) = self.metadata_buffers.take_bitmap() else {
                break;
            };
            self.regions.needs_write.remove(&block);
            self.start_block_write(block, buffer);
            progressed = true;
        }
        progressed
    }

    fn start_block_write(&mut self, block: u32, buffer: BufferId) {
        let regions = &mut self.regions;
        let sequence = regions.blocks[block as usize].sequence + 1;
        let written = regions.written.block_bytes(block).to_vec();
        let dirty = regions.dirty.block_bytes(block).to_vec();
        let image = bitmap::encode_block(regions.group_tag, block, sequence, &written, &dirty);
        self.pool.slice_mut(buffer).copy_from_slice(&image);
        let targets = self.members.metadata_members();
        let slot = sequence % 2;
        let offset_bytes = self.regions.bitmap_offset_bytes
            + slot * self.regions.slot_bytes
            + u64::from(block) * bitmap::BLOCK_BYTES as u64;
        let pending = u32::try_from(targets.len()).expect("member count fits u32");
        self.regions.blocks[block as usize].writing = Some(BlockWrite {
            sequence,
            pending,
            flushing: false,
            buffer,
            written,
            dirty,
        });
        for member in targets {
            let slice = self.pool.full(buffer);
            self.issue(
                member,
                MemberOp::Write {
                    offset_bytes,
                    buffer: slice,
                    fua: false,
                },
                Owner::BitmapWrite { block },
            );
        }
        if pending == 0 {
            self.bitmap_write_done_all(block);
        }
    }

    pub(super) fn bitmap_write_done(&mut self, block: u32) {
        let write = self.regions.blocks[block as usize]
            .writing
            .as_mut()
            .expect("block write in flight");
        write.pending -= 1;
        if write.pending == 0 {
            self.bitmap_write_done_all(block);
        }
    }

    fn bitmap_write_done_all(&mut self, block: u32) {
        let write = self.regions.blocks[block as usize]
            .writing
            .as_mut()
            .expect("block write in flight");
        if !write.flushing {
            write.flushing = true;
            let targets = self.members.metadata_members();
            write.pending = u32::try_from(targets.len()).expect("member count fits u32");
            let none = targets.is_empty();
            for member in targets {
                self.issue(member, MemberOp::Flush, Owner::BitmapWrite { block });
            }
            if !none {
                return;
            }
        }
        let write = self.regions.blocks[block as usize]
            .writing
            .take()
            .expect("block write in flight");
        self.metadata_buffers.give_bitmap(write.buffer);
        self.regions.blocks[block as usize].sequence = write.sequence;
        self.regions
            .block_durable(block, &write.written, &write.dirty);
        let first = u64::from(block) * REGIONS_PER_BLOCK;
        let last = (first + REGIONS_PER_BLOCK).min(self.regions.count);
        let waiting: Vec<u64> = self
            .regions
            .gate_waiters
            .range(first..last)
            .map(|(&region, _)| region)
            .collect();
        for region in waiting {
            if !self.regions.zero_fills.contains_key(&region) {
                self.wake_region(region);
            }
        }
        let marking: Vec<u64> = self
            .regions
            .zero_fills
            .range(first..last)
            .filter(|(_, stage)| **stage == ZeroFillStage::Marking)
            .map(|(&region, _)| region)
            .collect();
        for region in marking {
            if self.regions.bits_durable(region) {
                self.regions.zero_fills.remove(&region);
                self.wake_region(region);
            }
        }
    }

    // ----- zero-fill -----

    pub(super) fn pump_zero_fills(&mut self) -> bool {
        let waiting: Vec<u64> = self
            .regions
            .zero_fills
            .iter()
            .filter(|(region, stage)| {
                **stage == ZeroFillStage::WaitIdle && self.regions.idle(**region)
            })
            .map(|(&region, _)| region)
            .collect();
        let mut started = false;
        for region in waiting {
            // Zeroes may only land on a region the members already know as unwritten (a trim
            // that dropped it is made durable first): a crash in the middle then leaves a
            // region that reads as zeroes, never a half-zeroed region trusted as written.
            if !self.regions.durably_unwritten(region) {
                self.regions.needs_write.insert(bitmap::block_of(region));
                continue;
            }
            // Nor may journal replay write old contents into it after it is reused.
            if !self.journal_region_clear(region) {
                continue;
            }
            self.start_zero_fill(region);
            started = true;
        }
        started
    }

    /// Every (member, device offset, length) holding the region's chunks, merged per member.
    fn region_extents(&self, region: u64) -> Vec<(usize, u64, u64)> {
        let chunk = self.geometry.chunk_bytes();
        let mut pieces: Vec<(usize, u64)> = Vec::new();
        for stripe in self.regions.stripes(region, &self.geometry) {
            let columns = (0..self.geometry.data_chunks())
                .map(Column::Data)
                .chain((0..self.geometry.parity_chunks()).map(Column::Parity));
            for column in columns {
                pieces.extend(self.column_writers(stripe, column));
            }
        }
        pieces.sort_unstable();
        pieces.dedup();
        let mut extents: Vec<(usize, u64, u64)> = Vec::new();
        for (member, offset) in pieces {
            match extents.last_mut() {
                Some((last_member, start, len))
                    if *last_member == member
                        && *start + *len == offset
                        && *len + chunk <= super::ZERO_BUFFER_BYTES as u64 =>
                {
                    *len += chunk;
                }
                _ => extents.push((member, offset, chunk)),
            }
        }
        extents
    }

    fn start_zero_fill(&mut self, region: u64) {
        let extents = self.region_extents(region);
        let pending = u32::try_from(extents.len()).expect("extent count fits u32");
        self.regions
            .zero_fills
            .insert(region, ZeroFillStage::Writing { pending });
        for (member, offset_bytes, len) in extents {
            let buffer = BufferSlice::new(self.zero_buffer, 0, len as usize);
            self.issue(
                member,
                MemberOp::WriteZeroes {
                    offset_bytes,
                    buffer,
                },
                Owner::ZeroFill { region },
            );
        }
        if pending == 0 {
            self.zero_fill_step(region);
        }
    }

    pub(super) fn zero_fill_done(&mut self, region: u64) {
        let stage = self
            .regions
            .zero_fills
            .get_mut(&region)
            .expect("zero-fill in progress");
        match stage {
            ZeroFillStage::Writing { pending } | ZeroFillStage::Flushing { pending } => {
                *pending -= 1;
                if *pending == 0 {
                    self.zero_fill_step(region);
                }
            }
            _ => unreachable!("zero-fill I/O completes while writing or flushing"),
        }
    }

    fn zero_fill_step(&mut self, region: u64) {
        let stage = *self
            .regions
            .zero_fills
            .get(&region)
            .expect("zero-fill in progress");
        match stage {
            ZeroFillStage::Writing { .. } => {
                // The zeroes must be durable before the bitmap says the region holds data.
                let targets = self.members.data_members();
                let pending = u32::try_from(targets.len()).expect("member count fits u32");
                self.regions
                    .zero_fills
                    .insert(region, ZeroFillStage::Flushing { pending });
                for member in targets {
                    self.issue(member, MemberOp::Flush, Owner::ZeroFill { region });
                }
                if pending == 0 {
                    self.zero_fill_step(region);
                }
            }
            ZeroFillStage::Flushing { .. } => {
                self.regions
                    .zero_fills
                    .insert(region, ZeroFillStage::Marking);
                self.regions.written.set(region, true);
                self.regions.dirty.set(region, true);
                self.regions.needs_write.insert(bitmap::block_of(region));
            }
            _ => unreachable!("zero-fill steps after I/O"),
        }
    }

    // ----- lazy clearing -----

    /// Clears the dirty bits of regions idle for `dirty_clear_delay_us` whose writes a flush
    /// has covered; starts such a flush when one is missing. Regions not ready yet are looked at
    /// again one delay later, so time always moves the work forward.
    pub(super) fn regions_tick(&mut self) {
        let delay = self.config.dirty_clear_delay_us;
        let now = self.now_us;
        let mut needs_flush = false;
        while let Some(&(at, region)) = self.regions.clear_queue.first() {
            if at > now {
                break;
            }
            self.regions.clear_queue.remove(&(at, region));
            let Some(activity) = self.regions.activity.get(&region).copied() else {
                continue;
            };
            let idle_since = activity.last_write_us + delay;
            // Until a failure is recorded, resync after a power cut may be what makes the
            // region's stripes whole again (`failure_pending`).
            let busy = !self.regions.idle(region)
                || self.regions.gate_waiters.contains_key(&region)
                || self.failure_pending();
            if idle_since > now || busy {
                self.regions
                    .clear_queue
                    .insert((idle_since.max(now + delay), region));
                continue;
            }
            if activity.epoch >= self.regions.flush_epoch_done {
                needs_flush = true;
                self.regions.clear_queue.insert((now + delay, region));
                continue;
            }
            self.regions.activity.remove(&region);
            if self.regions.unsynced.get(region) || !self.regions.dirty.get(region) {
                continue;
            }
            self.regions.dirty.set(region, false);
            self.regions.needs_write.insert(bitmap::block_of(region));
        }
        if needs_flush && !self.regions.internal_flush_running {
            self.regions.internal_flush_running = true;
            self.start_flush(None, None);
        }
    }

    /// Clears every dirty bit of idle, synced regions at once (clean shutdown), after the
    /// caller flushed the members.
    pub(super) fn clear_all_dirty(&mut self) {
        for region in 0..self.regions.count {
            if self.regions.dirty.get(region) && !self.regions.unsynced.get(region) {
                self.regions.dirty.set(region, false);
                self.regions.needs_write.insert(bitmap::block_of(region));
            }
        }
        self.regions.activity.clear();
        self.regions.clear_queue.clear();
    }

    // ----- loading at start-up -----

    /// Issues reads of both slots of every bitmap block from every metadata member.
    pub(super) fn start_bitmap_load(&mut self) {
        let blocks = self.regions.block_count();
        let members = self.members.metadata_members();
        let reads = blocks as usize * 2 * members.len();
        self.regions.loading = Some((
            u32::try_from(reads).expect("read count fits u32"),
            (0..blocks).map(|_| None).collect(),
        ));
        for block in 0..blocks {
            for slot in 0..2u8 {
                for &member in &members {
                    let buffer = self
                        .pool
                        .alloc(bitmap::BLOCK_BYTES)
                        .expect("bitmap load buffer");
                    let offset_bytes = self.regions.bitmap_offset_bytes
                        + u64::from(slot) * self.regions.slot_bytes
                        + u64::from(block) * bitmap::BLOCK_BYTES as u64;
                    let slice = self.pool.full(buffer);
                    self.issue(
                        member,
                        MemberOp::Read {
                            offset_bytes,
                            buffer: slice,
                            for_host: None,
                        },
                        Owner::BitmapLoad {
                            block,
                            slot,
                            buffer,
                        },
                    );
                }
            }
        }
        if reads == 0 {
            self.finish_bitmap_load();
        }
    }

    pub(super) fn bitmap_load_done(
        &mut self,
        block: u32,
        _slot: u8,
        buffer: BufferId,
        result: Result<(), super::MemberError>,
    ) {
        if result.is_ok()
            && let Ok(image) =
                bitmap::decode_block(self.pool.slice(buffer), self.regions.group_tag, block)
        {
            let (_, best) = self.regions.loading.as_mut().expect("bitmap loading");
            let slot = &mut best[block as usize];
            if slot
                .as_ref()
                .is_none_or(|loaded| loaded.sequence < image.sequence)
            {
                *slot = Some(Loaded {
                    sequence: image.sequence,
                    written: image.written,
                    dirty: image.dirty,
                });
            }
        }
        self.pool.free(buffer);
        let (remaining, _) = self.regions.loading.as_mut().expect("bitmap loading");
        *remaining -= 1;
        if *remaining == 0 {
            self.finish_bitmap_load();
        }
    }

    fn finish_bitmap_load(&mut self) {
        let (_, best) = self.regions.loading.take().expect("bitmap loading");
        for (block, loaded) in best.into_iter().enumerate() {
            let block = u32::try_from(block).expect("block fits u32");
            match loaded {
                Some(loaded) => {
                    self.regions.blocks[block as usize].sequence = loaded.sequence;
                    self.regions.written.load_block(block, &loaded.written);
                    self.regions.dirty.load_block(block, &loaded.dirty);
                    self.regions
                        .block_durable(block, &loaded.written, &loaded.dirty);
                }
                None => {
                    // No valid copy anywhere: assume every region written and dirty, the safe
                    // direction (resync rather than trust).
                    self.regions.guessed = true;
                    let first = u64::from(block) * REGIONS_PER_BLOCK;
                    let last = (first + REGIONS_PER_BLOCK).min(self.regions.count);
                    for region in first..last {
                        self.regions.written.set(region, true);
                        self.regions.dirty.set(region, true);
                    }
                    self.regions.needs_write.insert(block);
                }
            }
        }
        for region in 0..self.regions.count {
            if self.regions.dirty.get(region) && self.regions.written.get(region) {
                self.regions.unsynced.set(region, true);
            }
        }
        self.startup_step_done();
    }

    /// Writes an empty bitmap (both slots) for a new group.
    pub(super) fn start_bitmap_format(&mut self) -> u32 {
        let blocks = self.regions.block_count();
        let members = self.members.metadata_members();
        let mut issued = 0;
        for block in 0..blocks {
            for slot in 0..2u64 {
                let written = self.regions.written.block_bytes(block);
                let image = bitmap::encode_block(self.regions.group_tag, block, slot, written, &[]);
                let buffer = self
                    .pool
                    .alloc(bitmap::BLOCK_BYTES)
                    .expect("bitmap format buffer");
                self.pool.slice_mut(buffer).copy_from_slice(&image);
                self.startup.format_buffers.push(buffer);
                let offset_bytes = self.regions.bitmap_offset_bytes
                    + slot * self.regions.slot_bytes
                    + u64::from(block) * bitmap::BLOCK_BYTES as u64;
                for &member in &members {
                    let slice = self.pool.full(buffer);
                    self.issue(
                        member,
                        MemberOp::Write {
                            offset_bytes,
                            buffer: slice,
                            fua: false,
                        },
                        Owner::Superblock,
                    );
                    issued += 1;
                }
            }
            self.regions.blocks[block as usize].sequence = 1;
        }
        issued
    }
}
