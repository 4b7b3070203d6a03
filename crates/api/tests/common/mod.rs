//! Helpers shared by the API tests: a fake daemon on a temporary socket and a raw HTTP peer.

#![allow(dead_code)]

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tessera_api::http::{Limits, parse_response_head, read_body, read_head};
use tessera_api::testing::FakeController;
use tessera_api::{ApiServer, Client, Router, ServerConfig};

/// A fake daemon serving on a socket in its own temporary directory.
pub struct FakeDaemon {
    pub server: Option<ApiServer>,
    pub socket: PathBuf,
    pub controller: Arc<FakeController>,
    _directory: tempfile::TempDir,
}

impl FakeDaemon {
    pub fn start() -> FakeDaemon {
        FakeDaemon::start_with(ServerConfig::default())
    }

    pub fn start_with(config: ServerConfig) -> FakeDaemon {
        let directory = tempfile::tempdir().expect("temporary directory");
        let socket = directory.path().join("run").join("api.sock");
        let controller = Arc::new(FakeController::new());
        let server = ApiServer::bind_unix(&socket, config, Router::new(controller.clone()))
            .expect("the fake daemon binds");
        FakeDaemon {
            server: Some(server),
            socket,
            controller,
            _directory: directory,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.socket).with_timeout(Duration::from_secs(10))
    }

    pub fn connect(&self) -> UnixStream {
        let stream = UnixStream::connect(&self.socket).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
    }
}

/// One parsed answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("the body is JSON")
    }

    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .expect("an error object")
            .to_string()
    }
}

/// Reads one answer from a connection (leaving later bytes unread).
pub fn read_answer<R: std::io::BufRead>(reader: &mut R) -> Answer {
    let limits = Limits::default();
    let head = read_head(reader, &limits).expect("an answer head");
    let head = parse_response_head(&head, &limits).expect("a valid status line");
    let length = head.content_length().expect("a Content-Length");
    let body = read_body(reader, length).expect("the whole body");
    Answer {
        status: head.status,
        headers: head.headers,
        body: String::from_utf8(body).expect("UTF-8 body"),
    }
}

/// Sends raw bytes on a new connection, reads one answer, and reports whether the server then
/// ended the connection (a close, or a reset when it left part of the request unread). A server
/// that refuses early may close before the whole request is written: the answer still arrives.
pub fn exchange_raw(daemon: &FakeDaemon, request: &[u8]) -> (Answer, bool) {
    let mut stream = daemon.connect();
    let _ = stream.write_all(request);
    let mut reader = BufReader::new(stream);
    let answer = read_answer(&mut reader);
    let mut rest = Vec::new();
    let closed = match reader.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
    };
    (answer, closed)
}
