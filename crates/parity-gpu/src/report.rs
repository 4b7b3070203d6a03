//! What `tessera info` shows about each parity engine, and the throughput model the dispatcher
//! derives from the same calibration figures.

use serde::Serialize;

/// CPU kernels or a GPU adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The CPU kernels chosen by `tessera_parity::Parity`.
    Cpu,
    /// One GPU adapter.
    Gpu,
}

/// Throughput at one batch size, measured at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CalibrationPoint {
    /// Bytes of data chunks per batch.
    pub batch_bytes: u64,
    /// GB/s (10^9 bytes per second) of data chunks for one batch of that size, from submit to
    /// completion (the GPU's submit latency and copies included).
    pub gbps: f64,
}

/// One engine's calibration and routing threshold (`parity_engines` in `tessera info --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParityEngineReport {
    /// `cpu`, or `gpu0`, `gpu1`... by adapter index.
    pub name: String,
    /// `cpu` or `gpu`.
    pub kind: EngineKind,
    /// The GPU adapter's name (`None` for the CPU).
    pub adapter: Option<String>,
    /// Round trip of an empty submission, microseconds (`None` for the CPU).
    pub submit_latency_us: Option<f64>,
    /// Throughput by batch size.
    pub calibration: Vec<CalibrationPoint>,
    /// The smallest batch the dispatcher routes to this engine when every engine is idle (`0`
    /// for the CPU; `None` for a GPU that never finishes a batch sooner than the CPU).
    pub min_batch_bytes: Option<u64>,
    /// Why the engine is out of service, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Predicted time to finish a batch, from calibration points: linear between them, constant
/// throughput beyond the largest, and below the smallest the fixed cost (submit latency) plus
/// the smallest point's remaining time scaled down.
#[derive(Clone, Debug, PartialEq)]
pub struct ThroughputModel {
    /// (batch bytes, seconds), increasing bytes.
    points: Vec<(f64, f64)>,
    fixed_seconds: f64,
}

impl ThroughputModel {
    /// A model from calibration figures and a fixed per-batch cost.
    pub fn new(calibration: &[CalibrationPoint], fixed_seconds: f64) -> ThroughputModel {
        let mut points: Vec<(f64, f64)> = calibration
            .iter()
            .filter(|point| point.gbps > 0.0 && point.batch_bytes > 0)
            .map(|point| {
                let bytes = point.batch_bytes as f64;
                (bytes, bytes / (point.gbps * 1e9))
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        ThroughputModel {
            points,
            fixed_seconds: fixed_seconds.max(0.0),
        }
    }

    /// Seconds to finish a batch of `bytes` on an idle engine (infinite without calibration).
    pub fn seconds(&self, bytes: u64) -> f64 {
        let bytes = bytes as f64;
        let (Some(&first), Some(&last)) = (self.points.first(), self.points.last()) else {
            return f64::INFINITY;
        };
        if bytes <= first.0 {
            let fixed = self.fixed_seconds.min(first.1);
            return fixed + (first.1 - fixed) * bytes / first.0;
        }
        if bytes >= last.0 {
            return last.1 * bytes / last.0;
        }
        let upper = self
            .points
            .iter()
            .position(|point| point.0 >= bytes)
            .expect("bytes below the last point");
        let (low, high) = (self.points[upper - 1], self.points[upper]);
        low.1 + (high.1 - low.1) * (bytes - low.0) / (high.0 - low.0)
    }
}

/// The smallest batch size (searched between 1 KiB and 1 GiB) at which `gpu` finishes sooner
/// than `cpu`, both idle; `None` if it never does in that range. The crossover is searched on a
/// doubling grid, then refined by bisection to 1 KiB.
pub fn crossover_bytes(cpu: &ThroughputModel, gpu: &ThroughputModel) -> Option<u64> {
    let gpu_wins = |bytes: u64| gpu.seconds(bytes) < cpu.seconds(bytes);
    let mut previous = 0u64;
    let mut bytes = 1u64 << 10;
    while bytes <= 1 << 30 {
        if gpu_wins(bytes) {
            let (mut low, mut high) = (previous, bytes);
            while high - low > 1 << 10 {
                let middle = low + (high - low) / 2;
                if gpu_wins(middle) {
                    high = middle;
                } else {
                    low = middle;
                }
            }
            return Some(high);
        }
        previous = bytes;
        bytes *= 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(batch_bytes: u64, gbps: f64) -> CalibrationPoint {
        CalibrationPoint { batch_bytes, gbps }
    }

    #[test]
    fn model_interpolates_by_hand() {
        // 1 MB at 1 GB/s = 1 ms; 3 MB at 1.5 GB/s = 2 ms; 20 us fixed cost.
        let model = ThroughputModel::new(&[point(3_000_000, 1.5), point(1_000_000, 1.0)], 20e-6);
        assert!((model.seconds(1_000_000) - 1e-3).abs() < 1e-12);
        assert!((model.seconds(2_000_000) - 1.5e-3).abs() < 1e-12);
        assert!((model.seconds(6_000_000) - 4e-3).abs() < 1e-12);
        // Half of the smallest point: 20 us + (1000 - 20) us / 2.
        assert!((model.seconds(500_000) - 510e-6).abs() < 1e-12);
        assert!((model.seconds(0) - 20e-6).abs() < 1e-12);
        assert_eq!(ThroughputModel::new(&[], 0.0).seconds(1), f64::INFINITY);
    }

    #[test]
    fn crossover_where_latency_stops_mattering() {
        // CPU: 10 GB/s flat, no fixed cost. GPU: 100 us latency then 40 GB/s:
        // 100e-6 + b / 40e9 < b / 10e9  <=>  b > 100e-6 * 40e9 / 3 = 1.333 MB.
        let sizes = [1u64 << 16, 1 << 20, 1 << 24, 1 << 28];
        let cpu = ThroughputModel::new(&sizes.map(|b| point(b, 10.0)), 0.0);
        let gpu_points = sizes.map(|b| {
            let seconds = 100e-6 + b as f64 / 40e9;
            point(b, b as f64 / seconds / 1e9)
        });
        let gpu = ThroughputModel::new(&gpu_points, 100e-6);
        let crossover = crossover_bytes(&cpu, &gpu).expect("the GPU wins big batches");
        // Interpolation between 1 MiB and 16 MiB bends the curve a little: within 10%.
        assert!((1_200_000..1_500_000).contains(&crossover), "{crossover}");
        // A GPU slower at every size never wins.
        let slow = ThroughputModel::new(&sizes.map(|b| point(b, 2.0)), 30e-6);
        assert_eq!(crossover_bytes(&cpu, &slow), None);
    }
}
