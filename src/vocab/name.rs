//! Name rules every layer shares: the RFC 1035 limits, the configured zone
//! name, what is a valid cluster name, and the hostname fallback for
//! endpoints without one.
//!
//! The bottom of the crate: it imports nothing from it, does no I/O and
//! knows nothing of queries (`dns::name`) or objects (`model`).

use std::fmt;
use std::net::IpAddr;

/// Longest name in text form without the trailing dot (RFC 1035: 255 octets
/// on the wire).
pub const MAX_NAME_TEXT: usize = 253;
/// Longest label (RFC 1035).
pub const MAX_LABEL: usize = 63;

/// A configured zone name, lower-cased, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneName {
    text: String,
    labels: Vec<String>,
}

/// Why a zone name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid zone name {name:?}: {reason}")]
pub struct ZoneNameError {
    name: String,
    reason: &'static str,
}

impl ZoneName {
    /// Parses and validates a zone name (`clusterset.local`, `10.in-addr.arpa.`).
    pub fn new(name: &str) -> Result<Self, ZoneNameError> {
        let err = |reason| ZoneNameError {
            name: name.to_owned(),
            reason,
        };
        let text = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if text.is_empty() {
            return Err(err("the root zone cannot be served"));
        }
        if text.len() > MAX_NAME_TEXT {
            return Err(err("longer than 253 characters"));
        }
        let labels: Vec<String> = text.split('.').map(str::to_owned).collect();
        for label in &labels {
            if label.is_empty() || label.len() > MAX_LABEL {
                return Err(err("every label must be 1 to 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(err("labels may hold only letters, digits and '-'"));
            }
        }
        Ok(Self { text, labels })
    }

    /// The dotted, lower-cased text without the trailing dot.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Number of labels.
    pub fn label_count(&self) -> usize {
        self.labels.len()
    }

    /// The `i`th label, leftmost first.
    pub fn label(&self, i: usize) -> &str {
        &self.labels[i]
    }
}

impl fmt::Display for ZoneName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.", self.text)
    }
}

/// The service label suffix of federated names; no cluster may use it.
pub const FEDERATED: &str = "federated";
/// The service label suffix of nearest names (docs/locality.md); no
/// cluster may use it.
pub const NEAREST: &str = "nearest";

/// True for an RFC 1123 label: 1–63 lower-case letters, digits and `-`,
/// starting and ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Why a cluster name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterNameError {
    /// `federated` and `nearest` are reserved for the union names.
    #[error(
        "cluster name {0:?} is reserved: <svc>-federated and <svc>-nearest mean answers across clusters"
    )]
    Reserved(String),
    /// Not a lower-case RFC 1123 label.
    #[error(
        "cluster name {0:?} is not an RFC 1123 label (1-63 lower-case letters, digits and '-')"
    )]
    NotALabel(String),
}

/// Validates a cluster name (docs/architecture.md, decision 7).
pub fn check_cluster_name(name: &str) -> Result<(), ClusterNameError> {
    if name == FEDERATED || name == NEAREST {
        return Err(ClusterNameError::Reserved(name.to_owned()));
    }
    if !is_dns_label(name) {
        return Err(ClusterNameError::NotALabel(name.to_owned()));
    }
    Ok(())
}

/// The hostname CoreDNS gives an endpoint without one: the address with `.`
/// or `:` replaced by `-`, and a `0` appended when that leaves a trailing
/// `-` (`fd00:20::` → `fd00-20--0`).
pub fn dashed_ip(ip: IpAddr) -> String {
    let mut s: String = ip
        .to_string()
        .chars()
        .map(|c| if c == '.' || c == ':' { '-' } else { c })
        .collect();
    if s.starts_with('-') {
        s.insert(0, '0');
    }
    if s.ends_with('-') {
        s.push('0');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names() {
        let cases = [
            ("east", Ok(())),
            ("b-c", Ok(())),
            ("us-east-1", Ok(())),
            ("federated", Err("reserved")),
            ("East", Err("RFC 1123")),
            ("-east", Err("RFC 1123")),
            ("east-", Err("RFC 1123")),
            ("", Err("RFC 1123")),
            ("a.b", Err("RFC 1123")),
        ];
        for (name, want) in cases {
            let got = check_cluster_name(name);
            match want {
                Ok(()) => assert!(got.is_ok(), "{name}: {got:?}"),
                Err(text) => {
                    let msg = got.expect_err(name).to_string();
                    assert!(msg.contains(text), "{name}: {msg}");
                }
            }
        }
    }

    #[test]
    fn dashed_ips() {
        let cases = [
            ("10.20.4.5", "10-20-4-5"),
            ("fd00:20::5", "fd00-20--5"),
            ("fd00:20::", "fd00-20--0"),
            ("::1", "0--1"),
        ];
        for (ip, want) in cases {
            assert_eq!(dashed_ip(ip.parse().unwrap()), want, "{ip}");
        }
    }
}
