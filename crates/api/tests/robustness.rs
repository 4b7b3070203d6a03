//! Malformed HTTP, oversize input, bad JSON, unknown paths and controller panics all get clean
//! errors, and the server keeps serving afterwards.

mod common;

use std::io::{BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use common::{FakeDaemon, exchange_raw, read_answer};
use tessera_api::http::Limits;
use tessera_api::testing::FakeController;
use tessera_api::{ApiServer, ClientError, Router, ServerConfig, ServerError};

/// The daemon still answers a well-formed request on a new connection.
fn still_serving(daemon: &FakeDaemon) {
    let (answer, _) = exchange_raw(daemon, b"GET /v1/pds HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "[]");
}

#[test]
fn malformed_requests_get_400_and_the_connection_closes() {
    let daemon = FakeDaemon::start();
    for request in [
        &b"HELLO\r\n\r\n"[..],
        b"GET /v1/pds HTTP/9.9\r\n\r\n",
        b"GET /v1/pds HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET v1/pds HTTP/1.1\r\n\r\n",
        b"POST /v1/pds HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST /v1/pds HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"POST /v1/pds HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"GET /v1/\xff\xfe HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    ] {
        let (answer, closed) = exchange_raw(&daemon, request);
        assert_eq!(answer.status, 400, "{:?}", String::from_utf8_lossy(request));
        assert_eq!(answer.error_code(), "invalid_argument");
        assert!(closed, "connection left open after {request:?}");
        assert_eq!(answer.header("connection"), Some("close"));
    }
    still_serving(&daemon);
}

#[test]
fn oversize_head_and_body_are_refused() {
    let daemon = FakeDaemon::start();
    let limits = Limits::default();
    let long_header = format!(
        "GET /v1/pds HTTP/1.1\r\nX-Padding: {}\r\n\r\n",
        "x".repeat(limits.max_head_bytes)
    );
    let (answer, closed) = exchange_raw(&daemon, long_header.as_bytes());
    assert_eq!(answer.status, 431);
    assert!(closed);

    let many_headers: String = (0..=limits.max_headers)
        .map(|i| format!("X-{i}: y\r\n"))
        .collect();
    let request = format!("GET /v1/pds HTTP/1.1\r\n{many_headers}\r\n");
    let (answer, _) = exchange_raw(&daemon, request.as_bytes());
    assert_eq!(answer.status, 431);

    // The body is refused from its declared length, before a byte of it is read.
    let request = format!(
        "POST /v1/pds HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        limits.max_body_bytes + 1
    );
    let (answer, closed) = exchange_raw(&daemon, request.as_bytes());
    assert_eq!(answer.status, 413);
    assert_eq!(answer.error_code(), "payload_too_large");
    assert!(closed);
    let request = "POST /v1/pds HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n";
    let (answer, _) = exchange_raw(&daemon, request.as_bytes());
    assert_eq!(answer.status, 413);
    still_serving(&daemon);
}

#[test]
fn bad_bodies_and_paths_get_clear_errors_on_a_kept_connection() {
    let daemon = FakeDaemon::start();
    let stream = daemon.connect();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut ask = |request: String| {
        writer.write_all(request.as_bytes()).unwrap();
        read_answer(&mut reader)
    };
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };

    let answer = ask(post("/v1/pds", "{\"path\": "));
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), "invalid_argument");
    assert!(
        answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid request body: ")
    );
    assert_eq!(answer.header("connection"), Some("keep-alive"));

    let answer = ask(post("/v1/pds", r#"{"path": "/x", "sparse": true}"#));
    assert_eq!(
        answer.status, 400,
        "unknown fields are refused: {}",
        answer.body
    );
    assert!(answer.body.contains("sparse"));

    let answer = ask(post("/v1/pds", ""));
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("needs a JSON body"));

    let answer = ask(post("/v1/dgs", r#"{"level": 4, "pds": [0, 1, 2]}"#));
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("unknown RAID level"));

    let answer = ask("GET /v1/nothing HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (404, "not_found")
    );
    let answer = ask("GET /v1/pds/ HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400, "{}", answer.body);
    let answer = ask("GET /v1/pds/x HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("not a number"));
    let answer = ask("GET /v1/pds/99999999999 HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400);
    let answer = ask("GET / HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 404);

    let answer = ask("PUT /v1/pds HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 405);
    assert_eq!(answer.error_code(), "method_not_allowed");
    assert_eq!(answer.header("allow"), Some("GET, POST"));

    let answer = ask("DELETE /v1/dgs/0?force=perhaps HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400);
    let answer = ask("GET /v1/events?since=-1 HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400);
    let answer = ask("GET /v1/events?since=0&x=%zz HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400);

    // The same connection still works, including a percent-encoded path segment.
    let answer = ask(post("/v1/pds", r#"{"path": "/tmp/a"}"#));
    assert_eq!(answer.status, 201);
    assert_eq!(answer.json()["id"], 0);
    let answer = ask("GET /v1/pds/%30 HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["path"], "/tmp/a");
    let answer = ask("GET /v1/dgs/dg%200 HTTP/1.1\r\n\r\n".to_string());
    assert_eq!(answer.status, 400, "a space is not allowed in names");
}

#[test]
fn pipelined_requests_and_expect_continue() {
    let daemon = FakeDaemon::start();
    let mut stream = daemon.connect();
    stream
        .write_all(b"GET /v1/pds HTTP/1.1\r\n\r\nGET /v1/vds HTTP/1.1\r\n\r\nGET /v1/dgs HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for _ in 0..3 {
        let answer = read_answer(&mut reader);
        assert_eq!((answer.status, answer.body.as_str()), (200, "[]"));
    }

    let body = r#"{"path": "/tmp/c"}"#;
    let mut stream = daemon.connect();
    write!(
        stream,
        "POST /v1/pds HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut interim = [0u8; 25];
    stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(body.as_bytes()).unwrap();
    let answer = read_answer(&mut BufReader::new(stream));
    assert_eq!(answer.status, 201);
}

#[test]
fn a_panicking_controller_answers_500_and_serving_goes_on() {
    let daemon = FakeDaemon::start();
    let client = daemon.client();
    let result = client.create_pd(&tessera_api::CreatePd {
        path: "panic://".to_string(),
        ..Default::default()
    });
    match result {
        Err(ClientError::Api(error)) => assert_eq!(error.code, tessera_api::ErrorCode::Internal),
        other => panic!("expected internal, got {other:?}"),
    }
    // The fake's lock was poisoned by the panic; the server recovers it and goes on.
    assert!(client.list_pds().unwrap().is_empty());
}

#[test]
fn socket_is_private_and_removed_on_shutdown() {
    let mut daemon = FakeDaemon::start();
    let metadata = std::fs::metadata(&daemon.socket).unwrap();
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
    daemon.server.take().unwrap().shutdown();
    assert!(!daemon.socket.exists());

    let config = ServerConfig {
        socket_mode: 0o660,
        ..ServerConfig::default()
    };
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("api.sock");
    let router = Router::new(Arc::new(FakeController::new()));
    let server = ApiServer::bind_unix(&path, config, router).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    drop(server);
    assert!(!path.exists());
}

#[test]
fn shutdown_finishes_when_the_socket_file_was_removed() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("api.sock");
    let server = ApiServer::bind_unix(
        &path,
        ServerConfig::default(),
        Router::new(Arc::new(FakeController::new())),
    )
    .unwrap();
    drop(directory);
    assert!(!path.exists());
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        server.shutdown();
        let _ = done.send(());
    });
    assert!(
        finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_ok(),
        "shutdown hung on an accept thread it could not wake"
    );
}

#[test]
fn stale_sockets_are_replaced_live_ones_and_other_files_refused() {
    let directory = tempfile::tempdir().unwrap();
    let router = || Router::new(Arc::new(FakeController::new()));

    // A stale socket: bound once, its listener gone.
    let path = directory.path().join("stale.sock");
    drop(UnixListener::bind(&path).unwrap());
    let server = ApiServer::bind_unix(&path, ServerConfig::default(), router()).unwrap();
    assert!(UnixStream::connect(&path).is_ok());

    // A second daemon on the same socket is refused, and the first keeps serving.
    match ApiServer::bind_unix(&path, ServerConfig::default(), router()) {
        Err(ServerError::InUse { path: reported }) => assert_eq!(reported, path),
        other => panic!("expected InUse, got {:?}", other.map(|_| ())),
    }
    let client = tessera_api::Client::new(&path);
    assert!(client.list_pds().is_ok());
    drop(server);

    // A regular file is never removed.
    let file = directory.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let error = ApiServer::bind_unix(&file, ServerConfig::default(), router())
        .err()
        .expect("refused");
    assert!(matches!(error, ServerError::NotASocket { .. }));
    assert!(error.to_string().contains("is not a socket"));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[test]
fn client_explains_an_absent_daemon() {
    let directory = tempfile::tempdir().unwrap();
    let stale = directory.path().join("api.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let error = tessera_api::Client::new(&stale).list_pds().unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "cannot reach the Tessera daemon at {}: connection refused — is `tessera serve` running?",
            stale.display()
        )
    );
    let missing = directory.path().join("missing.sock");
    let error = tessera_api::Client::new(&missing).list_pds().unwrap_err();
    assert!(matches!(error, ClientError::Connect { .. }));
    assert!(error.to_string().contains("no such socket"), "{error}");
}

#[test]
fn connection_limit_answers_503() {
    let daemon = FakeDaemon::start_with(ServerConfig {
        max_connections: 1,
        ..ServerConfig::default()
    });
    let mut held = daemon.connect();
    // Make sure the held connection is registered before the second arrives.
    held.write_all(b"GET /v1/pds HTTP/1.1\r\n\r\n").unwrap();
    let answer = read_answer(&mut BufReader::new(held.try_clone().unwrap()));
    assert_eq!(answer.status, 200);
    let (answer, closed) = exchange_raw(&daemon, b"GET /v1/pds HTTP/1.1\r\n\r\n");
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (503, "unavailable")
    );
    assert!(closed);
    drop(held);
    // The slot frees when the held connection ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (answer, _) = exchange_raw(
            &daemon,
            b"GET /v1/pds HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        if answer.status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn idle_connections_are_closed() {
    let daemon = FakeDaemon::start_with(ServerConfig {
        idle_timeout: Duration::from_millis(100),
        ..ServerConfig::default()
    });
    let mut stream = daemon.connect();
    stream.write_all(b"GET /v1/pd").unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "a half request gets no answer, only a close"
    );
}

#[test]
fn tcp_listener_serves_only_reads() {
    let controller = Arc::new(FakeController::new());
    let server = ApiServer::bind_tcp(
        "127.0.0.1:0",
        ServerConfig::default(),
        Router::read_only(controller),
    )
    .unwrap();
    let ask = |request: &[u8]| {
        let mut stream = std::net::TcpStream::connect(server.local_address()).unwrap();
        stream.write_all(request).unwrap();
        read_answer(&mut BufReader::new(stream))
    };
    let answer = ask(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(answer.body.contains("tessera_physical_drives 0"));
    let answer = ask(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(answer.body.contains("<canvas"));
    for path in ["/v1/pds", "/v1/dgs", "/v1/vds", "/v1/events?since=0"] {
        let request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n");
        let answer = ask(request.as_bytes());
        assert_eq!(answer.status, 200, "GET {path}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
    }
    // Nothing that changes state, on a path that takes it on the socket or not.
    for request in [
        "POST /v1/pds HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        "POST /v1/pds/0/fail HTTP/1.1\r\nConnection: close\r\n\r\n",
        "DELETE /v1/dgs/0 HTTP/1.1\r\nConnection: close\r\n\r\n",
        "PATCH /v1/dgs/0 HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        "POST /v1/dgs/0/scrub HTTP/1.1\r\nConnection: close\r\n\r\n",
    ] {
        let answer = ask(request.as_bytes());
        assert!(
            answer.status == 405 || answer.status == 404,
            "{request}: {}",
            answer.status
        );
        if answer.status == 405 {
            assert_eq!(answer.header("allow"), Some("GET"));
        }
    }
    let answer = ask(b"GET /v1/info HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(answer.status, 404);
    server.shutdown();
}
