//! What a kubeconfig from a Secret (a Linkerd `Link`'s credentials) may
//! make us do: [`check_secret_kubeconfig`] refuses one that would make the
//! server run a program or read its own files.
//!
//! Whoever may write a Secret and a `Link` in the link namespace chooses
//! that kubeconfig, and kube acts on it inside our container with our
//! ServiceAccount. In kube 5 (`kube::config::Kubeconfig`), these fields make
//! the process run or read something:
//!
//! - `users[].user.exec` ([`ExecConfig`]): runs `command` with `args` and
//!   `env` (at client build and again whenever the credential expires);
//! - `users[].user.auth-provider` ([`AuthProviderConfig`]): `gcp` runs
//!   `config.cmd-path` with `config.cmd-args`; other providers (`oidc`,
//!   and `gcp` with kube's `oauth` feature, which reads the file
//!   `GOOGLE_APPLICATION_CREDENTIALS` names) are feature-gated, and none is
//!   needed for a Link, so the field is refused whatever the provider;
//! - `users[].user.tokenFile`: read at build and re-read every minute;
//! - `users[].user.client-certificate`, `users[].user.client-key`: read
//!   when the `-data` field beside them is absent;
//! - `clusters[].cluster.certificate-authority`: read when
//!   `certificate-authority-data` is absent.
//!
//! Nothing else in those types reads or runs anything: the `-data` fields,
//! `token`, `username`/`password` and the impersonation fields are used
//! as given, `extensions` are only handed to an exec plugin, and
//! `proxy-url` (like `insecure-skip-tls-verify` and `server`) only decides
//! where and how we connect; that is the Link's business, not this check's.
//!
//! Every user and every cluster entry is checked, not only those of the
//! context the Link selects: kube picks entries by name through the context
//! (or `current-context`), and judging the whole file costs nothing and
//! leaves no way to pick an unchecked entry. A file field is refused even
//! when its `-data` twin is also present (and kube would not read the
//! file): a kubeconfig that carries its data inline has no use for the
//! path. One problem is reported: the first user's (in file order, a
//! program before a file), else the first cluster's.
//!
//! `allow_exec` (the operator's `--allow-kubeconfig-exec`) lifts the
//! refusal of exec, auth providers and file references alike: an operator
//! who lets Secret writers run programs in our container already trusts
//! them with everything a file reference could reach. The size limit
//! always applies.
//!
//! Owns the decision for one kubeconfig's text. It does no I/O, builds no
//! client and knows nothing of Secrets or Links: the source calls it on
//! the text of a Secret's `kubeconfig` key and reports what it refuses.
//! The clusters file and `--kubeconfig` are the operator's and are not
//! checked. The text checked must be the text handed to
//! [`super::client`], which parses it the same way
//! ([`Kubeconfig::from_yaml`]).

use kube::config::{AuthInfo, Cluster, Kubeconfig, KubeconfigError};
#[cfg(doc)]
use kube::config::{AuthProviderConfig, ExecConfig};

/// The largest kubeconfig a Secret may hold, in bytes: 64 KiB.
///
/// A Link's kubeconfig with an inline CA, client certificate, key and a
/// ServiceAccount token is 3 to 10 KiB (a PEM certificate is about 1.5 KiB,
/// about 2 KiB once base64-encoded into a `-data` field); a bundle of
/// several CAs stays well under 64 KiB. A Secret may hold 1 MiB, and this text is parsed as YAML,
/// kept for the cluster's life and re-parsed on every update, so the bound
/// is checked before anything parses it.
pub(crate) const MAX_SECRET_KUBECONFIG: usize = 64 * 1024;

/// The longest name, command, provider or path a [`Refused`] repeats, in
/// characters: enough to recognise it, not enough for a hostile Secret to
/// fill our logs.
const MAX_SHOWN: usize = 120;

/// Which list of the kubeconfig an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `users[]`.
    User,
    /// `clusters[]`.
    Cluster,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Entry::User => "user",
            Entry::Cluster => "cluster",
        })
    }
}

