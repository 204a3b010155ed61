//! With `--mcs` off: the ServiceImports an earlier run with `--mcs` wrote.
//! Without `--mcs` nothing watches ServiceImports, so the reconcile never
//! sees them; left alone, one would keep announcing the `ips` of a derived
//! Service that the reconcile has deleted, and CoreDNS's `multicluster`
//! plugin would keep serving them.
//!
//! Owns one look, made by the leader: list ours (by [`MANAGED_BY_LABEL`])
//! in every namespace and delete each with uid and resourceVersion
//! preconditions. It must not touch a ServiceImport without our label, nor
//! one that changed since it was listed (the API answers 409 for those).

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Client, ResourceExt as _};
use tracing::{debug, info, warn};

use super::api::discover_mcs;
use super::{MANAGED_BY, MANAGED_BY_LABEL};

/// How one look ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swept {
    /// Done: this many deleted. Nothing to do again in this process.
    Done(usize),
    /// The API did not answer (discovery, the list or a delete failed):
    /// look again later.
    Again,
}

/// Deletes our ServiceImports in the local cluster (see the module doc).
/// A cluster that serves no ServiceImport has none. Without the right to
/// list them (the MCS role removed with the flag) it says once how to
/// delete them by hand.
pub(crate) async fn leftover_imports(client: &Client) -> Swept {
    let ar = match discover_mcs(client).await {
        Ok(apis) => match apis.import {
            Some(ar) => ar,
            None => return Swept::Done(0),
        },
        Err(e) => {
            debug!(error = %e, "mirror: cannot discover the MCS API to look for leftover ServiceImports");
            return Swept::Again;
        }
    };
    let ours = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let list = match all.list(&ListParams::default().labels(&ours)).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            info!(
                "mirror: may not list ServiceImports; any an earlier run with --mcs wrote stay \
                 (kubectl delete serviceimports -A -l {ours})"
            );
            return Swept::Done(0);
        }
        Err(e) => {
            debug!(error = %e, "mirror: cannot list ServiceImports; looking again later");
            return Swept::Again;
        }
    };
    let mut deleted = 0;
    let mut again = false;
    for import in &list.items {
        let (Some(ns), name) = (import.namespace(), import.name_any()) else {
            continue;
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: import.uid(),
                resource_version: import.resource_version(),
            }),
            ..DeleteParams::default()
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        match api.delete(&name, &params).await {
            Ok(_) => deleted += 1,
            // Gone, or changed since the list: not what we listed.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                warn!(namespace = %ns, name = %name, error = %e, "mirror: cannot delete a leftover ServiceImport; trying again later");
                again = true;
            }
        }
    }
    if deleted > 0 {
        info!(
            deleted,
            "mirror: deleted the ServiceImports an earlier run with --mcs wrote (--mcs is off)"
        );
    }
    if again {
        Swept::Again
    } else {
        Swept::Done(deleted)
    }
}
