//! Query names: the lower-cased form of a question name, and its structural
//! parse relative to the served zone.
//!
//! This module owns the grammar of the clusterset zone (docs/dns.md §2.1): it
//! says which labels are the namespace, the service label, a pod hostname or
//! an SRV port. It never decides whether a service label means
//! `<svc>-<cluster>` or `<svc>-federated`: a `-` split is ambiguous, so that
//! is looked up in the index, never parsed from text. No I/O, no allocation.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::vocab::name::{MAX_LABEL, MAX_NAME_TEXT, ZoneName};

const MAX_LABELS: usize = 128;

/// A question name, lower-cased, held inline so decoding a query allocates
/// nothing.
///
/// `text()` is the dotted form without the trailing dot (`""` for the root).
/// A label holding a byte that no served name can contain (a dot, a space,
/// anything outside ASCII letters, digits, `-`, `_` and `*`) marks the name
/// as *opaque*: it can still be placed in or out of a zone, but it never
/// matches a record.
#[derive(Clone)]
pub struct QName {
    buf: [u8; MAX_NAME_TEXT + 2],
    len: u8,
    /// Start of each label in `buf`, leftmost label first.
    starts: [u8; MAX_LABELS],
    /// Offset of each label's length octet from the start of the wire name.
    wire_offsets: [u8; MAX_LABELS],
    count: u8,
    opaque: bool,
}

/// Why a wire name could not become a [`QName`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name runs past the end of the message.
    #[error("name runs past the end of the message")]
    Truncated,
    /// A label length octet uses the reserved 01/10 prefixes (extended label
    /// types, or a label of 64 octets and more).
    #[error("label length octet {0:#04x} is not a plain label")]
    BadLabel(u8),
    /// A compression pointer inside a question name.
    #[error("compression pointer in a question name")]
    Pointer,
    /// More than 255 octets on the wire.
    #[error("name longer than 255 octets")]
    TooLong,
}

impl QName {
    /// Reads an uncompressed wire name at the start of `wire`. Returns the name
    /// and the number of octets it used.
    pub fn from_wire(wire: &[u8]) -> Result<(Self, usize), NameError> {
        let mut name = Self {
            buf: [0; MAX_NAME_TEXT + 2],
            len: 0,
            starts: [0; MAX_LABELS],
            wire_offsets: [0; MAX_LABELS],
            count: 0,
            opaque: false,
        };
        let mut pos = 0usize;
        loop {
            let Some(&len_octet) = wire.get(pos) else {
                return Err(NameError::Truncated);
            };
            match len_octet & 0xC0 {
                0x00 => {}
                0xC0 => return Err(NameError::Pointer),
                _ => return Err(NameError::BadLabel(len_octet)),
            }
            let len = usize::from(len_octet);
            if len == 0 {
                return Ok((name, pos + 1));
            }
            // 255 octets on the wire at most, the root octet included.
            if pos + 1 + len + 1 > 255 {
                return Err(NameError::TooLong);
            }
            let label = wire
                .get(pos + 1..pos + 1 + len)
                .ok_or(NameError::Truncated)?;
            name.push_label(label, pos);
            pos += 1 + len;
        }
    }

    /// Builds a name from dotted text (a trailing dot is accepted). Used by
    /// configuration and tests; the query path uses [`QName::from_wire`].
    pub fn from_text(text: &str) -> Result<Self, NameError> {
        let text = text.strip_suffix('.').unwrap_or(text);
        let mut wire = Vec::with_capacity(text.len() + 2);
        if !text.is_empty() {
            for label in text.split('.') {
                let len = u8::try_from(label.len()).map_err(|_| NameError::BadLabel(0xFF))?;
                if label.is_empty() || usize::from(len) > MAX_LABEL {
                    return Err(NameError::BadLabel(len));
                }
                wire.push(len);
                wire.extend_from_slice(label.as_bytes());
            }
        }
        wire.push(0);
        Self::from_wire(&wire).map(|(name, _)| name)
    }

    fn push_label(&mut self, label: &[u8], wire_offset: usize) {
        let mut at = usize::from(self.len);
        if self.count > 0 {
            self.buf[at] = b'.';
            at += 1;
        }
        self.starts[usize::from(self.count)] = at as u8;
        self.wire_offsets[usize::from(self.count)] = wire_offset as u8;
        for &b in label {
            let lower = b.to_ascii_lowercase();
            let ok = lower.is_ascii_lowercase()
                || lower.is_ascii_digit()
                || matches!(lower, b'-' | b'_' | b'*');
            if !ok {
                self.opaque = true;
            }
            // Keep `text()` valid ASCII whatever the label held.
            self.buf[at] = if ok { lower } else { b'?' };
            at += 1;
        }
        self.len = at as u8;
        self.count += 1;
    }

