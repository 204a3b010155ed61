//! DNS: from a packet to a response.
//!
//! [`Handler::handle`] (in `handler`) is the whole request path: a plain query answered
//! from a stored response (`cache`), else decode, answer from the current
//! snapshot within the room the transport leaves, encode within its size
//! limit (and store); count. It is synchronous and shared by the UDP
//! workers (`udp`) and the TCP and TLS listeners (`server`). Name grammar
//! is in `name`, answers in `answer`, bytes in `wire`, zone-file text in
//! `zonefile`, the counters in `stats`, the transports in `transport` (read by the top-level `metrics`
//! encoder; nothing here imports it).

pub(crate) mod answer;
pub(crate) mod cache;
pub(crate) mod handler;
pub mod journal;
pub mod name;
pub(crate) mod notify;
pub(crate) mod pace;
pub(crate) mod server;
pub mod stats;
pub(crate) mod tls;
pub(crate) mod transfer;
pub(crate) mod transport;
pub(crate) mod tsig;
pub(crate) mod udp;
pub(crate) mod wire;
pub mod zonefile;

pub use cache::Local;
pub use handler::Handler;
pub use transport::Transport;
