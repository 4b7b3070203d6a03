//! Project tooling: `cargo xtask <task>`.
//!
//! - `sim --seeds N [--from S]` runs N consecutive simulator seeds (release build) and exits 0
//!   only if all pass; `sim --seed S` replays one with its trace.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("sim") => run(
            "cargo",
            &["run", "--release", "--quiet", "-p", "tessera-sim", "--"],
            &args[1..],
        ),
        _ => {
            eprintln!("usage: cargo xtask sim (--seeds N [--from S] | --seed S)");
            ExitCode::from(2)
        }
    }
}

fn run(program: &str, fixed: &[&str], rest: &[String]) -> ExitCode {
    let status = Command::new(program).args(fixed).args(rest).status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(error) => {
            eprintln!("xtask: cannot run {program}: {error}");
            ExitCode::FAILURE
        }
    }
}
