//! Start-up selection of the fastest kernel for each operation, as Linux times its raid6
//! `gen()` functions at boot: every candidate runs each operation for a short trial on
//! cache-resident buffers, and the fastest wins. Configuration or the `TESSERA_PARITY_KERNEL`
//! environment variable can force one kernel for everything instead. [`Parity`] then implements
//! [`Kernel`] by delegating each operation to its chosen kernel.
//!
//! Timing happens on cache-resident buffers, where non-temporal stores lose, so the `-nt`
//! variants are not candidates. [`Parity::streaming`] offers, per operation, the `-nt` variant
//! of the chosen kernel: for callers whose inputs come from DRAM and whose outputs are not read
//! again soon (rebuild, parity written straight to a device).

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::registry::{STREAMING_SUFFIX, streaming_variant};
use crate::{Kernel, ParityError, available_kernels, kernel_by_name};

/// Environment variable that forces one kernel by name (unless the configuration does).
pub const KERNEL_ENVIRONMENT_VARIABLE: &str = "TESSERA_PARITY_KERNEL";

/// The operations a kernel is chosen for, one per [`Kernel`] method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// [`Kernel::xor_gen`].
    XorGen,
    /// [`Kernel::pq_gen`].
    PqGen,
    /// [`Kernel::p_update`].
    PUpdate,
    /// [`Kernel::pq_update`].
    PqUpdate,
    /// [`Kernel::recover_data_p`].
    RecoverDataP,
    /// [`Kernel::recover_data_q`].
    RecoverDataQ,
    /// [`Kernel::recover_two_data`].
    RecoverTwoData,
}

impl Operation {
    /// Every operation, in report order.
    pub const ALL: [Operation; 7] = [
        Operation::XorGen,
        Operation::PqGen,
        Operation::PUpdate,
        Operation::PqUpdate,
        Operation::RecoverDataP,
        Operation::RecoverDataQ,
        Operation::RecoverTwoData,
    ];

    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            Operation::XorGen => "xor_gen",
            Operation::PqGen => "pq_gen",
            Operation::PUpdate => "p_update",
            Operation::PqUpdate => "pq_update",
            Operation::RecoverDataP => "recover_data_p",
            Operation::RecoverDataQ => "recover_data_q",
            Operation::RecoverTwoData => "recover_two_data",
        }
    }

    fn index(self) -> usize {
        Operation::ALL
            .iter()
            .position(|&op| op == self)
            .expect("listed")
    }
}

/// How the kernels are chosen.
#[derive(Clone, Debug)]
pub struct SelectionConfig {
    /// Use this kernel for every operation. Wins over the environment variable.
    pub kernel: Option<String>,
    /// Whether `TESSERA_PARITY_KERNEL`, when set and non-empty, forces a kernel.
    pub use_environment: bool,
    /// How long each candidate kernel runs each operation on each trial stripe shape.
    pub trial_time: Duration,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        SelectionConfig {
            kernel: None,
            use_environment: true,
            trial_time: Duration::from_millis(1),
        }
    }
}

/// Where the choice came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChoiceSource {
    /// Timed at start-up: the fastest candidate per operation.
    Measured,
    /// Forced by `SelectionConfig::kernel`.
    Config,
    /// Forced by the `TESSERA_PARITY_KERNEL` environment variable.
    Environment,
}

/// One candidate's speed on one operation during selection.
#[derive(Clone, Debug, Serialize)]
pub struct KernelSpeed {
    /// Kernel name.
    pub kernel: &'static str,
    /// GB/s (10^9 bytes per second) of data chunks, cache-resident, one core.
    pub gbps: f64,
}

/// The kernel chosen for one operation, and why.
#[derive(Clone, Debug, Serialize)]
pub struct OperationChoice {
    /// The operation.
    pub operation: Operation,
    /// The chosen kernel's name.
    pub kernel: &'static str,
    /// The kernel used by [`Parity::streaming`] for this operation.
    pub streaming_kernel: &'static str,
    /// Every candidate's measured speed (empty when the kernel was forced).
    pub speeds: Vec<KernelSpeed>,
}

/// What selection chose, printable and serializable for `tessera info` and logs.
#[derive(Clone, Debug, Serialize)]
pub struct SelectionReport {
    /// Where the choice came from.
    pub source: ChoiceSource,
    /// Data chunks of the largest stripe timed during selection (a stripe of 4 is timed too).
    pub trial_data_chunks: usize,
    /// Bytes per chunk of the stripe timed during selection.
    pub trial_chunk_bytes: usize,
    /// One entry per operation, in `Operation::ALL` order.
    pub choices: Vec<OperationChoice>,
}

