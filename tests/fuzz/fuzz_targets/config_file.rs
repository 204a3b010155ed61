//! The YAML files the server reads at start and on reload: the `--config`
//! file and the live mode's `--clusters` file. Any text → a configuration or
//! an error value, never a panic.
//!
//! The input (any bytes) is written to a scratch file and read the way the
//! server reads it: `Config::resolve` for `serve` (the file merged over
//! defaults, every value validated), `Config::resolve_zone` for
//! `check`/`dump`, and `load_clusters_file` for the clusters file (each
//! entry's selectors, gateway and probe). Two configurations that both
//! resolve are compared the way a reload compares them.

#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;

use clusterset_dns::config::{Config, FileConfig, ServeArgs, ZoneArgs};
use clusterset_dns::source::clusters_file::load_clusters_file;

static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir =
        std::env::temp_dir().join(format!("clusterset-dns-fuzz-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir.join("config.yaml")
});

fuzz_target!(|data: &[u8]| {
    let path = &*FILE;
    std::fs::write(path, data).expect("scratch file");
    let zone = ZoneArgs {
        config: Some(path.clone()),
        ..ZoneArgs::default()
    };
    let _ = FileConfig::load(path).map_err(|e| e.to_string());
    let serve = Config::resolve(&ServeArgs {
        zone: zone.clone(),
        ..ServeArgs::default()
    });
    let check = Config::resolve_zone(&zone);
    match (&serve, &check) {
        (Ok(a), Ok(b)) => {
            let _ = a.restart_only_changes(b);
            let _ = b.restart_only_changes(a);
        }
        (Err(e), _) | (_, Err(e)) => {
            let _ = e.to_string();
        }
    }
    if let Ok(entries) = load_clusters_file(path).map_err(|e| e.to_string()) {
        for e in entries {
            let _ = format!("{e:?}");
        }
    }
});
