//! `tessera serve`: the daemon's options from the command line, the environment and the
//! configuration file (in that order of precedence), handed to the daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Deserialize;
use tessera_daemon::ServeOptions;

use super::Failure;
use crate::args::ServeArgs;
use crate::values;

/// Read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG: &str = "/etc/tessera/tessera.toml";

/// The configuration file: every key is a `tessera serve` option (packaging/tessera.toml
/// documents them). Unknown keys are refused, so a misspelt setting is an error, not a no-op.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    state_dir: Option<PathBuf>,
    api_socket: Option<PathBuf>,
    nbd_socket: Option<PathBuf>,
    nbd_listen: Option<String>,
    http_listen: Option<String>,
    api_listen: Option<String>,
    api_token_file: Option<PathBuf>,
    parity_engine: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    event_hook: Option<String>,
    event_hook_severity: Option<String>,
    busy_poll_us: Option<u32>,
}

fn load(path: &Path) -> Result<ConfigFile, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| Failure::Usage(format!("config {}: {error}", path.display())))?;
    let file: ConfigFile = toml::from_str(&text)
        .map_err(|error| Failure::Usage(describe_toml_error(path, &text, &error)))?;
    let bad = |key: &str, error: String| {
        Failure::Usage(format!("config {}: {key}: {error}", path.display()))
    };
    for (key, address) in [
        ("nbd_listen", &file.nbd_listen),
        ("http_listen", &file.http_listen),
        ("api_listen", &file.api_listen),
    ] {
        if let Some(address) = address {
            values::listen_address(address).map_err(|error| bad(key, error))?;
        }
    }
    if let Some(busy_poll_us) = file.busy_poll_us {
        values::busy_poll_us_in_range(busy_poll_us).map_err(|error| bad("busy_poll_us", error))?;
    }
    if let Some(severity) = &file.event_hook_severity {
        values::severity(severity).map_err(|error| bad("event_hook_severity", error))?;
    }
    if let Some(engine) = &file.parity_engine
        && !matches!(engine.as_str(), "cpu" | "gpu" | "auto")
    {
        return Err(bad(
            "parity_engine",
            format!("{engine:?} is not one of: cpu, gpu, auto"),
        ));
    }
    Ok(file)
}

/// One line naming the file, the line and (when the line has one) the key: toml's own messages
/// span several lines and name no key for a value of the wrong type.
fn describe_toml_error(path: &Path, text: &str, error: &toml::de::Error) -> String {
    let message = error
        .message()
        .split('\n')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let Some(span) = error.span() else {
        return format!("config {}: {message}", path.display());
    };
    let start = span.start.min(text.len());
    let number = text[..start].matches('\n').count() + 1;
    let key = text
        .lines()
        .nth(number - 1)
        .and_then(|line| line.split_once('='))
        .map(|(key, _)| key.trim())
        .filter(|key| !key.is_empty() && !message.contains(&format!("`{key}`")));
    match key {
        Some(key) => format!("config {} line {number}: {key}: {message}", path.display()),
        None => format!("config {} line {number}: {message}", path.display()),
    }
}

/// TLS needs a certificate and its key together, and client CAs only make sense with them;
/// clap checks this for the command line, this checks the merged settings (the file, or the
/// file and the command line together).
fn check_tls(options: &ServeOptions, path: Option<&Path>) -> Result<(), Failure> {
    let missing = match (&options.tls_cert, &options.tls_key) {
        (Some(_), None) => Some(("tls_cert", "tls_key")),
        (None, Some(_)) => Some(("tls_key", "tls_cert")),
        (None, None) if options.tls_client_ca.is_some() => Some(("tls_client_ca", "tls_cert")),
        _ => None,
    };
    let missing = missing.or(match &options.api_listen {
        Some(_) if options.tls_cert.is_none() => Some(("api_listen", "tls_cert")),
        Some(_) if options.api_token_file.is_none() => Some(("api_listen", "api_token_file")),
        _ => None,
    });
    let Some((given, needed)) = missing else {
        return Ok(());
    };
    let place = path.map_or(String::new(), |path| format!("config {}: ", path.display()));
    Err(Failure::Usage(format!(
        "{place}{given} needs {needed} as well"
    )))
}

/// The daemon's options: a setting given on the command line or in the environment wins,
/// then the configuration file, then the built-in default.
pub fn options(
    api_socket: PathBuf,
    api_token_file: Option<PathBuf>,
    args: ServeArgs,
) -> Result<ServeOptions, Failure> {
    let path = args.config.clone().or_else(|| {
        Path::new(DEFAULT_CONFIG)
            .exists()
            .then(|| DEFAULT_CONFIG.into())
    });
    let file = match &path {
        Some(path) => load(path)?,
        None => ConfigFile::default(),
    };
    let explicit = |id: &str| args.explicit.iter().any(|given| given == id);
    fn pick<T>(explicit: bool, flag: T, file: Option<T>) -> T {
        match file {
            Some(value) if !explicit => value,
            _ => flag,
        }
    }
    fn pick_optional<T>(explicit: bool, flag: Option<T>, file: Option<T>) -> Option<T> {
        if explicit { flag } else { file.or(flag) }
    }
    let options = ServeOptions {
        state_dir: pick(explicit("state_dir"), args.state_dir, file.state_dir),
        api_socket: pick(explicit("api_socket"), api_socket, file.api_socket),
        nbd_socket: pick(explicit("nbd_socket"), args.nbd_socket, file.nbd_socket),
        nbd_listen: pick_optional(explicit("nbd_listen"), args.nbd_listen, file.nbd_listen),
        parity_engine: pick(
            explicit("parity_engine"),
            args.parity_engine.name().to_string(),
            file.parity_engine,
        ),
        http_listen: pick_optional(explicit("http_listen"), args.http_listen, file.http_listen),
        api_listen: pick_optional(explicit("api_listen"), args.api_listen, file.api_listen),
        api_token_file: pick_optional(
            explicit("api_token_file"),
            api_token_file,
            file.api_token_file,
        ),
        tls_cert: pick_optional(explicit("tls_cert"), args.tls_cert, file.tls_cert),
        tls_key: pick_optional(explicit("tls_key"), args.tls_key, file.tls_key),
        tls_client_ca: pick_optional(
            explicit("tls_client_ca"),
            args.tls_client_ca,
            file.tls_client_ca,
        ),
        event_hook: pick_optional(explicit("event_hook"), args.event_hook, file.event_hook),
        event_hook_severity: pick(
            explicit("event_hook_severity"),
            args.event_hook_severity,
            file.event_hook_severity,
        ),
        busy_poll_us: pick(
            explicit("busy_poll_us"),
            args.busy_poll_us,
            file.busy_poll_us,
        ),
    };
    check_tls(&options, path.as_deref())?;
    Ok(options)
}

pub fn run(
    api_socket: PathBuf,
    api_token_file: Option<PathBuf>,
    args: ServeArgs,
) -> Result<ExitCode, Failure> {
    tessera_daemon::serve(options(api_socket, api_token_file, args)?)
        .map_err(|message| Failure::Other(format!("serve: {message}")))?;
    Ok(ExitCode::SUCCESS)
}