impl fmt::Display for SelectionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            ChoiceSource::Measured => writeln!(
                f,
                "parity kernels chosen by timing (4+2 and {}+2 stripes, {} KiB chunks, cache-resident, GB/s of data):",
                self.trial_data_chunks,
                self.trial_chunk_bytes >> 10
            )?,
            ChoiceSource::Config => writeln!(f, "parity kernel forced by configuration:")?,
            ChoiceSource::Environment => {
                writeln!(f, "parity kernel forced by {KERNEL_ENVIRONMENT_VARIABLE}:")?
            }
        }
        for choice in &self.choices {
            write!(
                f,
                "  {:<17} {:<7} (streaming: {:<9})",
                choice.operation.name(),
                choice.kernel,
                choice.streaming_kernel
            )?;
            for speed in &choice.speeds {
                write!(f, "  {} {:.1}", speed.kernel, speed.gbps)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// One kernel per operation; implements [`Kernel`] by delegating each operation to its kernel.
#[derive(Clone, Copy)]
pub struct KernelSet {
    kernels: [&'static dyn Kernel; Operation::ALL.len()],
}

impl KernelSet {
    /// The kernel for `operation`.
    pub fn kernel(&self, operation: Operation) -> &'static dyn Kernel {
        self.kernels[operation.index()]
    }

    fn streaming(&self) -> KernelSet {
        KernelSet {
            kernels: self.kernels.map(streaming_variant),
        }
    }
}

impl fmt::Debug for KernelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.kernels.iter().map(|kernel| kernel.name()))
            .finish()
    }
}

/// The parity operations, each delegated to the kernel chosen for it at construction.
pub struct Parity {
    cached: KernelSet,
    streaming: KernelSet,
    report: SelectionReport,
}

impl fmt::Debug for Parity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parity")
            .field("report", &self.report)
            .finish()
    }
}

/// Shape of the stripe timed during selection: large enough for the vector loops' steady state,
/// small enough (8 x 64 KiB data, 4 x 64 KiB parity and outputs) to stay in a 1 MiB L2 cache.
/// 64 KiB is also the usual RAID chunk size.
const TRIAL_DATA_CHUNKS: usize = 8;
const TRIAL_CHUNK_BYTES: usize = 64 << 10;

/// Data chunk counts timed (4+2 and 8+2 stripes), each for `trial_time`.
const TRIAL_SHAPES: [usize; 2] = [4, TRIAL_DATA_CHUNKS];

/// Shortest timed batch of calls during selection.
const BATCH_TIME: Duration = Duration::from_micros(50);

impl Parity {
    /// Chooses kernels as `config` says: a forced kernel (configuration, then environment), or
    /// the fastest candidate per operation by timing. Fails if a forced name is unknown or its
    /// kernel unavailable on this CPU.
    pub fn select(config: &SelectionConfig) -> Result<Parity, ParityError> {
        let environment = config
            .use_environment
            .then(|| std::env::var(KERNEL_ENVIRONMENT_VARIABLE).ok())
            .flatten();
        Parity::select_with_environment(config, environment)
    }

    /// `select` with the environment variable's value passed in (tests cannot safely set
    /// process environment variables while other tests run).
    fn select_with_environment(
        config: &SelectionConfig,
        environment: Option<String>,
    ) -> Result<Parity, ParityError> {
        let environment = environment.filter(|name| !name.trim().is_empty());
        let forced = match (&config.kernel, environment) {
            (Some(name), _) => Some((name.clone(), ChoiceSource::Config)),
            (None, Some(name)) => Some((name.trim().to_string(), ChoiceSource::Environment)),
            (None, None) => None,
        };
        if let Some((name, source)) = forced {
            let kernel = kernel_by_name(&name)?;
            return Ok(Parity::forced(kernel, source));
        }
        Ok(Parity::measured(config.trial_time))
    }

    /// Every operation on `kernel`.
    pub fn with_kernel(kernel: &'static dyn Kernel) -> Parity {
        Parity::forced(kernel, ChoiceSource::Config)
    }

    fn forced(kernel: &'static dyn Kernel, source: ChoiceSource) -> Parity {
        let choices = Operation::ALL
            .iter()
            .map(|&operation| OperationChoice {
                operation,
                kernel: kernel.name(),
                streaming_kernel: kernel.name(),
                speeds: Vec::new(),
            })
            .collect();
        let kernels = KernelSet {
            kernels: [kernel; Operation::ALL.len()],
        };
        Parity {
            cached: kernels,
            streaming: kernels,
            report: SelectionReport {
                source,
                trial_data_chunks: 0,
                trial_chunk_bytes: 0,
                choices,
            },
        }
    }

