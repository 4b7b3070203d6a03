//! The dispatcher: routes each batch of stripes to the CPU kernels or to a GPU, whichever is
//! predicted to finish it soonest given what is already queued on it, and answers every batch
//! even when a GPU fails (on the CPU, for that batch and every later one).
//!
//! The routing decision is the pure function [`route`], tested on its own; the rest is
//! bookkeeping: an estimate of when each GPU's queue drains, and the fallback.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_parity::Kernel;

use crate::adapter::list_adapters;
use crate::calibrate::{CalibrationConfig, calibrate_cpu, calibrate_gpu};
use crate::engine::{EngineConfig, GpuEngine, Ticket};
use crate::report::{EngineKind, ParityEngineReport, ThroughputModel, crossover_bytes};
use crate::stripe::{StripeOutput, StripeRef, run_on_cpu};

/// Which engines may compute parity (`tessera serve --parity-engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EngineMode {
    /// Always the CPU kernels.
    Cpu,
    /// Always a GPU while one works (the CPU only when none does, or every slot is busy).
    Gpu,
    /// Whichever is predicted to finish each batch soonest.
    #[default]
    Auto,
}

impl EngineMode {
    /// `cpu`, `gpu` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            EngineMode::Cpu => "cpu",
            EngineMode::Gpu => "gpu",
            EngineMode::Auto => "auto",
        }
    }
}

impl fmt::Display for EngineMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineMode {
    type Err = String;

    fn from_str(text: &str) -> Result<EngineMode, String> {
        match text {
            "cpu" => Ok(EngineMode::Cpu),
            "gpu" => Ok(EngineMode::Gpu),
            "auto" => Ok(EngineMode::Auto),
            other => Err(format!(
                "unknown parity engine {other:?} (expected cpu, gpu or auto)"
            )),
        }
    }
}

/// How the dispatcher is set up.
#[derive(Clone, Debug, Default)]
pub struct DispatcherConfig {
    /// Which engines may run.
    pub mode: EngineMode,
    /// How each GPU engine is opened.
    pub engine: EngineConfig,
    /// What start-up calibration measures.
    pub calibration: CalibrationConfig,
}

/// One candidate engine for [`route`]: when its queue is predicted to drain, and its model.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// Seconds until the work already queued on it is done.
    pub queued_seconds: f64,
    /// Its calibrated throughput.
    pub model: &'a ThroughputModel,
}

/// The index of the candidate that finishes a batch of `batch_bytes` soonest (queued work plus
/// predicted time); the first one on a tie. `None` without candidates.
pub fn route(candidates: &[Candidate<'_>], batch_bytes: u64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (index, candidate) in candidates.iter().enumerate() {
        let finish = candidate.queued_seconds.max(0.0) + candidate.model.seconds(batch_bytes);
        if best.is_none_or(|(_, best_finish)| finish < best_finish) {
            best = Some((index, finish));
        }
    }
    best.map(|(index, _)| index)
}

/// One stripe of a batch and where its results go.
#[derive(Debug)]
pub struct Job<'a> {
    /// The inputs.
    pub stripe: StripeRef<'a>,
    /// The outputs.
    pub output: StripeOutput<'a>,
}

/// A batch handed to [`Dispatcher::submit`]: done already (CPU), or in flight on a GPU. It
/// holds the inputs until [`Dispatcher::wait`] so that a failed GPU batch can be redone on the
/// CPU.
#[must_use = "a batch must be waited for to get its outputs"]
pub struct Pending<'a> {
    jobs: Vec<Job<'a>>,
    state: PendingState,
}

enum PendingState {
    Done(Completion),
    OnGpu { gpu: usize, ticket: Ticket },
}

/// Who computed a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The engine's report name (`cpu`, `gpu0`, ...).
    pub engine: String,
    /// Whether a GPU was meant to compute it and failed, so the CPU did.
    pub fell_back: bool,
}

impl Completion {
    fn cpu(fell_back: bool) -> Completion {
        Completion {
            engine: "cpu".to_string(),
            fell_back,
        }
    }
}

