//! Stripe decisions: what to read before writing a stripe, and how to serve a read of a lost
//! chunk. Pure functions over the shape of the request and the health of the stripe's members,
//! so every case can be tested exhaustively; the engine only executes the plans.

use crate::geometry::MAX_MEMBERS;

/// A half-open byte range within a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkRange {
    pub start_bytes: u64,
    pub end_bytes: u64,
}

impl ChunkRange {
    pub fn new(start_bytes: u64, end_bytes: u64) -> ChunkRange {
        assert!(start_bytes <= end_bytes);
        ChunkRange {
            start_bytes,
            end_bytes,
        }
    }

    pub fn len(self) -> u64 {
        self.end_bytes - self.start_bytes
    }

    pub fn is_empty(self) -> bool {
        self.start_bytes == self.end_bytes
    }

    pub fn contains(self, other: ChunkRange) -> bool {
        self.start_bytes <= other.start_bytes && other.end_bytes <= self.end_bytes
    }

    /// The smallest range covering both.
    pub fn hull(self, other: ChunkRange) -> ChunkRange {
        ChunkRange::new(
            self.start_bytes.min(other.start_bytes),
            self.end_bytes.max(other.end_bytes),
        )
    }

    /// `self` minus `cut`, as at most two ranges (empty pieces left out).
    pub fn minus(self, cut: ChunkRange) -> [Option<ChunkRange>; 2] {
        let before = ChunkRange::new(
            self.start_bytes,
            cut.start_bytes.clamp(self.start_bytes, self.end_bytes),
        );
        let after = ChunkRange::new(
            cut.end_bytes.clamp(self.start_bytes, self.end_bytes),
            self.end_bytes,
        );
        [
            Some(before).filter(|r| !r.is_empty()),
            Some(after).filter(|r| !r.is_empty()),
        ]
    }
}

/// What a stripe column holds, for plans (data chunk index or parity 0 = P, 1 = Q).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanColumn {
    Data(usize),
    Parity(usize),
}

/// The shape of a write to one stripe of a parity level, and the health of its columns.
#[derive(Clone, Copy, Debug)]
pub struct StripeWrite<'a> {
    /// For each data chunk: the range being written, if any.
    pub written: &'a [Option<ChunkRange>],
    /// For each data chunk: whether its current contents can be read.
    pub data_readable: &'a [bool],
    /// For each parity chunk (P, then Q): whether its current contents can be read.
    pub parity_readable: &'a [bool],
    /// For each parity chunk: whether it can be written (a chunk with a read error still can).
    pub parity_writable: &'a [bool],
}

/// How a stripe write keeps parity right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStrategy {
    /// No parity to maintain (every parity member lost): write the data alone.
    DataOnly,
    /// Parity from the new data plus the unwritten data read back. A write covering every data
    /// chunk over the parity range (a full-stripe write) reads nothing.
    ReconstructWrite,
    /// Parity updated from the old and new contents of the written chunks and the old parity.
    ReadModifyWrite,
    /// A lost data chunk's old contents are needed: read every surviving column, recover the
    /// lost data, then compute parity as a reconstruct-write.
    RecoverThenWrite,
}

/// At most this many reads per plan (two pieces per data chunk).
pub const MAX_PLAN_READS: usize = 2 * MAX_MEMBERS;

/// The decision for one stripe write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePlan {
    pub strategy: WriteStrategy,
    /// The chunk range over which parity changes (the hull of the written ranges).
    pub parity_range: ChunkRange,
    /// What to read first, in column order.
    pub reads: PlanReads,
}

/// Reads of a plan: inline up to a stripe of ten members read in one piece each, so planning
/// a stripe write takes no allocation on the usual groups.
pub type PlanReads = smallvec::SmallVec<[(PlanColumn, ChunkRange); 10]>;

impl WritePlan {
    pub fn read_bytes(&self) -> u64 {
        self.reads.iter().map(|(_, range)| range.len()).sum()
    }
}

/// Why a stripe cannot be written or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// More columns are lost than the stripe's redundancy.
    BeyondRedundancy,
}

