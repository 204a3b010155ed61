//! Whether a cluster's API server answers: the silence rule of docs/architecture.md,
//! decision 5 ("broken" means silence too) and the heartbeat that feeds it.
//!
//! Real partitions are silent: packets dropped, a hung server holding its
//! connections open, a TLS handshake that stalls. None of them fails a
//! watch for minutes, so waiting for an error is not a liveness check.
//! Instead every successful response from the cluster's API server (which
//! the client's [`crate::k8s::layer::ApiLayer`] records) proves it alive,
//! a heartbeat makes sure there is one every few seconds, and a cluster
//! with none for `cluster_timeout` is unreachable, broken since its last
//! answer.
//!
//! Owns [`Liveness`], the pure rule (time is given to it, never read), and
//! [`heartbeat`], the thin task that asks `GET /version`. It must not
//! decide what unreachable means for answers (the model does, from the
//! health the cluster task reports), nor restart watches (the cluster task
//! does when a silence ends).

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::model::Settings;

/// The longest time between heartbeats, whatever the timeout: an API
/// server gets at most one liveness request every few seconds from us.
pub(crate) const MAX_HEARTBEAT_PERIOD: Duration = Duration::from_secs(5);
/// The shortest time between heartbeats.
pub(crate) const MIN_HEARTBEAT_PERIOD: Duration = Duration::from_millis(250);

/// Time between heartbeats for `timeout`: a quarter of it, so that three
/// heartbeats in a row can be lost to one bad moment before the silence
/// is declared, within [`MIN_HEARTBEAT_PERIOD`] and
/// [`MAX_HEARTBEAT_PERIOD`].
pub(crate) fn heartbeat_period(timeout: Duration) -> Duration {
    (timeout / 4).clamp(MIN_HEARTBEAT_PERIOD, MAX_HEARTBEAT_PERIOD)
}

/// How long one heartbeat may wait for its answer: until the next one is
/// due, but at least a second (a TLS handshake across regions takes a few
/// round trips) and at most half the timeout. The request is dropped then,
/// with its connection, so the next one opens a fresh connection: after a
/// partition heals, the first heartbeat through proves it within a period
/// instead of waiting on a connection the partition left for dead. It
/// never holds an in-flight permit (see the layer).
pub(crate) fn heartbeat_deadline(timeout: Duration) -> Duration {
    heartbeat_period(timeout)
        .max(Duration::from_secs(1))
        .min(timeout / 2)
}

/// Whether the API server answers, as the cluster's state reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Nothing answered yet, and the timeout has not passed since the
    /// watches started.
    Waiting,
    /// It answered within the timeout.
    Answering,
    /// Nothing answered for the timeout: unreachable since the instant
    /// held (its last answer, or the start when it never answered).
    Silent(Instant),
}

/// The silence rule for one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Liveness {
    timeout: Duration,
    /// When watching began: the reference before the first answer.
    started: Instant,
    last_answered: Option<Instant>,
    silent_since: Option<Instant>,
}

impl Liveness {
    /// A cluster watched from `started`, whose API server last answered
    /// at `last_answered` (a restarted task keeps its client's record).
    pub(crate) fn new(started: Instant, last_answered: Option<Instant>, timeout: Duration) -> Self {
        Self {
            timeout,
            started,
            last_answered,
            silent_since: None,
        }
    }

    /// A reloaded timeout; the next [`Self::check`] judges by it.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The timeout in force.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The API server answered at `at`. True when that ends a silence.
    pub(crate) fn answered(&mut self, at: Instant) -> bool {
        if self.last_answered.is_none_or(|t| t < at) {
            self.last_answered = Some(at);
        }
        self.silent_since.take().is_some()
    }

    /// Judges the silence at `now`. True when the cluster has just become
    /// unreachable.
    pub(crate) fn check(&mut self, now: Instant) -> bool {
        if self.silent_since.is_some() {
            return false;
        }
        let reference = self.last_answered.unwrap_or(self.started);
        if now.saturating_duration_since(reference) < self.timeout {
            return false;
        }
        self.silent_since = Some(reference);
        true
    }

    /// When [`Self::check`] can next find a silence (`None` while silent:
    /// only an answer changes anything then).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if self.silent_since.is_some() {
            return None;
        }
        Some(self.last_answered.unwrap_or(self.started) + self.timeout)
    }

    /// Where the cluster stands.
    pub(crate) fn reach(&self) -> Reach {
        match (self.silent_since, self.last_answered) {
            (Some(since), _) => Reach::Silent(since),
            (None, Some(_)) => Reach::Answering,
            (None, None) => Reach::Waiting,
        }
    }
}

/// Asks the API server for its version every [`heartbeat_period`] of the
/// configured `cluster_timeout` (which follows a reload), each request
/// bounded by [`heartbeat_deadline`]; one at a time, until `stop`. A
/// success is recorded by the client's layer; `failed` hears each failure
/// (an error, or no answer in time) to report it.
pub(crate) async fn heartbeat<F, Fut>(
    ask: F,
    settings: watch::Receiver<std::sync::Arc<Settings>>,
    failed: impl Fn(String),
    stop: CancellationToken,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    loop {
        let timeout = settings.borrow().cluster_timeout;
        let began = tokio::time::Instant::now();
        let deadline = heartbeat_deadline(timeout);
        let outcome = tokio::select! {
            r = tokio::time::timeout(deadline, ask()) => r,
            () = stop.cancelled() => return,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed(format!("heartbeat: {e}")),
            Err(_) => failed(format!("heartbeat: no answer within {deadline:?}")),
        }
        tokio::select! {
            () = tokio::time::sleep_until(began + heartbeat_period(timeout)) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests;
