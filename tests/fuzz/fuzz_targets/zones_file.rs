//! The zones directory reader: any file text → cluster state → names, never
//! a panic; every problem is a value.
//!
//! The input is the text of one YAML file of a zones directory (any bytes:
//! the reader must also cope with text that is not UTF-8). It is written
//! into the directory of cluster `west`, the local cluster (where mirror
//! Services are read), or of a remote cluster `edge` when the input holds
//! the line `#%remote`, and read with `source::file::load_cluster`. Its
//! objects join those of two of the demo's remote clusters (`zones/demo`:
//! north and south, read once; a federated service spans both) through
//! `initial_events` in a model, and the snapshot is rendered as `dump` and
//! `check` render it.
//!
//! A line `#%after` splits the input in two versions of the file: the
//! model is built from the first, then moved to the second with the events
//! `source::file::diff` gives (as the file watcher does on an edit), and
//! must then serve exactly the zone a model built from the second version
//! alone serves (the SOA serial aside).

#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;

use clusterset_dns::cli::check_report;
use clusterset_dns::config::{Config, ZoneArgs};
use clusterset_dns::dns::zonefile::dump;
use clusterset_dns::model::{Epoch, Model, Snapshot};
use clusterset_dns::source::file::{
    ClusterDir, ClusterLoad, DirLoad, diff, initial_events, load_cluster, load_dir,
};

const SPLIT: &[u8] = b"\n#%after\n";
const REMOTE: &[u8] = b"\n#%remote\n";

struct Fixture {
    /// The scratch zones directory.
    root: PathBuf,
    config: Config,
    /// The demo's remote clusters, read once.
    demo: Vec<ClusterLoad>,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let root =
        std::env::temp_dir().join(format!("clusterset-dns-fuzz-zones-{}", std::process::id()));
    let config = Config::resolve_zone(&ZoneArgs {
        zones: Some(root.clone()),
        local_cluster: Some("west".into()),
        reverse_zones: vec!["10.in-addr.arpa".into(), "ip6.arpa".into()],
        ..ZoneArgs::default()
    })
    .expect("fuzz config");
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../zones/demo");
    let demo = load_dir(&demo, Some("west"), &Default::default())
        .expect("demo zones")
        .clusters
        .into_iter()
        .filter(|c| matches!(&*c.name, "north" | "south"))
        .collect();
    Fixture { root, config, demo }
});

/// Where the line `marker` (given with its newlines) is in `data`: the end
/// of the text before it and the start of the text after it.
fn find(data: &[u8], marker: &[u8]) -> Option<(usize, usize)> {
    if data.starts_with(&marker[1..]) {
        return Some((0, marker.len() - 1));
    }
    let at = data.windows(marker.len()).position(|w| w == marker)?;
    Some((at + 1, at + marker.len()))
}

/// Reads `text` as the only file of cluster `dir`.
fn load(dir: &ClusterDir, local: bool, text: &[u8]) -> ClusterLoad {
    std::fs::create_dir_all(&dir.path).expect("scratch directory");
    std::fs::write(dir.path.join("input.yaml"), text).expect("scratch file");
    let load = load_cluster(dir, local, &Default::default());
    // Problems are values; rendering them must not fail either.
    for p in &load.problems {
        let _ = p.to_string();
    }
    load
}

/// The zone a snapshot serves, without the SOA (its serial counts changes).
fn zone(snap: &Snapshot) -> String {
    dump(snap)
        .lines()
        .filter(|l| !l.contains("\tSOA\t"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn model(f: &Fixture, cluster: &ClusterLoad) -> Model {
    let now = std::time::Instant::now();
    let mut model = Model::new(
        f.config.settings.clone(),
        Epoch::new(now, std::time::SystemTime::now()),
    );
    model.apply(f.demo.iter().chain([cluster]).flat_map(initial_events), now);
    model.clusters_known(now);
    model
}

fuzz_target!(|data: &[u8]| {
    let f = &*FIXTURE;
    let (name, local) = match find(data, REMOTE) {
        Some(_) => ("edge", false),
        None => ("west", true),
    };
    let dir = ClusterDir {
        name: name.into(),
        path: f.root.join(name),
    };
    let split = find(data, SPLIT);
    let after = split.map_or(data, |(_, start)| &data[start..]);
    let edited = split.map(|(end, _)| {
        let old = load(&dir, local, &data[..end]);
        let mut edited = model(f, &old);
        let new = load(&dir, local, after);
        edited.apply(
            diff(&dir.name, &old.objects, &new.objects),
            std::time::Instant::now(),
        );
        edited.snapshot()
    });

    let new = load(&dir, local, after);
    let from_scratch = model(f, &new).snapshot();
    let dir_load = DirLoad {
        clusters: f.demo.iter().cloned().chain([new]).collect(),
        problems: Vec::new(),
    };
    let _ = check_report(&f.config, &dir_load, &from_scratch);
    let want = zone(&from_scratch);
    if let Some(edited) = edited {
        let got = zone(&edited);
        assert!(
            got == want,
            "after an edit the zone differs from the one built from scratch\n--- edited\n{got}\n--- from scratch\n{want}"
        );
    }
});
