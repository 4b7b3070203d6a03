//! `tessera-sim`: run simulator seeds. `--seeds N [--from S]` runs N consecutive seeds;
//! `--seed S` replays one with its trace.

use std::process::ExitCode;
use tessera_sim::run_seed;

fn main() -> ExitCode {
    // Panics are caught per seed and reported with the seed; keep the report to one line.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("panic at {location}");
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<u64> {
        let at = args.iter().position(|a| a == name)?;
        let text = args.get(at + 1)?;
        Some(text.parse().unwrap_or_else(|_| {
            eprintln!("{name} takes a number, got {text:?}");
            std::process::exit(2)
        }))
    };
    let verbose = args.iter().any(|a| a == "--verbose");
    if let Some(seed) = value("--seed") {
        let outcome = run_seed(seed);
        println!("seed {seed}: {:?}", outcome.config);
        println!("{:?}", outcome.stats);
        return match outcome.result {
            Ok(()) => {
                println!("seed {seed}: ok");
                ExitCode::SUCCESS
            }
            Err(error) => {
                println!("trace:\n{}", outcome.trace);
                println!("seed {seed}: FAILED: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let count = value("--seeds").unwrap_or(100);
    let from = value("--from").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut failures = Vec::new();
    let mut crashes = 0;
    let mut crash_losses = 0;
    let mut faults = 0;
    let mut computes = 0;
    let mut home_batches = 0;
    let mut reserve_batches = 0;
    let mut batched = 0;
    let mut batched_submissions = 0;
    for seed in from..from + count {
        let outcome = run_seed(seed);
        crashes += outcome.stats.crashes;
        crash_losses += outcome.stats.crash_losses;
        computes += outcome.stats.offloaded_computes;
        home_batches += outcome.stats.journal_home_batches;
        reserve_batches += outcome.stats.journal_reserve_batches;
        batched += outcome.stats.batched_completions;
        batched_submissions += outcome.stats.batched_submissions;
        faults += outcome.stats.member_losses
            + outcome.stats.write_failures
            + outcome.stats.latent_errors
            + outcome.stats.bit_flips;
        if verbose {
            println!("seed {seed}: {:?} {:?}", outcome.result, outcome.stats);
        }
        if let Err(error) = outcome.result {
            println!("seed {seed}: FAILED: {error}");
            failures.push(seed);
        }
    }
    println!(
        "{} seeds from {from}: {} passed, {} failed ({crashes} crashes, {crash_losses} of them losing members, {faults} member faults injected, {computes} parity computations offloaded, {home_batches} journal batches on their parity members alone, {reserve_batches} from the reserved batch buffer, {batched} member completions and {batched_submissions} host requests handed over in batches)",
        count,
        count - failures.len() as u64,
        failures.len()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failing seeds: {failures:?}");
        println!("replay one with: cargo xtask sim --seed <seed>");
        ExitCode::FAILURE
    }
}