    fn measured(trial_time: Duration) -> Parity {
        // The naive kernel is the test oracle: never a candidate (scalar always beats it). The
        // `-nt` variants lose on cache-resident buffers by design: they serve `streaming`.
        let candidates: Vec<&'static dyn Kernel> = available_kernels()
            .into_iter()
            .filter(|kernel| kernel.name() != "naive" && !kernel.name().ends_with(STREAMING_SUFFIX))
            .collect();
        assert!(
            !candidates.is_empty(),
            "the scalar kernel is always available"
        );
        let mut trial = Trial::new();
        let mut kernels = [candidates[0]; Operation::ALL.len()];
        let mut choices = Vec::new();
        for operation in Operation::ALL {
            let speeds: Vec<KernelSpeed> = candidates
                .iter()
                .map(|&kernel| KernelSpeed {
                    kernel: kernel.name(),
                    gbps: trial.gbps(kernel, operation, trial_time),
                })
                .collect();
            let fastest = fastest_candidate(&speeds, &candidates);
            kernels[operation.index()] = fastest;
            choices.push(OperationChoice {
                operation,
                kernel: fastest.name(),
                streaming_kernel: streaming_variant(fastest).name(),
                speeds,
            });
        }
        let cached = KernelSet { kernels };
        Parity {
            cached,
            streaming: cached.streaming(),
            report: SelectionReport {
                source: ChoiceSource::Measured,
                trial_data_chunks: TRIAL_DATA_CHUNKS,
                trial_chunk_bytes: TRIAL_CHUNK_BYTES,
                choices,
            },
        }
    }

    /// The kernel chosen for `operation` (the one `Parity`'s own `Kernel` methods use).
    pub fn kernel(&self, operation: Operation) -> &'static dyn Kernel {
        self.cached.kernel(operation)
    }

    /// The kernels to use when inputs come from DRAM and outputs are not read again soon: the
    /// non-temporal-store variant of each chosen kernel (the chosen kernel itself if it has
    /// none, or if the kernel was forced).
    pub fn streaming(&self) -> &KernelSet {
        &self.streaming
    }

    /// What was chosen and the measured speeds.
    pub fn report(&self) -> &SelectionReport {
        &self.report
    }
}

/// Candidates within this fraction of the best measured speed count as tied: the measurement
/// cannot tell them apart on a shared machine.
const TIE_FRACTION: f64 = 0.97;

/// The fastest candidate; among those tied with it, the most specialised (the last in
/// `KERNEL_NAMES` order), which is the one expected to win on the real workload.
fn fastest_candidate(
    speeds: &[KernelSpeed],
    candidates: &[&'static dyn Kernel],
) -> &'static dyn Kernel {
    let best = speeds.iter().map(|speed| speed.gbps).fold(0.0, f64::max);
    speeds
        .iter()
        .zip(candidates)
        .rev()
        .find(|(speed, _)| speed.gbps >= best * TIE_FRACTION)
        .map(|(_, &kernel)| kernel)
        .expect("at least one candidate")
}

/// The buffers timed during selection (allocated once, for all trials).
struct Trial {
    /// Data chunks, P, Q and two outputs, one after the other, 64-byte aligned (I/O buffers are
    /// page-aligned; a misaligned buffer splits every vector load across two cache lines and
    /// would time something else).
    storage: Vec<u8>,
    start: usize,
}

/// Buffers in the trial stripe: data chunks, P, Q, two outputs.
const TRIAL_BUFFERS: usize = TRIAL_DATA_CHUNKS + 4;

impl Trial {
    fn new() -> Trial {
        let mut storage = vec![0u8; TRIAL_BUFFERS * TRIAL_CHUNK_BYTES + 64];
        let start = (64 - storage.as_ptr() as usize % 64) % 64;
        for (i, byte) in storage.iter_mut().enumerate() {
            *byte = (i.wrapping_mul(31) ^ (i >> 12).wrapping_mul(131)) as u8;
        }
        Trial { storage, start }
    }

