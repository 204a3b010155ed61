//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection does it: acquire when the Lease is free or its holder has
//! not renewed it for `lease_duration` (by our own clock, from when we last
//! saw it change), renew every `retry_period`, and stop leading when a
//! renewal has not succeeded for `renew_deadline` — which is shorter than
//! the lease duration, so writes stop before anyone else may start.
//!
//! Owns the Lease object and the `leading` signal; it must not write
//! anything else.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

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
enum Attempt {
    /// We hold the Lease (created, renewed or taken over).
    Held,
    /// Someone else holds it.
    Other(String),
}

fn path(c: &LeaseConfig, name: bool) -> String {
    let base = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        c.namespace
    );
    if name {
        format!("{base}/{}", c.name)
    } else {
        base
    }
}

async fn send(client: &Client, req: http::Request<Vec<u8>>) -> Result<Option<Lease>, String> {
    match client.request::<Lease>(req).await {
        Ok(l) => Ok(Some(l)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Api(s)) => Err(format!("{} {}: {}", s.code, s.reason, s.message)),
        Err(e) => Err(e.to_string()),
    }
}

fn json_request(method: &str, uri: &str, body: &Lease) -> Result<http::Request<Vec<u8>>, String> {
    let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| e.to_string())
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
    let mut last_renew: Option<Instant> = None;
    // (holder, renewTime) as last observed, and when we observed it.
    let mut observed: Option<(String, String, Instant)> = None;
    loop {
        let attempt = try_once(&client, &config, &mut observed).await;
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

async fn try_once(
    client: &Client,
    c: &LeaseConfig,
    observed: &mut Option<(String, String, Instant)>,
) -> Result<Attempt, String> {
    let get = http::Request::get(path(c, true))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let Some(current) = send(client, get).await? else {
        let create = json_request("POST", &path(c, false), &ours(c, None, true))?;
        return send(client, create).await.map(|_| Attempt::Held);
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let renew = spec
        .renew_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let now = Instant::now();
    if holder == c.identity {
        let put = json_request("PUT", &path(c, true), &ours(c, Some(&current), false))?;
        return send(client, put).await.map(|_| Attempt::Held);
    }
    // Someone else's: expired only if it has not changed for a whole lease
    // duration by our clock (clocks of other machines are not trusted).
    let changed = observed
        .as_ref()
        .is_none_or(|(h, r, _)| *h != holder || *r != renew);
    if changed {
        *observed = Some((holder.clone(), renew, now));
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(c.lease_duration, Duration::from_secs);
    let since = observed.as_ref().map_or(now, |(_, _, t)| *t);
    if holder.is_empty() || now.duration_since(since) > duration {
        let put = json_request("PUT", &path(c, true), &ours(c, Some(&current), true))?;
        return send(client, put).await.map(|_| Attempt::Held);
    }
    Ok(Attempt::Other(holder))
}
