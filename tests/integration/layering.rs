//! The layering of `src/`, checked: each top-level module imports only
//! from the layers below it (docs/architecture.md), never from its own
//! layer's peers nor from above. A wrong import compiles; this test is what
//! fails on it. Test code (`tests.rs`, `tests/` folders, `testing.rs`) may
//! reach anywhere and is not checked.

use std::path::{Path, PathBuf};

/// Top-level modules by layer, bottom first. A module may import from any
/// module in a lower layer only.
const LAYERS: &[&[&str]] = &[
    &["vocab", "filewatch", "memory"],
    &["model"],
    &["dns", "k8s"],
    &["source", "mirror"],
    &["config", "propagation"],
    &["metrics"],
    &["admin"],
    &["runtime"],
    &["cli"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// One import of `to` by `from` that the layering forbids.
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The top-level modules `line` names as `crate::<module>`, outside its
/// comment.
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or_default();
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` in macros and `some_crate::` are other crates.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.push(name);
        }
    }
    found
}

/// The violations in `text`, the source of `file` in top-level `module`.
fn check(module: &str, file: &str, text: &str) -> Vec<Violation> {
    let Some(own) = layer(module) else {
        return vec![Violation {
            file: file.to_owned(),
            line: 0,
            from: module.to_owned(),
            to: "(a module missing from LAYERS)".to_owned(),
        }];
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        for to in crate_paths(line) {
            if to == module {
                continue;
            }
            if layer(&to).is_none_or(|l| l >= own) {
                out.push(Violation {
                    file: file.to_owned(),
                    line: i + 1,
                    from: module.to_owned(),
                    to,
                });
            }
        }
    }
    out
}

fn is_test_code(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "tests")
        || path
            .file_name()
            .is_some_and(|n| n == "tests.rs" || n == "testing.rs")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|e| e.expect("read src/ entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_from_its_own_layer_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for path in files {
        let rel = path.strip_prefix(&src).expect("under src/");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a file name")
            .trim_end_matches(".rs");
        if matches!(top, "lib" | "main") || is_test_code(rel) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        violations.extend(check(top, &rel.display().to_string(), &text));
        checked += 1;
    }
    assert!(checked > 50, "only {checked} files found under src/");
    assert!(
        violations.is_empty(),
        "imports against the layering (bottom first: {LAYERS:?}):\n{}",
        violations
            .iter()
            .map(|v| format!(
                "  {}:{}: {} imports crate::{}",
                v.file, v.line, v.from, v.to
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_check_finds_upward_and_sideways_imports() {
    let text = "\
use crate::vocab::name;
use crate::model::{Event, Snapshot};
// use crate::runtime::Run; (a comment)
use crate::mirror::desired; // sideways
fn f() { crate::cli::main(); let s = \"x\"; }
macro_rules! m { () => { $crate::runtime::x() } }
use other_crate::runtime;
";
    let found = check("source", "source/x.rs", text);
    let got: Vec<(usize, &str)> = found.iter().map(|v| (v.line, v.to.as_str())).collect();
    assert_eq!(got, [(4, "mirror"), (5, "cli")]);
    assert!(check("cli", "cli.rs", text).is_empty());
    assert_eq!(check("vocab", "vocab/x.rs", text).len(), 3);
    assert_eq!(check("nowhere", "nowhere.rs", "").len(), 1);
}
