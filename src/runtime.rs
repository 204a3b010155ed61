//! The `serve` process: wires sources, the model task, the DNS listeners and
//! the admin server together, and shuts them down.
//!
//! Owns the single writer of the model (the model task) and the published
//! snapshot. Sockets are bound by the caller ([`Sockets::bind`], or a test
//! binding port 0) and handed in.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::config::Config;
use crate::dns::Handler;
use crate::dns::journal::Journal;
use crate::dns::server::{ConnectionSlots, bind_dns, serve_tcp, serve_tls, serve_udp};
use crate::dns::stats::DnsStats;
use crate::dns::tls;
use crate::k8s::layer::DEFAULT_MAX_INFLIGHT;
use crate::mirror::feed::{self as mirror_feed, Changed};
use crate::mirror::run::MirrorConfig;
use crate::model::{Epoch, Model, Settings, Snapshot};
use crate::propagation::Pending;
use crate::source::SourceMsg;
use crate::source::feed::{Feed, FeedTx, Round};
use crate::source::live::{self, LiveConfig};
use crate::source::watch::{self, FileSource};

use crate::metrics::{ModelView, ModelViews, Shared, ViewRequests};

/// Pre-bound sockets for the server.
#[derive(Debug)]
pub struct Sockets {
    /// DNS over UDP and TCP (same port); `None` for the mirror controller
    /// alone.
    pub dns: Option<(std::net::UdpSocket, std::net::TcpListener)>,
    /// DNS over TLS, when enabled.
    pub tls: Option<std::net::TcpListener>,
    /// Admin HTTP.
    pub admin: std::net::TcpListener,
}

impl Sockets {
    /// Binds DNS (UDP and TCP on one port) and admin addresses.
    pub fn bind(dns: SocketAddr, admin: SocketAddr) -> std::io::Result<Self> {
        let dns = bind_dns(dns)?;
        let mut s = Self::admin_only(admin)?;
        s.dns = Some(dns);
        Ok(s)
    }

    /// Binds the admin address only (`clusterset-dns mirror`).
    pub fn admin_only(admin: SocketAddr) -> std::io::Result<Self> {
        let admin = std::net::TcpListener::bind(admin)?;
        admin.set_nonblocking(true)?;
        Ok(Self {
            dns: None,
            tls: None,
            admin,
        })
    }

    /// Also binds DNS over TLS on `addr`.
    pub fn with_tls(mut self, addr: SocketAddr) -> std::io::Result<Self> {
        let tls = std::net::TcpListener::bind(addr)?;
        tls.set_nonblocking(true)?;
        self.tls = Some(tls);
        Ok(self)
    }
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Where DNS is served (UDP and TCP).
    pub dns_addr: SocketAddr,
    /// Where DNS over TLS is served, when enabled.
    pub tls_addr: Option<SocketAddr>,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    /// Shared state, for tests and the admin server.
    pub shared: Arc<Shared>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    settings: Arc<tokio::sync::watch::Sender<Arc<Settings>>>,
}

/// Number of UDP workers: the CPUs this process may run on (its affinity
/// mask and CPU quota), so a server pinned to one core runs one.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// How often the DNS-over-TLS certificate files are checked for a change.
const TLS_RELOAD_EVERY: Duration = Duration::from_secs(2);

/// The server's sockets, made async, and the addresses they are bound to.
struct Listeners {
    admin: tokio::net::TcpListener,
    admin_addr: SocketAddr,
    dns: Option<(std::net::UdpSocket, tokio::net::TcpListener)>,
    dns_addr: SocketAddr,
    tls: Option<(tokio::net::TcpListener, Arc<tls::CertStore>)>,
    tls_addr: Option<SocketAddr>,
}

