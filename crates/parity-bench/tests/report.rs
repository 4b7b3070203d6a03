//! The benchmark's report shape (the interface `tessera bench parity --json` promises), on a
//! tiny, fast configuration. Figures are not checked: speed is for the benchmark to print.

use std::time::Duration;

use tessera_parity_bench::{BenchOptions, format_table, run};

#[test]
fn json_rows_have_the_promised_fields() {
    let options = BenchOptions {
        kernels: vec!["scalar".to_string()],
        measure_time: Duration::from_millis(1),
        dram_bytes: 8 << 20,
        ops: vec![
            "xor".to_string(),
            "pq_update".to_string(),
            "recover_2data".to_string(),
        ],
    };
    let rows = run(&options);
    // 3 ops x 2 layouts x 2 working sets x 1 kernel.
    assert_eq!(rows.len(), 12);
    let json: serde_json::Value = serde_json::to_value(&rows).expect("serializes");
    let array = json.as_array().expect("one JSON array");
    for row in array {
        for field in [
            "kernel",
            "op",
            "data_chunks",
            "chunk_bytes",
            "working_set",
            "gbps",
            "isal_gbps",
            "isal_version",
            "ratio",
        ] {
            assert!(row.get(field).is_some(), "missing {field} in {row}");
        }
        assert_eq!(row["kernel"], "scalar");
        assert!(["cache", "dram"].contains(&row["working_set"].as_str().expect("string")));
        let gbps = row["gbps"].as_f64().expect("number");
        let isal = row["isal_gbps"]
            .as_f64()
            .expect("every op here has an ISA-L counterpart");
        let ratio = row["ratio"].as_f64().expect("ratio present with ISA-L");
        assert!(gbps > 0.0 && isal > 0.0);
        assert!((ratio - gbps / isal).abs() < 1e-9);
        assert!(
            row["isal_version"]
                .as_str()
                .expect("string")
                .starts_with("2.31")
        );
    }
    let ops: Vec<&str> = array
        .iter()
        .map(|row| row["op"].as_str().expect("string"))
        .collect();
    assert!(ops.contains(&"recover_2data") && ops.contains(&"xor") && ops.contains(&"pq_update"));
    let table = format_table(&rows);
    assert_eq!(
        table
            .lines()
            .filter(|line| line.starts_with("scalar"))
            .count(),
        12
    );
}
