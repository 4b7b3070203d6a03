//! Prints the start-up kernel selection and how long it took:
//! `cargo run --release -p tessera-parity --example selection`.

use std::time::Instant;

use tessera_parity::{Parity, SelectionConfig};

fn main() {
    let started = Instant::now();
    match Parity::select(&SelectionConfig::default()) {
        Ok(parity) => {
            let elapsed = started.elapsed();
            print!("{}", parity.report());
            println!("selection took {} ms", elapsed.as_millis());
        }
        Err(error) => {
            eprintln!("selection: {error}");
            std::process::exit(1);
        }
    }
}
