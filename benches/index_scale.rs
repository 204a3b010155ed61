//! Index scale (issue 6): the numbers at 1,000,000 endpoints.
//!
//! ```text
//! cargo bench --bench index_scale [-- --endpoints 1000000 --changes 1000]
//! cargo bench --bench index_scale -- --keep DIR   # only writes the data set to DIR
//! cargo test --bench index_scale      # smoke: 20,000 endpoints, debug build
//! ```
//!
//! 1. **Generate** `--endpoints` ready endpoints in the file-source format: four clusters,
//!    services of 100 endpoints in one EndpointSlice each (the Kubernetes default maximum),
//!    half of them StatefulSets (headless, a pod name per endpoint), half ClusterIP; one in
//!    ten also a federated member.
//! 2. **Load and memory**: the server binary (`clusterset-dns serve`) on that directory: time
//!    from start to `/ready` (everything parsed, indexed and published), and its resident
//!    memory then, minus the same binary's on an empty directory, per endpoint.
//! 3. **One change**: in this process, the model of the same directory; `--changes` single
//!    endpoint changes, each applied and published as a new snapshot (the model task's work
//!    for one watch event), timed one by one. Meanwhile a second thread answers queries from
//!    whatever snapshot is published, and its slowest answer is reported next to its slowest
//!    while nothing changes: the queries never wait for the writer. A third run of the
//!    changes with nothing querying gives the writer's own p99 (on two cores the query
//!    thread and the rest of the machine otherwise share its tail). As in the server, the
//!    allocator returns freed memory at once while loading and keeps it once loaded
//!    (`clusterset_dns::memory`); a hundred untimed changes of other slices warm the
//!    writer up first, as the query thread's first answers are not timed either.
//!
//! 4. **Sizes**: load time and memory as in 2, at 100,000, 250,000, 500,000,
//!    1,000,000 and 2,000,000 endpoints (`--sizes a,b,…`), printed side by
//!    side and drawn: into `docs/index_scale.svg` (docs/performance.md's picture)
//!    by a full run of the default sizes, else into Cargo's bench temporary
//!    directory (the path is printed).
//! 5. **A big service**: one federated headless service of 10,000 endpoints
//!    in each of the four clusters, with small services beside it; single
//!    endpoint changes of it timed as in 3, and queries of other names.
//!
//! Prints tables and `RESULT key=value` lines. With `INDEX_SCALE_REVERSE=1` the
//! in-process model of 3 and 5 also serves `10.in-addr.arpa` (PTR names for every
//! address), as `--reverse-zone` makes the server do.

mod zonegen;

/// The server binary's allocator, so the in-process model is timed as the server runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;

