//! NBD URIs, as the NBD project's `doc/uri.md` and libnbd define them:
//! `nbd://host[:port]/export` and `nbd+unix:///export?socket=/path`, plus the TLS schemes
//! `nbds` and `nbds+unix` (parsed, but refused by the client until TLS arrives).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::proto::DEFAULT_TCP_PORT;

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TCP to a host name or IP address (IPv6 without brackets).
    Tcp {
        /// Host name or address.
        host: String,
        /// Port; 10809 when the URI has none.
        port: u16,
    },
    /// A Unix domain socket.
    Unix {
        /// Path of the socket.
        socket_path: PathBuf,
    },
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// How to reach the server.
    pub transport: Transport,
    /// The export name: the URI path without its leading `/`, percent-decoded.
    pub export_name: String,
    /// Whether the scheme demands TLS (`nbds`, `nbds+unix`).
    pub tls: bool,
}

/// Why a string is not an NBD URI we can use.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UriError {
    /// The scheme is not nbd, nbds, nbd+unix or nbds+unix.
    UnknownScheme(String),
    /// A TCP URI without a host.
    MissingHost,
    /// The port is not a number from 1 to 65535.
    BadPort(String),
    /// A Unix-socket URI with a host, which libnbd does not accept either.
    HostWithUnixSocket(String),
    /// A Unix-socket URI without `socket=`.
    MissingSocket,
    /// A query parameter that does not apply (e.g. `socket` with TCP, or unknown ones).
    UnexpectedParameter(String),
    /// A `%` escape that is not two hex digits, or decodes to invalid UTF-8 or NUL.
    BadEscape(String),
    /// A fragment (`#...`), which NBD URIs do not have.
    Fragment,
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownScheme(scheme) => write!(
                f,
                "unknown scheme {scheme:?}: expected nbd://host[:port]/export or nbd+unix:///export?socket=PATH"
            ),
            Self::MissingHost => write!(f, "missing host: expected nbd://host[:port]/export"),
            Self::BadPort(port) => {
                write!(f, "bad port {port:?}: expected a number from 1 to 65535")
            }
            Self::HostWithUnixSocket(host) => {
                write!(
                    f,
                    "a Unix-socket URI has no host (got {host:?}): write nbd+unix:///export?socket=PATH"
                )
            }
            Self::MissingSocket => {
                write!(f, "missing socket: expected nbd+unix:///export?socket=PATH")
            }
            Self::UnexpectedParameter(name) => write!(f, "unexpected query parameter {name:?}"),
            Self::BadEscape(text) => write!(f, "bad percent escape in {text:?}"),
            Self::Fragment => write!(f, "NBD URIs have no fragment (#...)"),
        }
    }
}

impl std::error::Error for UriError {}

impl FromStr for NbdUri {
    type Err = UriError;

    fn from_str(text: &str) -> Result<Self, UriError> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| UriError::UnknownScheme(text.to_owned()))?;
        let (unix, tls) = match scheme.to_ascii_lowercase().as_str() {
            "nbd" => (false, false),
            "nbds" => (false, true),
            "nbd+unix" => (true, false),
            "nbds+unix" => (true, true),
            _ => return Err(UriError::UnknownScheme(scheme.to_owned())),
        };
        if rest.contains('#') {
            return Err(UriError::Fragment);
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((before, query)) => (before, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(slash) => (&before_query[..slash], &before_query[slash + 1..]),
            None => (before_query, ""),
        };
        let export_name = percent_decode(path)?;

        let mut socket = None;
        for parameter in query
            .into_iter()
            .flat_map(|query| query.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            match name {
                "socket" if unix => socket = Some(percent_decode(value)?),
                _ => return Err(UriError::UnexpectedParameter(name.to_owned())),
            }
        }

        let transport = if unix {
            if !authority.is_empty() {
                return Err(UriError::HostWithUnixSocket(authority.to_owned()));
            }
            let socket = socket
                .filter(|path| !path.is_empty())
                .ok_or(UriError::MissingSocket)?;
            Transport::Unix {
                socket_path: PathBuf::from(socket),
            }
        } else {
            let (host, port) = split_host_port(authority)?;
            Transport::Tcp { host, port }
        };
        Ok(NbdUri {
            transport,
            export_name,
            tls,
        })
    }
}

/// Splits `host[:port]`, `[v6]` or `[v6]:port`; a user part (`user@`) is ignored.
fn split_host_port(authority: &str) -> Result<(String, u16), UriError> {
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or(UriError::MissingHost)?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| UriError::BadPort(after.to_owned()))?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(UriError::MissingHost);
    }
    let port = match port {
        None => DEFAULT_TCP_PORT,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(UriError::BadPort(text.to_owned())),
        },
    };
    Ok((percent_decode(host)?, port))
}