/// Why a kubeconfig from a Secret is refused.
///
/// Names, commands and paths come from the Secret: the messages escape them
/// (`{:?}` or `escape_debug`) so that a newline in one cannot forge a log
/// line, and they are cut to 120 characters (`MAX_SHOWN`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// Longer than [`MAX_SECRET_KUBECONFIG`]; not parsed.
    #[error(
        "kubeconfig is {size} bytes, over the {limit}-byte limit for a kubeconfig from a Secret"
    )]
    TooLarge {
        /// The text's length in bytes.
        size: usize,
        /// [`MAX_SECRET_KUBECONFIG`].
        limit: usize,
    },
    /// A user runs an exec credential plugin.
    #[error(
        "user {user:?} has an exec credential plugin ({}); a kubeconfig from a Secret may not run programs (--allow-kubeconfig-exec allows it)",
        .command.escape_debug()
    )]
    Exec {
        /// The `users[]` entry's name (cut).
        user: String,
        /// `exec.command` (cut), or `no command`.
        command: String,
    },
    /// A user has an auth provider (`gcp` runs `cmd-path`).
    #[error(
        "user {user:?} has an auth-provider ({}); a kubeconfig from a Secret may not use auth providers, which can run programs (--allow-kubeconfig-exec allows it)",
        .provider.escape_debug()
    )]
    AuthProvider {
        /// The `users[]` entry's name (cut).
        user: String,
        /// `auth-provider.name` (cut).
        provider: String,
    },
    /// A user or cluster names a file on the server's filesystem instead of
    /// carrying its data inline.
    #[error(
        "{entry} {name:?} names a file in {field} ({}); a kubeconfig from a Secret must carry its data inline ({inline}), not read the server's files (--allow-kubeconfig-exec allows it)",
        .path.escape_debug()
    )]
    FileReference {
        /// Which list the entry is in.
        entry: Entry,
        /// The entry's name (cut).
        name: String,
        /// The kubeconfig key naming the file, e.g. `tokenFile`.
        field: &'static str,
        /// The key that carries the same data inline, e.g. `token`.
        inline: &'static str,
        /// The path (cut).
        path: String,
    },
    /// Not a kubeconfig kube can read: kube's parse error, reason and
    /// place only (cut).
    #[error("kubeconfig does not parse: {}", .0.escape_debug())]
    Unparsable(String),
}

impl Refused {
    /// A fixed label per kind, for metrics (never a name from the Secret).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Refused::TooLarge { .. } => "too_large",
            Refused::Exec { .. } => "exec",
            Refused::AuthProvider { .. } => "auth_provider",
            Refused::FileReference { .. } => "file_reference",
            Refused::Unparsable(_) => "unparsable",
        }
    }
}

/// Checks a kubeconfig that came from a Secret (Link credentials): `Ok`
/// when kube can build a client from it without running a program or
/// reading a file of ours. `allow_exec` lifts every refusal but
/// [`Refused::TooLarge`] (and [`Refused::Unparsable`], which is not a
/// refusal of trust: kube could not use the text either).
pub(crate) fn check_secret_kubeconfig(text: &str, allow_exec: bool) -> Result<(), Refused> {
    // Before parsing: the parse is what the limit protects.
    if text.len() > MAX_SECRET_KUBECONFIG {
        return Err(Refused::TooLarge {
            size: text.len(),
            limit: MAX_SECRET_KUBECONFIG,
        });
    }
    // kube's own parser, as the client will use: a kubeconfig that kube
    // reads differently from us would let a field slip past.
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|e| Refused::Unparsable(parse_error(&e)))?;
    if allow_exec {
        return Ok(());
    }
    for named in &kubeconfig.auth_infos {
        if let Some(user) = &named.auth_info {
            check_user(&named.name, user)?;
        }
    }
    for named in &kubeconfig.clusters {
        if let Some(cluster) = &named.cluster {
            check_cluster(&named.name, cluster)?;
        }
    }
    Ok(())
}

fn check_user(name: &str, user: &AuthInfo) -> Result<(), Refused> {
    // Programs first: the gravest problem is the one to report.
    if let Some(exec) = &user.exec {
        return Err(Refused::Exec {
            user: cut(name),
            command: exec
                .command
                .as_deref()
                .map_or_else(|| "no command".to_owned(), cut),
        });
    }
    if let Some(provider) = &user.auth_provider {
        return Err(Refused::AuthProvider {
            user: cut(name),
            provider: cut(&provider.name),
        });
    }
    let files = [
        ("tokenFile", "token", &user.token_file),
        (
            "client-certificate",
            "client-certificate-data",
            &user.client_certificate,
        ),
        ("client-key", "client-key-data", &user.client_key),
    ];
    for (field, inline, path) in files {
        if let Some(path) = path {
            return Err(file_reference(Entry::User, name, field, inline, path));
        }
    }
    Ok(())
}

fn check_cluster(name: &str, cluster: &Cluster) -> Result<(), Refused> {
    match &cluster.certificate_authority {
        Some(path) => Err(file_reference(
            Entry::Cluster,
            name,
            "certificate-authority",
            "certificate-authority-data",
            path,
        )),
        None => Ok(()),
    }
}

fn file_reference(
    entry: Entry,
    name: &str,
    field: &'static str,
    inline: &'static str,
    path: &str,
) -> Refused {
    Refused::FileReference {
        entry,
        name: cut(name),
        field,
        inline,
        path: cut(path),
    }
}

/// `e` without the text around the fault: kube's parse error, displayed,
/// quotes the lines near it, and in a kubeconfig those hold tokens and
/// keys.
fn parse_error(e: &KubeconfigError) -> String {
    match e {
        KubeconfigError::Parse(e) => cut(&e.without_snippet().to_string()),
        other => cut(&other.to_string()),
    }
}

/// `s`, cut to [`MAX_SHOWN`] characters (`…` marks the cut).
fn cut(s: &str) -> String {
    match s.char_indices().nth(MAX_SHOWN) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests;
