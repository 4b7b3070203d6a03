//! The thin store's state machine: host requests and lower completions in; lower commands,
//! replies and events out. See `docs/thin.md` for the design and why each write is safe.

mod clean;
mod log;
mod read;
mod recover;
mod scrub;
mod write;

pub use scrub::ScrubProgress;

use crate::codec::{Codec, Compressor};
use crate::format::{CheckpointHeader, Entry, Location};
use crate::layout::Layout;
use crate::map::BlockMap;
use crate::{BLOCK_BYTES, SECTOR_BYTES};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

/// How new blocks are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Lz4,
    Zstd,
}

impl Compression {
    fn codec(self) -> Codec {
        match self {
            Compression::None => Codec::Raw,
            Compression::Lz4 => Codec::Lz4,
            Compression::Zstd => Codec::Zstd,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Identifies this store's records among whatever else the extent held before.
    pub store_id: u64,
    /// The size the host sees; a multiple of `BLOCK_BYTES`.
    pub logical_bytes: u64,
    /// The size of the extent of the group's data space the store lives in.
    pub extent_bytes: u64,
    /// Data bytes of one full stripe of the group.
    pub stripe_bytes: u64,
    pub compression: Compression,
    /// How many redundant sources a block can be read from around a bad one (`LowerOp::
    /// ReadAround` copies 0..this): 0 for RAID0, 1 for parity groups, copies - 1... for
    /// mirrors it is the number of copies.
    pub repair_sources: u8,
    /// Bytes the members write per data byte of a full-stripe write (members / data chunks).
    pub member_bytes_per_data_byte: f64,
    /// A low-space event is raised when free space falls below this share of the extent.
    pub low_space_percent: u8,
    /// Names this start-up in the records it writes; must differ from every earlier start-up
    /// of the store (draw it at random). Recovery ends the log where a record of another
    /// start-up follows without being its first, so records a crashed start-up left past the
    /// point the next one resumed from are never taken for the next one's.
    pub session_id: u64,
}

/// A host request, in logical bytes (multiples of `SECTOR_BYTES`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostOp {
    Read {
        offset_bytes: u64,
        len_bytes: u64,
    },
    Write {
        offset_bytes: u64,
        data: Vec<u8>,
        fua: bool,
    },
    Flush,
    Trim {
        offset_bytes: u64,
        len_bytes: u64,
    },
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    /// For reads, the data.
    pub result: Result<Option<Vec<u8>>, ThinError>,
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThinError {
    /// Misaligned, or beyond the drive's logical size.
    OutOfRange,
    /// The data cannot be read (lost beyond the group's redundancy, or failed its checksum
    /// with no good copy), or the group failed under a write.
    Io,
    /// No physical space is left for the write; everything acknowledged stays readable.
    NoSpace,
    /// The store is stopping, or did not start.
    Unavailable,
}

impl fmt::Display for ThinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThinError::OutOfRange => "request misaligned or beyond the virtual drive",
            ThinError::Io => "data unavailable",
            ThinError::NoSpace => "no physical space left on the thin virtual drive",
            ThinError::Unavailable => "the thin virtual drive is not serving",
        })
    }
}

impl std::error::Error for ThinError {}

/// A command for the layer below (the drive group), in bytes of the store's extent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LowerOp {
    Read {
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// Read the range as the group's redundancy says it should be, without the copy numbered
    /// `copy` (for parity groups copy 0 is the data chunk itself: the range is reconstructed
    /// from the rest of its stripe).
    ReadAround {
        offset_bytes: u64,
        len_bytes: u64,
        copy: u8,
    },
    /// A whole-record (full-stripe) write.
    Write {
        offset_bytes: u64,
        data: Arc<Vec<u8>>,
    },
    Flush,
    /// The range holds nothing the store needs (free segments): the group may forget it, so
    /// that a rebuild or scrub skips it. It may read back as zeroes or as it was. It takes
    /// effect before any command issued after it (the store writes records into the range
    /// again without waiting for it).
    Trim {
        offset_bytes: u64,
        len_bytes: u64,
    },
}

