//! The `tessera` command line: a thin client of the daemon's management API (crate
//! `tessera-api`), plus `tessera serve` (the daemon itself) and `tessera bench parity`.
//!
//! Exit status: 0 done; 1 the daemon refused or failed the request, or could not be reached;
//! 2 the command line is wrong (one line on standard error says what; nothing was sent).

pub mod args;
pub mod commands;
pub mod output;
pub mod progress;
pub mod style;
pub mod units;
pub mod usage;
pub mod values;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;
pub use commands::{Failure, execute};

/// The outcome of reading the command line, when it is not a command to run.
#[derive(Debug)]
pub enum NotRun {
    /// `--help` or `--version`: print this text to standard output, exit 0.
    Help(clap::Error),
    /// A wrong command line: this one line (without the `tessera: ` prefix), exit 2.
    Usage(String),
}

/// Reads the command line (`args[0]` is the program name).
pub fn parse<I, T>(args: I) -> Result<Cli, NotRun>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let refuse = |error: clap::Error| match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => NotRun::Help(error),
        _ => NotRun::Usage(usage::one_line(&error)),
    };
    let matches = Cli::command().try_get_matches_from(args).map_err(refuse)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(refuse)?;
    if let (args::Command::Serve(serve), Some(("serve", serve_matches))) =
        (&mut cli.command, matches.subcommand())
    {
        serve.explicit = explicit_options(&matches, serve_matches);
    }
    Ok(cli)
}

/// The ids of the options the user set for `serve`, on the command line or through the
/// environment (not clap's defaults).
fn explicit_options(top: &clap::ArgMatches, serve: &clap::ArgMatches) -> Vec<String> {
    let given = |matches: &clap::ArgMatches, id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let mut explicit: Vec<String> = serve
        .ids()
        .map(|id| id.as_str().to_string())
        .filter(|id| given(serve, id))
        .collect();
    for global in ["api_socket", "api_token_file"] {
        if given(top, global) && !explicit.iter().any(|id| id == global) {
            explicit.push(global.to_string());
        }
    }
    explicit
}

/// Runs the command line and returns the process exit status.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(NotRun::Help(help)) => {
            let _ = help.print();
            return ExitCode::SUCCESS;
        }
        Err(NotRun::Usage(line)) => {
            eprintln!("tessera: {line}");
            return ExitCode::from(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match execute(cli, &mut out) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("tessera: {failure}");
            failure.exit_code()
        }
    }
}