impl Listeners {
    /// A certificate that cannot be used stops the start, naming the file.
    fn new(sockets: Sockets, config: &Config) -> std::io::Result<Self> {
        let admin_addr = sockets.admin.local_addr()?;
        let admin = tokio::net::TcpListener::from_std(sockets.admin)?;
        let dns = match sockets.dns {
            Some((udp, tcp)) => Some((udp, tokio::net::TcpListener::from_std(tcp)?)),
            None => None,
        };
        let dns_addr = match &dns {
            Some((udp, _)) => udp.local_addr()?,
            None => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        let tls = match (sockets.tls, &config.tls) {
            (Some(listener), Some(options)) => {
                let store = tls::CertStore::load(&options.files).map_err(invalid_input)?;
                Some((
                    tokio::net::TcpListener::from_std(listener)?,
                    Arc::new(store),
                ))
            }
            _ => None,
        };
        let tls_addr = match &tls {
            Some((listener, _)) => Some(listener.local_addr()?),
            None => None,
        };
        Ok(Self {
            admin,
            admin_addr,
            dns,
            dns_addr,
            tls,
            tls_addr,
        })
    }
}

fn invalid_input(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
}

/// Starts the source's tasks; returns what it reads, for the log.
fn spawn_source(
    tasks: &mut JoinSet<()>,
    (source, config): (SourceSetup, &Config),
    (tx, settings): (FeedTx, tokio::sync::watch::Receiver<Arc<Settings>>),
    shared: &Shared,
    shutdown: &CancellationToken,
) -> std::io::Result<String> {
    match source {
        SourceSetup::Files => {
            let zones = config
                .zones
                .clone()
                .ok_or_else(|| invalid_input("no zones directory"))?;
            let origin = format!("zones {}", zones.display());
            let source = FileSource::new(zones, config.local_cluster.clone(), shared.board.clone());
            tasks.spawn(watch::run(source, tx, settings, shutdown.clone()));
            Ok(origin)
        }
        SourceSetup::Live(live_config) => {
            // The test harness builds the live source without options.
            let max_inflight = config
                .live
                .as_ref()
                .map_or(DEFAULT_MAX_INFLIGHT, |l| l.max_inflight_per_cluster);
            tasks.spawn(live::run(
                *live_config,
                max_inflight,
                tx,
                shared.board.clone(),
                settings,
                shutdown.clone(),
            ));
            Ok("live".to_owned())
        }
    }
}

/// UDP and TCP listeners of one address, and DNS over TLS with its store.
type DnsListeners = (
    (std::net::UdpSocket, tokio::net::TcpListener),
    Option<(tokio::net::TcpListener, Arc<tls::CertStore>)>,
);

/// Starts the DNS tasks: UDP workers, the TCP loop, and DNS over TLS with
/// its certificate watch.
fn spawn_dns(
    tasks: &mut JoinSet<()>,
    config: &Config,
    ((udp, tcp), tls): DnsListeners,
    (stats, journal): (&Arc<DnsStats>, &Arc<Journal>),
    shared: &Shared,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let handler = Arc::new(
        Handler::new(
            shared.snapshot.clone(),
            stats.clone(),
            config.answer_cache_bytes,
        )
        .with_journal(journal.clone()),
    );
    tasks.spawn(crate::dns::notify::run(
        (shared.snapshot.clone(), journal.clone()),
        stats.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(serve_udp(udp, handler.clone(), workers(), shutdown.clone()));
    let slots = ConnectionSlots::new(&config.limits);
    tasks.spawn(serve_tcp(
        tcp,
        handler.clone(),
        config.limits,
        slots.clone(),
        shutdown.clone(),
    ));
    let Some((listener, store)) = tls else {
        return Ok(());
    };
    let server_config = tls::server_config(store.clone()).map_err(invalid_input)?;
    let reloads = stats.clone();
    tasks.spawn(tls::watch(
        store,
        TLS_RELOAD_EVERY,
        shutdown.clone(),
        move |outcome| match outcome {
            Ok(changed) => {
                if changed {
                    reloads.tls_reload(true);
                }
            }
            Err(_) => reloads.tls_reload(false),
        },
    ));
    tasks.spawn(serve_tls(
        listener,
        tokio_rustls::TlsAcceptor::from(server_config),
        handler,
        config.limits,
        slots,
        shutdown.clone(),
    ));
    Ok(())
}

fn log_serving(
    dns_addr: SocketAddr,
    tls: Option<SocketAddr>,
    admin_addr: SocketAddr,
    origin: &str,
) {
    match tls {
        Some(tls_addr) => info!(%dns_addr, %tls_addr, %admin_addr, source = %origin, "serving"),
        None => info!(%dns_addr, %admin_addr, source = %origin, "serving"),
    }
}

/// Where cluster state comes from.
#[derive(Debug)]
pub enum SourceSetup {
    /// The zones directory of `config`.
    Files,
    /// Live watches.
    Live(Box<LiveConfig>),
}

impl Server {
    /// Starts serving the zones directory of `config` on `sockets`.
    pub fn start(config: &Config, sockets: Sockets) -> std::io::Result<Self> {
        Self::start_with(config, sockets, SourceSetup::Files)
    }

    /// Starts serving `config` on `sockets`, fed by `source`.
    pub fn start_with(
        config: &Config,
        sockets: Sockets,
        source: SourceSetup,
    ) -> std::io::Result<Self> {
        Self::start_full(config, sockets, source, None)
    }

    /// Starts serving `config` on `sockets`, fed by `source`, with the
    /// mirror controller when `mirror` is given.
    pub fn start_full(
        config: &Config,
        sockets: Sockets,
        source: SourceSetup,
        mirror: Option<MirrorConfig>,
    ) -> std::io::Result<Self> {
        let listeners = Listeners::new(sockets, config)?;
        let stats = Arc::new(DnsStats::default());
        let mut model = Model::new(
            config.settings.clone(),
            Epoch::new(Instant::now(), SystemTime::now()),
        );
        let (views, view_requests) = ModelViews::channel();
        let journal = Arc::new(Journal::default());
        let shared = Arc::new(Shared {
            journal: journal.clone(),
            ..Shared::new(model.publish(), stats.clone(), views)
        });
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();

        let (feed, tx) = Feed::new();
        let (settings_tx, settings_rx) = tokio::sync::watch::channel(config.settings.clone());
        let to_mirror = mirror.map(|m| {
            let (feed_tx, feed_rx) = mirror_feed::channel();
            // The settings too: the mirror follows a reloaded local place.
            tasks.spawn(crate::mirror::run::run(
                m,
                (feed_rx, settings_rx.clone()),
                shared.mirror.clone(),
                shutdown.clone(),
            ));
            feed_tx
        });
        let published = spawn_journal(&mut tasks, &journal, &stats);
        tasks.spawn(model_task(
            model,
            feed,
            settings_rx.clone(),
            (shared.clone(), published),
            (to_mirror, view_requests),
            shutdown.clone(),
        ));
        let origin = spawn_source(
            &mut tasks,
            (source, config),
            (tx, settings_rx),
            &shared,
            &shutdown,
        )?;
        let Listeners {
            admin,
            admin_addr,
            dns,
            dns_addr,
            tls,
            tls_addr,
        } = listeners;
        if let Some(dns) = dns {
            spawn_dns(
                &mut tasks,
                config,
                (dns, tls),
                (&stats, &journal),
                &shared,
                &shutdown,
            )?;
        }
        let (s, token) = (shared.clone(), shutdown.clone());
        tasks.spawn(async move {
            if let Err(e) = crate::admin::serve(admin, s, token).await {
                error!(error = %e, "admin server failed");
            }
        });
        log_serving(dns_addr, tls_addr, admin_addr, &origin);
        Ok(Self {
            dns_addr,
            tls_addr,
            admin_addr,
            shared,
            shutdown,
            tasks,
            settings: Arc::new(settings_tx),
        })
    }

    /// Waits until a task ends on its own (which is a failure) or the token
    /// is cancelled.
    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.tasks.join_next() => error!("a server task ended unexpectedly"),
            () = self.shutdown.cancelled() => {}
        }
    }

    /// A handle that makes the server answer under new settings (a
    /// configuration reload): every name is rebuilt by the model task while
    /// queries go on being answered from the current snapshot.
    pub fn settings_handle(&self) -> SettingsHandle {
        SettingsHandle(self.settings.clone())
    }

    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops every task and waits for them (at most 5 s).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .is_err()
        {
            self.tasks.abort_all();
        }
    }
}

