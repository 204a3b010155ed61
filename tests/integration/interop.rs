//! The README's dig transcripts, run with the real `dig` against the built
//! binary serving `zones/demo`: every example must print what the README
//! says (compared as sets of lines; the query id and SOA serial may differ).

use std::path::Path;
use std::process::Command;

use crate::binary::serve;
use crate::support::demo;

/// A `$ dig …` command and the lines the README shows after it.
struct Example {
    args: Vec<String>,
    expected: Vec<String>,
}

fn examples(readme: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut in_console = false;
    let mut current: Option<Example> = None;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_console = line == "```console";
            out.extend(current.take());
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.extend(current.take());
            current = Some(Example {
                args: cmd.split_whitespace().map(str::to_owned).collect(),
                expected: Vec::new(),
            });
        } else if let Some(ex) = current.as_mut() {
            ex.expected.push(line.to_owned());
        }
    }
    out
}

/// Lines as a sorted multiset, with the volatile fields blanked.
fn normalize(lines: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut fields: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            for i in 0..fields.len() {
                if fields[i] == "id:" && i + 1 < fields.len() {
                    fields[i + 1] = "ID".into();
                }
                if fields[i] == "SOA" && i + 3 < fields.len() {
                    fields[i + 3] = "SERIAL".into();
                }
            }
            fields.join(" ")
        })
        .collect();
    v.sort();
    v
}

#[test]
fn readme_dig_examples_print_what_the_readme_says() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let examples = examples(&readme);
    assert!(
        examples.len() >= 10,
        "the README should show its dig examples ({} found)",
        examples.len()
    );
    let server = serve(&demo(), &["--local-cluster", "west"]);
    for ex in &examples {
        assert_eq!(
            ex.args[0], "dig",
            "only dig commands are runnable examples: {:?}",
            ex.args
        );
        assert!(
            ex.args.iter().any(|a| a == "@127.0.0.1") && ex.args.iter().any(|a| a == "5353"),
            "{:?}",
            ex.args
        );
        let args: Vec<String> = ex.args[1..]
            .iter()
            .map(|a| {
                if a == "5353" {
                    server.dns.port().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        let output = Command::new("dig")
            .args(&args)
            .args(["+time=2", "+tries=1"])
            .output()
            .expect("dig must be installed (Debian package dnsutils; .ci/run installs it)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            normalize(stdout.lines().map(str::to_owned)),
            normalize(ex.expected.iter().cloned()),
            "`{}` printed:\n{stdout}",
            ex.args.join(" ")
        );
    }
}
