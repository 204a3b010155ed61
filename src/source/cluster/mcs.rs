//! The discovered watches of one cluster task: the ClusterProperty watch
//! (every mode: the cluster's place, docs/locality.md; and with `--mcs` its
//! cluster id) and the MCS watches (`--mcs`, issue 18): finding which
//! versions of ClusterProperty, ServiceExport and ServiceImport the cluster
//! serves (v1beta1 preferred), starting those watches, and the
//! every-Service watch once the exports have listed.
//!
//! Owns the rule that a cluster serving none of these APIs is simply not
//! an MCS member and states no place of its own: said once in the log and
//! in `/debug/clusters`, never an error, and its state is handed an empty
//! list for every watch it cannot start, so its sync waits for none of
//! them. A ClusterProperty API the credentials may not list (RBAC: Linkerd's
//! own remote-access credentials cannot) counts as not served, so a cluster
//! linked with them keeps working; the problem is shown in
//! `/debug/clusters`. While an API is missing the cluster is asked again
//! ([`super::ClusterRun::mcs_rediscover`]), so CRDs installed (or access
//! granted) after the cluster was linked are watched without a restart.
//! An API that goes away keeps its watch, which then reports the failure.
//! It must not interpret objects (`source::state` does).

use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::watcher::Event as WatchEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Msg, Runner};
use crate::k8s::client::BoundedClient;
use crate::k8s::discover::{self, DiscoverError};
use crate::k8s::retry::{pause, retry_until};
use crate::k8s::watch::{PAGE, config};
use crate::source::state::Watch;
use crate::source::status::McsStatus;
use crate::vocab::mcs::{ABOUT_GROUP, ABOUT_VERSIONS, MCS_GROUP, MCS_VERSIONS};

/// The MCS and About resources a cluster serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct McsApis {
    /// `serviceexports.multicluster.x-k8s.io` (`--mcs` only).
    pub(super) export: Option<ApiResource>,
    /// `serviceimports.multicluster.x-k8s.io` (`--mcs` only).
    pub(super) import: Option<ApiResource>,
    /// `clusterproperties.about.k8s.io`, when served and the credentials
    /// may list it.
    pub(super) property: Option<ApiResource>,
    /// Served, but the credentials may not list it.
    pub(super) property_forbidden: bool,
}

/// Asks the cluster which About (and, with `mcs`, MCS) resources it
/// serves, and whether the credentials may list ClusterProperties.
async fn discover_apis(client: &kube::Client, mcs: bool) -> Result<McsApis, DiscoverError> {
    // Without `--mcs` nothing would watch them: no request for them.
    let mcs = if mcs {
        discover::group(client, MCS_GROUP).await?
    } else {
        None
    };
    let about = discover::group(client, ABOUT_GROUP).await?;
    let find = |g: &Option<kube::discovery::ApiGroup>, versions: &[&str], kind| {
        g.as_ref()
            .and_then(|g| discover::resource(g, versions, kind))
    };
    let mut apis = McsApis {
        export: find(&mcs, &MCS_VERSIONS, "ServiceExport"),
        import: find(&mcs, &MCS_VERSIONS, "ServiceImport"),
        property: find(&about, &ABOUT_VERSIONS, "ClusterProperty"),
        property_forbidden: false,
    };
    if let Some(ar) = &apis.property
        && !may_list(client, ar).await?
    {
        apis.property = None;
        apis.property_forbidden = true;
    }
    Ok(apis)
}

/// Whether the credentials may list `ar` (one object asked for): a watch
/// they may not make would fail forever and keep the cluster broken.
async fn may_list(client: &kube::Client, ar: &ApiResource) -> Result<bool, DiscoverError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
        Err(source) => Err(DiscoverError {
            group: ABOUT_GROUP.to_owned(),
            source,
        }),
    }
}

impl McsApis {
    /// True when the cluster lacks an API its task would watch: the
    /// ClusterProperties always, ServiceExports with `--mcs`, and
    /// ServiceImports with `--mcs` in the local cluster.
    fn lacks_any(&self, local: bool, mcs: bool) -> bool {
        self.property.is_none()
            || (mcs && (self.export.is_none() || (local && self.import.is_none())))
    }
}