fn percent_decode(text: &str) -> Result<String, UriError> {
    let bad = || UriError::BadEscape(text.to_owned());
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes.get(index + 1..index + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    if decoded.contains(&0) {
        return Err(bad());
    }
    String::from_utf8(decoded).map_err(|_| bad())
}

/// Characters left as they are in paths and query values (RFC 3986 unreserved plus `/`).
fn percent_encode(text: &str, out: &mut String) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        match &self.transport {
            Transport::Tcp { host, port } => {
                text.push_str(if self.tls { "nbds://" } else { "nbd://" });
                if host.contains(':') {
                    text.push_str(&format!("[{host}]"));
                } else {
                    text.push_str(host);
                }
                if *port != DEFAULT_TCP_PORT {
                    text.push_str(&format!(":{port}"));
                }
                text.push('/');
                percent_encode(&self.export_name, &mut text);
            }
            Transport::Unix { socket_path } => {
                text.push_str(if self.tls {
                    "nbds+unix:///"
                } else {
                    "nbd+unix:///"
                });
                percent_encode(&self.export_name, &mut text);
                text.push_str("?socket=");
                percent_encode(&socket_path.to_string_lossy(), &mut text);
            }
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export_name: &str) -> NbdUri {
        NbdUri {
            transport: Transport::Tcp {
                host: host.into(),
                port,
            },
            export_name: export_name.into(),
            tls: false,
        }
    }

    #[test]
    fn export_names_follow_the_uri_spec_table() {
        // The examples of doc/uri.md, "NBD URI export name".
        assert_eq!(
            "nbd://example.com/disk".parse(),
            Ok(tcp("example.com", 10809, "disk"))
        );
        assert_eq!(
            "nbd://example.com/".parse(),
            Ok(tcp("example.com", 10809, ""))
        );
        assert_eq!(
            "nbd://example.com".parse(),
            Ok(tcp("example.com", 10809, ""))
        );
        assert_eq!(
            "nbd://example.com//disk".parse(),
            Ok(tcp("example.com", 10809, "/disk"))
        );
        assert_eq!(
            "nbd://example.com/hello%20world".parse(),
            Ok(tcp("example.com", 10809, "hello world"))
        );
        let unix: NbdUri = "nbd+unix:///disk?socket=sock".parse().unwrap();
        assert_eq!(unix.export_name, "disk");
        assert_eq!(
            unix.transport,
            Transport::Unix {
                socket_path: PathBuf::from("sock")
            }
        );
    }

    #[test]
    fn ports_and_ipv6() {
        assert_eq!(
            "nbd://localhost:10810/vd0".parse(),
            Ok(tcp("localhost", 10810, "vd0"))
        );
        assert_eq!("nbd://[::1]:7000/x".parse(), Ok(tcp("::1", 7000, "x")));
        assert_eq!("nbd://[fe80::1]/x".parse(), Ok(tcp("fe80::1", 10809, "x")));
        assert_eq!("nbd://alice@host/x".parse(), Ok(tcp("host", 10809, "x")));
    }

    #[test]
    fn tls_schemes_are_recognised() {
        let uri: NbdUri = "nbds://host/x".parse().unwrap();
        assert!(uri.tls);
        let uri: NbdUri = "nbds+unix:///x?socket=/run/s".parse().unwrap();
        assert!(uri.tls);
    }

    #[test]
    fn clear_errors() {
        let parse = |text: &str| text.parse::<NbdUri>().unwrap_err();
        assert_eq!(
            parse("http://host/x"),
            UriError::UnknownScheme("http".into())
        );
        assert_eq!(
            parse("/dev/nvme0n1"),
            UriError::UnknownScheme("/dev/nvme0n1".into())
        );
        assert_eq!(parse("nbd:///x"), UriError::MissingHost);
        assert_eq!(parse("nbd://host:0/x"), UriError::BadPort("0".into()));
        assert_eq!(
            parse("nbd://host:99999/x"),
            UriError::BadPort("99999".into())
        );
        assert_eq!(parse("nbd://host:abc/x"), UriError::BadPort("abc".into()));
        assert_eq!(parse("nbd+unix:///x"), UriError::MissingSocket);
        assert_eq!(parse("nbd+unix:///x?socket="), UriError::MissingSocket);
        assert_eq!(
            parse("nbd+unix://host/x?socket=/s"),
            UriError::HostWithUnixSocket("host".into())
        );
        assert_eq!(
            parse("nbd://host/x?socket=/s"),
            UriError::UnexpectedParameter("socket".into())
        );
        assert_eq!(
            parse("nbd+unix:///x?socket=/s&color=red"),
            UriError::UnexpectedParameter("color".into())
        );
        assert_eq!(parse("nbd://host/a%2"), UriError::BadEscape("a%2".into()));
        assert_eq!(parse("nbd://host/a%00"), UriError::BadEscape("a%00".into()));
        assert_eq!(parse("nbd://host/a#b"), UriError::Fragment);
        assert!(parse("nbd:///x").to_string().contains("nbd://host"));
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "nbd://example.com/disk",
            "nbd://example.com:7000/hello%20world",
            "nbd://[::1]:7000/x",
            "nbd+unix:///vd0?socket=/run/tessera/nbd.sock",
            "nbds+unix:///a/b?socket=/tmp/s%20p",
        ] {
            let uri: NbdUri = text.parse().unwrap();
            assert_eq!(uri.to_string(), text);
            assert_eq!(uri.to_string().parse::<NbdUri>().unwrap(), uri);
        }
    }
}
