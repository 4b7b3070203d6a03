//! The Tessera daemon (`tessera serve`): owns the drives, runs one engine per drive group on the
//! data-plane thread, serves virtual drives over NBD and the management API on a Unix socket.

mod blob;
#[cfg(feature = "gpu")]
mod compute;
mod control;
mod devices;
mod events;
mod hook;
mod metrics;
mod plane;
mod state;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// Logs one line to stderr with a UTC timestamp (systemd adds its own; this keeps plain runs
/// readable).
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let seconds = now.as_secs();
        eprintln!(
            "{:02}:{:02}:{:02}.{:03} tessera: {}",
            seconds / 3600 % 24,
            seconds / 60 % 60,
            seconds % 60,
            now.subsec_millis(),
            format_args!($($arg)*)
        );
    }};
}

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
    /// TCP address serving the whole management API over TLS (`tls_cert`, `tls_key`) to
    /// clients presenting the token in `api_token_file`, if wanted.
    pub api_listen: Option<String>,
    pub api_token_file: Option<PathBuf>,
    /// NBD over TLS: certificate chain and key (PEM), and the CAs client certificates are
    /// checked against.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// A command run (through `/bin/sh -c`) for every event at or above
    /// `event_hook_severity` (`info`, `warning`, `error`, `critical`).
    pub event_hook: Option<String>,
    pub event_hook_severity: String,
    /// How long the data plane looks for completions before it sleeps, in microseconds
    /// (`tessera_io::Driver::set_busy_poll`); 0 turns it off.
    pub busy_poll_us: u32,
}

/// Blocks SIGTERM and SIGINT in every thread and returns a signalfd that reports them, so the
/// data plane sees a stop request as an ordinary readable descriptor.
fn stop_signals() -> Result<OwnedFd, String> {
    // SAFETY: sigset manipulation on a local, zero-initialized sigset_t; sigprocmask and
    // signalfd with valid arguments. The mask is set before any thread starts, so every thread
    // inherits it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err("cannot block stop signals".into());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(format!(
                "cannot create a signalfd: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The management API on `address` over TLS, every request required to carry the API token.
/// Refused unless both the certificate and the token file are given: the API can create and
/// delete drives, so it is never served in plaintext or to anyone who can reach the port.
fn serve_api_over_tls(
    address: &str,
    options: &ServeOptions,
    router: tessera_api::router::Router,
) -> Result<tessera_api::server::ApiServer, String> {
    let (Some(cert), Some(key)) = (&options.tls_cert, &options.tls_key) else {
        return Err(format!(
            "--api-listen {address}: the management API over TCP is served only over TLS; give --tls-cert and --tls-key"
        ));
    };
    let Some(token_file) = &options.api_token_file else {
        return Err(format!(
            "--api-listen {address}: the management API over TCP needs a token; give --api-token-file"
        ));
    };
    let token = tessera_api::tls::ApiToken::from_owner_only_file(token_file)?;
    let tls = tessera_api::tls::server_config(cert, key, None)?;
    let server = tessera_api::server::ApiServer::bind_tls(
        address,
        tessera_api::server::ServerConfig::default(),
        router,
        tls,
        token,
    )
    .map_err(|e| format!("--api-listen {address}: {e}"))?;
    log!(
        "serving: management API on https://{}/ (TLS, token required)",
        server.local_address()
    );
    Ok(server)
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT, then stops cleanly: requests in
/// flight finish, members are flushed, groups are marked clean.
pub fn serve(options: ServeOptions) -> Result<(), String> {
    let signals = stop_signals()?;
    let parity_config = tessera_parity::SelectionConfig::default();
    let parity = Arc::new(
        tessera_parity::Parity::select(&parity_config).map_err(|e| format!("parity: {e}"))?,
    );
    log!(
        "{}",
        parity
            .report()
            .to_string()
            .lines()
            .next()
            .unwrap_or("parity kernels chosen")
    );
    let (plane, handle) = plane::DataPlane::new(options.clone(), parity, Some(signals))?;
    let data_plane = std::thread::Builder::new()
        .name("data-plane".into())
        .spawn(move || plane.run())
        .map_err(|e| format!("cannot start the data plane: {e}"))?;
    // Drives exported over ublk when the daemon last ran are exported again.
    plane::restore_ublk(&handle);
    let controller: Arc<dyn tessera_api::controller::Controller> =
        Arc::new(control::Control::new(handle));
    let router = tessera_api::router::Router::new(Arc::clone(&controller));
    let router_for_tls = router.clone();
    let api = tessera_api::server::ApiServer::bind_unix(
        &options.api_socket,
        tessera_api::server::ServerConfig::default(),
        router,
    )
    .map_err(|e| format!("management API: {e}"))?;
    // The opt-in TCP listener: unauthenticated, so read-only (the dashboard, `/metrics` and
    // the GETs the dashboard polls).
    let remote_api = match &options.api_listen {
        Some(address) => Some(serve_api_over_tls(address, &options, router_for_tls)?),
        None => None,
    };
    let http = match &options.http_listen {
        Some(address) => {
            let server = tessera_api::server::ApiServer::bind_tcp(
                address,
                tessera_api::server::ServerConfig::default(),
                tessera_api::router::Router::read_only(controller),
            )
            .map_err(|e| format!("--http-listen {address}: {e}"))?;
            log!(
                "serving: dashboard and metrics on http://{}/",
                server.local_address()
            );
            Some(server)
        }
        None => None,
    };
    log!(
        "serving: API on {}, NBD on {}{}",
        options.api_socket.display(),
        options.nbd_socket.display(),
        options
            .nbd_listen
            .as_ref()
            .map(|a| format!(" and {a}"))
            .unwrap_or_default()
    );
    let result = data_plane.join();
    if let Some(http) = http {
        http.shutdown();
    }
    if let Some(remote_api) = remote_api {
        remote_api.shutdown();
    }
    api.shutdown();
    result.map_err(|_| "the data plane stopped abnormally".to_string())
}
