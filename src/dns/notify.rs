//! NOTIFY (RFC 1996) to the `--notify` targets: each new serial of the
//! zone is announced to every target, so secondaries fetch it at once
//! instead of at their next refresh.
//!
//! Per target, one NOTIFY is in flight at a time; serials that change
//! while one is out are coalesced into the newest; a NOTIFY without an
//! answer is sent again after 1, 2, 4 and 8 s and then given up (the next
//! serial tries again; a secondary still refreshes on its SOA timers).
//! The message and the check of its answer are pure ([`message`],
//! [`acknowledges`]); [`run`] is the thin task around a UDP socket. We
//! never act on a NOTIFY sent to us: we are the primary (the query path
//! answers one NOTIMP).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::answer::{Question, Room, answer};
use super::journal::Journal;
use super::name::QName;
use super::stats::DnsStats;
use super::wire::{CLASS_IN, RData, Soa, rtype};
use crate::model::Snapshot;

/// The NOTIFY opcode.
const OPCODE_NOTIFY: u16 = 4;
/// Tries per serial and target, waiting 1, 2, 4, 8, 16 s for an answer.
const TRIES: u32 = 5;
/// How often the published serial is looked at.
const POLL: Duration = Duration::from_millis(100);

/// A NOTIFY of `zone` (dotted, no trailing dot) with message id `id`:
/// opcode NOTIFY, AA, one question (`zone` SOA IN) and, when given, the
/// zone's SOA `(ttl, soa)` in the Answer section, which RFC 1996 §3.7
/// lets a secondary use to skip its SOA query when it is current.
pub(crate) fn message(zone: &str, id: u16, soa: Option<(u32, &Soa)>) -> Vec<u8> {
    let flags: u16 = OPCODE_NOTIFY << 11 | 0x0400;
    let mut m = Vec::with_capacity(96 + 3 * zone.len());
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, u8::from(soa.is_some()), 0, 0, 0, 0]);
    name(zone, &mut m);
    m.extend_from_slice(&rtype::SOA.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some((ttl, soa)) = soa {
        // The owner is the question's name.
        m.extend_from_slice(&[0xC0, 12]);
        m.extend_from_slice(&rtype::SOA.to_be_bytes());
        m.extend_from_slice(&CLASS_IN.to_be_bytes());
        m.extend_from_slice(&ttl.to_be_bytes());
        let mut rdata = Vec::with_capacity(64);
        name(&soa.mname, &mut rdata);
        name(&soa.rname, &mut rdata);
        for v in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] {
            rdata.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&rdata);
    }
    m
}

/// `n` (dotted, no trailing dot, labels of 1–63 octets as configured) in
/// wire form, uncompressed.
fn name(n: &str, out: &mut Vec<u8>) {
    for label in n.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// The zone's SOA as queries get it: its TTL and data.
fn zone_soa(snap: &Snapshot) -> Option<(u32, Soa)> {
    let qname = QName::from_text(snap.settings.zone.text()).ok()?;
    let q = Question {
        name: &qname,
        qtype: rtype::SOA,
        qclass: CLASS_IN,
        room: Room::Whole,
    };
    let a = answer(snap, q, 0, std::time::Instant::now()).answer;
    a.answers.into_iter().find_map(|r| match r.data {
        RData::Soa(soa) => Some((r.ttl, soa)),
        _ => None,
    })
}

/// Whether `reply` answers NOTIFY `id`: a response (QR), opcode NOTIFY,
/// the same id. Its rcode is not ours to judge: a secondary that refuses
/// the NOTIFY has answered it, and sending it again would not help.
pub(crate) fn acknowledges(reply: &[u8], id: u16) -> bool {
    let [a, b, f1, _, ..] = reply else {
        return false;
    };
    u16::from_be_bytes([*a, *b]) == id && f1 & 0x80 != 0 && (f1 >> 3) & 0x0F == OPCODE_NOTIFY as u8
}

/// Announces each new serial to the targets the snapshot's settings
/// name, until `shutdown`: the serial the `journal` has recorded, so a
/// secondary that asks for the differences at once finds them.
pub(crate) async fn run(
    (snapshot, journal): (Arc<ArcSwap<Snapshot>>, Arc<Journal>),
    stats: Arc<DnsStats>,
    shutdown: CancellationToken,
) {
    let recorded = |snap: &Snapshot| match journal.serial() {
        0 => snap.serial,
        s => s,
    };
    let mut told = recorded(&snapshot.load());
    let mut id: u16 = (told & 0xFFFF) as u16;
    loop {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = shutdown.cancelled() => return,
        }
        let snap = snapshot.load_full();
        let serial = recorded(&snap);
        if serial == told || snap.settings.notify.is_empty() {
            told = serial;
            continue;
        }
        told = serial;
        let zone = snap.settings.zone.text();
        let soa = zone_soa(&snap).map(|(ttl, soa)| (ttl, Soa { serial, ..soa }));
        let mut sends = tokio::task::JoinSet::new();
        for &target in &snap.settings.notify {
            id = id.wrapping_add(1);
            let mut msg = message(zone, id, soa.as_ref().map(|(ttl, s)| (*ttl, s)));
            // Signed with the first transfer key, where there is one:
            // a secondary that checks TSIG on transfers does on NOTIFY.
            if let Some(key) = snap.settings.transfer_keys.first() {
                super::tsig::sign_request(&mut msg, key, super::handler::unix_now());
            }
            let stats = stats.clone();
            sends.spawn(async move {
                let ok = notify(target, &msg, id).await;
                stats.notify(ok);
            });
        }
        tokio::select! {
            () = async { while sends.join_next().await.is_some() {} } => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Sends NOTIFY `msg` (of id `id`) to `target` until it is acknowledged,
/// at most [`TRIES`] times; says whether it was.
async fn notify(target: SocketAddr, msg: &[u8], id: u16) -> bool {
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(s) => s,
        Err(e) => {
            warn!(%target, error = %e, "NOTIFY: no socket");
            return false;
        }
    };
    let mut buf = [0u8; 512];
    for attempt in 0..TRIES {
        if let Err(e) = socket.send_to(msg, target).await {
            debug!(%target, error = %e, "NOTIFY not sent");
        }
        let wait = Duration::from_secs(1 << attempt);
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Ok((n, from))) =
            tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)).await
        {
            if from == target && acknowledges(&buf[..n], id) {
                return true;
            }
        }
    }
    warn!(%target, tries = TRIES, "NOTIFY not acknowledged; the secondary refreshes on its own timers");
    false
}

#[cfg(test)]
mod tests;