use clusterset_dns::dns::stats::DnsStats;
use clusterset_dns::dns::{Handler, Local, Transport};
use clusterset_dns::model::objects::{
    Endpoint, ExportMode, Family, ObjectKey, Port, Protocol, Service, Slice,
};
use clusterset_dns::model::{Epoch, Event, Health, Model, Settings};
use clusterset_dns::source::file::{initial_events, load_dir};
use clusterset_dns::vocab::name::ZoneName;
use zonegen::{CLUSTERS, generate};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--bench") && a != "--test" && a != "--nocapture")
        .collect();
    let arg = |key: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == key)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    // Under `cargo test` (a debug build), a small run that only checks it works.
    let smoke = cfg!(debug_assertions);
    let endpoints = arg("--endpoints", if smoke { 20_000 } else { 1_000_000 });
    let changes = arg("--changes", if smoke { 100 } else { 1_000 });

    if let Some(keep) = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
    {
        // For profiling the server by hand on the same data.
        generate(Path::new(keep), endpoints);
        println!("generated the data set in {keep}");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let t = Instant::now();
    let services = generate(&dir.path().join("zones"), endpoints);
    println!(
        "generated {endpoints} endpoints in {services} services in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("west")).expect("empty zones");
    let (_, rss_empty) = serve_until_ready(&empty);
    let (load, rss_full) = serve_until_ready(&dir.path().join("zones"));
    let per_endpoint = rss_full.saturating_sub(rss_empty) as f64 / endpoints as f64;

    let sweep = sizes(
        &args,
        if smoke {
            &[5_000, 20_000]
        } else {
            &[100_000, 250_000, 500_000, 1_000_000, 2_000_000]
        },
        endpoints,
        (load, rss_full),
        rss_empty,
    );
    // `docs/index_scale.svg` (the picture in docs/performance.md) is drawn
    // only by a full run: a release build over the default sizes. A smoke run
    // or a `--sizes` run draws its own into Cargo's temporary directory for
    // benches, so that a partial run never replaces the full picture.
    let full = !smoke && !args.iter().any(|a| a == "--sizes");
    let svg = if full {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/index_scale.svg")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("index_scale.svg")
    };
    draw(&sweep, &svg);
    if full {
        println!("drew {}", svg.display());
    } else {
        println!(
            "drew {} (not a full run: docs/index_scale.svg left as it is)",
            svg.display()
        );
    }

    let change = changes_and_queries(file_setup(&dir.path().join("zones"), changes), changes);
    let big = changes_and_queries(big_setup(if smoke { 1_000 } else { 10_000 }), changes);

    let c = &change;
    println!();
    println!("{endpoints} endpoints ({services} services, 4 clusters)");
    println!();
    println!(
        "| measure                                   | measured                              | target    |"
    );
    println!(
        "|-------------------------------------------|---------------------------------------|-----------|"
    );
    let row = |what: &str, measured: String, target: &str| {
        println!("| {what:<41} | {measured:<37} | {target:<9} |");
    };
    row(
        "load from files to /ready",
        format!("{:.2} s", load.as_secs_f64()),
        "< 10 s",
    );
    row(
        "resident memory per endpoint",
        format!(
            "{per_endpoint:.0} B ({} MiB)",
            rss_full.saturating_sub(rss_empty) >> 20
        ),
        "< 300 B",
    );
    change_rows(&row, "", c);
    let big_size = if smoke { 1_000 } else { 10_000 };
    change_rows(
        &row,
        &format!("big service ({big_size} × 4 clusters, federated headless): "),
        &big,
    );
    println!(
        "({} and {} queries answered during two runs of {changes} changes; RSS {} MiB loaded, {} MiB empty)",
        c.unrelated.count,
        c.same.count,
        rss_full >> 20,
        rss_empty >> 20,
    );
    println!(
        "RESULT endpoints={endpoints} load_s={:.2} rss_bytes={rss_full} rss_empty_bytes={rss_empty} \
         bytes_per_endpoint={per_endpoint:.0} change_p50_us={:.1} change_p99_us={:.1} change_max_us={:.1} \
         query_p999_idle_us={:.1} query_p999_unrelated_us={:.1} query_p999_same_us={:.1} \
         change_alone_p99_us={:.1} big_endpoints_per_cluster={big_size} big_change_p50_us={:.1} big_change_p99_us={:.1} big_change_max_us={:.1} \
         big_change_alone_p99_us={:.1} \
         big_query_p999_idle_us={:.1} big_query_p999_unrelated_us={:.1}",
        load.as_secs_f64(),
        c.apply_p50_us,
        c.apply_p99_us,
        c.apply_max_us,
        c.idle.p999,
        c.unrelated.p999,
        c.same.p999,
        c.alone_p99_us,
        big.apply_p50_us,
        big.apply_p99_us,
        big.apply_max_us,
        big.alone_p99_us,
        big.idle.p999,
        big.unrelated.p999,
    );
    assert!(
        c.unrelated.count > 0 && c.same.count > 0,
        "queries were answered during the changes"
    );
}

/// The table rows of one change run, each measure prefixed with `what`.
fn change_rows(row: &dyn Fn(&str, String, &str), what: &str, c: &ChangeReport) {
    row(
        &format!("{what}one endpoint change, applied + published"),
        format!(
            "p50 {:.0} / p99 {:.0} / max {:.0} µs",
            c.apply_p50_us, c.apply_p99_us, c.apply_max_us
        ),
        if what.is_empty() {
            "< 100 µs"
        } else {
            "< 1000 µs"
        },
    );
    row(
        &format!("{what}… the same, nothing querying"),
        format!("p99 {:.0} µs", c.alone_p99_us),
        "",
    );
    for (name, l) in [
        ("query, nothing changing", &c.idle),
        ("query of other names, while changing", &c.unrelated),
        ("query of the changing names", &c.same),
    ] {
        row(
            &format!("{what}{name}"),
            format!(
                "p50 {:.1} / p99.9 {:.1} / max {:.1} µs",
                l.p50, l.p999, l.max
            ),
            "",
        );
    }
}

/// Load time and memory at one size.
struct SizePoint {
    endpoints: usize,
    load: Duration,
    rss: u64,
    per_endpoint: f64,
}

/// Load and memory at each of `--sizes` (a comma list, else `default`),
/// the headline size's figures (`measured`) reused; prints a table and a
/// `RESULT size …` line per size.
fn sizes(
    args: &[String],
    default: &[usize],
    headline: usize,
    measured: (Duration, u64),
    rss_empty: u64,
) -> Vec<SizePoint> {
    let list: Vec<usize> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map_or_else(
            || default.to_vec(),
            |v| v.split(',').map(|n| n.parse().expect("a number")).collect(),
        );
    let mut points = Vec::new();
    for &n in &list {
        let (load, rss) = if n == headline {
            measured
        } else {
            let dir = tempfile::tempdir().expect("temp dir");
            generate(dir.path(), n);
            serve_until_ready(dir.path())
        };
        let per_endpoint = rss.saturating_sub(rss_empty) as f64 / n as f64;
        points.push(SizePoint {
            endpoints: n,
            load,
            rss,
            per_endpoint,
        });
    }
    println!();
    println!("| endpoints | load to /ready | resident memory | per endpoint |");
    println!("|-----------|----------------|-----------------|--------------|");
    for p in &points {
        println!(
            "| {:>9} | {:>12.2} s | {:>11} MiB | {:>10.0} B |",
            p.endpoints,
            p.load.as_secs_f64(),
            p.rss >> 20,
            p.per_endpoint
        );
        println!(
            "RESULT size endpoints={} load_s={:.2} rss_bytes={} bytes_per_endpoint={:.0}",
            p.endpoints,
            p.load.as_secs_f64(),
            p.rss,
            p.per_endpoint
        );
    }
    points
}

/// One measure of a [`SizePoint`], as drawn.
type Measure = dyn Fn(&SizePoint) -> f64;

/// Draws resident memory and load time against endpoints into `path`.
fn draw(points: &[SizePoint], path: &Path) {
    use plotters::prelude::*;
    let max_n = points.iter().map(|p| p.endpoints).max().unwrap_or(1) as f64 / 1e6;
    let max_mib = points.iter().map(|p| p.rss >> 20).max().unwrap_or(1) as f64;
    let max_s = points
        .iter()
        .map(|p| p.load.as_secs_f64())
        .fold(0.1, f64::max);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("picture directory");
    }
    let root = SVGBackend::new(path, (720, 360)).into_drawing_area();
    root.fill(&WHITE).expect("draw");
    let panels = root.split_evenly((1, 2));
    let mib = |p: &SizePoint| (p.rss >> 20) as f64;
    let secs = |p: &SizePoint| p.load.as_secs_f64();
    let series: [(&str, f64, &Measure); 2] = [
        ("resident memory (MiB)", max_mib, &mib),
        ("load to /ready (s)", max_s, &secs),
    ];
    for (panel, (label, top, value)) in panels.iter().zip(series) {
        let mut chart = ChartBuilder::on(panel)
            .caption(label, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..max_n * 1.05, 0f64..top * 1.15)
            .expect("chart");
        chart
            .configure_mesh()
            .x_desc("endpoints (millions)")
            .draw()
            .expect("mesh");
        let line: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.endpoints as f64 / 1e6, value(p)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), &BLUE))
            .expect("line");
        chart
            .draw_series(line.iter().map(|&xy| Circle::new(xy, 3, BLUE.filled())))
            .expect("points");
    }
    root.present().expect("write the picture");
    println!("(drawn into {})", path.display());
}