impl LowerOp {
    /// Carries the command out on a flat image of a healthy group that never loses a write
    /// (tests, examples and seed replays): reads return its bytes (a read around reads the
    /// same, since every copy agrees), writes change it, trims and flushes change nothing
    /// (a trimmed range may read back as it was).
    pub fn apply_to(&self, image: &mut [u8]) -> Option<Vec<u8>> {
        if let Some((offset_bytes, len_bytes)) = self.read_range() {
            return Some(image[offset_bytes as usize..][..len_bytes as usize].to_vec());
        }
        if let LowerOp::Write { offset_bytes, data } = self {
            image[*offset_bytes as usize..][..data.len()].copy_from_slice(data);
        }
        None
    }

    /// The range a read (of either kind) asks for: offset and length.
    pub fn read_range(&self) -> Option<(u64, u64)> {
        match self {
            LowerOp::Read {
                offset_bytes,
                len_bytes,
            }
            | LowerOp::ReadAround {
                offset_bytes,
                len_bytes,
                ..
            } => Some((*offset_bytes, *len_bytes)),
            LowerOp::Write { .. } | LowerOp::Trim { .. } | LowerOp::Flush => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerCommand {
    pub id: u64,
    pub op: LowerOp,
}

/// Something an operator should hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThinEvent {
    /// A block failed its checksum and was rewritten from a good copy.
    ChecksumRepaired { lba: u64 },
    /// A block failed its checksum and no good copy exists.
    ChecksumUnrepairable { lba: u64 },
    /// Free space fell below the configured share.
    LowSpace { free_bytes: u64 },
    /// Writes are failing for lack of space.
    NoSpace,
    /// Start-up rebuilt the map; `checkpoint_id` 0: the drive's first checkpoint had not
    /// become durable (a crash during its creation), so it was formatted again, empty.
    Recovered {
        checkpoint_id: u64,
        records_replayed: u64,
        torn_blocks_dropped: u64,
    },
    /// The store could not start (its log cannot be read or makes no sense).
    StartFailed { reason: String },
    /// The group failed under a write while the store was serving: nothing more can be made
    /// durable, and every request fails from now on.
    Failed { reason: String },
    /// A scrub read every live block: how many, and the checksum failures it met.
    ScrubFinished {
        checked_blocks: u64,
        errors_detected: u64,
        errors_repaired: u64,
    },
}

#[derive(Debug, PartialEq)]
pub enum Output {
    Lower(LowerCommand),
    Reply(Reply),
    Event(ThinEvent),
}

/// Capacity and I/O statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub logical_bytes: u64,
    /// The extent's usable bytes (its segments).
    pub physical_bytes: u64,
    /// Blocks that hold data, in bytes.
    pub logical_used_bytes: u64,
    /// Bytes the live blocks take, as stored.
    pub stored_bytes: u64,
    /// Segments in use, in bytes.
    pub physical_used_bytes: u64,
    pub free_bytes: u64,
    pub host_bytes_written: u64,
    /// Bytes of whole records written to the group.
    pub lower_bytes_written: u64,
    /// The same with the group's parity or copies.
    pub member_bytes_written: u64,
    pub write_amplification: f64,
    pub compression_ratio: f64,
    /// Bytes re-written by segment cleaning.
    pub cleaning_bytes: u64,
    pub checksum_errors_detected: u64,
    pub checksum_errors_repaired: u64,
    pub checkpoints: u64,
    pub map_memory_bytes: u64,
    pub segments: u64,
    pub free_segments: u64,
}

/// What a lower command in flight is for.
enum Pending {
    RecordWrite { seq: u64 },
    Flush,
    Trim,
    SlotWrite,
    SlotRead { slot: u64 },
    ReplayRead { first_record: u64 },
    HostRead { read: u64, group: usize },
    RepairRead { read: u64, block: usize, copy: u8 },
    CleanRead { segment: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Writing the first checkpoint header.
    Formatting,
    /// Reading the checkpoint headers and rolling the log forward.
    Recovering,
    Ready,
    /// Writing the final checkpoint.
    Stopping,
    Stopped,
    /// Could not start, or the group failed under a record write: nothing more is written.
    Failed,
}

/// Who waits for a flush of the log up to `need_seq`.
enum Waiter {
    Host(u64),
    /// A checkpoint's records.
    Checkpoint,
    /// A checkpoint header.
    Slot,
    /// What start-up replayed.
    Recovered,
    /// Records that took the last live blocks of segments, so the segments can be freed.
    Reclaim,
    /// A stop's records, when no final checkpoint fits.
    Stop,
}

/// The record being filled.
struct OpenRecord {
    record: u64,
    seq: u64,
    prev_seq: u64,
    first_of_session: bool,
    kind: crate::format::RecordKind,
    checkpoint_id: u64,
    entries: Vec<crate::format::Entry>,
    bytes: Vec<u8>,
    /// Stored blocks occupy `payload_start..` (they are packed from the end).
    payload_start: u64,
    opened_us: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    live_bytes: u64,
    used: bool,
    /// Written since the start of the durable checkpoint: recovery walks it, so it is not
    /// reused before the next checkpoint.
    in_chain: bool,
    /// Lower reads in flight on it.
    readers: u32,
    /// A cleaning pass moved none of its live blocks (their record headers are damaged, or
    /// the segment could not be read): it is not picked again until its live bytes change,
    /// or the cleaner would read it over and over.
    stuck: bool,
    /// The record holding the entry that took its last live block, once it has none.
    dead_seq: u64,
}

/// A checkpoint being written.
struct CheckpointWork {
    id: u64,
    start_record: u64,
    start_seq: u64,
    start_prev_seq: u64,
    records: u32,
    last_seq: u64,
    /// The segments the log has entered since `start_record`.
    chain: Vec<u64>,
    /// Segments dead when it started: freed once it is durable.
    candidates: Vec<u64>,
    stage: CheckpointStage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckpointStage {
    /// Waiting for its records to be durable.
    Records,
    /// Its header is being written and flushed.
    Header,
}

/// Largest data buffer kept for reuse.
const SPARE_BUFFER_MAX_CAPACITY: usize = 128 << 10;
/// How many data buffers are kept for reuse.
const SPARE_BUFFERS_MAX: usize = 64;

pub struct Store {
    config: Config,
    layout: Layout,
    map: BlockMap,
    compressor: Compressor,
    phase: Phase,
    outputs: VecDeque<Output>,
    next_lower_id: u64,
    lower: HashMap<u64, Pending>,
    now_us: u64,

