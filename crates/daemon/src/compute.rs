//! The parity worker: a thread that owns the parity dispatcher (the CPU kernels and every GPU
//! adapter, calibrated at start-up) and carries out the full-stripe parity work that engines
//! hand out (`Command::Compute`), a batch at a time, two batches in flight so that one batch's
//! transfers overlap the other's compute on a GPU. Completions go back to the data plane as
//! posted calls.
//!
//! Engines hand work out only once calibration says a GPU may finish it sooner (`auto`), or
//! always (`gpu`); otherwise they compute inline and this thread only reports the engines.

use crate::log;
use crate::plane::{DataPlane, PlaneHandle};
use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tessera_parity::Kernel;
use tessera_parity_gpu::{
    Dispatcher, DispatcherConfig, EngineKind, EngineMode, Job, ParityEngineReport, Pending,
    StripeOperation, StripeOutput, StripeRef,
};
use tessera_raid::engine::ComputeId;

/// A byte range of an engine's buffer arena, as the worker thread sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawChunk {
    pub pointer: *mut u8,
    pub len_bytes: usize,
}

// SAFETY: a `RawChunk` names bytes of an engine's arena that the engine keeps live and
// untouched while the computation is in flight (the same rule as for member I/O handed to the
// kernel); only the worker thread touches them in that time.
unsafe impl Send for RawChunk {}

impl RawChunk {
    /// A chunk of no bytes (a lost data position that is never read).
    pub fn empty() -> RawChunk {
        RawChunk {
            pointer: std::ptr::NonNull::dangling().as_ptr(),
            len_bytes: 0,
        }
    }

    /// The bytes, for as long as the computation is in flight.
    fn bytes(self) -> &'static [u8] {
        // SAFETY: see `RawChunk`: the range is live and not written by anyone else until the
        // worker posts the completion, after which no reference made here is used.
        unsafe { std::slice::from_raw_parts(self.pointer, self.len_bytes) }
    }

    /// The bytes to write, for as long as the computation is in flight.
    fn bytes_mut(self) -> &'static mut [u8] {
        // SAFETY: as for `bytes`; outputs never overlap inputs or each other (the engine gives
        // every output its own buffer).
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.len_bytes) }
    }
}

/// One stripe's work with its arena addresses resolved.
pub(crate) struct RawJob {
    pub group: u32,
    pub id: ComputeId,
    pub operation: StripeOperation,
    /// Data chunks in position order (an empty chunk at a lost position).
    pub data: Vec<RawChunk>,
    pub parity: Vec<RawChunk>,
    pub first: RawChunk,
    pub second: Option<RawChunk>,
}

impl RawJob {
    /// Bytes of data chunks the job stands for (lost ones included).
    fn data_bytes(&self) -> u64 {
        let chunk = self
            .data
            .iter()
            .chain(&self.parity)
            .map(|chunk| chunk.len_bytes)
            .max()
            .unwrap_or(0);
        (self.data.len() * chunk) as u64
    }
}

/// Work done, by whom.
pub(crate) struct Finished {
    pub jobs: Vec<(u32, ComputeId)>,
}

/// What `tessera info` and `/metrics` show of the parity engines.
#[derive(Clone, Debug, Default)]
pub(crate) struct EngineFigures {
    /// `None` while calibration runs.
    pub reports: Option<Vec<ParityEngineReport>>,
    /// Per engine name: batches and data bytes computed for engines' handed-out work.
    pub batches: BTreeMap<String, u64>,
    pub bytes: BTreeMap<String, u64>,
    /// Batches a GPU was meant to compute and the CPU did instead.
    pub fallbacks: u64,
}

/// The data plane's side of the worker. Dropping it waits for the thread: a process that
/// exits while a GPU driver is still being loaded or calibrated can abort inside the driver
/// (Mesa's LLVM does), so the daemon never exits with the worker running.
pub(crate) struct ParityWorker {
    batches: Option<mpsc::Sender<Vec<RawJob>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub figures: Arc<Mutex<EngineFigures>>,
}

