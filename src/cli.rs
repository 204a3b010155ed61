//! The command line: `serve`, `mirror`, `check`, `dump` and `explain`.
//!
//! Parses arguments, resolves configuration, and runs one subcommand. The
//! only place (with `main.rs`) that uses `anyhow`.

mod explain;

pub use explain::ede;

pub use explain::ExplainArgs;

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tracing::{error, info, warn};

use crate::config::{
    Config, ConfigError, LiveOptions, LogFormat, MirrorOptions, ServeArgs, ZoneArgs,
};
use crate::dns::zonefile;
use crate::filewatch::FileWatch;
use crate::k8s::client as k8s_client;
use crate::metrics::ConfigReloads;
use crate::mirror::lease::LeaseConfig;
use crate::mirror::run::MirrorConfig;
use crate::model::objects::{Endpoint, ObjectKey, Service};
use crate::model::{Entry, Epoch, Model, Origin, Snapshot};
use crate::runtime::{Server, SettingsHandle, Sockets, SourceSetup};
use crate::source::clusters_file::load_clusters_file;
use crate::source::file::{
    ClusterLoad, ClusterObjects, DirLoad, Severity, initial_events_of, judge, load_dir,
    within_budget,
};
use crate::source::live::{Links, LiveConfig, MCS_REDISCOVER};

/// Authoritative DNS for multicluster Kubernetes service names.
#[derive(Debug, Parser)]
#[command(name = "clusterset-dns", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Answer DNS for the clusterset zone: from a zones directory (--zones), or live from the clusters' APIs.
    Serve(Box<ServeArgs>),
    /// Live mode without DNS: only write mirror Services and EndpointSlices into the local cluster.
    Mirror(Box<ServeArgs>),
    /// Validate a zones directory and print what it would serve; exit 1 on errors.
    Check(ZoneArgs),
    /// Print the whole zone as RFC 1035 zone-file text (loadable by Knot DNS or NSD).
    Dump(ZoneArgs),
    /// Ask a running server why NAME answers what it answers: each member cluster's tier, health, ready endpoints, and why it is in or out.
    Explain(ExplainArgs),
}

/// What a command line asks for, its configuration resolved.
#[derive(Debug)]
enum Plan {
    /// `serve`, or `mirror` (`mirror_only`: the mirror controller alone);
    /// the arguments stay for configuration reloads.
    Serve {
        args: Box<ServeArgs>,
        config: Box<Config>,
        mirror_only: bool,
    },
    /// `check` a zones directory.
    Check(Box<Config>),
    /// `dump` a zones directory.
    Dump(Box<Config>),
    /// `explain` a name, asking a running server.
    Explain(ExplainArgs),
}

/// The configuration `command` runs under: flags and environment (merged
/// by clap) over the config file over defaults. Pure but for reading the
/// config file.
fn plan(command: Command) -> Result<Plan, ConfigError> {
    Ok(match command {
        Command::Serve(args) => Plan::Serve {
            config: Box::new(Config::resolve(&args)?),
            args,
            mirror_only: false,
        },
        Command::Mirror(mut args) => {
            // `mirror` is `serve --mirror` without DNS.
            args.mirror = true;
            Plan::Serve {
                config: Box::new(Config::resolve(&args)?),
                args,
                mirror_only: true,
            }
        }
        Command::Check(args) => Plan::Check(Box::new(Config::resolve_zone(&args)?)),
        Command::Dump(args) => Plan::Dump(Box::new(Config::resolve_zone(&args)?)),
        Command::Explain(args) => Plan::Explain(args),
    })
}

/// Runs the command line. Logging goes to stderr (`RUST_LOG` sets the level).
pub fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match plan(cli.command)? {
        Plan::Serve {
            args,
            config,
            mirror_only,
        } => serve(&args, *config, mirror_only),
        Plan::Check(config) => {
            init_logging(LogFormat::Text);
            check(&config)
        }
        Plan::Dump(config) => {
            init_logging(LogFormat::Text);
            dump(&config)
        }
        Plan::Explain(args) => explain::run(&args),
    }
}

