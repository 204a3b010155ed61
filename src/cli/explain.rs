//! `clusterset-dns explain NAME`: asks a running server's admin port why
//! NAME answers what it answers (`/debug/name`) and prints the text form;
//! with `--server`, also asks that DNS server for NAME's A, AAAA and SRV
//! records, as a client would (UDP, then TCP when the answer is
//! truncated), and prints them with their TTLs and SRV priorities.
//!
//! Which failures are errors: what was asked for explicitly must work. The
//! admin server is asked always (`--admin`, default the address `serve`
//! listens on); when only `--server` was given and no admin server
//! answers at the default address, that is a note on stderr and the DNS
//! answers are shown alone. Any other failure is an error on stderr and
//! exit status 1, after printing whatever could be shown. Thin I/O: the
//! explanation itself is `admin::explain`'s.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use hickory_net::client::Client;
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_net::xfer::DnsHandle as _;
use hickory_proto::op::{DnsRequestOptions, Message, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{Name, RecordType};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;

use crate::admin::explain::{Explanation, absolute};
use crate::config::DEFAULT_ADMIN_ADDR;
use crate::vocab::name::ZoneName;

/// Arguments of `explain`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// The name: absolute (web-nearest.prod.svc.clusterset.local) or relative to the zone (web-nearest.prod).
    pub name: String,
    /// Admin address of the running server, asked for the explanation (/debug/name) [default: 127.0.0.1:9153].
    #[arg(long, env = "CLUSTERSET_DNS_ADMIN", value_name = "ADDR", value_parser = admin_addr)]
    pub admin: Option<SocketAddr>,
    /// Also ask this DNS server (IP, or IP:PORT; port 53 by default) for NAME's A, AAAA and SRV records, as a client does.
    #[arg(long, env = "CLUSTERSET_DNS_SERVER", value_name = "ADDR", value_parser = dns_addr)]
    pub server: Option<SocketAddr>,
    /// Completes a relative NAME for --server when no admin server answers [default: clusterset.local].
    #[arg(long, env = "CLUSTERSET_DNS_ZONE", value_name = "ZONE")]
    pub zone: Option<String>,
    /// Print the admin server's JSON instead of text.
    #[arg(long, env = "CLUSTERSET_DNS_JSON")]
    pub json: bool,
}

/// Why a server could not be asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// No TCP connection.
    #[error(
        "no admin server answers at {addr}: {source} (is `clusterset-dns serve` running? --admin sets the address)"
    )]
    Connect {
        /// The admin address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No answer in time.
    #[error("the admin server at {addr} did not answer within {secs}s")]
    Timeout {
        /// The admin address.
        addr: SocketAddr,
        /// The limit.
        secs: u64,
    },
    /// The HTTP exchange failed.
    #[error("asking the admin server at {addr} failed: {reason}")]
    Http {
        /// The admin address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// An HTTP status other than 200, with its body (the reason).
    #[error("the admin server at {addr} answered {status}: {body}")]
    Status {
        /// The admin address.
        addr: SocketAddr,
        /// The status code.
        status: u16,
        /// The body, trimmed.
        body: String,
    },
    /// A body that is not an explanation (another program on the port,
    /// or a server of another version).
    #[error("the admin server at {addr} answered something that is not an explanation: {reason}")]
    Decode {
        /// The admin address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The DNS server gave no answer.
    #[error("the DNS server {addr} gave no answer to {qtype} {name}: {reason}")]
    Dns {
        /// The DNS server.
        addr: SocketAddr,
        /// The query type.
        qtype: RecordType,
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// How long one exchange with a server may take.
const EXCHANGE: Duration = Duration::from_secs(10);
/// Largest `/debug/name` body read.
const MAX_BODY: usize = 8 << 20;
/// Records printed per DNS answer; beyond, counted.
const SHOWN: usize = 10;

/// `--admin`: an address, or an IP (port 9153).
fn admin_addr(s: &str) -> Result<SocketAddr, String> {
    addr_or_ip(s, 9153)
}

/// `--server`: an address, or an IP (port 53).
fn dns_addr(s: &str) -> Result<SocketAddr, String> {
    addr_or_ip(s, 53)
}

fn addr_or_ip(s: &str, port: u16) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, port)))
        .map_err(|_| format!("{s:?} is neither IP:PORT nor an IP address"))
}

/// Runs `explain`.
pub(crate) fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(explain(args))
}

