//! Reads: map lookups, stored blocks read from the group (or from records still in memory),
//! every block checked against its checksum, and repair from the group's redundancy.

use super::{Pending, Store, ThinError, ThinEvent};
use crate::format::Location;
use crate::store::LowerOp;
use crate::{BLOCK_BYTES, codec};

const BLOCK: usize = BLOCK_BYTES as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    Host(u64),
    /// The first or last block of a partial-block write.
    MergeHead,
    MergeTail,
    /// Cleaning met a block that fails its checksum: repair (and so move) it.
    Repair,
    /// A scrub's check of live blocks.
    Scrub,
}

pub(super) struct ReadState {
    purpose: Purpose,
    offset_bytes: u64,
    len_bytes: u64,
    first_lba: u64,
    /// Whole blocks.
    out: Vec<u8>,
    lists: ReadLists,
    pending: u32,
    failed: bool,
}

/// The lists of one read, kept with their capacity for the next read once it finishes
/// (`Store::spare_read_lists`), so that reading allocates nothing once the store is warm.
#[derive(Default)]
pub(super) struct ReadLists {
    /// Blocks read from the group: (lba, location, index into `groups`).
    blocks: Vec<(u64, Location, usize)>,
    /// Lower reads, one per record holding blocks of the read: (record, start, end) of the
    /// bytes read.
    groups: Vec<(u64, u64, u64)>,
}

/// Most read lists kept for reuse.
const SPARE_READ_LISTS_MAX: usize = 256;

impl Store {
    pub(super) fn start_read(&mut self, purpose: Purpose, offset_bytes: u64, len_bytes: u64) {
        if len_bytes == 0 {
            self.read_finished(purpose, Ok(Vec::new()));
            return;
        }
        let first_lba = offset_bytes / BLOCK_BYTES;
        let end_lba = (offset_bytes + len_bytes).div_ceil(BLOCK_BYTES);
        let mut lists = self.spare_read_lists.pop().unwrap_or_default();
        let mut out = self.spare_buffer();
        out.resize(((end_lba - first_lba) * BLOCK_BYTES) as usize, 0);
        // Blocks of one record are read with one lower read.
        for lba in first_lba..end_lba {
            let Some(location) = self.map.get(lba) else {
                continue;
            };
            let record = self.layout.record_at(location.address_bytes);
            let at = ((lba - first_lba) * BLOCK_BYTES) as usize;
            if let Some(bytes) = self.resident_bytes(record) {
                let within = (location.address_bytes - self.layout.record_offset(record)) as usize;
                let stored = &bytes[within..within + location.stored_len as usize];
                codec::decompress(location.codec, stored, &mut out[at..at + BLOCK])
                    .expect("blocks in memory are intact");
                continue;
            }
            let (start, len) = Self::covering(&location);
            let group = match lists.groups.iter().position(|&(r, _, _)| r == record) {
                Some(group) => {
                    let (_, first, end) = &mut lists.groups[group];
                    *first = (*first).min(start);
                    *end = (*end).max(start + len);
                    group
                }
                None => {
                    lists.groups.push((record, start, start + len));
                    lists.groups.len() - 1
                }
            };
            lists.blocks.push((lba, location, group));
        }
        let read = self.next_read;
        self.next_read += 1;
        let reads = lists.groups.len();
        for group in 0..reads {
            let (_, start, end) = lists.groups[group];
            self.read_lower(start, end - start, super::Pending::HostRead { read, group });
        }
        let state = ReadState {
            purpose,
            offset_bytes,
            len_bytes,
            first_lba,
            out,
            lists,
            pending: reads as u32,
            failed: false,
        };
        if state.pending == 0 {
            self.finish_read(state);
        } else {
            self.reads.insert(read, state);
        }
    }

    /// Issues a lower read, keeping its segment from reuse until it completes.
    fn read_lower(&mut self, offset_bytes: u64, len_bytes: u64, pending: Pending) {
        let segment = self.segment_of_address(offset_bytes);
        self.segments[segment as usize].readers += 1;
        self.issue(
            LowerOp::Read {
                offset_bytes,
                len_bytes,
            },
            pending,
        );
    }

    fn release_reader(&mut self, offset_bytes: u64) {
        let segment = self.segment_of_address(offset_bytes);
        self.segments[segment as usize].readers -= 1;
    }

    /// Checks and expands one stored block into the read's output.
    fn accept_block(state: &mut ReadState, index: usize, stored: &[u8]) -> bool {
        let (lba, location, _) = state.lists.blocks[index];
        if stored.len() != location.stored_len as usize
            || codec::checksum(stored) != location.checksum
        {
            return false;
        }
        let at = ((lba - state.first_lba) * BLOCK_BYTES) as usize;
        codec::decompress(location.codec, stored, &mut state.out[at..at + BLOCK]).is_ok()
    }

