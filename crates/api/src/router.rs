//! From a request (method, target, body) to a response: path and query parsing, body decoding,
//! the call into the `Controller`, and error encoding. Pure: no sockets, so it is unit-tested
//! and fuzzed directly.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::Controller;
use crate::http::{Response, percent_decode};
use crate::model::{
    ApiError, DgRef, Empty, ErrorBody, ErrorCode, ExportUblk, ScrubDg, validate_name,
};

const JSON: &str = "application/json";
const METRICS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// The read-only web dashboard (`GET /`): one self-contained page (inline CSS and JS) that polls
/// the read-only endpoints and `/metrics`.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// Which endpoints a router serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every API endpoint (the management socket); not the dashboard.
    Management,
    /// Only reads (an unauthenticated TCP listener): `GET /` (the dashboard), `GET /metrics`,
    /// and `GET` of physical drives, drive groups, virtual drives and events. Any other method
    /// is 405; any other path is 404.
    ReadOnly,
}

/// A physical-drive action under `/v1/pds/{id}/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PdAction {
    Fail,
    Online,
    Replace,
}

/// A path the API knows.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    Dashboard,
    Metrics,
    Info,
    Pds,
    Pd(u32),
    PdAction(u32, PdAction),
    Dgs,
    Dg(DgRef),
    DgScrub(DgRef),
    Vds,
    Vd(String),
    VdUblk(String),
    MdImports,
    Events,
}

impl Route {
    /// The methods the path allows, as an `Allow` header value.
    fn allowed(&self) -> &'static str {
        match self {
            Route::Dashboard | Route::Metrics | Route::Info | Route::Events => "GET",
            Route::Pds | Route::Dgs | Route::Vds => "GET, POST",
            Route::Pd(_) | Route::Vd(_) => "GET, DELETE",
            Route::PdAction(..) | Route::DgScrub(_) | Route::MdImports => "POST",
            Route::VdUblk(_) => "POST, DELETE",
            Route::Dg(_) => "GET, DELETE, PATCH",
        }
    }

    /// Whether a read-only router (the TCP listener) serves the path (with `GET` only).
    fn readable_remotely(&self) -> bool {
        matches!(
            self,
            Route::Dashboard
                | Route::Metrics
                | Route::Events
                | Route::Pds
                | Route::Pd(_)
                | Route::Dgs
                | Route::Dg(_)
                | Route::Vds
                | Route::Vd(_)
        )
    }
}

fn parse_pd_id(text: &str) -> Result<u32, ApiError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid_argument(format!(
            "physical drive id '{}' is not a number",
            text.escape_default()
        )));
    }
    text.parse().map_err(|_| {
        ApiError::invalid_argument(format!("physical drive id {text} is out of range"))
    })
}

/// `Ok(None)`: no such path.
fn route(segments: &[String]) -> Result<Option<Route>, ApiError> {
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let route = match segments[..] {
        [""] => Route::Dashboard,
        ["metrics"] => Route::Metrics,
        ["v1", "info"] => Route::Info,
        ["v1", "events"] => Route::Events,
        ["v1", "pds"] => Route::Pds,
        ["v1", "pds", id] => Route::Pd(parse_pd_id(id)?),
        ["v1", "pds", id, action] => {
            let action = match action {
                "fail" => PdAction::Fail,
                "online" => PdAction::Online,
                "replace" => PdAction::Replace,
                _ => return Ok(None),
            };
            Route::PdAction(parse_pd_id(id)?, action)
        }
        ["v1", "dgs"] => Route::Dgs,
        ["v1", "dgs", dg] => Route::Dg(DgRef::parse(dg).map_err(ApiError::invalid_argument)?),
        ["v1", "dgs", dg, "scrub"] => {
            Route::DgScrub(DgRef::parse(dg).map_err(ApiError::invalid_argument)?)
        }
        ["v1", "md-imports"] => Route::MdImports,
        ["v1", "vds"] => Route::Vds,
        ["v1", "vds", name] => {
            validate_name(name).map_err(ApiError::invalid_argument)?;
            Route::Vd(name.to_string())
        }
        ["v1", "vds", name, "ublk"] => {
            validate_name(name).map_err(ApiError::invalid_argument)?;
            Route::VdUblk(name.to_string())
        }
        _ => return Ok(None),
    };
    Ok(Some(route))
}