/// Decides how to write one stripe of a parity level (see `WriteStrategy`). Chooses between
/// read-modify-write and reconstruct-write by bytes read; ties go to reconstruct-write, which
/// leaves the old parity unread.
pub fn plan_write(shape: StripeWrite<'_>) -> Result<WritePlan, PlanError> {
    let data_chunks = shape.written.len();
    assert_eq!(shape.data_readable.len(), data_chunks);
    let parity_chunks = shape.parity_readable.len();
    assert!((1..=2).contains(&parity_chunks));
    assert_eq!(shape.parity_writable.len(), parity_chunks);
    let parity_range = shape
        .written
        .iter()
        .flatten()
        .copied()
        .reduce(ChunkRange::hull)
        .expect("a stripe write writes something");
    assert!(!parity_range.is_empty());

    let lost_data = shape
        .data_readable
        .iter()
        .filter(|&&readable| !readable)
        .count();
    let lost_parity = shape
        .parity_readable
        .iter()
        .filter(|&&readable| !readable)
        .count();
    if lost_data + lost_parity > parity_chunks {
        return Err(PlanError::BeyondRedundancy);
    }
    if shape.parity_writable.iter().all(|&writable| !writable) {
        return Ok(WritePlan {
            strategy: WriteStrategy::DataOnly,
            parity_range,
            reads: PlanReads::new(),
        });
    }

    // Reconstruct-write needs every data chunk not fully overwritten over the parity range.
    let mut rcw_reads = PlanReads::new();
    let mut rcw_possible = true;
    for (index, written) in shape.written.iter().enumerate() {
        let covered = written.is_some_and(|w| w.contains(parity_range));
        if covered {
            continue;
        }
        if !shape.data_readable[index] {
            rcw_possible = false;
            break;
        }
        let pieces = match written {
            Some(w) => parity_range.minus(*w),
            None => [Some(parity_range), None],
        };
        rcw_reads.extend(
            pieces
                .into_iter()
                .flatten()
                .map(|piece| (PlanColumn::Data(index), piece)),
        );
    }

    // Read-modify-write needs the old contents of every written chunk and of every parity
    // chunk it rewrites.
    let rmw_possible = shape
        .written
        .iter()
        .zip(shape.data_readable)
        .all(|(written, &readable)| written.is_none() || readable)
        && shape
            .parity_writable
            .iter()
            .zip(shape.parity_readable)
            .all(|(&writable, &readable)| !writable || readable);
    let rmw_reads: PlanReads = shape
        .written
        .iter()
        .enumerate()
        .filter_map(|(index, written)| written.map(|w| (PlanColumn::Data(index), w)))
        .chain(
            shape
                .parity_writable
                .iter()
                .enumerate()
                .filter(|(_, writable)| **writable)
                .map(|(which, _)| (PlanColumn::Parity(which), parity_range)),
        )
        .collect();

    let bytes =
        |reads: &[(PlanColumn, ChunkRange)]| reads.iter().map(|(_, r)| r.len()).sum::<u64>();
    let plan = match (rcw_possible, rmw_possible) {
        (true, true) if bytes(&rmw_reads) < bytes(&rcw_reads) => WritePlan {
            strategy: WriteStrategy::ReadModifyWrite,
            parity_range,
            reads: rmw_reads,
        },
        (true, _) => WritePlan {
            strategy: WriteStrategy::ReconstructWrite,
            parity_range,
            reads: rcw_reads,
        },
        (false, true) => WritePlan {
            strategy: WriteStrategy::ReadModifyWrite,
            parity_range,
            reads: rmw_reads,
        },
        (false, false) => {
            let reads = recover_reads(shape.data_readable, shape.parity_readable, parity_range);
            WritePlan {
                strategy: WriteStrategy::RecoverThenWrite,
                parity_range,
                reads,
            }
        }
    };
    assert!(plan.reads.len() <= MAX_PLAN_READS);
    Ok(plan)
}

/// Every surviving column over `range`: what recovering lost data chunks needs.
fn recover_reads(data_readable: &[bool], parity_readable: &[bool], range: ChunkRange) -> PlanReads {
    let data = data_readable
        .iter()
        .enumerate()
        .filter(|(_, readable)| **readable)
        .map(|(index, _)| (PlanColumn::Data(index), range));
    let parity = parity_readable
        .iter()
        .enumerate()
        .filter(|(_, readable)| **readable)
        .map(|(which, _)| (PlanColumn::Parity(which), range));
    data.chain(parity).collect()
}