/// Swaps the answer settings of a running server ([`Server::settings_handle`]).
#[derive(Debug, Clone)]
pub struct SettingsHandle(Arc<tokio::sync::watch::Sender<Arc<Settings>>>);

impl SettingsHandle {
    /// Answers under `settings` from now on (no-op when they are equal).
    pub fn set(&self, settings: Arc<Settings>) {
        self.0.send_if_modified(|current| {
            if **current == *settings {
                return false;
            }
            *current = settings;
            true
        });
    }

    /// The settings last set.
    pub fn get(&self) -> Arc<Settings> {
        self.0.borrow().clone()
    }
}

/// Where the model task hands the mirror controller each new state.
type MirrorFeed = mirror_feed::FeedTx;

/// Events each cluster's queue gives the model per round: a cluster in a
/// churn storm gives this many, then every other cluster with work gets its
/// turn before the next snapshot is published. A round is not interrupted,
/// so this bounds how long another cluster's change waits behind a storm:
/// one endpoint change is applied and published in tens of microseconds
/// (`cargo bench --bench index_scale`: p50 27 µs), so 32 keep a round near
/// a millisecond at most.
const QUANTUM: usize = 32;

/// Closes the feed when the model task ends, however it ends, so sources
/// stop.
struct CloseOnDrop(Arc<Feed>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Starts the IXFR journal's task; returns where to send it every
/// published snapshot, in order.
fn spawn_journal(
    tasks: &mut JoinSet<()>,
    journal: &Arc<Journal>,
    stats: &Arc<DnsStats>,
) -> UnboundedSender<Arc<Snapshot>> {
    let (published, to_journal) = tokio::sync::mpsc::unbounded_channel();
    tasks.spawn(crate::dns::journal::run(
        journal.clone(),
        to_journal,
        stats.clone(),
    ));
    published
}

/// The one writer of the model: applies what the sources queued, a round
/// of every cluster's queue at a time, and publishes a snapshot after each
/// round; also the clock tick, settings reloads, and between rounds the
/// cluster state for whoever asks (`/debug/name`).
async fn model_task(
    mut model: Model,
    feed: Arc<Feed>,
    mut settings: tokio::sync::watch::Receiver<Arc<Settings>>,
    (shared, published): (Arc<Shared>, UnboundedSender<Arc<Snapshot>>),
    (mirror, mut views): (Option<MirrorFeed>, ViewRequests),
    shutdown: CancellationToken,
) {
    let _close = CloseOnDrop(feed.clone());
    if mirror.is_some() {
        model.track_changes();
    }
    // Whether the mirror has had its first (full) state.
    let mut mirror_started = false;
    let mut initial_done = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut work = true;
    let mut propagated = Pending::default();
    loop {
        // (names changed, the mirror should look again)
        let (changed, mirror_due) = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            Some(reply) = views.next() => {
                // The snapshot published last is the one that matches the
                // state: a batch that changed no name publishes none.
                let _ = reply.send(ModelView {
                    snapshot: shared.snapshot.load_full(),
                    clusters: model.clusters().clone(),
                });
                continue;
            }
            Ok(()) = settings.changed() => {
                let new = settings.borrow_and_update().clone();
                let started = Instant::now();
                let rebuilt = model.set_settings(new, started);
                if rebuilt {
                    info!(took_ms = started.elapsed().as_millis() as u64, "answering under the reloaded settings");
                }
                // Published either way: the DNS path reads the settings
                // the names do not (who may transfer the zone) from it.
                (true, false)
            }
            _ = tick.tick() => {
                let c = model.tick(Instant::now());
                (c, c)
            }
            () = feed.wait(), if !work => {
                work = true;
                continue;
            }
            () = std::future::ready(()), if work => {
                let round = feed.take(QUANTUM);
                if round.is_empty() {
                    work = false;
                    continue;
                }
                let (changed, known) = apply_round(&mut model, round, &mut propagated);
                initial_done |= known;
                // Let the sockets and the sources run between rounds.
                tokio::task::yield_now().await;
                (changed, changed || known)
            }
        };
        if changed {
            let snap = model.publish();
            shared.snapshot.store(snap.clone());
            // Gone only at shutdown.
            let _ = published.send(snap);
        }
        // Measured once the answers say it: the wall clock is the one the
        // remote trigger times are compared with.
        propagated.publish(&shared.propagation, model.clusters(), SystemTime::now());
        if let Some(feed) = &mirror {
            send_to_mirror(
                feed,
                &mut model,
                mirror_due && initial_done,
                &mut mirror_started,
            );
        }
        let ready = initial_done
            && model
                .clusters()
                .iter()
                .all(|c| c.health.synced || c.health.sync_given_up);
        if ready != shared.ready.swap(ready, Ordering::AcqRel) && ready {
            info!("ready: every cluster has loaded");
            crate::memory::steady();
        }
    }
}

