//! The HTTP/1.1 subset the API speaks: request heads parsed with limits, `Content-Length`
//! bodies only, responses written with `Content-Length`. Shared by the server and the client.
//! Nothing here panics on input: every malformed byte sequence becomes an `HttpError`.

use std::io::{self, BufRead, Read, Write};

/// Limits on what a peer may send.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Request line plus headers plus the blank line, in bytes.
    pub max_head_bytes: usize,
    /// Number of header fields.
    pub max_headers: usize,
    /// Body bytes.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 << 10,
            max_headers: 64,
            max_body_bytes: 1 << 20,
        }
    }
}

/// Why a message could not be read.
#[derive(Debug)]
pub enum HttpError {
    /// The peer closed the connection before sending a byte of the next message.
    Closed,
    /// Reading failed (reset, timeout).
    Io(io::Error),
    /// The bytes are not an HTTP/1.x message this side accepts (answered with 400).
    Malformed(String),
    /// The head exceeds `max_head_bytes` or `max_headers` (answered with 431).
    HeadTooLarge(String),
    /// The declared body exceeds `max_body_bytes` (answered with 413).
    BodyTooLarge(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Closed => f.write_str("connection closed"),
            HttpError::Io(error) => write!(f, "{error}"),
            HttpError::Malformed(message)
            | HttpError::HeadTooLarge(message)
            | HttpError::BodyTooLarge(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for HttpError {}

/// HTTP version of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless asked to stay open.
    Http10,
    /// HTTP/1.1: the connection stays open unless asked to close.
    Http11,
}

/// A parsed request line and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Method, as sent (methods are case-sensitive).
    pub method: String,
    /// Request target in origin form (`/v1/pds?x=y`), as sent.
    pub target: String,
    /// Protocol version.
    pub version: Version,
    /// Header fields, names lowercased, values with surrounding whitespace removed.
    pub headers: Vec<(String, String)>,
}

impl RequestHead {
    /// The value of the header `name` (lowercase), if present once or more (the first).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    /// Whether the connection stays open after the response.
    pub fn keep_alive(&self) -> bool {
        let connection = self.header("connection").map(str::to_ascii_lowercase);
        let has = |token: &str| {
            connection
                .as_deref()
                .is_some_and(|value| value.split(',').any(|t| t.trim() == token))
        };
        match self.version {
            Version::Http11 => !has("close"),
            Version::Http10 => has("keep-alive"),
        }
    }

    /// Whether the client waits for `100 Continue` before sending the body.
    pub fn expects_continue(&self) -> bool {
        self.version == Version::Http11
            && self
                .header("expect")
                .is_some_and(|value| value.eq_ignore_ascii_case("100-continue"))
    }

    /// The body length: `Content-Length`, or 0 without one. Refuses transfer codings and
    /// conflicting lengths (they would let a peer smuggle a second request past this one).
    pub fn content_length(&self) -> Result<usize, HttpError> {
        content_length(&self.headers)
    }
}

/// A parsed status line and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Header fields, names lowercased.
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    /// The body length from `Content-Length`.
    pub fn content_length(&self) -> Result<usize, HttpError> {
        content_length(&self.headers)
    }
}

fn content_length(headers: &[(String, String)]) -> Result<usize, HttpError> {
    if headers.iter().any(|(name, _)| name == "transfer-encoding") {
        return Err(HttpError::Malformed(
            "Transfer-Encoding is not supported; send the body with Content-Length".to_string(),
        ));
    }
    let mut length: Option<usize> = None;
    for (_, value) in headers.iter().filter(|(name, _)| name == "content-length") {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HttpError::Malformed(format!(
                "Content-Length {value:?} is not a number"
            )));
        }
        let parsed = value
            .parse::<usize>()
            .map_err(|_| HttpError::BodyTooLarge(format!("Content-Length {value} is too large")))?;
        if length.is_some_and(|previous| previous != parsed) {
            return Err(HttpError::Malformed(
                "conflicting Content-Length headers".to_string(),
            ));
        }
        length = Some(parsed);
    }
    Ok(length.unwrap_or(0))
}

