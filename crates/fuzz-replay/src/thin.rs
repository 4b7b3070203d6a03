//! The thin virtual drive's start-up (`tessera_thin::Store::open`) over a drive group whose
//! bytes may be damaged or hostile: its checkpoint headers and the log of records rebuilt into
//! the block map, then host reads and writes, an orderly shutdown and a second start-up over
//! what the first store left.
//!
//! Each input mutates a valid image, one that a real store wrote (formatted over stale bytes,
//! blocks written, overwritten in part, trimmed, flushed, a final checkpoint at shutdown and,
//! in one kind, a log written after it over several segments), so the fuzzer explores
//! near-valid logs rather than bytes that fail the first magic check. Input layout (short
//! inputs read as zeroes past their end):
//!
//! | bytes | meaning |
//! |---|---|
//! | 1 | bits 0-1: geometry (4, 2 or 1 records a segment); bit 2: the image ends with a log to replay after its checkpoint; bits 3-4: compression of new writes; bits 5-6: redundant copies a bad block can be read around (0-2) |
//! | 1 | sealing after the patches: bit 0, checkpoint header and record header CRC32Cs made valid again; bit 1, data records' block checksums too |
//! | 1 | the number of the lower command answered with an I/O error (0: none) |
//! | 1 | the host writes made once the store is ready (seed of their places, sizes and data) |
//! | rest | patches, each: region (1: slot 0, slot 1, or a record, modulo their count; top bit set: the offset counts from the region's end), offset (2, little-endian, modulo the region's size), length (1), that many bytes |
//!
//! The lower device answers every command from the image (reads around a bad block from the
//! unpatched image with the store's own writes applied, as redundancy would); every phase
//! runs with a bounded number of steps. Checked besides "no panic": start-up ends (ready or
//! failed) within the bound; an unpatched image recovers to exactly what was written; blocks
//! the store reports as holes read as zeroes; whatever a read returned is never later
//! returned different; blocks written after start-up read back as written; a store that shut
//! down cleanly starts again with the same block map and data.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use tessera_thin::format::{
    CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, ENTRY_BYTES, RECORD_HEADER_BYTES, RECORD_MAGIC,
};
use tessera_thin::layout::Layout;
use tessera_thin::{
    BLOCK_BYTES, Compression, Config, HostOp, LowerCommand, LowerOp, Output, SECTOR_BYTES, Store,
    ThinError,
};

const STORE_ID: u64 = 0x7e55_e7a0_0000_7417;
/// The size the host sees: small, so whole-drive reads are cheap.
const LOGICAL_BYTES: u64 = 2 << 20;
const BLOCKS: u64 = LOGICAL_BYTES / BLOCK_BYTES;
const BLOCK: usize = BLOCK_BYTES as usize;
const SECTOR: usize = SECTOR_BYTES as usize;
/// Stripes of the geometries: records of 256 KiB (4 a segment), 384 KiB (2) and 516 KiB (1).
const STRIPES: [u64; 3] = [256 << 10, 192 << 10, 516 << 10];
/// Segments of each geometry: enough that the images' writes need no cleaning.
const SEGMENTS: [u64; 3] = [12, 16, 24];
/// Bytes at the extent's end that no segment covers (extents are not whole segments).
const SLACK_BYTES: u64 = 40 << 10;
/// What recovery reads of a checkpoint slot: the part a patch lands in.
const SLOT_BYTES: u64 = 4096;
const HEADER_BYTES: usize = 4;
/// Commands answered and outputs taken per phase, at most; every phase must end within it.
const STEPS_MAX: usize = 20_000;
/// Host writes made once the store is ready, at most.
const WRITES_MAX: u64 = 8;
/// Blocks of one read of the first pass.
const READ_BLOCKS: u64 = 16;

