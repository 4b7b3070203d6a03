//! The human-readable report.

use std::fmt::Write;

use crate::BenchRow;

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// The rows as an aligned text table, with a legend.
pub fn format_table(rows: &[BenchRow]) -> String {
    let mut out = String::new();
    let isal_version = rows.first().map_or("-", |row| row.isal_version);
    let _ = writeln!(out, "Parity kernels vs ISA-L {isal_version}, one core.");
    let _ = writeln!(
        out,
        "GB/s = 10^9 bytes of data chunks per second (pq_update: the chunk rewritten); ratio = Tessera / ISA-L; * = selected at start-up."
    );
    if let Some(read) = rows.iter().find_map(|row| row.dram_read_gbps) {
        let _ = writeln!(
            out,
            "This core's sequential DRAM read: {read:.1} GB/s (%read = GB/s / that)."
        );
    }
    let _ = writeln!(
        out,
        "\n{:<8} {:<15} {:>6} {:>6} {:<5} {:>8} {:>8} {:>6} {:>6}  isal call",
        "kernel", "op", "layout", "chunk", "set", "GB/s", "ISA-L", "ratio", "%read"
    );
    for row in rows.iter().filter(|row| row.batch_bytes.is_none()) {
        let layout = format!("{}+{}", row.data_chunks, row.parity_chunks);
        let chunk = format!("{}K", row.chunk_bytes >> 10);
        let _ = writeln!(
            out,
            "{:<8} {:<15} {:>6} {:>6} {:<5} {:>8.1} {:>8} {:>6} {:>6}  {}",
            format!("{}{}", row.kernel, if row.selected { "*" } else { "" }),
            row.op,
            layout,
            chunk,
            row.working_set,
            row.gbps,
            optional(row.isal_gbps, 1),
            optional(row.ratio, 2),
            optional(row.of_dram_read.map(|f| f * 100.0), 0),
            row.isal_call.unwrap_or("-"),
        );
    }
    #[cfg(feature = "gpu")]
    out.push_str(&crate::gpu::format_gpu_table(rows));
    out
}