async fn explain(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let default_admin: SocketAddr = DEFAULT_ADMIN_ADDR.parse()?;
    let admin = args.admin.unwrap_or(default_admin);
    let mut failed = false;
    let mut name = None;
    match fetch(admin, &args.name).await {
        Ok((explained, json)) => {
            print!("{}", if args.json { json } else { explained.text() });
            name = Some(explained.name);
        }
        Err(e @ AskError::Connect { .. }) if args.server.is_some() && args.admin.is_none() => {
            eprintln!("note: {e}; showing the DNS answers only");
        }
        Err(e) => {
            eprintln!("error: {e}");
            failed = true;
        }
    }
    if let Some(server) = args.server {
        let name = match name {
            Some(name) => name,
            None => {
                let zone = ZoneName::new(args.zone.as_deref().unwrap_or("clusterset.local"))?;
                format!("{}.", absolute(&args.name, &zone)?.text())
            }
        };
        println!("\nDNS server {server} (what clients get)");
        for qtype in [RecordType::A, RecordType::AAAA, RecordType::SRV] {
            match ask(server, &name, qtype).await {
                Ok((msg, tcp)) => print!("{}", answer_text(qtype, &msg, tcp)),
                Err(e) => {
                    // A server that does not answer one type answers none:
                    // said once, not after a timeout per type.
                    eprintln!("error: {e}");
                    failed = true;
                    break;
                }
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Asks `admin` to explain `name`: the explanation and its JSON.
async fn fetch(admin: SocketAddr, name: &str) -> Result<(Explanation, String), AskError> {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", name)
        .finish();
    let (status, body) =
        tokio::time::timeout(EXCHANGE, get(admin, &format!("/debug/name?{query}")))
            .await
            .map_err(|_| AskError::Timeout {
                addr: admin,
                secs: EXCHANGE.as_secs(),
            })??;
    if status != 200 {
        return Err(AskError::Status {
            addr: admin,
            status,
            body: body.trim().chars().take(400).collect(),
        });
    }
    let explained = serde_json::from_str(&body).map_err(|e| AskError::Decode {
        addr: admin,
        reason: e.to_string(),
    })?;
    Ok((explained, body))
}

/// One HTTP/1.1 GET of `path` from `addr`: (status, body).
async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), AskError> {
    let http = |e: &dyn std::fmt::Display| AskError::Http {
        addr,
        reason: e.to_string(),
    };
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| AskError::Connect { addr, source })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(&e))?;
    // Drives the connection; ends with it.
    tokio::spawn(connection);
    let request = http::Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(&e))?;
    let response = sender.send_request(request).await.map_err(|e| http(&e))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| http(&*e))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Asks `server` for `name` `qtype` as a stub resolver does: over UDP with
/// EDNS (1232 octets), again over TCP when the answer is truncated.
/// Returns the response and whether it came over TCP.
async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
) -> Result<(Message, bool), AskError> {
    let fail = |reason: String| AskError::Dns {
        addr: server,
        qtype,
        name: name.to_owned(),
        reason,
    };
    let qname = Name::from_ascii(name).map_err(|e| fail(e.to_string()))?;
    let query = Query::query(qname, qtype);
    let mut options = DnsRequestOptions::default();
    options.use_edns = true;
    options.edns_payload_len = 1232;
    options.recursion_desired = true;
    let provider = TokioRuntimeProvider::default();
    let udp = UdpClientStream::builder(server, provider.clone())
        .with_timeout(Some(Duration::from_secs(3)))
        .build();
    let (client, background) = Client::<TokioRuntimeProvider>::from_sender(udp);
    let task = tokio::spawn(background);
    let response = client.lookup(query.clone(), options).next().await;
    task.abort();
    let msg = match response {
        Some(Ok(r)) => r.into_parts().0,
        Some(Err(e)) => return Err(fail(e.to_string())),
        None => return Err(fail("no response".to_owned())),
    };
    if !msg.metadata.truncation {
        return Ok((msg, false));
    }
    let (connect, handle) =
        TcpClientStream::new(server, None, Some(Duration::from_secs(3)), provider);
    let stream = connect.await.map_err(|e| fail(format!("TCP: {e}")))?;
    let (client, background) = Client::<TokioRuntimeProvider>::new(stream, handle);
    let task = tokio::spawn(background);
    let response = client.lookup(query, options).next().await;
    task.abort();
    match response {
        Some(Ok(r)) => Ok((r.into_parts().0, true)),
        Some(Err(e)) => Err(fail(format!("TCP: {e}"))),
        None => Err(fail("TCP: no response".to_owned())),
    }
}

/// The mnemonic dig prints for `code`.
fn rcode_name(code: ResponseCode) -> String {
    match u16::from(code) {
        0 => "NOERROR".to_owned(),
        1 => "FORMERR".to_owned(),
        2 => "SERVFAIL".to_owned(),
        3 => "NXDOMAIN".to_owned(),
        4 => "NOTIMP".to_owned(),
        5 => "REFUSED".to_owned(),
        n => format!("RCODE{n}"),
    }
}

/// One DNS answer as text: a head line, its records as zone-file lines,
/// and its Extended DNS Error.
fn answer_text(qtype: RecordType, msg: &Message, tcp: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let n = msg.answers.len();
    let records = match n {
        0 => "no records".to_owned(),
        1 => "1 record".to_owned(),
        n => format!("{n} records"),
    };
    let _ = writeln!(
        out,
        "{:<9}{} {records}{}",
        qtype.to_string(),
        rcode_name(msg.metadata.response_code),
        if tcp {
            " (truncated over UDP: asked again over TCP)"
        } else {
            ""
        }
    );
    for r in msg.answers.iter().take(SHOWN) {
        let line: Vec<String> = r
            .to_string()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let _ = writeln!(out, "{:<9}  {}", "", line.join(" "));
    }
    if n > SHOWN {
        let _ = writeln!(out, "{:<9}  and {} more", "", n - SHOWN);
    }
    if let Some((code, text)) = ede(msg) {
        let _ = writeln!(out, "{:<9}  EDE {code}: {text}", "");
    }
    out
}

/// The Extended DNS Error (RFC 8914, option 15) of a response: INFO-CODE
/// and EXTRA-TEXT, as `explain --server` prints it (the integration tests
/// read answers with it too).
pub fn ede(msg: &Message) -> Option<(u16, String)> {
    let edns = msg.edns.as_ref()?;
    edns.options().options.iter().find_map(|(_, o)| match o {
        EdnsOption::Unknown(15, data) if data.len() >= 2 => Some((
            u16::from_be_bytes([data[0], data[1]]),
            String::from_utf8_lossy(&data[2..]).into_owned(),
        )),
        _ => None,
    })
}