/// The `thin_log_replay` target.
pub fn log_replay(data: &[u8]) {
    let byte = |at: usize| data.get(at).copied().unwrap_or(0);
    let (image_knobs, seal, fail_at, workload) = (byte(0), byte(1), byte(2), byte(3));
    let geometry = usize::from(image_knobs & 3) % STRIPES.len();
    let with_log = image_knobs & 4 != 0;
    let compression = [
        Compression::Lz4,
        Compression::Zstd,
        Compression::None,
        Compression::Lz4,
    ][usize::from(image_knobs >> 3) & 3];
    let repair_sources = ((image_knobs >> 5) & 3).min(2);
    let base = base(geometry, with_log);
    let config = Config {
        compression,
        repair_sources,
        session_id: 3,
        ..base.config.clone()
    };
    let mut image = Image::new(&base.image);
    let patched = apply_patches(
        &mut image,
        &base.layout,
        data.get(HEADER_BYTES..).unwrap_or(&[]),
        seal,
    );
    let mut lower = Lower::new(image, &base.image, u32::from(fail_at));
    let mut store = Store::open(config.clone()).expect("the fuzz configuration is valid");
    assert!(
        settle(&mut store, &mut lower, &mut HashMap::new()),
        "start-up did not end within {STEPS_MAX} steps"
    );
    if !store.is_ready() {
        assert!(store.is_failed(), "start-up ended neither ready nor failed");
        assert!(patched || lower.faulted, "a valid image did not recover");
        return;
    }
    let mut view = View::new();
    view.first_pass(&mut store, &mut lower);
    if !patched && !lower.faulted {
        assert!(
            view.known.iter().all(|&known| known == Known::Read),
            "a valid image has unreadable blocks"
        );
        for lba in 0..BLOCKS {
            let at = (lba * BLOCK_BYTES) as usize;
            assert!(
                view.contents[at..at + BLOCK] == base.contents[at..at + BLOCK],
                "block {lba} of a valid image does not read as written"
            );
        }
    }
    view.write(&mut store, &mut lower, workload);
    view.check(&mut store, &mut lower, "after writes");
    let map = store.block_status(0, LOGICAL_BYTES);
    store.shutdown();
    assert!(
        settle(&mut store, &mut lower, &mut HashMap::new()),
        "shutdown did not end within {STEPS_MAX} steps"
    );
    assert!(store.is_stopped(), "shutdown did not stop the store");
    if lower.faulted || store.is_failed() {
        return;
    }
    // What a clean shutdown left must start again as it was.
    lower.commands = 0;
    lower.fail_at = 0;
    let config = Config {
        session_id: 4,
        ..config
    };
    let mut store = Store::open(config).expect("the fuzz configuration is valid");
    assert!(
        settle(&mut store, &mut lower, &mut HashMap::new()),
        "the second start-up did not end within {STEPS_MAX} steps"
    );
    assert!(
        store.is_ready(),
        "a store that shut down cleanly does not start again"
    );
    assert_eq!(
        store.block_status(0, LOGICAL_BYTES),
        map,
        "the block map changed across a clean shutdown"
    );
    view.check(&mut store, &mut lower, "after a clean shutdown");
}

/// The valid image an input's first byte chooses (geometry 0-2, with a log to replay after
/// its checkpoint or not) and the configuration of the store that wrote it, as the target
/// builds them.
pub fn valid_image(geometry: usize, with_log: bool) -> (Config, &'static [u8]) {
    let base = base(geometry % STRIPES.len(), with_log);
    (base.config.clone(), &base.image)
}

/// A store's image of the group: geometry, bytes, and what its host wrote.
struct Base {
    config: Config,
    layout: Layout,
    image: Vec<u8>,
    /// The logical contents the host wrote.
    contents: Vec<u8>,
}

/// The valid images, built once per process: geometry × (clean shutdown, log to replay).
fn base(geometry: usize, with_log: bool) -> &'static Base {
    static BASES: [OnceLock<Base>; 2 * STRIPES.len()] = [const { OnceLock::new() }; 6];
    BASES[geometry * 2 + usize::from(with_log)].get_or_init(|| build_base(geometry, with_log))
}

