//! kubesim at scale: 100,000 EndpointSlices across three clusters, 100 concurrent watchers on
//! one resource, and the time from a write to its event at every watcher, over TLS on loopback
//! with kube-rs clients.
//!
//! `cargo bench --bench kubesim_watch` runs the full size; `cargo test` runs it small, as a
//! smoke test that the harness still works. Sizes can be overridden with `KUBESIM_BENCH_SLICES`,
//! `KUBESIM_BENCH_WATCHERS` and `KUBESIM_BENCH_UPDATES`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use tokio::sync::Mutex;

fn size(var: &str, full: usize, smoke: usize, bench: bool) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { full } else { smoke })
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

async fn client(cluster: &kubesim::Cluster) -> Client {
    let text = std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn slice(i: usize) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = (0..10)
        .map(|e| json!({"addresses": [format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, (i + e) % 256)],
                        "conditions": {"ready": true}, "hostname": format!("pod-{e}")}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{i}-abcde"), "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .expect("slice")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let slices = size("KUBESIM_BENCH_SLICES", 100_000, 600, bench);
    let watchers = size("KUBESIM_BENCH_WATCHERS", 100, 5, bench);
    let updates = size("KUBESIM_BENCH_UPDATES", 200, 10, bench);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(slices, watchers, updates));
}

async fn run(slices: usize, watchers: usize, updates: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = kubesim::SimConfig::new(["east", "west", "north"], dir.path());
    // History large enough that loading does not expire the watchers' starting point.
    config.settings.store.history = 10_000;
    let sim = kubesim::start(config).await.expect("kubesim");
    println!(
        "kubesim_watch: {slices} EndpointSlices over 3 clusters, {watchers} watchers, {updates} updates"
    );

    // Load.
    let rss_before = rss_bytes();
    let clients: Vec<Client> = stream::iter(sim.clusters())
        .then(|c| client(c))
        .collect()
        .await;
    let started = Instant::now();
    let results: Vec<bool> = stream::iter(0..slices)
        .map(|i| {
            let api: Api<EndpointSlice> =
                Api::namespaced(clients[i % clients.len()].clone(), "default");
            async move { api.create(&PostParams::default(), &slice(i)).await.is_ok() }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let load = started.elapsed();
    let failed = results.iter().filter(|ok| !**ok).count();
    assert_eq!(failed, 0, "every create succeeded");
    let stored: usize = sim
        .clusters()
        .iter()
        .map(|c| c.store().count(kubesim::resources::ENDPOINTSLICES))
        .sum();
    assert_eq!(stored, slices);
    let rss_after = rss_bytes();
    println!(
        "load: {slices} creates in {:.2} s ({:.0}/s, 64 in flight); RSS +{} MiB ({} bytes per slice of 10 endpoints, kubesim and clients together)",
        load.as_secs_f64(),
        slices as f64 / load.as_secs_f64(),
        (rss_after.saturating_sub(rss_before)) / (1 << 20),
        rss_after.saturating_sub(rss_before) / slices.max(1) as u64
    );

    // Watchers on east's EndpointSlices, all from the current resourceVersion.
    let east = sim.cluster("east").expect("east");
    let rv = east.store().resource_version().to_string();
    let api: Api<EndpointSlice> = Api::namespaced(clients[0].clone(), "default");
    let target = "svc-0-abcde";
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; updates]));
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(watchers);
    for _ in 0..watchers {
        let api = api.clone();
        let rv = rv.clone();
        let sent = sent.clone();
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().timeout(290), &rv)
                .await
                .expect("watch")
                .boxed();
            let _ = ready.send(()).await;
            let mut latencies = Vec::new();
            let mut received = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(120);
            while latencies.len() < updates && Instant::now() < deadline {
                let Ok(Some(Ok(event))) =
                    tokio::time::timeout(Duration::from_secs(30), stream.next()).await
                else {
                    break;
                };
                let at = Instant::now();
                if let WatchEvent::Modified(s) = &event
                    && let Some(rv) = s
                        .metadata
                        .resource_version
                        .as_ref()
                        .and_then(|v| v.parse::<u64>().ok())
                {
                    received.push((rv, at));
                }
                if let WatchEvent::Modified(s) = event
                    && s.metadata.name.as_deref() == Some(target)
                    && let Some(n) = s
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("bench"))
                        .and_then(|v| v.parse::<usize>().ok())
                    && let Some(Some(t0)) = sent.lock().await.get(n).copied()
                {
                    latencies.push(at - t0);
                }
            }
            (latencies, received)
        }));
    }
    drop(ready_tx);
    for _ in 0..watchers {
        ready_rx.recv().await.expect("watcher started");
    }
    // Each watch request has been answered; give the server a moment to register the last ones.
    while east.request_count("watch", "endpointslices.discovery.k8s.io") < watchers as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Commit times, from an in-process subscriber to east's changes.
    let mut commits_rx = east.subscribe();
    let commits = tokio::spawn(async move {
        // The patches are the only writes to east in this phase: stop after the last one.
        let mut at = std::collections::HashMap::new();
        while at.len() < updates {
            let Ok(Ok(change)) =
                tokio::time::timeout(Duration::from_secs(30), commits_rx.recv()).await
            else {
                break;
            };
            at.insert(change.rv, Instant::now());
        }
        at
    });
    let mut round_trips = Vec::new();
    for n in 0..updates {
        let patch = json!({"metadata": {"labels": {"bench": n.to_string()}}});
        let t0 = Instant::now();
        sent.lock().await[n] = Some(t0);
        api.patch(target, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        round_trips.push(t0.elapsed());
        // Spaced writes: this measures delivery latency, not queueing behind a burst.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut all = Vec::new();
    let mut received = Vec::new();
    for t in tasks {
        let (latencies, got) = t.await.expect("watcher task");
        all.extend(latencies);
        received.extend(got);
    }
    let commit_at = commits.await.expect("commit recorder");
    let mut from_commit: Vec<Duration> = received
        .iter()
        .filter_map(|(rv, at)| commit_at.get(rv).map(|c| at.saturating_duration_since(*c)))
        .collect();
    assert_eq!(
        from_commit.len(),
        watchers * updates,
        "every event matched its commit"
    );
    from_commit.sort();
    assert_eq!(
        all.len(),
        watchers * updates,
        "every watcher saw every update"
    );
    all.sort();
    round_trips.sort();
    println!(
        "write → event at each of {watchers} watchers ({} samples): p50 {:?}  p99 {:?}  max {:?}",
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default()
    );
    println!(
        "commit → event decoded by each of {watchers} kube-rs watchers: p50 {:?}  p99 {:?}  max {:?}",
        percentile(&from_commit, 0.5),
        percentile(&from_commit, 0.99),
        from_commit.last().copied().unwrap_or_default()
    );
    println!(
        "merge-patch round trip (TLS, kube-rs): p50 {:?}  p99 {:?}",
        percentile(&round_trips, 0.5),
        percentile(&round_trips, 0.99)
    );
}
