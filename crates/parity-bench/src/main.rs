//! `parity-bench`: measures every parity kernel against ISA-L and prints a table or, with
//! `--json`, one JSON array of rows.
//!
//! Options: `--json`, `--kernel NAME` (repeatable; default every kernel this CPU runs),
//! `--kernel gpu` for the CPU/GPU engine rows alone (feature `gpu`, on by default),
//! `--op NAME` (repeatable: xor, pq, pq_update, recover_1, recover_data_p, recover_data_q,
//! recover_2data; default all), `--measure-ms N` (per implementation per row, default 40), `--dram-mib N` (default 256).

use std::process::ExitCode;
use std::time::Duration;

use tessera_parity_bench::{BenchOptions, format_table, run_with_selection};

fn usage() -> ExitCode {
    eprintln!(
        "usage: parity-bench [--json] [--kernel NAME]... [--op NAME]... [--measure-ms N] [--dram-mib N]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut options = BenchOptions::default();
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--kernel" => match args.next() {
                Some(name) => options.kernels.push(name),
                None => return usage(),
            },
            "--op" => match args.next() {
                Some(name) => options.ops.push(name),
                None => return usage(),
            },
            "--measure-ms" => match args.next().and_then(|v| v.parse().ok()) {
                Some(ms) => options.measure_time = Duration::from_millis(ms),
                None => return usage(),
            },
            "--dram-mib" => match args.next().and_then(|v| v.parse::<usize>().ok()) {
                Some(mib) => options.dram_bytes = mib << 20,
                None => return usage(),
            },
            "-h" | "--help" => {
                usage();
                return ExitCode::SUCCESS;
            }
            _ => return usage(),
        }
    }
    for name in options
        .kernels
        .iter()
        .filter(|name| !name.starts_with("gpu"))
    {
        if let Err(error) = tessera_parity::kernel_by_name(name) {
            eprintln!("parity-bench: {error}");
            return ExitCode::FAILURE;
        }
    }
    let (selection, rows) = run_with_selection(&options);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        print!("{selection}\n{}", format_table(&rows));
    }
    ExitCode::SUCCESS
}
