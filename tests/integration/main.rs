//! Integration tests: the real server, in process or as the built binary,
//! queried over real sockets on loopback. One test binary (one link step);
//! each module is one concern.

mod admin;
mod binary;
mod support;
/// The zones-directory writer the benchmarks use.
#[path = "../../benches/zonegen/mod.rs"]
mod zonegen;

mod bad_packets;
mod big_answers;
mod budget;
mod cli;
mod conformance;
mod deploy;
mod dot;
mod hostile;
mod hostile_live;
mod interop;
mod kubectl;
mod kubesim_api;
mod kubesim_faults;
mod kubesim_mcs;
mod layering;
mod lifecycle;
mod limits;
mod live;
mod live_conformance;
mod live_demo;
mod live_mcs;
mod locality;
mod mcs_conformance;
mod mcs_suite;
mod metrics_scrape;
mod mirror;
mod mirror_equivalence;
mod mirror_mcs;
mod netfault;
mod propagation;
mod rbac;
mod reload;
mod silence;
mod soak;
mod startup;
mod transfer;