    /// The dotted, lower-cased text without the trailing dot.
    pub fn text(&self) -> &str {
        // Only ASCII is ever written into `buf`.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }

    /// Number of labels (0 for the root).
    pub fn label_count(&self) -> usize {
        usize::from(self.count)
    }

    /// The `i`-th label from the left.
    pub fn label(&self, i: usize) -> &str {
        let start = usize::from(self.starts[i]);
        let end = if i + 1 < self.label_count() {
            usize::from(self.starts[i + 1]) - 1
        } else {
            usize::from(self.len)
        };
        &self.text()[start..end]
    }

    /// The text of the name made of labels `i..`, i.e. the suffix starting
    /// at label `i` (`""` when `i` is the label count).
    pub fn suffix(&self, i: usize) -> &str {
        if i >= self.label_count() {
            return "";
        }
        &self.text()[usize::from(self.starts[i])..]
    }

    /// Offset, from the start of the wire name, of the length octet of label
    /// `i`; `i == label_count()` gives the root octet.
    pub fn wire_offset(&self, i: usize) -> usize {
        if i < self.label_count() {
            usize::from(self.wire_offsets[i])
        } else {
            self.wire_len() - 1
        }
    }

    /// Length of the name on the wire.
    pub fn wire_len(&self) -> usize {
        // One length octet per label, the label bytes, and the root octet.
        let labels: usize = (0..self.label_count())
            .map(|i| self.label(i).len() + 1)
            .sum();
        labels + 1
    }

    /// True when some label holds a byte no served name can hold.
    pub fn is_opaque(&self) -> bool {
        self.opaque
    }

    /// If this name is `zone` or below it, the number of labels left of the
    /// zone.
    pub fn relative_to(&self, zone: &ZoneName) -> Option<usize> {
        let zl = zone.label_count();
        let n = self.label_count();
        if n < zl {
            return None;
        }
        let rel = n - zl;
        (0..zl)
            .all(|i| self.label(rel + i) == zone.label(i))
            .then_some(rel)
    }
}

impl fmt::Debug for QName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QName({}.)", self.text())
    }
}

/// The structural meaning of a name inside the forward zone (docs/dns.md
/// §2.1). `key` fields are `<label>.<ns>`, the index key of a service name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The zone apex.
    Apex,
    /// `dns.<zone>`: the empty non-terminal above `ns.dns.<zone>`.
    Dns,
    /// `ns.dns.<zone>`: the name server host.
    NsHost,
    /// `dns-version.<zone>`: the schema version TXT.
    DnsVersion,
    /// `svc.<zone>`: always an empty non-terminal.
    Svc,
    /// `<ns>.svc.<zone>`.
    Namespace {
        /// The namespace.
        ns: &'a str,
    },
    /// `<label>.<ns>.svc.<zone>`: a service name.
    Service {
        /// Index key `<label>.<ns>`.
        key: &'a str,
    },
    /// `_<proto>.<label>.<ns>.svc.<zone>`: the empty non-terminal above SRV names.
    Proto {
        /// Index key `<label>.<ns>`.
        key: &'a str,
        /// Protocol label without the underscore.
        proto: &'a str,
    },
    /// `_<port>._<proto>.<label>.<ns>.svc.<zone>`: an SRV name.
    Port {
        /// Index key `<label>.<ns>`.
        key: &'a str,
        /// Port name without the underscore.
        port: &'a str,
        /// Protocol label without the underscore.
        proto: &'a str,
    },
    /// `<child>.<label>.<ns>.svc.<zone>`: a pod hostname of a per-cluster
    /// service, or a cluster label (or pod alias) under a federated one.
    Child {
        /// Index key `<label>.<ns>`.
        key: &'a str,
        /// The label left of the service label.
        child: &'a str,
    },
    /// `<host>.<cluster>.<label>.<ns>.svc.<zone>`: a federated pod.
    Grandchild {
        /// Index key `<label>.<ns>`.
        key: &'a str,
        /// The cluster label.
        cluster: &'a str,
        /// The pod hostname.
        host: &'a str,
    },
    /// A name the grammar does not have; it never exists.
    Nothing,
}

/// Parses the part of `name` left of the zone (`rel` labels).
pub fn parse(name: &QName, rel: usize) -> Parsed<'_> {
    if name.is_opaque() {
        return Parsed::Nothing;
    }
    // Labels counted from the zone leftwards: r(0) is next to the zone.
    let r = |i: usize| name.label(rel - 1 - i);
    let key_at = |svc_label: usize| {
        // `<label>.<ns>` is contiguous in the text: labels svc_label..svc_label+1.
        let text = name.suffix(svc_label);
        let end = name.label(svc_label).len() + 1 + name.label(svc_label + 1).len();
        &text[..end]
    };
    match rel {
        0 => Parsed::Apex,
        1 => match r(0) {
            "svc" => Parsed::Svc,
            "dns" => Parsed::Dns,
            "dns-version" => Parsed::DnsVersion,
            _ => Parsed::Nothing,
        },
        2 => match (r(0), r(1)) {
            ("svc", ns) => Parsed::Namespace { ns },
            ("dns", "ns") => Parsed::NsHost,
            _ => Parsed::Nothing,
        },
        _ if r(0) != "svc" => Parsed::Nothing,
        3 => Parsed::Service {
            key: key_at(rel - 3),
        },
        4 => {
            let key = key_at(1);
            match r(3).strip_prefix('_') {
                Some(proto) => Parsed::Proto { key, proto },
                None => Parsed::Child { key, child: r(3) },
            }
        }
        5 => {
            let key = key_at(2);
            match (r(4).strip_prefix('_'), r(3).strip_prefix('_')) {
                (Some(port), Some(proto)) => Parsed::Port { key, port, proto },
                (None, None) => Parsed::Grandchild {
                    key,
                    cluster: r(3),
                    host: r(4),
                },
                _ => Parsed::Nothing,
            }
        }
        _ => Parsed::Nothing,
    }
}

