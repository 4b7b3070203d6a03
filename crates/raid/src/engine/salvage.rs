//! What a stripe op does when data is lost beyond redundancy: keep every sector that still
//! reads, record only the sectors that do not as lost (the group's bad ranges, which fail reads
//! until written again), write zeroes over them and make parity agree with what is left, so the
//! stripe's redundancy stays usable for the rest.
//!
//! A read error fails a whole member read, however many of its sectors are bad, so a chunk
//! that failed to read on a member still present is read again one sector at a time
//! (`IoPurpose::SectorRead`) to learn which sectors are really gone. A rebuild that meets a
//! latent error where redundancy is already spent salvages here; a resync (after a power cut,
//! or replaying a torn full-stripe write from the journal) reads that way too, since parity
//! not yet resynced cannot stand in for a chunk's unreadable sectors (`plan_resync`,
//! `compute_resync`).

use super::stripe::{Image, IoPurpose, Kind, Planned, StripeOp, Work};
use super::{Engine, MemberOp, OpId, Owner};
use crate::geometry::{Column, SECTOR_BYTES};
use crate::plan::ChunkRange;
use crate::superblock::BadRange;
use tessera_buffer::BufferSlice;

impl Engine {
    /// Plans a rebuild step that met data lost beyond redundancy: the sector-by-sector salvage
    /// when a chunk failed to read on a member still present, else the whole-chunk one.
    pub(super) fn plan_salvage(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        match self.plan_sector_salvage(id, op) {
            Some(planned) => planned,
            None => self.plan_chunk_salvage(id, op),
        }
    }

    /// Reads each data chunk that failed on a member still present sector by sector, the other
    /// chunks whole, and the parity that recovers chunks whose member is gone: those are right
    /// in every row (sector offset within the chunk) where every sector read, and lost only in
    /// the rows where one failed. None when no chunk failed on a present member, or when the
    /// parity needed cannot be read or trusted: the whole-chunk salvage runs instead.
    fn plan_sector_salvage(&mut self, id: OpId, op: &mut StripeOp) -> Option<Planned> {
        let Kind::Rebuild { target, column, .. } = op.kind else {
            unreachable!("only rebuilds salvage")
        };
        let chunk = ChunkRange::new(0, self.geometry.chunk_bytes());
        op.bad_sectors.clear();
        op.sector_columns = 0;
        if self.geometry.copies() > 1 {
            // Mirrors: every copy still present failed the read (or the rebuild would have
            // copied it); copy one of them sector by sector.
            let Column::Data(index) = column else {
                unreachable!("mirrors have no parity")
            };
            let source = self.data_reader(op.stripe, index, 0, false, 1 << target)?;
            let Some(buffer) = self.scratch(op, chunk.len()) else {
                return Some(Planned::NoMemory);
            };
            op.sector_columns = 1 << index;
            self.op_read_sectors(id, op, index, source, buffer);
            let mut image = Image {
                range: Some(chunk),
                ..Image::default()
            };
            image.data[index] = Some(buffer);
            op.work = Work::Chunk {
                image,
                source: None,
                parity_out: [None; 2],
            };
            return Some(Planned::Go);
        }
        if self.geometry.parity_chunks() == 0 {
            return None;
        }
        op.sector_columns = self.columns_failed_on_present_members(op);
        if op.sector_columns == 0 {
            return None;
        }
        let (forced_lost, skip_parity) = match column {
            Column::Data(index) => (1 << index, None),
            Column::Parity(which) => (0, Some(which)),
        };
        match self.plan_image(id, op, chunk, forced_lost, skip_parity, true) {
            Planned::BeyondRedundancy => {
                op.sector_columns = 0;
                None
            }
            planned => Some(planned),
        }
    }