    // The log.
    open: Option<OpenRecord>,
    /// The entry list of the last record sealed, kept with its capacity for the next one.
    spare_entries: Vec<Entry>,
    /// The last sequence number given to a record.
    last_seq: u64,
    /// The next record's number jumps (the first record after start-up).
    jump_seq: bool,
    /// Where the next record goes.
    next_record: u64,
    current_segment: u64,
    /// Claimed for when `current_segment` is full; every record names it.
    next_segment: u64,
    /// Sealed records being written, by sequence number, with their bytes (reads of their
    /// blocks are served from here until the write completes).
    in_flight: BTreeMap<u64, (u64, Arc<Vec<u8>>)>,
    /// Records (by number) whose bytes are in memory: the open one and those in flight.
    resident: HashMap<u64, u64>,
    /// Every record up to this sequence number is durable.
    durable_seq: u64,
    segments: Vec<Segment>,
    free: BTreeSet<u64>,
    /// Segments that lost their last live block, with the record that took it (in record
    /// order): free once that record is durable (`free_dead_segments`).
    dying: VecDeque<(u64, u64)>,
    /// A flush for `Waiter::Reclaim` is asked for.
    reclaim_flush: bool,

    // Flushes.
    waiters: Vec<(u64, Waiter)>,
    flush_in_flight: Option<(u64, Vec<Waiter>)>,

    // Host requests held back (FIFO) while space, memory or a merge is awaited.
    blocked: VecDeque<(u64, HostOp)>,
    /// A partial-block write reading the blocks it merges into; the queue waits for it.
    merge: Option<write::Merge>,
    reads: HashMap<u64, read::ReadState>,
    /// Lists of finished reads, kept for the next ones.
    spare_read_lists: Vec<read::ReadLists>,
    /// Data buffers given back (`recycle`), for the next reads' output and the caller's
    /// lower read data (`spare_buffer`).
    spare_buffers: tessera_buffer::SpareVecs,
    /// Stored blocks known to have no good copy.
    lost: std::collections::HashSet<Location>,
    next_read: u64,

