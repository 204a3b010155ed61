//! The wall clock, read once: an [`Epoch`] is taken when the process
//! starts and handed to the model, which counts on from it (SOA serials).
//! Vocabulary of the model: it imports nothing of it.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The wall-clock time at one instant: SOA serials never fall behind the
/// Unix seconds it gives for a later instant.
///
/// The seconds are counted on from the instant on the monotonic clock, so a
/// system clock stepped back while we run cannot make a serial go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    at: Instant,
    unix_secs: u32,
}

impl Epoch {
    /// `at` on the monotonic clock is `wall` on the system clock (both
    /// read by the caller, one right after the other).
    pub fn new(at: Instant, wall: SystemTime) -> Self {
        let unix_secs = wall
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        Self { at, unix_secs }
    }

    /// The instant the epoch was taken at.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Unix seconds at `now` (at the epoch's, if `now` is earlier).
    pub fn unix_secs(&self, now: Instant) -> u32 {
        let since = now.saturating_duration_since(self.at).as_secs();
        self.unix_secs
            .saturating_add(u32::try_from(since).unwrap_or(u32::MAX))
    }
}
