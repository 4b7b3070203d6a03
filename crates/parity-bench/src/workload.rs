//! The benchmarked operations: for each, how one call is made with a Tessera kernel and with its
//! ISA-L counterpart, on the same buffers of one stripe set.
//!
//! Stripe set layout (`buffers_per_set`): data chunks `0..n`, then P, Q, and two output buffers.

use tessera_isal::EcTables;
use tessera_parity::Kernel;

use crate::arena::StripeSet;

/// An operation of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// P of `n` data chunks (RAID5 generation).
    Xor,
    /// P and Q of `n` data chunks (RAID6 generation).
    Pq,
    /// Read-modify-write of P and Q after one data chunk (the last) changed.
    PqUpdate,
    /// One data chunk lost, rebuilt from P and the other data.
    Recover1,
    /// Data chunk 1 and P lost: both rebuilt from Q and the other data.
    RecoverDataP,
    /// Data chunk 1 and Q lost: both rebuilt from P and the other data.
    RecoverDataQ,
    /// Data chunks 1 and n-1 lost: both rebuilt from P, Q and the other data.
    RecoverTwoData,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::Xor,
        Op::Pq,
        Op::PqUpdate,
        Op::Recover1,
        Op::RecoverDataP,
        Op::RecoverDataQ,
        Op::RecoverTwoData,
    ];

    /// The name in reports (`op` in the JSON).
    pub fn name(self) -> &'static str {
        match self {
            Op::Xor => "xor",
            Op::Pq => "pq",
            Op::PqUpdate => "pq_update",
            Op::Recover1 => "recover_1",
            Op::RecoverDataP => "recover_data_p",
            Op::RecoverDataQ => "recover_data_q",
            Op::RecoverTwoData => "recover_2data",
        }
    }

    /// The parity chunks of the stripe layout this op belongs to (RAID5: 1, RAID6: 2).
    pub fn parity_chunks(self) -> usize {
        match self {
            Op::Xor | Op::Recover1 => 1,
            _ => 2,
        }
    }

    /// The ISA-L call compared against.
    pub fn isal_call(self) -> &'static str {
        match self {
            Op::Xor => "xor_gen",
            Op::Pq => "pq_gen",
            Op::PqUpdate => "ec_encode_data_update x2 (old, new)",
            Op::Recover1 => "xor_gen (survivors + P)",
            Op::RecoverDataP | Op::RecoverDataQ | Op::RecoverTwoData => {
                "ec_encode_data (inverted RAID6 matrix)"
            }
        }
    }

    /// The data chunks whose bytes count as "processed" for GB/s: all data chunks of the stripe,
    /// except for an update, which counts the one chunk written.
    pub fn counted_chunks(self, data_chunks: usize) -> usize {
        match self {
            Op::PqUpdate => 1,
            _ => data_chunks,
        }
    }

    /// Buffers of the set this op touches per call (for the working-set size).
    pub fn touched_buffers(self, data_chunks: usize) -> usize {
        match self {
            Op::Xor => data_chunks + 1,
            Op::Pq => data_chunks + 2,
            Op::PqUpdate => 4,
            Op::Recover1 => data_chunks + 1,
            Op::RecoverDataP | Op::RecoverDataQ => data_chunks + 2,
            Op::RecoverTwoData => data_chunks + 2,
        }
    }
}

/// Buffers in one stripe set: data, P, Q, two outputs.
pub fn buffers_per_set(data_chunks: usize) -> usize {
    data_chunks + 4
}

/// One prepared call: borrowed buffers of one stripe set, ready to run either implementation.
pub trait Call {
    /// Runs the Tessera kernel.
    fn ours(&mut self, kernel: &dyn Kernel);
    /// Runs the ISA-L counterpart, if there is one.
    fn isal(&mut self, tables: Option<&EcTables>);
    /// The bytes of every buffer the call writes, concatenated.
    fn outputs(&self) -> Vec<u8>;
    /// Puts back output bytes saved by `outputs` (needed where a call updates in place).
    fn restore(&mut self, saved: &[u8]);
}

