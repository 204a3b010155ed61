//! Building [`kube::Client`]s: from a kubeconfig's text, from a kubeconfig
//! file or in-cluster, and a cluster's bounded client (kube's own stack
//! with [`ApiLayer`] on top).
//!
//! Owns reading configurations into clients. It must not make requests:
//! a bad kubeconfig is reported here, an unreachable server by whoever
//! uses the client.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::Client;
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::layer::{ApiLayer, ApiStats};

/// How long a connection to an API server may take to open (TCP and
/// TLS), instead of kube's 30 s: a watch or list that retries after a
/// partition heals should not sit on a connection attempt into the void
/// for longer than the default cluster timeout takes to notice the
/// silence. Liveness itself does not rest on it (`source::liveness` bounds
/// every heartbeat); it bounds how long everything else waits.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig is not valid YAML or misses what we need.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The in-cluster configuration is not available.
    #[error("in-cluster configuration: {0} (outside a cluster, pass --kubeconfig)")]
    InCluster(String),
}

/// A cluster's client and what its [`ApiLayer`] sees.
#[derive(Clone)]
pub struct BoundedClient {
    /// The client; every request goes through the layer.
    pub client: Client,
    /// The liveness heartbeat's client: the same server and credentials
    /// behind the same layer, but its own connection pool, so that a
    /// heartbeat (which asks with `Connection: close`) never rides on a
    /// connection another request left idle and always proves that a new
    /// connection can be made.
    pub heartbeat: Client,
    /// What the layer records (shared by every clone of `client` and
    /// `heartbeat`).
    pub stats: Arc<ApiStats>,
}

impl std::fmt::Debug for BoundedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Client has no Debug; what the layer saw is what matters.
        f.debug_struct("BoundedClient")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

async fn config_of(text: &str, context: Option<&str>) -> Result<kube::Config, ClientError> {
    let kc = Kubeconfig::from_yaml(text).map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        cluster: None,
        user: None,
    };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| ClientError::Kubeconfig(e.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

/// A client for `kubeconfig` (YAML text) and `context` (or its current one),
/// without a bound.
pub async fn from_kubeconfig(text: &str, context: Option<&str>) -> Result<Client, ClientError> {
    let config = config_of(text, context).await?;
    Client::try_from(config).map_err(|e| ClientError::Kubeconfig(e.to_string()))
}

/// A bounded client for `kubeconfig` (YAML text) and `context`: at most
/// `max_inflight` requests in flight.
pub async fn bounded_from_kubeconfig(
    text: &str,
    context: Option<&str>,
    max_inflight: usize,
) -> Result<BoundedClient, ClientError> {
    let config = config_of(text, context).await?;
    let layer = ApiLayer::new(max_inflight);
    let build = |config: kube::Config| {
        ClientBuilder::try_from(config)
            .map(|b| b.with_layer(&layer).build())
            .map_err(|e| ClientError::Kubeconfig(e.to_string()))
    };
    Ok(BoundedClient {
        client: build(config.clone())?,
        heartbeat: build(config)?,
        stats: layer.stats(),
    })
}

/// `client` behind its own [`ApiLayer`]: for a client built elsewhere (the
/// local cluster's, shared with the mirror controller). `heartbeat` is a
/// second client of the same cluster for the liveness heartbeat alone
/// (its own connection pool); without one the heartbeat shares `client`'s.
pub fn bound(client: Client, heartbeat: Option<Client>, max_inflight: usize) -> BoundedClient {
    let layer = ApiLayer::new(max_inflight);
    let wrap = |client: Client| {
        let namespace = client.default_namespace().to_owned();
        ClientBuilder::new(Sender(client), namespace)
            .with_layer(&layer)
            .build()
    };
    let heartbeat = wrap(heartbeat.unwrap_or_else(|| client.clone()));
    BoundedClient {
        client: wrap(client),
        heartbeat,
        stats: layer.stats(),
    }
}

/// The local cluster's client: `kubeconfig` when given, else in-cluster.
pub async fn local(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ClientError> {
    match kubeconfig {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ClientError::Kubeconfig(format!("{}: {e}", path.display())))?;
            from_kubeconfig(&text, context).await
        }
        None => {
            let mut config =
                kube::Config::incluster().map_err(|e| ClientError::InCluster(e.to_string()))?;
            config.connect_timeout = Some(CONNECT_TIMEOUT);
            Client::try_from(config).map_err(|e| ClientError::InCluster(e.to_string()))
        }
    }
}

/// A built client as the innermost service of another client's stack.
struct Sender(Client);

impl tower::Service<Request<Body>> for Sender {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        // The client's own buffer applies back-pressure inside `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(req).await })
    }
}
