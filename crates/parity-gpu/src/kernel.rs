//! `GpuKernel`: a GPU engine behind the CPU kernels' trait, one stripe per call. Every call
//! is a whole submit-and-wait round trip, so it is slow; it exists so that tests (and anything
//! written against `Kernel`) can run the GPU code exactly as they run a CPU kernel.

use std::sync::Mutex;

use tessera_parity::Kernel;

use crate::engine::GpuEngine;
use crate::stripe::{StripeOperation, StripeOutput, StripeRef};

/// A [`GpuEngine`] implementing [`Kernel`]. Generation and recovery run on the GPU;
/// `p_update` and `pq_update` (read-modify-write deltas, never worth a GPU round trip) run on
/// the CPU kernel given at construction. A GPU error panics: the trait has no error path, and
/// this type is for tests; production code goes through the [`crate::Dispatcher`], which falls
/// back to the CPU instead.
pub struct GpuKernel {
    engine: Mutex<GpuEngine>,
    updates: &'static dyn Kernel,
    name: &'static str,
}

impl GpuKernel {
    /// Wraps `engine`; `updates` computes the read-modify-write deltas.
    pub fn new(engine: GpuEngine, updates: &'static dyn Kernel) -> GpuKernel {
        // The trait wants a `&'static str`; a few bytes per engine opened, for the process.
        let name: &'static str =
            Box::leak(format!("gpu:{}", engine.adapter().name).into_boxed_str());
        GpuKernel {
            engine: Mutex::new(engine),
            updates,
            name,
        }
    }

    /// The engine, for direct batch calls or fault injection.
    pub fn engine(&self) -> std::sync::MutexGuard<'_, GpuEngine> {
        self.engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn run(&self, stripe: StripeRef<'_>, mut output: StripeOutput<'_>) {
        if let Err(error) = self.engine().run(
            std::slice::from_ref(&stripe),
            std::slice::from_mut(&mut output),
        ) {
            panic!("{}: {error}", self.name);
        }
    }
}

impl Kernel for GpuKernel {
    fn name(&self) -> &'static str {
        self.name
    }

    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
        let stripe = StripeRef {
            operation: StripeOperation::Xor,
            data: sources,
            parity: &[],
        };
        self.run(
            stripe,
            StripeOutput {
                first: dest,
                second: None,
            },
        );
    }

    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        let stripe = StripeRef {
            operation: StripeOperation::Pq,
            data,
            parity: &[],
        };
        self.run(
            stripe,
            StripeOutput {
                first: p,
                second: Some(q),
            },
        );
    }

    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
        self.updates.p_update(old, new, p)
    }

    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.updates.pq_update(start, old, new, p, q)
    }

    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        out_p: Option<&mut [u8]>,
    ) {
        let parity = [q];
        let stripe = StripeRef {
            operation: StripeOperation::RecoverDataP { x },
            data,
            parity: &parity,
        };
        self.run(
            stripe,
            StripeOutput {
                first: out_data,
                second: out_p,
            },
        );
    }

    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        out_q: Option<&mut [u8]>,
    ) {
        let parity = [p];
        let stripe = StripeRef {
            operation: StripeOperation::RecoverDataQ { x },
            data,
            parity: &parity,
        };
        self.run(
            stripe,
            StripeOutput {
                first: out_data,
                second: out_q,
            },
        );
    }

    fn recover_two_data(
        &self,
        data: &[&[u8]],
        x: usize,
        y: usize,
        p: &[u8],
        q: &[u8],
        out_x: &mut [u8],
        out_y: &mut [u8],
    ) {
        let parity = [p, q];
        let stripe = StripeRef {
            operation: StripeOperation::RecoverTwoData { x, y },
            data,
            parity: &parity,
        };
        self.run(
            stripe,
            StripeOutput {
                first: out_x,
                second: Some(out_y),
            },
        );
    }
}
