//! A kubesim process inside a [`Host`]: started with its clusters and control endpoint bound
//! to the host's address, its announced kubeconfigs and ports, SIGSTOP/SIGCONT, and object
//! writes through kubesim's control endpoint (which no [`Fault`](crate::Fault) on the API port
//! touches).
//!
//! It owns the kubesim process it starts and kills it on drop. It must not start anything
//! outside the host's namespace, nor dial anything but the control address kubesim announced
//! (a lab address).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lab::{Host, Netns, signal};
use crate::{NetlabError, check_permitted};

/// How long kubesim has to announce its clusters.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Connect, read and write timeout of one control request.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// The kubesim binary: next to the running test (or bench) binary, as the root package's
/// kubectl test finds it, else in `$CARGO_TARGET_DIR/debug`, else in the workspace's
/// `target/debug`.
pub fn kubesim_binary() -> Result<PathBuf, NetlabError> {
    let mut tried = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent().and_then(Path::parent)
    {
        tried.push(dir.join("kubesim"));
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        tried.push(PathBuf::from(target).join("debug").join("kubesim"));
    }
    tried.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/kubesim"));
    match tried.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(NetlabError::KubesimMissing {
            tried: tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// One cluster as kubesim announced it.
#[derive(Debug, Clone)]
struct Announced {
    name: String,
    url: String,
    port: u16,
    kubeconfig: PathBuf,
}

/// A running kubesim inside a host; killed on drop. The host's namespace lives at least as
/// long.
#[derive(Debug)]
pub struct Sim {
    child: Child,
    clusters: Vec<Announced>,
    control: SocketAddr,
    dir: PathBuf,
    _netns: Arc<Netns>,
}

impl Host {
    /// Starts the kubesim binary inside this host with `--clusters <clusters> --bind <addr>
    /// --control <addr>:0 --dir <dir>` (TLS) and `extra_args`, and waits up to 20 s for it to
    /// announce every cluster and its control endpoint.
    pub fn kubesim(
        &self,
        clusters: &[&str],
        dir: &Path,
        extra_args: &[&str],
    ) -> Result<Sim, NetlabError> {
        let binary = kubesim_binary()?;
        let mut cmd = self.command(&binary);
        cmd.arg("--clusters")
            .arg(clusters.join(","))
            .arg("--bind")
            .arg(self.addr().to_string())
            .arg("--control")
            .arg(format!("{}:0", self.addr()))
            .arg("--dir")
            .arg(dir)
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| NetlabError::Command {
            command: format!("{cmd:?}"),
            detail: e.to_string(),
        })?;
        let lines = stdout_lines(&mut child);
        // `ip netns exec` execs the program itself, so the child is kubesim: a Sim from here
        // on kills it whatever happens next.
        let mut sim = Sim {
            child,
            clusters: Vec::new(),
            control: SocketAddr::from(([0, 0, 0, 0], 0)),
            dir: dir.to_owned(),
            _netns: self.netns.clone(),
        };
        sim.await_announcements(clusters, &lines)?;
        Ok(sim)
    }
}

/// The lines a child prints on stdout, read on a thread that ends with the child's stdout.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// `cluster <name>: <url> kubeconfig <path>`, kubesim's line for a cluster's admin kubeconfig
/// (its other `cluster` lines, RBAC and ServiceAccounts, have other shapes).
fn parse_cluster_line(line: &str) -> Option<Announced> {
    let (name, rest) = line.strip_prefix("cluster ")?.split_once(": ")?;
    match rest.split(' ').collect::<Vec<_>>().as_slice() {
        [url, "kubeconfig", path] if url.starts_with("http") => Some(Announced {
            name: name.to_owned(),
            url: (*url).to_owned(),
            port: url.rsplit(':').next()?.trim_end_matches('/').parse().ok()?,
            kubeconfig: PathBuf::from(path),
        }),
        _ => None,
    }
}

impl Sim {
    fn await_announcements(
        &mut self,
        want: &[&str],
        lines: &mpsc::Receiver<String>,
    ) -> Result<(), NetlabError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match lines.recv_timeout(left) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(NetlabError::KubesimStart(format!(
                        "no control line within {START_TIMEOUT:?}; it printed {seen:?}"
                    )));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Its stdout closed: it is exiting, if not reaped yet (try_wait does
                    // not block on a process that somehow goes on).
                    std::thread::sleep(Duration::from_millis(100));
                    let status = self.child.try_wait();
                    return Err(NetlabError::KubesimStart(format!(
                        "its stdout closed (exit status {status:?}) after it printed {seen:?}"
                    )));
                }
            };
            if let Some(cluster) = parse_cluster_line(&line) {
                self.clusters.push(cluster);
            } else if let Some(url) = line.strip_prefix("control: http://") {
                let addr: SocketAddr = url.trim().parse().map_err(|_| {
                    NetlabError::KubesimStart(format!("unreadable control line {line:?}"))
                })?;
                check_permitted(addr)?;
                self.control = addr;
                break;
            }
            seen.push(line);
        }
        // kubesim prints the control line after every cluster's.
        match want
            .iter()
            .find(|w| !self.clusters.iter().any(|c| c.name == **w))
        {
            Some(missing) => Err(NetlabError::KubesimStart(format!(
                "cluster {missing} was not announced; it printed {seen:?}"
            ))),
            None => Ok(()),
        }
    }

    fn cluster(&self, name: &str) -> &Announced {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("netlab: kubesim runs no cluster {name:?}"))
    }

    /// The kubesim process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The admin kubeconfig kubesim wrote for `cluster`.
    ///
    /// # Panics
    /// If this kubesim was not started with `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.cluster(cluster).kubeconfig.clone()
    }

    /// The API server URL of `cluster` (`https://<host addr>:<port>`).
    ///
    /// # Panics
    /// If this kubesim was not started with `cluster`.
    pub fn server_url(&self, cluster: &str) -> String {
        self.cluster(cluster).url.clone()
    }

    /// The TCP port of `cluster`'s API (what [`Host::fault`] takes).
    ///
    /// # Panics
    /// If this kubesim was not started with `cluster`.
    pub fn api_port(&self, cluster: &str) -> u16 {
        self.cluster(cluster).port
    }

    /// The control endpoint (plain HTTP, on the host's address).
    pub fn control(&self) -> SocketAddr {
        self.control
    }

    /// A kube client from `cluster`'s kubeconfig.
    ///
    /// # Panics
    /// If this kubesim was not started with `cluster`.
    pub async fn client(&self, cluster: &str) -> Result<kube::Client, NetlabError> {
        client_from(&self.kubeconfig(cluster)).await
    }

    /// Writes a copy of `cluster`'s kubeconfig that reaches it through `relay` (see
    /// [`rewrite_kubeconfig_server`](crate::rewrite_kubeconfig_server)) and returns its path.
    ///
    /// # Panics
    /// If this kubesim was not started with `cluster`.
    pub fn kubeconfig_via(&self, cluster: &str, relay: SocketAddr) -> Result<PathBuf, NetlabError> {
        let original = self.kubeconfig(cluster);
        let io = |what: String| move |source| NetlabError::Io { what, source };
        let text = std::fs::read_to_string(&original)
            .map_err(io(format!("reading {}", original.display())))?;
        let scheme = self
            .cluster(cluster)
            .url
            .split(':')
            .next()
            .unwrap_or("https");
        let text = crate::rewrite_kubeconfig_server(&text, &format!("{scheme}://{relay}"));
        let path = self
            .dir
            .join(format!("{cluster}-via-{}.kubeconfig", relay.port()));
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        Ok(path)
    }

    /// Stops the process (SIGSTOP): its sockets stay open, nothing answers.
    pub fn pause(&self) -> Result<(), NetlabError> {
        self.signal(libc::SIGSTOP, "SIGSTOP")
    }

    /// Continues a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), NetlabError> {
        self.signal(libc::SIGCONT, "SIGCONT")
    }

    fn signal(&self, sig: libc::c_int, name: &str) -> Result<(), NetlabError> {
        let pid = libc::pid_t::try_from(self.pid()).map_err(|_| NetlabError::Command {
            command: format!("kill -{name} {}", self.pid()),
            detail: "pid out of range".into(),
        })?;
        if signal(pid, sig) {
            Ok(())
        } else {
            Err(NetlabError::Io {
                what: format!("kill -{name} {pid}"),
                source: std::io::Error::last_os_error(),
            })
        }
    }

    /// Creates `object` in `cluster`, or replaces it, through the control endpoint (so it
    /// works while the API port is faulted); answers the stored object. Blocks for up to a
    /// few seconds.
    pub fn apply(&self, cluster: &str, object: &Value) -> Result<Value, NetlabError> {
        let body = serde_json::to_vec(object).map_err(|e| NetlabError::Control {
            path: "objects".into(),
            detail: e.to_string(),
        })?;
        self.control_request("POST", &format!("/clusters/{cluster}/objects"), &body)
    }

    /// Deletes an object of `cluster` through the control endpoint. `kind` may be the kind
    /// or the plural; `namespace` is `""` for cluster-scoped kinds. Blocks for up to a few
    /// seconds.
    pub fn delete(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, NetlabError> {
        let ns = if namespace.is_empty() { "-" } else { namespace };
        let path = format!("/clusters/{cluster}/objects/{api_version}/{kind}/{ns}/{name}");
        self.control_request("DELETE", &path, &[])
    }

    /// One request to the control endpoint (see kubesim's `control` module for the routes);
    /// the JSON answer of a 2xx, else an error with the body.
    pub fn control_request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Value, NetlabError> {
        control_request(self.control, method, path, body)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // A stopped process must run to act on SIGKILL promptly.
            signal(pid, libc::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kube client from the kubeconfig at `path`.
pub async fn client_from(path: &Path) -> Result<kube::Client, NetlabError> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
    Ok(kube::Client::try_from(config)?)
}

/// A blocking HTTP/1.1 request (one per connection) with 5 s timeouts.
fn control_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Value, NetlabError> {
    check_permitted(addr)?;
    let fail = |detail: String| NetlabError::Control {
        path: path.to_owned(),
        detail,
    };
    let mut stream = TcpStream::connect_timeout(&addr, CONTROL_TIMEOUT)
        .map_err(|e| fail(format!("connecting to {addr}: {e}")))?;
    let timeouts = stream
        .set_read_timeout(Some(CONTROL_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(CONTROL_TIMEOUT)));
    timeouts.map_err(|e| fail(e.to_string()))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: kubesim\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| fail(format!("sending: {e}")))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| fail(format!("reading: {e}")))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail(format!("not an HTTP response: {text:?}")))?;
    let code: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| fail(format!("no status line in {head:?}")))?;
    if !(200..300).contains(&code) {
        return Err(NetlabError::ControlStatus {
            path: path.to_owned(),
            code,
            body: body.to_owned(),
        });
    }
    serde_json::from_str(body).map_err(|e| fail(format!("answer is not JSON: {e}: {body:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_admin_cluster_lines_announce_a_cluster() {
        let c = parse_cluster_line(
            "cluster east: https://198.18.4.2:40123 kubeconfig /d/east.kubeconfig",
        )
        .expect("an admin line");
        assert_eq!(
            (c.name.as_str(), c.url.as_str()),
            ("east", "https://198.18.4.2:40123")
        );
        assert_eq!(c.port, 40123);
        assert_eq!(c.kubeconfig, PathBuf::from("/d/east.kubeconfig"));
        assert!(parse_cluster_line("cluster east: RBAC enforced from /x").is_none());
        assert!(
            parse_cluster_line("cluster east: ServiceAccount default/r kubeconfig /d/x").is_none()
        );
        assert!(parse_cluster_line("control: http://198.18.4.2:1").is_none());
    }
}
