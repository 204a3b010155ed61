//! TSIG keys (RFC 8945): a name, an HMAC algorithm and a secret, as the
//! configuration gives them and the zone transfers use them. Vocabulary:
//! the DNS layer signs and checks with them, the configuration loads them.

use std::fmt;

/// A TSIG algorithm we sign and check with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsigAlgorithm {
    /// `hmac-sha256` (RFC 8945's mandatory one).
    HmacSha256,
    /// `hmac-sha512`.
    HmacSha512,
}

impl TsigAlgorithm {
    /// Parses an algorithm name (`hmac-sha256`, with or without the
    /// trailing dot, any case).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(Self::HmacSha256),
            "hmac-sha512" => Some(Self::HmacSha512),
            _ => None,
        }
    }

    /// The algorithm's domain name, without the trailing dot.
    pub fn name(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::HmacSha512 => "hmac-sha512",
        }
    }
}

/// A TSIG key. Its secret never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    /// The key's name: lower-case dotted text without the trailing dot.
    pub name: String,
    /// Its algorithm.
    pub algorithm: TsigAlgorithm,
    /// The shared secret.
    pub secret: Vec<u8>,
}

impl fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"(hidden)")
            .finish()
    }
}
