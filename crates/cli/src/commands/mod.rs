//! Running a parsed command line.

mod bench;
mod dg;
mod events;
mod manual;
mod md_import;
mod pd;
mod serve;
mod vd;

use std::fmt;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use serde::Serialize;
use tessera_api::{Client, ClientError, DgRef};

pub use serve::options as serve_options;

use crate::args::{Cli, Command};
use crate::style::Style;

/// Why a command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong in a way clap cannot see (exit status 2, nothing sent).
    Usage(String),
    /// The daemon refused or failed the request, or could not be reached (exit status 1).
    Client(ClientError),
    /// Something else failed (exit status 1).
    Other(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(message) | Failure::Other(message) => f.write_str(message),
            Failure::Client(error) => write!(f, "{error}"),
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure::Client(error)
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Failure::Other(format!("cannot write the output: {error}"))
    }
}

impl Failure {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Usage(_) => ExitCode::from(2),
            Failure::Client(_) | Failure::Other(_) => ExitCode::from(1),
        }
    }
}

/// What a command needs to run: the daemon's client and where and how to print.
pub struct Context<'a> {
    /// The daemon.
    pub client: Client,
    /// Colour or not.
    pub style: Style,
    /// Whether standard output is a terminal (progress bars).
    pub terminal: bool,
    /// Standard output.
    pub out: &'a mut dyn Write,
}

impl Context<'_> {
    /// Prints `value` as pretty JSON.
    pub fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failure> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|error| Failure::Other(format!("cannot encode JSON: {error}")))?;
        writeln!(self.out, "{text}")?;
        Ok(())
    }

    /// Prints text as is.
    pub fn print(&mut self, text: &str) -> Result<(), Failure> {
        self.out.write_all(text.as_bytes())?;
        Ok(())
    }

    /// The id of a drive group named by id or name (a name costs one request).
    pub fn dg_id(&self, dg: &DgRef) -> Result<u32, Failure> {
        match dg {
            DgRef::Id(id) => Ok(*id),
            DgRef::Name(_) => Ok(self.client.get_dg(dg)?.id),
        }
    }
}

/// The API client the global options ask for: the Unix socket, or TLS with the token.
fn client(cli: &Cli) -> Result<Client, Failure> {
    let Some(url) = &cli.api_url else {
        return Ok(Client::new(&cli.api_socket));
    };
    let (Some(token_file), Some(ca)) = (&cli.api_token_file, &cli.api_ca) else {
        return Err(Failure::Usage(
            "--api-url needs --api-token-file and --api-ca".into(),
        ));
    };
    let token = tessera_api::tls::ApiToken::from_file(token_file).map_err(Failure::Usage)?;
    Client::over_tls(url, ca, token).map_err(Failure::Usage)
}

/// Runs `cli`, printing to standard output. `Ok(code)`: the command ran (the code may still
/// report a failed operation, such as a scrub that stopped early).
pub fn execute(cli: Cli, out: &mut dyn Write) -> Result<ExitCode, Failure> {
    let mut context = Context {
        client: client(&cli)?,
        style: Style::for_stdout(),
        terminal: std::io::stdout().is_terminal(),
        out,
    };
    match cli.command {
        Command::Pd(command) => pd::run(&mut context, command),
        Command::Dg(command) => dg::run(&mut context, command),
        Command::Vd(command) => vd::run(&mut context, command),
        Command::Info(flag) => {
            let info = context.client.info()?;
            if flag.json {
                context.json(&info)?;
            } else {
                let text = crate::output::describe_info(context.style, &info);
                context.print(&text)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Events(args) => events::run(&mut context, args),
        Command::Bench(command) => bench::run(&mut context, command),
        Command::Serve(args) => serve::run(cli.api_socket, cli.api_token_file, args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            // Into memory first: the generator panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "tessera", &mut script);
            context.out.write_all(&script)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => manual::run(&mut context, dir),
    }
}
