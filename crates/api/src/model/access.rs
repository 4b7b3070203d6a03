//! Export access rules of a virtual drive: which NBD clients may connect. Shared by the CLI
//! (which checks them before sending) and the daemon (which applies them at the handshake).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Who may connect to a virtual drive's export, and how.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdAccessView {
    /// Rules in their text form (`uid:N`, `gid:N`, `net:ADDRESS/PREFIX`, `tls:NAME`); a client
    /// matching any of them may connect. Empty: every client that can reach the NBD socket or
    /// address.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Every connection is read-only (writes, trims and zeroes answer EPERM).
    #[serde(default)]
    pub read_only: bool,
    /// Several clients may write at once (and `NBD_FLAG_CAN_MULTI_CONN` is offered). Without
    /// it, a connection made while another client has the drive writable is read-only.
    #[serde(default)]
    pub multi_conn: bool,
    /// Served only over TLS: a plaintext client is answered `NBD_REP_ERR_TLS_REQD` (and must
    /// upgrade with `NBD_OPT_STARTTLS`, which needs `tessera serve --tls-cert`).
    #[serde(default)]
    pub tls_required: bool,
}

/// One access rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessRule {
    /// A Unix-socket client running as this user id (`SO_PEERCRED`).
    Uid(u32),
    /// A Unix-socket client whose primary group is this group id.
    Gid(u32),
    /// A TCP client whose address lies in this network.
    Network { address: IpAddr, prefix_bits: u8 },
    /// A client over TLS whose verified certificate is valid for this DNS name.
    TlsName(String),
}

/// Who is at the other end of an NBD connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A Unix-socket client, by its credentials.
    Unix { uid: u32, gid: u32 },
    /// A TCP client, by its address.
    Tcp(IpAddr),
    /// Credentials that could not be read: matches no rule.
    Unknown,
}

impl AccessRule {
    /// Whether the client matches this rule; `tls_name` says whether its verified TLS client
    /// certificate is valid for a name (false without TLS or without a certificate).
    pub fn matches(&self, peer: &Peer, tls_name: &dyn Fn(&str) -> bool) -> bool {
        match (self, peer) {
            (AccessRule::TlsName(name), _) => tls_name(name),
            (AccessRule::Uid(rule), Peer::Unix { uid, .. }) => rule == uid,
            (AccessRule::Gid(rule), Peer::Unix { gid, .. }) => rule == gid,
            (
                AccessRule::Network {
                    address,
                    prefix_bits,
                },
                Peer::Tcp(client),
            ) => in_network(*client, *address, *prefix_bits),
            _ => false,
        }
    }
}

/// Whether `peer` may connect under `rules` (text form, already checked): no rules admit all.
pub fn admits(rules: &[String], peer: &Peer, tls_name: &dyn Fn(&str) -> bool) -> bool {
    rules.is_empty()
        || rules
            .iter()
            .filter_map(|text| text.parse::<AccessRule>().ok())
            .any(|rule| rule.matches(peer, tls_name))
}

fn in_network(client: IpAddr, network: IpAddr, prefix_bits: u8) -> bool {
    // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
    let client = match client {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    match (client, network) {
        (IpAddr::V4(client), IpAddr::V4(network)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix_bits))
                .unwrap_or(0);
            u32::from(client) & mask == u32::from(network) & mask
        }
        (IpAddr::V6(client), IpAddr::V6(network)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix_bits))
                .unwrap_or(0);
            u128::from(client) & mask == u128::from(network) & mask
        }
        _ => false,
    }
}

impl FromStr for AccessRule {
    type Err = String;

    fn from_str(text: &str) -> Result<AccessRule, String> {
        let bad = |why: &str| format!("access rule {text:?}: {why}");
        let (kind, value) = text
            .split_once(':')
            .ok_or_else(|| bad("expected uid:N, gid:N, net:ADDRESS/PREFIX or tls:NAME"))?;
        match kind {
            "uid" => value
                .parse()
                .map(AccessRule::Uid)
                .map_err(|_| bad("not a user id")),
            "gid" => value
                .parse()
                .map(AccessRule::Gid)
                .map_err(|_| bad("not a group id")),
            "net" => {
                let (address, prefix) = value.split_once('/').unwrap_or((value, ""));
                let address: IpAddr = address.parse().map_err(|_| bad("not an IP address"))?;
                let full = if address.is_ipv4() { 32 } else { 128 };
                let prefix_bits = if prefix.is_empty() {
                    full
                } else {
                    prefix
                        .parse::<u8>()
                        .ok()
                        .filter(|&bits| bits <= full)
                        .ok_or_else(|| bad("the prefix length is out of range"))?
                };
                Ok(AccessRule::Network {
                    address,
                    prefix_bits,
                })
            }
            "tls" => {
                let valid = !value.is_empty()
                    && value.len() <= 253
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
                if valid {
                    Ok(AccessRule::TlsName(value.to_ascii_lowercase()))
                } else {
                    Err(bad("not a DNS name"))
                }
            }
            _ => Err(bad("expected uid:N, gid:N, net:ADDRESS/PREFIX or tls:NAME")),
        }
    }
}

