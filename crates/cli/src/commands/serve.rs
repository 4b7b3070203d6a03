//! `tessera serve`: hands the options to the daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use tessera_daemon::ServeOptions;

use super::Failure;
use crate::args::ServeArgs;

/// The daemon's options from the command line (and environment, through clap).
pub fn options(api_socket: PathBuf, args: ServeArgs) -> ServeOptions {
    ServeOptions {
        state_dir: args.state_dir,
        api_socket,
        nbd_socket: args.nbd_socket,
        nbd_listen: args.nbd_listen,
        parity_engine: args.parity_engine.name().to_string(),
        http_listen: args.http_listen,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        tls_client_ca: args.tls_client_ca,
    }
}

pub fn run(api_socket: PathBuf, args: ServeArgs) -> Result<ExitCode, Failure> {
    tessera_daemon::serve(options(api_socket, args))
        .map_err(|message| Failure::Other(format!("serve: {message}")))?;
    Ok(ExitCode::SUCCESS)
}