    /// One call of `operation` on `kernel`, on a stripe of the first `data_chunks` data chunks.
    fn call(&mut self, kernel: &dyn Kernel, operation: Operation, data_chunks: usize) {
        let bytes = &mut self.storage[self.start..self.start + TRIAL_BUFFERS * TRIAL_CHUNK_BYTES];
        let (data_bytes, rest) = bytes.split_at_mut(TRIAL_DATA_CHUNKS * TRIAL_CHUNK_BYTES);
        let [p, q, out_first, out_second]: [&mut [u8]; 4] = rest
            .chunks_mut(TRIAL_CHUNK_BYTES)
            .collect::<Vec<_>>()
            .try_into()
            .expect("four buffers");
        let mut chunks = data_bytes.chunks(TRIAL_CHUNK_BYTES);
        let data: [&[u8]; TRIAL_DATA_CHUNKS] =
            std::array::from_fn(|_| chunks.next().expect("data chunk"));
        let data = &data[..data_chunks];
        let (x, y) = (1, data_chunks - 1);
        match operation {
            Operation::XorGen => kernel.xor_gen(data, p),
            Operation::PqGen => kernel.pq_gen(data, p, q),
            Operation::PUpdate => kernel.p_update(&data[..1], &data[1..2], p),
            Operation::PqUpdate => kernel.pq_update(y, &data[..1], &data[1..2], p, q),
            Operation::RecoverDataP => {
                kernel.recover_data_p(data, x, q, out_first, Some(out_second))
            }
            Operation::RecoverDataQ => {
                kernel.recover_data_q(data, x, p, out_first, Some(out_second))
            }
            Operation::RecoverTwoData => {
                kernel.recover_two_data(data, x, y, p, q, out_first, out_second)
            }
        }
    }

    /// GB/s of data chunks of `operation` on `kernel`: for each trial stripe shape, the fastest
    /// call (averaged over a batch) within `trial_time`; then all data bytes over the sum of
    /// those times, so that every shape weighs in.
    fn gbps(&mut self, kernel: &dyn Kernel, operation: Operation, trial_time: Duration) -> f64 {
        let mut total_bytes = 0;
        let mut total_time = Duration::ZERO;
        for data_chunks in TRIAL_SHAPES {
            total_time += self.fastest_call(kernel, operation, data_chunks, trial_time);
            total_bytes += match operation {
                Operation::PUpdate | Operation::PqUpdate => TRIAL_CHUNK_BYTES,
                _ => data_chunks * TRIAL_CHUNK_BYTES,
            };
        }
        total_bytes as f64 / total_time.as_secs_f64().max(1e-9) / 1e9
    }

    fn fastest_call(
        &mut self,
        kernel: &dyn Kernel,
        operation: Operation,
        data_chunks: usize,
        trial_time: Duration,
    ) -> Duration {
        // Size a batch to last at least BATCH_TIME: the clock of a virtual machine can tick in
        // steps of a microsecond or more, as long as a whole call.
        let started = Instant::now();
        let mut batch = 0u32;
        // At least one call: a thread descheduled before the first check would otherwise
        // leave an empty batch (and a division by zero below).
        loop {
            self.call(kernel, operation, data_chunks);
            batch += 1;
            if started.elapsed() >= BATCH_TIME {
                break;
            }
        }
        let deadline = Instant::now() + trial_time;
        let mut best = Duration::MAX;
        loop {
            let started = Instant::now();
            for _ in 0..batch {
                self.call(kernel, operation, data_chunks);
            }
            best = best.min(started.elapsed() / batch);
            if Instant::now() >= deadline {
                break;
            }
        }
        best
    }
}

impl Kernel for KernelSet {
    /// Always `"selected"`: ask [`KernelSet::kernel`] for the kernel behind an operation.
    fn name(&self) -> &'static str {
        "selected"
    }

    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
        self.kernel(Operation::XorGen).xor_gen(sources, dest)
    }

    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.kernel(Operation::PqGen).pq_gen(data, p, q)
    }

    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
        self.kernel(Operation::PUpdate).p_update(old, new, p)
    }

    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.kernel(Operation::PqUpdate)
            .pq_update(start, old, new, p, q)
    }

    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        out_p: Option<&mut [u8]>,
    ) {
        self.kernel(Operation::RecoverDataP)
            .recover_data_p(data, x, q, out_data, out_p)
    }

    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        out_q: Option<&mut [u8]>,
    ) {
        self.kernel(Operation::RecoverDataQ)
            .recover_data_q(data, x, p, out_data, out_q)
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
        self.kernel(Operation::RecoverTwoData)
            .recover_two_data(data, x, y, p, q, out_x, out_y)
    }
}

