//! Criterion micro-benchmarks of the query path over the demo clusterset
//! (`zones/demo`): name parse, lookup, and a whole request answered into a
//! buffer, for the query mix the load benchmark uses — an A on a service
//! name, an SRV, an AAAA without data, an NXDOMAIN — once by the general
//! path (decode, answer, encode: `request`) and once from pre-encoded
//! responses (`cached`).
//!
//! Before measuring it checks the hot path's promise: answering a stored
//! response allocates nothing (a counting global allocator).
//!
//! `cargo bench --bench dns_micro` measures; `cargo test --bench dns_micro`
//! runs each once as a smoke test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use criterion::{Criterion, criterion_group, criterion_main};

use clusterset_dns::cli::load_model;
use clusterset_dns::config::{Config, ZoneArgs};
use clusterset_dns::dns::name::QName;
use clusterset_dns::dns::stats::DnsStats;
use clusterset_dns::dns::{Handler, Local, Transport};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A query for `name`/`qtype` with EDNS (1232), as CoreDNS forward sends.
fn query(name: &str, qtype: u16) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    // OPT: root, type 41, payload 1232, no options.
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    q
}

const MIX: [(&str, &str, u16); 4] = [
    ("A", "payments-north.shop.svc.clusterset.local", 1),
    (
        "SRV",
        "_http._tcp.payments-north.shop.svc.clusterset.local",
        33,
    ),
    (
        "AAAA nodata",
        "payments-north.shop.svc.clusterset.local",
        28,
    ),
    ("NXDOMAIN", "nothing-north.shop.svc.clusterset.local", 1),
];

fn handler(cache_bytes: u64) -> Handler {
    let zones = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("zones/demo");
    let config = Config::resolve_zone(&ZoneArgs {
        zones: Some(zones),
        local_cluster: Some("west".into()),
        ..ZoneArgs::default()
    })
    .expect("config");
    let (_, snapshot) = load_model(&config).expect("demo zones load");
    Handler::new(
        Arc::new(ArcSwap::new(snapshot)),
        Arc::new(DnsStats::default()),
        cache_bytes,
    )
}

fn benches(c: &mut Criterion) {
    let general = handler(0);
    let cached = handler(1 << 20);
    let mut out = Vec::with_capacity(1232);
    let mut want = Vec::with_capacity(1232);
    // As a UDP worker: its own rotation counter and front table.
    let local = &mut Local::new(4096);
    for (label, name, qtype) in MIX {
        let packet = query(name, qtype);
        // The answer is what the server would send: check it once, and the
        // cached response against the general path's (same header and size;
        // the order of a rotated RRset may differ, as the unit tests allow
        // for).
        assert!(general.handle(local, &packet, Transport::Udp, &mut want));
        assert!(want.len() > 12, "{label}: a reply");
        for _ in 0..2 {
            assert!(cached.handle(local, &packet, Transport::Udp, &mut out));
            assert_eq!(
                (&out[..12], out.len()),
                (&want[..12], want.len()),
                "{label}: cached"
            );
        }
        // Stored responses for every rotation, then: no allocation at all.
        for _ in 0..64 {
            cached.handle(local, &packet, Transport::Udp, &mut out);
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..1000 {
            cached.handle(local, &packet, Transport::Udp, &mut out);
        }
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocated, 0,
            "{label}: the hot path allocated {allocated} times"
        );
        for (path, handler) in [("request", &general), ("cached", &cached)] {
            c.bench_function(&format!("{path} {label}"), |b| {
                b.iter(|| {
                    out.clear();
                    handler.handle(local, black_box(&packet), Transport::Udp, &mut out)
                });
            });
        }
    }
    let packet = query(MIX[0].1, 1);
    let question = &packet[12..packet.len() - 11 - 4];
    c.bench_function("name parse", |b| {
        b.iter(|| QName::from_wire(black_box(question)).map(|(n, _)| n.label_count()));
    });
    // The index lookup a service name ends in: `<label>.<namespace>`.
    let config_zones = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("zones/demo");
    let config = Config::resolve_zone(&ZoneArgs {
        zones: Some(config_zones),
        local_cluster: Some("west".into()),
        ..ZoneArgs::default()
    })
    .expect("config");
    let (_, snap) = load_model(&config).expect("demo zones load");
    let key: Arc<str> = "payments-north.shop".into();
    assert!(snap.entries.contains_key(&key), "the demo has {key}");
    c.bench_function("lookup", |b| {
        b.iter(|| snap.entries.get(black_box(&key)).map(|e| e.v4().len()));
    });
}

criterion_group!(micro, benches);
criterion_main!(micro);