/// Hands the mirror the model's state (an O(1) clone sharing every node)
/// and what changed since the last send; the first send says everything
/// did. Before `due` the changes keep accumulating in the model. A batch
/// that changed mirror inputs but no name is sent too.
fn send_to_mirror(feed: &MirrorFeed, model: &mut Model, due: bool, started: &mut bool) {
    if !due && !*started {
        return;
    }
    let dirty = model.take_changes();
    let changed = if *started {
        if !due && dirty.is_empty() {
            return;
        }
        Changed::Some(dirty)
    } else {
        *started = true;
        Changed::All
    };
    feed.send(model.clusters().clone(), changed, Instant::now());
}

/// Applies one round: control first (clusters coming and going, "every
/// cluster is known"), then the queued object events, noting their trigger
/// times into `propagated`. Returns whether any name changed and whether
/// every cluster is now known.
fn apply_round(model: &mut Model, round: Round, propagated: &mut Pending) -> (bool, bool) {
    // One moment and, unless "every cluster is known" falls in between, one
    // refresh of the index for the whole round, control events first.
    let now = Instant::now();
    let (mut changed, mut known) = (false, false);
    let mut events = Vec::new();
    for msg in round.control {
        match msg {
            SourceMsg::Events(more) => events.extend(more),
            // Names no cluster could hold stop being SERVFAIL, and the
            // mirror may start (before, a cluster not yet announced would
            // look unlinked).
            SourceMsg::ClustersKnown => {
                propagated.note(&events);
                changed |= model.apply(std::mem::take(&mut events), now);
                known = true;
                changed |= model.clusters_known(now);
            }
        }
    }
    events.extend(round.events);
    propagated.note(&events);
    changed |= model.apply(events, now);
    (changed, known)
}

#[cfg(test)]
mod tests;
