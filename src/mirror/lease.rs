//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection does it: acquire when the Lease is free or its holder has
//! not renewed it for `lease_duration` (by our own clock, from when we last
//! saw it change), renew every `retry_period`, and stop leading when a
//! renewal has not succeeded for `renew_deadline` — which is shorter than
//! the lease duration, so writes stop before anyone else may start.
//!
//! Requests go through kube's typed `Api<Lease>` (get, create, replace).
//!
//! Owns the Lease object and the `leading` signal; it must not write
//! anything else.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::api::ApiError;

/// Lease timing and identity.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This process (pod name, else host name and pid).
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops leading.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults (15 s, 10 s, 2 s).
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease (created, renewed or taken over).
    Held,
    /// Someone else holds it.
    Other(String),
}

/// The holder and renewTime of someone else's Lease as we last saw them,
/// and when (by our clock) we saw them change.
#[derive(Debug, Clone, Default)]
struct Observed(Option<(String, String, Instant)>);

impl Observed {
    /// As if `holder` had renewed to `renew` at `at`: a Lease seen long ago.
    #[cfg(test)]
    fn seen(holder: &str, renew: &str, at: Instant) -> Self {
        Self(Some((holder.to_owned(), renew.to_owned(), at)))
    }
}

/// The Lease as we would hold it, keeping `transitions` counted.
fn ours(c: &LeaseConfig, base: Option<&Lease>, acquire: bool) -> Lease {
    let now = MicroTime(Timestamp::now());
    let old = base.and_then(|l| l.spec.clone()).unwrap_or_default();
    let transitions = old.lease_transitions.unwrap_or(0) + i32::from(acquire && base.is_some());
    Lease {
        metadata: ObjectMeta {
            name: Some(c.name.clone()),
            namespace: Some(c.namespace.clone()),
            resource_version: base.and_then(|l| l.metadata.resource_version.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(c.identity.clone()),
            lease_duration_seconds: Some(c.lease_duration.as_secs().try_into().unwrap_or(15)),
            acquire_time: if acquire {
                Some(now.clone())
            } else {
                old.acquire_time
            },
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// Runs the election until `shutdown`, publishing leadership on `leading`.
/// Returns only on shutdown; a leader releases nothing on exit (the Lease
/// simply expires), as client-go does without ReleaseOnCancel.
pub async fn run(
    client: Client,
    config: LeaseConfig,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut last_renew: Option<Instant> = None;
    let mut observed = Observed::default();
    loop {
        // A hung request must not keep us leading past the renew deadline
        // (client-go bounds each renewal the same way).
        let budget = match (*leading.borrow(), last_renew) {
            (true, Some(t)) => config.renew_deadline.saturating_sub(t.elapsed()),
            _ => config.renew_deadline,
        };
        let attempt = tokio::time::timeout(budget, try_once(&api, &config, &mut observed))
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::Failed(format!(
                    "no answer within {budget:?} (the renew deadline)"
                )))
            });
        let now = Instant::now();
        match attempt {
            Ok(Attempt::Held) => {
                last_renew = Some(now);
                if !*leading.borrow() {
                    info!(lease = %config.name, identity = %config.identity, "leading: mirror writes start");
                    leading.send_replace(true);
                }
            }
            Ok(Attempt::Other(holder)) => {
                if *leading.borrow() {
                    warn!(lease = %config.name, %holder, "lost the lease: mirror writes stop");
                    leading.send_replace(false);
                }
                last_renew = None;
            }
            Err(e) => warn!(lease = %config.name, error = %e, "lease attempt failed"),
        }
        if *leading.borrow()
            && last_renew.is_none_or(|t| now.duration_since(t) > config.renew_deadline)
        {
            warn!(lease = %config.name, "lease not renewed within the renew deadline: mirror writes stop");
            leading.send_replace(false);
        }
        tokio::select! {
            () = tokio::time::sleep(config.retry_period) => {}
            () = shutdown.cancelled() => {
                leading.send_replace(false);
                return;
            }
        }
    }
}

/// One attempt: read the Lease; create it if missing, renew it if ours,
/// take it over if it is free or expired. A replace carries the
/// resourceVersion we read, so of two replicas taking over at once one
/// gets 409 and stays a follower.
async fn try_once(
    api: &Api<Lease>,
    c: &LeaseConfig,
    observed: &mut Observed,
) -> Result<Attempt, ApiError> {
    let Some(current) = api.get_opt(&c.name).await? else {
        api.create(&PostParams::default(), &ours(c, None, true))
            .await?;
        return Ok(Attempt::Held);
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == c.identity {
        api.replace(
            &c.name,
            &PostParams::default(),
            &ours(c, Some(&current), false),
        )
        .await?;
        return Ok(Attempt::Held);
    }
    if holder.is_empty() || expired(observed, &holder, &spec, c.lease_duration) {
        api.replace(
            &c.name,
            &PostParams::default(),
            &ours(c, Some(&current), true),
        )
        .await?;
        return Ok(Attempt::Held);
    }
    Ok(Attempt::Other(holder))
}

/// Someone else's Lease is expired only if it has not changed for a whole
/// lease duration by our own clock, counted from when we saw it change: the
/// holder's renewTime comes from another machine's clock and is only
/// compared for equality.
fn expired(observed: &mut Observed, holder: &str, spec: &LeaseSpec, default: Duration) -> bool {
    let renew = spec
        .renew_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let now = Instant::now();
    let changed = observed
        .0
        .as_ref()
        .is_none_or(|(h, r, _)| *h != holder || *r != renew);
    if changed {
        observed.0 = Some((holder.to_owned(), renew, now));
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(default, Duration::from_secs);
    let since = observed.0.as_ref().map_or(now, |(_, _, t)| *t);
    now.duration_since(since) > duration
}

#[cfg(test)]
mod tests;
