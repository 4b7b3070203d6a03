//! Round-trip time of management API requests against the in-memory fake controller: the
//! `Client` (a new connection per request, as the CLI does) and a kept-alive connection.
//! `cargo run --release -p tessera-api --example api_latency [REQUESTS]`. Prints figures only;
//! nothing is asserted.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use tessera_api::http::{Limits, parse_response_head, read_body, read_head};
use tessera_api::testing::FakeController;
use tessera_api::{ApiServer, Client, CreatePd, Router, ServerConfig};

fn main() {
    let requests: u32 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let directory =
        std::env::temp_dir().join(format!("tessera-api-latency-{}", std::process::id()));
    let socket = directory.join("api.sock");
    let controller = Arc::new(FakeController::new());
    let server = ApiServer::bind_unix(&socket, ServerConfig::default(), Router::new(controller))
        .expect("bind");
    let client = Client::new(&socket);
    for i in 0..8 {
        client
            .create_pd(&CreatePd {
                path: format!("/d/{i}"),
                ..CreatePd::default()
            })
            .expect("add");
    }

    let start = Instant::now();
    for _ in 0..requests {
        client.list_pds().expect("list");
    }
    let per_request_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(requests);
    println!(
        "client, new connection per request: GET /v1/pds (8 drives) {per_request_us:.1} us/request"
    );

    let mut stream = UnixStream::connect(&socket).expect("connect");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let limits = Limits::default();
    let start = Instant::now();
    for _ in 0..requests {
        stream
            .write_all(b"GET /v1/pds HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let head = read_head(&mut reader, &limits).expect("head");
        let head = parse_response_head(&head, &limits).expect("status");
        let length = head.content_length().expect("length");
        read_body(&mut reader, length).expect("body");
    }
    let per_request_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(requests);
    println!(
        "kept-alive connection:              GET /v1/pds (8 drives) {per_request_us:.1} us/request"
    );
    server.shutdown();
    let _ = std::fs::remove_dir_all(&directory);
}