struct GpuState {
    engine: GpuEngine,
    report: ParityEngineReport,
    model: ThroughputModel,
    /// When the work queued on it is predicted to be done.
    busy_until: Instant,
}

/// Routes batches to the CPU kernels or a GPU. See the module documentation.
pub struct Dispatcher {
    mode: EngineMode,
    cpu: Arc<dyn Kernel>,
    cpu_report: ParityEngineReport,
    cpu_model: ThroughputModel,
    gpus: Vec<GpuState>,
    /// GPUs that could not be opened or calibrated (reported, never used).
    unusable: Vec<ParityEngineReport>,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("mode", &self.mode)
            .field("engines", &self.reports())
            .finish()
    }
}

fn gpu_name(index: usize) -> String {
    format!("gpu{index}")
}

impl Dispatcher {
    /// Opens and calibrates every GPU adapter (none in `cpu` mode) and the CPU kernel `cpu`. A
    /// GPU that fails to open or calibrate is reported with its failure and never used.
    pub fn new(cpu: Arc<dyn Kernel>, config: &DispatcherConfig) -> Dispatcher {
        let mut engines = Vec::new();
        let mut unusable = Vec::new();
        if config.mode != EngineMode::Cpu {
            for adapter in list_adapters() {
                match GpuEngine::open(adapter.index, config.engine.clone()) {
                    Ok(engine) => engines.push(engine),
                    Err(error) => unusable.push(ParityEngineReport {
                        name: gpu_name(adapter.index),
                        kind: EngineKind::Gpu,
                        adapter: Some(adapter.name.clone()),
                        submit_latency_us: None,
                        calibration: Vec::new(),
                        min_batch_bytes: None,
                        failure: Some(error.to_string()),
                    }),
                }
            }
        }
        let mut dispatcher =
            Dispatcher::with_engines(cpu, engines, config.mode, &config.calibration);
        dispatcher.unusable.extend(unusable);
        dispatcher
    }

    /// A dispatcher over already opened GPU engines (tests open them with faults or limits).
    pub fn with_engines(
        cpu: Arc<dyn Kernel>,
        engines: Vec<GpuEngine>,
        mode: EngineMode,
        calibration: &CalibrationConfig,
    ) -> Dispatcher {
        let cpu_points = calibrate_cpu(cpu.as_ref(), calibration);
        let cpu_model = ThroughputModel::new(&cpu_points, 0.0);
        let cpu_report = ParityEngineReport {
            name: "cpu".to_string(),
            kind: EngineKind::Cpu,
            adapter: None,
            submit_latency_us: None,
            calibration: cpu_points,
            min_batch_bytes: Some(0),
            failure: None,
        };
        let mut gpus = Vec::new();
        let mut unusable = Vec::new();
        for mut engine in engines {
            let name = gpu_name(engine.adapter().index);
            let adapter = Some(engine.adapter().name.clone());
            match calibrate_gpu(&mut engine, calibration) {
                Ok((latency, points)) => {
                    let model = ThroughputModel::new(&points, latency.as_secs_f64());
                    let report = ParityEngineReport {
                        name,
                        kind: EngineKind::Gpu,
                        adapter,
                        submit_latency_us: Some(latency.as_secs_f64() * 1e6),
                        calibration: points,
                        min_batch_bytes: crossover_bytes(&cpu_model, &model),
                        failure: None,
                    };
                    gpus.push(GpuState {
                        engine,
                        report,
                        model,
                        busy_until: Instant::now(),
                    });
                }
                Err(error) => unusable.push(ParityEngineReport {
                    name,
                    kind: EngineKind::Gpu,
                    adapter,
                    submit_latency_us: None,
                    calibration: Vec::new(),
                    min_batch_bytes: None,
                    failure: Some(error.to_string()),
                }),
            }
        }
        Dispatcher {
            mode,
            cpu,
            cpu_report,
            cpu_model,
            gpus,
            unusable,
        }
    }

    /// The configured mode.
    pub fn mode(&self) -> EngineMode {
        self.mode
    }