/// Query parameters of one request.
struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    fn parse(text: &str) -> Result<Query, ApiError> {
        let mut pairs = Vec::new();
        for pair in text.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |part: &str| {
                percent_decode(part, true).ok_or_else(|| {
                    ApiError::invalid_argument(format!(
                        "query parameter '{}' is not valid percent-encoded UTF-8",
                        pair.escape_default()
                    ))
                })
            };
            pairs.push((decode(name)?, decode(value)?));
        }
        Ok(Query { pairs })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// `?force`, `?force=true|1` and `?force=false|0`; absent is `false`.
    fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None | Some("false") | Some("0") => Ok(false),
            Some("") | Some("true") | Some("1") => Ok(true),
            Some(other) => Err(ApiError::invalid_argument(format!(
                "query parameter {name}={} is not true or false",
                other.escape_default()
            ))),
        }
    }

    fn number(&self, name: &str) -> Result<u64, ApiError> {
        match self.get(name) {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| {
                ApiError::invalid_argument(format!(
                    "query parameter {name}={} is not a non-negative integer",
                    text.escape_default()
                ))
            }),
        }
    }
}

/// Routes requests to a `Controller`.
#[derive(Clone)]
pub struct Router {
    controller: Arc<dyn Controller>,
    scope: Scope,
}

impl Router {
    /// A router serving every endpoint.
    pub fn new(controller: Arc<dyn Controller>) -> Router {
        Router {
            controller,
            scope: Scope::Management,
        }
    }

    /// A router serving only reads: the dashboard, `/metrics`, and `GET` of physical drives,
    /// drive groups, virtual drives and events (see `Scope::ReadOnly`).
    pub fn read_only(controller: Arc<dyn Controller>) -> Router {
        Router {
            controller,
            scope: Scope::ReadOnly,
        }
    }

