//! A port of kubernetes-sigs/mcs-api's conformance suite (`conformance/`,
//! v1beta1: 27 specs, 14 labelled Required) onto kubesim and our own
//! controller (issue 29, item 3). Each spec the port can run is one test
//! named after the spec's text, which its `///` doc quotes exactly (the
//! DNS specs' with the suite's default `--dns-domain`, `clusterset.local`).
//!
//! **The clusters.** The suite's `clients[0]` is kubesim cluster `east`,
//! `clients[1]` is `west`. Each runs our server in this process with
//! `--mcs` and the mirror controller (its own Lease), linked to the other
//! cluster through a clusters file: each cluster's controller writes the
//! ServiceImports, derived Services, MCS EndpointSlices and ServiceExport
//! conditions into its own cluster, as an MCS implementation does in every
//! member cluster.
//!
//! **The suite's driver, kept.** Each test has its own kubesim, so its
//! namespace is a fixed name (the suite's `mcs-conformance-<random>`). In
//! it, in both clusters, the suite's `hello` objects (`k8s_objects.go`):
//! the Service (ports `tcp/42` TCP and `udp/42` UDP, `sessionAffinity:
//! ClientIP` with a 10 s timeout, `ipFamilyPolicy: PreferDualStack`, its
//! own dummy labels and annotations) deployed in `east`, and, unless the
//! spec says otherwise, its ServiceExport (with its own dummy labels and
//! annotations) created there. The two-cluster driver exports in `east`,
//! awaits the ServiceImport there, sleeps 1.1 s, then deploys and exports
//! the second `hello` in `west`. The suite's timings are kept: 20 s for an
//! object or a condition to appear, polled every 100 ms; 5 s of
//! "consistently"; 20 s probed every second for a DNS answer; 60 s for an
//! EndpointSlice (its `awaitMCSEndpointSlice` and `awaitK8sEndpoints`).
//! Every other wait is one of these bounded polls; everything listens and
//! dials on loopback.
//!
//! **What stands in for what kubesim lacks.**
//! - The request pod's `nslookup -type=T <name>.` (and the `nc` of the one
//!   Connectivity spec ported) is a DNS query to the querying cluster's own
//!   server: no EDNS, over UDP, again over TCP when truncated, every record
//!   of the Answer section counted.
//! - The pods of the `hello` Deployment (and of the StatefulSet of the
//!   per-pod spec) are EndpointSlices created the way the endpointslice
//!   controller does: labelled `kubernetes.io/service-name: hello` and
//!   `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`,
//!   one per address family in the Service's `ipFamilies` as the API
//!   returned them, the Service's ports by target port, each pod ready and
//!   serving (with its hostname for a StatefulSet pod), none for an
//!   ExternalName Service.
//!
//! **Not ported.** Four Connectivity specs need a datapath (a pod dialling
//! the clusterset IP and the packets reaching a pod): "Connectivity to an
//! exported ClusterIP service should be accessible through DNS", "…existing
//! in two clusters but exported from one should only access the exporting
//! cluster", "…with same port name but different port numbers on each
//! cluster should only route traffic to the cluster that exposes the port"
//! and "…with different port name on each cluster should route traffic to
//! each port only to the cluster that exposes it". "DNS lookups of the
//! <service>.<ns>.svc.cluster.local domain for a ClusterIP service should
//! only resolve local services" needs the cluster's own DNS, which we are
//! not (`mcs_conformance.rs` shows that we refuse `cluster.local`).
//!
//! The expectations are the suite's, never relaxed: a test that fails here
//! names something our controller (or kubesim) does not yet do as the
//! suite asks. Failure messages start with `non-conformant:` where the
//! suite reports non-conformance.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};

use crate::kubesim_api::{client, sim};
use crate::live::clusters_file;
use crate::mcs_conformance::{EndpointInfo, addresses, endpoint_infos, record_type, srv_records};
use crate::support::strings;
use crate::support::{
    Links, Live, MirrorSetup, Options, Proto, TestServer, ask, create_object, q, start_live,
};

/// `helloServiceName`.
const HELLO: &str = "hello";
/// The MCS API version the suite uses.
const MCS: &str = "multicluster.x-k8s.io/v1beta1";
/// The suite's default `--dns-domain`.
const DNS_DOMAIN: &str = "clusterset.local";
/// The suite's `clients`, in order.
const CLUSTERS: [&str; 2] = ["east", "west"];
/// `clients[0]`: where `hello` is deployed and exported.
const EAST: usize = 0;
/// `clients[1]`: the second cluster of the two-cluster specs.
const WEST: usize = 1;

/// `Eventually(...).Within(20 * time.Second)`.
const WITHIN: Duration = Duration::from_secs(20);
/// `.WithPolling(100 * time.Millisecond)`.
const POLLING: Duration = Duration::from_millis(100);
/// `Consistently(..., 5*time.Second, ...)`.
const CONSISTENTLY: Duration = Duration::from_secs(5);
/// `awaitMCSEndpointSlice` and `awaitK8sEndpoints`: `Within(60 * time.Second)`.
const ENDPOINTS_WITHIN: Duration = Duration::from_secs(60);
/// `awaitCmdOutputMatches` and `expectSRVRecords`: a command every second.
const COMMAND_PROBE: Duration = Duration::from_secs(1);
/// The two-cluster driver's delay before the second cluster exports.
const SECOND_EXPORTER_DELAY: Duration = Duration::from_millis(1100);
/// The Connectivity spec's tries per family and cluster.
const TRIES: usize = 20;
/// The replicas of the suite's headless DNS specs.
const REPLICAS: usize = 2;

/// `K8sEndpointSliceManagedByName`.
const K8S_ENDPOINT_SLICE_MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// `discoveryv1.LabelManagedBy`.
const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// `discoveryv1.LabelServiceName`.
const LABEL_K8S_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// `v1beta1.LabelServiceName`.
const LABEL_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// `v1beta1.LabelSourceCluster`.
const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";

// ---------------------------------------------------------------------------
// The suite's objects (k8s_objects.go)
// ---------------------------------------------------------------------------

/// `newHelloService()`.
fn hello_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": HELLO,
                     "annotations": {"dummy-svc": "dummy"}, "labels": {"dummy-svc": "dummy"}},
        "spec": {
            "selector": {"app": HELLO},
            "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"},
                      {"name": "udp", "port": 42, "protocol": "UDP"}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
            "ipFamilyPolicy": "PreferDualStack"
        }
    })
}

/// `newHelloServiceExport()`.
fn hello_service_export() -> Value {
    json!({
        "apiVersion": MCS, "kind": "ServiceExport",
        "metadata": {"name": HELLO,
                     "annotations": {"dummy-svcexport": "dummy"},
                     "labels": {"dummy-svcexport": "dummy"}}
    })
}

/// The pods backing `hello` in one cluster.
#[derive(Debug, Clone, Copy)]
enum Pods {
    /// `newHelloDeployment()` with this many replicas: no hostnames.
    Deployment(usize),
    /// `newStatefulSet(n)`: pods `hello-ss-<i>`, each with its hostname.
    StatefulSet(usize),
}

/// Who exports `hello` once it is deployed in `east`.
enum Exports {
    /// `autoExportService`: `east` exports it.
    Auto,
    /// `autoExportService = false`: nobody.
    Nobody,
    /// `newTwoClusterTestDriver`: `east`, then (after its import shows up
    /// and 1.1 s) `west`, with its own `helloService2` and
    /// `helloServiceExport2`.
    TwoClusters {
        /// `helloService2`.
        service: Value,
        /// `helloServiceExport2`.
        export: Value,
    },
}