impl Drop for ParityWorker {
    fn drop(&mut self) {
        // Closing the queue ends the worker's loop once calibration is done.
        self.batches.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ParityWorker {
    /// Starts the worker thread: it calibrates the engines of `mode`, then tells the plane
    /// whether engines should hand their work out.
    pub fn start(
        mode: EngineMode,
        cpu: Arc<tessera_parity::Parity>,
        plane: PlaneHandle,
    ) -> Result<ParityWorker, String> {
        let (batches, receiver) = mpsc::channel();
        let figures = Arc::new(Mutex::new(EngineFigures::default()));
        let shared = figures.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-parity".into())
            .spawn(move || run(mode, cpu, receiver, shared, plane))
            .map_err(|error| format!("cannot start the parity worker: {error}"))?;
        Ok(ParityWorker {
            batches: Some(batches),
            thread: Some(thread),
            figures,
        })
    }

    /// Hands a batch to the worker; gives it back if the worker is gone.
    pub fn submit(&self, jobs: Vec<RawJob>) -> Result<(), Vec<RawJob>> {
        match &self.batches {
            Some(batches) => batches.send(jobs).map_err(|error| error.0),
            None => Err(jobs),
        }
    }
}

/// Whether engines should hand work out, given the mode and the calibrated engines.
pub(crate) fn should_offload(mode: EngineMode, reports: &[ParityEngineReport]) -> bool {
    match mode {
        EngineMode::Cpu => false,
        EngineMode::Gpu => true,
        EngineMode::Auto => reports.iter().any(|report| {
            report.kind == EngineKind::Gpu
                && report.failure.is_none()
                && report.min_batch_bytes.is_some()
        }),
    }
}

/// A submitted batch and what it answers; `_storage` holds the input chunk lists the pending
/// batch points into, and is dropped only after the batch was waited for. `raw` is kept to
/// redo the batch on the CPU if the dispatcher panics.
struct InFlight {
    pending: Pending<'static>,
    raw: Vec<RawJob>,
    data_bytes: u64,
    _storage: Vec<Box<[&'static [u8]]>>,
}

/// What computed a batch, for the figures.
struct Outcome {
    engine: String,
    fell_back: bool,
}

fn run(
    mode: EngineMode,
    cpu: Arc<tessera_parity::Parity>,
    receiver: mpsc::Receiver<Vec<RawJob>>,
    figures: Arc<Mutex<EngineFigures>>,
    plane: PlaneHandle,
) {
    let kernel: Arc<dyn Kernel> = cpu.clone();
    let config = DispatcherConfig {
        mode,
        ..DispatcherConfig::default()
    };
    let mut dispatcher = Dispatcher::new(kernel, &config);
    let reports = dispatcher.reports();
    let offload = should_offload(mode, &reports);
    for report in &reports {
        log!(
            "parity engine {} ({}): {}",
            report.name,
            report.adapter.as_deref().unwrap_or("cpu kernels"),
            match (&report.failure, report.min_batch_bytes) {
                (Some(failure), _) => format!("unusable: {failure}"),
                (None, Some(bytes)) => format!("chosen for batches of {bytes} bytes and more"),
                (None, None) => "never faster than the CPU here".to_string(),
            }
        );
    }
    figures.lock().expect("figures").reports = Some(reports);
    plane.post(move |plane: &mut DataPlane| plane.set_offload_parity(offload));
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    // A dispatcher that panicked is not trusted again: batches go to the CPU kernels here.
    let mut broken = false;
    loop {
        // Block for work only when nothing is in flight; otherwise take what is there and
        // keep at most two batches going.
        let next = if in_flight.is_empty() {
            match receiver.recv() {
                Ok(batch) => Some(batch),
                Err(_) => return,
            }
        } else {
            receiver.try_recv().ok()
        };
        if let Some(batch) = next {
            if broken {
                let data_bytes = batch.iter().map(RawJob::data_bytes).sum();
                finish(
                    &cpu_outcome(&cpu, &batch),
                    batch,
                    data_bytes,
                    &figures,
                    &plane,
                    None,
                );
                continue;
            }
            match submit(&mut dispatcher, batch) {
                Ok(batch) => in_flight.push_back(batch),
                Err(raw) => {
                    broken = true;
                    log!("the parity dispatcher failed; parity continues on the CPU kernels");
                    let data_bytes = raw.iter().map(RawJob::data_bytes).sum();
                    finish(
                        &cpu_outcome(&cpu, &raw),
                        raw,
                        data_bytes,
                        &figures,
                        &plane,
                        None,
                    );
                }
            }
            if in_flight.len() < 2 {
                continue;
            }
        }
        let Some(batch) = in_flight.pop_front() else {
            continue;
        };
        let InFlight {
            pending,
            raw,
            data_bytes,
            _storage,
        } = batch;
        let waited = catch_unwind(AssertUnwindSafe(|| dispatcher.wait(pending)));
        drop(_storage);
        let outcome = match waited {
            Ok(completion) => Outcome {
                engine: completion.engine,
                fell_back: completion.fell_back,
            },
            Err(_) => {
                broken = true;
                log!("the parity dispatcher failed; parity continues on the CPU kernels");
                cpu_outcome(&cpu, &raw)
            }
        };
        let reports = (outcome.fell_back && !broken).then(|| dispatcher.reports());
        finish(&outcome, raw, data_bytes, &figures, &plane, reports);
    }
}

/// Computes a batch on the CPU kernels here (after the dispatcher failed).
fn cpu_outcome(cpu: &tessera_parity::Parity, batch: &[RawJob]) -> Outcome {
    for job in batch {
        run_on_cpu(cpu, job);
    }
    Outcome {
        engine: "cpu".to_string(),
        fell_back: true,
    }
}

/// Counts a computed batch and tells the data plane.
fn finish(
    outcome: &Outcome,
    batch: Vec<RawJob>,
    data_bytes: u64,
    figures: &Mutex<EngineFigures>,
    plane: &PlaneHandle,
    reports: Option<Vec<ParityEngineReport>>,
) {
    {
        let mut figures = figures.lock().expect("figures");
        *figures.batches.entry(outcome.engine.clone()).or_default() += 1;
        *figures.bytes.entry(outcome.engine.clone()).or_default() += data_bytes;
        if outcome.fell_back {
            figures.fallbacks += 1;
        }
        if let Some(reports) = reports {
            figures.reports = Some(reports);
        }
    }
    let finished = Finished {
        jobs: batch.iter().map(|job| (job.group, job.id)).collect(),
    };
    plane.post(move |plane: &mut DataPlane| plane.compute_finished(finished));
}

/// Computes one job with a CPU kernel, on the calling thread.
pub(crate) fn run_on_cpu(kernel: &dyn Kernel, job: &RawJob) {
    let data: Vec<&[u8]> = job.data.iter().map(|chunk| chunk.bytes()).collect();
    let parity: Vec<&[u8]> = job.parity.iter().map(|chunk| chunk.bytes()).collect();
    let stripe = StripeRef {
        operation: job.operation,
        data: &data,
        parity: &parity,
    };
    let mut output = StripeOutput {
        first: job.first.bytes_mut(),
        second: job.second.map(RawChunk::bytes_mut),
    };
    tessera_parity_gpu::run_on_cpu(kernel, &stripe, &mut output);
}

/// Submits a batch; gives it back if the dispatcher panicked.
fn submit(dispatcher: &mut Dispatcher, batch: Vec<RawJob>) -> Result<InFlight, Vec<RawJob>> {
    let mut storage: Vec<Box<[&'static [u8]]>> = Vec::with_capacity(batch.len() * 2);
    let mut jobs = Vec::with_capacity(batch.len());
    let mut data_bytes = 0u64;
    for job in &batch {
        let data: Box<[&'static [u8]]> = job.data.iter().map(|chunk| chunk.bytes()).collect();
        let parity: Box<[&'static [u8]]> = job.parity.iter().map(|chunk| chunk.bytes()).collect();
        // SAFETY: the boxes' contents never move (a Box's heap block stays put when the Box is
        // moved into `storage`), are never written, and `storage` outlives the pending batch
        // (dropped only after `wait`).
        let (data_ref, parity_ref): (&'static [&'static [u8]], &'static [&'static [u8]]) = unsafe {
            (
                std::slice::from_raw_parts(data.as_ptr(), data.len()),
                std::slice::from_raw_parts(parity.as_ptr(), parity.len()),
            )
        };
        storage.push(data);
        storage.push(parity);
        let stripe = StripeRef {
            operation: job.operation,
            data: data_ref,
            parity: parity_ref,
        };
        data_bytes += stripe.data_bytes() as u64;
        jobs.push(Job {
            stripe,
            output: StripeOutput {
                first: job.first.bytes_mut(),
                second: job.second.map(RawChunk::bytes_mut),
            },
        });
    }
    match catch_unwind(AssertUnwindSafe(|| dispatcher.submit(jobs))) {
        Ok(pending) => Ok(InFlight {
            pending,
            raw: batch,
            data_bytes,
            _storage: storage,
        }),
        Err(_) => Err(batch),
    }
}