    /// Every engine: the CPU first, then each GPU (failed ones with their failure).
    pub fn reports(&self) -> Vec<ParityEngineReport> {
        let mut reports = vec![self.cpu_report.clone()];
        for gpu in &self.gpus {
            let mut report = gpu.report.clone();
            report.failure = gpu.engine.failure().map(ToString::to_string);
            reports.push(report);
        }
        reports.extend(self.unusable.iter().cloned());
        reports
    }

    /// The smallest batch any GPU takes over from the idle CPU in `auto` mode, if any.
    pub fn routing_threshold_bytes(&self) -> Option<u64> {
        self.gpus
            .iter()
            .filter(|gpu| gpu.engine.failure().is_none())
            .filter_map(|gpu| gpu.report.min_batch_bytes)
            .min()
    }

    /// GPU engine `index` (in the order of `reports()` after the CPU), for fault injection.
    pub fn gpu_engine_mut(&mut self, index: usize) -> Option<&mut GpuEngine> {
        self.gpus.get_mut(index).map(|gpu| &mut gpu.engine)
    }

    /// Where a batch of `batch_bytes` goes now: `None` for the CPU, else a GPU index.
    fn choose(&self, batch_bytes: u64) -> Option<usize> {
        let now = Instant::now();
        let usable: Vec<usize> = (0..self.gpus.len())
            .filter(|&i| {
                let engine = &self.gpus[i].engine;
                engine.failure().is_none() && engine.has_free_slot()
            })
            .collect();
        let queued = |i: usize| {
            self.gpus[i]
                .busy_until
                .saturating_duration_since(now)
                .as_secs_f64()
        };
        let mut candidates: Vec<Candidate<'_>> = Vec::new();
        if self.mode == EngineMode::Auto {
            // The CPU computes inline, in the caller's thread: nothing is ever queued on it.
            candidates.push(Candidate {
                queued_seconds: 0.0,
                model: &self.cpu_model,
            });
        }
        if self.mode != EngineMode::Cpu {
            candidates.extend(usable.iter().map(|&i| Candidate {
                queued_seconds: queued(i),
                model: &self.gpus[i].model,
            }));
        }
        let offset = usize::from(self.mode == EngineMode::Auto);
        match route(&candidates, batch_bytes) {
            Some(index) if index >= offset => Some(usable[index - offset]),
            _ => None,
        }
    }