/// Empty lines tolerated before a request line (some clients send one after a body).
const MAX_LEADING_EMPTY_LINES: usize = 4;

/// Reads one message head (up to and including the blank line) without consuming any byte of
/// the body. Accepts CRLF or bare LF line ends.
pub fn read_head<R: BufRead>(reader: &mut R, limits: &Limits) -> Result<Vec<u8>, HttpError> {
    let mut head = Vec::new();
    let mut leading_empty_lines = 0;
    loop {
        let budget = limits.max_head_bytes.saturating_sub(head.len());
        let before = head.len();
        let read = (&mut *reader)
            .take(budget as u64)
            .read_until(b'\n', &mut head)
            .map_err(HttpError::Io)?;
        if read == 0 {
            if head.is_empty() {
                return Err(HttpError::Closed);
            }
            if budget == 0 {
                return Err(HttpError::HeadTooLarge(format!(
                    "request head is larger than {} bytes",
                    limits.max_head_bytes
                )));
            }
            return Err(HttpError::Malformed(
                "connection closed in the middle of a request head".to_string(),
            ));
        }
        if head.last() != Some(&b'\n') {
            if head.len() >= limits.max_head_bytes {
                return Err(HttpError::HeadTooLarge(format!(
                    "request head is larger than {} bytes",
                    limits.max_head_bytes
                )));
            }
            return Err(HttpError::Malformed(
                "connection closed in the middle of a request head".to_string(),
            ));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            if before == 0 {
                // RFC 9112 lets a server ignore an empty line or two before the request line;
                // an endless stream of them is not a request.
                leading_empty_lines += 1;
                if leading_empty_lines > MAX_LEADING_EMPTY_LINES {
                    return Err(HttpError::Malformed(
                        "too many empty lines before the request line".to_string(),
                    ));
                }
                head.clear();
                continue;
            }
            return Ok(head);
        }
    }
}

/// Splits a head into lines without their line ends; the last (blank) line is dropped.
fn head_lines(head: &[u8]) -> Result<Vec<&str>, HttpError> {
    let text = std::str::from_utf8(head)
        .map_err(|_| HttpError::Malformed("request head is not valid UTF-8".to_string()))?;
    let mut lines: Vec<&str> = text
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    // The head ends with "\n\n" (or CRLF CRLF): the split leaves two empty strings at the end.
    while lines.last() == Some(&"") {
        lines.pop();
    }
    Ok(lines)
}

fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn parse_headers(lines: &[&str], limits: &Limits) -> Result<Vec<(String, String)>, HttpError> {
    if lines.len() > limits.max_headers {
        return Err(HttpError::HeadTooLarge(format!(
            "more than {} header fields",
            limits.max_headers
        )));
    }
    let mut headers = Vec::with_capacity(lines.len());
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return Err(HttpError::Malformed(
                "folded header lines are not accepted".to_string(),
            ));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed(format!(
                "header line {:?} has no ':'",
                truncate(line)
            )));
        };
        if !is_token(name) {
            return Err(HttpError::Malformed(format!(
                "header name {:?} is not a token",
                truncate(name)
            )));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HttpError::Malformed(format!(
                "header {name} holds a control character"
            )));
        }
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
    Ok(headers)
}

fn truncate(text: &str) -> String {
    text.chars().take(40).collect()
}

fn parse_version(text: &str) -> Result<Version, HttpError> {
    match text {
        "HTTP/1.1" => Ok(Version::Http11),
        "HTTP/1.0" => Ok(Version::Http10),
        other => Err(HttpError::Malformed(format!(
            "unsupported protocol version {:?} (HTTP/1.1 expected)",
            truncate(other)
        ))),
    }
}

