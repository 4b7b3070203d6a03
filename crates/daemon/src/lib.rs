//! The Tessera daemon (`tessera serve`). A stub until the daemon lands: the CLI already parses
//! the options into `ServeOptions` and calls `serve`.

use std::path::PathBuf;

/// Everything `tessera serve` takes from its command line and environment.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Directory holding the daemon's small state (the list of member paths to probe).
    pub state_dir: PathBuf,
    /// Unix socket of the management API.
    pub api_socket: PathBuf,
    /// Unix socket of the NBD server.
    pub nbd_socket: PathBuf,
    /// TCP address of the NBD server (`host:port`), if NBD over TCP is wanted.
    pub nbd_listen: Option<String>,
    /// Which engine computes parity: `cpu`, `gpu` or `auto`.
    pub parity_engine: String,
    /// TCP address serving `/metrics` and the dashboard, if wanted.
    pub http_listen: Option<String>,
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT.
pub fn serve(options: ServeOptions) -> Result<(), String> {
    let _ = options;
    Err("not implemented yet".into())
}