    fn run_on_cpu(&self, jobs: &mut [Job<'_>]) {
        for job in jobs {
            run_on_cpu(self.cpu.as_ref(), &job.stripe, &mut job.output);
        }
    }

    /// Starts a batch: computes it on the CPU now, or submits it to a GPU. Never fails: a GPU
    /// that refuses the batch is put out of service and the CPU computes it.
    pub fn submit<'a>(&mut self, mut jobs: Vec<Job<'a>>) -> Pending<'a> {
        let mut batch_bytes = 0u64;
        for job in &jobs {
            job.output.check(&job.stripe);
            batch_bytes += job.stripe.data_bytes() as u64;
        }
        let Some(gpu) = self.choose(batch_bytes) else {
            // `gpu` mode with no usable GPU is a fallback too.
            let fell_back = self.mode == EngineMode::Gpu;
            self.run_on_cpu(&mut jobs);
            return Pending {
                jobs,
                state: PendingState::Done(Completion::cpu(fell_back)),
            };
        };
        let stripes: Vec<StripeRef<'a>> = jobs.iter().map(|job| job.stripe).collect();
        let state = &mut self.gpus[gpu];
        match state.engine.submit(&stripes) {
            Ok(ticket) => {
                let start = state.busy_until.max(Instant::now());
                let predicted = state.model.seconds(batch_bytes).min(3600.0);
                state.busy_until = start + Duration::from_secs_f64(predicted);
                Pending {
                    jobs,
                    state: PendingState::OnGpu { gpu, ticket },
                }
            }
            Err(error) => {
                self.gpu_failed(gpu, &error);
                self.run_on_cpu(&mut jobs);
                Pending {
                    jobs,
                    state: PendingState::Done(Completion::cpu(true)),
                }
            }
        }
    }

    /// Finishes a batch: its outputs are all written when this returns, by the GPU or (if the
    /// GPU failed) by the CPU.
    pub fn wait(&mut self, pending: Pending<'_>) -> Completion {
        let Pending { mut jobs, state } = pending;
        match state {
            PendingState::Done(completion) => completion,
            PendingState::OnGpu { gpu, ticket } => {
                let result = {
                    let mut outputs: Vec<StripeOutput<'_>> = jobs
                        .iter_mut()
                        .map(|job| StripeOutput {
                            first: &mut *job.output.first,
                            second: job.output.second.as_deref_mut(),
                        })
                        .collect();
                    self.gpus[gpu].engine.wait(ticket, &mut outputs)
                };
                let state = &mut self.gpus[gpu];
                if state.engine.in_flight() == 0 {
                    state.busy_until = Instant::now();
                }
                match result {
                    Ok(()) => Completion {
                        engine: state.report.name.clone(),
                        fell_back: false,
                    },
                    Err(error) => {
                        self.gpu_failed(gpu, &error);
                        self.run_on_cpu(&mut jobs);
                        Completion::cpu(true)
                    }
                }
            }
        }
    }

    /// `submit` then `wait`.
    pub fn run(&mut self, jobs: Vec<Job<'_>>) -> Completion {
        let pending = self.submit(jobs);
        self.wait(pending)
    }

    fn gpu_failed(&mut self, gpu: usize, error: &crate::GpuError) {
        let state = &self.gpus[gpu];
        // The engine latched the error; say once that parity moved to the CPU.
        if state.report.failure.is_none() {
            eprintln!(
                "tessera: parity engine {} ({}) failed: {error}; parity continues on the CPU",
                state.report.name,
                state.report.adapter.as_deref().unwrap_or("?")
            );
        }
        let state = &mut self.gpus[gpu];
        state
            .report
            .failure
            .get_or_insert_with(|| error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::CalibrationPoint;

    fn flat(gbps: f64, fixed_seconds: f64) -> ThroughputModel {
        let points: Vec<CalibrationPoint> = [1u64 << 16, 1 << 26]
            .iter()
            .map(|&batch_bytes| {
                let seconds = fixed_seconds + batch_bytes as f64 / (gbps * 1e9);
                CalibrationPoint {
                    batch_bytes,
                    gbps: batch_bytes as f64 / seconds / 1e9,
                }
            })
            .collect();
        ThroughputModel::new(&points, fixed_seconds)
    }

    #[test]
    fn route_picks_the_soonest_finish() {
        let cpu = flat(10.0, 0.0);
        let gpu = flat(40.0, 100e-6);
        let idle = |model| Candidate {
            queued_seconds: 0.0,
            model,
        };
        // 64 KiB: CPU 6.6 us, GPU 101.6 us. 64 MiB: CPU 6.7 ms, GPU 1.8 ms.
        assert_eq!(route(&[idle(&cpu), idle(&gpu)], 1 << 16), Some(0));
        assert_eq!(route(&[idle(&cpu), idle(&gpu)], 1 << 26), Some(1));
        // The same big batch behind 10 ms of queued GPU work: the CPU is sooner.
        let busy = Candidate {
            queued_seconds: 0.010,
            model: &gpu,
        };
        assert_eq!(route(&[idle(&cpu), busy], 1 << 26), Some(0));
        // Two GPUs: the idle one.
        assert_eq!(route(&[busy, idle(&gpu)], 1 << 26), Some(1));
        assert_eq!(route(&[], 1), None);
        // A tie goes to the first.
        assert_eq!(route(&[idle(&cpu), idle(&cpu)], 1 << 20), Some(0));
    }

    #[test]
    fn modes_parse_and_print() {
        for mode in [EngineMode::Cpu, EngineMode::Gpu, EngineMode::Auto] {
            assert_eq!(mode.name().parse::<EngineMode>(), Ok(mode));
        }
        assert!("GPU".parse::<EngineMode>().is_err());
        assert_eq!(EngineMode::default(), EngineMode::Auto);
    }
}
