//! Scrub: read every written stripe, check that parity (or every mirror copy) agrees with the
//! data, count what does not, and with repair make it agree. Read errors met on the way are
//! always repaired from redundancy (a patrol read).
//!
//! What repair trusts, as md does: RAID5 and mirrors cannot tell which column is wrong, so the
//! data (the first readable copy) is kept and parity (the other copies) rewritten. RAID6 can:
//! the P and Q syndromes locate a single bad chunk — data or parity — which is corrected; a
//! stripe with more than one bad chunk is counted unrecoverable and its parity rewritten from
//! the data.

use super::stripe::{Image, Kind, Planned, StripeOp, Work};
use super::{Engine, GroupEvent, OpId};
use crate::geometry::Column;
use crate::plan::ChunkRange;
use tessera_buffer::BufferSlice;
use tessera_parity::{SyndromeVerdict, locate_single_error};

/// What a scrub found so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubStats {
    /// Stripes read and compared.
    pub stripes_checked: u64,
    /// Stripes whose redundancy disagreed with their data.
    pub mismatches: u64,
    /// Of those, stripes rewritten to agree (repair mode).
    pub repaired: u64,
    /// RAID6 stripes with more than one bad chunk: the bad data cannot be located.
    pub unrecoverable: u64,
    /// Chunks that failed to read and were rewritten from redundancy.
    pub read_errors_repaired: u64,
}

impl Engine {
    pub(super) fn plan_scrub(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let chunk = ChunkRange::new(0, self.geometry.chunk_bytes());
        if self.geometry.copies() > 1 {
            let mut copies = Vec::new();
            for copy in 0..self.geometry.copies() {
                let placement = self.geometry.data_placement(op.stripe, 0, copy);
                let Some(member) = self
                    .members
                    .reader(placement.member, placement.offset_bytes)
                else {
                    continue;
                };
                if op.unreadable & (1 << member) != 0 {
                    continue;
                }
                let Some(buffer) = self.scratch(op, chunk.len()) else {
                    return Planned::NoMemory;
                };
                copies.push((
                    member,
                    self.superblock.data_offset_bytes + placement.offset_bytes,
                    buffer,
                ));
            }
            if copies.is_empty() {
                return Planned::BeyondRedundancy;
            }
            for &(member, offset_bytes, buffer) in &copies {
                self.op_read(id, op, member, offset_bytes, buffer);
            }
            op.work = Work::Copies(copies);
            return Planned::Go;
        }
        if self.geometry.parity_chunks() == 0 {
            op.work = Work::None;
            return Planned::Go;
        }
        let data_chunks = self.geometry.data_chunks();
        let parity_chunks = self.geometry.parity_chunks();
        let all_readable = (0..data_chunks)
            .all(|index| self.readable_column(op, Column::Data(index)).is_some())
            && (0..parity_chunks)
                .all(|which| self.readable_column(op, Column::Parity(which)).is_some());
        if !all_readable {
            // Something failed to read: recover it (and rewrite it) instead of checking.
            return self.plan_image(id, op, chunk, 0, None, false);
        }
        let mut image = Image {
            range: Some(chunk),
            ..Image::default()
        };
        // Parity recomputed from the data, and the syndromes (parity read XOR recomputed).
        let mut parity_out = [None; 2];
        if !self.scratch_all(op, &mut image.data[..data_chunks], chunk.len())
            || !self.scratch_all(op, &mut image.parity[..parity_chunks], chunk.len())
            || !self.scratch_all(op, &mut parity_out[..parity_chunks], chunk.len())
        {
            return Planned::NoMemory;
        }
        let mut reads = Vec::new();
        for index in 0..data_chunks {
            let (member, offset) = self
                .readable_column(op, Column::Data(index))
                .expect("readable");
            reads.push((member, offset, image.data[index].expect("buffer")));
        }
        for which in 0..parity_chunks {
            let (member, offset) = self
                .readable_column(op, Column::Parity(which))
                .expect("readable");
            reads.push((member, offset, image.parity[which].expect("buffer")));
        }
        self.issue_reads(id, op, reads);
        op.work = Work::Chunk {
            image,
            source: None,
            parity_out,
        };
        Planned::Go
    }

