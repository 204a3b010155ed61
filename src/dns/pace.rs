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

/// The schedule of every transfer's messages.
#[derive(Debug, Default)]
pub struct Pacer {
    /// When the octets scheduled so far have had their time.
    free_at: Mutex<Option<Instant>>,
}

impl Pacer {
    /// When a message of `octets` may be written, at `rate` octets per
    /// second (0: at once), asked at `now`; `None` for at once. Its time
    /// is taken from the schedule.
    pub fn slot(&self, octets: usize, rate: u64, now: Instant) -> Option<Instant> {
        if rate == 0 {
            return None;
        }
        let mut free_at = self.free_at.lock().unwrap_or_else(PoisonError::into_inner);
        let start = free_at.map_or(now, |t| t.max(now));
        let takes = Duration::from_secs_f64(octets as f64 / rate as f64);
        *free_at = Some(start + takes);
        (start > now).then_some(start)
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
}
