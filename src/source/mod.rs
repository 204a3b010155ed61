//! Sources of cluster state. Each turns what it reads into
//! [`crate::model::Event`]s; all of them classify Kubernetes objects through
//! [`convert`], so they agree on what is exported. Talking to Kubernetes
//! APIs (clients, watches, the in-flight bound) is [`crate::k8s`]'s.
//!
//! The file source:
//! - [`file`](mod@file): reading and diffing the zones directory (pure but for file reads);
//! - [`watch`]: the task that keeps the file source current.
//!
//! The live source:
//! - [`live`]: which clusters are linked (Links and Secrets, or
//!   [`clusters_file`]) and the supervisor of their tasks;
//! - [`link`], [`spec`]: what a Link says and what a linked cluster is;
//! - [`cluster`]: one cluster's task, thin glue around [`state`], the pure
//!   core that turns watcher events into model events;
//! - [`liveness`]: whether a cluster's API server answers (the silence
//!   rule and its heartbeat);
//! - [`probe`]: the gateway liveness probe;
//! - [`feed`]: the coalescing queue from every cluster to the model;
//! - [`status`]: what `/debug/clusters` and `/metrics` report per cluster.
//!
//! Shared: [`convert`] and [`selector`] (what is exported). Clients and
//! guarded watches come from [`crate::k8s`].

pub(crate) mod cluster;
pub mod clusters_file;
pub(crate) mod convert;
pub(crate) mod feed;
pub mod file;
pub(crate) mod link;
pub mod live;
pub(crate) mod liveness;
pub(crate) mod probe;
pub(crate) mod selector;
pub(crate) mod spec;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod watch;

use crate::model::Event;

/// What a source sends the model task.
#[derive(Debug)]
pub(crate) enum SourceMsg {
    /// A batch of changes, applied together.
    Events(Vec<Event>),
    /// Every cluster the source knows of at start has been announced
    /// ([`crate::model::Event::ClusterUp`]): a name no announced cluster
    /// could hold does not exist. Their data may still be loading.
    ClustersKnown,
}