/// Lost data positions of the recovery ops.
fn lost_positions(op: Op, data_chunks: usize) -> (usize, usize) {
    let x = 1.min(data_chunks - 1);
    let y = data_chunks - 1;
    match op {
        Op::RecoverTwoData => {
            assert!(x < y, "two-data recovery needs at least 3 data chunks here");
            (x, y)
        }
        _ => (x, usize::MAX),
    }
}

/// The ISA-L tables an op needs (one per measurement, shared by all stripe sets), if any.
pub fn isal_tables(op: Op, data_chunks: usize) -> Option<EcTables> {
    let n = data_chunks;
    let (x, y) = lost_positions(op, n);
    let (p_row, q_row) = (n, n + 1);
    let data_except =
        |lost: &[usize]| -> Vec<usize> { (0..n).filter(|i| !lost.contains(i)).collect() };
    let (survivors, lost) = match op {
        Op::Xor | Op::Pq | Op::Recover1 => return None,
        Op::PqUpdate => {
            // Rows of P and Q of the generator matrix: `update` uses the column of chunk n-1.
            let generator = tessera_isal::raid6_generator_matrix(n);
            return Some(EcTables::new(n, 2, &generator[n * n..]));
        }
        Op::RecoverDataP => ([data_except(&[x]), vec![q_row]].concat(), vec![x, p_row]),
        Op::RecoverDataQ => ([data_except(&[x]), vec![p_row]].concat(), vec![x, q_row]),
        Op::RecoverTwoData => (
            [data_except(&[x, y]), vec![p_row, q_row]].concat(),
            vec![x, y],
        ),
    };
    let matrix = tessera_isal::raid6_recovery_matrix(n, &survivors, &lost);
    Some(EcTables::new(n, lost.len(), &matrix))
}

fn concat(buffers: &[&[u8]]) -> Vec<u8> {
    buffers.concat()
}

fn restore_into(buffers: &mut [&mut [u8]], saved: &[u8]) {
    let mut offset = 0;
    for buffer in buffers {
        buffer.copy_from_slice(&saved[offset..offset + buffer.len()]);
        offset += buffer.len();
    }
}

struct XorCall<'a> {
    sources: Vec<&'a [u8]>,
    dest: &'a mut [u8],
}

impl Call for XorCall<'_> {
    fn ours(&mut self, kernel: &dyn Kernel) {
        kernel.xor_gen(&self.sources, self.dest);
    }
    fn isal(&mut self, _: Option<&EcTables>) {
        tessera_isal::xor_gen(&self.sources, self.dest);
    }
    fn outputs(&self) -> Vec<u8> {
        self.dest.to_vec()
    }
    fn restore(&mut self, saved: &[u8]) {
        self.dest.copy_from_slice(saved);
    }
}

struct PqCall<'a> {
    data: Vec<&'a [u8]>,
    p: &'a mut [u8],
    q: &'a mut [u8],
}

impl Call for PqCall<'_> {
    fn ours(&mut self, kernel: &dyn Kernel) {
        kernel.pq_gen(&self.data, self.p, self.q);
    }
    fn isal(&mut self, _: Option<&EcTables>) {
        tessera_isal::pq_gen(&self.data, self.p, self.q);
    }
    fn outputs(&self) -> Vec<u8> {
        concat(&[self.p, self.q])
    }
    fn restore(&mut self, saved: &[u8]) {
        restore_into(&mut [self.p, self.q], saved);
    }
}

struct PqUpdateCall<'a> {
    index: usize,
    old: &'a [u8],
    new: &'a [u8],
    p: &'a mut [u8],
    q: &'a mut [u8],
}

impl Call for PqUpdateCall<'_> {
    fn ours(&mut self, kernel: &dyn Kernel) {
        kernel.pq_update(self.index, &[self.old], &[self.new], self.p, self.q);
    }
    fn isal(&mut self, tables: Option<&EcTables>) {
        let tables = tables.expect("update tables");
        // ISA-L has no delta form: fold the old contents out and the new ones in.
        tables.update(self.index, self.old, &mut [self.p, self.q]);
        tables.update(self.index, self.new, &mut [self.p, self.q]);
    }
    fn outputs(&self) -> Vec<u8> {
        concat(&[self.p, self.q])
    }
    fn restore(&mut self, saved: &[u8]) {
        restore_into(&mut [self.p, self.q], saved);
    }
}