/// What a spec's `BeforeEach` blocks set up.
struct Setup {
    ns: &'static str,
    /// `t.helloService` before it is deployed.
    service: Value,
    /// `t.helloServiceExport`.
    export: Value,
    /// `t.helloDeployment` (`None`: set to nil).
    deployment: Option<Pods>,
    /// A StatefulSet created in `east` after the export.
    stateful_set: Option<Pods>,
    exports: Exports,
}

impl Setup {
    /// `newTestDriver()`'s defaults in namespace `ns`.
    fn new(ns: &'static str) -> Self {
        Self {
            ns,
            service: hello_service(),
            export: hello_service_export(),
            deployment: Some(Pods::Deployment(1)),
            stateful_set: None,
            exports: Exports::Auto,
        }
    }

    /// `newTwoClusterTestDriver(newTestDriver())`.
    fn two_clusters(ns: &'static str) -> Self {
        Self {
            exports: Exports::TwoClusters {
                service: hello_service(),
                export: hello_service_export(),
            },
            ..Self::new(ns)
        }
    }

    /// Changes `t.helloService`.
    fn service(mut self, change: impl FnOnce(&mut Value)) -> Self {
        change(&mut self.service);
        self
    }

    /// Changes `t.helloServiceExport`.
    fn export(mut self, change: impl FnOnce(&mut Value)) -> Self {
        change(&mut self.export);
        self
    }

    /// Changes `helloService2` and `helloServiceExport2` (two clusters only).
    fn second(mut self, change: impl FnOnce(&mut Value, &mut Value)) -> Self {
        match &mut self.exports {
            Exports::TwoClusters { service, export } => change(service, export),
            _ => panic!("the second cluster's objects belong to the two-cluster driver"),
        }
        self
    }
}

/// Sets `ServiceExport.Spec.ExportedLabels` and `ExportedAnnotations`.
fn exported(export: &mut Value, label: &str, annotation: &str) {
    export["spec"] = json!({
        "exportedLabels": {label: "true"},
        "exportedAnnotations": {annotation: "true"},
    });
}

// ---------------------------------------------------------------------------
// The driver (conformance_suite.go)
// ---------------------------------------------------------------------------

/// One cluster: the suite's `clusterClients`, and our server in it.
struct Cluster {
    name: &'static str,
    client: kube::Client,
    server: TestServer,
}

/// The suite's `testDriver` once its `JustBeforeEach` blocks ran.
struct Driver {
    ns: &'static str,
    clusters: Vec<Cluster>,
    /// `t.helloService`: as the API returned it in `east`.
    hello: Value,
    /// `t.helloServiceExport`, as created.
    export: Value,
    /// `west`'s `hello` (as the API returned it) and its export, in the
    /// two-cluster specs.
    second: Option<(Value, Value)>,
    _sim: kubesim::Sim,
    _dir: tempfile::TempDir,
}

/// Our server in cluster `name`, with `--mcs` and the mirror controller,
/// linked to `other`.
async fn start_cluster(sim: &kubesim::Sim, dir: &Path, name: &'static str, other: &str) -> Cluster {
    let own = sim.cluster(name).expect("cluster");
    let linked = sim.cluster(other).expect("cluster");
    let files = dir.join(name);
    std::fs::create_dir_all(&files).expect("clusters file directory");
    let mut live = Live::new(
        own.kubeconfig_path(),
        Links::File(clusters_file(&files, &[linked])),
    );
    live.mirror = Some(MirrorSetup::new(name));
    let options = Options {
        local: Some(name),
        mcs: true,
        ..Options::default()
    };
    Cluster {
        name,
        client: client(own).await,
        server: start_live(options, live).await,
    }
}

/// The API path of a namespaced object.
fn path(api_version: &str, ns: &str, plural: &str, name: Option<&str>) -> String {
    let prefix = if api_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{api_version}")
    };
    match name {
        Some(name) => format!("{prefix}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{prefix}/namespaces/{ns}/{plural}"),
    }
}

/// GET `path`: the object, `None` on 404 NotFound, an error otherwise.
async fn get(c: &kube::Client, path: &str) -> Result<Option<Value>, String> {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    match c.request_text(req).await {
        Ok(body) => serde_json::from_str(&body)
            .map(Some)
            .map_err(|e| format!("GET {path}: {e}")),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(format!("GET {path}: {e}")),
    }
}

/// `msg` as the suite's `reportNonConformant(msg)` reports it.
fn non_conformant(msg: &str) -> String {
    if msg.is_empty() {
        "non-conformant".to_owned()
    } else {
        format!("non-conformant: {msg}")
    }
}

/// Polls `probe` every `every` until it succeeds, for at most `within`:
/// Gomega's `Eventually`. The error is the last probe's.
async fn eventually<T>(
    within: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> Result<T, String> {
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() >= within => {
                return Err(format!("not within {within:?}; last: {e}"));
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// Probes every `every` for `over`, each probe having to succeed: Gomega's
/// `Consistently`.
async fn consistently(
    over: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<(), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        probe()
            .await
            .map_err(|e| format!("after {:?}: {e}", start.elapsed()))?;
        if start.elapsed() >= over {
            return Ok(());
        }
        tokio::time::sleep(every).await;
    }
}

/// A ServiceImport verification that only needs it to exist.
fn exists(_: &Value) -> Result<(), String> {
    Ok(())
}

impl Driver {
    /// `BeforeSuite`, then the `JustBeforeEach` blocks for `setup`.
    async fn start(setup: Setup) -> Self {
        let (sim, dir) = sim(&CLUSTERS, |_| {}).await;
        let mut clusters = Vec::new();
        for (i, name) in CLUSTERS.into_iter().enumerate() {
            clusters.push(start_cluster(&sim, dir.path(), name, CLUSTERS[1 - i]).await);
        }
        let mut t = Self {
            ns: setup.ns,
            clusters,
            hello: Value::Null,
            export: setup.export.clone(),
            second: None,
            _sim: sim,
            _dir: dir,
        };
        t.just_before_each(setup).await;
        t
    }

    async fn just_before_each(&mut self, setup: Setup) {
        for c in &self.clusters {
            let ns =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}});
            create_object(&c.client, ns).await;
        }
        self.hello = self
            .deploy_hello_service(EAST, setup.service, setup.deployment)
            .await;
        match setup.exports {
            Exports::Auto => self.create_service_export(EAST, &setup.export).await,
            Exports::Nobody => {}
            Exports::TwoClusters { service, export } => {
                self.create_service_export(EAST, &setup.export).await;
                self.await_service_import(EAST, false, exists).await;
                tokio::time::sleep(SECOND_EXPORTER_DELAY).await;
                let deployed = self
                    .deploy_hello_service(WEST, service, setup.deployment)
                    .await;
                self.create_service_export(WEST, &export).await;
                self.second = Some((deployed, export));
            }
        }
        if let Some(pods) = setup.stateful_set {
            self.start_pods(EAST, &self.hello, pods).await;
        }
    }

    fn client(&self, i: usize) -> &kube::Client {
        &self.clusters[i].client
    }

    /// `deployHelloService`: the Service as the API returned it, and its
    /// pods as EndpointSlices.
    async fn deploy_hello_service(
        &self,
        i: usize,
        mut service: Value,
        pods: Option<Pods>,
    ) -> Value {
        service["metadata"]["namespace"] = json!(self.ns);
        create_object(self.client(i), service).await;
        let deployed = get(
            self.client(i),
            &path("v1", self.ns, "services", Some(HELLO)),
        )
        .await
        .expect("reading the deployed Service")
        .expect("the deployed Service");
        if let Some(pods) = pods {
            self.start_pods(i, &deployed, pods).await;
        }
        deployed
    }

    /// What the endpointslice controller writes for `pods` behind
    /// `service` in cluster `i`: one slice per family of the Service's
    /// `ipFamilies`; none for an ExternalName Service.
    async fn start_pods(&self, i: usize, service: &Value, pods: Pods) {
        if service["spec"]["type"] == "ExternalName" {
            return;
        }
        let ports: Vec<Value> = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let target = p["targetPort"]
                    .as_u64()
                    .map_or(p["port"].clone(), Value::from);
                let mut port =
                    json!({"name": p["name"], "port": target, "protocol": p["protocol"]});
                if p.get("appProtocol").is_some() {
                    port["appProtocol"] = p["appProtocol"].clone();
                }
                port
            })
            .collect();
        for family in strings(&service["spec"]["ipFamilies"]) {
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{HELLO}-{}", family.to_lowercase()),
                             "namespace": self.ns,
                             "labels": {LABEL_K8S_SERVICE_NAME: HELLO,
                                        LABEL_MANAGED_BY: K8S_ENDPOINT_SLICE_MANAGED_BY}},
                "addressType": family,
                "ports": ports,
                "endpoints": endpoints(self.ns, i, &family, pods),
            });
            create_object(self.client(i), slice).await;
        }
    }

    /// `createServiceExport`.
    async fn create_service_export(&self, i: usize, export: &Value) {
        let mut export = export.clone();
        export["metadata"]["namespace"] = json!(self.ns);
        create_object(self.client(i), export).await;
    }

    /// `deleteServiceExport`.
    async fn delete_service_export(&self, i: usize) {
        let path = path(MCS, self.ns, "serviceexports", Some(HELLO));
        let req = http::Request::delete(path.as_str())
            .body(Vec::new())
            .expect("request");
        if let Err(e) = self.client(i).request_text(req).await {
            panic!("unexporting on cluster {:?}: {e}", self.clusters[i].name);
        }
    }

    /// `getServiceImport`: `hello`'s ServiceImport in cluster `i`, if any.
    async fn get_service_import(&self, i: usize) -> Result<Option<Value>, String> {
        get(
            self.client(i),
            &path(MCS, self.ns, "serviceimports", Some(HELLO)),
        )
        .await
    }
}

