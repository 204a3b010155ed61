//! Names other modules still import from here while they move to
//! [`crate::k8s`]: the mirror controller's list+watch (removed once the
//! mirror is off it) and client building (now [`crate::k8s::client`]).
//!
//! Owns nothing; it must not grow.

// removed once the mirror is off it
pub use crate::k8s::legacy::{WatchMsg, WatchTarget, list_once, list_watch};

/// Why a client could not be built (now [`crate::k8s::client::ClientError`]).
pub use crate::k8s::client::ClientError as ApiError;
/// A client for a kubeconfig's text (now [`crate::k8s::client::from_kubeconfig`]).
pub use crate::k8s::client::from_kubeconfig as client_from_kubeconfig;
/// The local cluster's client (now [`crate::k8s::client::local`]).
pub use crate::k8s::client::local as local_client;
