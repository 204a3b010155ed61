//! Lifecycle of the server binary: SIGTERM under load loses no answered
//! query and ends the process within 5 s; SIGHUP (or a change of the file)
//! reloads the config file, and a broken file leaves the running
//! configuration in place; logs as JSON lines with `--log-format json`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::binary::{Served, http_get, serve_logging};
use crate::conformance::metric;
use crate::support::demo;

/// A server process, killed when dropped; its JSON logs go to a file.
struct Proc {
    served: Served,
    log: tempfile::NamedTempFile,
}

impl Proc {
    fn start(extra: &[&str]) -> Self {
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut args = vec!["--local-cluster", "west", "--log-format", "json"];
        args.extend_from_slice(extra);
        let stderr = log.reopen().expect("log file");
        let served = serve_logging(&demo(), &args, "info", stderr.into());
        Self { served, log }
    }

    #[allow(unsafe_code)]
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.served.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill");
    }

    /// Every log line, each of which must be a JSON object.
    fn log_lines(&self) -> Vec<serde_json::Value> {
        let mut text = String::new();
        std::fs::File::open(self.log.path())
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read log");
        text.lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
            })
            .collect()
    }

    /// The first log line whose message is `message`, waiting up to 5 s.
    fn wait_log(&self, message: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(l) = self
                .log_lines()
                .into_iter()
                .find(|l| l["fields"]["message"] == message)
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no log line {message:?} within 5 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

const NAME: &str = "payments-north.shop.svc.clusterset.local";

fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// The TTL of the first answer record of `reply` to `query(_, name)`.
fn first_ttl(reply: &[u8], name: &str) -> Option<u32> {
    let at = 12 + name.len() + 2 + 4 + 2 + 4;
    let b = reply.get(at..at + 4)?;
    (u16::from_be_bytes([reply[6], reply[7]]) > 0)
        .then(|| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn ask_ttl(dns: SocketAddr) -> u32 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("socket");
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    s.send_to(&query(7, NAME), dns).expect("send");
    let mut buf = [0u8; 1500];
    let n = s.recv(&mut buf).expect("a reply");
    first_ttl(&buf[..n], NAME).expect("an answer with a TTL")
}

#[test]
fn sigterm_under_load_loses_no_answered_query() {
    let server = Proc::start(&[]);
    let udp = UdpSocket::bind("127.0.0.1:0").expect("socket");
    udp.connect(server.served.dns).expect("connect");
    udp.set_nonblocking(true).expect("nonblocking");
    // A pipelined TCP connection too: 50 queries in one write.
    let mut tcp = TcpStream::connect(server.served.dns).expect("tcp");
    let mut batch = Vec::new();
    for id in 0..50u16 {
        let q = query(id, NAME);
        batch.extend_from_slice(&(q.len() as u16).to_be_bytes());
        batch.extend_from_slice(&q);
    }

    let (mut sent, mut replies, mut next_id) = (0u64, 0u64, 0u16);
    let mut buf = [0u8; 1500];
    let start = Instant::now();
    let mut signalled: Option<Instant> = None;
    let mut exited = None;
    // Window of 16 outstanding UDP queries, for at most 10 s.
    while start.elapsed() < Duration::from_secs(10) {
        while sent - replies < 16 && exited.is_none() {
            if udp.send(&query(next_id, NAME)).is_err() {
                break;
            }
            next_id = next_id.wrapping_add(1);
            sent += 1;
        }
        match udp.recv(&mut buf) {
            Ok(n) if n >= 12 && buf[2] & 0x80 != 0 && buf[3] & 0x0F == 0 => replies += 1,
            Ok(n) => panic!("a bad reply: {:?}", &buf[..n]),
            Err(_) => std::thread::sleep(Duration::from_micros(50)),
        }
        if signalled.is_none() && start.elapsed() > Duration::from_millis(500) {
            tcp.write_all(&batch).expect("tcp write");
            server.signal(libc::SIGTERM);
            signalled = Some(Instant::now());
        }
        if let Some(at) = signalled
            && exited.is_none()
        {
            // The process must be gone within 5 s of the signal.
            let child = &server.served.child;
            let status = std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .map(|s| s.split_whitespace().nth(2) == Some("Z"))
                .unwrap_or(true);
            if status {
                exited = Some(at.elapsed());
            } else {
                assert!(
                    at.elapsed() < Duration::from_secs(5),
                    "still running 5 s after SIGTERM"
                );
            }
        }
        if exited.is_some() {
            // Whatever was already on its way back.
            std::thread::sleep(Duration::from_millis(50));
            while let Ok(n) = udp.recv(&mut buf) {
                assert!(n >= 12 && buf[2] & 0x80 != 0);
                replies += 1;
            }
            break;
        }
    }
    assert!(exited.is_some(), "the server exited after SIGTERM");
    // TCP: every answer written before the close arrives whole.
    tcp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut stream = Vec::new();
    let _ = tcp.read_to_end(&mut stream);
    let mut tcp_replies = 0u64;
    let mut rest = &stream[..];
    while let [hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        assert!(tail.len() >= len, "a reply cut short");
        tcp_replies += 1;
        rest = &tail[len..];
    }
    let stopped = server.wait_log("stopped");
    let answered = stopped["fields"]["answered"].as_u64().expect("answered");
    assert!(replies > 100, "the load ran: {replies} replies");
    assert_eq!(
        replies + tcp_replies,
        answered,
        "every query the server answered reached the client (UDP {replies}, TCP {tcp_replies})"
    );
}

#[test]
fn sighup_reloads_the_config_and_a_broken_file_keeps_the_running_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    let write = |text: &str| std::fs::write(&config, text).expect("write config");
    write("ttl: 5\n");
    let server = Proc::start(&["--config", config.to_str().expect("utf-8 path")]);
    assert_eq!(ask_ttl(server.served.dns), 5);

    let wait_ttl = |want: u32| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while ask_ttl(server.served.dns) != want {
            assert!(
                Instant::now() < deadline,
                "TTL {want} not served within 5 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    write("ttl: 30\n");
    server.signal(libc::SIGHUP);
    wait_ttl(30);

    // A broken file: refused with its reason, the running configuration stays.
    write("ttl: 60\nbogus-key: 1\n");
    server.signal(libc::SIGHUP);
    let refused = server.wait_log("configuration not reloaded; the running configuration stays");
    let error = refused["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("bogus-key"),
        "the error names the key: {error}"
    );
    for _ in 0..20 {
        assert_eq!(
            ask_ttl(server.served.dns),
            30,
            "still the old configuration"
        );
    }
    let (_, metrics) = http_get(server.served.admin, "/metrics");
    let errors = metric(&metrics, "clusterset_dns_config_reload_errors_total");
    assert!(errors >= Some(1.0), "counted: {errors:?}");

    // No signal: a change of the file is picked up by itself.
    write("ttl: 60\n");
    let deadline = Instant::now() + Duration::from_secs(8);
    while ask_ttl(server.served.dns) != 60 {
        assert!(
            Instant::now() < deadline,
            "the file change was not picked up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(server.served.dns.port() > 0 && Path::new(&config).exists());
}