/// Parses a request head as returned by `read_head`.
pub fn parse_request_head(head: &[u8], limits: &Limits) -> Result<RequestHead, HttpError> {
    let lines = head_lines(head)?;
    let Some((request_line, header_lines)) = lines.split_first() else {
        return Err(HttpError::Malformed("empty request".to_string()));
    };
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(HttpError::Malformed(format!(
            "request line {:?} is not 'METHOD /path HTTP/1.1'",
            truncate(request_line)
        )));
    };
    if !is_token(method) {
        return Err(HttpError::Malformed(format!(
            "method {:?} is not a token",
            truncate(method)
        )));
    }
    if !target.starts_with('/') || target.bytes().any(|b| b <= 0x20 || b == 0x7f) {
        return Err(HttpError::Malformed(format!(
            "request target {:?} is not a path",
            truncate(target)
        )));
    }
    Ok(RequestHead {
        method: method.to_string(),
        target: target.to_string(),
        version: parse_version(version)?,
        headers: parse_headers(header_lines, limits)?,
    })
}

/// Parses a response head as returned by `read_head`.
pub fn parse_response_head(head: &[u8], limits: &Limits) -> Result<ResponseHead, HttpError> {
    let lines = head_lines(head)?;
    let Some((status_line, header_lines)) = lines.split_first() else {
        return Err(HttpError::Malformed("empty response".to_string()));
    };
    let mut parts = status_line.splitn(3, ' ');
    parse_version(parts.next().unwrap_or(""))?;
    let status = parts
        .next()
        .filter(|code| code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| {
            HttpError::Malformed(format!(
                "status line {:?} has no status code",
                truncate(status_line)
            ))
        })?;
    Ok(ResponseHead {
        status,
        headers: parse_headers(header_lines, limits)?,
    })
}

/// Reads exactly `length` body bytes (the caller has checked `length` against its limit).
pub fn read_body<R: Read>(reader: &mut R, length: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let read = reader
        .take(length as u64)
        .read_to_end(&mut body)
        .map_err(HttpError::Io)?;
    if read != length {
        return Err(HttpError::Malformed(format!(
            "connection closed after {read} of {length} body bytes"
        )));
    }
    Ok(body)
}

/// The reason phrase of the statuses the API sends.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// A response to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type` of the body.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// Methods the path allows, for a 405.
    pub allow: Option<&'static str>,
}

/// Writes a response. `keep_alive: false` adds `Connection: close`.
pub fn write_response<W: Write>(
    writer: &mut W,
    response: &Response,
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        response.status,
        reason_phrase(response.status),
        response.content_type,
        response.body.len()
    );
    if let Some(allow) = response.allow {
        head.push_str(&format!("Allow: {allow}\r\n"));
    }
    if response.status == 401 {
        head.push_str("WWW-Authenticate: Bearer realm=\"tessera\"\r\n");
    }
    head.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    let mut message = head.into_bytes();
    message.extend_from_slice(&response.body);
    writer.write_all(&message)?;
    writer.flush()
}

