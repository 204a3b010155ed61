use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct TestCli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn args(argv: &[&str]) -> ServeArgs {
    TestCli::try_parse_from(std::iter::once("test").chain(argv.iter().copied()))
        .expect("valid arguments")
        .serve
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(f.path(), text).expect("write");
    f
}

#[test]
fn defaults() {
    let c = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    assert_eq!(c.zones, Some(PathBuf::from("z")));
    assert_eq!(c.dns_addr.to_string(), "127.0.0.1:5353");
    assert_eq!(c.admin_addr.to_string(), "127.0.0.1:9153");
    let s = &c.settings;
    assert_eq!(
        (s.zone.text(), s.ttl, s.negative_ttl, s.max_udp_payload),
        ("clusterset.local", 5, 5, 1232)
    );
    assert_eq!(
        s.ns_addrs,
        vec!["127.0.0.1".parse::<IpAddr>().expect("ip")],
        "NS glue defaults to the DNS address"
    );
    assert!(s.reverse_zones.is_empty(), "no PTR by default");
    assert_eq!(s.max_answer_records, 0, "as many records as fit");
    assert_eq!(s.cluster_timeout, Duration::from_secs(10));
}

#[test]
fn cluster_timeout_from_the_file_reloads() {
    let f = config_file("local-cluster: west\ncluster-timeout: 3s\n");
    let path = f.path().display().to_string();
    let c = Config::resolve(&args(&["--config", &path])).expect("valid");
    assert_eq!(c.settings.cluster_timeout, Duration::from_secs(3));
    std::fs::write(f.path(), "local-cluster: west\ncluster-timeout: 20s\n").expect("write");
    let new = Config::resolve(&args(&["--config", &path])).expect("valid");
    assert_eq!(new.settings.cluster_timeout, Duration::from_secs(20));
    assert!(
        c.restart_only_changes(&new).is_empty(),
        "the cluster timeout is a setting: it reloads in place"
    );
}

#[test]
fn flags_win_over_the_file_which_wins_over_defaults() {
    let f = config_file(
        "zones: from-file\nttl: 30\nzone: example.internal\nreverse-zone: [10.in-addr.arpa]\nns-addr: [10.96.0.53]\nmax-answer-records: 8\n",
    );
    let path = f.path().to_str().expect("utf-8 path");
    let c = Config::resolve(&args(&["--config", path, "--ttl", "10"])).expect("valid");
    assert_eq!(c.zones, Some(PathBuf::from("from-file")));
    assert_eq!(c.settings.ttl, 10, "the flag wins");
    assert_eq!(c.settings.max_answer_records, 8, "from the file");
    assert_eq!(c.settings.negative_ttl, 10, "negative TTL follows the TTL");
    assert_eq!(c.settings.zone.text(), "example.internal");
    assert_eq!(c.settings.reverse_zones.len(), 1);
    assert_eq!(
        c.settings.ns_addrs,
        vec!["10.96.0.53".parse::<IpAddr>().expect("ip")]
    );
    let c = Config::resolve(&args(&[
        "--config",
        path,
        "--zones",
        "flag",
        "--reverse-zone",
        "0.0.d.f.ip6.arpa",
        "--negative-ttl",
        "2",
        "--max-answer-records",
        "0",
    ]))
    .expect("valid");
    assert_eq!(
        c.settings.max_answer_records, 0,
        "the flag wins, 0 included"
    );
    assert_eq!(c.zones, Some(PathBuf::from("flag")));
    assert_eq!(c.settings.reverse_zones[0].text(), "0.0.d.f.ip6.arpa");
    assert_eq!((c.settings.ttl, c.settings.negative_ttl), (30, 2));
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let f = config_file("zones: z\nttll: 30\n");
    let err = Config::resolve(&args(&["--config", f.path().to_str().expect("path")]))
        .expect_err("unknown key");
    let msg = err.to_string();
    assert!(msg.contains("unknown field `ttll`"), "{msg}");
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
}