/// Logs to stderr in `format`, at the level `RUST_LOG` sets (default info).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn serve(args: &ServeArgs, config: Config, mirror_only: bool) -> anyhow::Result<ExitCode> {
    init_logging(config.log_format);
    if let Some(zones) = &config.zones {
        // A typo in --zones should stop us, not serve an empty zone.
        anyhow::ensure!(
            zones.is_dir(),
            "zones directory {} does not exist or is not a directory",
            zones.display()
        );
    }
    let sockets = bind(&config, mirror_only)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (source, mirror) = match &config.live {
            None => (SourceSetup::Files, None),
            Some(live) => {
                let live = live_config(&config, live).await?;
                let mirror = config
                    .mirror
                    .as_ref()
                    .map(|m| mirror_config(&config, &live, m));
                (SourceSetup::Live(Box::new(live)), mirror)
            }
        };
        let mut server =
            Server::start_full(&config, sockets, source, mirror).context("starting the server")?;
        // Before the listening line: a SIGHUP from then on reloads, never kills.
        let reload = reload_on_signal_or_change(
            args.clone(),
            config.clone(),
            server.settings_handle(),
            server.shared.config_reloads.clone(),
        )
        .context("installing the SIGHUP handler")?;
        tokio::spawn(reload);
        print_listening(&server, mirror_only);
        let token = server.shutdown_token();
        tokio::spawn(async move {
            shutdown_signal().await;
            token.cancel();
        });
        let stats = server.shared.dns.clone();
        server.wait().await;
        info!("stopping: no new connections; finishing the queries and writes in hand");
        server.stop().await;
        info!(answered = stats.answered_total(), "stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Binds every socket `serve` needs before anything starts, so a busy port
/// is an error with its address.
fn bind(config: &Config, mirror_only: bool) -> anyhow::Result<Sockets> {
    if mirror_only {
        return Sockets::admin_only(config.admin_addr)
            .with_context(|| format!("binding admin on {}", config.admin_addr));
    }
    let sockets = Sockets::bind(config.dns_addr, config.admin_addr).with_context(|| {
        format!(
            "binding DNS on {} and admin on {}",
            config.dns_addr, config.admin_addr
        )
    })?;
    match &config.tls {
        Some(tls) => sockets
            .with_tls(tls.addr)
            .with_context(|| format!("binding DNS over TLS on {}", tls.addr)),
        None => Ok(sockets),
    }
}

/// One machine-readable line so scripts learn the bound ports.
fn print_listening(server: &Server, mirror_only: bool) {
    if mirror_only {
        println!("listening admin={}", server.admin_addr);
    } else if let Some(tls) = server.tls_addr {
        println!(
            "listening dns={} admin={} tls={tls}",
            server.dns_addr, server.admin_addr
        );
    } else {
        println!(
            "listening dns={} admin={}",
            server.dns_addr, server.admin_addr
        );
    }
    let _ = std::io::stdout().flush();
}

/// The live source's setup: the local client now, so a bad kubeconfig
/// stops the process with its reason instead of serving nothing.
async fn live_config(config: &Config, live: &LiveOptions) -> anyhow::Result<LiveConfig> {
    let local: Arc<str> = config
        .local_cluster
        .as_deref()
        .context("--local-cluster is required in live mode")?
        .into();
    let local_client = k8s_client::local(live.kubeconfig.as_deref(), live.context.as_deref())
        .await
        .context("connecting to the local cluster")?;
    // Built twice on purpose: the heartbeat's client has its own pool.
    let local_heartbeat = k8s_client::local(live.kubeconfig.as_deref(), live.context.as_deref())
        .await
        .context("connecting to the local cluster")?;
    if let Some(path) = &live.clusters {
        // Fail fast on a file that cannot work; later edits are reloaded.
        load_clusters_file(path)?;
    }
    Ok(LiveConfig {
        local,
        local_client,
        local_heartbeat: Some(local_heartbeat),
        links: match &live.clusters {
            Some(path) => Links::File(path.clone()),
            None => Links::Linkerd {
                namespace: live.link_namespace.clone(),
            },
        },
        sync_timeout: live.sync_timeout,
        mcs_rediscover: MCS_REDISCOVER,
        allow_kubeconfig_exec: live.allow_kubeconfig_exec,
    })
}

/// The mirror controller's setup. Its Lease identity is the pod name (the
/// Downward API's `POD_NAME`, else `HOSTNAME`) and the process id.
fn mirror_config(config: &Config, live: &LiveConfig, m: &MirrorOptions) -> MirrorConfig {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "clusterset-dns".to_owned());
    MirrorConfig {
        client: live.local_client.clone(),
        local: live.local.clone(),
        cluster_domain: m.cluster_domain.clone(),
        linkerd_flat_compat: m.linkerd_flat_compat,
        link_namespace: match &live.links {
            Links::Linkerd { namespace } => Some(namespace.clone()),
            Links::File(_) => None,
        },
        lease: LeaseConfig::new(
            &m.namespace,
            "clusterset-dns-mirror",
            &format!("{host}_{}", std::process::id()),
        ),
        resync: m.resync,
        federated_grace: config.settings.federated_grace,
        mcs: config.settings.mcs,
    }
}

