//! Parity arithmetic over buffers of the arena: the bridge between stripe plans and the
//! parity kernels.

use super::stripe::{Image, Kind, StripeOp, Work};
use super::{Command, ComputeCommand, ComputeId, ComputeJob, Engine, OpId};
use crate::geometry::{Column, MAX_MEMBERS};
use crate::plan::{Recovery, WriteStrategy};
use tessera_buffer::BufferSlice;

impl Engine {
    /// Whether full-stripe parity work is handed out (`Command::Compute`).
    pub fn offload_parity(&self) -> bool {
        self.config.offload_parity
    }

    /// Starts or stops handing full-stripe parity work out; work already handed out still
    /// completes through `compute_done`.
    pub fn set_offload_parity(&mut self, offload: bool) {
        self.config.offload_parity = offload;
    }

    /// Carries out handed-out parity work with the engine's own kernel (for environments that
    /// have no other parity engine, and the simulator). Call `compute_done` afterwards.
    pub fn run_compute(&mut self, job: &ComputeJob) {
        match job {
            ComputeJob::Parity { data, parity } => self.generate_parity(data, parity),
            ComputeJob::Recover {
                recovery,
                data,
                p,
                q,
            } => self.recover_data(*recovery, data, *p, *q),
        }
    }

    /// Handed-out parity work is done: its outputs are in place.
    pub fn compute_done(&mut self, id: ComputeId) {
        let op = super::slab::Key::from_u64(id.0);
        let entry = self.ops.get_mut(op).expect("compute of an op in flight");
        assert!(
            entry.computed && entry.pending_io > 0,
            "unexpected compute_done"
        );
        entry.pending_io -= 1;
        if entry.pending_io == 0 {
            self.advance_op(op);
        }
        self.pump();
    }

    /// Whether every buffer is (a slice of) the zero buffer: a stripe of such data has zero
    /// parity, which `compute_write` takes from the zero buffer without computing it.
    pub(super) fn only_zeroes(&self, buffers: impl IntoIterator<Item = BufferSlice>) -> bool {
        buffers
            .into_iter()
            .all(|buffer| buffer.buffer == self.zero_buffer)
    }

    /// The parity work of an op whose reads are done, if it is full-stripe work worth handing
    /// out: it must be exactly what the compute stage would do inline, on the same buffers,
    /// and its outputs must not feed another computation of the op.
    pub(super) fn offload_job(&self, op: &StripeOp) -> Option<ComputeJob> {
        let parity_chunks = self.geometry.parity_chunks();
        if !self.config.offload_parity || parity_chunks == 0 {
            return None;
        }
        let data_chunks = self.geometry.data_chunks();
        match (&op.kind, &op.work) {
            (
                Kind::Write { fragments },
                Work::ParityWrite {
                    strategy: WriteStrategy::ReconstructWrite,
                    range,
                    data,
                    parity_new,
                    ..
                },
            ) => {
                // A full-stripe write: every data chunk is one whole fragment, no scratch.
                if range.len() != self.geometry.chunk_bytes() || data.iter().any(Option::is_some) {
                    return None;
                }
                let sources = (0..data_chunks)
                    .map(|index| {
                        fragments
                            .iter()
                            .find(|f| f.index == index)
                            .filter(|f| f.buffer.len() as u64 == range.len())
                            .map(|f| f.buffer)
                    })
                    .collect::<Option<Vec<_>>>()?;
                if self.only_zeroes(sources.iter().copied()) {
                    return None;
                }
                let parity = parity_new[..parity_chunks]
                    .iter()
                    .map(|p| p.expect("parity buffer"))
                    .collect();
                Some(ComputeJob::Parity {
                    data: sources,
                    parity,
                })
            }
            (
                Kind::Resync | Kind::Scrub { .. },
                Work::Chunk {
                    image,
                    source: None,
                    parity_out,
                },
            ) if image.recovery.is_none() && parity_out[0].is_some() => {
                let (data, parity) = self.image_parity_slices(image, parity_out);
                Some(ComputeJob::Parity { data, parity })
            }
            (
                Kind::Rebuild { column, .. },
                Work::Chunk {
                    image,
                    source: None,
                    parity_out,
                },
            ) if !op.salvaging => match (column, image.recovery) {
                (Column::Data(_), Some(recovery)) => Some(ComputeJob::Recover {
                    recovery,
                    data: image.data[..data_chunks]
                        .iter()
                        .map(|slot| slot.expect("image buffer"))
                        .collect(),
                    p: image.parity[0],
                    q: image.parity[1],
                }),
                (Column::Parity(_), None) => {
                    let (data, parity) = self.image_parity_slices(image, parity_out);
                    Some(ComputeJob::Parity { data, parity })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Hands an op's parity work out; the op waits for it like for its I/O.
    pub(super) fn issue_compute(&mut self, id: OpId, op: &mut StripeOp, job: ComputeJob) {
        op.computed = true;
        op.pending_io += 1;
        self.counters.offloaded_parity_bytes += job.data_bytes();
        self.out.push_back(Command::Compute(ComputeCommand {
            id: ComputeId(id.to_u64()),
            job,
        }));
    }

    /// The data chunks of a stripe image and the parity outputs to compute from them.
    pub(super) fn image_parity_slices(
        &self,
        image: &Image,
        parity_out: &[Option<BufferSlice>; 2],
    ) -> (Vec<BufferSlice>, Vec<BufferSlice>) {
        let data = image.data[..self.geometry.data_chunks()]
            .iter()
            .map(|slot| slot.expect("image buffer"))
            .collect();
        let parity = parity_out[..self.geometry.parity_chunks()]
            .iter()
            .map(|slot| slot.expect("parity output"))
            .collect();
        (data, parity)
    }

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

    /// Adds data chunk `index`'s contribution over a range to parity, or takes it away (the
    /// same thing in GF(2^8)): `p ^= data` and, if given, `q ^= g^index * data`. Turns a
    /// stripe's parity into the partial parity of its other data chunks, and back.
    pub(super) fn fold_data_into_parity(
        &mut self,
        index: usize,
        data: BufferSlice,
        p: BufferSlice,
        q: Option<BufferSlice>,
    ) {
        let zeroes = BufferSlice::new(self.zero_buffer, 0, data.len());
        self.update_parity(index, data, zeroes, Some(p), q, None);
    }

    /// `q ^= g^index * data` over a range, with `scratch_p` (a slice nothing reads) as the P+Q
    /// kernel's P output.
    pub(super) fn fold_data_into_q(
        &mut self,
        index: usize,
        data: BufferSlice,
        q: BufferSlice,
        scratch_p: BufferSlice,
    ) {
        let zeroes = BufferSlice::new(self.zero_buffer, 0, data.len());
        self.update_parity(index, data, zeroes, None, Some(q), Some(scratch_p));
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