/// The endpoints of `pods` in cluster `i` for `family`, ready and serving.
fn endpoints(ns: &str, i: usize, family: &str, pods: Pods) -> Vec<Value> {
    let (count, stateful) = match pods {
        Pods::Deployment(n) => (n, false),
        Pods::StatefulSet(n) => (n, true),
    };
    (0..count)
        .map(|pod| {
            let name = if stateful {
                format!("{HELLO}-ss-{pod}")
            } else {
                format!("{HELLO}-7d4f9b8c6-{pod}")
            };
            let mut ep = json!({
                "addresses": [pod_address(i, pod, family)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": ns, "name": name},
            });
            if stateful {
                ep["hostname"] = json!(name);
            }
            ep
        })
        .collect()
}

/// Pod `pod`'s address of `family` in cluster `i`: `10.244.<i+1>.<10+pod>`
/// or `fd00:10:244:<i+1>::<10+pod>`.
fn pod_address(i: usize, pod: usize, family: &str) -> String {
    match family {
        "IPv4" => format!("10.244.{}.{}", i + 1, 10 + pod),
        "IPv6" => format!("fd00:10:244:{}::{:x}", i + 1, 10 + pod),
        other => panic!("unknown IP family {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The suite's await/ensure helpers
// ---------------------------------------------------------------------------

impl Driver {
    /// `awaitServiceImport`: `hello`'s ServiceImport in cluster `i` once it
    /// exists and `verify` passes, within 20 s.
    async fn await_service_import(
        &self,
        i: usize,
        report_non_conformance_on_missing: bool,
        verify: impl Fn(&Value) -> Result<(), String>,
    ) -> Value {
        let name = self.clusters[i].name;
        let mut missing = format!("ServiceImport was not found on cluster {name:?}");
        if report_non_conformance_on_missing {
            missing = non_conformant(&missing);
        }
        let found = eventually(WITHIN, POLLING, async || {
            let si = self.get_service_import(i).await?;
            let si = si.ok_or_else(|| missing.clone())?;
            verify(&si)?;
            Ok(si)
        })
        .await;
        found.unwrap_or_else(|e| {
            panic!("retrieving ServiceImport {HELLO:?} on cluster {name:?}: {e}")
        })
    }

    /// `awaitServiceImportIPFamilies`.
    async fn await_service_import_ip_families(&self, i: usize) -> Vec<String> {
        let name = self.clusters[i].name;
        let si = self
            .await_service_import(i, false, |si| {
                if strings(&si["spec"]["ipFamilies"]).is_empty() {
                    Err(format!(
                        "ServiceImport on cluster {name:?} does not contain an IP family"
                    ))
                } else {
                    Ok(())
                }
            })
            .await;
        strings(&si["spec"]["ipFamilies"])
    }

    /// `awaitNoServiceImport`.
    async fn await_no_service_import(&self, i: usize, msg: &str) {
        let gone = eventually(WITHIN, POLLING, async || {
            match self.get_service_import(i).await? {
                None => Ok(()),
                Some(_) => Err("the ServiceImport still exists".to_owned()),
            }
        })
        .await;
        if let Err(e) = gone {
            panic!("{}: {e}", non_conformant(msg));
        }
    }

    /// `ensureServiceImport`: present throughout 5 s.
    async fn ensure_service_import(&self, i: usize, msg: &str) {
        let kept = consistently(CONSISTENTLY, POLLING, async || {
            match self.get_service_import(i).await? {
                Some(_) => Ok(()),
                None => Err("ServiceImport not found".to_owned()),
            }
        })
        .await;
        if let Err(e) = kept {
            panic!("{}: {e}", non_conformant(msg));
        }
    }

    /// `ensureNoServiceImport`: absent throughout 5 s.
    async fn ensure_no_service_import(&self, i: usize, msg: &str) {
        let absent = consistently(CONSISTENTLY, POLLING, async || {
            match self.get_service_import(i).await? {
                None => Ok(()),
                Some(si) => Err(format!("found {si}")),
            }
        })
        .await;
        if let Err(e) = absent {
            panic!("{}: {e}", non_conformant(msg));
        }
    }

    /// `awaitServiceExportCondition`: `hello`'s ServiceExport in cluster
    /// `i` has condition `kind` with status `want` within 20 s.
    async fn await_service_export_condition(&self, i: usize, kind: &str, want: &str) {
        let path = path(MCS, self.ns, "serviceexports", Some(HELLO));
        let set = eventually(WITHIN, POLLING, async || {
            let se = get(self.client(i), &path).await?;
            let se = se.ok_or("the ServiceExport is gone")?;
            let conditions = &se["status"]["conditions"];
            let found = conditions
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == kind);
            match found {
                Some(c) if c["status"] == want => Ok(()),
                _ => Err(format!("conditions: {conditions}")),
            }
        })
        .await;
        if let Err(e) = set {
            let msg = format!("The {kind} condition was not set to {want}");
            panic!(
                "{} on cluster {:?}: {e}",
                non_conformant(&msg),
                self.clusters[i].name
            );
        }
    }

    /// The EndpointSlices of the test's namespace in cluster `i`.
    async fn endpoint_slices(&self, i: usize) -> Result<Vec<Value>, String> {
        let list = get(
            self.client(i),
            &path("discovery.k8s.io/v1", self.ns, "endpointslices", None),
        )
        .await?;
        let list = list.ok_or("no EndpointSlice list")?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// `awaitMCSEndpointSlice`: within 60 s, the (last listed) slice of
    /// cluster `i` with both MCS labels, of `address_type`, with endpoints,
    /// `verify` passing on each such slice; `desc` when there is none.
    async fn await_mcs_endpoint_slice(
        &self,
        i: usize,
        address_type: &str,
        verify: impl Fn(&Value) -> Result<(), String>,
        desc: &str,
    ) -> Value {
        let found = eventually(ENDPOINTS_WITHIN, POLLING, async || {
            let mut last = None;
            for eps in self.endpoint_slices(i).await? {
                let labels = &eps["metadata"]["labels"];
                let mcs = labels.get(LABEL_SERVICE_NAME).is_some()
                    && labels.get(LABEL_SOURCE_CLUSTER).is_some();
                let has_endpoints = eps["endpoints"].as_array().is_some_and(|e| !e.is_empty());
                if mcs && eps["addressType"] == address_type && has_endpoints {
                    verify(&eps)?;
                    last = Some(eps);
                }
            }
            last.ok_or_else(|| desc.to_owned())
        })
        .await;
        found.unwrap_or_else(|e| {
            panic!(
                "{address_type} MCS EndpointSlice on cluster {:?}: {e}",
                self.clusters[i].name
            )
        })
    }
}

impl Driver {
    /// `awaitK8sEndpoints`: the ready endpoints of `hello`'s own slices
    /// (`kubernetes.io/service-name: hello`) of `address_type` in cluster
    /// `i`, once there are as many as the Deployment's replicas.
    async fn await_k8s_endpoints(
        &self,
        i: usize,
        address_type: &str,
        replicas: usize,
    ) -> Vec<EndpointInfo> {
        let found = eventually(ENDPOINTS_WITHIN, POLLING, async || {
            let mut endpoints = Vec::new();
            for eps in self.endpoint_slices(i).await? {
                if eps["metadata"]["labels"][LABEL_K8S_SERVICE_NAME] == HELLO
                    && eps["addressType"] == address_type
                {
                    endpoints.extend(endpoint_infos(&eps)?);
                }
            }
            if endpoints.len() == replicas {
                Ok(endpoints)
            } else {
                Err(format!(
                    "the K8s EndpointSlice does not contain the expected number of ready endpoints {replicas}: {endpoints:?}"
                ))
            }
        })
        .await;
        found.unwrap_or_else(|e| {
            panic!(
                "{address_type} K8s endpoints on cluster {:?}: {e}",
                self.clusters[i].name
            )
        })
    }
}

// ---------------------------------------------------------------------------
// The request pod: nslookup, as a query to the cluster's server
// ---------------------------------------------------------------------------

/// `<service>.<ns>.svc.<dnsDomain>`, without the trailing dot.
fn service_fqdn(ns: &str) -> String {
    format!("{HELLO}.{ns}.svc.{DNS_DOMAIN}")
}

/// `ipFamilyOf`: `None` for what is no IP.
fn family_of(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

/// What `nslookup -type=<rtype> <name>.` asks of the resolver at `dns`:
/// no EDNS, UDP, again over TCP when truncated.
async fn nslookup(dns: SocketAddr, name: &str, rtype: RecordType) -> Message {
    let mut query = q(&format!("{name}."), rtype);
    query.edns = None;
    let (msg, _) = ask(dns, Proto::Udp, &query).await;
    if msg.metadata.truncation {
        return ask(dns, Proto::Tcp, &query).await.0;
    }
    msg
}

/// `HaveAddresses(want)`.
fn have_addresses(want: &[String]) -> impl Fn(&Message) -> Result<(), String> {
    let mut want: Vec<IpAddr> = want.iter().map(|a| a.parse().expect("an IP")).collect();
    want.sort();
    move |msg| {
        let got = addresses(msg);
        if got == want {
            Ok(())
        } else {
            let rcode = msg.metadata.response_code;
            Err(format!(
                "{rcode:?} with addresses {got:?}, expected {want:?}"
            ))
        }
    }
}

impl Driver {
    /// `nslookup` on cluster `i`'s request pod.
    async fn nslookup(&self, i: usize, name: &str, rtype: RecordType) -> Message {
        nslookup(self.clusters[i].server.dns, name, rtype).await
    }

    /// `awaitCmdOutputMatches` with one pass: within 20 s, probed every
    /// second, `nslookup -type=<rtype> <name>.` on cluster `i` matches.
    async fn await_lookup(
        &self,
        i: usize,
        name: &str,
        rtype: RecordType,
        matches: impl Fn(&Message) -> Result<(), String>,
    ) {
        let matched = eventually(WITHIN, COMMAND_PROBE, async || {
            matches(&self.nslookup(i, name, rtype).await)
        })
        .await;
        if let Err(e) = matched {
            let cluster = self.clusters[i].name;
            panic!(
                "{}: nslookup -type={rtype} {name}. on cluster {cluster:?}: {e}",
                non_conformant("")
            );
        }
    }

    /// `expectSRVRecords`: within 20 s, probed every second, exactly
    /// `count` SRV records for `name` on cluster `i`.
    async fn expect_srv_records(&self, i: usize, name: &str, count: usize) -> Vec<(u16, String)> {
        let found = eventually(WITHIN, COMMAND_PROBE, async || {
            let recs = srv_records(&self.nslookup(i, name, RecordType::SRV).await);
            if recs.len() == count {
                Ok(recs)
            } else {
                Err(format!(
                    "Expected {count} SRV records but got {}: {recs:?}",
                    recs.len()
                ))
            }
        })
        .await;
        found.unwrap_or_else(|e| {
            panic!(
                "{}: nslookup -type=SRV {name}. on cluster {:?}: {e}",
                non_conformant(""),
                self.clusters[i].name
            )
        })
    }
}

// ---------------------------------------------------------------------------
// Expectations shared by several specs
// ---------------------------------------------------------------------------

/// `Expect(got).To(Equal(want), reportNonConformant(msg))` on JSON.
fn equal(what: &str, got: &Value, want: &Value, msg: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{}: {what} is {got}, expected {want}",
            non_conformant(msg)
        ))
    }
}

/// `toMCSPorts` / `sortMCSPorts`: name, protocol, port and appProtocol of
/// each port, sorted by lower-cased name.
fn mcs_ports<'v>(ports: impl IntoIterator<Item = &'v Value>) -> Value {
    let mut out: Vec<Value> = ports
        .into_iter()
        .map(|p| {
            json!({"name": p["name"], "protocol": p["protocol"], "port": p["port"],
                   "appProtocol": p["appProtocol"]})
        })
        .collect();
    out.sort_by_key(|p| p["name"].as_str().unwrap_or_default().to_lowercase());
    Value::Array(out)
}

/// `assertHasKeyValues` (`has`) or `assertNotHasKeyValues` (`!has`): each
/// key/value of `expected` is (not) in `actual`.
fn key_values(what: &str, actual: &Value, expected: &Value, has: bool) -> Result<(), String> {
    for (k, v) in expected.as_object().into_iter().flatten() {
        if (actual.get(k) == Some(v)) != has {
            let verb = if has { "lacks" } else { "has" };
            return Err(non_conformant(&format!(
                "the ServiceImport's {what} {verb} {k}={v}: {actual}"
            )));
        }
    }
    Ok(())
}

impl Driver {
    /// Within 20 s, `east`'s ServiceImport has each `spec` field of `fields`
    /// equal to the exported Service's (as the API returned it), with the
    /// field's non-conformance message.
    async fn await_import_spec_matches(&self, fields: &[(&str, &str)]) {
        for (field, _) in fields {
            // Else the spec would pass on a field kubesim dropped.
            assert!(
                !self.hello["spec"][field].is_null(),
                "the deployed Service keeps {field}: {}",
                self.hello
            );
        }
        self.await_service_import(EAST, false, |si| {
            fields.iter().try_for_each(|(field, msg)| {
                equal(
                    &format!("spec.{field}"),
                    &si["spec"][field],
                    &self.hello["spec"][field],
                    msg,
                )
            })
        })
        .await;
    }

    /// Within 20 s, `east`'s ServiceImport's ports, sorted, are `want`.
    async fn await_import_ports(&self, want: Value, msg: &str) {
        self.await_service_import(EAST, false, |si| {
            equal(
                "spec.ports (sorted)",
                &mcs_ports(si["spec"]["ports"].as_array().into_iter().flatten()),
                &want,
                msg,
            )
        })
        .await;
    }

    /// The exported Service's ports (`t.helloService.Spec.Ports`).
    fn hello_ports(&self) -> Vec<&Value> {
        self.hello["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .collect()
    }

    /// `west`'s `hello` as the API returned it (two-cluster specs).
    fn hello2(&self) -> &Value {
        &self.second.as_ref().expect("the two-cluster driver").0
    }

    /// Conflict=True on the ServiceExports of both clusters.
    async fn await_conflict_on_each_service_export(&self) {
        for i in [EAST, WEST] {
            self.await_service_export_condition(i, "Conflict", "True")
                .await;
        }
    }

    /// In each cluster, a ServiceImport (reported when missing) of type
    /// `kind`.
    async fn await_import_of_type_in_each_cluster(&self, kind: &str) {
        for (i, c) in self.clusters.iter().enumerate() {
            let si = self.await_service_import(i, true, exists).await;
            let got = &si["spec"]["type"];
            let msg = format!("ServiceImport on cluster {:?} has type {got}", c.name);
            assert!(*got == kind, "{}", non_conformant(&msg));
        }
    }

    /// Unexports `hello` in `east`; within 20 s no ServiceImport is left in
    /// any cluster.
    async fn unexport_and_await_no_import_in_each_cluster(&self) {
        self.delete_service_export(EAST).await;
        for (i, c) in self.clusters.iter().enumerate() {
            let msg = format!(
                "the ServiceImport still exists on cluster {:?} after unexporting the service",
                c.name
            );
            self.await_no_service_import(i, &msg).await;
        }
    }

    /// Within 20 s, `east`'s ServiceImport carries `export`'s exported
    /// labels and annotations and none of `others`'s (objects whose
    /// `metadata` or ServiceExport `spec` must not be propagated).
    async fn await_import_labels(&self, export: &Value, others: &[(&str, &Value)]) {
        self.await_service_import(EAST, false, |si| {
            let meta = &si["metadata"];
            key_values(
                "annotations",
                &meta["annotations"],
                &export["spec"]["exportedAnnotations"],
                true,
            )?;
            key_values(
                "labels",
                &meta["labels"],
                &export["spec"]["exportedLabels"],
                true,
            )?;
            for (what, other) in others {
                key_values(
                    &format!("annotations ({what})"),
                    &meta["annotations"],
                    &other["annotations"],
                    false,
                )?;
                key_values(
                    &format!("labels ({what})"),
                    &meta["labels"],
                    &other["labels"],
                    false,
                )?;
            }
            Ok(())
        })
        .await;
    }
}

// ---------------------------------------------------------------------------
// service_import.go: Required
// ---------------------------------------------------------------------------

/// service_import.go, Required: "A ServiceImport should only exist as long
/// as there's at least one exporting cluster".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_import_should_only_exist_as_long_as_there_is_at_least_one_exporting_cluster() {
    let t = Driver::start(Setup::new("mcs-conformance-one-exporter")).await;
    t.await_service_import(EAST, false, exists).await;
    t.deploy_hello_service(WEST, hello_service(), Some(Pods::Deployment(1)))
        .await;
    t.create_service_export(WEST, &hello_service_export()).await;
    t.ensure_service_import(
        EAST,
        "the ServiceImport no longer exists after exporting on cluster \"west\"",
    )
    .await;
    t.delete_service_export(EAST).await;
    t.ensure_service_import(
        EAST,
        "the ServiceImport no longer exists after unexporting the service on cluster \"east\" while still exported on cluster \"west\"",
    )
    .await;
    t.delete_service_export(WEST).await;
    t.await_no_service_import(
        EAST,
        "the ServiceImport still exists after unexporting the service on all clusters",
    )
    .await;
}

/// service_import.go, Required: "Exporting a ClusterIP service should
/// create a ServiceImport of type ClusterSetIP in the service's namespace
/// in each cluster. Unexporting should delete the ServiceImport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporting_a_clusterip_service_should_create_a_clustersetip_service_import_in_each_cluster_and_unexporting_should_delete_it()
 {
    let t = Driver::start(Setup::new("mcs-conformance-clusterip")).await;
    t.await_service_export_condition(EAST, "Valid", "True")
        .await;
    t.await_import_of_type_in_each_cluster("ClusterSetIP").await;
    t.unexport_and_await_no_import_in_each_cluster().await;
}

/// service_import.go, Required: "The SessionAffinity for a ClusterSetIP
/// ServiceImport should match the exported service's SessionAffinity".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_affinity_for_a_clustersetip_service_import_should_match_the_exported_services()
{
    let t = Driver::start(Setup::new("mcs-conformance-session-affinity")).await;
    t.await_import_spec_matches(&[
        ("sessionAffinity", ""),
        (
            "sessionAffinityConfig",
            "The SessionAffinityConfig of the ServiceImport does not match the exported Service's SessionAffinityConfig",
        ),
    ])
    .await;
}

/// service_import.go, Required: "The InternalTrafficPolicy for a
/// ClusterSetIP ServiceImport should match the exported service's
/// InternalTrafficPolicy".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_traffic_policy_for_a_clustersetip_service_import_should_match_the_exported_services()
 {
    let setup = Setup::new("mcs-conformance-internal-traffic").service(|s| {
        s["spec"]["internalTrafficPolicy"] = json!("Cluster");
    });
    let t = Driver::start(setup).await;
    t.await_import_spec_matches(&[(
        "internalTrafficPolicy",
        "The InternalTrafficPolicy of the ServiceImport does not match the exported Service's InternalTrafficPolicy",
    )])
    .await;
}

/// service_import.go, Required: "The TrafficDistribution for a ClusterSetIP
/// ServiceImport should match the exported service's TrafficDistribution".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traffic_distribution_for_a_clustersetip_service_import_should_match_the_exported_services()
 {
    let setup = Setup::new("mcs-conformance-traffic-distribution").service(|s| {
        s["spec"]["trafficDistribution"] = json!("PreferClose");
    });
    let t = Driver::start(setup).await;
    t.await_import_spec_matches(&[(
        "trafficDistribution",
        "The TrafficDistribution of the ServiceImport does not match the exported Service's TrafficDistribution",
    )])
    .await;
}

/// service_import.go, Required: "An IP should be allocated for a
/// ClusterSetIP ServiceImport for each IP family".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_should_be_allocated_for_a_clustersetip_service_import_for_each_ip_family() {
    let t = Driver::start(Setup::new("mcs-conformance-ip-per-family")).await;
    let si = t
        .await_service_import(EAST, false, |si| {
            match strings(&si["spec"]["ips"]).is_empty() {
                true => Err(non_conformant("the ServiceImport has no IPs")),
                false => Ok(()),
            }
        })
        .await;
    let (ips, families) = (
        strings(&si["spec"]["ips"]),
        strings(&si["spec"]["ipFamilies"]),
    );
    assert_eq!(
        ips.len(),
        families.len(),
        "{}: ips {ips:?}, ipFamilies {families:?}",
        non_conformant(
            "The ServiceImport IPs field must have the same number of IPs as ServiceImport IPFamilies"
        )
    );
    for (k, (ip, family)) in ips.iter().zip(&families).enumerate() {
        let got = family_of(ip).unwrap_or_else(|| {
            panic!(
                "{}",
                non_conformant(&format!("The value {ip:?} is not a valid IP"))
            )
        });
        assert_eq!(
            got,
            family,
            "{}",
            non_conformant(&format!(
                "The IP family of ServiceImport.Spec.IPs[{k}] ({ip:?}) must match ServiceImport.Spec.IPFamilies[{k}] ({family:?})"
            ))
        );
    }
    // Beyond the suite: kubesim's clusters are dual-stack and the Service
    // asks for PreferDualStack, so the import has one IP of each family.
    assert_eq!(
        families,
        ["IPv4", "IPv6"],
        "a dual-stack clusterset IP for a dual-stack Service: ips {ips:?}"
    );
}