    /// Reads the data chunks that survive; the lost ones (`op.lost_mask`, plus any that fail
    /// to read now) become zeroes and parity is recomputed over the result.
    fn plan_chunk_salvage(&mut self, id: OpId, op: &mut StripeOp) -> Planned {
        let chunk = ChunkRange::new(0, self.geometry.chunk_bytes());
        let data_chunks = self.geometry.data_chunks();
        for index in 0..data_chunks {
            if self.readable_column(op, Column::Data(index)).is_none() {
                op.lost_mask |= 1 << index;
            }
        }
        if self.geometry.parity_chunks() == 0 {
            op.work = Work::None;
            return Planned::Go;
        }
        let mut image = Image {
            range: Some(chunk),
            ..Image::default()
        };
        let mut parity_out = [None; 2];
        let parity_chunks = self.geometry.parity_chunks();
        if !self.scratch_all(op, &mut image.data[..data_chunks], chunk.len())
            || !self.scratch_all(op, &mut parity_out[..parity_chunks], chunk.len())
        {
            return Planned::NoMemory;
        }
        for index in 0..data_chunks {
            let buffer = image.data[index].expect("image buffer");
            if op.lost_mask & (1 << index) != 0 {
                self.pool.bytes_mut(buffer).fill(0);
            } else {
                let (member, offset_bytes) = self
                    .readable_column(op, Column::Data(index))
                    .expect("readable");
                self.op_read(id, op, member, offset_bytes, buffer);
            }
        }
        op.work = Work::Chunk {
            image,
            source: None,
            parity_out,
        };
        Planned::Go
    }

    pub(super) fn compute_salvage(&mut self, id: OpId, op: &mut StripeOp) {
        if op.sector_columns != 0 {
            self.compute_sector_salvage(id, op);
        } else {
            self.compute_chunk_salvage(id, op);
        }
    }

    /// Recovers the chunks whose member is gone, loses the rows where a sector failed, and
    /// writes what changed: the recovered chunks, the chunks read by sector (zeroes where they
    /// failed) and parity over the result.
    fn compute_sector_salvage(&mut self, id: OpId, op: &mut StripeOp) {
        let work = std::mem::replace(&mut op.work, Work::None);
        let Work::Chunk {
            image, parity_out, ..
        } = &work
        else {
            unreachable!("a sector salvage plans a chunk")
        };
        let mut writes: Vec<(Column, BufferSlice)> = Vec::new();
        if self.geometry.copies() > 1 {
            let index = op.sector_columns.trailing_zeros() as usize;
            writes.push((
                Column::Data(index),
                image.data[index].expect("image buffer"),
            ));
        } else {
            // The failed sectors count as zeroes in the recovery, so a recovered chunk is
            // wrong exactly in the rows where a sector failed: lost there too.
            self.image_recover(image);
            let mut bad_rows: Vec<u32> = op.bad_sectors.iter().map(|&(_, row)| row).collect();
            bad_rows.sort_unstable();
            bad_rows.dedup();
            let data_chunks = self.geometry.data_chunks();
            for index in (0..data_chunks).filter(|&index| op.lost_mask & (1 << index) != 0) {
                op.bad_sectors
                    .extend(bad_rows.iter().map(|&row| (index, row)));
            }
            self.zero_bad_sectors(op, &work);
            let (data, outputs) = self.image_parity_slices(image, parity_out);
            self.generate_parity(&data, &outputs);
            for (index, &buffer) in data.iter().enumerate() {
                if op.lost_mask & (1 << index) != 0 || op.reads_by_sector(index) {
                    writes.push((Column::Data(index), buffer));
                }
            }
            writes.extend(
                outputs
                    .into_iter()
                    .enumerate()
                    .map(|(which, buffer)| (Column::Parity(which), buffer)),
            );
        }
        self.record_bad_sectors(op);
        self.write_salvaged(id, op, writes);
        op.work = work;
    }

    /// Writes zeroes over the lost chunks and parity that matches the salvaged stripe.
    fn compute_chunk_salvage(&mut self, id: OpId, op: &mut StripeOp) {
        let work = std::mem::replace(&mut op.work, Work::None);
        let chunk = self.geometry.chunk_bytes() as usize;
        let zeroes = BufferSlice::new(self.zero_buffer, 0, chunk);
        let mut writes: Vec<(Column, BufferSlice)> = Vec::new();
        let stripe_offset = self.geometry.stripe_offset_bytes(op.stripe);
        for index in 0..self.geometry.data_chunks() {
            if op.lost_mask & (1 << index) != 0 {
                let offset_bytes = stripe_offset + index as u64 * chunk as u64;
                self.record_bad_range(BadRange {
                    offset_bytes,
                    len_bytes: chunk as u64,
                });
                writes.push((Column::Data(index), zeroes));
            }
        }
        if let Work::Chunk {
            image, parity_out, ..
        } = &work
        {
            let (data, outputs) = self.image_parity_slices(image, parity_out);
            self.generate_parity(&data, &outputs);
            writes.extend(
                outputs
                    .into_iter()
                    .enumerate()
                    .map(|(which, buffer)| (Column::Parity(which), buffer)),
            );
        }
        self.write_salvaged(id, op, writes);
        op.work = work;
    }

