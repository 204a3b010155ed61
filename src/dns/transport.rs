//! The transports a query can come over, and the response size limit each
//! sets. Vocabulary of the DNS layer: every other part of it may use this,
//! and it uses none of them.

/// The transport a query came over; it sets the response size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: 512 without EDNS, else the EDNS size capped by the server.
    Udp,
    /// TCP: 65535.
    Tcp,
    /// DNS over TLS: 65535, as TCP.
    Tls,
}

impl Transport {
    /// Every transport, in metric label order.
    pub const ALL: [Transport; 3] = [Transport::Udp, Transport::Tcp, Transport::Tls];

    /// The `transport` label of metrics.
    pub fn label(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        }
    }

    /// The largest response over a stream transport (TCP, TLS); `None` for
    /// UDP, whose limit depends on the query.
    pub fn stream_limit(self) -> Option<usize> {
        match self {
            Transport::Udp => None,
            Transport::Tcp | Transport::Tls => Some(usize::from(u16::MAX)),
        }
    }
}