/// service_import.go, Required: "The ports for a ClusterSetIP ServiceImport
/// should match those of the exported service".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ports_for_a_clustersetip_service_import_should_match_those_of_the_exported_service() {
    let t = Driver::start(Setup::new("mcs-conformance-ports")).await;
    t.await_import_ports(mcs_ports(t.hello_ports()), "").await;
}

/// service_import.go, Required: "A ClusterIP service exported on two
/// clusters should expose the union of the constituent service ports and
/// raise a conflict".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterip_service_exported_on_two_clusters_should_expose_the_union_of_the_constituent_service_ports_and_raise_a_conflict()
 {
    let setup = Setup::two_clusters("mcs-conformance-port-union").second(|service, _| {
        let tcp = hello_service()["spec"]["ports"][0].clone();
        service["spec"]["ports"] = json!([tcp, {"name": "stcp", "port": 142, "protocol": "SCTP"}]);
    });
    let t = Driver::start(setup).await;
    t.await_conflict_on_each_service_export().await;
    let mut union = t.hello_ports();
    union.push(&t.hello2()["spec"]["ports"][1]);
    t.await_import_ports(mcs_ports(union), "").await;
}

/// service_import.go, Required: "A ClusterIP service exported on two
/// clusters with conflicting ports should apply the conflict resolution
/// policy and report a Conflict condition on each ServiceExport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterip_service_exported_on_two_clusters_with_conflicting_ports_should_apply_the_conflict_resolution_policy_and_report_a_conflict_condition_on_each_service_export()
 {
    let setup = Setup::two_clusters("mcs-conformance-port-conflict").second(|service, _| {
        service["spec"]["ports"] = json!([{"name": "tcp", "port": 43, "protocol": "TCP"}]);
    });
    let t = Driver::start(setup).await;
    t.await_conflict_on_each_service_export().await;
    t.await_import_ports(
        mcs_ports(t.hello_ports()),
        "The service ports were not resolved correctly",
    )
    .await;
}

