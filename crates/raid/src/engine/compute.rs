//! Parity arithmetic over buffers of the arena: the bridge between stripe plans and the
//! parity kernels.

use super::Engine;
use crate::geometry::MAX_MEMBERS;
use crate::plan::Recovery;
use tessera_buffer::BufferSlice;

impl Engine {
    /// Generates parity (P, or P and Q) from `data` into `parity`.
    pub(super) fn generate_parity(&mut self, data: &[BufferSlice], parity: &[BufferSlice]) {
        let kernel = self.parity.clone();
        let mut access = self.pool.access();
        let mut inputs: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
        for (slot, slice) in inputs.iter_mut().zip(data) {
            *slot = access.get(*slice);
        }
        let inputs = &inputs[..data.len()];
        match parity {
            [p] => kernel.xor_gen(inputs, access.get_mut(*p)),
            [p, q] => {
                let p = access.get_mut(*p);
                let q = access.get_mut(*q);
                kernel.pq_gen(inputs, p, q);
            }
            _ => unreachable!("one or two parity chunks"),
        }
    }

    /// Read-modify-write delta of data chunk `index` into P and/or Q (either may be absent:
    /// a lost parity member).
    pub(super) fn update_parity(
        &mut self,
        index: usize,
        old: BufferSlice,
        new: BufferSlice,
        p: Option<BufferSlice>,
        q: Option<BufferSlice>,
        scratch_p: Option<BufferSlice>,
    ) {
        let kernel = self.parity.clone();
        let mut access = self.pool.access();
        let old = access.get(old);
        let new = access.get(new);
        match (p, q) {
            (Some(p), None) => kernel.p_update(&[old], &[new], access.get_mut(p)),
            (p, Some(q)) => {
                // Q alone still goes through the P+Q kernel, with a throw-away P.
                let p = access.get_mut(p.or(scratch_p).expect("a P buffer for a Q update"));
                let q = access.get_mut(q);
                kernel.pq_update(index, &[old], &[new], p, q);
            }
            (None, None) => {}
        }
    }

    /// Recovers lost data chunks: `data[i]` holds chunk `i` (read) or receives it (lost).
    pub(super) fn recover_data(
        &mut self,
        recovery: Recovery,
        data: &[BufferSlice],
        p: Option<BufferSlice>,
        q: Option<BufferSlice>,
    ) {
        let kernel = self.parity.clone();
        let mut access = self.pool.access();
        let lost: &[usize] = match &recovery {
            Recovery::FromP { lost } | Recovery::FromQ { lost } => std::slice::from_ref(lost),
            Recovery::FromPq { lost } => lost,
        };
        let mut inputs: [&[u8]; MAX_MEMBERS + 1] = [&[]; MAX_MEMBERS + 1];
        for (index, slice) in data.iter().enumerate() {
            if !lost.contains(&index) {
                inputs[index] = access.get(*slice);
            }
        }
        match recovery {
            Recovery::FromP { lost } => {
                // D_lost = P ^ (every other data chunk).
                let mut sources: [&[u8]; MAX_MEMBERS + 1] = [&[]; MAX_MEMBERS + 1];
                let mut count = 0;
                for (index, input) in inputs[..data.len()].iter().enumerate() {
                    if index != lost {
                        sources[count] = input;
                        count += 1;
                    }
                }
                sources[count] = access.get(p.expect("P for recovery from P"));
                count += 1;
                kernel.xor_gen(&sources[..count], access.get_mut(data[lost]));
            }
            Recovery::FromQ { lost } => {
                let q = access.get(q.expect("Q for recovery from Q"));
                let out = access.get_mut(data[lost]);
                kernel.recover_data_p(&inputs[..data.len()], lost, q, out, None);
            }
            Recovery::FromPq { lost: [x, y] } => {
                let p = access.get(p.expect("P for two-chunk recovery"));
                let q = access.get(q.expect("Q for two-chunk recovery"));
                let out_x = access.get_mut(data[x]);
                let out_y = access.get_mut(data[y]);
                kernel.recover_two_data(&inputs[..data.len()], x, y, p, q, out_x, out_y);
            }
        }
    }

    /// Copies bytes between two arena slices of equal length.
    pub(super) fn copy_slice(&mut self, from: BufferSlice, to: BufferSlice) {
        assert_eq!(from.len(), to.len());
        let mut access = self.pool.access();
        let source = access.get(from);
        access.get_mut(to).copy_from_slice(source);
    }
}
