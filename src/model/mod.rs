//! The model: cluster state fed by sources, and the index derived from it.
//!
//! [`Model`] is owned by one writer (the runtime's model task, or `check` and
//! `dump` directly). Sources send [`Event`]s; the model applies them, updates
//! only the names they touched, and hands out immutable [`Snapshot`]s that
//! the query path and the mirror controller both read. It also holds what
//! a linked cluster may cost ([`budget`]).
//!
//! The model never reads a clock: every mutating method is told `now`, and
//! the wall clock reaches it once, as the [`Epoch`] it is built with (SOA
//! serials). Tests therefore choose the time instead of waiting for it.
//!
//! It must not do I/O, and it imports only [`crate::vocab`]: the DNS layer
//! reads it, never the other way round.

pub mod budget;
pub(crate) mod cluster;
pub(crate) mod entry;
pub(crate) mod epoch;
pub(crate) mod index;
pub(crate) mod locality;
pub mod objects;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod writer;

pub(crate) use cluster::{ClusterSet, Dirty};
pub use cluster::{Event, Health};
pub(crate) use entry::{Entry, Nearest, Origin, Pod};
pub use epoch::Epoch;
pub use index::{Changes, JournalLimits, Settings, Snapshot};
pub use writer::Model;