/// Makes `hello` headless (`t.helloService.Spec.ClusterIP = corev1.ClusterIPNone`).
fn headless(service: &mut Value) {
    service["spec"]["clusterIP"] = json!("None");
}

/// service_import.go, Required: "Exporting a headless service should create
/// a ServiceImport of type Headless in the service's namespace in each
/// cluster. Unexporting should delete the ServiceImport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporting_a_headless_service_should_create_a_headless_service_import_in_each_cluster_and_unexporting_should_delete_it()
 {
    let t = Driver::start(Setup::new("mcs-conformance-headless").service(headless)).await;
    t.await_import_of_type_in_each_cluster("Headless").await;
    t.unexport_and_await_no_import_in_each_cluster().await;
}

/// service_import.go, Required: "No clusterset IP should be allocated for a
/// Headless ServiceImport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_clusterset_ip_should_be_allocated_for_a_headless_service_import() {
    let t = Driver::start(Setup::new("mcs-conformance-headless-no-ip").service(headless)).await;
    t.await_service_import(EAST, false, exists).await;
    // `Consistently(...).Within(5*time.Second).ProbeEvery(time.Second)`.
    let none = consistently(CONSISTENTLY, COMMAND_PROBE, async || {
        let si = t
            .get_service_import(EAST)
            .await?
            .ok_or("the ServiceImport is gone")?;
        match strings(&si["spec"]["ips"]).is_empty() {
            true => Ok(()),
            false => Err(format!("spec.ips is {}", si["spec"]["ips"])),
        }
    })
    .await;
    if let Err(e) = none {
        panic!("{}", non_conformant(&e));
    }
}

