//! `tessera bench parity`: runs in this process, no daemon needed.

use std::process::ExitCode;

use tessera_parity_bench::{BenchOptions, format_table, run as run_bench};

use super::{Context, Failure};
use crate::args::BenchCommand;

pub fn run(context: &mut Context<'_>, command: BenchCommand) -> Result<ExitCode, Failure> {
    match command {
        BenchCommand::Parity { json, kernel, op } => {
            let options = BenchOptions {
                kernels: kernel,
                ops: op,
                ..BenchOptions::default()
            };
            let rows = run_bench(&options);
            if json {
                context.json(&rows)?;
            } else {
                context.print(&format_table(&rows))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
