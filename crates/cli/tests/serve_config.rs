//! `tessera serve`'s configuration file and the packaged files: the file is read, options given
//! on the command line win over it, unknown keys and bad values are refused (exit status 2),
//! the shipped default file yields exactly the built-in defaults, and the systemd unit runs the
//! daemon with that file.

use std::path::{Path, PathBuf};
use tessera_cli::args::Command;
use tessera_cli::commands::{Failure, serve_options};
use tessera_cli::parse;
use tessera_daemon::ServeOptions;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tessera ARGS` parsed into serve options (or the failure).
fn options(args: &[&str]) -> Result<ServeOptions, Failure> {
    let cli = parse(std::iter::once("tessera").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{args:?} refused: {error:?}"));
    let Command::Serve(serve) = cli.command else {
        panic!("not serve");
    };
    serve_options(cli.api_socket, serve)
}

fn config(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

#[test]
fn the_file_is_read_and_the_command_line_wins() {
    let file = config(
        "state_dir = \"/srv/tessera\"\napi_socket = \"/srv/api.sock\"\n\
         nbd_listen = \"0.0.0.0:10809\"\nparity_engine = \"cpu\"\n\
         tls_cert = \"/etc/c.pem\"\ntls_key = \"/etc/k.pem\"\n",
    );
    let path = file.path().to_str().unwrap();
    let from_file = options(&["serve", "--config", path]).expect("options");
    assert_eq!(from_file.state_dir, PathBuf::from("/srv/tessera"));
    assert_eq!(from_file.api_socket, PathBuf::from("/srv/api.sock"));
    assert_eq!(from_file.nbd_listen.as_deref(), Some("0.0.0.0:10809"));
    assert_eq!(from_file.parity_engine, "cpu");
    assert_eq!(from_file.tls_cert, Some(PathBuf::from("/etc/c.pem")));
    // Not in the file: the built-in default.
    assert_eq!(from_file.nbd_socket, PathBuf::from("/run/tessera/nbd.sock"));
    assert_eq!(from_file.http_listen, None);

    let overridden = options(&[
        "--api-socket",
        "/x/api.sock",
        "serve",
        "--config",
        path,
        "--state-dir",
        "/x",
        "--parity-engine",
        "auto",
    ])
    .expect("options");
    assert_eq!(overridden.state_dir, PathBuf::from("/x"));
    assert_eq!(overridden.api_socket, PathBuf::from("/x/api.sock"));
    assert_eq!(overridden.parity_engine, "auto");
    assert_eq!(overridden.nbd_listen.as_deref(), Some("0.0.0.0:10809"));
}

#[test]
fn unknown_keys_and_bad_values_are_refused_naming_the_file_and_key() {
    for (text, expected) in [
        ("state_dri = \"/s\"\n", "unknown field `state_dri`"),
        ("parity_engine = \"quantum\"\n", "parity_engine"),
        ("nbd_listen = \"nowhere\"\n", "nbd_listen"),
        ("state_dir = 7\n", "invalid type"),
        ("state_dir = \n", "config"),
    ] {
        let file = config(text);
        let path = file.path().to_str().unwrap();
        match options(&["serve", "--config", path]) {
            Err(Failure::Usage(message)) => {
                assert!(message.contains(path), "{message}");
                assert!(message.contains(expected), "{text:?}: {message}");
            }
            other => panic!("{text:?} accepted: {:?}", other.map(|o| o.state_dir)),
        }
    }
    match options(&["serve", "--config", "/nonexistent/tessera.toml"]) {
        Err(Failure::Usage(message)) => assert!(message.contains("/nonexistent"), "{message}"),
        other => panic!(
            "a missing file was accepted: {:?}",
            other.map(|o| o.state_dir)
        ),
    }
}

#[test]
fn the_shipped_file_yields_the_defaults_and_documents_every_key() {
    let shipped = repository().join("packaging/tessera.toml");
    let path = shipped.to_str().unwrap();
    let from_file = options(&["serve", "--config", path]).expect("shipped file");
    let defaults = options(&["serve", "--config", "/dev/null"]).expect("empty file");
    assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
    // Each key, uncommented, is accepted and documented.
    let text = std::fs::read_to_string(&shipped).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|line| {
            line.strip_prefix('#')?
                .split_once(" = ")
                .map(|(key, _)| key)
        })
        .collect();
    for key in [
        "state_dir",
        "api_socket",
        "nbd_socket",
        "nbd_listen",
        "http_listen",
        "parity_engine",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "event_hook",
        "event_hook_severity",
    ] {
        assert!(keys.contains(&key), "{key} is not in the shipped file");
    }
    let uncommented: String = text
        .lines()
        .map(|line| {
            line.strip_prefix('#')
                .filter(|l| l.contains(" = "))
                .unwrap_or(line)
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let file = config(&uncommented);
    options(&["serve", "--config", file.path().to_str().unwrap()]).expect("every key accepted");
}

#[test]
fn the_systemd_unit_runs_the_daemon_with_the_shipped_file() {
    let unit = std::fs::read_to_string(repository().join("packaging/tessera.service")).unwrap();
    for line in [
        "ExecStart=/usr/bin/tessera serve --config /etc/tessera/tessera.toml",
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "RuntimeDirectory=tessera",
        "StateDirectory=tessera",
        "WantedBy=multi-user.target",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(repository().join("packaging/tessera.service"))
        .output();
    match verify {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stderr);
            // The binary path does not exist on a build machine; nothing else may be wrong.
            let problems: Vec<&str> = text
                .lines()
                .filter(|line| !line.contains("/usr/bin/tessera") && !line.trim().is_empty())
                .collect();
            assert!(problems.is_empty(), "systemd-analyze: {text}");
        }
        Err(_) => eprintln!("SKIPPED (unit verification): systemd-analyze is not installed"),
    }
}