/// service_import.go, Required: "Exporting an ExternalName service should
/// set ServiceExport Valid condition to False".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporting_an_external_name_service_should_set_the_service_export_valid_condition_to_false()
{
    let setup = Setup::new("mcs-conformance-external-name").service(|s| {
        s["spec"]["type"] = json!("ExternalName");
        s["spec"]["externalName"] = json!("example.com");
        s["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("ipFamilyPolicy");
    });
    let t = Driver::start(setup).await;
    t.await_service_export_condition(EAST, "Valid", "False")
        .await;
    t.ensure_no_service_import(
        EAST,
        "the ServiceImport should not exist for an ExternalName service",
    )
    .await;
    // Beyond the suite: the reason mcs-api defines for this case.
    let export = get(
        t.client(EAST),
        &path(MCS, t.ns, "serviceexports", Some(HELLO)),
    )
    .await
    .expect("GET the ServiceExport")
    .expect("the ServiceExport");
    let valid = export["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Valid")
        .cloned()
        .unwrap_or_default();
    assert_eq!(valid["reason"], "InvalidServiceType", "{valid}");
}

/// service_import.go, Required: "A service exported on two clusters with
/// conflicting headlessness should apply the conflict resolution policy and
/// report a Conflict condition on the ServiceExport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_exported_on_two_clusters_with_conflicting_headlessness_should_apply_the_conflict_resolution_policy_and_report_a_conflict_condition_on_the_service_export()
 {
    let setup =
        Setup::two_clusters("mcs-conformance-type-conflict").second(|service, _| headless(service));
    let t = Driver::start(setup).await;
    t.await_conflict_on_each_service_export().await;
    t.await_import_of_type_in_each_cluster("ClusterSetIP").await;
}

// ---------------------------------------------------------------------------
// connectivity.go: the Required spec (the others need a datapath)
// ---------------------------------------------------------------------------

/// connectivity.go, Required: "Connectivity to a service that is not
/// exported should be inaccessible". The suite's `nc` to
/// `<svc>.<ns>.svc.clusterset.local` from every cluster, 20 times per IP
/// family of the Service, is here the DNS query it starts with: no address,
/// NXDOMAIN. Then no cluster holds a ServiceImport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connectivity_to_a_service_that_is_not_exported_should_be_inaccessible() {
    let mut setup = Setup::new("mcs-conformance-not-exported");
    setup.exports = Exports::Nobody;
    let t = Driver::start(setup).await;
    let name = service_fqdn(t.ns);
    for family in strings(&t.hello["spec"]["ipFamilies"]) {
        for (i, c) in t.clusters.iter().enumerate() {
            for _ in 0..TRIES {
                let msg = t.nslookup(i, &name, record_type(&family)).await;
                let (rcode, found) = (msg.metadata.response_code, addresses(&msg));
                assert!(
                    rcode == ResponseCode::NXDomain && found.is_empty(),
                    "{}: {name} on cluster {:?} answers {rcode:?} {found:?}",
                    non_conformant("the service that is not exported is accessible"),
                    c.name
                );
                tokio::time::sleep(POLLING).await;
            }
        }
    }
    for (i, c) in t.clusters.iter().enumerate() {
        let si = t
            .get_service_import(i)
            .await
            .expect("reading the ServiceImport");
        assert!(
            si.is_none(),
            "{}: {si:?}",
            non_conformant(&format!("a ServiceImport exists on cluster {:?}", c.name))
        );
    }
}