impl fmt::Display for AccessRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessRule::Uid(uid) => write!(f, "uid:{uid}"),
            AccessRule::Gid(gid) => write!(f, "gid:{gid}"),
            AccessRule::Network {
                address,
                prefix_bits,
            } => write!(f, "net:{address}/{prefix_bits}"),
            AccessRule::TlsName(name) => write!(f, "tls:{name}"),
        }
    }
}

/// Checks rules and gives them in their canonical text form.
pub fn canonical_rules(rules: &[String]) -> Result<Vec<String>, String> {
    rules
        .iter()
        .map(|text| text.parse::<AccessRule>().map(|rule| rule.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_TLS: fn(&str) -> bool = |_| false;

    impl AccessRule {
        fn matches_plain(&self, peer: &Peer) -> bool {
            self.matches(peer, &NO_TLS)
        }
    }

    #[test]
    fn tls_rules_match_the_names_the_certificate_is_valid_for() {
        let rule = rule("tls:Backup-Host.example");
        assert_eq!(rule.to_string(), "tls:backup-host.example");
        let peer = Peer::Unix { uid: 0, gid: 0 };
        assert!(rule.matches(&peer, &|name| name == "backup-host.example"));
        assert!(!rule.matches(&peer, &NO_TLS));
        assert!(admits(&["tls:a".into()], &peer, &|name| name == "a"));
        for bad in ["tls:", "tls:a b", "tls:a/b"] {
            assert!(bad.parse::<AccessRule>().is_err(), "{bad:?} accepted");
        }
    }

    fn rule(text: &str) -> AccessRule {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_and_print_canonically() {
        assert_eq!(rule("uid:0"), AccessRule::Uid(0));
        assert_eq!(rule("gid:100").to_string(), "gid:100");
        assert_eq!(rule("net:10.1.2.3/8").to_string(), "net:10.1.2.3/8");
        assert_eq!(rule("net:::1").to_string(), "net:::1/128");
        assert_eq!(rule("net:192.168.0.7").to_string(), "net:192.168.0.7/32");
        for bad in [
            "",
            "uid",
            "uid:-1",
            "gid:x",
            "net:10.0.0.0/33",
            "net:::/129",
            "net:host",
            "tcp:a",
        ] {
            assert!(bad.parse::<AccessRule>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn networks_match_by_prefix_and_mapped_addresses_count_as_ipv4() {
        let ten = rule("net:10.0.0.0/8");
        assert!(ten.matches_plain(&Peer::Tcp("10.200.3.4".parse().unwrap())));
        assert!(!ten.matches_plain(&Peer::Tcp("11.0.0.1".parse().unwrap())));
        assert!(ten.matches_plain(&Peer::Tcp("::ffff:10.9.9.9".parse().unwrap())));
        assert!(rule("net:0.0.0.0/0").matches_plain(&Peer::Tcp("8.8.8.8".parse().unwrap())));
        assert!(!rule("net:127.0.0.1/32").matches_plain(&Peer::Tcp("127.0.0.2".parse().unwrap())));
        let v6 = rule("net:fd00::/8");
        assert!(v6.matches_plain(&Peer::Tcp("fd12::1".parse().unwrap())));
        assert!(!v6.matches_plain(&Peer::Tcp("fe80::1".parse().unwrap())));
        assert!(!v6.matches_plain(&Peer::Tcp("10.0.0.1".parse().unwrap())));
    }

    #[test]
    fn unix_rules_match_credentials_only() {
        let peer = Peer::Unix {
            uid: 1000,
            gid: 100,
        };
        assert!(rule("uid:1000").matches_plain(&peer));
        assert!(rule("gid:100").matches_plain(&peer));
        assert!(!rule("uid:0").matches_plain(&peer));
        assert!(!rule("net:0.0.0.0/0").matches_plain(&peer));
        assert!(!rule("uid:1000").matches_plain(&Peer::Tcp("127.0.0.1".parse().unwrap())));
        assert!(!rule("uid:0").matches_plain(&Peer::Unknown));
    }

    #[test]
    fn no_rules_admit_everyone_and_any_matching_rule_admits() {
        let root = Peer::Unix { uid: 0, gid: 0 };
        assert!(admits(&[], &root, &NO_TLS));
        assert!(admits(&[], &Peer::Unknown, &NO_TLS));
        let rules = vec!["uid:1000".to_string(), "gid:0".to_string()];
        assert!(admits(&rules, &root, &NO_TLS));
        assert!(!admits(&rules, &Peer::Unix { uid: 5, gid: 5 }, &NO_TLS));
        assert!(!admits(&rules, &Peer::Unknown, &NO_TLS));
    }
}
