//! The command line: arguments (and the environment clap reads) to the
//! configuration each subcommand runs under, and the errors bad input
//! gets. Parsed with `try_parse_from`, so nothing exits.

use super::*;

use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory as _;
use clap::error::ErrorKind;

fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("clusterset-dns").chain(argv.iter().copied()))
}

fn plan_of(argv: &[&str]) -> Result<Plan, ConfigError> {
    plan(parse(argv).expect("valid arguments").command)
}

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn serve_flags_become_the_configuration() {
    let plan = plan_of(&[
        "serve",
        "--zones",
        "zones",
        "--ttl",
        "10",
        "--dns-addr",
        "0.0.0.0:53",
        "--admin-addr",
        "127.0.0.1:9000",
        "--zone",
        "example.internal",
        "--log-format",
        "json",
    ])
    .expect("valid");
    let Plan::Serve {
        config,
        mirror_only,
        args,
    } = plan
    else {
        panic!("serve plans to serve: {plan:?}");
    };
    assert!(!mirror_only);
    assert!(!args.mirror);
    assert_eq!(config.zones, Some(PathBuf::from("zones")));
    assert_eq!(config.settings.ttl, 10);
    assert_eq!(config.dns_addr.to_string(), "0.0.0.0:53");
    assert_eq!(config.admin_addr.to_string(), "127.0.0.1:9000");
    assert_eq!(config.settings.zone.text(), "example.internal");
    assert_eq!(config.log_format, LogFormat::Json);
    assert!(config.live.is_none(), "a zones directory: file mode");
    assert!(config.mirror.is_none());
}

#[test]
fn mirror_is_serve_with_the_mirror_and_without_dns() {
    let plan = plan_of(&[
        "mirror",
        "--local-cluster",
        "west",
        "--kubeconfig",
        "/etc/kubeconfig",
        "--mirror-namespace",
        "dns",
    ])
    .expect("valid");
    let Plan::Serve {
        config,
        mirror_only,
        args,
    } = plan
    else {
        panic!("mirror plans to serve: {plan:?}");
    };
    assert!(mirror_only);
    assert!(args.mirror, "reloads resolve with the mirror on too");
    assert!(config.live.is_some(), "live mode");
    let mirror = config.mirror.expect("the mirror controller runs");
    assert_eq!(mirror.namespace, "dns");
}

#[test]
fn check_and_dump_read_a_zones_directory() {
    let plan = plan_of(&["check", "--zones", "z", "--local-cluster", "west"]).expect("valid");
    let Plan::Check(config) = plan else {
        panic!("check plans to check: {plan:?}");
    };
    assert_eq!(config.zones, Some(PathBuf::from("z")));
    assert_eq!(config.local_cluster.as_deref(), Some("west"));

    let plan = plan_of(&["dump", "--zones", "z", "--ttl", "60"]).expect("valid");
    let Plan::Dump(config) = plan else {
        panic!("dump plans to dump: {plan:?}");
    };
    assert_eq!(config.settings.ttl, 60);
}

#[test]
fn check_and_dump_need_a_zones_directory() {
    for sub in ["check", "dump"] {
        let err = plan_of(&[sub]).expect_err("no zones");
        assert!(
            matches!(err, ConfigError::Missing("zones", "CLUSTERSET_DNS_ZONES")),
            "{sub}: {err}"
        );
        assert_eq!(
            err.to_string(),
            "zones is required (flag --zones, env CLUSTERSET_DNS_ZONES, or config key zones)"
        );
    }
}

#[test]
fn values_the_configuration_refuses_name_their_option() {
    // (arguments, the option named)
    let cases: &[(&[&str], &str)] = &[
        (
            &["serve", "--zones", "z", "--max-stale", "soon"],
            "max-stale",
        ),
        (&["serve", "--zones", "z", "--zone", "not a zone!"], "zone"),
        (&["mirror", "--zones", "z"], "mirror"),
        (
            &["serve", "--zones", "z", "--cluster-timeout", "later"],
            "cluster-timeout",
        ),
        (
            &["serve", "--zones", "z", "--cluster-timeout", "500ms"],
            "cluster-timeout",
        ),
    ];
    for (argv, key) in cases {
        match plan_of(argv) {
            Err(ConfigError::Invalid { key: got, .. }) => assert_eq!(got, *key, "{argv:?}"),
            other => panic!("{argv:?}: {other:?}"),
        }
    }
}