/// The four recovery ops share one shape: data with holes, surviving parity, two outputs (one
/// for `Recover1`).
struct RecoveryCall<'a> {
    op: Op,
    x: usize,
    y: usize,
    /// All data chunks, with empty slices at the lost positions.
    data: Vec<&'a [u8]>,
    p: &'a [u8],
    q: &'a [u8],
    /// The surviving members in the order of the ISA-L recovery matrix (data, then parity).
    isal_sources: Vec<&'a [u8]>,
    out_first: &'a mut [u8],
    out_second: &'a mut [u8],
}

impl Call for RecoveryCall<'_> {
    fn ours(&mut self, kernel: &dyn Kernel) {
        match self.op {
            Op::Recover1 => kernel.recover_data_q(&self.data, self.x, self.p, self.out_first, None),
            Op::RecoverDataP => kernel.recover_data_p(
                &self.data,
                self.x,
                self.q,
                self.out_first,
                Some(self.out_second),
            ),
            Op::RecoverDataQ => kernel.recover_data_q(
                &self.data,
                self.x,
                self.p,
                self.out_first,
                Some(self.out_second),
            ),
            Op::RecoverTwoData => kernel.recover_two_data(
                &self.data,
                self.x,
                self.y,
                self.p,
                self.q,
                self.out_first,
                self.out_second,
            ),
            _ => unreachable!("not a recovery op"),
        }
    }
    fn isal(&mut self, tables: Option<&EcTables>) {
        match self.op {
            Op::Recover1 => tessera_isal::xor_gen(&self.isal_sources, self.out_first),
            _ => tables
                .expect("recovery tables")
                .encode(&self.isal_sources, &mut [self.out_first, self.out_second]),
        }
    }
    fn outputs(&self) -> Vec<u8> {
        match self.op {
            Op::Recover1 => self.out_first.to_vec(),
            _ => concat(&[self.out_first, self.out_second]),
        }
    }
    fn restore(&mut self, saved: &[u8]) {
        match self.op {
            Op::Recover1 => self.out_first.copy_from_slice(saved),
            _ => restore_into(&mut [self.out_first, self.out_second], saved),
        }
    }
}

/// Prepares the call of `op` on one stripe set with `data_chunks` data chunks.
pub fn prepare<'a>(op: Op, data_chunks: usize, set: StripeSet<'a>) -> Box<dyn Call + 'a> {
    let n = data_chunks;
    let mut buffers = set.buffers.into_iter();
    let data: Vec<&'a [u8]> = buffers.by_ref().take(n).map(|chunk| &*chunk).collect();
    let p = buffers.next().expect("P buffer");
    let q = buffers.next().expect("Q buffer");
    let out_first = buffers.next().expect("first output buffer");
    let out_second = buffers.next().expect("second output buffer");
    match op {
        Op::Xor => Box::new(XorCall {
            sources: data,
            dest: out_first,
        }),
        Op::Pq => Box::new(PqCall { data, p, q }),
        Op::PqUpdate => Box::new(PqUpdateCall {
            index: n - 1,
            old: data[n - 1],
            new: out_first,
            p,
            q,
        }),
        Op::Recover1 | Op::RecoverDataP | Op::RecoverDataQ | Op::RecoverTwoData => {
            let (x, y) = lost_positions(op, n);
            let lost = |i: usize| i == x || (op == Op::RecoverTwoData && i == y);
            let (p, q): (&'a [u8], &'a [u8]) = (p, q);
            let holed: Vec<&'a [u8]> = data
                .iter()
                .enumerate()
                .map(|(i, &chunk)| if lost(i) { &[][..] } else { chunk })
                .collect();
            let mut isal_sources: Vec<&'a [u8]> = data
                .iter()
                .enumerate()
                .filter(|&(i, _)| !lost(i))
                .map(|(_, &chunk)| chunk)
                .collect();
            match op {
                Op::Recover1 | Op::RecoverDataQ => isal_sources.push(p),
                Op::RecoverDataP => isal_sources.push(q),
                _ => isal_sources.extend([p, q]),
            }
            Box::new(RecoveryCall {
                op,
                x,
                y,
                data: holed,
                p,
                q,
                isal_sources,
                out_first,
                out_second,
            })
        }
    }
}
