//! `cargo xtask bench [OPTIONS]`: the end-to-end benchmark suite (`bench/`, described in
//! docs/benchmarks.md). Builds the release `tessera`, makes sure the plotting environment exists
//! (a Python venv in target/bench-venv with bench/requirements.txt), then runs `bench/run.py`
//! with the options passed through (`cargo xtask bench --help` lists them).
//!
//! The runner is Python because it mostly starts processes and folds fio's JSON into tables and
//! matplotlib plots; this wrapper keeps the one documented entry point in the usual place.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const VENV: &str = "target/bench-venv";

pub fn main(args: &[String]) -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf();
    let builds_nothing = args.iter().any(|arg| {
        matches!(
            arg.as_str(),
            "-h" | "--help" | "--report-only" | "--tessera"
        ) || arg.starts_with("--report-only=")
            || arg.starts_with("--tessera=")
    });
    if !builds_nothing {
        eprintln!("xtask bench: building target/release/tessera");
        let built = Command::new("cargo")
            .current_dir(&root)
            .args([
                "build",
                "--release",
                "--locked",
                "--quiet",
                "-p",
                "tessera-cli",
            ])
            .status();
        if !matches!(built, Ok(status) if status.success()) {
            eprintln!("xtask bench: the release build of tessera failed");
            return ExitCode::FAILURE;
        }
    }
    let python = plotting_python(&root);
    let status = Command::new(&python)
        .current_dir(&root)
        .arg(root.join("bench/run.py"))
        .args(args)
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(error) => {
            eprintln!("xtask bench: cannot run {}: {error}", python.display());
            ExitCode::FAILURE
        }
    }
}

/// The venv's Python, created and given matplotlib on first use. Without a venv (no `venv`
/// module, no package index) the system `python3` runs the benchmark and the report has no
/// plots.
fn plotting_python(root: &Path) -> PathBuf {
    let venv = root.join(VENV);
    let python = venv.join("bin/python");
    if !python.exists() {
        eprintln!("xtask bench: creating {VENV} for the plots");
        let created = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
        if !matches!(created, Ok(status) if status.success()) {
            eprintln!("xtask bench: python3 -m venv failed; running without plots");
            return PathBuf::from("python3");
        }
    }
    let has_matplotlib = Command::new(&python)
        .args(["-c", "import matplotlib"])
        .status()
        .is_ok_and(|status| status.success());
    if !has_matplotlib {
        eprintln!("xtask bench: installing bench/requirements.txt into {VENV}");
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "-r"])
            .arg(root.join("bench/requirements.txt"))
            .status();
        if !matches!(installed, Ok(status) if status.success()) {
            eprintln!("xtask bench: pip install failed; the report will have no plots");
        }
    }
    python
}
