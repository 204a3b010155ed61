//! Writes Services and EndpointSlices in the file-source format
//! (`zones/<cluster>/*.yaml`), as the load and scale benchmarks need them.
//! Ordinary Kubernetes YAML, shaped like the demo's objects.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The generated clusters; `west` is the local one.
pub(crate) const CLUSTERS: [&str; 4] = ["west", "east", "north", "south"];

/// Endpoints per service (and per EndpointSlice) in [`generate`]'s data set.
pub(crate) const PER_SERVICE: usize = 100;
/// Services per namespace (and per file) in [`generate`]'s data set.
pub(crate) const PER_NAMESPACE: usize = 50;

/// Linkerd's flat-mode export label.
pub(crate) const FLAT: [(&str, &str); 1] = [("mirror.linkerd.io/exported", "remote-discovery")];
/// Linkerd's gateway-mode export label.
pub(crate) const GATEWAY: [(&str, &str); 1] = [("mirror.linkerd.io/exported", "true")];
/// A federated member (flat).
pub(crate) const FEDERATED: [(&str, &str); 2] = [
    ("mirror.linkerd.io/exported", "remote-discovery"),
    ("mirror.linkerd.io/federated", "member"),
];

/// Pod addresses, distinct per cluster.
pub(crate) struct Ips {
    next: [u32; 4],
}

impl Default for Ips {
    fn default() -> Self {
        Self { next: [256; 4] }
    }
}

impl Ips {
    /// The next pod address in cluster `c` (an index into [`CLUSTERS`]).
    pub(crate) fn pod(&mut self, c: usize) -> String {
        let n = self.next[c];
        self.next[c] += 1;
        format!(
            "10.{}.{}.{}",
            16 * c as u32 + n / 65536,
            (n / 256) % 256,
            n % 256
        )
    }
}

/// Appends a Service document: `cluster_ip` is an address or `None`
/// (headless); `ports` are (name, port, targetPort).
pub(crate) fn service_doc(
    out: &mut String,
    name: &str,
    ns: &str,
    labels: &[(&str, &str)],
    cluster_ip: &str,
    ports: &[(&str, u16, u16)],
) {
    let _ = writeln!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: \"{name}\""
    );
    for (k, v) in labels {
        let _ = writeln!(out, "    {k}: \"{v}\"");
    }
    let _ = writeln!(
        out,
        "spec:\n  type: ClusterIP\n  selector:\n    app: \"{name}\"\n  clusterIP: {cluster_ip}\n  clusterIPs: [{cluster_ip}]\n  ipFamilies: [IPv4]\n  ipFamilyPolicy: SingleStack\n  ports:"
    );
    for (pname, port, target) in ports {
        let _ = writeln!(
            out,
            "  - name: {pname}\n    protocol: TCP\n    port: {port}\n    targetPort: {target}"
        );
    }
}

/// Appends an EndpointSlice document of service `name` with one ready
/// endpoint per address in `pods`; with `hostnames`, pod `i` is
/// `<name>-<i>` (a StatefulSet).
pub(crate) fn slice_doc(
    out: &mut String,
    name: &str,
    ns: &str,
    labels: &[(&str, &str)],
    ports: &[(&str, u16, u16)],
    pods: &[String],
    hostnames: bool,
) {
    let _ = writeln!(
        out,
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-abcde\n  namespace: {ns}\n  labels:\n    kubernetes.io/service-name: \"{name}\""
    );
    for (k, v) in labels {
        let _ = writeln!(out, "    {k}: \"{v}\"");
    }
    let _ = writeln!(out, "addressType: IPv4\nports:");
    for (pname, _, target) in ports {
        let _ = writeln!(out, "- name: {pname}\n  protocol: TCP\n  port: {target}");
    }
    let _ = writeln!(out, "endpoints:");
    for (i, ip) in pods.iter().enumerate() {
        let _ = writeln!(out, "- addresses: [{ip}]");
        if hostnames {
            let _ = writeln!(out, "  hostname: {name}-{i}");
        }
        let _ = writeln!(out, "  conditions:\n    ready: true");
    }
}

/// Appends the `linkerd-gateway` Service of a remote cluster, reachable at
/// `ip`.
pub(crate) fn gateway_doc(out: &mut String, ip: &str) {
    let _ = writeln!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: linkerd-gateway\n  namespace: linkerd-multicluster\n  annotations:\n    mirror.linkerd.io/gateway-identity: \"linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local\"\nspec:\n  type: LoadBalancer\n  clusterIP: 10.100.0.200\n  clusterIPs: [10.100.0.200]\n  ports:\n  - name: mc-gateway\n    protocol: TCP\n    port: 4143\n    targetPort: 4143\nstatus:\n  loadBalancer:\n    ingress:\n    - ip: {ip}"
    );
}

/// Writes `endpoints` ready endpoints under `zones` (the scale benches' data
/// set): four clusters, services of [`PER_SERVICE`] endpoints in one
/// EndpointSlice each, service `i` in cluster `i % 4` and namespace
/// `ns{i / (PER_NAMESPACE * 4)}` (one file per namespace); even services are
/// StatefulSets (headless, pod `svc{i}-{k}` per endpoint), odd ones
/// ClusterIP; one in ten also a federated member. Returns the number of
/// services.
pub(crate) fn generate(zones: &Path, endpoints: usize) -> usize {
    let services = endpoints.div_ceil(PER_SERVICE);
    let mut ips = Ips::default();
    let ports_sts = [("peer", 7000u16, 7000u16), ("client", 9042, 9042)];
    let ports_web = [("http", 80u16, 8080u16)];
    let mut files: Vec<BTreeMap<String, String>> = vec![Default::default(); CLUSTERS.len()];
    for i in 0..services {
        let c = i % CLUSTERS.len();
        let ns = format!("ns{}", i / (PER_NAMESPACE * CLUSTERS.len()));
        let name = format!("svc{i}");
        let n = PER_SERVICE.min(endpoints - i * PER_SERVICE);
        let pods: Vec<String> = (0..n).map(|_| ips.pod(c)).collect();
        let labels: &[(&str, &str)] = if i % 10 == 9 { &FEDERATED } else { &FLAT };
        let out = files[c].entry(ns.clone()).or_default();
        if i % 2 == 0 {
            service_doc(out, &name, &ns, labels, "None", &ports_sts);
            slice_doc(out, &name, &ns, labels, &ports_sts, &pods, true);
        } else {
            let ip = format!("10.200.{}.{}", (i / 256) % 256, i % 256);
            service_doc(out, &name, &ns, labels, &ip, &ports_web);
            slice_doc(out, &name, &ns, labels, &ports_web, &pods, false);
        }
    }
    for (c, f) in files.iter().enumerate() {
        let dir = zones.join(CLUSTERS[c]);
        std::fs::create_dir_all(&dir).expect("cluster dir");
        for (ns, text) in f {
            std::fs::write(dir.join(format!("{ns}.yaml")), text).expect("write zones");
        }
    }
    services
}