/// How often the config file is compared with the one in use when no
/// event comes (ConfigMap volumes swap a link that watches miss).
const CONFIG_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Reloads the configuration on SIGHUP, or when the config file's content
/// changes: the answer settings apply at once (queries go on meanwhile); an
/// invalid file is refused with its error and the running configuration
/// stays; options that need a restart are named in a warning.
fn reload_on_signal_or_change(
    args: ServeArgs,
    mut running: Config,
    handle: SettingsHandle,
    reloads: Arc<ConfigReloads>,
) -> std::io::Result<impl Future<Output = ()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // The config file and the TSIG keys file (a Secret's volume): an edit
    // of either reloads.
    let paths: Vec<_> = (args.zone.config.iter())
        .chain(running.transfer_keys_file.iter())
        .cloned()
        .collect();
    Ok(async move {
        // Without a file, only SIGHUP reloads (the flags and the
        // environment do not change under us).
        let mut file = (!paths.is_empty()).then(|| FileWatch::new(paths, CONFIG_POLL));
        if let Some(file) = &mut file {
            // The file as `running` was resolved from, near enough: what
            // changes from here on is a change.
            file.mark_seen().await;
        }
        loop {
            let why = tokio::select! {
                s = hup.recv() => match s {
                    Some(()) => "SIGHUP",
                    None => return,
                },
                () = changed(&mut file) => "the config or transfer keys file changed",
            };
            // The running configuration is the data kept on error: every
            // refusal is reported, as each follows a change or a signal.
            match Config::resolve(&args) {
                Err(e) => {
                    reloads.config_reload(false);
                    error!(reason = why, error = %e, "configuration not reloaded; the running configuration stays");
                }
                Ok(new) => {
                    for key in running.restart_only_changes(&new) {
                        warn!(
                            option = key,
                            "changed in the configuration; takes effect after a restart"
                        );
                    }
                    let settings = running.reloaded_settings(&new);
                    handle.set(settings.clone());
                    reloads.config_reload(true);
                    info!(reason = why, "configuration reloaded");
                    running.settings = settings;
                }
            }
        }
    })
}