#[test]
fn invalid_values_are_rejected() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "local-cluster: is required in live mode"),
        (
            &["--zones", "z", "--kubeconfig", "k"],
            "invalid kubeconfig: is a live-mode option; it cannot be combined with --zones",
        ),
        (
            &["--local-cluster", "west", "--max-stale", "soon"],
            "invalid max-stale",
        ),
        (
            &["--local-cluster", "west", "--cluster-timeout", "500ms"],
            "invalid cluster-timeout: must be at least 1s, not 500ms",
        ),
        (
            &["--local-cluster", "west", "--cluster-timeout", "never"],
            "invalid cluster-timeout",
        ),
        (
            &["--local-cluster", "west", "--link-namespace", "Bad_NS"],
            "invalid link-namespace",
        ),
        (
            &["--zones", "z", "--ttl", "3601"],
            "invalid ttl: 3601 is above 3600",
        ),
        (
            &["--zones", "z", "--max-answer-records", "10001"],
            "invalid max-answer-records: 10001 is outside 0-10000",
        ),
        (&["--zones", "z", "--zone", "bad_zone"], "invalid zone"),
        (
            &[
                "--zones",
                "z",
                "--reverse-zone",
                "10.10.168.192.10.in-addr.arpa",
            ],
            "invalid reverse-zone",
        ),
        (
            &["--zones", "z", "--reverse-zone", "example.com"],
            "invalid reverse-zone",
        ),
        (
            &["--zones", "z", "--local-cluster", "federated"],
            "reserved",
        ),
    ];
    for (argv, want) in cases {
        let err = Config::resolve(&args(argv))
            .expect_err("should be rejected")
            .to_string();
        assert!(err.contains(want), "{argv:?}: {err}");
    }
    let missing = Config::resolve(&args(&["--config", "/nonexistent/config.yaml"]))
        .expect_err("missing file");
    assert!(missing.to_string().contains("/nonexistent/config.yaml"));
}

#[test]
fn live_mode_options() {
    let c = Config::resolve(&args(&[
        "--local-cluster",
        "west",
        "--kubeconfig",
        "/k",
        "--max-stale",
        "5m",
        "--federated-grace",
        "10s",
        "--sync-timeout",
        "1m30s",
        "--cluster-timeout",
        "4s",
    ]))
    .expect("valid");
    assert_eq!(c.settings.cluster_timeout, Duration::from_secs(4));
    assert_eq!(c.zones, None);
    let live = c.live.expect("live mode without --zones");
    assert_eq!(live.kubeconfig, Some(PathBuf::from("/k")));
    assert_eq!(live.link_namespace, "linkerd-multicluster");
    assert_eq!(live.sync_timeout, Duration::from_secs(90));
    assert_eq!(live.max_inflight_per_cluster, 16, "the default");
    assert_eq!(c.settings.max_stale, Some(Duration::from_secs(300)));
    assert_eq!(c.settings.federated_grace, Duration::from_secs(10));
    let unlimited = Config::resolve(&args(&["--local-cluster", "w", "--max-stale", "unlimited"]))
        .expect("valid");
    assert_eq!(unlimited.settings.max_stale, None);
    // check and dump still need a zones directory.
    let e = Config::resolve_zone(&ZoneArgs::default()).expect_err("no zones");
    assert!(e.to_string().contains("zones is required"), "{e}");
}

#[test]
fn a_reload_names_the_options_that_need_a_restart() {
    let running = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    let same = Config::resolve(&args(&[
        "--zones",
        "z",
        "--ttl",
        "30",
        "--max-answer-records",
        "8",
    ]))
    .expect("valid");
    assert!(
        running.restart_only_changes(&same).is_empty(),
        "TTLs and max-answer-records reload in place"
    );
    let moved = Config::resolve(&args(&[
        "--zones",
        "other",
        "--dns-addr",
        "127.0.0.1:53",
        "--answer-cache-mb",
        "0",
        "--log-format",
        "json",
    ]))
    .expect("valid");
    assert_eq!(
        running.restart_only_changes(&moved),
        ["dns-addr", "zones", "answer-cache-mb", "log-format"]
    );
}