    /// Writes salvaged columns (whole chunks) to every member holding them, the rebuild target
    /// included.
    fn write_salvaged(&mut self, id: OpId, op: &mut StripeOp, writes: Vec<(Column, BufferSlice)>) {
        let Kind::Rebuild {
            target,
            column: target_column,
            target_offset_bytes,
            ..
        } = op.kind
        else {
            unreachable!("only rebuilds salvage")
        };
        for (column, buffer) in writes {
            let mut targets = self.column_writers(op.stripe, column);
            if column == target_column && !self.members.list[target].is_failed() {
                targets.push((target, target_offset_bytes));
            }
            for (member, offset_bytes) in targets {
                self.op_write(id, op, member, offset_bytes, buffer);
            }
        }
    }

    /// Data columns of the op's stripe whose read failed on a member still present (and that a
    /// replayed intent does not give): the ones to read again sector by sector.
    pub(super) fn columns_failed_on_present_members(&self, op: &StripeOp) -> u64 {
        (0..self.geometry.data_chunks())
            .filter(|&index| {
                !op.supplies(index)
                    && self
                        .column_reader(op.stripe, Column::Data(index))
                        .is_some_and(|(member, _)| op.unreadable & (1 << member) != 0)
            })
            .fold(0, |mask, index| mask | (1 << index))
    }

    /// Reads data column `index` of the op's stripe one sector at a time into `buffer` (the
    /// whole chunk, or the op's range of it), so a read error marks only the sectors that fail.
    pub(super) fn op_read_sectors(
        &mut self,
        id: OpId,
        op: &mut StripeOp,
        index: usize,
        (member, offset_bytes): (usize, u64),
        buffer: BufferSlice,
    ) {
        let sectors = buffer.len() as u64 / SECTOR_BYTES;
        for sector in 0..sectors {
            let at = (sector * SECTOR_BYTES) as usize;
            op.pending_io += 1;
            self.issue(
                member,
                MemberOp::Read {
                    offset_bytes: offset_bytes + at as u64,
                    buffer: buffer.sub(at, SECTOR_BYTES as usize),
                    for_host: None,
                },
                Owner::Stripe {
                    op: id,
                    purpose: IoPurpose::SectorRead {
                        index,
                        sector: u32::try_from(sector).expect("sectors of a chunk fit u32"),
                    },
                },
            );
        }
    }

    /// Zeroes the op's lost sectors in its image, so parity is computed over known contents.
    pub(super) fn zero_bad_sectors(&mut self, op: &StripeOp, work: &Work) {
        if op.bad_sectors.is_empty() {
            return;
        }
        let Work::Chunk { image, .. } = work else {
            unreachable!("sector reads fill a chunk image")
        };
        for &(index, sector) in &op.bad_sectors {
            let buffer = image.data[index].expect("image buffer");
            let at = sector as usize * SECTOR_BYTES as usize;
            self.pool
                .bytes_mut(buffer.sub(at, SECTOR_BYTES as usize))
                .fill(0);
        }
    }

    /// Records the op's lost sectors as bad ranges, adjacent sectors as one.
    pub(super) fn record_bad_sectors(&mut self, op: &mut StripeOp) {
        op.bad_sectors.sort_unstable();
        op.bad_sectors.dedup();
        let chunk = self.geometry.chunk_bytes();
        let stripe_offset = self.geometry.stripe_offset_bytes(op.stripe);
        let mut runs: Vec<BadRange> = Vec::new();
        for &(index, sector) in &op.bad_sectors {
            let offset_bytes =
                stripe_offset + index as u64 * chunk + u64::from(sector) * SECTOR_BYTES;
            match runs.last_mut() {
                Some(run) if run.offset_bytes + run.len_bytes == offset_bytes => {
                    run.len_bytes += SECTOR_BYTES;
                }
                _ => runs.push(BadRange {
                    offset_bytes,
                    len_bytes: SECTOR_BYTES,
                }),
            }
        }
        op.bad_sectors.clear();
        for run in runs {
            self.record_bad_range(run);
        }
    }
}
