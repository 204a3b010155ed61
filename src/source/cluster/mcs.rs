//! The MCS watches of one cluster task (`--mcs`, issue 18): finding which
//! versions of ServiceExport, ServiceImport and ClusterProperty the
//! cluster serves (v1beta1 preferred), starting those watches, and the
//! every-Service watch once the exports have listed.
//!
//! Owns the rule that a cluster serving no ServiceExport API is simply not
//! an MCS member: said once in the log and in `/debug/clusters`, never an
//! error, and its state is handed an empty list for every watch it cannot
//! start, so its sync waits for none of them. It must not interpret
//! objects (`source::state` does).

use std::time::Duration;

use kube::api::ApiResource;
use kube::runtime::watcher::Event as WatchEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::{Msg, Runner};
use crate::k8s::client::BoundedClient;
use crate::k8s::discover::{self, DiscoverError};
use crate::k8s::watch::{MAX_BACKOFF, PAGE, backoff, config};
use crate::source::state::Watch;
use crate::source::status::McsStatus;
use crate::vocab::mcs::{
    ABOUT_GROUP, ABOUT_VERSIONS, CLUSTER_ID_PROPERTY, MCS_GROUP, MCS_VERSIONS,
};

/// The MCS and About resources a cluster serves.
#[derive(Debug, Clone, Default)]
pub(super) struct McsApis {
    /// `serviceexports.multicluster.x-k8s.io`.
    pub(super) export: Option<ApiResource>,
    /// `serviceimports.multicluster.x-k8s.io`.
    pub(super) import: Option<ApiResource>,
    /// `clusterproperties.about.k8s.io`.
    pub(super) property: Option<ApiResource>,
}

/// Asks the cluster which MCS and About resources it serves.
async fn discover_apis(client: &kube::Client) -> Result<McsApis, DiscoverError> {
    let mcs = discover::group(client, MCS_GROUP).await?;
    let about = discover::group(client, ABOUT_GROUP).await?;
    let find = |g: &Option<kube::discovery::ApiGroup>, versions: &[&str], kind| {
        g.as_ref()
            .and_then(|g| discover::resource(g, versions, kind))
    };
    Ok(McsApis {
        export: find(&mcs, &MCS_VERSIONS, "ServiceExport"),
        import: find(&mcs, &MCS_VERSIONS, "ServiceImport"),
        property: find(&about, &ABOUT_VERSIONS, "ClusterProperty"),
    })
}

/// Discovers the cluster's MCS APIs, retrying until it can ask, and sends
/// them to the task.
async fn discover_task(client: BoundedClient, tx: mpsc::Sender<Msg>, stop: CancellationToken) {
    let mut delays = backoff();
    loop {
        let found = tokio::select! {
            f = discover_apis(&client.client) => f,
            () = stop.cancelled() => return,
        };
        match found {
            Ok(apis) => {
                let _ = tx.send(Msg::McsApis(Box::new(apis))).await;
                return;
            }
            Err(e) => {
                // The watches report a cluster that does not answer; this
                // only retries.
                debug!(error = %e, "cannot discover the MCS API; retrying");
                let delay: Duration = delays.next().unwrap_or(MAX_BACKOFF);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
            }
        }
    }
}

fn api_name(ar: Option<&ApiResource>) -> Option<String> {
    ar.map(|r| format!("{}.{}", r.plural, r.api_version))
}

impl Runner {
    /// `--mcs`: the state waits for the MCS watches, which start once
    /// discovery says which versions the cluster serves.
    pub(super) fn start_mcs(&mut self) {
        let Some(all) = self.run.all_services() else {
            return;
        };
        self.state.set_mcs(all);
        self.board.update(&self.run.name, |r| {
            r.mcs = Some(McsStatus::default());
        });
        if let Some(w) = &self.watches {
            tokio::spawn(discover_task(
                w.client.clone(),
                self.queue.clone(),
                self.stop.clone(),
            ));
        }
    }

    /// Discovery answered: the watches the cluster serves start, the others
    /// are an empty list.
    pub(super) fn mcs_apis(&mut self, apis: McsApis) {
        let name = self.run.name.clone();
        match &apis.export {
            Some(ar) => info!(cluster = %name, api = %ar.api_version, "watching ServiceExports"),
            None => info!(
                cluster = %name,
                "the cluster serves no ServiceExport API ({MCS_GROUP}): not an MCS member"
            ),
        }
        if apis.property.is_none() {
            info!(cluster = %name, "the cluster serves no ClusterProperty API ({ABOUT_GROUP}): its name is its cluster id");
        }
        self.board.update(&name, |r| {
            let m = r.mcs.get_or_insert_with(McsStatus::default);
            m.discovered = true;
            m.export_api = api_name(apis.export.as_ref());
            m.import_api = api_name(apis.import.as_ref());
            m.property_api = api_name(apis.property.as_ref());
        });
        let local = self.run.local;
        let mut empty = Vec::new();
        if let Some(w) = self.watches.as_mut() {
            match &apis.export {
                Some(ar) => w.dynamic(Watch::Exports, ar, config(PAGE)),
                None => empty.push(Watch::Exports),
            }
            match &apis.property {
                Some(ar) => w.dynamic(
                    Watch::ClusterId,
                    ar,
                    config(PAGE).fields(&format!("metadata.name={CLUSTER_ID_PROPERTY}")),
                ),
                None => empty.push(Watch::ClusterId),
            }
            match (&apis.import, local) {
                (Some(ar), true) => w.dynamic(Watch::Imports, ar, config(PAGE)),
                (None, true) => empty.push(Watch::Imports),
                (_, false) => {}
            }
        }
        if apis.export.is_none()
            && let Some(all) = self.run.all_services()
        {
            // No export can make an unlabelled Service a member.
            self.all_services_started = true;
            empty.push(Watch::Services(all));
        }
        for w in empty {
            let mut out = self.state.watched(w, WatchEvent::Init);
            self.state.reset_done(w, &mut out);
            self.took(out);
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
}