    // Checkpoints and cleaning.
    durable_checkpoint: Option<CheckpointHeader>,
    /// The checkpoint header being written.
    pending_slot: Option<CheckpointHeader>,
    final_checkpoint_started: bool,
    final_checkpoint_done: bool,
    /// `shutdown` came during start-up: stop as soon as the store is ready.
    stop_when_started: bool,
    checkpoint: Option<CheckpointWork>,
    record_bytes_since_checkpoint: u64,
    cleaning: Option<u64>,
    scrub: Option<scrub::Scrub>,
    low_space_reported: bool,
    recovery: Option<recover::Recovery>,
    /// What start-up may vouch for as durable (see `recover.rs`).
    recovered_durable_seq: u64,
    recovered_torn: bool,
    /// Until the checkpoint after a start-up that dropped torn blocks is durable, records
    /// vouch for nothing past the torn ones.
    durable_cap: Option<u64>,

    stats: Counters,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    host_bytes_written: u64,
    lower_bytes_written: u64,
    cleaning_bytes: u64,
    checksum_errors_detected: u64,
    checksum_errors_repaired: u64,
    checkpoints: u64,
}

/// A record is sealed once its oldest block has waited this long without a flush. Short
/// enough to bound what an unflushed host loses at a crash (as a file system's commit
/// interval does), long enough that records under a light load still fill: each sealed
/// record takes a whole record of space until cleaning compacts it.
const IDLE_SEAL_US: u64 = 100_000;

/// Records in flight before host writes wait.
const MAX_RECORDS_IN_FLIGHT: usize = 32;

/// How far the sequence numbers jump at start-up, past anything a torn tail may hold.
const RECOVERY_SEQ_GAP: u64 = 1 << 32;

/// Sequence numbers and checkpoint ids at or above this were never written by a store (it
/// would take 2^31 start-ups to get here): recovery refuses them, so counting on from what it
/// found cannot overflow.
const MAX_SEQ: u64 = 1 << 63;

impl Store {
    fn empty(config: Config) -> Result<Store, String> {
        let layout = Layout::new(config.extent_bytes, config.stripe_bytes)?;
        if config.logical_bytes == 0 || !config.logical_bytes.is_multiple_of(BLOCK_BYTES) {
            return Err(format!(
                "a thin drive's size must be a positive multiple of {BLOCK_BYTES} bytes"
            ));
        }
        let segments = vec![Segment::default(); layout.segments as usize];
        Ok(Store {
            map: BlockMap::new(config.logical_bytes / BLOCK_BYTES),
            compressor: Compressor::new(),
            phase: Phase::Recovering,
            outputs: VecDeque::new(),
            next_lower_id: 1,
            lower: HashMap::new(),
            now_us: 0,
            open: None,
            last_seq: 0,
            jump_seq: false,
            next_record: 0,
            current_segment: 0,
            next_segment: 0,
            in_flight: BTreeMap::new(),
            resident: HashMap::new(),
            durable_seq: 0,
            free: (0..layout.segments).collect(),
            dying: VecDeque::new(),
            reclaim_flush: false,
            segments,
            waiters: Vec::new(),
            flush_in_flight: None,
            blocked: VecDeque::new(),
            merge: None,
            reads: HashMap::new(),
            spare_read_lists: Vec::new(),
            spare_entries: Vec::new(),
            spare_buffers: tessera_buffer::SpareVecs::new(
                SPARE_BUFFERS_MAX,
                SPARE_BUFFER_MAX_CAPACITY,
            ),
            lost: Default::default(),
            next_read: 1,
            durable_checkpoint: None,
            pending_slot: None,
            final_checkpoint_started: false,
            final_checkpoint_done: false,
            stop_when_started: false,
            checkpoint: None,
            record_bytes_since_checkpoint: 0,
            cleaning: None,
            scrub: None,
            low_space_reported: false,
            recovery: None,
            recovered_durable_seq: 0,
            recovered_torn: false,
            durable_cap: None,
            stats: Counters::default(),
            layout,
            config,
        })
    }

    /// Where a block is stored (`None`: a hole).
    pub fn location(&self, lba: u64) -> Option<Location> {
        self.map.get(lba)
    }

