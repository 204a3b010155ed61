//! The Kubernetes glue that belongs to no one source: clients (from a
//! kubeconfig or in-cluster), the tower layer that bounds each cluster's
//! requests in flight and records when its API server last answered, and
//! guarded watches over `kube::runtime::watcher`.
//!
//! Layering: above [`crate::model`] and [`crate::vocab`], below
//! [`crate::source`] and [`crate::mirror`], which both use it. It must not
//! interpret objects or know what a source does with them.
//!
//! - [`client`]: building clients, bounded or not;
//! - [`credentials`]: what a kubeconfig from a Secret may make us run or
//!   read;
//! - [`layer`]: the in-flight bound and [`layer::ApiStats`];
//! - [`watch`]: [`watch::guarded_watch`] and [`watch::guarded_list`];
//! - [`discover`]: which version of a resource a cluster serves;
//! - [`crd`]: the custom resources we read and write, typed, and their
//!   crossing to and from the version a cluster serves;
//! - [`index`]: [`index::Index`] and [`index::Relist`], the one adapter
//!   from a watch to what holds its objects;
//! - [`retry`]: [`retry::retry_until`], the one retry-until-stopped loop.

pub mod client;
pub(crate) mod crd;
pub(crate) mod credentials;
pub(crate) mod discover;
pub(crate) mod index;
pub(crate) mod layer;
pub(crate) mod retry;
pub(crate) mod watch;
