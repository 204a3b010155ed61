//! Which version of an API group's resource a cluster serves, asked through
//! `kube::discovery` (a CRD may be installed in another version, or not at
//! all).
//!
//! Owns the difference between "not served" (`Ok(None)`: the group or the
//! kind is missing, a normal state of a cluster) and "could not ask"
//! (`Err`: the caller retries). It must not decide what a missing API
//! means; callers do.

use kube::Client;
use kube::api::ApiResource;
use kube::discovery::ApiGroup;

/// Why a group could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the API group {group}: {source}")]
pub(crate) struct DiscoverError {
    /// The group asked for.
    pub group: String,
    /// The client's error.
    #[source]
    pub source: kube::Error,
}

/// The API group `group` as the cluster serves it; `None` when it serves
/// no such group.
pub(crate) async fn group(client: &Client, group: &str) -> Result<Option<ApiGroup>, DiscoverError> {
    match kube::discovery::group(client, group).await {
        Ok(g) => Ok(Some(g)),
        Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(DiscoverError {
            group: group.to_owned(),
            source,
        }),
    }
}

/// The resource of `kind` in the first of `versions` (most preferred
/// first) that `group` serves it in.
pub(crate) fn resource(group: &ApiGroup, versions: &[&str], kind: &str) -> Option<ApiResource> {
    versions.iter().find_map(|v| {
        group
            .versioned_resources(v)
            .into_iter()
            .find(|(r, _)| r.kind == kind)
            .map(|(r, _)| r)
    })
}
