//! Writes Services and EndpointSlices in the file-source format
//! (`zones/<cluster>/*.yaml`), as the load and scale benchmarks need them.
//! Ordinary Kubernetes YAML, shaped like the demo's objects.

#![allow(dead_code)]

use std::fmt::Write as _;

/// The generated clusters; `west` is the local one.
pub(crate) const CLUSTERS: [&str; 4] = ["west", "east", "north", "south"];

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