/// How to recover lost data chunks of a stripe from what survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// One data chunk from P and the other data chunks (RAID5, or RAID6 with P alive).
    FromP { lost: usize },
    /// One data chunk from Q and the other data chunks (RAID6 with P lost too).
    FromQ { lost: usize },
    /// Two data chunks from P, Q and the other data chunks (RAID6).
    FromPq { lost: [usize; 2] },
}

/// Decides how to recover the unreadable data chunks of a stripe; `None` when none is lost.
pub fn plan_recovery(
    data_readable: &[bool],
    parity_alive: &[bool],
) -> Result<Option<Recovery>, PlanError> {
    let mut lost = data_readable
        .iter()
        .enumerate()
        .filter(|(_, readable)| !**readable)
        .map(|(i, _)| i);
    let first = lost.next();
    let second = lost.next();
    if lost.next().is_some() {
        return Err(PlanError::BeyondRedundancy);
    }
    let p = parity_alive.first().copied().unwrap_or(false);
    let q = parity_alive.get(1).copied().unwrap_or(false);
    match (first, second) {
        (None, _) => Ok(None),
        (Some(lost), None) if p => Ok(Some(Recovery::FromP { lost })),
        (Some(lost), None) if q => Ok(Some(Recovery::FromQ { lost })),
        (Some(x), Some(y)) if p && q => Ok(Some(Recovery::FromPq { lost: [x, y] })),
        _ => Err(PlanError::BeyondRedundancy),
    }
}