/// Runs real stores over stale bytes: formats, writes (aligned and partial blocks, zeroes,
/// overwrites), trims and flushes, shuts down; with `with_log`, starts again and writes a log
/// of several records after that checkpoint, flushed but not shut down.
fn build_base(geometry: usize, with_log: bool) -> Base {
    let stripe_bytes = STRIPES[geometry];
    let layout = Layout::new(1 << 30, stripe_bytes).expect("a valid stripe");
    let extent_bytes =
        2 * layout.record_bytes + SEGMENTS[geometry] * layout.segment_bytes() + SLACK_BYTES;
    let config = Config {
        store_id: STORE_ID,
        logical_bytes: LOGICAL_BYTES,
        extent_bytes,
        stripe_bytes,
        compression: [Compression::Lz4, Compression::Zstd, Compression::None][geometry],
        repair_sources: 1,
        member_bytes_per_data_byte: 1.5,
        low_space_percent: 10,
        session_id: 1,
    };
    let layout = Layout::new(extent_bytes, stripe_bytes).expect("a valid extent");
    let stale = vec![0xee; extent_bytes as usize];
    let mut lower = Lower::new(Image::new(&stale), &stale, 0);
    let mut view = View::new();
    let mut store = Store::create(config.clone()).expect("a valid configuration");
    let mut replies = HashMap::new();
    assert!(settle(&mut store, &mut lower, &mut replies) && store.is_ready());
    let mut rng = Rng(0x5eed ^ geometry as u64);
    for round in 0..24u64 {
        let op = workload_op(&mut rng, round);
        view.submit_write(&mut store, &mut lower, op);
        if round % 6 == 5 {
            view.flush(&mut store, &mut lower);
        }
    }
    view.submit_write(
        &mut store,
        &mut lower,
        HostOp::Trim {
            offset_bytes: 8 * BLOCK_BYTES,
            len_bytes: 24 * BLOCK_BYTES,
        },
    );
    view.flush(&mut store, &mut lower);
    store.shutdown();
    assert!(settle(&mut store, &mut lower, &mut replies) && store.is_stopped());
    if with_log {
        let image = lower.image.to_vec();
        let mut reopened = Lower::new(Image::new(&image), &image, 0);
        let second = Config {
            session_id: 2,
            ..config.clone()
        };
        let mut store = Store::open(second).expect("a valid configuration");
        assert!(settle(&mut store, &mut reopened, &mut replies) && store.is_ready());
        for round in 0..12u64 {
            let op = workload_op(&mut rng, round + 100);
            view.submit_write(&mut store, &mut reopened, op);
            if round % 2 == 1 {
                view.flush(&mut store, &mut reopened);
            }
        }
        let image = reopened.image.to_vec();
        assert!(
            view.known.iter().all(|&known| known == Known::New),
            "every write of the base image succeeded"
        );
        return Base {
            config,
            layout,
            image,
            contents: view.contents,
        };
    }
    assert!(
        view.known.iter().all(|&known| known == Known::New),
        "every write of the base image succeeded"
    );
    Base {
        config,
        layout,
        image: lower.image.to_vec(),
        contents: view.contents,
    }
}

/// One host write of the workloads: places, sizes and data from `rng`.
fn workload_op(rng: &mut Rng, round: u64) -> HostOp {
    let lba = rng.below(BLOCKS - 4);
    let blocks = 1 + rng.below(4);
    let offset_bytes = lba * BLOCK_BYTES;
    let len_bytes = blocks * BLOCK_BYTES;
    let data = |rng: &mut Rng, len: u64| -> Vec<u8> {
        match rng.below(3) {
            // Compresses well.
            0 => (0..len).map(|i| (i / 64 + round) as u8).collect(),
            // Does not compress.
            1 => (0..len).map(|_| rng.next() as u8).collect(),
            // Compresses a little.
            _ => (0..len)
                .map(|i| if i % 3 == 0 { rng.next() as u8 } else { 0 })
                .collect(),
        }
    };
    match rng.below(8) {
        0 => HostOp::WriteZeroes {
            offset_bytes,
            len_bytes,
            fua: false,
        },
        1 => {
            // Sectors inside a block and across into the next.
            let offset_bytes = offset_bytes + rng.below(8) * SECTOR_BYTES;
            let len_bytes = (1 + rng.below(10)) * SECTOR_BYTES;
            HostOp::Write {
                offset_bytes,
                data: data(rng, len_bytes),
                fua: rng.below(2) == 0,
            }
        }
        2 => HostOp::Write {
            offset_bytes,
            data: vec![0; len_bytes as usize],
            fua: false,
        },
        _ => HostOp::Write {
            offset_bytes,
            data: data(rng, len_bytes),
            fua: false,
        },
    }
}