    pub(super) fn host_read_done(
        &mut self,
        read: u64,
        group: usize,
        result: Result<Option<Vec<u8>>, ()>,
    ) {
        let mut state = self.reads.remove(&read).expect("read in flight");
        let (_, offset, _) = state.lists.groups[group];
        self.release_reader(offset);
        state.pending -= 1;
        match result {
            Ok(Some(data)) => {
                for index in 0..state.lists.blocks.len() {
                    let (_, location, of_group) = state.lists.blocks[index];
                    if of_group != group {
                        continue;
                    }
                    let within = (location.address_bytes - offset) as usize;
                    let stored = data.get(within..within + location.stored_len as usize);
                    if stored.is_some_and(|stored| Self::accept_block(&mut state, index, stored)) {
                        continue;
                    }
                    self.stats.checksum_errors_detected += 1;
                    self.repair_block(read, &mut state, index, 0);
                }
                self.recycle(data);
            }
            _ => state.failed = true,
        }
        self.read_progress(read, state);
    }

    /// Reads a block that failed its checksum around copy `copy` of it.
    fn repair_block(&mut self, read: u64, state: &mut ReadState, index: usize, copy: u8) {
        let (lba, location, _) = state.lists.blocks[index];
        if copy >= self.config.repair_sources {
            state.failed = true;
            self.lost.insert(location);
            self.event(ThinEvent::ChecksumUnrepairable { lba });
            return;
        }
        let (offset_bytes, len_bytes) = Self::covering(&location);
        let segment = self.segment_of_address(offset_bytes);
        self.segments[segment as usize].readers += 1;
        state.pending += 1;
        self.issue(
            LowerOp::ReadAround {
                offset_bytes,
                len_bytes,
                copy,
            },
            Pending::RepairRead {
                read,
                block: index,
                copy,
            },
        );
    }

    pub(super) fn repair_read_done(
        &mut self,
        read: u64,
        index: usize,
        copy: u8,
        result: Result<Option<Vec<u8>>, ()>,
    ) {
        let mut state = self.reads.remove(&read).expect("read in flight");
        let (lba, location, _) = state.lists.blocks[index];
        let (offset, _) = Self::covering(&location);
        self.release_reader(offset);
        state.pending -= 1;
        let within = (location.address_bytes - offset) as usize;
        let good = match &result {
            Ok(Some(data)) => data
                .get(within..within + location.stored_len as usize)
                .filter(|stored| Self::accept_block(&mut state, index, stored))
                .map(<[u8]>::to_vec),
            _ => None,
        };
        match good {
            Some(stored) => {
                self.stats.checksum_errors_repaired += 1;
                self.event(ThinEvent::ChecksumRepaired { lba });
                // The good bytes go to the head of the log; the bad copy is left to be
                // cleaned (its stripe's parity is made consistent by the group's scrub).
                if self.map.get(lba) == Some(location)
                    && let Some(moved) =
                        self.append_block(lba, location.codec, &stored, location.checksum)
                {
                    self.remap(lba, Some(moved));
                }
            }
            None => self.repair_block(read, &mut state, index, copy + 1),
        }
        self.read_progress(read, state);
    }

    fn read_progress(&mut self, read: u64, state: ReadState) {
        if state.pending == 0 {
            self.finish_read(state);
        } else {
            self.reads.insert(read, state);
        }
    }

    fn finish_read(&mut self, state: ReadState) {
        let ReadState {
            purpose,
            offset_bytes,
            len_bytes,
            first_lba,
            mut out,
            mut lists,
            failed,
            ..
        } = state;
        lists.blocks.clear();
        lists.groups.clear();
        if self.spare_read_lists.len() < SPARE_READ_LISTS_MAX {
            self.spare_read_lists.push(lists);
        }
        let result = if failed {
            self.recycle(out);
            Err(ThinError::Io)
        } else {
            // The whole blocks read become the asked range in place.
            let within = (offset_bytes - first_lba * BLOCK_BYTES) as usize;
            out.copy_within(within..within + len_bytes as usize, 0);
            out.truncate(len_bytes as usize);
            Ok(out)
        };
        self.read_finished(purpose, result);
    }

    fn read_finished(&mut self, purpose: Purpose, result: Result<Vec<u8>, ThinError>) {
        match purpose {
            Purpose::Host(id) => self.reply(id, result.map(Some)),
            Purpose::MergeHead => self.merge_read_done(true, result),
            Purpose::MergeTail => self.merge_read_done(false, result),
            Purpose::Repair => {}
            Purpose::Scrub => self.scrub_read_done(),
        }
    }
}