// ---------------------------------------------------------------------------
// service_import.go: Optional (exported labels and annotations)
// ---------------------------------------------------------------------------

/// service_import.go, Optional: "Only labels and annotations specified as
/// exported in the ServiceExport should be propagated to the
/// ServiceImport". The suite checks that the Service's own are not; the
/// ServiceExport's own are not either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_labels_and_annotations_specified_as_exported_in_the_service_export_should_be_propagated_to_the_service_import()
 {
    let setup = Setup::new("mcs-conformance-exported-labels")
        .export(|e| exported(e, "dummy-label", "dummy-annotation"));
    let t = Driver::start(setup).await;
    let others = [
        ("the Service's", &t.hello["metadata"]),
        ("the ServiceExport's", &t.export["metadata"]),
    ];
    t.await_import_labels(&t.export, &others).await;
}

/// service_import.go, Optional: "A service exported on two clusters with
/// conflicting annotations and labels should apply the conflict resolution
/// policy and report a Conflict condition on each ServiceExport".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_exported_on_two_clusters_with_conflicting_annotations_and_labels_should_apply_the_conflict_resolution_policy_and_report_a_conflict_condition_on_each_service_export()
 {
    let setup = Setup::two_clusters("mcs-conformance-label-conflict")
        .export(|e| exported(e, "dummy-label", "dummy-annotation"))
        .second(|_, e| exported(e, "dummy-label2", "dummy-annotation2"));
    let t = Driver::start(setup).await;
    t.await_conflict_on_each_service_export().await;
    let export2 = &t.second.as_ref().expect("two clusters").1["spec"];
    let second =
        json!({"annotations": export2["exportedAnnotations"], "labels": export2["exportedLabels"]});
    t.await_import_labels(&t.export, &[("west's export", &second)])
        .await;
}

// ---------------------------------------------------------------------------
// endpoint_slice.go: Optional
// ---------------------------------------------------------------------------

/// `addressTypeOf`.
fn address_type(family: &str) -> &'static str {
    if family == "IPv4" { "IPv4" } else { "IPv6" }
}

/// The MCS labels the suite asks of an MCS EndpointSlice, beyond the two
/// that identify it.
fn check_mcs_slice_labels(eps: &Value) -> Result<(), String> {
    let (name, labels) = (&eps["metadata"]["name"], &eps["metadata"]["labels"]);
    if labels[LABEL_SERVICE_NAME] != HELLO {
        let msg = format!(
            "the MCS EndpointSlice {name} does not contain the {LABEL_SERVICE_NAME:?} label referencing the service name"
        );
        return Err(non_conformant(&msg));
    }
    match labels[LABEL_MANAGED_BY].as_str() {
        None => Err(non_conformant(&format!(
            "the MCS EndpointSlice {name} does not contain the {LABEL_MANAGED_BY:?} label"
        ))),
        Some(K8S_ENDPOINT_SLICE_MANAGED_BY) => Err(non_conformant(&format!(
            "the MCS EndpointSlice's {LABEL_MANAGED_BY:?} label must not reference {K8S_ENDPOINT_SLICE_MANAGED_BY:?}"
        ))),
        Some(_) => Ok(()),
    }
}

/// endpoint_slice.go, Optional: "Exporting a service should create an MCS
/// EndpointSlice in the service's namespace in each cluster with the
/// required MCS labels. Unexporting should delete the EndpointSlice."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporting_a_service_should_create_an_mcs_endpoint_slice_in_each_cluster_with_the_required_mcs_labels_and_unexporting_should_delete_it()
 {
    let t = Driver::start(Setup::new("mcs-conformance-endpoint-slice")).await;
    let mut names: Vec<(usize, String)> = Vec::new();
    for (i, c) in t.clusters.iter().enumerate() {
        for family in t.await_service_import_ip_families(i).await {
            let desc = non_conformant(&format!(
                "an MCS EndpointSlice was not found on cluster {:?}. An MCS EndpointSlice is identified by the presence of the required MCS labels ({LABEL_SERVICE_NAME:?} and {LABEL_SOURCE_CLUSTER:?})",
                c.name
            ));
            let eps = t
                .await_mcs_endpoint_slice(i, address_type(&family), exists, &desc)
                .await;
            check_mcs_slice_labels(&eps).unwrap_or_else(|e| panic!("{e}"));
            names.push((
                i,
                eps["metadata"]["name"].as_str().expect("a name").to_owned(),
            ));
        }
    }
    t.delete_service_export(EAST).await;
    for (i, name) in names {
        let path = path("discovery.k8s.io/v1", t.ns, "endpointslices", Some(&name));
        let gone = eventually(WITHIN, POLLING, async || {
            match get(t.client(i), &path).await? {
                None => Ok(()),
                Some(_) => Err("it still exists".to_owned()),
            }
        })
        .await;
        if let Err(e) = gone {
            let cluster = t.clusters[i].name;
            let msg = format!(
                "the EndpointSlice {name:?} was not deleted on unexport from cluster {cluster:?}"
            );
            panic!("{}: {e}", non_conformant(&msg));
        }
    }
}

// ---------------------------------------------------------------------------
// clusterip_service_dns.go: Optional (the cluster.local spec is not ported)
// ---------------------------------------------------------------------------