/// Lays the patches over the image; returns whether there were any. With `seal`, headers
/// (and block checksums) the patches touched are made valid again.
fn apply_patches(image: &mut Image<'_>, layout: &Layout, mut rest: &[u8], seal: u8) -> bool {
    let regions = 2 + layout.records();
    let mut touched = Vec::new();
    let mut patched = false;
    while rest.len() >= 4 {
        let region = u64::from(rest[0] & 0x7f) % regions;
        let from_end = rest[0] & 0x80 != 0;
        let offset = u64::from(u16::from_le_bytes([rest[1], rest[2]]));
        let len = usize::from(rest[3]).min(rest.len() - 4);
        let bytes = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let (start, size) = region_span(layout, region);
        let size = if region < 2 { SLOT_BYTES } else { size };
        let within = offset % size;
        let at = if from_end { size - 1 - within } else { within };
        let len = len.min((size - at) as usize);
        image.write(start + at, &bytes[..len]);
        patched |= len > 0;
        if !touched.contains(&region) {
            touched.push(region);
        }
    }
    if seal & 3 != 0 {
        for region in touched {
            let (start, size) = region_span(layout, region);
            let mut bytes = image.bytes_mut(start, size);
            if region < 2 {
                seal_checkpoint_header(&mut bytes);
            } else {
                seal_record(&mut bytes, seal & 2 != 0);
            }
        }
    }
    patched
}

/// Where region `region` is: checkpoint slot 0 or 1, then the records.
fn region_span(layout: &Layout, region: u64) -> (u64, u64) {
    let offset = if region < 2 {
        layout.slot_offset(region)
    } else {
        layout.record_offset(region - 2)
    };
    (offset, layout.record_bytes)
}

fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// A checkpoint header's CRC32C made valid (it covers bytes 0..76 and sits at 76..80).
fn seal_checkpoint_header(slot: &mut [u8]) {
    if slot[..8] != CHECKPOINT_MAGIC {
        return;
    }
    let crc = crc32c::crc32c(&slot[..CHECKPOINT_HEADER_BYTES - 4]);
    slot[CHECKPOINT_HEADER_BYTES - 4..CHECKPOINT_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
}

/// A record's header CRC32C made valid (over the header and entries with its field at 56..60
/// zeroed); with `blocks`, the checksums of a data record's stored blocks (entry bytes 16..20,
/// over the stored bytes the entry names) first.
fn seal_record(record: &mut [u8], blocks: bool) {
    if record[..8] != RECORD_MAGIC {
        return;
    }
    let count = le32(record, 44) as usize;
    let entries = count.min((record.len() - RECORD_HEADER_BYTES) / ENTRY_BYTES);
    let len = RECORD_HEADER_BYTES + entries * ENTRY_BYTES;
    if blocks && record[48] == 1 {
        for entry in 0..entries {
            let at = RECORD_HEADER_BYTES + entry * ENTRY_BYTES;
            if record[at + 15] != 1 {
                continue;
            }
            let offset = le32(record, at + 8) as usize;
            let stored = usize::from(u16::from_le_bytes([record[at + 12], record[at + 13]]));
            if let Some(bytes) = record.get(offset..offset + stored) {
                let crc = crc32c::crc32c(bytes);
                record[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
            }
        }
    }
    record[56..60].fill(0);
    let crc = crc32c::crc32c(&record[..len]);
    record[56..60].copy_from_slice(&crc.to_le_bytes());
}

/// A copy-on-write image over a base: only the chunks written are copied.
struct Image<'a> {
    base: &'a [u8],
    chunks: Vec<Option<Box<[u8]>>>,
}

const CHUNK_BYTES: usize = 64 << 10;

impl<'a> Image<'a> {
    fn new(base: &'a [u8]) -> Image<'a> {
        Image {
            base,
            chunks: vec![None; base.len().div_ceil(CHUNK_BYTES)],
        }
    }

    fn len(&self) -> u64 {
        self.base.len() as u64
    }

    fn chunk(&self, index: usize) -> &[u8] {
        match &self.chunks[index] {
            Some(chunk) => chunk,
            None => {
                let start = index * CHUNK_BYTES;
                &self.base[start..(start + CHUNK_BYTES).min(self.base.len())]
            }
        }
    }

    fn chunk_mut(&mut self, index: usize) -> &mut [u8] {
        let start = index * CHUNK_BYTES;
        let base = &self.base[start..(start + CHUNK_BYTES).min(self.base.len())];
        self.chunks[index].get_or_insert_with(|| base.into())
    }

    fn read(&self, offset: u64, len: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len as usize);
        let mut at = offset as usize;
        let end = (offset + len) as usize;
        while at < end {
            let chunk = self.chunk(at / CHUNK_BYTES);
            let within = at % CHUNK_BYTES;
            let take = (chunk.len() - within).min(end - at);
            out.extend_from_slice(&chunk[within..within + take]);
            at += take;
        }
        out
    }

    fn write(&mut self, offset: u64, bytes: &[u8]) {
        let mut at = offset as usize;
        let mut rest = bytes;
        while !rest.is_empty() {
            let within = at % CHUNK_BYTES;
            let chunk = self.chunk_mut(at / CHUNK_BYTES);
            let take = (chunk.len() - within).min(rest.len());
            chunk[within..within + take].copy_from_slice(&rest[..take]);
            at += take;
            rest = &rest[take..];
        }
    }

    /// `len` bytes at `offset`, copied back when `f` is done with them.
    fn bytes_mut(&mut self, offset: u64, len: u64) -> ImageSlice<'_, 'a> {
        let bytes = self.read(offset, len);
        ImageSlice {
            image: self,
            offset,
            bytes,
        }
    }

    fn to_vec(&self) -> Vec<u8> {
        self.read(0, self.len())
    }
}

/// A range of an image being changed in place; written back when dropped.
struct ImageSlice<'i, 'a> {
    image: &'i mut Image<'a>,
    offset: u64,
    bytes: Vec<u8>,
}

impl std::ops::Deref for ImageSlice<'_, '_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::ops::DerefMut for ImageSlice<'_, '_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for ImageSlice<'_, '_> {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        self.image.write(self.offset, &bytes);
    }
}

