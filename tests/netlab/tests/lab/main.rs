//! netlab against the real thing: a kubesim binary in a lab host, reached through its veth,
//! with each fault, a pause, a latency relay and cleanup checked with a kube client. Every
//! wait is bounded; without root, `ip` or `nft` each test prints why and passes.

#![warn(clippy::too_many_lines)] // the house rule; threshold in the root clippy.toml

mod cleanup;
mod faults;
mod relay;
mod support;
