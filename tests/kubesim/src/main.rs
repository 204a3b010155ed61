//! `kubesim`: serve several test Kubernetes clusters on loopback until killed.

#![warn(clippy::too_many_lines)] // the house rule; threshold in the root clippy.toml

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;

/// A test Kubernetes API server: several clusters on loopback, each with its own port, TLS
/// certificate and kubeconfig.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Cluster names, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    clusters: Vec<String>,
    /// Directory for the kubeconfigs (`<dir>/<cluster>.kubeconfig`).
    #[arg(long)]
    dir: PathBuf,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    http: bool,
    /// Loopback address the clusters listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Address of the control endpoint (faults, counters, audit log).
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// Enforce RBAC in CLUSTER from the manifests at PATH (file or directory); repeatable.
    #[arg(long, value_name = "CLUSTER=PATH")]
    rbac: Vec<String>,
    /// Write `<dir>/<cluster>-<ns>-<name>.kubeconfig` with a token for this ServiceAccount; repeatable.
    #[arg(long, value_name = "CLUSTER=NAMESPACE/NAME")]
    service_account: Vec<String>,
    /// Changes kept per cluster for watches; a watch from an older resourceVersion gets 410 Expired.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 10)]
    bookmark_interval: u64,
    /// Service ClusterIP range (IPv4, the primary family).
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cidr: String,
    /// IPv6 Service ClusterIP range, which makes the clusters dual-stack; `none` for
    /// IPv4-only clusters.
    #[arg(long, default_value = "fd00:96::/108")]
    service_cidr_v6: String,
}

/// `--service-cidr`: an IPv4 network with a prefix length of 8 to 30.
fn parse_service_cidr(text: &str) -> anyhow::Result<(Ipv4Addr, u8)> {
    let (net, prefix) = text
        .split_once('/')
        .context("--service-cidr must look like 10.96.0.0/12")?;
    let net: Ipv4Addr = net.parse().context("--service-cidr network")?;
    let prefix: u8 = prefix.parse().context("--service-cidr prefix length")?;
    if !(8..=30).contains(&prefix) {
        bail!("--service-cidr prefix length must be between 8 and 30");
    }
    Ok((net, prefix))
}

/// `--service-cidr-v6`: `none`, or an IPv6 network with a prefix length of 108 (the widest
/// range kube-apiserver's classic allocator takes) to 126.
fn parse_service_cidr_v6(text: &str) -> anyhow::Result<Option<(Ipv6Addr, u8)>> {
    if text == "none" {
        return Ok(None);
    }
    let (net, prefix) = text
        .split_once('/')
        .context("--service-cidr-v6 must look like fd00:96::/108, or be none")?;
    let net: Ipv6Addr = net.parse().context("--service-cidr-v6 network")?;
    let prefix: u8 = prefix.parse().context("--service-cidr-v6 prefix length")?;
    if !(108..=126).contains(&prefix) {
        bail!("--service-cidr-v6 prefix length must be between 108 and 126");
    }
    Ok(Some((net, prefix)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let service_cidr = parse_service_cidr(&args.service_cidr)?;
    let service_cidr_v6 = parse_service_cidr_v6(&args.service_cidr_v6)?;
    let mut config = kubesim::SimConfig::new(args.clusters.clone(), &args.dir);
    config.tls = !args.http;
    config.bind = args.bind;
    config.control = Some(args.control);
    config.settings.store.history = args.history;
    config.settings.store.service_cidr = service_cidr;
    config.settings.store.service_cidrs_v6 = service_cidr_v6.into_iter().collect();
    config.settings.bookmark_interval = Duration::from_secs(args.bookmark_interval.max(1));
    let sim = kubesim::start(config).await?;
    for spec in &args.rbac {
        let (name, path) = spec.split_once('=').context("--rbac wants CLUSTER=PATH")?;
        let cluster = sim
            .cluster(name)
            .with_context(|| format!("--rbac names unknown cluster {name}"))?;
        cluster.set_policy(Some(kubesim::load_policy(&[PathBuf::from(path)])?));
        println!("cluster {name}: RBAC enforced from {path}");
    }
    for spec in &args.service_account {
        let (name, sa) = spec
            .split_once('=')
            .context("--service-account wants CLUSTER=NAMESPACE/NAME")?;
        let (ns, sa) = sa
            .split_once('/')
            .context("--service-account wants CLUSTER=NAMESPACE/NAME")?;
        let cluster = sim
            .cluster(name)
            .with_context(|| format!("--service-account names unknown cluster {name}"))?;
        let token = cluster.issue_service_account_token(ns, sa);
        let path = args.dir.join(format!("{name}-{ns}-{sa}.kubeconfig"));
        let text = cluster.kubeconfig_for(&format!("system:serviceaccount:{ns}:{sa}"), &token);
        kubesim::tls::write_private(&path, &text)?;
        println!(
            "cluster {name}: ServiceAccount {ns}/{sa} kubeconfig {}",
            path.display()
        );
    }
    for c in sim.clusters() {
        println!(
            "cluster {}: {} kubeconfig {}",
            c.name,
            c.server_url(),
            c.kubeconfig_path().display()
        );
    }
    if let Some(addr) = sim.control_addr() {
        println!("control: http://{addr}");
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    sim.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_cidr_v6_flag() {
        let v6 = |s: &str| parse_service_cidr_v6(s).map_err(|e| e.to_string());
        type Parsed = Result<Option<(Ipv6Addr, u8)>, String>;
        let cases: Vec<(&str, Parsed)> = vec![
            (
                "fd00:96::/108",
                Ok(Some((Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 0), 108))),
            ),
            (
                "fd00:1::/126",
                Ok(Some((Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0), 126))),
            ),
            ("none", Ok(None)),
            (
                "fd00::/64",
                Err("--service-cidr-v6 prefix length must be between 108 and 126".into()),
            ),
            (
                "fd00::/127",
                Err("--service-cidr-v6 prefix length must be between 108 and 126".into()),
            ),
            (
                "fd00::",
                Err("--service-cidr-v6 must look like fd00:96::/108, or be none".into()),
            ),
            ("10.96.0.0/108", Err("--service-cidr-v6 network".into())),
            ("fd00::/x", Err("--service-cidr-v6 prefix length".into())),
        ];
        for (text, want) in cases {
            assert_eq!(v6(text), want, "{text}");
        }
        // The default is the library's.
        assert_eq!(
            Args::parse_from(["kubesim", "--clusters", "a", "--dir", "/tmp"]).service_cidr_v6,
            format!(
                "{}/{}",
                kubesim::store::DEFAULT_SERVICE_CIDR_V6.0,
                kubesim::store::DEFAULT_SERVICE_CIDR_V6.1
            )
        );
    }
}
