//! Parity work handed out by engines (`Command::Compute`): gathered into one batch per pass of
//! the event loop, across groups, and sent to the parity worker; its completions come back as
//! posted calls. Without a worker (the `cpu` engine, or a build without the `gpu` feature)
//! engines never hand work out, and anything handed out anyway is computed inline.

use super::DataPlane;
use tessera_raid::engine::ComputeCommand;

#[cfg(feature = "gpu")]
use crate::compute::{Finished, RawChunk, RawJob};
#[cfg(feature = "gpu")]
use tessera_buffer::{BufferPool, BufferSlice};
#[cfg(feature = "gpu")]
use tessera_parity_gpu::StripeOperation;
#[cfg(feature = "gpu")]
use tessera_raid::engine::ComputeJob;
#[cfg(feature = "gpu")]
use tessera_raid::plan::Recovery;

impl DataPlane {
    /// Starts or stops engines handing parity work out (the worker decides after calibration).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub(crate) fn set_offload_parity(&mut self, offload: bool) {
        self.offload_parity = offload;
        for group in self.groups.values_mut() {
            group.engine.set_offload_parity(offload);
        }
    }

    /// Inline, with the engine's own kernel.
    fn compute_inline(&mut self, group_id: u32, command: ComputeCommand) {
        if let Some(group) = self.groups.get_mut(&group_id) {
            group.engine.run_compute(&command.job);
            group.engine.compute_done(command.id);
        }
    }

    #[cfg(not(feature = "gpu"))]
    pub(super) fn queue_compute(&mut self, group_id: u32, command: ComputeCommand) {
        self.compute_inline(group_id, command);
    }

    #[cfg(not(feature = "gpu"))]
    pub(super) fn send_compute(&mut self) {}

    #[cfg(feature = "gpu")]
    pub(super) fn queue_compute(&mut self, group_id: u32, command: ComputeCommand) {
        if self.parity_worker.is_none() {
            self.compute_inline(group_id, command);
            return;
        }
        let group = self.groups.get_mut(&group_id).expect("live group");
        let job = raw_job(group_id, group.engine.pool(), command);
        group.computing += 1;
        self.compute_batch.push(job);
    }

    /// Sends what was gathered in this pass as one batch.
    #[cfg(feature = "gpu")]
    pub(super) fn send_compute(&mut self) {
        if self.compute_batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.compute_batch);
        let Some(worker) = &self.parity_worker else {
            unreachable!("work is gathered only with a worker")
        };
        if let Err(batch) = worker.submit(batch) {
            // The worker is gone (it panicked): the CPU kernels do the batch here.
            crate::log!("the parity worker stopped; parity continues inline on the CPU");
            self.parity_worker = None;
            self.set_offload_parity(false);
            let kernel = self.parity.clone();
            for job in &batch {
                crate::compute::run_on_cpu(kernel.as_ref(), job);
            }
            self.compute_finished(Finished {
                jobs: batch.iter().map(|job| (job.group, job.id)).collect(),
            });
        }
    }

    /// A batch is computed: its ops go on.
    #[cfg(feature = "gpu")]
    pub(crate) fn compute_finished(&mut self, finished: Finished) {
        for (group_id, id) in finished.jobs {
            if let Some(group) = self.groups.get_mut(&group_id) {
                group.computing -= 1;
                group.engine.compute_done(id);
            }
        }
    }
}

/// Resolves a handed-out job's buffers to arena addresses, in the dispatcher's terms.
#[cfg(feature = "gpu")]
fn raw_job(group: u32, pool: &BufferPool, command: ComputeCommand) -> RawJob {
    let chunk = |slice: BufferSlice| RawChunk {
        pointer: pool.as_mut_ptr(slice),
        len_bytes: slice.len(),
    };
    let (operation, data, parity, first, second) = match command.job {
        ComputeJob::Parity { data, parity } => {
            let operation = match parity.len() {
                1 => StripeOperation::Xor,
                2 => StripeOperation::Pq,
                count => unreachable!("{count} parity chunks"),
            };
            (
                operation,
                data.into_iter().map(chunk).collect(),
                Vec::new(),
                chunk(parity[0]),
                parity.get(1).copied().map(chunk),
            )
        }
        ComputeJob::Recover {
            recovery: Recovery::FromP { lost },
            data,
            p,
            ..
        } => {
            // D_lost is the XOR of the other data chunks and P.
            let mut sources: Vec<RawChunk> = data
                .iter()
                .enumerate()
                .filter(|(index, _)| *index != lost)
                .map(|(_, slice)| chunk(*slice))
                .collect();
            sources.push(chunk(p.expect("P for recovery from P")));
            (
                StripeOperation::Xor,
                sources,
                Vec::new(),
                chunk(data[lost]),
                None,
            )
        }
        ComputeJob::Recover {
            recovery: Recovery::FromQ { lost },
            data,
            q,
            ..
        } => (
            StripeOperation::RecoverDataP { x: lost },
            lost_chunks_empty(&data, &[lost], chunk),
            vec![chunk(q.expect("Q for recovery from Q"))],
            chunk(data[lost]),
            None,
        ),
        ComputeJob::Recover {
            recovery: Recovery::FromPq { lost },
            data,
            p,
            q,
        } => {
            let (x, y) = (lost[0].min(lost[1]), lost[0].max(lost[1]));
            (
                StripeOperation::RecoverTwoData { x, y },
                lost_chunks_empty(&data, &[x, y], chunk),
                vec![
                    chunk(p.expect("P for two-chunk recovery")),
                    chunk(q.expect("Q for two-chunk recovery")),
                ],
                chunk(data[x]),
                Some(chunk(data[y])),
            )
        }
    };
    RawJob {
        group,
        id: command.id,
        operation,
        data,
        parity,
        first,
        second,
    }
}

/// The data chunks with the lost positions empty (they are outputs, never read).
#[cfg(feature = "gpu")]
fn lost_chunks_empty(
    data: &[BufferSlice],
    lost: &[usize],
    chunk: impl Fn(BufferSlice) -> RawChunk,
) -> Vec<RawChunk> {
    data.iter()
        .enumerate()
        .map(|(index, slice)| {
            if lost.contains(&index) {
                RawChunk::empty()
            } else {
                chunk(*slice)
            }
        })
        .collect()
}
