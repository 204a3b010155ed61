//! The byte rate zone transfers share (`transfer-rate-mb`), so a
//! transfer of a large zone never takes the bandwidth and the CPU the
//! queries need: each message is given a start time on one schedule,
//! after the octets before it have had their time.
//!
//! Written here rather than taken from `governor`: its quota is fixed when
//! built, while this rate follows a configuration reload at the next
//! message, and the schedule is one instant behind a lock taken once per
//! message of about 16 KiB. Pure: the time is given, the stream listeners
//! wait.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How far ahead of its schedule a message may go out at once, and how
/// late the schedule may fall behind before idle time stops counting: a
/// timer wakes a millisecond late at best, so waits shorter than this
/// would each lose time and the rate would fall well below the one asked
/// (at 64 MiB/s a 16 KiB message takes a quarter of a millisecond).
const SLACK: Duration = Duration::from_millis(5);

/// The schedule of every transfer's messages.
#[derive(Debug, Default)]
pub struct Pacer {
    /// When the octets scheduled so far have had their time.
    free_at: Mutex<Option<Instant>>,
}

impl Pacer {
    /// When a message of `octets` may be written, at `rate` octets per
    /// second (0: at once), asked at `now`; `None` for at once. Its time
    /// is taken from the schedule. A message less than [`SLACK`] ahead
    /// of its time goes at once, and one that finds the schedule late by
    /// less than [`SLACK`] (a timer that woke late) keeps its place, so
    /// the rate holds on average; idle time beyond that is not saved up.
    pub fn slot(&self, octets: usize, rate: u64, now: Instant) -> Option<Instant> {
        if rate == 0 {
            return None;
        }
        let mut free_at = self.free_at.lock().unwrap_or_else(PoisonError::into_inner);
        let start = match *free_at {
            Some(t) if t + SLACK >= now => t,
            _ => now,
        };
        let takes = Duration::from_secs_f64(octets as f64 / rate as f64);
        *free_at = Some(start + takes);
        (start > now + SLACK).then_some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_spaced_by_their_octets_over_the_rate() {
        let p = Pacer::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // 1,000 octets a second: each 100-octet message takes 100 ms.
        assert_eq!(p.slot(100, 1000, t0), None, "the first goes at once");
        assert_eq!(p.slot(100, 1000, t0), Some(t0 + ms(100)));
        assert_eq!(p.slot(100, 1000, t0 + ms(50)), Some(t0 + ms(200)));
        // Idle time is not saved up as a burst.
        assert_eq!(p.slot(100, 1000, t0 + ms(1000)), None);
        assert_eq!(p.slot(100, 1000, t0 + ms(1000)), Some(t0 + ms(1100)));
        assert_eq!(p.slot(100, 0, t0 + ms(1000)), None, "0: no limit");
    }

    #[test]
    fn short_waits_and_late_timers_do_not_lower_the_rate() {
        let p = Pacer::default();
        let t0 = Instant::now();
        let us = Duration::from_micros;
        // 100 MB/s, 10 KB messages: 100 µs each. A sender that waits
        // until each slot and wakes 1 ms late sends 10,000 messages in
        // 1 s of schedule, not 10,000 × 1.1 ms.
        let mut now = t0;
        for _ in 0..10_000 {
            if let Some(at) = p.slot(10_000, 100_000_000, now) {
                now = at + Duration::from_millis(1);
            }
        }
        let took = now.duration_since(t0);
        assert!(took >= us(990_000) && took <= us(1_010_000), "{took:?}");
    }
}