/// Waits for `file` to change; forever when there is none.
async fn changed(file: &mut Option<FileWatch>) {
    match file {
        Some(file) => file.changed().await,
        None => std::future::pending().await,
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Loads a zones directory into a model, as `check` and `dump` see it.
pub fn load_model(config: &Config) -> anyhow::Result<(DirLoad, Arc<Snapshot>)> {
    let zones = config
        .zones
        .as_deref()
        .context("a zones directory is required")?;
    let load = load_dir(
        zones,
        config.local_cluster.as_deref(),
        &config.settings.trust,
    )?;
    // One reading of the clock: the whole load happens at one moment.
    let now = Instant::now();
    let mut model = Model::new(config.settings.clone(), Epoch::new(now, SystemTime::now()));
    // As `serve` holds them: every cluster but the local one within budget.
    model.apply(
        load.clusters.iter().flat_map(|c| {
            let (refused, _) = judge(&c.objects, config.settings.budget.for_cluster(c.local));
            initial_events_of(c, &within_budget(&c.objects, &refused))
        }),
        now,
    );
    model.clusters_known(now);
    Ok((load, model.snapshot()))
}

fn check(config: &Config) -> anyhow::Result<ExitCode> {
    let (load, snap) = load_model(config)?;
    print!("{}", check_report(config, &load, &snap));
    let errors = load
        .all_problems()
        .filter(|p| p.severity == Severity::Error)
        .count();
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn describe_entry(e: &Entry) -> String {
    if e.withheld() {
        return "refused by its cluster's budget (SERVFAIL)".to_owned();
    }
    let mut parts = Vec::new();
    let (v4, v6) = (e.v4(), e.v6());
    if !v4.is_empty() {
        parts.push(plural(v4.len(), "A record"));
    }
    if !v6.is_empty() {
        parts.push(plural(v6.len(), "AAAA record"));
    }
    if v4.is_empty() && v6.is_empty() {
        parts.push("no addresses (NODATA)".to_owned());
    }
    let pod_names = e.name_count() - 1;
    if pod_names > 0 {
        parts.push(plural(pod_names, "pod name"));
    }
    let members: Vec<&str> = e.members().collect();
    if !members.is_empty() {
        parts.push(format!("members {}", members.join(",")));
    }
    if let Origin::Federated {
        fail_open: true, ..
    } = e.origin
    {
        parts.push("fail-open".to_owned());
    }
    if !e.refused.is_empty() {
        parts.push(format!(
            "members refused by their budget {}",
            e.refused.join(",")
        ));
    }
    parts.join(", ")
}

/// The text `check` prints.
pub fn check_report(config: &Config, load: &DirLoad, snap: &Snapshot) -> String {
    let mut out = String::new();
    let zone = snap.settings.zone.text();
    let _ = writeln!(
        out,
        "{}: {} (zone {zone}.{})",
        config
            .zones
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display(),
        plural(load.clusters.len(), "cluster"),
        config
            .local_cluster
            .as_ref()
            .map(|l| format!(", local cluster {l}"))
            .unwrap_or_default()
    );
    if let Some(local) = &config.local_cluster
        && !load.clusters.iter().any(|c| &*c.name == local.as_str())
    {
        let _ = writeln!(out, "warning: the local cluster {local} has no directory");
    }
    let mut entries: Vec<_> = snap.entries.values().cloned().collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &load.clusters {
        cluster_report(&mut out, c, &entries);
    }
    let federated: Vec<_> = entries
        .iter()
        .filter(|e| matches!(e.origin, Origin::Federated { .. }))
        .collect();
    if !federated.is_empty() {
        let _ = writeln!(out, "\nfederated");
        for e in federated {
            let _ = writeln!(out, "  name {}. {}", e.name, describe_entry(e));
        }
    }
    let _ = writeln!(
        out,
        "\n{} served; {} not served (name collision); {} not served (too long)",
        plural(snap.stats.names as usize, "name"),
        snap.stats.collisions,
        snap.stats.too_long
    );
    let problems: Vec<_> = load.all_problems().collect();
    let errors = problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count();
    if !problems.is_empty() {
        let _ = writeln!(out, "\nproblems");
        for p in &problems {
            let _ = writeln!(out, "  {p}");
        }
    }
    let _ = writeln!(
        out,
        "{}, {}",
        plural(errors, "error"),
        plural(problems.len() - errors, "warning")
    );
    out
}

/// `check`'s lines about one cluster directory.
fn cluster_report(out: &mut String, c: &ClusterLoad, entries: &[Arc<Entry>]) {
    let objects = &c.objects;
    let endpoints: usize = objects.slices.values().map(|s| s.endpoints.len()).sum();
    let ready: usize = objects
        .slices
        .values()
        .map(|s| s.endpoints.iter().filter(|e| e.ready).count())
        .sum();
    let _ = writeln!(
        out,
        "\ncluster {} ({}): {}, {} exported or federated, {} not exported, {} ({ready} ready)",
        c.name,
        if c.local { "local" } else { "remote" },
        plural(c.files, "file"),
        plural(objects.services.len(), "service"),
        c.not_exported,
        plural(endpoints, "endpoint"),
    );
    if let Some(gw) = &objects.gateway {
        let addrs: Vec<String> = gw.addresses.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "  gateway {} port {}",
            if addrs.is_empty() {
                "(no address)".to_owned()
            } else {
                addrs.join(",")
            },
            gw.port.map_or("(none)".to_owned(), |p| p.to_string())
        );
    }
    for (key, svc) in &objects.services {
        service_line(out, objects, key, svc);
    }
    for m in objects.mirrors.values() {
        let ips: Vec<String> = m.cluster_ips.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "  mirror {} of cluster {} clusterIP {}",
            m.key,
            m.cluster,
            ips.join(",")
        );
    }
    for e in entries
        .iter()
        .filter(|e| matches!(&e.origin, Origin::Cluster { name, .. } if *name == c.name))
    {
        let _ = writeln!(out, "  name {}. {}", e.name, describe_entry(e));
    }
    for (kind, n) in &c.skipped {
        let _ = writeln!(out, "  skipped {n} × {kind}");
    }
}

/// `check`'s line about one service of a cluster.
fn service_line(out: &mut String, objects: &ClusterObjects, key: &ObjectKey, svc: &Service) {
    let mode = match (svc.export, svc.federated) {
        (Some(m), true) => format!("{}+federated", m.as_str()),
        (Some(m), false) => m.as_str().to_owned(),
        (None, _) => "federated".to_owned(),
    };
    let ports: Vec<String> = svc.ports.iter().map(ToString::to_string).collect();
    let eps: Vec<&Endpoint> = objects
        .slices
        .values()
        .filter(|s| s.key.namespace == key.namespace && s.service == key.name)
        .flat_map(|s| s.endpoints.iter())
        .collect();
    let ready = eps.iter().filter(|e| e.ready).count();
    let _ = writeln!(
        out,
        "  service {key} {mode}{} ports {} endpoints {ready}/{} ready",
        if svc.headless { " headless" } else { "" },
        if ports.is_empty() {
            "-".to_owned()
        } else {
            ports.join(",")
        },
        eps.len()
    );
}

fn dump(config: &Config) -> anyhow::Result<ExitCode> {
    let (load, snap) = load_model(config)?;
    let mut errors = 0;
    for p in load.all_problems() {
        eprintln!("{p}");
        errors += usize::from(p.severity == Severity::Error);
    }
    print!("{}", zonefile::dump(&snap));
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests;
