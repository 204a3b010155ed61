//! The one retry loop: an operation tried until it succeeds or the task is
//! stopped, with the same backoff as every watch ([`super::watch::backoff`]:
//! 250 ms doubling to 5 s, jittered), on `backon`.
//!
//! Owns nothing but the loop. It must not decide what a failure means:
//! the caller logs or counts it in `notify`, and an operation that should
//! give up returns `Ok` with its own verdict.

use std::future::Future;
use std::time::Duration;

use backon::Retryable as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::watch::{MAX_BACKOFF, MIN_BACKOFF};

/// The backoff between tries: [`MIN_BACKOFF`] doubling to [`MAX_BACKOFF`],
/// each delay plus a random jitter of up to itself, never giving up.
pub(crate) fn builder() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(MIN_BACKOFF)
        .with_max_delay(MAX_BACKOFF)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// Runs `op` until it returns `Ok`, sleeping [`builder`]'s delays between
/// tries; `notify` sees each error and the delay before the next try.
/// `None` when `stop` is cancelled first (also in the middle of a try or a
/// delay, which are dropped).
pub(crate) async fn retry_until<T, E, Fut>(
    stop: &CancellationToken,
    op: impl FnMut() -> Fut,
    notify: impl FnMut(&E, Duration),
) -> Option<T>
where
    Fut: Future<Output = Result<T, E>>,
{
    let tries = op.retry(builder()).sleep(tokio::time::sleep).notify(notify);
    tokio::select! {
        r = tries => r.ok(),
        () = stop.cancelled() => None,
    }
}

/// [`retry_until`], logged the way an operator wants a dependency that
/// does not answer: the first failure is a warning, later ones are debug,
/// and an answer after failures is said once, at info. `what` names the
/// operation ("the Link API group").
pub(crate) async fn retry_logged<T, E, Fut>(
    stop: &CancellationToken,
    what: &str,
    op: impl FnMut() -> Fut,
) -> Option<T>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    let mut failures = 0_u32;
    let answer = retry_until(stop, op, |e: &E, _| {
        if failures == 0 {
            warn!(error = %e, "{what} failed; retrying");
        } else {
            debug!(error = %e, failures, "{what} failed again");
        }
        failures = failures.saturating_add(1);
    })
    .await?;
    if failures > 0 {
        info!(failures, "{what} answered");
    }
    Some(answer)
}

/// Sleeps `delay`; false when `stop` was cancelled first.
pub(crate) async fn pause(stop: &CancellationToken, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests;