    /// The last sequence number given to a record, and the newest durable checkpoint.
    pub fn debug_position(&self) -> String {
        format!(
            "last_seq {} durable_seq {} next_record {} current {} next {} checkpoint {:?} free {}",
            self.last_seq,
            self.durable_seq,
            self.next_record,
            self.current_segment,
            self.next_segment,
            self.durable_checkpoint
                .map(|h| (h.checkpoint_id, h.start_record, h.start_seq)),
            self.free.len()
        )
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Serving host requests.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// Failed to start, or failed under a write; `poll` has said why.
    pub fn is_failed(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// Shut down cleanly (after `shutdown`), or failed: nothing is in flight.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped | Phase::Failed) && self.lower.is_empty()
    }

    pub fn poll(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Time passes: records whose blocks have waited long enough are written.
    pub fn tick(&mut self, now_us: u64) {
        self.now_us = now_us;
        if let Some(open) = &self.open
            && !open.entries.is_empty()
            && open.opened_us + IDLE_SEAL_US <= now_us
        {
            self.seal();
        }
        self.background();
    }

    /// When `tick` next has work to do.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.open
            .as_ref()
            .filter(|open| !open.entries.is_empty())
            .map(|open| open.opened_us + IDLE_SEAL_US)
    }

    pub fn submit(&mut self, id: u64, op: HostOp) {
        if self.stop_when_started
            || matches!(self.phase, Phase::Stopping | Phase::Stopped | Phase::Failed)
        {
            self.reply(id, Err(ThinError::Unavailable));
            return;
        }
        if let Err(error) = self.check_range(&op) {
            self.reply(id, Err(error));
            return;
        }
        if let HostOp::Read {
            offset_bytes,
            len_bytes,
        } = op
            && self.phase == Phase::Ready
        {
            self.start_read(read::Purpose::Host(id), offset_bytes, len_bytes);
            return;
        }
        // Held until start-up is done (reads too), or behind writes waiting for room.
        self.blocked.push_back((id, op));
        self.drain_blocked();
    }

    fn check_range(&self, op: &HostOp) -> Result<(), ThinError> {
        let (offset, len) = match op {
            HostOp::Read {
                offset_bytes,
                len_bytes,
            }
            | HostOp::Trim {
                offset_bytes,
                len_bytes,
            }
            | HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => (*offset_bytes, *len_bytes),
            HostOp::Write {
                offset_bytes, data, ..
            } => (*offset_bytes, data.len() as u64),
            HostOp::Flush => return Ok(()),
        };
        let end = offset.checked_add(len).ok_or(ThinError::OutOfRange)?;
        if offset % SECTOR_BYTES != 0 || len % SECTOR_BYTES != 0 || end > self.config.logical_bytes
        {
            return Err(ThinError::OutOfRange);
        }
        Ok(())
    }

    /// An empty data buffer, one given back earlier if there is one: fill it with a lower
    /// read's data for `lower_done`, so that the data path allocates nothing once warm.
    pub fn spare_buffer(&mut self) -> Vec<u8> {
        self.spare_buffers.take()
    }

    /// Takes back a buffer the store handed out (a read's reply data) or took in (a lower
    /// read's data), for later reads. Large buffers and buffers beyond a few dozen are
    /// dropped, so what is kept stays small.
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        self.spare_buffers.give(buffer);
    }

    /// A lower command finished; reads carry their data.
    pub fn lower_done(&mut self, id: u64, result: Result<Option<Vec<u8>>, ()>) {
        let Some(pending) = self.lower.remove(&id) else {
            panic!("completion of unknown lower command {id}");
        };
        match pending {
            Pending::RecordWrite { seq } => self.record_written(seq, result.is_ok()),
            Pending::Flush => self.flush_done(result.is_ok()),
            // Advisory: whether the group forgot the range or not changes nothing.
            Pending::Trim => {}
            Pending::SlotWrite => self.slot_written(result.is_ok()),
            Pending::SlotRead { slot } => self.slot_read(slot, result),
            Pending::ReplayRead { first_record } => self.replay_read(first_record, result),
            Pending::HostRead { read, group } => self.host_read_done(read, group, result),
            Pending::RepairRead { read, block, copy } => {
                self.repair_read_done(read, block, copy, result)
            }
            Pending::CleanRead { segment } => self.clean_read_done(segment, result),
        }
        self.drain_blocked();
        self.background();
        if !self.blocked.is_empty() {
            // Background work may have freed segments without issuing a command whose
            // completion would come back here.
            self.drain_blocked();
        }
    }

