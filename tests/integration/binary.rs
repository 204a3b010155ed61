//! The built `clusterset-dns` binary, run as a user runs it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the built binary.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_clusterset-dns")
}

/// A `serve` process, killed on drop.
pub(crate) struct Served {
    /// The process.
    pub(crate) child: Child,
    /// DNS address.
    pub(crate) dns: SocketAddr,
    /// Admin address.
    pub(crate) admin: SocketAddr,
    /// DNS-over-TLS address, when TLS is enabled.
    pub(crate) tls: Option<SocketAddr>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `serve --zones <zones> <extra…>` on loopback port 0 and waits for its
/// `listening` line (10 s at most) and for `/ready`.
pub(crate) fn serve(zones: &Path, extra: &[&str]) -> Served {
    serve_logging(zones, extra, "warn", Stdio::inherit())
}

/// [`serve`] with log level `level`, logs going to `stderr`.
pub(crate) fn serve_logging(zones: &Path, extra: &[&str], level: &str, stderr: Stdio) -> Served {
    let mut args: Vec<&OsStr> = vec![OsStr::new("--zones"), zones.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    serve_args(&args, level, stderr, Duration::from_secs(10))
}

/// Runs `serve <args…>` (any source: `--zones`, or live mode's
/// `--kubeconfig`/`--clusters`) with log level `level`, logs going to
/// `stderr`, and waits for its `listening` line and then for `/ready`, each
/// `within` at most. DNS and admin listen on loopback port 0 unless `args`
/// give `--dns-addr` or `--admin-addr`.
pub(crate) fn serve_args(args: &[&OsStr], level: &str, stderr: Stdio, within: Duration) -> Served {
    let mut command = Command::new(bin());
    command.arg("serve");
    for flag in ["--dns-addr", "--admin-addr"] {
        if !args.contains(&OsStr::new(flag)) {
            command.args([flag, "127.0.0.1:0"]);
        }
    }
    let mut child = command
        .args(args)
        .env("RUST_LOG", level)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn clusterset-dns");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("a listening line within {within:?}"));
    let optional = |name: &str| -> Option<SocketAddr> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|a| a.parse().ok())
    };
    let field = |name: &str| optional(name).unwrap_or_else(|| panic!("no {name} in {line:?}"));
    let served = Served {
        dns: field("dns="),
        admin: field("admin="),
        tls: optional("tls="),
        child,
    };
    let deadline = Instant::now() + within;
    while http_get(served.admin, "/ready").0 != 200 {
        assert!(Instant::now() < deadline, "not ready within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    served
}

/// A blocking HTTP/1.0 GET: (status, body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
