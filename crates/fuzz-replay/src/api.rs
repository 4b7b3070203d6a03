//! The management API: a whole connection's bytes through the HTTP server (`serve_connection`:
//! head reading and parsing, body framing, routing, response writing), and sequences of
//! requests straight into the router. Both run against the in-memory `FakeController`, so a
//! sequence can create drives, groups and virtual drives and then act on them.
//!
//! Beyond "no panic": the router turns a panic into `500 internal`, which the fake never
//! answers otherwise, so any 500 is a failure here; and every JSON body must parse.

use std::io::{self, BufReader, Read, Write};
use std::sync::Arc;
use tessera_api::http::{Limits, Response, parse_response_head, read_body, read_head};
use tessera_api::model::{
    ApiError, CreateDg, CreatePd, CreateVd, DgRef, DgView, EventView, InfoView, PdView, ReplacePd,
    ScrubDg, SetVd, UpdateDg, VdView,
};
use tessera_api::testing::FakeController;
use tessera_api::{Controller, Router, serve_connection};

/// Requests one `api_router` input may carry; keeps each execution short.
const ROUTER_REQUESTS_MAX: usize = 64;
/// Separates the requests of an `api_router` input (never valid inside a JSON body).
const REQUEST_SEPARATOR: u8 = 0;

/// The `api_http` target: `data` is everything a client sends on one connection.
pub fn http(data: &[u8]) {
    let router = Router::new(Arc::new(FuzzController::default()));
    let mut connection = Connection {
        input: data,
        output: Vec::new(),
    };
    serve_connection(&mut connection, &router, &Limits::default());
    check_responses(&connection.output);
}

/// The `api_router` target: requests separated by NUL bytes, each `METHOD TARGET` on the first
/// line and the body after it.
pub fn router(data: &[u8]) {
    let router = Router::new(Arc::new(FuzzController::default()));
    for request in data
        .split(|&byte| byte == REQUEST_SEPARATOR)
        .take(ROUTER_REQUESTS_MAX)
    {
        let (line, body) = match request.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&request[..end], &request[end + 1..]),
            None => (request, &[][..]),
        };
        let line = String::from_utf8_lossy(line);
        let (method, target) = line.split_once(' ').unwrap_or((&line, "/"));
        check_response(&router.handle(method, target, body));
    }
}

fn check_response(response: &Response) {
    assert_ne!(
        response.status,
        500,
        "internal error (a panic caught by the router): {}",
        String::from_utf8_lossy(&response.body)
    );
    if response.content_type == "application/json" {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&response.body).is_ok(),
            "response body is not JSON: {}",
            String::from_utf8_lossy(&response.body)
        );
    }
}

/// Reads back what the server wrote: well-formed responses, none of them a 500.
fn check_responses(output: &[u8]) {
    let limits = Limits {
        max_head_bytes: usize::MAX,
        max_headers: usize::MAX,
        max_body_bytes: usize::MAX,
    };
    let mut reader = BufReader::new(output);
    loop {
        let head = match read_head(&mut reader, &limits) {
            Ok(head) => head,
            Err(tessera_api::http::HttpError::Closed) => return,
            Err(error) => panic!("the server wrote a broken response head: {error}"),
        };
        let head = parse_response_head(&head, &limits).expect("the server's response head parses");
        let length = head.content_length().expect("the server's Content-Length");
        let body = read_body(&mut reader, length).expect("the server wrote the whole body");
        let json = head
            .headers
            .iter()
            .any(|(name, value)| name == "content-type" && value == "application/json");
        check_response(&Response {
            status: head.status,
            content_type: if json { "application/json" } else { "other" },
            body,
            allow: None,
        });
    }
}

/// One connection: reads from the input, collects what the server writes.
struct Connection<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl Read for Connection<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.input.read(buffer)
    }
}

impl Write for Connection<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The fake daemon, minus its deliberate test hook: `create_pd` on the path `panic://` panics
/// to test the router's panic handling, which a fuzzer would otherwise report as a crash.
#[derive(Default)]
struct FuzzController {
    fake: FakeController,
}

impl Controller for FuzzController {
    fn info(&self) -> Result<InfoView, ApiError> {
        self.fake.info()
    }
    fn list_pds(&self) -> Result<Vec<PdView>, ApiError> {
        self.fake.list_pds()
    }
    fn create_pd(&self, body: CreatePd) -> Result<PdView, ApiError> {
        if body.path == "panic://" {
            return Err(ApiError::invalid_argument("panic:// is a test hook"));
        }
        self.fake.create_pd(body)
    }
    fn get_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.fake.get_pd(id)
    }
    fn delete_pd(&self, id: u32) -> Result<(), ApiError> {
        self.fake.delete_pd(id)
    }
    fn fail_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.fake.fail_pd(id)
    }
    fn online_pd(&self, id: u32) -> Result<PdView, ApiError> {
        self.fake.online_pd(id)
    }
    fn replace_pd(&self, id: u32, body: ReplacePd) -> Result<DgView, ApiError> {
        self.fake.replace_pd(id, body)
    }
    fn list_dgs(&self) -> Result<Vec<DgView>, ApiError> {
        self.fake.list_dgs()
    }
    fn create_dg(&self, body: CreateDg) -> Result<DgView, ApiError> {
        self.fake.create_dg(body)
    }
    fn get_dg(&self, dg: &DgRef) -> Result<DgView, ApiError> {
        self.fake.get_dg(dg)
    }
    fn delete_dg(&self, dg: &DgRef, force: bool) -> Result<(), ApiError> {
        self.fake.delete_dg(dg, force)
    }
    fn update_dg(&self, dg: &DgRef, body: UpdateDg) -> Result<DgView, ApiError> {
        self.fake.update_dg(dg, body)
    }
    fn scrub_dg(&self, dg: &DgRef, body: ScrubDg) -> Result<DgView, ApiError> {
        self.fake.scrub_dg(dg, body)
    }
    fn list_vds(&self) -> Result<Vec<VdView>, ApiError> {
        self.fake.list_vds()
    }
    fn create_vd(&self, body: CreateVd) -> Result<VdView, ApiError> {
        self.fake.create_vd(body)
    }
    fn get_vd(&self, name: &str) -> Result<VdView, ApiError> {
        self.fake.get_vd(name)
    }
    fn delete_vd(&self, name: &str, force: bool) -> Result<(), ApiError> {
        self.fake.delete_vd(name, force)
    }
    fn set_vd(&self, name: &str, body: SetVd) -> Result<VdView, ApiError> {
        self.fake.set_vd(name, body)
    }
    fn events(&self, since: u64) -> Result<Vec<EventView>, ApiError> {
        self.fake.events(since)
    }
    fn metrics(&self) -> Result<String, ApiError> {
        self.fake.metrics()
    }
}