    /// Writes a final checkpoint so the next start need not replay the log; then stops.
    pub fn shutdown(&mut self) {
        match self.phase {
            Phase::Ready => {
                self.phase = Phase::Stopping;
                for (id, _) in std::mem::take(&mut self.blocked) {
                    self.reply(id, Err(ThinError::Unavailable));
                }
                self.background();
            }
            // Commands of the start-up are in flight: it finishes first (a format that never
            // wrote its checkpoint header would leave a drive that cannot start), then the
            // store stops as from `Ready`.
            Phase::Formatting | Phase::Recovering => {
                for (id, _) in std::mem::take(&mut self.blocked) {
                    self.reply(id, Err(ThinError::Unavailable));
                }
                self.stop_when_started = true;
            }
            Phase::Stopping | Phase::Stopped | Phase::Failed => {}
        }
    }

    /// Takes `extent_bytes` of the group's data space instead of the present extent, which it
    /// must start like and not exceed in length: the segments that now fit are added free (and
    /// trimmed), so writes refused for lack of space succeed again. The caller makes the larger
    /// extent durable first: a record in a new segment is found at start-up only if the
    /// configuration there names the larger extent.
    pub fn grow(&mut self, extent_bytes: u64) -> Result<(), String> {
        if self.phase != Phase::Ready {
            return Err("the thin drive is not serving (starting, stopping or failed)".into());
        }
        if extent_bytes < self.layout.extent_bytes {
            return Err(format!(
                "a thin drive's physical space cannot shrink ({} bytes now, {extent_bytes} asked)",
                self.layout.extent_bytes
            ));
        }
        let layout = Layout::new(extent_bytes, self.config.stripe_bytes)?;
        assert_eq!(layout.record_bytes, self.layout.record_bytes);
        assert_eq!(layout.records_per_segment, self.layout.records_per_segment);
        let added: Vec<u64> = (self.layout.segments..layout.segments).collect();
        self.segments
            .resize(layout.segments as usize, Segment::default());
        self.free.extend(added.iter().copied());
        self.layout = layout;
        self.config.extent_bytes = extent_bytes;
        self.trim_free_runs(&added);
        self.drain_blocked();
        self.background();
        Ok(())
    }

    /// Which of `offset_bytes..+len_bytes` holds data: runs of (length, allocated).
    pub fn block_status(&self, offset_bytes: u64, len_bytes: u64) -> Vec<(u64, bool)> {
        let end = offset_bytes
            .saturating_add(len_bytes)
            .min(self.config.logical_bytes);
        let mut runs = Vec::new();
        let mut cursor = offset_bytes;
        while cursor < end {
            let lba = cursor / BLOCK_BYTES;
            let blocks_left = (end - lba * BLOCK_BYTES).div_ceil(BLOCK_BYTES);
            let (mapped, blocks) = self.map.run(lba, blocks_left);
            let run_end = ((lba + blocks) * BLOCK_BYTES).min(end);
            runs.push((run_end - cursor, mapped));
            cursor = run_end;
        }
        runs
    }

    pub fn stats(&self) -> Stats {
        let stored_bytes: u64 = self.segments.iter().map(|s| s.live_bytes).sum();
        let used = self.segments.iter().filter(|s| s.used).count() as u64;
        let segment_bytes = self.layout.segment_bytes();
        let logical_used_bytes = self.map.mapped() * BLOCK_BYTES;
        let member_bytes_written =
            (self.stats.lower_bytes_written as f64 * self.config.member_bytes_per_data_byte) as u64;
        let host = self.stats.host_bytes_written;
        Stats {
            logical_bytes: self.config.logical_bytes,
            physical_bytes: self.layout.data_bytes(),
            logical_used_bytes,
            stored_bytes,
            physical_used_bytes: used * segment_bytes,
            free_bytes: self.free.len() as u64 * segment_bytes,
            host_bytes_written: host,
            lower_bytes_written: self.stats.lower_bytes_written,
            member_bytes_written,
            write_amplification: if host == 0 {
                0.0
            } else {
                member_bytes_written as f64 / host as f64
            },
            compression_ratio: if stored_bytes == 0 {
                1.0
            } else {
                logical_used_bytes as f64 / stored_bytes as f64
            },
            cleaning_bytes: self.stats.cleaning_bytes,
            checksum_errors_detected: self.stats.checksum_errors_detected,
            checksum_errors_repaired: self.stats.checksum_errors_repaired,
            checkpoints: self.stats.checkpoints,
            map_memory_bytes: self.map.memory_bytes(),
            segments: self.layout.segments,
            free_segments: self.free.len() as u64,
        }
    }