/// Discovers the cluster's About (and, with `mcs`, MCS) APIs, retrying
/// until it can ask, and sends them to the task; while the cluster lacks
/// one, asks again every `every` and sends what it finds whenever that
/// differs from what it sent.
async fn discover_task(
    client: BoundedClient,
    tx: mpsc::Sender<Msg>,
    stop: CancellationToken,
    (local, mcs): (bool, bool),
    every: Duration,
) {
    let mut sent: Option<McsApis> = None;
    loop {
        // The watches report a cluster that does not answer; this only
        // retries.
        let asked = retry_until(
            &stop,
            || discover_apis(&client.client, mcs),
            |e, _| debug!(error = %e, "cannot discover the MCS and About APIs; retrying"),
        );
        let Some(apis) = asked.await else { return };
        let done = !apis.lacks_any(local, mcs);
        if sent.as_ref() != Some(&apis) {
            sent = Some(apis.clone());
            if tx.send(Msg::McsApis(Box::new(apis))).await.is_err() {
                return;
            }
        }
        if done || !pause(&stop, every).await {
            return;
        }
    }
}

fn api_name(ar: Option<&ApiResource>) -> Option<String> {
    ar.map(|r| format!("{}.{}", r.plural, r.api_version))
}

impl Runner {
    /// The state waits for the ClusterProperty watch and, with `--mcs`,
    /// the MCS watches, which start once discovery says which versions the
    /// cluster serves.
    pub(super) fn start_discovery(&mut self) {
        self.state.set_property_watch();
        if let Some(all) = self.run.all_services() {
            self.state.set_mcs(all);
            self.board.update(&self.run.name, |r| {
                r.mcs = Some(McsStatus::default());
            });
        }
        if let Some(w) = &self.watches {
            tokio::spawn(discover_task(
                w.client.clone(),
                self.queue.clone(),
                self.stop.clone(),
                (self.run.local, self.run.mcs),
                self.run.mcs_rediscover,
            ));
        }
    }

    /// Discovery answered: the watches of the APIs the cluster serves start.
    /// The first time, the others are an empty list; later, only APIs that
    /// were missing and are served now start (CRDs installed since).
    pub(super) fn mcs_apis(&mut self, apis: McsApis) {
        let first = self.mcs_found.is_none();
        let was = self.mcs_found.take().unwrap_or_default();
        self.log_apis(&was, &apis, first);
        // What runs: an API that went away keeps its watch.
        let now = McsApis {
            export: was.export.clone().or_else(|| apis.export.clone()),
            import: was.import.clone().or_else(|| apis.import.clone()),
            property: was.property.clone().or_else(|| apis.property.clone()),
            property_forbidden: was.property.is_none() && apis.property_forbidden,
        };
        self.property_forbidden = now.property_forbidden;
        if self.run.mcs {
            self.board.update(&self.run.name, |r| {
                let m = r.mcs.get_or_insert_with(McsStatus::default);
                m.discovered = true;
                m.export_api = api_name(now.export.as_ref());
                m.import_api = api_name(now.import.as_ref());
                m.property_api = api_name(now.property.as_ref());
            });
        }
        let mut empty = self.start_mcs_watches(&was, &now, first);
        if first
            && now.export.is_none()
            && let Some(all) = self.run.all_services()
        {
            // No export can make an unlabelled Service a member.
            self.all_services_started = true;
            empty.push(Watch::Services(all));
        } else if !first && was.export.is_none() && now.export.is_some() {
            // Exports can make any Service a member now.
            self.all_services_started = false;
        }
        for w in empty {
            // An empty list: the watch holds nothing.
            let out = self.state.watched(w, WatchEvent::Init);
            self.took(out);
            let out = self.state.watched(w, WatchEvent::InitDone);
            self.took(out);
        }
        self.mcs_found = Some(now);
    }

