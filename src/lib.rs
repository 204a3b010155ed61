//! clusterset-dns: an authoritative DNS server for multicluster Kubernetes
//! service names (`<svc>-<cluster>` and `<svc>-federated`), fed by a
//! directory of Kubernetes YAML today and by live watches later.
//!
//! The crate is split by role:
//! - [`dns`]: name parsing, answer building, the wire format and the sockets;
//! - [`model`]: per-cluster state and the index of names the query path reads;
//! - [`source`]: where cluster state comes from (the file source);
//! - [`admin`], [`metrics`], [`config`], [`cli`]: the process around them.
//!
//! Everything under `dns::name`, `dns::wire`, `dns::answer` and `model` is
//! synchronous, pure code; I/O stays in `dns::server`, `dns::udp`, `source`'s
//! watch loops, `mirror::run` and `admin`.

pub mod admin;
pub mod cli;
pub mod config;
pub mod dns;
pub mod k8s;
pub mod metrics;
pub mod mirror;
pub mod model;
pub mod runtime;
pub mod source;
pub mod vocab;