    fn reply(&mut self, id: u64, result: Result<Option<Vec<u8>>, ThinError>) {
        self.outputs.push_back(Output::Reply(Reply { id, result }));
    }

    fn event(&mut self, event: ThinEvent) {
        self.outputs.push_back(Output::Event(event));
    }

    fn issue(&mut self, op: LowerOp, pending: Pending) -> u64 {
        let id = self.next_lower_id;
        self.next_lower_id += 1;
        self.lower.insert(id, pending);
        self.outputs
            .push_back(Output::Lower(LowerCommand { id, op }));
        id
    }

    /// Tells the group that the runs of free segments containing `segments` hold nothing.
    fn trim_free_runs(&mut self, segments: &[u64]) {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &segment in segments {
            if !self.free.contains(&segment) || runs.iter().any(|&(s, e)| (s..e).contains(&segment))
            {
                continue;
            }
            let mut start = segment;
            while start > 0 && self.free.contains(&(start - 1)) {
                start -= 1;
            }
            let mut end = segment + 1;
            while self.free.contains(&end) {
                end += 1;
            }
            runs.push((start, end));
        }
        let segment_bytes = self.layout.segment_bytes();
        for (start, end) in runs {
            self.issue(
                LowerOp::Trim {
                    offset_bytes: self.layout.record_offset(self.layout.first_record(start)),
                    len_bytes: (end - start) * segment_bytes,
                },
                Pending::Trim,
            );
        }
    }

    /// The block-aligned sector range a stored block occupies.
    fn covering(location: &Location) -> (u64, u64) {
        let start = location.address_bytes / SECTOR_BYTES * SECTOR_BYTES;
        let end = (location.address_bytes + u64::from(location.stored_len)).div_ceil(SECTOR_BYTES)
            * SECTOR_BYTES;
        (start, end - start)
    }

    fn segment_of_address(&self, address_bytes: u64) -> u64 {
        self.layout.segment_of(self.layout.record_at(address_bytes))
    }

    /// Sets a block's location, keeping segment accounting right.
    fn remap(&mut self, lba: u64, location: Option<Location>) -> Option<Location> {
        if let Some(new) = &location {
            let segment = self.segment_of_address(new.address_bytes);
            self.segments[segment as usize].live_bytes += stored_footprint(new);
        }
        let old = self.map.set(lba, location);
        if let Some(old) = &old {
            let segment = self.segment_of_address(old.address_bytes);
            let killer = match (&self.open, self.phase) {
                (Some(open), Phase::Ready) => Some(open.seq),
                _ => None,
            };
            let entry = &mut self.segments[segment as usize];
            entry.live_bytes = entry
                .live_bytes
                .checked_sub(stored_footprint(old))
                .expect("segment live bytes underflow");
            entry.stuck = false;
            if entry.live_bytes == 0
                && let Some(seq) = killer
            {
                entry.dead_seq = seq;
                self.dying.push_back((seq, segment));
            }
        }
        old
    }

    /// Start-up is done: serve, or stop if asked to meanwhile.
    fn started(&mut self) {
        self.phase = Phase::Ready;
        if self.stop_when_started {
            self.stop_when_started = false;
            self.shutdown();
        }
    }

    /// The group failed under a record write: nothing more can be made durable.
    fn fail(&mut self, reason: &str) {
        if self.phase == Phase::Failed {
            return;
        }
        self.phase = Phase::Failed;
        self.event(ThinEvent::Failed {
            reason: reason.to_string(),
        });
        for (id, _) in std::mem::take(&mut self.blocked) {
            self.reply(id, Err(ThinError::Io));
        }
        for (_, waiter) in std::mem::take(&mut self.waiters) {
            if let Waiter::Host(id) = waiter {
                self.reply(id, Err(ThinError::Io));
            }
        }
    }
}

/// The bytes a stored block takes in its record.
fn stored_footprint(location: &Location) -> u64 {
    u64::from(location.stored_len).div_ceil(crate::format::PAYLOAD_ALIGN)
        * crate::format::PAYLOAD_ALIGN
}