    pub(super) fn compute_scrub(&mut self, id: OpId, op: &mut StripeOp) {
        let Kind::Scrub { repair } = op.kind else {
            unreachable!()
        };
        let work = std::mem::replace(&mut op.work, Work::None);
        match &work {
            Work::None => {}
            Work::Copies(copies) => self.scrub_copies(id, op, repair, copies),
            Work::Chunk {
                image, parity_out, ..
            } if image.recovery.is_some() || parity_out[0].is_none() => {
                self.scrub_repair_unreadable(id, op, image);
            }
            Work::Chunk {
                image, parity_out, ..
            } => self.scrub_parity(id, op, repair, image, parity_out),
            Work::ParityWrite { .. } => unreachable!("scrub plans an image"),
        }
        op.work = work;
    }

    /// Mirrors: every copy must equal the first readable one.
    fn scrub_copies(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        repair: bool,
        copies: &[(usize, u64, BufferSlice)],
    ) {
        self.background.scrub_stats_mut().stripes_checked += 1;
        let (_, _, first) = copies[0];
        let differing: Vec<(usize, u64)> = copies[1..]
            .iter()
            .filter(|(_, _, buffer)| self.pool.bytes(*buffer) != self.pool.bytes(first))
            .map(|&(member, offset, _)| (member, offset))
            .collect();
        self.repair_read_errors_mirrored(id, op, first);
        if differing.is_empty() {
            return;
        }
        self.background.scrub_stats_mut().mismatches += 1;
        if repair {
            for (member, offset_bytes) in differing {
                self.op_write(id, op, member, offset_bytes, first);
            }
            self.background.scrub_stats_mut().repaired += 1;
        }
    }

    /// A mirror copy that failed to read gets the good copy written over it.
    fn repair_read_errors_mirrored(&mut self, id: OpId, op: &mut StripeOp, good: BufferSlice) {
        if op.unreadable == 0 {
            return;
        }
        for copy in 0..self.geometry.copies() {
            let placement = self.geometry.data_placement(op.stripe, 0, copy);
            let offset_bytes = self.superblock.data_offset_bytes + placement.offset_bytes;
            for member in self
                .members
                .writers(placement.member, placement.offset_bytes)
                .collect::<Vec<_>>()
            {
                if op.unreadable & (1 << member) != 0 {
                    self.op_write(id, op, member, offset_bytes, good);
                    self.background.scrub_stats_mut().read_errors_repaired += 1;
                    self.emit_event(GroupEvent::ReadErrorRepaired {
                        member,
                        offset_bytes,
                        len_bytes: self.geometry.chunk_bytes(),
                    });
                }
            }
        }
    }