#[test]
fn limits_default_safely_and_come_from_flags_or_the_file() {
    let c = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    let l = c.limits;
    assert_eq!(l.max_connections, 1000);
    assert!(
        l.idle_timeout > Duration::from_secs(10),
        "idle timeout must outlast CoreDNS forward's 10 s connection reuse"
    );
    assert_eq!(l.message_timeout, Duration::from_secs(2));
    assert_eq!(l.max_in_flight, 128);
    assert_eq!(l.query_timeout, Duration::from_secs(5));
    let f = config_file(
        "zones: z\nmax-connections: 50\nidle-timeout: 1m\nmessage-timeout: 500ms\nmax-in-flight: 8\nquery-timeout: 3s\n",
    );
    let path = f.path().to_str().expect("utf-8 path");
    let c = Config::resolve(&args(&["--config", path, "--max-in-flight", "16"])).expect("valid");
    assert_eq!(
        c.limits,
        Limits {
            max_connections: 50,
            idle_timeout: Duration::from_secs(60),
            message_timeout: Duration::from_millis(500),
            max_in_flight: 16,
            query_timeout: Duration::from_secs(3),
        }
    );
    for (flag, value, message) in [
        (
            "--max-connections",
            "0",
            "invalid max-connections: 0 is outside 1-1000000",
        ),
        ("--idle-timeout", "0", "invalid idle-timeout"),
        ("--query-timeout", "2h", "invalid query-timeout"),
        ("--message-timeout", "fast", "invalid message-timeout"),
    ] {
        let e = Config::resolve(&args(&["--zones", "z", flag, value])).expect_err(flag);
        assert!(e.to_string().contains(message), "{flag} {value}: {e}");
    }
}

#[test]
fn dns_over_tls_needs_both_files_and_defaults_to_port_853() {
    let c = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    assert_eq!(c.tls, None, "off unless asked for");
    let c = Config::resolve(&args(&[
        "--zones",
        "z",
        "--dns-addr",
        "10.0.0.1:53",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
    ]))
    .expect("valid");
    let tls = c.tls.expect("enabled");
    assert_eq!(tls.addr.to_string(), "10.0.0.1:853");
    assert_eq!(tls.files.cert, PathBuf::from("c.pem"));
    assert_eq!(tls.files.key, PathBuf::from("k.pem"));
    let e = Config::resolve(&args(&["--zones", "z", "--tls-cert", "c.pem"])).expect_err("no key");
    assert!(e.to_string().contains("tls-key is required"), "{e}");
    let e = Config::resolve(&args(&["--zones", "z", "--tls-addr", "127.0.0.1:8853"]))
        .expect_err("no files");
    assert!(
        e.to_string()
            .contains("tls-addr: needs tls-cert and tls-key"),
        "{e}"
    );
}