/// The drive group under the store: answers every command from the image at once.
struct Lower<'a> {
    image: Image<'a>,
    /// What redundancy reconstructs: the unpatched image with the store's own writes.
    redundant: &'a [u8],
    writes: Vec<(u64, Arc<Vec<u8>>)>,
    commands: u32,
    /// The command answered with an I/O error (counted from 1; 0: none).
    fail_at: u32,
    faulted: bool,
    now_us: u64,
}

impl<'a> Lower<'a> {
    fn new(image: Image<'a>, redundant: &'a [u8], fail_at: u32) -> Lower<'a> {
        Lower {
            image,
            redundant,
            writes: Vec::new(),
            commands: 0,
            fail_at,
            faulted: false,
            now_us: 0,
        }
    }

    fn carry_out(&mut self, command: &LowerCommand) -> Result<Option<Vec<u8>>, ()> {
        let (offset, len) = match &command.op {
            LowerOp::Read {
                offset_bytes,
                len_bytes,
            }
            | LowerOp::ReadAround {
                offset_bytes,
                len_bytes,
                ..
            }
            | LowerOp::Trim {
                offset_bytes,
                len_bytes,
            } => (*offset_bytes, *len_bytes),
            LowerOp::Write { offset_bytes, data } => (*offset_bytes, data.len() as u64),
            LowerOp::Flush => (0, 0),
        };
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.image.len()),
            "a lower command beyond the extent: {:?}",
            command.op
        );
        self.commands += 1;
        if self.commands == self.fail_at {
            self.faulted = true;
            return Err(());
        }
        Ok(match &command.op {
            LowerOp::Read { .. } => Some(self.image.read(offset, len)),
            LowerOp::ReadAround { .. } => {
                let range = offset as usize..(offset + len) as usize;
                let mut bytes = self.redundant[range].to_vec();
                for (at, data) in &self.writes {
                    let start = offset.max(*at);
                    let end = (offset + len).min(at + data.len() as u64);
                    if start < end {
                        bytes[(start - offset) as usize..(end - offset) as usize]
                            .copy_from_slice(&data[(start - at) as usize..(end - at) as usize]);
                    }
                }
                Some(bytes)
            }
            LowerOp::Write { data, .. } => {
                self.image.write(offset, data);
                self.writes.push((offset, Arc::clone(data)));
                None
            }
            // A trimmed range reads back as it was (the group may keep it).
            LowerOp::Trim { .. } | LowerOp::Flush => None,
        })
    }
}