#[test]
fn malformed_arguments_are_refused_by_the_parser() {
    // (arguments, the error kind)
    let cases: &[(&[&str], ErrorKind)] = &[
        (&["serve", "--ttl", "ten"], ErrorKind::ValueValidation),
        (
            &["serve", "--dns-addr", "localhost"],
            ErrorKind::ValueValidation,
        ),
        (&["serve", "--log-format", "xml"], ErrorKind::InvalidValue),
        (&["serve", "--bogus"], ErrorKind::UnknownArgument),
        (
            &["check", "--dns-addr", "127.0.0.1:53"],
            ErrorKind::UnknownArgument,
        ),
        (&["frobnicate"], ErrorKind::InvalidSubcommand),
        (&["serve", "--ttl"], ErrorKind::InvalidValue),
        (&["--version"], ErrorKind::DisplayVersion),
    ];
    for (argv, kind) in cases {
        let err = parse(argv).expect_err("refused");
        assert_eq!(err.kind(), *kind, "{argv:?}: {err}");
    }
    let err = parse(&[]).expect_err("a subcommand is required");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        ),
        "{err}"
    );
}

/// `--some-flag` → `CLUSTERSET_DNS_SOME_FLAG`.
fn env_name(long: &str) -> String {
    format!("CLUSTERSET_DNS_{}", long.replace('-', "_").to_uppercase())
}

#[test]
fn every_option_can_come_from_its_environment_variable() {
    let cli = Cli::command();
    let mut checked = 0;
    for sub in cli.get_subcommands() {
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if matches!(long, "help" | "version") {
                continue;
            }
            let env = arg.get_env().and_then(|e| e.to_str());
            assert_eq!(
                env,
                Some(env_name(long).as_str()),
                "{} --{long}",
                sub.get_name()
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "every subcommand's options: {checked}");
}

#[test]
fn durations_take_units() {
    let plan = plan_of(&[
        "serve",
        "--zones",
        "z",
        "--cluster-timeout",
        "3s",
        "--federated-grace",
        "2m",
    ])
    .expect("valid");
    let Plan::Serve { config, .. } = plan else {
        panic!("{plan:?}");
    };
    assert_eq!(config.settings.cluster_timeout, Duration::from_secs(3));
    assert_eq!(config.settings.federated_grace, Duration::from_secs(120));
}

#[test]
fn explain_takes_addresses_with_or_without_a_port() {
    let Ok(Plan::Explain(args)) = plan_of(&[
        "explain",
        "web-nearest.prod",
        "--admin",
        "10.0.0.9",
        "--server",
        "10.96.0.10",
    ]) else {
        panic!("explain");
    };
    assert_eq!(args.name, "web-nearest.prod");
    assert_eq!(args.admin, Some("10.0.0.9:9153".parse().expect("addr")));
    assert_eq!(args.server, Some("10.96.0.10:53".parse().expect("addr")));
    let Ok(Plan::Explain(args)) = plan_of(&["explain", "x", "--server", "[::1]:5353"]) else {
        panic!("explain");
    };
    assert_eq!(args.server, Some("[::1]:5353".parse().expect("addr")));
    assert_eq!(args.admin, None, "the default is applied when asking");
    for argv in [
        &["explain", "x", "--server", "dns.example"][..],
        &["explain", "x", "--admin", "127.0.0.1:http"][..],
    ] {
        let err = parse(argv).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{argv:?}: {err}");
        assert!(
            err.to_string()
                .contains("neither IP:PORT nor an IP address"),
            "{err}"
        );
    }
    let err = parse(&["explain"]).expect_err("a name is required");
    assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument, "{err}");
}
