//! The deterministic simulator: one seed picks a drive group, a workload, member latencies
//! and faults (crashes with torn and lost writes, lost members coming back stale, failing
//! writes, latent sector errors, bit flips); checkers compare every read against a reference
//! model, check parity when quiet, and require every request to finish. A failing seed
//! replays exactly.

pub mod closed_loop;
pub mod config;
pub mod harness;
pub mod member;
pub mod model;
pub mod pattern;
pub mod prng;
mod thin;
pub mod world;

pub use config::{Config, FaultMode};
pub use world::Stats;

/// The result of one seed.
pub struct Outcome {
    pub seed: u64,
    pub config: Config,
    pub stats: Stats,
    pub result: Result<(), String>,
    pub trace: String,
}

/// Runs one seed to the end.
pub fn run_seed(seed: u64) -> Outcome {
    run_config(Config::from_seed(seed))
}

/// Runs one seed's run as `config` describes it (a seed's config, changed).
pub fn run_config(config: Config) -> Outcome {
    let seed = config.seed;
    let mut world = world::World::new(config.clone());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.run()))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(format!("panic: {message}"))
        });
    Outcome {
        seed,
        config,
        stats: world.stats.clone(),
        trace: world.trace(),
        result,
    }
}