/// Kills the server when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the server binary on `zones`, waits for `/ready` (10 minutes at
/// most) and returns the time that took and the server's resident memory.
fn serve_until_ready(zones: &Path) -> (Duration, u64) {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(["serve", "--local-cluster", "west"])
        .arg("--zones")
        .arg(zones)
        .args(["--dns-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start clusterset-dns");
    let mut server = Server(child);
    let mut line = String::new();
    let stdout = server.0.stdout.take().expect("stdout");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the listening line");
    let admin: SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("admin="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no admin address in {line:?}"));
    let deadline = started + Duration::from_secs(600);
    while !ready(admin) {
        assert!(Instant::now() < deadline, "not ready within 10 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    // Let the process settle (the source's last bookkeeping) before reading.
    std::thread::sleep(Duration::from_millis(500));
    (took, rss(server.0.id()))
}

fn ready(admin: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&admin, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200")
}

/// VmRSS of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

struct ChangeReport {
    apply_p50_us: f64,
    apply_p99_us: f64,
    apply_max_us: f64,
    /// p99 of a run of the changes with nothing querying.
    alone_p99_us: f64,
    /// Other names, nothing changing.
    idle: Latencies,
    /// Other names, while changing.
    unrelated: Latencies,
    /// The changing names themselves.
    same: Latencies,
}

/// A model ready for the change runs: the slices to change (with the
/// cluster they are in), queries of the names they change, and queries of
/// names they do not touch.
struct ChangeSetup {
    model: Model,
    slices: Vec<(Arc<str>, Slice)>,
    /// Slices changed, untimed, before the runs: neither timed nor asked.
    warm: Vec<(Arc<str>, Slice)>,
    changed: Vec<Vec<u8>>,
    others: Vec<Vec<u8>>,
}

/// Loads `zones` into a model; the first slices of each cluster are changed,
/// as many others are asked about, and [`WARM_CHANGES`] more warm the
/// writer up.
fn file_setup(zones: &Path, changes: usize) -> ChangeSetup {
    // As the server's main does before its first load.
    clusterset_dns::memory::loading();
    let load = load_dir(zones, Some("west"), &Default::default()).expect("load zones");
    let mut model = new_model();
    model.apply(
        load.clusters.iter().flat_map(initial_events),
        Instant::now(),
    );
    model.clusters_known(Instant::now());
    // Per cluster: slices to change, and as many others to ask about.
    let per_cluster = changes / load.clusters.len() + 1;
    let mut setup = ChangeSetup {
        model,
        slices: Vec::new(),
        warm: Vec::new(),
        changed: Vec::new(),
        others: Vec::new(),
    };
    let warm_per_cluster = WARM_CHANGES / load.clusters.len();
    for c in &load.clusters {
        let mut all = c.objects.slices.iter();
        for (i, (key, slice)) in all.by_ref().take(2 * per_cluster).enumerate() {
            let packet = query(&format!(
                "{}-{}.{}.svc.clusterset.local",
                slice.service, c.name, key.namespace
            ));
            if i < per_cluster {
                setup.slices.push((c.name.clone(), slice.clone()));
                setup.changed.push(packet);
            } else {
                setup.others.push(packet);
            }
        }
        setup.warm.extend(
            all.take(warm_per_cluster)
                .map(|(_, slice)| (c.name.clone(), slice.clone())),
        );
    }
    setup
}

fn new_model() -> Model {
    let mut s = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    if std::env::var_os("INDEX_SCALE_REVERSE").is_some() {
        s.reverse_zones = vec![ZoneName::new("10.in-addr.arpa").expect("zone")];
    }
    let settings = Arc::new(s);
    Model::new(settings, Epoch::new(Instant::now(), SystemTime::now()))
}

/// The big-service case: one federated headless service (a StatefulSet) of
/// `per_cluster` endpoints in each of the four clusters, in EndpointSlices
/// of 100 (the Kubernetes default), beside 200 small services per cluster.
/// The big service's slices are changed; the small ones are the other names.
fn big_setup(per_cluster: usize) -> ChangeSetup {
    clusterset_dns::memory::loading();
    let mut model = new_model();
    let now = Instant::now();
    let ports: Arc<[Port]> = vec![Port {
        name: Some("peer".into()),
        protocol: Protocol::Tcp,
        port: 7000,
    }]
    .into();
    let mut setup = ChangeSetup {
        model: new_model(),
        slices: Vec::new(),
        warm: Vec::new(),
        changed: Vec::new(),
        others: Vec::new(),
    };
    let mut events = Vec::new();
    for (c, name) in CLUSTERS.iter().enumerate() {
        let cluster: Arc<str> = (*name).into();
        events.push(Event::ClusterUp {
            cluster: cluster.clone(),
            local: c == 0,
        });
        events.push(Event::Health {
            cluster: cluster.clone(),
            health: Health {
                synced: true,
                ..Health::default()
            },
        });
        let service = |ns: &str, svc: &str, headless: bool| Event::ServiceApplied {
            cluster: cluster.clone(),
            service: Service {
                key: ObjectKey::new(ns, svc),
                created: 1_700_000_000,
                export: Some(ExportMode::Flat),
                federated: headless,
                headless,
                cluster_ips: if headless {
                    Vec::new()
                } else {
                    vec![IpAddr::V4(Ipv4Addr::new(10, 96, c as u8, 1))]
                },
                ports: ports.to_vec(),
                publish_not_ready: false,
                opaque_ports: None,
                refused: false,
                mcs: None,
                locality: None,
                mcs_nearest: false,
                import_fields: Default::default(),
                exported_meta: None,
            },
        };
        let slice = |svc: &str, k: usize, from: usize, n: usize, host: bool| Slice {
            key: ObjectKey::new(if host { "big" } else { "small" }, &format!("{svc}-{k}")),
            service: svc.into(),
            family: Family::V4,
            ports: ports.clone(),
            endpoints: (from..from + n)
                .map(|i| Endpoint {
                    addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (c as u32) << 20 | i as u32)),
                    hostname: host.then(|| format!("big-{i}").into()),
                    ready: true,
                })
                .collect(),
        };
        events.push(service("big", "big", true));
        for k in 0..per_cluster.div_ceil(100) {
            let s = slice("big", k, k * 100, 100.min(per_cluster - k * 100), true);
            if k % 10 == 0 {
                setup.slices.push((cluster.clone(), s.clone()));
            } else if k % 10 == 5 && setup.warm.len() < WARM_CHANGES {
                setup.warm.push((cluster.clone(), s.clone()));
            }
            events.push(Event::SliceApplied {
                cluster: cluster.clone(),
                slice: s,
                trigger: None,
            });
        }
        setup
            .changed
            .push(query(&format!("big-{name}.big.svc.clusterset.local")));
        for i in 0..200 {
            let svc = format!("s{i}");
            events.push(service("small", &svc, false));
            events.push(Event::SliceApplied {
                cluster: cluster.clone(),
                slice: slice(&svc, 0, 100_000 + 10 * i, 10, false),
                trigger: None,
            });
            setup
                .others
                .push(query(&format!("{svc}-{name}.small.svc.clusterset.local")));
        }
    }
    model.apply(events, now);
    model.clusters_known(now);
    setup.model = model;
    setup
}

/// Changes applied, untimed, before the timed runs: a new writer's first
/// touches (code, the allocator's pages), as the query thread skips its
/// first answers. They change slices the runs neither change nor ask about,
/// so the timed changes still meet their own data cold.
const WARM_CHANGES: usize = 100;

/// Flips one endpoint's readiness in `slice`, the `round`-th time round
/// (a different endpoint each time, as a rolling update would), and returns
/// the event that says so.
fn flip(cluster: &Arc<str>, slice: &mut Slice, round: usize) -> Event {
    let n = slice.endpoints.len().max(1);
    if let Some(e) = Arc::make_mut(&mut slice.endpoints).get_mut(round % n) {
        e.ready = !e.ready;
    }
    Event::SliceApplied {
        cluster: cluster.clone(),
        slice: slice.clone(),
        trigger: None,
    }
}

/// Applies `changes` single-endpoint changes twice: once while another
/// thread asks names the changes do not touch, once while it asks the names
/// being changed.
fn changes_and_queries(setup: ChangeSetup, changes: usize) -> ChangeReport {
    let ChangeSetup {
        mut model,
        mut slices,
        mut warm,
        changed,
        others,
    } = setup;
    let published = Arc::new(ArcSwap::new(model.snapshot()));
    let handler = Handler::new(published.clone(), Arc::new(DnsStats::default()), 64 << 20);
    let idle = ask_for(
        &handler,
        &others,
        Duration::from_secs(1),
        &AtomicBool::new(false),
        &AtomicBool::new(false),
    );

    // As the server does once its first load is over.
    clusterset_dns::memory::steady();
    for (cluster, slice) in &mut warm {
        model.apply([flip(cluster, slice, 0)], Instant::now());
        published.store(model.snapshot());
    }

    // One run of the changes, timed one by one, while another thread asks
    // `asked` (nobody asks when it is empty).
    let mut phase = |asked: &[Vec<u8>]| {
        let (stop, warm) = (AtomicBool::new(false), AtomicBool::new(asked.is_empty()));
        let mut times = Vec::with_capacity(changes);
        let answered = std::thread::scope(|s| {
            let asking = (!asked.is_empty()).then(|| {
                s.spawn(|| ask_for(&handler, asked, Duration::from_secs(600), &stop, &warm))
            });
            let deadline = Instant::now() + Duration::from_secs(60);
            while !warm.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let count = slices.len();
            for i in 0..changes {
                let (cluster, slice) = &mut slices[i % count];
                let event = flip(cluster, slice, i / count);
                let t = Instant::now();
                model.apply([event], t);
                published.store(model.snapshot());
                times.push(t.elapsed());
            }
            stop.store(true, Ordering::Relaxed);
            asking.map(|a| a.join().expect("query thread"))
        });
        (answered, times)
    };
    let (unrelated, mut times) = phase(&others);
    let (same, more) = phase(&changed);
    times.extend(more);
    // Last, so that its slices, like those of the second run, were changed
    // before.
    let (_, mut alone) = phase(&[]);
    let (unrelated, same) = (
        unrelated.expect("queries were asked"),
        same.expect("queries were asked"),
    );
    times.sort();
    alone.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(times[((times.len() - 1) as f64 * q) as usize]);
    let alone_p99_us = us(alone[((alone.len() - 1) as f64 * 0.99) as usize]);
    ChangeReport {
        apply_p50_us: at(0.5),
        apply_p99_us: at(0.99),
        apply_max_us: at(1.0),
        alone_p99_us,
        idle,
        unrelated,
        same,
    }
}

/// Query latencies of one phase, in µs.
struct Latencies {
    count: u64,
    p50: f64,
    p999: f64,
    max: f64,
}

/// Answers `packets` round robin until `stop` or `limit`, timing each.
/// The first `WARM` answers (a new thread's first touches of everything)
/// are not timed, and `warm` is set once they are done.
fn ask_for(
    handler: &Handler,
    packets: &[Vec<u8>],
    limit: Duration,
    stop: &AtomicBool,
    warm: &AtomicBool,
) -> Latencies {
    const WARM: usize = 10_000;
    let mut local = Local::new(4096);
    let mut out = Vec::with_capacity(1232);
    for i in 0..WARM {
        assert!(handler.handle(
            &mut local,
            &packets[i % packets.len()],
            Transport::Udp,
            &mut out
        ));
    }
    warm.store(true, Ordering::Release);
    let start = Instant::now();
    let mut times: Vec<u32> = Vec::with_capacity(1 << 20);
    while !stop.load(Ordering::Relaxed) && start.elapsed() < limit && times.len() < 50_000_000 {
        let packet = &packets[times.len() % packets.len()];
        let t = Instant::now();
        assert!(handler.handle(&mut local, packet, Transport::Udp, &mut out));
        times.push(t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
    }
    times.sort_unstable();
    let at = |q: f64| {
        times
            .get(((times.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |&ns| f64::from(ns) / 1e3)
    };
    Latencies {
        count: times.len() as u64,
        p50: at(0.5),
        p999: at(0.999),
        max: at(1.0),
    }
}

/// An A query for `name` with EDNS (1232).
fn query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    q
}
