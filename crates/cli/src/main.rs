//! `tessera`: see the library crate.

use std::process::ExitCode;

fn main() -> ExitCode {
    tessera_cli::main_with_args(std::env::args_os())
}