/// Decodes `%XX` escapes (and, in a query, `+` as a space). `None` if an escape is malformed or
/// the result is not UTF-8.
pub fn percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                let hex = bytes.get(index + 1..index + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                index += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                index += 1;
            }
            byte => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Escapes every byte outside the URI's unreserved set, for a path segment or query value.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(text: &str) -> Result<RequestHead, HttpError> {
        let limits = Limits::default();
        let mut reader = io::BufReader::new(text.as_bytes());
        let head = read_head(&mut reader, &limits)?;
        parse_request_head(&head, &limits)
    }

    #[test]
    fn parses_a_request_head() {
        let head = head_of(
            "POST /v1/pds?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 12\r\n\r\nbody",
        )
        .unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/v1/pds?x=1");
        assert_eq!(head.version, Version::Http11);
        assert_eq!(head.header("host"), Some("localhost"));
        assert_eq!(head.content_length().unwrap(), 12);
        assert!(head.keep_alive());
    }

    #[test]
    fn bare_lf_and_leading_blank_lines_are_accepted() {
        let head = head_of("\r\nGET / HTTP/1.0\nConnection: Keep-Alive\n\n").unwrap();
        assert_eq!(head.version, Version::Http10);
        assert!(head.keep_alive());
        let head = head_of("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!head.keep_alive());
        let endless = format!("{}GET / HTTP/1.1\r\n\r\n", "\r\n".repeat(5));
        assert!(matches!(head_of(&endless), Err(HttpError::Malformed(_))));
        let head = head_of("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        assert!(!head.keep_alive());
    }

    #[test]
    fn malformed_heads_are_refused() {
        for bad in [
            "GET /\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET v1 HTTP/1.1\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nA: b\x01c\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x",
        ] {
            assert!(
                matches!(head_of(bad), Err(HttpError::Malformed(_))),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(head_of(""), Err(HttpError::Closed)));
        let invalid_utf8 = b"GET /\xff HTTP/1.1\r\n\r\n";
        let limits = Limits::default();
        assert!(parse_request_head(invalid_utf8, &limits).is_err());
    }

    #[test]
    fn content_length_rules() {
        let length = |headers: &str| {
            head_of(&format!("POST / HTTP/1.1\r\n{headers}\r\n")).and_then(|h| h.content_length())
        };
        assert_eq!(length("").unwrap(), 0);
        assert_eq!(length("Content-Length: 0\r\n").unwrap(), 0);
        assert_eq!(
            length("Content-Length: 5\r\nContent-Length: 5\r\n").unwrap(),
            5
        );
        assert!(matches!(
            length("Content-Length: 5\r\nContent-Length: 6\r\n"),
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            length("Content-Length: -1\r\n"),
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            length("Content-Length: 99999999999999999999999\r\n"),
            Err(HttpError::BodyTooLarge(_))
        ));
        assert!(matches!(
            length("Transfer-Encoding: chunked\r\n"),
            Err(HttpError::Malformed(_))
        ));
    }

    #[test]
    fn head_limits_hold() {
        let limits = Limits {
            max_head_bytes: 64,
            max_headers: 2,
            max_body_bytes: 0,
        };
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        let mut reader = io::BufReader::new(long.as_bytes());
        assert!(matches!(
            read_head(&mut reader, &limits),
            Err(HttpError::HeadTooLarge(_))
        ));
        let many = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        let mut reader = io::BufReader::new(many.as_bytes());
        let head = read_head(&mut reader, &limits).unwrap();
        assert!(matches!(
            parse_request_head(&head, &limits),
            Err(HttpError::HeadTooLarge(_))
        ));
    }

    #[test]
    fn response_heads_parse() {
        let limits = Limits::default();
        let head = parse_response_head(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n",
            &limits,
        )
        .unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(head.content_length().unwrap(), 3);
        assert!(parse_response_head(b"HTTP/1.1 4x4 Bad\r\n\r\n", &limits).is_err());
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n", &limits).is_err());
    }

    #[test]
    fn written_response_is_exact() {
        let mut out = Vec::new();
        let response = Response {
            status: 405,
            content_type: "application/json",
            body: b"{}".to_vec(),
            allow: Some("GET"),
        };
        write_response(&mut out, &response, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\nAllow: GET\r\nConnection: close\r\n\r\n{}"
        );
    }

    #[test]
    fn percent_coding() {
        assert_eq!(percent_decode("a%20b+c", true).as_deref(), Some("a b c"));
        assert_eq!(percent_decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%zz", false), None);
        assert_eq!(percent_decode("%4", false), None);
        assert_eq!(percent_decode("%ff", false), None);
        assert_eq!(percent_encode("vd 0/é"), "vd%200%2F%C3%A9");
        assert_eq!(percent_encode("a-b_c.d~e"), "a-b_c.d~e");
    }
}