/// Delegates to the cached-store choices; see [`Parity::streaming`] for the others.
impl Kernel for Parity {
    fn name(&self) -> &'static str {
        self.cached.name()
    }

    fn xor_gen(&self, sources: &[&[u8]], dest: &mut [u8]) {
        self.cached.xor_gen(sources, dest)
    }

    fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.cached.pq_gen(data, p, q)
    }

    fn p_update(&self, old: &[&[u8]], new: &[&[u8]], p: &mut [u8]) {
        self.cached.p_update(old, new, p)
    }

    fn pq_update(&self, start: usize, old: &[&[u8]], new: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.cached.pq_update(start, old, new, p, q)
    }

    fn recover_data_p(
        &self,
        data: &[&[u8]],
        x: usize,
        q: &[u8],
        out_data: &mut [u8],
        out_p: Option<&mut [u8]>,
    ) {
        self.cached.recover_data_p(data, x, q, out_data, out_p)
    }

    fn recover_data_q(
        &self,
        data: &[&[u8]],
        x: usize,
        p: &[u8],
        out_data: &mut [u8],
        out_q: Option<&mut [u8]>,
    ) {
        self.cached.recover_data_q(data, x, p, out_data, out_q)
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
        self.cached.recover_two_data(data, x, y, p, q, out_x, out_y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> SelectionConfig {
        SelectionConfig {
            kernel: None,
            use_environment: false,
            trial_time: Duration::from_micros(200),
        }
    }

    #[test]
    fn measured_selection_picks_a_fastest_candidate() {
        let parity = Parity::select(&quick()).expect("no forcing");
        let report = parity.report();
        assert_eq!(report.source, ChoiceSource::Measured);
        assert_eq!(report.choices.len(), Operation::ALL.len());
        for choice in &report.choices {
            assert_eq!(parity.kernel(choice.operation).name(), choice.kernel);
            assert_eq!(
                parity.streaming().kernel(choice.operation).name(),
                choice.streaming_kernel
            );
            let best = choice
                .speeds
                .iter()
                .map(|speed| speed.gbps)
                .fold(0.0, f64::max);
            let chosen = choice
                .speeds
                .iter()
                .find(|speed| speed.kernel == choice.kernel)
                .expect("the chosen kernel was timed");
            assert!(chosen.gbps >= best * TIE_FRACTION);
            assert!(choice.speeds.iter().all(|speed| speed.gbps > 0.0));
            assert!(choice.speeds.iter().all(|speed| speed.kernel != "naive"));
            assert!(
                choice
                    .speeds
                    .iter()
                    .all(|speed| !speed.kernel.ends_with("-nt"))
            );
        }
        // The report prints one line per operation after its heading.
        assert_eq!(report.to_string().lines().count(), 1 + Operation::ALL.len());
    }

    #[test]
    fn configuration_wins_over_environment() {
        let config = SelectionConfig {
            kernel: Some("naive".to_string()),
            ..quick()
        };
        let parity = Parity::select_with_environment(&config, Some("scalar".to_string()))
            .expect("naive exists");
        assert_eq!(parity.report().source, ChoiceSource::Config);
        for operation in Operation::ALL {
            assert_eq!(parity.kernel(operation).name(), "naive");
            assert_eq!(parity.streaming().kernel(operation).name(), "naive");
        }
    }

    #[test]
    fn environment_forces_a_kernel() {
        let parity = Parity::select_with_environment(&quick(), Some(" scalar ".to_string()))
            .expect("scalar exists");
        assert_eq!(parity.report().source, ChoiceSource::Environment);
        assert!(
            Operation::ALL
                .iter()
                .all(|&op| parity.kernel(op).name() == "scalar")
        );
        // Set but empty: ignored.
        let parity = Parity::select_with_environment(&quick(), Some(String::new())).expect("ok");
        assert_eq!(parity.report().source, ChoiceSource::Measured);
    }

    #[test]
    fn unknown_kernel_is_an_error() {
        let error = Parity::select_with_environment(&quick(), Some("sse9".to_string()))
            .expect_err("no such kernel");
        assert_eq!(
            error,
            ParityError::UnknownKernel {
                name: "sse9".to_string()
            }
        );
    }

    #[test]
    fn dispatcher_computes_like_the_naive_kernel() {
        let parity = Parity::select(&quick()).expect("no forcing");
        let data: Vec<Vec<u8>> = (0..5u8)
            .map(|i| {
                (0..1000u32)
                    .map(|b| (b as u8).wrapping_mul(i + 3))
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (mut p, mut q) = (vec![0; 1000], vec![0; 1000]);
        let (mut p_naive, mut q_naive) = (vec![0; 1000], vec![0; 1000]);
        parity.pq_gen(&refs, &mut p, &mut q);
        crate::Naive.pq_gen(&refs, &mut p_naive, &mut q_naive);
        assert_eq!((p, q), (p_naive, q_naive));
    }
}
