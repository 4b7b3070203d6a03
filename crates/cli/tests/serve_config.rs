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
    serve_options(cli.api_socket, cli.api_token_file, serve)
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
         tls_cert = \"/etc/c.pem\"\ntls_key = \"/etc/k.pem\"\nbusy_poll_us = 0\n",
    );
    let path = file.path().to_str().unwrap();
    let from_file = options(&["serve", "--config", path]).expect("options");
    assert_eq!(from_file.state_dir, PathBuf::from("/srv/tessera"));
    assert_eq!(from_file.api_socket, PathBuf::from("/srv/api.sock"));
    assert_eq!(from_file.nbd_listen.as_deref(), Some("0.0.0.0:10809"));
    assert_eq!(from_file.parity_engine, "cpu");
    assert_eq!(from_file.tls_cert, Some(PathBuf::from("/etc/c.pem")));
    assert_eq!(from_file.busy_poll_us, 0);
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
        "--busy-poll-us",
        "20",
    ])
    .expect("options");
    assert_eq!(overridden.busy_poll_us, 20);
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
        ("busy_poll_us = 200000\n", "busy_poll_us"),
        ("busy_poll_us = -1\n", "busy_poll_us"),
        ("state_dir = 7\n", "line 1: state_dir: invalid type"),
        ("\nstate_dir = \n", "line 2: state_dir: "),
        ("tls_cert = \"/c.pem\"\n", "tls_cert needs tls_key"),
        (
            "tls_client_ca = \"/ca.pem\"\n",
            "tls_client_ca needs tls_cert",
        ),
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

/// Runs the real `tessera serve` with a bad configuration file: it must stop before doing
/// anything, with exit status 2 and one line naming the file and the key.
fn refused_by_the_binary(args: &[&str], config: Option<&Path>) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
    command.args(args).env_remove("TESSERA_CONFIG");
    if let Some(config) = config {
        command.env("TESSERA_CONFIG", config);
    }
    let output = command.output().expect("tessera runs");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    stderr
}

#[test]
fn the_binary_refuses_a_bad_file_with_exit_status_2_before_starting() {
    let scratch = tempfile::tempdir().unwrap();
    // Were the file accepted, the daemon would start here and the test would hang or fail.
    let state = scratch.path().join("state");
    let file = config(&format!(
        "state_dir = \"{}\"\nnbd_socket = \"{}\"\nevent_hook_severity = \"loud\"\n",
        state.display(),
        scratch.path().join("nbd.sock").display()
    ));
    let path = file.path().to_str().unwrap();
    let api = scratch.path().join("api.sock");
    let api = api.to_str().unwrap();
    let line = refused_by_the_binary(&["--api-socket", api, "serve", "--config", path], None);
    assert!(
        line.starts_with(&format!("tessera: config {path}: event_hook_severity: ")),
        "{line}"
    );
    // The same file named by TESSERA_CONFIG.
    let line = refused_by_the_binary(&["--api-socket", api, "serve"], Some(file.path()));
    assert!(
        line.contains(path) && line.contains("event_hook_severity"),
        "{line}"
    );
    // A wrong type names the key and its line.
    let typed = config("\n\nnbd_listen = 10809\n");
    let typed_path = typed.path().to_str().unwrap();
    let line = refused_by_the_binary(&["serve", "--config", typed_path], None);
    assert!(
        line.contains(&format!(
            "config {typed_path} line 3: nbd_listen: invalid type"
        )),
        "{line}"
    );
    assert!(!state.exists(), "the daemon started");
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
        "api_listen",
        "api_token_file",
        "parity_engine",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "event_hook",
        "event_hook_severity",
        "busy_poll_us",
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
    verify_with_systemd(&unit);
}

/// `systemd-analyze verify` on the unit, with `ExecStart` pointing at the test binary (the
/// installed path does not exist on a build machine): systemd must find nothing to say.
fn verify_with_systemd(unit: &str) {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v systemd-analyze"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("SKIPPED (unit verification): systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tessera.service");
    let binary = env!("CARGO_BIN_EXE_tessera");
    assert!(unit.contains("/usr/bin/tessera "));
    std::fs::write(
        &path,
        unit.replace("/usr/bin/tessera ", &format!("{binary} ")),
    )
    .unwrap();
    let output = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze");
    let text = String::from_utf8_lossy(&output.stderr);
    // systemd-analyze exits 0 on unknown keys and bad values, with a line for each: any line
    // at all is a problem.
    assert!(
        output.status.success() && text.trim().is_empty(),
        "systemd-analyze verify: {}\n{text}",
        output.status
    );
}