    /// Parity levels with a column that failed to read: recover it and write it back.
    fn scrub_repair_unreadable(&mut self, id: OpId, op: &mut StripeOp, image: &Image) {
        self.image_recover(image);
        let data_chunks = self.geometry.data_chunks();
        for index in 0..data_chunks {
            let Some((member, offset_bytes)) = self.column_reader(op.stripe, Column::Data(index))
            else {
                continue;
            };
            if op.unreadable & (1 << member) == 0 {
                continue;
            }
            let buffer = image.data[index].expect("image buffer");
            self.op_write(id, op, member, offset_bytes, buffer);
            self.background.scrub_stats_mut().read_errors_repaired += 1;
            self.emit_event(GroupEvent::ReadErrorRepaired {
                member,
                offset_bytes,
                len_bytes: self.geometry.chunk_bytes(),
            });
        }
        // Unreadable parity: recompute it from the (recovered) data.
        let unreadable_parity: Vec<usize> = (0..self.geometry.parity_chunks())
            .filter(|&which| {
                self.column_reader(op.stripe, Column::Parity(which))
                    .is_some_and(|(member, _)| op.unreadable & (1 << member) != 0)
            })
            .collect();
        if unreadable_parity.is_empty() {
            return;
        }
        let data: Vec<BufferSlice> = image.data[..data_chunks]
            .iter()
            .map(|slot| slot.expect("image"))
            .collect();
        let mut outputs = Vec::new();
        for _ in 0..self.geometry.parity_chunks() {
            match self.scratch(op, self.geometry.chunk_bytes()) {
                Some(slice) => outputs.push(slice),
                None => return,
            }
        }
        self.generate_parity(&data, &outputs);
        for which in unreadable_parity {
            let (member, offset_bytes) = self
                .column_reader(op.stripe, Column::Parity(which))
                .expect("checked");
            self.op_write(id, op, member, offset_bytes, outputs[which]);
            self.background.scrub_stats_mut().read_errors_repaired += 1;
        }
    }

    /// Parity levels, everything read: compare recomputed parity with what the members hold.
    fn scrub_parity(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        repair: bool,
        image: &Image,
        parity_out: &[Option<BufferSlice>; 2],
    ) {
        self.background.scrub_stats_mut().stripes_checked += 1;
        let data_chunks = self.geometry.data_chunks();
        let parity_chunks = self.geometry.parity_chunks();
        let (data, fresh) = self.image_parity_slices(image, parity_out);
        if !op.computed {
            self.generate_parity(&data, &fresh);
        }
        let stored: Vec<BufferSlice> = image.parity[..parity_chunks]
            .iter()
            .map(|slot| slot.expect("parity read"))
            .collect();
        let agrees = (0..parity_chunks)
            .all(|which| self.pool.bytes(fresh[which]) == self.pool.bytes(stored[which]));
        if agrees {
            return;
        }
        self.background.scrub_stats_mut().mismatches += 1;
        let verdict = if parity_chunks == 2 {
            // Syndromes: stored XOR fresh, computed into the stored buffers (no longer needed).
            for which in 0..2 {
                let fresh_bytes = self.pool.bytes(fresh[which]).to_vec();
                for (byte, fresh_byte) in self
                    .pool
                    .bytes_mut(stored[which])
                    .iter_mut()
                    .zip(fresh_bytes)
                {
                    *byte ^= fresh_byte;
                }
            }
            locate_single_error(
                data_chunks,
                self.pool.bytes(stored[0]),
                self.pool.bytes(stored[1]),
            )
        } else {
            SyndromeVerdict::P
        };
        if verdict == SyndromeVerdict::Inconsistent {
            self.background.scrub_stats_mut().unrecoverable += 1;
        }
        if !repair {
            return;
        }
        let mut writes: Vec<(Column, BufferSlice)> = Vec::new();
        match verdict {
            SyndromeVerdict::Consistent => {}
            SyndromeVerdict::P => writes.push((Column::Parity(0), fresh[0])),
            SyndromeVerdict::Q => writes.push((Column::Parity(1), fresh[1])),
            SyndromeVerdict::Data(z) => {
                // The bad chunk is off by the P syndrome: correct it in place.
                let syndrome = self.pool.bytes(stored[0]).to_vec();
                for (byte, delta) in self.pool.bytes_mut(data[z]).iter_mut().zip(syndrome) {
                    *byte ^= delta;
                }
                writes.push((Column::Data(z), data[z]));
            }
            SyndromeVerdict::Inconsistent => {
                writes
                    .extend((0..parity_chunks).map(|which| (Column::Parity(which), fresh[which])));
            }
        }
        for (column, buffer) in writes {
            for (member, offset_bytes) in self.column_writers(op.stripe, column) {
                self.op_write(id, op, member, offset_bytes, buffer);
            }
        }
        self.background.scrub_stats_mut().repaired += 1;
    }
}