    /// Tells the controller who asked for a change, and how it ended.
    pub fn audit(&self, caller: &str, method: &str, target: &str, status: u16) {
        if !matches!(method, "GET" | "HEAD") {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                self.controller.audit(caller, method, target, status)
            }));
        }
    }

    /// Answers one request. Never panics: a panic inside the controller is answered with
    /// `internal`.
    pub fn handle(&self, method: &str, target: &str, body: &[u8]) -> Response {
        let outcome = catch_unwind(AssertUnwindSafe(|| self.dispatch(method, target, body)));
        match outcome {
            Ok(Ok(response)) => response,
            Ok(Err((error, allow))) => {
                let mut response = error_response(&error);
                response.allow = allow;
                response
            }
            Err(_) => error_response(&ApiError::internal(
                "the daemon failed while handling this request (a bug: see its log)",
            )),
        }
    }

    fn dispatch(
        &self,
        method: &str,
        target: &str,
        body: &[u8],
    ) -> Result<Response, (ApiError, Option<&'static str>)> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let without_slash = path.strip_prefix('/').unwrap_or(path);
        let mut segments = Vec::new();
        for segment in without_slash.split('/') {
            let decoded = percent_decode(segment, false).ok_or_else(|| {
                (
                    ApiError::invalid_argument(format!(
                        "path segment '{}' is not valid percent-encoded UTF-8",
                        segment.escape_default()
                    )),
                    None,
                )
            })?;
            segments.push(decoded);
        }
        let not_found = || {
            (
                ApiError::not_found(format!("no such path: {}", path.escape_default())),
                None,
            )
        };
        let route = route(&segments)
            .map_err(|error| (error, None))?
            .ok_or_else(not_found)?;
        let read_only = self.scope == Scope::ReadOnly;
        // The dashboard is the TCP listener's page; the management socket serves only the API.
        let served = if read_only {
            route.readable_remotely()
        } else {
            route != Route::Dashboard
        };
        if !served {
            return Err(not_found());
        }
        let query = Query::parse(query).map_err(|error| (error, None))?;
        let allow = if read_only { "GET" } else { route.allowed() };
        let wrong_method = || {
            (
                ApiError::new(
                    ErrorCode::MethodNotAllowed,
                    format!(
                        "{} does not accept {method} (allowed: {allow})",
                        path.escape_default()
                    ),
                ),
                Some(allow),
            )
        };
        if read_only && method != "GET" {
            return Err(wrong_method());
        }
        self.call(&route, method, &query, body)
            .map_err(|error| (error, None))?
            .ok_or_else(wrong_method)
    }

    /// `Ok(None)`: the route does not take this method.
    fn call(
        &self,
        route: &Route,
        method: &str,
        query: &Query,
        body: &[u8],
    ) -> Result<Option<Response>, ApiError> {
        let c = &*self.controller;
        let response = match (route, method) {
            (Route::Dashboard, "GET") => Response {
                status: 200,
                content_type: HTML,
                body: DASHBOARD_HTML.as_bytes().to_vec(),
                allow: None,
            },
            (Route::Metrics, "GET") => Response {
                status: 200,
                content_type: METRICS_TEXT,
                body: c.metrics()?.into_bytes(),
                allow: None,
            },
            (Route::Info, "GET") => ok(&c.info()?),
            (Route::Events, "GET") => ok(&c.events(query.number("since")?)?),
            (Route::Pds, "GET") => ok(&c.list_pds()?),
            (Route::Pds, "POST") => created(&c.create_pd(decode_body(body)?)?),
            (Route::Pd(id), "GET") => ok(&c.get_pd(*id)?),
            (Route::Pd(id), "DELETE") => {
                c.delete_pd(*id)?;
                ok(&Empty {})
            }
            (Route::PdAction(id, PdAction::Fail), "POST") => ok(&c.fail_pd(*id)?),
            (Route::PdAction(id, PdAction::Online), "POST") => ok(&c.online_pd(*id)?),
            (Route::PdAction(id, PdAction::Replace), "POST") => {
                ok(&c.replace_pd(*id, decode_body(body)?)?)
            }
            (Route::Dgs, "GET") => ok(&c.list_dgs()?),
            (Route::Dgs, "POST") => created(&c.create_dg(decode_body(body)?)?),
            (Route::MdImports, "POST") => created(&c.import_md(decode_body(body)?)?),
            (Route::Dg(dg), "GET") => ok(&c.get_dg(dg)?),
            (Route::Dg(dg), "DELETE") => {
                c.delete_dg(dg, query.flag("force")?)?;
                ok(&Empty {})
            }
            (Route::Dg(dg), "PATCH") => ok(&c.update_dg(dg, decode_body(body)?)?),
            (Route::DgScrub(dg), "POST") => {
                let scrub: ScrubDg = if body.iter().all(u8::is_ascii_whitespace) {
                    ScrubDg::default()
                } else {
                    decode_body(body)?
                };
                ok(&c.scrub_dg(dg, scrub)?)
            }
            (Route::Vds, "GET") => ok(&c.list_vds()?),
            (Route::Vds, "POST") => created(&c.create_vd(decode_body(body)?)?),
            (Route::Vd(name), "GET") => ok(&c.get_vd(name)?),
            (Route::Vd(name), "PATCH") => ok(&c.set_vd(name, decode_body(body)?)?),
            (Route::Vd(name), "DELETE") => {
                c.delete_vd(name, query.flag("force")?)?;
                ok(&Empty {})
            }
            (Route::VdUblk(name), "POST") => {
                let export: ExportUblk = if body.iter().all(u8::is_ascii_whitespace) {
                    ExportUblk::default()
                } else {
                    decode_body(body)?
                };
                ok(&c.export_vd_ublk(name, export)?)
            }
            (Route::VdUblk(name), "DELETE") => ok(&c.unexport_vd_ublk(name)?),
            _ => return Ok(None),
        };
        Ok(Some(response))
    }
}

fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_argument("this request needs a JSON body"));
    }
    serde_json::from_slice(body)
        .map_err(|error| ApiError::invalid_argument(format!("invalid request body: {error}")))
}

fn json_response<T: Serialize>(status: u16, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response {
            status,
            content_type: JSON,
            body,
            allow: None,
        },
        Err(error) => error_response(&ApiError::internal(format!(
            "the answer could not be encoded: {error}"
        ))),
    }
}

fn ok<T: Serialize>(value: &T) -> Response {
    json_response(200, value)
}

fn created<T: Serialize>(value: &T) -> Response {
    json_response(201, value)
}

/// The response carrying `error`: its code's status and `{"error": {...}}`.
pub fn error_response(error: &ApiError) -> Response {
    let body = ErrorBody {
        error: error.clone(),
    };
    Response {
        status: error.http_status(),
        content_type: JSON,
        body: serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()),
        allow: None,
    }
}