#[test]
fn in_flight_bound_per_cluster_comes_from_the_flag_or_the_file() {
    let file = config_file("max-inflight-per-cluster: 4\n");
    let path = file.path().to_str().expect("utf-8 path");
    let live = |argv: &[&str]| {
        let mut all = vec!["--local-cluster", "west", "--config", path];
        all.extend_from_slice(argv);
        Config::resolve(&args(&all)).map(|c| c.live.expect("live").max_inflight_per_cluster)
    };
    assert_eq!(live(&[]).expect("valid"), 4);
    assert_eq!(
        live(&["--max-inflight-per-cluster", "32"]).expect("valid"),
        32
    );
    for bad in ["0", "1001"] {
        let e = live(&["--max-inflight-per-cluster", bad]).expect_err(bad);
        assert!(
            e.to_string().contains("max-inflight-per-cluster"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn mcs_is_off_by_default_and_on_from_the_flag_or_the_file() {
    let off = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    assert!(!off.settings.mcs, "off by default");
    let flag = Config::resolve(&args(&["--zones", "z", "--mcs"])).expect("valid");
    assert!(flag.settings.mcs);
    let f = config_file("zones: z\nmcs: true\n");
    let path = f.path().to_str().expect("utf-8 path");
    let file = Config::resolve(&args(&["--config", path])).expect("valid");
    assert!(file.settings.mcs, "from the file");
    let bad = config_file("zones: z\nmcs: sometimes\n");
    let path = bad.path().to_str().expect("utf-8 path");
    let err = Config::resolve(&args(&["--config", path])).expect_err("not a boolean");
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn mcs_reloads_in_file_mode_and_waits_for_a_restart_in_live_mode() {
    let files = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    let files_on = Config::resolve(&args(&["--zones", "z", "--mcs"])).expect("valid");
    assert!(files.restart_only_changes(&files_on).is_empty());
    assert!(
        files.reloaded_settings(&files_on).mcs,
        "the file source reads MCS objects always"
    );

    let live = Config::resolve(&args(&["--local-cluster", "west"])).expect("valid");
    let live_on = Config::resolve(&args(&["--local-cluster", "west", "--mcs"])).expect("valid");
    assert_eq!(
        live.restart_only_changes(&live_on),
        ["mcs (live mode: its watches start with the process)"]
    );
    let kept = live.reloaded_settings(&live_on);
    assert!(!kept.mcs, "kept off until a restart starts the watches");
    assert_eq!(
        *kept,
        Settings {
            mcs: false,
            ..(*live_on.settings).clone()
        }
    );
}

#[test]
fn trust_settings_come_from_flags_or_the_file_and_reload() {
    use crate::vocab::trust::parse_cidrs;
    let none = Config::resolve(&args(&["--zones", "z"])).expect("valid");
    assert!(none.settings.trust.deny_addresses.is_empty());
    assert!(none.settings.trust.exempt_addresses.is_empty());
    let flag = Config::resolve(&args(&[
        "--zones",
        "z",
        "--deny-addresses",
        "10.96.0.0/12,192.0.2.7",
        "--exempt-addresses",
        "127.0.0.0/8",
    ]))
    .expect("valid");
    assert_eq!(
        flag.settings.trust.deny_addresses,
        parse_cidrs(["10.96.0.0/12,192.0.2.7/32"]).expect("cidrs")
    );
    assert_eq!(
        flag.settings.trust.exempt_addresses,
        parse_cidrs(["127.0.0.0/8"]).expect("cidrs")
    );
    let f = config_file("zones: z\ndeny-addresses: [10.96.0.0/12]\n");
    let path = f.path().to_str().expect("utf-8 path");
    let file = Config::resolve(&args(&["--config", path])).expect("valid");
    assert_eq!(
        file.settings.trust.deny_addresses,
        parse_cidrs(["10.96.0.0/12"]).expect("cidrs")
    );
    let flag_wins = Config::resolve(&args(&["--config", path, "--deny-addresses", "10.0.0.0/8"]))
        .expect("valid");
    assert_eq!(
        flag_wins.settings.trust.deny_addresses,
        parse_cidrs(["10.0.0.0/8"]).expect("cidrs")
    );
    assert!(
        flag.restart_only_changes(&none).is_empty(),
        "trust settings reload"
    );
    for (argv, want) in [
        (
            ["--deny-addresses", "10.96.0.0/33"],
            "invalid deny-addresses: \"10.96.0.0/33\" is not a CIDR",
        ),
        (
            ["--exempt-addresses", "127.1.0.0/8"],
            "invalid exempt-addresses: \"127.1.0.0/8\" has host bits set; did you mean 127.0.0.0/8?",
        ),
    ] {
        let mut all = vec!["--zones", "z"];
        all.extend(argv);
        let e = Config::resolve(&args(&all)).expect_err(want);
        assert!(e.to_string().starts_with(want), "{e}");
    }
}

#[test]
fn kubeconfig_exec_is_refused_unless_allowed_in_live_mode() {
    let live = |argv: &[&str]| {
        let mut all = vec!["--local-cluster", "west"];
        all.extend_from_slice(argv);
        Config::resolve(&args(&all)).map(|c| c.live.expect("live").allow_kubeconfig_exec)
    };
    assert!(!live(&[]).expect("valid"), "refused by default");
    assert!(live(&["--allow-kubeconfig-exec"]).expect("valid"));
    let f = config_file("local-cluster: west\nallow-kubeconfig-exec: true\n");
    let path = f.path().to_str().expect("utf-8 path");
    assert!(live(&["--config", path]).expect("valid"), "from the file");
    let e = Config::resolve(&args(&["--zones", "z", "--allow-kubeconfig-exec"]))
        .expect_err("a live-mode option");
    assert!(e.to_string().contains("allow-kubeconfig-exec"), "{e}");
}