/// Carries out the store's commands and collects its replies until it has nothing left to
/// do; `false` if that took more than `STEPS_MAX` steps.
fn settle(
    store: &mut Store,
    lower: &mut Lower<'_>,
    replies: &mut HashMap<u64, Result<Option<Vec<u8>>, ThinError>>,
) -> bool {
    for _ in 0..STEPS_MAX {
        match store.poll() {
            Some(Output::Lower(command)) => {
                let result = lower.carry_out(&command);
                store.lower_done(command.id, result);
            }
            Some(Output::Reply(reply)) => {
                replies.insert(reply.id, reply.result);
            }
            Some(Output::Event(_)) => {}
            None => match store.next_deadline_us() {
                Some(deadline) => {
                    lower.now_us = lower.now_us.max(deadline);
                    store.tick(lower.now_us);
                }
                None => return true,
            },
        }
    }
    false
}

/// What each sector should read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Nothing (a read failed, or a write that failed may have applied).
    Unknown,
    /// As a read returned it: it may become unreadable, never different.
    Read,
    /// As written since the start: it must read back so.
    New,
}

/// What the host knows of the drive.
struct View {
    contents: Vec<u8>,
    known: Vec<Known>,
    next_id: u64,
}

impl View {
    fn new() -> View {
        let sectors = (LOGICAL_BYTES / SECTOR_BYTES) as usize;
        View {
            contents: vec![0; LOGICAL_BYTES as usize],
            known: vec![Known::New; sectors],
            next_id: 1,
        }
    }

    fn request(&mut self, store: &mut Store, lower: &mut Lower<'_>, op: HostOp) -> Reply {
        let id = self.next_id;
        self.next_id += 1;
        store.submit(id, op);
        let mut replies = HashMap::new();
        assert!(
            settle(store, lower, &mut replies),
            "a host request did not finish within {STEPS_MAX} steps"
        );
        replies
            .remove(&id)
            .unwrap_or_else(|| panic!("request {id} got no reply"))
    }

    /// Reads the whole drive in pieces (block by block where a piece fails) and takes what it
    /// reads as known. Holes must read as zeroes.
    fn first_pass(&mut self, store: &mut Store, lower: &mut Lower<'_>) {
        self.known.fill(Known::Unknown);
        for first in (0..BLOCKS).step_by(READ_BLOCKS as usize) {
            let offset_bytes = first * BLOCK_BYTES;
            let len_bytes = READ_BLOCKS * BLOCK_BYTES;
            match self.read(store, lower, offset_bytes, len_bytes) {
                Some(data) => self.learn(offset_bytes, &data),
                None => {
                    for lba in first..first + READ_BLOCKS {
                        if let Some(data) = self.read(store, lower, lba * BLOCK_BYTES, BLOCK_BYTES)
                        {
                            self.learn(lba * BLOCK_BYTES, &data);
                        }
                    }
                }
            }
        }
        self.check_holes(store);
    }

    fn learn(&mut self, offset_bytes: u64, data: &[u8]) {
        let at = offset_bytes as usize;
        self.contents[at..at + data.len()].copy_from_slice(data);
        let sector = at / SECTOR;
        self.known[sector..sector + data.len() / SECTOR].fill(Known::Read);
    }

    /// A read's data (`None`: it failed with an I/O error, which damage may cause).
    fn read(
        &mut self,
        store: &mut Store,
        lower: &mut Lower<'_>,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<Vec<u8>> {
        match self.request(
            store,
            lower,
            HostOp::Read {
                offset_bytes,
                len_bytes,
            },
        ) {
            Ok(Some(data)) => {
                assert_eq!(
                    data.len() as u64,
                    len_bytes,
                    "a read of {len_bytes} bytes at {offset_bytes} returned {}",
                    data.len()
                );
                Some(data)
            }
            Err(ThinError::Io) => None,
            Err(ThinError::Unavailable) if store.is_failed() => None,
            other => panic!("a read of {len_bytes} bytes at {offset_bytes}: {other:?}"),
        }
    }

    /// Blocks the map says are holes read as zeroes: whatever is known of them is zero.
    fn check_holes(&self, store: &Store) {
        let mut offset = 0;
        for (len, allocated) in store.block_status(0, LOGICAL_BYTES) {
            let range = offset as usize..(offset + len) as usize;
            if !allocated {
                for at in range.clone().step_by(SECTOR) {
                    assert!(
                        self.known[at / SECTOR] == Known::Unknown
                            || self.contents[at..at + SECTOR] == [0; SECTOR],
                        "a hole at {range:?} does not read as zeroes"
                    );
                }
            }
            offset += len;
        }
        assert_eq!(offset, LOGICAL_BYTES, "block status covers the drive");
    }

