//! Project tooling: `cargo xtask <task>`.
//!
//! - `sim --seeds N [--from S]` runs N consecutive simulator seeds (release build) and exits 0
//!   only if all pass; `sim --seed S` replays one with its trace.
//! - `vm build | vm run ...` builds and boots the scripted test VM (docs/vm.md).
//! - `fuzz list | fuzz run TARGET --seconds N | fuzz all --seconds N` runs the cargo-fuzz
//!   targets (docs/fuzzing.md).
//! - `bench [--quick] ...` runs the end-to-end benchmark suite (docs/benchmarks.md).
//! - `deb` builds the Debian package (`scripts/package-deb.sh`, docs/operations.md).

use std::process::{Command, ExitCode};

mod bench;
mod fuzz;
mod vm;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("sim") => run(
            "cargo",
            &[
                "run",
                "--release",
                "--quiet",
                "-p",
                "tessera-sim",
                "--bin",
                "tessera-sim",
                "--",
            ],
            &args[1..],
        ),
        Some("vm") => vm::main(&args[1..]),
        Some("fuzz") => fuzz::main(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("deb") => {
            // By its full path, so that `cargo xtask deb` works from any directory; the
            // script finds the repository itself, and the arguments stay the caller's.
            let script =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/package-deb.sh");
            run(&script.display().to_string(), &[], &args[1..])
        }
        _ => {
            eprintln!("usage: cargo xtask sim (--seeds N [--from S] | --seed S)");
            eprintln!("       cargo xtask vm (build | run) ... (see docs/vm.md)");
            eprintln!(
                "       cargo xtask fuzz (list | run TARGET | all) [--seconds N] (see docs/fuzzing.md)"
            );
            eprintln!("       cargo xtask bench [--quick] ... (see docs/benchmarks.md)");
            eprintln!("       cargo xtask deb [BINARY OUT_DIR] (see docs/operations.md)");
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
