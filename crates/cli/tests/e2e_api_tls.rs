//! The management API over TCP (`tessera serve --api-listen`): served only over TLS and only to
//! clients presenting the token. The `tessera` command drives the daemon from "another host"
//! (`--api-url`), changes are audited with who made them, and every way in without the token,
//! without TLS or without trusting the daemon's certificate is refused.

mod daemon;
use daemon::certs::{make_ca, sign};
use daemon::{Daemon, TESSERA, have};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn write_token(path: &Path, token: &str, mode: u32) {
    std::fs::write(path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `tessera --api-url URL --api-token-file TOKEN --api-ca CA ARGS` with no Unix socket at all.
fn remote(url: &str, token: &Path, ca: &Path, args: &[&str]) -> Output {
    Command::new(TESSERA)
        .args(["--api-socket", "/nonexistent/api.sock", "--api-url", url])
        .arg("--api-token-file")
        .arg(token)
        .arg("--api-ca")
        .arg(ca)
        .args(args)
        .env_remove("TESSERA_API_URL")
        .output()
        .expect("run tessera")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `ip:port` the daemon logged for its TLS API listener (it starts just after the socket
/// the test harness waits for).
fn api_address(daemon: &Daemon) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut log = daemon.log();
    while !log.contains("management API on https://") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        log = daemon.log();
    }
    let line = log
        .lines()
        .find(|line| line.contains("management API on https://"))
        .unwrap_or_else(|| panic!("no TLS API listener in the log:\n{log}"));
    let start = line.find("https://").unwrap() + "https://".len();
    line[start..].split('/').next().unwrap().to_string()
}

/// `tessera serve ARGS` that must refuse to start; returns what it said.
fn serve_refused(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(TESSERA)
        .args(["serve", "--config", "/dev/null", "--state-dir"])
        .arg(dir.join("refused-state"))
        .arg("--api-socket")
        .arg(dir.join("refused-api.sock"))
        .arg("--nbd-socket")
        .arg(dir.join("refused-nbd.sock"))
        .args(args)
        .env_remove("TESSERA_API_TOKEN_FILE")
        .env_remove("TESSERA_API_LISTEN")
        .output()
        .expect("run tessera serve");
    assert!(
        !output.status.success(),
        "serve {args:?} started: {}",
        text(&output)
    );
    text(&output)
}

#[test]
fn management_api_over_tcp_needs_tls_and_the_token() {
    if !have("openssl") {
        eprintln!("SKIPPED: openssl is not installed (scripts/setup.sh installs it)");
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let trusted = keys.path().join("trusted");
    let stranger = keys.path().join("stranger");
    make_ca(&trusted, "/CN=Tessera test CA");
    sign(
        &trusted,
        "server",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    make_ca(&stranger, "/CN=Someone else");
    let cert = trusted.join("server-cert.pem").display().to_string();
    let key = trusted.join("server-key.pem").display().to_string();
    let ca = trusted.join("ca-cert.pem");
    let stranger_ca = stranger.join("ca-cert.pem");
    let token = keys.path().join("api-token");
    write_token(&token, "correct-horse-battery-staple-42", 0o600);
    let token_arg = token.display().to_string();

    // The daemon refuses to offer the API over TCP without TLS, without a token, or with a
    // token file others can read.
    let readable = keys.path().join("readable-token");
    write_token(&readable, "correct-horse-battery-staple-42", 0o644);
    let readable_arg = readable.display().to_string();
    let tls: [&str; 4] = ["--tls-cert", &cert, "--tls-key", &key];
    let refusals: [(Vec<&str>, &str); 3] = [
        (vec!["--api-token-file", &token_arg], "tls_cert"),
        (tls.to_vec(), "api_token_file"),
        (
            [&tls[..], &["--api-token-file", &readable_arg]].concat(),
            "chmod 600",
        ),
    ];
    for (extra, expected) in refusals {
        let args = [&["--api-listen", "127.0.0.1:0"][..], &extra].concat();
        let said = serve_refused(keys.path(), &args);
        assert!(said.contains(expected), "{args:?}: {said}");
    }

    let daemon = Daemon::start_with(&[
        "--api-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--api-token-file",
        &token_arg,
    ]);
    let address = api_address(&daemon);
    let port = address.rsplit_once(':').unwrap().1.to_string();
    let url = format!("https://localhost:{port}");

    // The whole API from "another host": add drives, make a group and a virtual drive.
    let member_paths: Vec<String> = (0..3)
        .map(|i| {
            let path = daemon.path(&format!("remote-member-{i}.img"));
            std::fs::File::create(&path)
                .unwrap()
                .set_len(64 << 20)
                .unwrap();
            path.display().to_string()
        })
        .collect();
    for path in &member_paths {
        let output = remote(&url, &token, &ca, &["pd", "add", path]);
        assert!(
            output.status.success(),
            "pd add over TLS: {}",
            text(&output)
        );
    }
    let output = remote(
        &url,
        &token,
        &ca,
        &[
            "dg", "create", "--level", "5", "--name", "far", "0", "1", "2",
        ],
    );
    assert!(
        output.status.success(),
        "dg create over TLS: {}",
        text(&output)
    );
    let output = remote(
        &url,
        &token,
        &ca,
        &[
            "vd",
            "create",
            "far",
            "--size",
            "16M",
            "--name",
            "remote-vd",
        ],
    );
    assert!(
        output.status.success(),
        "vd create over TLS: {}",
        text(&output)
    );
    // What was done remotely is what the local socket sees.
    let vd = daemon.json(&["vd", "describe", "remote-vd"]);
    assert_eq!(vd["size_bytes"], 16u64 << 20, "{vd:#}");
    let output = remote(&url, &token, &ca, &["dg", "describe", "far", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    let group: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(group["members"].as_array().unwrap().len(), 3, "{group:#}");

    // Every change is audited with who made it.
    let events = daemon.json(&["events"]);
    let audited = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"] == "api_request")
        .filter(|event| {
            event["message"]
                .as_str()
                .is_some_and(|m| m.contains("API token over TLS"))
        })
        .count();
    assert!(audited >= 5, "remote changes not audited: {events:#}");

    // A wrong token is refused (and the refusal audited); nothing changes.
    let wrong = keys.path().join("wrong-token");
    write_token(&wrong, "correct-horse-battery-staple-43", 0o600);
    let output = remote(&url, &wrong, &ca, &["vd", "delete", "remote-vd", "--force"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("token"), "{}", text(&output));
    daemon.json(&["vd", "describe", "remote-vd"]);
    let events = daemon.json(&["events"]);
    assert!(
        events.as_array().unwrap().iter().any(|event| {
            event["kind"] == "api_request"
                && event["message"].as_str().is_some_and(|m| m.contains("401"))
        }),
        "refused request not audited: {events:#}"
    );

    // A client that does not trust the daemon's certificate stops at the handshake.
    let output = remote(&url, &token, &stranger_ca, &["pd", "list"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("TLS"), "{}", text(&output));

    // Plain HTTP on the port gets no answer from the API.
    let mut plain = std::net::TcpStream::connect(&address).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /v1/pds HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "answered in plaintext: {}",
        String::from_utf8_lossy(&answer)
    );

    // The unauthenticated pieces are not reachable by other means either: a URL that is not
    // https is refused by the client.
    let output = remote(
        &format!("http://localhost:{port}"),
        &token,
        &ca,
        &["pd", "list"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
}