    /// A few host writes chosen by `seed`, then a flush.
    fn write(&mut self, store: &mut Store, lower: &mut Lower<'_>, seed: u8) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(seed));
        for round in 0..u64::from(seed) % (WRITES_MAX + 1) {
            let op = workload_op(&mut rng, round);
            self.submit_write(store, lower, op);
        }
        self.flush(store, lower);
    }

    /// A write, zeroing or trim; what it changes becomes known if it succeeds, unknown if not.
    fn submit_write(&mut self, store: &mut Store, lower: &mut Lower<'_>, op: HostOp) {
        let (offset, len, data) = match &op {
            HostOp::Write {
                offset_bytes, data, ..
            } => (*offset_bytes, data.len() as u64, Some(data.clone())),
            HostOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => (*offset_bytes, *len_bytes, None),
            HostOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                // Whole blocks become holes; partial ones are left alone.
                let first = offset_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
                let end = (offset_bytes + len_bytes) / BLOCK_BYTES * BLOCK_BYTES;
                (first, end.saturating_sub(first), None)
            }
            _ => unreachable!("only writes"),
        };
        let result = self.request(store, lower, op);
        let range = offset as usize..(offset + len) as usize;
        let sectors = range.start / SECTOR..range.end / SECTOR;
        match result {
            Ok(_) => {
                match data {
                    Some(data) => self.contents[range].copy_from_slice(&data),
                    None => self.contents[range].fill(0),
                }
                self.known[sectors].fill(Known::New);
            }
            Err(_) => self.known[sectors].fill(Known::Unknown),
        }
    }

    fn flush(&mut self, store: &mut Store, lower: &mut Lower<'_>) {
        let _ = self.request(store, lower, HostOp::Flush);
    }

    /// Reads every block (pieces of `READ_BLOCKS`, block by block where a piece fails): what
    /// was written since the start reads back so, what was read before reads the same or
    /// fails, holes read as zeroes.
    fn check(&mut self, store: &mut Store, lower: &mut Lower<'_>, when: &str) {
        for first in (0..BLOCKS).step_by(READ_BLOCKS as usize) {
            let offset = first * BLOCK_BYTES;
            if let Some(data) = self.read(store, lower, offset, READ_BLOCKS * BLOCK_BYTES) {
                for (i, block) in data.chunks_exact(BLOCK).enumerate() {
                    self.check_block(first + i as u64, Some(block), lower.faulted, when);
                }
                continue;
            }
            for lba in first..first + READ_BLOCKS {
                let data = self.read(store, lower, lba * BLOCK_BYTES, BLOCK_BYTES);
                self.check_block(lba, data.as_deref(), lower.faulted, when);
            }
        }
        self.check_holes(store);
    }

    /// One block's read against what is known of it; a failed read makes what was only read
    /// before unknown.
    fn check_block(&mut self, lba: u64, data: Option<&[u8]>, faulted: bool, when: &str) {
        let offset = (lba * BLOCK_BYTES) as usize;
        for sector in 0..BLOCK / SECTOR {
            let at = offset + sector * SECTOR;
            let known = self.known[at / SECTOR];
            let expected = &self.contents[at..at + SECTOR];
            match (data, known) {
                (_, Known::Unknown) => {}
                (None, Known::Read) => {}
                (None, Known::New) if faulted => {}
                (None, Known::New) => {
                    panic!("{when}: block {lba}, written since the start, cannot be read")
                }
                (Some(data), _) => assert!(
                    &data[sector * SECTOR..][..SECTOR] == expected,
                    "{when}: sector {sector} of block {lba} ({known:?}) reads differently"
                ),
            }
        }
        if data.is_none() {
            for known in &mut self.known[offset / SECTOR..(offset + BLOCK) / SECTOR] {
                if *known == Known::Read {
                    *known = Known::Unknown;
                }
            }
        }
    }
}

type Reply = Result<Option<Vec<u8>>, ThinError>;

/// xorshift64*: the workloads' choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.max(1);
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}
