//! The crate's vocabulary: names, limits and spellings every layer shares.
//!
//! The bottom layer. It imports nothing from the rest of the crate, does no
//! I/O and holds no state, so `model`, `dns`, the sources and the mirror
//! controller can all depend on it without depending on each other.

pub(crate) mod duration;
pub(crate) mod linkerd;
pub(crate) mod mcs;
pub(crate) mod meta;
pub mod name;
pub mod place;
pub mod trust;
pub mod tsig;
