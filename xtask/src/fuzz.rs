//! `cargo xtask fuzz`: runs the cargo-fuzz targets of `fuzz/` (docs/fuzzing.md).
//!
//! - `fuzz list`: the targets.
//! - `fuzz run TARGET [--seconds N] [-- LIBFUZZER_ARGS...]`: one target for N seconds (default 60).
//! - `fuzz all [--seconds N]`: every target in turn, then a table of the results.
//! - `fuzz pick TARGET [--max N]`: copies into the committed corpus the N inputs (default 40)
//!   of `fuzz/target/corpus/TARGET` that reach the most code the committed corpus does not.
//!
//! Each run reads the committed seeds (`fuzz/corpus/TARGET`) and crash inputs
//! (`fuzz/regressions/TARGET`) but writes what it discovers to `fuzz/target/corpus/TARGET`,
//! so the committed corpus only changes by hand. Crashes land in `fuzz/artifacts/TARGET`.
//! Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const DEFAULT_SECONDS: u64 = 60;
/// Inputs `fuzz pick` adds to the committed corpus unless told otherwise.
const DEFAULT_PICKED: usize = 40;
/// An input that runs this long is reported as a hang.
const INPUT_TIMEOUT_SECONDS: u64 = 10;

pub fn main(args: &[String]) -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository")
        .to_path_buf();
    let targets = match list_targets(&root) {
        Ok(targets) => targets,
        Err(error) => {
            eprintln!("xtask fuzz: cannot list fuzz/fuzz_targets: {error}");
            return ExitCode::FAILURE;
        }
    };
    match args.first().map(String::as_str) {
        Some("list") => {
            for target in &targets {
                println!("{target}");
            }
            ExitCode::SUCCESS
        }
        Some("run") => {
            let Some(target) = args.get(1) else {
                return usage();
            };
            if !targets.contains(target) {
                eprintln!("xtask fuzz: no target {target:?} (cargo xtask fuzz list)");
                return ExitCode::from(2);
            }
            let (options, extra) = split_extra(&args[2..]);
            let Some(seconds) = seconds(options) else {
                return usage();
            };
            if !cargo_fuzz_available() {
                return ExitCode::FAILURE;
            }
            let outcome = run_target(&root, target, seconds, extra);
            print_table(std::slice::from_ref(&outcome));
            if outcome.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Some("all") => {
            let Some(seconds) = seconds(&args[1..]) else {
                return usage();
            };
            if !cargo_fuzz_available() {
                return ExitCode::FAILURE;
            }
            let outcomes: Vec<Outcome> = targets
                .iter()
                .map(|target| run_target(&root, target, seconds, &[]))
                .collect();
            print_table(&outcomes);
            if outcomes.iter().all(|outcome| outcome.passed) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Some("pick") => {
            let (Some(target), Some(max)) = (args.get(1), picked_max(&args[2..])) else {
                return usage();
            };
            if !targets.contains(target) {
                eprintln!("xtask fuzz: no target {target:?} (cargo xtask fuzz list)");
                return ExitCode::from(2);
            }
            match pick(&root, target, max) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("xtask fuzz pick: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: cargo xtask fuzz list");
    eprintln!("       cargo xtask fuzz run TARGET [--seconds N] [-- LIBFUZZER_ARGS...]");
    eprintln!("       cargo xtask fuzz all [--seconds N]");
    eprintln!("       cargo xtask fuzz pick TARGET [--max N]");
    ExitCode::from(2)
}

/// The targets: one file per target in `fuzz/fuzz_targets/`.
fn list_targets(root: &Path) -> std::io::Result<Vec<String>> {
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(root.join("fuzz/fuzz_targets"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "rs")
            && let Some(stem) = path.file_stem()
        {
            targets.push(stem.to_string_lossy().into_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

/// Splits `args` at `--`: our options before, libFuzzer's after.
fn split_extra(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|arg| arg == "--") {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &[]),
    }
}

/// `--seconds N` (or nothing: the default); `None` for anything else.
fn seconds(options: &[String]) -> Option<u64> {
    match options {
        [] => Some(DEFAULT_SECONDS),
        [flag, value] if flag == "--seconds" => value.parse().ok().filter(|&n| n > 0),
        _ => None,
    }
}

fn cargo_fuzz_available() -> bool {
    let works = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !works {
        eprintln!(
            "xtask fuzz: `cargo +nightly fuzz` does not run. Install a nightly toolchain \
             (`rustup toolchain install nightly`) and cargo-fuzz (`cargo install cargo-fuzz`)."
        );
    }
    works
}

/// What one run reported: libFuzzer's final status line and statistics.
#[derive(Clone, Debug, Default)]
struct Outcome {
    target: String,
    seconds: u64,
    executions: String,
    executions_per_second: String,
    coverage: String,
    features: String,
    corpus: String,
    status_executions: String,
    status_executions_per_second: String,
    passed: bool,
}

fn run_target(root: &Path, target: &str, seconds: u64, extra: &[String]) -> Outcome {
    let work_corpus = root.join("fuzz/target/corpus").join(target);
    if let Err(error) = std::fs::create_dir_all(&work_corpus) {
        eprintln!(
            "xtask fuzz: cannot create {}: {error}",
            work_corpus.display()
        );
        return failed(target, seconds);
    }
    // libFuzzer writes new inputs to the first directory only.
    let mut corpora: Vec<PathBuf> = vec![work_corpus, root.join("fuzz/corpus").join(target)];
    let regressions = root.join("fuzz/regressions").join(target);
    if regressions.is_dir() {
        corpora.push(regressions);
    }
    eprintln!("== fuzz {target} for {seconds} s");
    let child = Command::new("cargo")
        .current_dir(root)
        .args(["+nightly", "fuzz", "run", target])
        .args(&corpora)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-timeout={INPUT_TIMEOUT_SECONDS}"))
        .arg("-print_final_stats=1")
        .args(extra)
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            eprintln!("xtask fuzz: cannot run cargo +nightly fuzz: {error}");
            return failed(target, seconds);
        }
    };
    let mut outcome = Outcome {
        target: target.to_string(),
        seconds,
        ..Outcome::default()
    };
    let stderr = child.stderr.take().expect("stderr is piped");
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        eprintln!("{line}");
        let _ = std::io::stderr().flush();
        note(&mut outcome, &line);
    }
    outcome.passed = child.wait().is_ok_and(|status| status.success());
    outcome
}

fn failed(target: &str, seconds: u64) -> Outcome {
    Outcome {
        target: target.to_string(),
        seconds,
        ..Outcome::default()
    }
}

/// Picks the figures out of one line of libFuzzer output.
fn note(outcome: &mut Outcome, line: &str) {
    if let Some(value) = line.strip_prefix("stat::number_of_executed_units:") {
        outcome.executions = value.trim().to_string();
    } else if let Some(value) = line.strip_prefix("stat::average_exec_per_sec:") {
        outcome.executions_per_second = value.trim().to_string();
    } else if line.starts_with('#') && line.contains(" cov: ") {
        // A status line: `#N  EVENT cov: C ft: F corp: N/SIZE ... exec/s: E rss: R`, or in
        // fork mode `#N: cov: C ft: F corp: N exec/s E ...`. The final statistics, when
        // printed, replace the execution figures taken from here.
        let mut words = line.split_whitespace();
        if let Some(count) = words.next() {
            outcome.status_executions = count.trim_matches(['#', ':']).to_string();
        }
        while let Some(word) = words.next() {
            let slot = match word {
                "cov:" => &mut outcome.coverage,
                "ft:" => &mut outcome.features,
                "corp:" => &mut outcome.corpus,
                "exec/s:" | "exec/s" => &mut outcome.status_executions_per_second,
                _ => continue,
            };
            if let Some(value) = words.next() {
                *slot = value.to_string();
            }
        }
    }
}

/// The final statistics if libFuzzer printed them, else the last status line's figures.
fn or_status<'a>(statistic: &'a str, status: &'a str) -> &'a str {
    if statistic.is_empty() {
        status
    } else {
        statistic
    }
}

fn print_table(outcomes: &[Outcome]) {
    println!(
        "{:<22} {:>8} {:>14} {:>9} {:>7} {:>8} {:>14}  result",
        "target", "seconds", "executions", "exec/s", "cov", "ft", "corpus"
    );
    for outcome in outcomes {
        println!(
            "{:<22} {:>8} {:>14} {:>9} {:>7} {:>8} {:>14}  {}",
            outcome.target,
            outcome.seconds,
            or_status(&outcome.executions, &outcome.status_executions),
            or_status(
                &outcome.executions_per_second,
                &outcome.status_executions_per_second
            ),
            outcome.coverage,
            outcome.features,
            outcome.corpus,
            if outcome.passed {
                "ok"
            } else {
                "FAILED (see fuzz/artifacts)"
            }
        );
    }
}

/// `--max N` (or nothing: the default).
fn picked_max(options: &[String]) -> Option<usize> {
    match options {
        [] => Some(DEFAULT_PICKED),
        [flag, value] if flag == "--max" => value.parse().ok(),
        _ => None,
    }
}

/// Adds to `fuzz/corpus/TARGET` the inputs of the local corpus that reach the most code the
/// committed corpus does not. libFuzzer's merge runs the committed inputs first, then the
/// others smallest first, and records for each input the code it reached first (`COV` lines of
/// the control file); the inputs that reached the most new code are picked.
fn pick(root: &Path, target: &str, max: usize) -> Result<(), String> {
    let committed = root.join("fuzz/corpus").join(target);
    let found = root.join("fuzz/target/corpus").join(target);
    let scratch = root.join("fuzz/target/pick").join(target);
    let _ = std::fs::remove_dir_all(&scratch);
    let baseline = scratch.join("baseline");
    std::fs::create_dir_all(&baseline).map_err(|error| error.to_string())?;
    for entry in std::fs::read_dir(&committed).map_err(|error| error.to_string())? {
        let path = entry.map_err(|error| error.to_string())?.path();
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, baseline.join(name)).map_err(|error| error.to_string())?;
        }
    }
    let build = Command::new("cargo")
        .current_dir(root)
        .args(["+nightly", "fuzz", "build", target])
        .status()
        .map_err(|error| format!("cannot run cargo +nightly fuzz: {error}"))?;
    if !build.success() {
        return Err(format!("building {target} failed"));
    }
    let control = scratch.join("control");
    let merge = Command::new(
        root.join("fuzz/target/x86_64-unknown-linux-gnu/release")
            .join(target),
    )
    .arg("-merge=1")
    .arg("-use_counters=0")
    .arg(format!("-merge_control_file={}", control.display()))
    .arg(&baseline)
    .arg(&found)
    .stderr(Stdio::null())
    .status()
    .map_err(|error| format!("cannot run the {target} binary: {error}"))?;
    if !merge.success() {
        return Err("the merge failed (does an input crash the target?)".to_string());
    }
    let text = std::fs::read_to_string(&control).map_err(|error| error.to_string())?;
    let mut lines = text.lines();
    let count: usize = lines
        .next()
        .and_then(|line| line.parse().ok())
        .ok_or("bad control file")?;
    let _baseline_count = lines.next();
    let files: Vec<PathBuf> = lines.by_ref().take(count).map(PathBuf::from).collect();
    let mut gains: Vec<(usize, usize)> = lines
        .filter_map(|line| line.strip_prefix("COV "))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let index: usize = words.next()?.parse().ok()?;
            Some((words.count(), index))
        })
        .filter(|&(gain, index)| {
            gain > 0 && files.get(index).is_some_and(|f| f.starts_with(&found))
        })
        .collect();
    gains.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut added = 0;
    for &(gain, index) in gains.iter().take(max) {
        let source = &files[index];
        let name = source.file_name().ok_or("an input without a name")?;
        std::fs::copy(source, committed.join(name)).map_err(|error| error.to_string())?;
        println!("{} (reached {gain} new places)", name.to_string_lossy());
        added += 1;
    }
    println!(
        "added {added} of {} inputs that reach new code to {}",
        gains.len(),
        committed.display()
    );
    Ok(())
}
