//! Engine rows (feature `gpu`): the CPU engine (the kernels `Parity` selects) and every GPU
//! adapter, by batch size, for `xor`, `pq` and `recover_2data` on 8-data-chunk stripes: GB/s one
//! batch at a time and double-buffered, the GPU's submit latency, CPU seconds per GB for each
//! engine (getrusage before and after), and the crossover batch size where a GPU finishes a
//! batch sooner than the CPU, if it ever does. `recover_2data` runs with both of the shader's
//! multiply-by-constant strategies (`shift`, `table`). Each GPU result is checked against the
//! CPU's on the same batch before it is reported.
//!
//! They run when no kernel is named or `--kernel gpu` is, unless `TESSERA_BENCH_GPU=0`.

use std::fmt::Write;
use std::time::Duration;

use tessera_parity::{Operation, Parity, SelectionConfig};
use tessera_parity_gpu::bench::{
    BenchBatch, BenchOperation, Measurement, measure_cpu, measure_gpu,
};
use tessera_parity_gpu::{
    CalibrationPoint, EngineConfig, GpuEngine, MulStrategy, ThroughputModel, crossover_bytes,
    list_adapters,
};

use crate::{BenchOptions, BenchRow};

/// Batch sizes measured: 64 KiB to 64 MiB of data chunks.
const BATCH_BYTES: [u64; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
const DATA_CHUNKS: usize = 8;
const CHUNK_BYTES: usize = 64 << 10;

fn wanted(options: &BenchOptions) -> bool {
    if std::env::var("TESSERA_BENCH_GPU").is_ok_and(|value| value == "0") {
        return false;
    }
    options.kernels.is_empty() || options.kernels.iter().any(|name| name.starts_with("gpu"))
}

fn row(
    kernel: String,
    operation: BenchOperation,
    batch: &BenchBatch,
    measurement: &Measurement,
    engine: &'static str,
) -> BenchRow {
    let (data_chunks, chunk_bytes) = batch.shape();
    BenchRow {
        kernel,
        op: operation.name(),
        data_chunks,
        parity_chunks: if operation == BenchOperation::Xor {
            1
        } else {
            2
        },
        chunk_bytes,
        working_set: "batch",
        working_set_bytes: measurement.batch_bytes as usize,
        gbps: measurement.gbps,
        isal_version: tessera_isal::VERSION,
        engine: Some(engine),
        batch_bytes: Some(measurement.batch_bytes),
        pipelined_gbps: Some(measurement.pipelined_gbps),
        cpu_seconds_per_gb: Some(measurement.process_cpu_seconds_per_gb),
        caller_cpu_seconds_per_gb: Some(measurement.thread_cpu_seconds_per_gb),
        ..BenchRow::default()
    }
}

fn operation_of(operation: BenchOperation) -> Operation {
    match operation {
        BenchOperation::Xor => Operation::XorGen,
        BenchOperation::Pq => Operation::PqGen,
        BenchOperation::RecoverTwoData => Operation::RecoverTwoData,
    }
}

fn model(rows: &[BenchRow], fixed_seconds: f64) -> ThroughputModel {
    let points: Vec<CalibrationPoint> = rows
        .iter()
        .map(|row| CalibrationPoint {
            batch_bytes: row.batch_bytes.expect("engine row"),
            gbps: row.gbps,
        })
        .collect();
    ThroughputModel::new(&points, fixed_seconds)
}

/// The engine rows. Panics if a GPU's output differs from the CPU's on the benchmark batch.
pub fn gpu_rows(options: &BenchOptions) -> Vec<BenchRow> {
    if !wanted(options) {
        return Vec::new();
    }
    let parity = Parity::select(&SelectionConfig::default())
        .expect("the default selection needs no configuration");
    let time = options.measure_time.max(Duration::from_millis(20));
    let adapters = list_adapters();
    if adapters.is_empty() {
        eprintln!("parity-bench: no Vulkan/Metal/DX12 adapter: GPU rows skipped");
    }
    let mut engines: Vec<(GpuEngine, MulStrategy)> = Vec::new();
    for adapter in &adapters {
        for strategy in MulStrategy::ALL {
            let config = EngineConfig {
                strategy,
                ..EngineConfig::default()
            };
            match GpuEngine::open(adapter.index, config) {
                Ok(engine) => engines.push((engine, strategy)),
                Err(error) => eprintln!("parity-bench: GPU {}: {error}", adapter.name),
            }
        }
    }
    let latencies: Vec<Option<f64>> = engines
        .iter_mut()
        .map(|(engine, _)| engine.submit_latency(51).ok().map(|d| d.as_secs_f64()))
        .collect();

    let mut rows = Vec::new();
    for operation in BenchOperation::ALL {
        if !options.ops.is_empty() && !options.ops.iter().any(|name| name == operation.name()) {
            continue;
        }
        let cpu_kernel = parity.kernel(operation_of(operation));
        let mut cpu_rows = Vec::new();
        let mut gpu_rows: Vec<Vec<BenchRow>> = vec![Vec::new(); engines.len()];
        for batch_bytes in BATCH_BYTES {
            let mut batch = BenchBatch::new(operation, batch_bytes, DATA_CHUNKS, CHUNK_BYTES);
            let measurement = measure_cpu(cpu_kernel, &mut batch, time);
            let expected = batch.outputs().to_vec();
            cpu_rows.push(row(
                format!("cpu:{}", cpu_kernel.name()),
                operation,
                &batch,
                &measurement,
                "cpu",
            ));
            for (index, (engine, strategy)) in engines.iter_mut().enumerate() {
                // XOR and P+Q never multiply by a constant: one strategy is enough for them.
                if operation != BenchOperation::RecoverTwoData
                    && *strategy != MulStrategy::default()
                {
                    continue;
                }
                let measurement = match measure_gpu(engine, &mut batch, time) {
                    Ok(measurement) => measurement,
                    Err(error) => {
                        eprintln!("parity-bench: GPU {}: {error}", engine.adapter().name);
                        continue;
                    }
                };
                assert!(
                    batch.outputs() == expected.as_slice(),
                    "GPU {} and CPU disagree on {}",
                    engine.adapter().name,
                    operation.name()
                );
                let mut gpu_row = row(
                    format!("gpu:{}", engine.adapter().name),
                    operation,
                    &batch,
                    &measurement,
                    "gpu",
                );
                gpu_row.submit_latency_us = latencies[index].map(|seconds| seconds * 1e6);
                gpu_row.mul_strategy = Some(strategy.name());
                gpu_rows[index].push(gpu_row);
            }
        }
        let cpu_model = model(&cpu_rows, 0.0);
        rows.extend(cpu_rows);
        for (index, mut engine_rows) in gpu_rows.into_iter().enumerate() {
            let gpu_model = model(&engine_rows, latencies[index].unwrap_or(0.0));
            let crossover = crossover_bytes(&cpu_model, &gpu_model);
            for gpu_row in &mut engine_rows {
                gpu_row.crossover_batch_bytes = Some(crossover);
            }
            rows.extend(engine_rows);
        }
    }
    rows
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

/// The engine rows as a table (empty if there are none).
pub fn format_gpu_table(rows: &[BenchRow]) -> String {
    let engine_rows: Vec<&BenchRow> = rows
        .iter()
        .filter(|row| row.batch_bytes.is_some())
        .collect();
    let mut out = String::new();
    if engine_rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nParity engines by batch size ({DATA_CHUNKS} data chunks per stripe, up to {} KiB chunks).",
        CHUNK_BYTES >> 10
    );
    let _ = writeln!(
        out,
        "GB/s: one batch submit-to-done / double-buffered; cpu s/GB: whole process / submitting thread; \
         crossover: smallest batch where the GPU beats the CPU."
    );
    for row in &engine_rows {
        if let Some(latency) = row.submit_latency_us
            && row.batch_bytes == Some(BATCH_BYTES[0])
            && row.op == "pq"
        {
            let _ = writeln!(out, "{}: submit latency {latency:.0} us", row.kernel);
        }
    }
    let _ = writeln!(
        out,
        "\n{:<40} {:<14} {:<5} {:>6} {:>8} {:>9} {:>9} {:>9}  crossover",
        "engine", "op", "mul", "batch", "GB/s", "pipelined", "cpu s/GB", "thread"
    );
    for row in engine_rows {
        let crossover = match row.crossover_batch_bytes {
            None => "-".to_string(),
            Some(None) => "never".to_string(),
            Some(Some(bytes)) => size(bytes),
        };
        let _ = writeln!(
            out,
            "{:<40} {:<14} {:<5} {:>6} {:>8.2} {:>9} {:>9} {:>9}  {}",
            row.kernel,
            row.op,
            row.mul_strategy.unwrap_or("-"),
            size(row.batch_bytes.expect("engine row")),
            row.gbps,
            optional(row.pipelined_gbps, 2),
            optional(row.cpu_seconds_per_gb, 3),
            optional(row.caller_cpu_seconds_per_gb, 3),
            crossover,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine rows' JSON fields (`tessera bench parity --json`), on a short XOR run.
    #[test]
    fn engine_rows_carry_engine_figures() {
        let options = BenchOptions {
            kernels: vec!["gpu".to_string()],
            measure_time: Duration::from_millis(1),
            dram_bytes: 0,
            ops: vec!["xor".to_string()],
        };
        let rows = gpu_rows(&options);
        let cpu_rows = rows.iter().filter(|row| row.engine == Some("cpu")).count();
        assert_eq!(cpu_rows, BATCH_BYTES.len());
        let json = serde_json::to_value(&rows).expect("serializes");
        for row in json.as_array().expect("array") {
            for field in [
                "kernel",
                "op",
                "batch_bytes",
                "gbps",
                "pipelined_gbps",
                "cpu_seconds_per_gb",
                "caller_cpu_seconds_per_gb",
            ] {
                assert!(row.get(field).is_some(), "missing {field} in {row}");
            }
            assert_eq!(row["op"], "xor");
            if row["engine"] == "gpu" {
                let kernel = row["kernel"].as_str().expect("string");
                assert!(kernel.starts_with("gpu:"), "{kernel}");
                assert!(row["submit_latency_us"].as_f64().is_some_and(|us| us > 0.0));
                assert!(row.get("crossover_batch_bytes").is_some());
            }
        }
        if list_adapters().is_empty() {
            eprintln!("no GPU adapter: only the CPU engine rows were checked");
        } else {
            assert_eq!(rows.len(), 2 * BATCH_BYTES.len() * list_adapters().len());
        }
        assert!(format_gpu_table(&rows).contains("cpu:"));
    }
}
