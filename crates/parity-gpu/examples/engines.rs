//! Lists the GPU adapters, then calibrates the dispatcher as the daemon does at start-up and
//! prints its engine reports (what `tessera info --json` shows as `parity_engines`).
//!
//! `cargo run --release -p tessera-parity-gpu --example engines`

use std::sync::Arc;
use std::time::Instant;

use tessera_parity::{Kernel, Parity, SelectionConfig};
use tessera_parity_gpu::{Dispatcher, DispatcherConfig, list_adapters};

fn main() {
    for adapter in list_adapters() {
        println!(
            "adapter {}: {} ({}, {}, {})",
            adapter.index, adapter.name, adapter.backend, adapter.device_type, adapter.driver
        );
    }
    let parity = Parity::select(&SelectionConfig::default()).expect("default selection");
    let cpu: Arc<dyn Kernel> = Arc::new(parity);
    let started = Instant::now();
    let dispatcher = Dispatcher::new(cpu, &DispatcherConfig::default());
    println!(
        "calibration took {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "routing threshold: {:?}",
        dispatcher.routing_threshold_bytes()
    );
    println!(
        "{}",
        serde_json::to_string_pretty(&dispatcher.reports()).expect("serializes")
    );
}