/// The columns a recovery reads over the wanted range: every readable data chunk and the
/// parity it uses.
pub fn recovery_reads(
    recovery: Recovery,
    data_readable: &[bool],
    range: ChunkRange,
) -> Vec<(PlanColumn, ChunkRange)> {
    let parity: &[usize] = match recovery {
        Recovery::FromP { .. } => &[0],
        Recovery::FromQ { .. } => &[1],
        Recovery::FromPq { .. } => &[0, 1],
    };
    data_readable
        .iter()
        .enumerate()
        .filter(|(_, readable)| **readable)
        .map(|(index, _)| (PlanColumn::Data(index), range))
        .chain(
            parity
                .iter()
                .map(|&which| (PlanColumn::Parity(which), range)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: u64 = 64;

    fn r(start: u64, end: u64) -> Option<ChunkRange> {
        Some(ChunkRange::new(start, end))
    }

    /// Plan with parity columns that are either fully alive or fully lost.
    fn plan(
        written: &[Option<ChunkRange>],
        readable: &[bool],
        parity: &[bool],
    ) -> Result<WritePlan, PlanError> {
        plan_write(StripeWrite {
            written,
            data_readable: readable,
            parity_readable: parity,
            parity_writable: parity,
        })
    }

    #[test]
    fn unreadable_parity_is_still_rewritten() {
        // P had a read error: RMW cannot use it, so the write reconstructs P instead.
        let p = plan_write(StripeWrite {
            written: &[None, r(8, 16), None, None],
            data_readable: &[true; 4],
            parity_readable: &[false],
            parity_writable: &[true],
        })
        .unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        assert_eq!(p.read_bytes(), 24);
    }

    #[test]
    fn full_stripe_reads_nothing() {
        let full = r(0, CHUNK);
        let p = plan(&[full, full, full, full], &[true; 4], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        assert!(p.reads.is_empty());
        assert_eq!(p.parity_range, ChunkRange::new(0, CHUNK));
    }

    #[test]
    fn small_write_uses_read_modify_write() {
        // One 8-byte write in a 4+1 stripe: RMW reads 8 (old data) + 8 (old P) = 16 bytes, RCW
        // would read 3 * 8 = 24.
        let p = plan(&[None, r(8, 16), None, None], &[true; 4], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReadModifyWrite);
        assert_eq!(
            p.reads[..],
            [
                (PlanColumn::Data(1), ChunkRange::new(8, 16)),
                (PlanColumn::Parity(0), ChunkRange::new(8, 16))
            ]
        );
        // RAID6: RMW reads data + P + Q = 24, RCW reads 3 * 8 = 24: the tie goes to RCW.
        let p = plan(&[None, r(8, 16), None, None], &[true; 4], &[true, true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        assert_eq!(p.read_bytes(), 24);
    }

    #[test]
    fn large_partial_write_uses_reconstruct_write() {
        // Three of four chunks fully written: RCW reads one chunk, RMW would read four.
        let full = r(0, CHUNK);
        let p = plan(&[full, full, full, None], &[true; 4], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        assert_eq!(
            p.reads[..],
            [(PlanColumn::Data(3), ChunkRange::new(0, CHUNK))]
        );
    }

    #[test]
    fn reconstruct_write_reads_around_partial_chunks() {
        // Write covering the tail of chunk 0 and the head of chunk 1: parity range is the whole
        // chunk; RCW reads the head of 0, the tail of 1, and chunks 2 and 3 entirely.
        let p = plan(&[r(48, 64), r(0, 16), None, None], &[true; 4], &[true]).unwrap();
        assert_eq!(p.parity_range, ChunkRange::new(0, 64));
        let rcw_bytes = 48 + 48 + 64 + 64;
        let rmw_bytes = 16 + 16 + 64;
        assert_eq!(p.strategy, WriteStrategy::ReadModifyWrite);
        assert_eq!(p.read_bytes(), rmw_bytes);
        assert!(rmw_bytes < rcw_bytes);
    }

    #[test]
    fn degraded_writes() {
        let full = r(0, CHUNK);
        // Parity lost: data only.
        let p = plan(&[None, r(0, 8), None], &[true; 3], &[false]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::DataOnly);
        // The written chunk is lost: its old contents are unknown, so RMW is out; RCW reads
        // the others.
        let p = plan(&[None, r(0, 8), None], &[true, false, true], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        assert_eq!(p.read_bytes(), 16);
        // An unwritten chunk is lost and the write is partial: RMW does not need it.
        let p = plan(&[None, r(0, 8), None], &[false, true, true], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReadModifyWrite);
        // The written chunk is lost and so is an unwritten one (RAID6): recover first.
        let p = plan(
            &[None, r(0, 8), None, None],
            &[false, false, true, true],
            &[true, true],
        )
        .unwrap();
        assert_eq!(p.strategy, WriteStrategy::RecoverThenWrite);
        assert_eq!(
            p.reads[..],
            [
                (PlanColumn::Data(2), ChunkRange::new(0, 8)),
                (PlanColumn::Data(3), ChunkRange::new(0, 8)),
                (PlanColumn::Parity(0), ChunkRange::new(0, 8)),
                (PlanColumn::Parity(1), ChunkRange::new(0, 8)),
            ]
        );
        // A lost chunk fully overwritten needs no recovery.
        let p = plan(&[full, full, None], &[false, true, true], &[true]).unwrap();
        assert_eq!(p.strategy, WriteStrategy::ReconstructWrite);
        // Beyond redundancy.
        assert_eq!(
            plan(&[full, None, None], &[false, false, true], &[true]),
            Err(PlanError::BeyondRedundancy)
        );
    }

    /// Exhaustive over small stripes: every plan reads only readable columns, reads exactly
    /// what its strategy needs, and never more than the alternative it passed over.
    #[test]
    fn exhaustive_small_stripes() {
        let ranges = [None, r(0, 8), r(8, 16), r(0, 16), r(4, 12)];
        for parity_count in 1..=2 {
            for data_chunks in 1..=4usize {
                let combos = ranges.len().pow(data_chunks as u32);
                for combo in 0..combos {
                    let written: Vec<_> = (0..data_chunks)
                        .map(|i| ranges[combo / ranges.len().pow(i as u32) % ranges.len()])
                        .collect();
                    if written.iter().all(Option::is_none) {
                        continue;
                    }
                    for health in 0..(1u32 << (data_chunks + parity_count)) {
                        let readable: Vec<bool> =
                            (0..data_chunks).map(|i| health & (1 << i) == 0).collect();
                        let parity: Vec<bool> = (0..parity_count)
                            .map(|i| health & (1 << (data_chunks + i)) == 0)
                            .collect();
                        check_plan(&written, &readable, &parity);
                    }
                }
            }
        }
    }

    fn check_plan(written: &[Option<ChunkRange>], readable: &[bool], parity: &[bool]) {
        let lost = readable.iter().chain(parity).filter(|&&ok| !ok).count();
        let result = plan(written, readable, parity);
        if lost > parity.len() {
            assert_eq!(result, Err(PlanError::BeyondRedundancy));
            return;
        }
        let p = result.unwrap();
        for (column, range) in &p.reads {
            assert!(!range.is_empty());
            assert!(p.parity_range.contains(*range));
            match column {
                PlanColumn::Data(i) => assert!(readable[*i], "{p:?} reads lost data {i}"),
                PlanColumn::Parity(i) => assert!(parity[*i], "{p:?} reads lost parity {i}"),
            }
        }
        let needed_unwritten = |i: usize| !written[i].is_some_and(|w| w.contains(p.parity_range));
        match p.strategy {
            WriteStrategy::DataOnly => assert!(parity.iter().all(|alive| !alive)),
            WriteStrategy::ReconstructWrite => {
                // Every byte of the parity range of every data chunk is either written or read.
                for i in 0..readable.len() {
                    for byte in p.parity_range.start_bytes..p.parity_range.end_bytes {
                        let is_written =
                            written[i].is_some_and(|w| w.start_bytes <= byte && byte < w.end_bytes);
                        let is_read = p.reads.iter().any(|(c, r)| {
                            *c == PlanColumn::Data(i) && r.start_bytes <= byte && byte < r.end_bytes
                        });
                        assert!(is_written ^ is_read, "{p:?}: chunk {i} byte {byte}");
                    }
                }
            }
            WriteStrategy::ReadModifyWrite => {
                for (i, w) in written.iter().enumerate() {
                    if let Some(w) = w {
                        assert!(readable[i]);
                        assert!(p.reads.contains(&(PlanColumn::Data(i), *w)));
                    }
                }
                let rcw_possible = (0..readable.len()).all(|i| !needed_unwritten(i) || readable[i]);
                if rcw_possible {
                    let rcw: u64 = (0..readable.len())
                        .filter(|&i| needed_unwritten(i))
                        .map(|i| p.parity_range.len() - written[i].map_or(0, |w| w.len()))
                        .sum();
                    assert!(
                        p.read_bytes() < rcw,
                        "{p:?} chose RMW over a cheaper RCW ({rcw})"
                    );
                }
            }
            WriteStrategy::RecoverThenWrite => {
                assert!((0..readable.len()).any(|i| needed_unwritten(i) && !readable[i]));
                assert!(
                    written
                        .iter()
                        .zip(readable)
                        .any(|(w, ok)| w.is_some() && !ok)
                );
            }
        }
    }

    #[test]
    fn recovery_choices() {
        assert_eq!(plan_recovery(&[true, true], &[true]), Ok(None));
        assert_eq!(
            plan_recovery(&[true, false], &[true]),
            Ok(Some(Recovery::FromP { lost: 1 }))
        );
        assert_eq!(
            plan_recovery(&[true, false], &[false]),
            Err(PlanError::BeyondRedundancy)
        );
        assert_eq!(
            plan_recovery(&[false, true, true], &[false, true]),
            Ok(Some(Recovery::FromQ { lost: 0 }))
        );
        assert_eq!(
            plan_recovery(&[false, true, false], &[true, true]),
            Ok(Some(Recovery::FromPq { lost: [0, 2] }))
        );
        assert_eq!(
            plan_recovery(&[false, true, false], &[true, false]),
            Err(PlanError::BeyondRedundancy)
        );
        let reads = recovery_reads(
            Recovery::FromQ { lost: 0 },
            &[false, true, true],
            ChunkRange::new(0, 4),
        );
        assert_eq!(
            reads,
            vec![
                (PlanColumn::Data(1), ChunkRange::new(0, 4)),
                (PlanColumn::Data(2), ChunkRange::new(0, 4)),
                (PlanColumn::Parity(1), ChunkRange::new(0, 4)),
            ]
        );
    }

    #[test]
    fn range_arithmetic() {
        let whole = ChunkRange::new(0, 64);
        assert_eq!(whole.minus(ChunkRange::new(16, 32)), [r(0, 16), r(32, 64)]);
        assert_eq!(whole.minus(ChunkRange::new(0, 32)), [None, r(32, 64)]);
        assert_eq!(whole.minus(whole), [None, None]);
        assert_eq!(
            ChunkRange::new(8, 16).minus(ChunkRange::new(32, 40)),
            [r(8, 16), None]
        );
    }
}
