use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;

use super::*;

#[tokio::test(start_paused = true)]
async fn retries_with_growing_delays_until_success() {
    let stop = CancellationToken::new();
    let tries = AtomicU32::new(0);
    let mut delays = Vec::new();
    let start = Instant::now();
    let got = retry_until(
        &stop,
        || async {
            let n = tries.fetch_add(1, Ordering::SeqCst);
            if n < 4 { Err(n) } else { Ok(n) }
        },
        |_e: &u32, d| delays.push(d),
    )
    .await;
    assert_eq!(got, Some(4));
    assert_eq!(tries.load(Ordering::SeqCst), 5);
    assert_eq!(delays.len(), 4);
    // Jitter adds up to the delay itself: each lies in [base, 2 × base].
    for (d, base) in delays.iter().zip([250, 500, 1000, 2000]) {
        let base = Duration::from_millis(base);
        assert!(
            *d >= base && *d <= base * 2,
            "{d:?} not within [{base:?}, 2×]"
        );
    }
    // The paused clock sleeps in whole milliseconds.
    let slept: Duration = delays.iter().sum();
    let elapsed = start.elapsed();
    assert!(elapsed >= slept && elapsed <= slept + Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn the_delay_stops_growing_at_the_maximum() {
    let stop = CancellationToken::new();
    let mut delays = Vec::new();
    let tries = AtomicU32::new(0);
    retry_until(
        &stop,
        || async {
            if tries.fetch_add(1, Ordering::SeqCst) < 12 {
                Err(())
            } else {
                Ok(())
            }
        },
        |(), d| delays.push(d),
    )
    .await;
    assert_eq!(delays.len(), 12);
    assert!(delays.iter().all(|d| *d <= MAX_BACKOFF * 2));
    assert!(delays[8..].iter().all(|d| *d >= MAX_BACKOFF));
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_the_loop_during_a_delay() {
    let stop = CancellationToken::new();
    let tries = AtomicU32::new(0);
    let canceller = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        canceller.cancel();
    });
    let got: Option<()> = retry_until(
        &stop,
        || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>("down")
        },
        |_, _| {},
    )
    .await;
    assert_eq!(got, None);
    let n = tries.load(Ordering::SeqCst);
    // 3 s holds at least the first three delays (at most 3.5 s together)
    // and at most five (at least 3.75 s together).
    assert!((2..=5).contains(&n), "{n} tries in 3 s");
}

#[tokio::test(start_paused = true)]
async fn pause_reports_a_stop() {
    let stop = CancellationToken::new();
    assert!(pause(&stop, Duration::from_secs(1)).await);
    stop.cancel();
    assert!(!pause(&stop, Duration::from_secs(1)).await);
}

#[tokio::test(start_paused = true)]
async fn a_logged_retry_returns_the_answer_after_failures() {
    let stop = CancellationToken::new();
    let tries = AtomicU32::new(0);
    let got = retry_logged(&stop, "asking", || async {
        if tries.fetch_add(1, Ordering::SeqCst) < 3 {
            Err("down")
        } else {
            Ok("up")
        }
    })
    .await;
    assert_eq!(got, Some("up"));
    assert_eq!(tries.load(Ordering::SeqCst), 4);
    stop.cancel();
    let never: Option<()> = retry_logged(&stop, "asking", || async { Err("down") }).await;
    assert_eq!(never, None);
}