/// Formats a parsed name back into the absolute text form (without the
/// trailing dot); the inverse of [`parse`] for every variant but
/// [`Parsed::Nothing`].
pub fn format(parsed: &Parsed<'_>, zone: &ZoneName) -> Option<String> {
    let z = zone.text();
    Some(match parsed {
        Parsed::Apex => z.to_owned(),
        Parsed::Dns => format!("dns.{z}"),
        Parsed::NsHost => format!("ns.dns.{z}"),
        Parsed::DnsVersion => format!("dns-version.{z}"),
        Parsed::Svc => format!("svc.{z}"),
        Parsed::Namespace { ns } => format!("{ns}.svc.{z}"),
        Parsed::Service { key } => format!("{key}.svc.{z}"),
        Parsed::Proto { key, proto } => format!("_{proto}.{key}.svc.{z}"),
        Parsed::Port { key, port, proto } => format!("_{port}._{proto}.{key}.svc.{z}"),
        Parsed::Child { key, child } => format!("{child}.{key}.svc.{z}"),
        Parsed::Grandchild { key, cluster, host } => format!("{host}.{cluster}.{key}.svc.{z}"),
        Parsed::Nothing => return None,
    })
}

/// What a name inside a reverse zone points at: a whole address, or a prefix
/// of one (an empty non-terminal when some served address starts with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReverseName {
    /// A complete address.
    Addr(IpAddr),
    /// The addresses from `first` to `last` inclusive share the name's prefix.
    Prefix {
        /// Lowest address under the name.
        first: IpAddr,
        /// Highest address under the name.
        last: IpAddr,
    },
}

/// Parses a name under `in-addr.arpa` or `ip6.arpa` into an address or an
/// address range. `None` when the labels are not octets or nibbles.
pub fn parse_reverse(name: &QName) -> Option<ReverseName> {
    let n = name.label_count();
    if n >= 2 && name.label(n - 1) == "arpa" && name.label(n - 2) == "in-addr" {
        let octets = n - 2;
        if octets > 4 {
            return None;
        }
        let mut bytes = [0u8; 4];
        for (i, byte) in bytes.iter_mut().enumerate().take(octets) {
            let label = name.label(octets - 1 - i);
            // Leading zeros are not the canonical form and never served.
            if label.len() > 1 && label.starts_with('0') {
                return None;
            }
            *byte = label.parse().ok()?;
        }
        let first = u32::from_be_bytes(bytes);
        let span = if octets == 4 {
            0
        } else {
            u32::MAX >> (8 * octets)
        };
        let (first, last) = (Ipv4Addr::from(first), Ipv4Addr::from(first | span));
        return Some(if octets == 4 {
            ReverseName::Addr(IpAddr::V4(first))
        } else {
            ReverseName::Prefix {
                first: first.into(),
                last: last.into(),
            }
        });
    }
    if n >= 2 && name.label(n - 1) == "arpa" && name.label(n - 2) == "ip6" {
        let nibbles = n - 2;
        if nibbles > 32 {
            return None;
        }
        let mut value: u128 = 0;
        for i in 0..nibbles {
            let label = name.label(nibbles - 1 - i);
            if label.len() != 1 {
                return None;
            }
            let digit = u128::from(label.chars().next()?.to_digit(16)?);
            value |= digit << (124 - 4 * i);
        }
        let span = if nibbles == 32 {
            0
        } else {
            u128::MAX >> (4 * nibbles)
        };
        let first = Ipv6Addr::from(value);
        return Some(if nibbles == 32 {
            ReverseName::Addr(IpAddr::V6(first))
        } else {
            ReverseName::Prefix {
                first: first.into(),
                last: Ipv6Addr::from(value | span).into(),
            }
        });
    }
    None
}

/// The reverse-zone name of an address (`10.2.10.10.in-addr.arpa`), without
/// the trailing dot.
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut out = String::with_capacity(72);
            for byte in v6.octets().iter().rev() {
                for nibble in [byte & 0x0F, byte >> 4] {
                    out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
                    out.push('.');
                }
            }
            out.push_str("ip6.arpa");
            out
        }
    }
}

#[cfg(test)]
mod tests;