    /// Starts the watch of each API in `now` that was not in `was`; returns
    /// the watches to hand an empty list (`first`: those not served).
    fn start_mcs_watches(&mut self, was: &McsApis, now: &McsApis, first: bool) -> Vec<Watch> {
        let (local, mcs) = (self.run.local, self.run.mcs);
        let mut empty = Vec::new();
        let Some(w) = self.watches.as_mut() else {
            return empty;
        };
        let mut start =
            |watch, was: &Option<ApiResource>, now: &Option<ApiResource>, cfg| match (was, now) {
                (None, Some(ar)) => w.dynamic(watch, ar, cfg),
                (None, None) if first => empty.push(watch),
                _ => {}
            };
        // Every ClusterProperty: a field selector names one object, and
        // the place takes two (the state keeps only those it reads).
        start(
            Watch::Properties,
            &was.property,
            &now.property,
            config(PAGE),
        );
        if mcs {
            start(Watch::Exports, &was.export, &now.export, config(PAGE));
        }
        if mcs && local {
            start(Watch::Imports, &was.import, &now.import, config(PAGE));
        }
        empty
    }

    /// Says what discovery found: everything the first time, then the APIs
    /// the cluster serves now that it did not.
    fn log_apis(&self, was: &McsApis, apis: &McsApis, first: bool) {
        let name = &self.run.name;
        if first {
            self.log_first(apis);
            return;
        }
        let new = |was: &Option<ApiResource>, now: &Option<ApiResource>| {
            now.as_ref()
                .filter(|_| was.is_none())
                .map(|ar| ar.api_version.clone())
        };
        if let Some(api) = new(&was.export, &apis.export) {
            info!(cluster = %name, %api, "the cluster serves ServiceExports now: watching them");
        }
        if let Some(api) = new(&was.property, &apis.property) {
            info!(cluster = %name, %api, "ClusterProperties can be read now: watching its place and cluster id");
        }
        if let Some(api) = new(&was.import, &apis.import).filter(|_| self.run.local) {
            info!(cluster = %name, %api, "the cluster serves ServiceImports now: watching them");
        }
    }

    /// What the first discovery found.
    fn log_first(&self, apis: &McsApis) {
        let name = &self.run.name;
        if self.run.mcs {
            match &apis.export {
                Some(ar) => {
                    info!(cluster = %name, api = %ar.api_version, "watching ServiceExports");
                }
                None => info!(
                    cluster = %name,
                    "the cluster serves no ServiceExport API ({MCS_GROUP}): not an MCS member"
                ),
            }
        }
        let id = if self.run.mcs {
            " and its name is its cluster id"
        } else {
            ""
        };
        if apis.property_forbidden {
            warn!(cluster = %name, "the cluster's credentials may not list ClusterProperties ({ABOUT_GROUP}): it states no place of its own{id} (grant list and watch on clusterproperties to read them)");
        } else if apis.property.is_none() {
            info!(cluster = %name, "the cluster serves no ClusterProperty API ({ABOUT_GROUP}): it states no place of its own{id}");
        }
    }

    /// Starts the every-Service watch once the exports have listed.
    pub(super) fn maybe_start_all_services(&mut self) {
        if self.all_services_started || !self.state.exports_listed() {
            return;
        }
        let (Some(all), Some(w)) = (self.run.all_services(), self.watches.as_mut()) else {
            return;
        };
        self.all_services_started = true;
        w.services(all, "");
    }

    /// The state's MCS report onto the status board.
    pub(super) fn report_mcs(&self) {
        if self.run.mcs {
            let report = self.state.mcs_report();
            self.board.update(&self.run.name, |r| {
                r.mcs.get_or_insert_with(McsStatus::default).state = report;
            });
        }
    }

    /// The place the cluster's ClusterProperty objects state onto the
    /// status board, with why they cannot be read if the credentials may
    /// not list them.
    pub(super) fn report_place(&self) {
        let report = self.state.place_report();
        let problem = report.problem.or_else(|| {
            self.property_forbidden.then(|| {
                "the credentials may not list ClusterProperties (about.k8s.io): grant list and watch on clusterproperties".to_owned()
            })
        });
        self.board.update(&self.run.name, |r| {
            r.property_place = report.place;
            r.place_problem = problem;
        });
    }
}