/// clusterip_service_dns.go, Optional: "A DNS lookup of the
/// <service>.<ns>.svc.clusterset.local domain for a ClusterIP service
/// should resolve to the clusterset IP". In each cluster, each IP of that
/// cluster's ServiceImport: the lookup of its family shows exactly that
/// cluster's clusterset IPs of the family (the suite: contains it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_lookup_of_the_service_ns_svc_clusterset_local_domain_for_a_clusterip_service_should_resolve_to_the_clusterset_ip()
 {
    let t = Driver::start(Setup::new("mcs-conformance-dns-clusterip")).await;
    let name = service_fqdn(t.ns);
    for (i, c) in t.clusters.iter().enumerate() {
        let si = t
            .await_service_import(i, false, |si| {
                match strings(&si["spec"]["ips"]).is_empty() {
                    true => Err(format!(
                        "ServiceImport on cluster {:?} does not contain an IP",
                        c.name
                    )),
                    false => Ok(()),
                }
            })
            .await;
        let ips = strings(&si["spec"]["ips"]);
        for ip in &ips {
            let family = family_of(ip).unwrap_or_else(|| panic!("{ip:?} is no IP"));
            let same: Vec<String> = ips
                .iter()
                .filter(|o| family_of(o) == Some(family))
                .cloned()
                .collect();
            t.await_lookup(i, &name, record_type(family), have_addresses(&same))
                .await;
        }
    }
}

/// clusterip_service_dns.go, Optional: "A DNS SRV query of the
/// <service>.<ns>.svc.clusterset.local domain for a ClusterIP service
/// should return valid SRV records". In each cluster exactly the one record
/// the suite expects: the first service port, target the service name
/// (`hello`'s two ports are both 42: one record per port, the same one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_srv_query_of_the_service_ns_svc_clusterset_local_domain_for_a_clusterip_service_should_return_valid_srv_records()
 {
    let t = Driver::start(Setup::new("mcs-conformance-dns-clusterip-srv")).await;
    let name = service_fqdn(t.ns);
    let port = t.hello_ports()[0]["port"].as_u64().expect("a port");
    let want = vec![(u16::try_from(port).expect("a u16 port"), name.clone())];
    for (i, c) in t.clusters.iter().enumerate() {
        let got = t.expect_srv_records(i, &name, want.len()).await;
        let msg =
            format!("Received SRV records {got:?} do not match the expected records {want:?}");
        assert_eq!(got, want, "{} (cluster {:?})", non_conformant(&msg), c.name);
    }
}

// ---------------------------------------------------------------------------
// headless_service_dns.go: Optional
// ---------------------------------------------------------------------------

/// The headless DNS specs' `BeforeEach`: `hello` headless, its Deployment
/// with `REPLICAS` replicas.
fn headless_dns(ns: &'static str) -> Setup {
    let mut setup = Setup::new(ns).service(headless);
    setup.deployment = Some(Pods::Deployment(REPLICAS));
    setup
}

/// headless_service_dns.go, Optional: "A DNS query of the
/// <service>.<ns>.svc.clusterset.local domain for a headless service should
/// return the ready endpoint addresses of all the backing pods".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_query_of_the_service_ns_svc_clusterset_local_domain_for_a_headless_service_should_return_the_ready_endpoint_addresses_of_all_the_backing_pods()
 {
    let t = Driver::start(headless_dns("mcs-conformance-dns-headless")).await;
    let name = service_fqdn(t.ns);
    for i in [EAST, WEST] {
        for family in t.await_service_import_ip_families(i).await {
            let endpoints = t
                .await_k8s_endpoints(EAST, address_type(&family), REPLICAS)
                .await;
            let want: Vec<String> = endpoints.into_iter().map(|e| e.address).collect();
            t.await_lookup(i, &name, record_type(&family), have_addresses(&want))
                .await;
        }
    }
}

/// The StatefulSet spec's check of an MCS EndpointSlice: `REPLICAS`
/// endpoints, each ready and with a hostname.
fn stateful_set_endpoints(eps: &Value) -> Result<(), String> {
    let name = &eps["metadata"]["name"];
    let endpoints = eps["endpoints"].as_array().map_or(&[][..], Vec::as_slice);
    if endpoints.len() != REPLICAS {
        return Err(format!(
            "the MCS EndpointSlice {name} does not contain the expected number of endpoints {REPLICAS}"
        ));
    }
    for ep in endpoints {
        let addresses = strings(&ep["addresses"]).join(",");
        if !ep["conditions"]["ready"].as_bool().unwrap_or(true) {
            return Err(format!(
                "the endpoint address {addresses} in the MCS EndpointSlice {name} is not ready"
            ));
        }
        if ep["hostname"].as_str().unwrap_or_default().is_empty() {
            return Err(format!(
                "the hostname field for endpoint address {addresses} in the MCS EndpointSlice {name} is not set"
            ));
        }
    }
    Ok(())
}

/// headless_service_dns.go, Optional: "A DNS query of the
/// <hostname>.<clusterid>.<service>.<ns>.svc.clusterset.local domain for a
/// headless StatefulSet service should return the requested pod's endpoint
/// address". The cluster id is the `source-cluster` label of the MCS
/// EndpointSlice in the querying cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_query_of_the_hostname_clusterid_service_ns_svc_clusterset_local_domain_for_a_headless_statefulset_service_should_return_the_requested_pods_endpoint_address()
 {
    let mut setup = headless_dns("mcs-conformance-dns-statefulset");
    setup.deployment = None;
    setup.stateful_set = Some(Pods::StatefulSet(REPLICAS));
    let t = Driver::start(setup).await;
    for (i, c) in t.clusters.iter().enumerate() {
        for family in t.await_service_import_ip_families(i).await {
            let desc = format!("an MCS EndpointSlice was not found on cluster {:?}", c.name);
            let eps = t
                .await_mcs_endpoint_slice(i, address_type(&family), stateful_set_endpoints, &desc)
                .await;
            let cluster_id = eps["metadata"]["labels"][LABEL_SOURCE_CLUSTER]
                .as_str()
                .expect("the source-cluster label");
            for ep in eps["endpoints"].as_array().into_iter().flatten() {
                let hostname = ep["hostname"].as_str().expect("a hostname");
                let name = format!("{hostname}.{cluster_id}.{HELLO}.{}.svc.{DNS_DOMAIN}", t.ns);
                t.await_lookup(
                    i,
                    &name,
                    record_type(&family),
                    have_addresses(&strings(&ep["addresses"])),
                )
                .await;
            }
        }
    }
}

/// headless_service_dns.go, Optional: "A DNS SRV query of the
/// <service>.<ns>.svc.clusterset.local domain for a headless service should
/// return valid SRV records". One record per endpoint address of the
/// Service's families in `east`, each with a target starting with the
/// endpoint's hostname (here its dashed IP: Deployment pods have none) and
/// the first service port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_srv_query_of_the_service_ns_svc_clusterset_local_domain_for_a_headless_service_should_return_valid_srv_records()
 {
    let t = Driver::start(headless_dns("mcs-conformance-dns-headless-srv")).await;
    let mut all = Vec::new();
    for family in strings(&t.hello["spec"]["ipFamilies"]) {
        all.extend(
            t.await_k8s_endpoints(EAST, address_type(&family), REPLICAS)
                .await,
        );
    }
    let name = service_fqdn(t.ns);
    let port = t.hello_ports()[0]["port"].as_u64().expect("a port");
    for (i, c) in t.clusters.iter().enumerate() {
        let recs = t.expect_srv_records(i, &name, all.len()).await;
        for ep in &all {
            let found = recs
                .iter()
                .find(|(_, target)| target.starts_with(&ep.host_name));
            let msg = format!(
                "SRV record for endpoint host name {:?} not received. Actual records received: {recs:?}",
                ep.host_name
            );
            let (got, _) =
                found.unwrap_or_else(|| panic!("{} (cluster {:?})", non_conformant(&msg), c.name));
            assert_eq!(
                u64::from(*got),
                port,
                "cluster {:?}: the SRV port for {:?}",
                c.name,
                ep.host_name
            );
        }
    }
}
