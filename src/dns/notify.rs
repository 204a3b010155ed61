//! NOTIFY (RFC 1996) to the `--notify` targets: each new serial of the
//! zone is announced to every target, so secondaries fetch it at once
//! instead of at their next refresh.
//!
//! Per target, one NOTIFY is in flight at a time, from a task of its own
//! (a secondary that is down delays no other); a newer serial replaces
//! the one being announced at once (coalesced); a NOTIFY without an
//! answer is sent again after 1, 2, 4, 8 and 16 s and then given up (the
//! next serial tries again; a secondary still refreshes on its SOA
//! timers). The message and the check of its answer are pure
//! ([`message`], [`acknowledges`]); [`run`] and its per-target tasks are
//! the thin layer around UDP sockets. We
//! never act on a NOTIFY sent to us: we are the primary (the query path
//! answers one NOTIMP).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::answer::{Question, Room, answer};
use super::journal::Journal;
use super::name::QName;
use super::stats::DnsStats;
use super::wire::{CLASS_IN, RData, Soa, name_uncompressed, rtype};
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
    name_uncompressed(zone, &mut m);
    m.extend_from_slice(&rtype::SOA.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some((ttl, soa)) = soa {
        // The owner is the question's name.
        m.extend_from_slice(&[0xC0, 12]);
        m.extend_from_slice(&rtype::SOA.to_be_bytes());
        m.extend_from_slice(&CLASS_IN.to_be_bytes());
        m.extend_from_slice(&ttl.to_be_bytes());
        let mut rdata = Vec::with_capacity(64);
        name_uncompressed(&soa.mname, &mut rdata);
        name_uncompressed(&soa.rname, &mut rdata);
        for v in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] {
            rdata.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&rdata);
    }
    m
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
/// secondary that asks for the differences at once finds them. Each
/// target has a task of its own, started and stopped as reloads change
/// the targets, so a secondary that does not answer never delays another.
pub(crate) async fn run(
    (snapshot, journal): (Arc<ArcSwap<Snapshot>>, Arc<Journal>),
    stats: Arc<DnsStats>,
    shutdown: CancellationToken,
) {
    // Nothing until start-up is over: the zone is still being loaded.
    let recorded = |snap: &Snapshot| match journal.serial() {
        _ if !snap.settled => 0,
        0 => snap.serial,
        s => s,
    };
    let (serials, _) = watch::channel(0);
    let mut targets: HashMap<SocketAddr, AbortHandle> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = shutdown.cancelled() => return,
        }
        let snap = snapshot.load_full();
        serials.send_if_modified(|s| std::mem::replace(s, recorded(&snap)) != *s);
        let wanted = &snap.settings.notify;
        targets.retain(|t, task| {
            let keep = wanted.contains(t);
            if !keep {
                task.abort();
            }
            keep
        });
        for &target in wanted {
            targets.entry(target).or_insert_with(|| {
                let told = (serials.subscribe(), snapshot.clone(), stats.clone());
                tasks.spawn(announce(target, told))
            });
        }
        // Reap the tasks that ended (aborted ones).
        while tasks.try_join_next().is_some() {}
    }
}

/// Announces to `target` the serial `serials` holds (0: none yet) and
/// each one it moves to: one NOTIFY in flight, sent again after 1, 2, 4,
/// 8 and 16 s until acknowledged, and given up for a newer serial at once
/// (coalesced) or after the last try (counted). So a target is told the
/// serial of a restarted server as soon as its zone is loaded, as BIND
/// and Knot notify on load.
async fn announce(
    target: SocketAddr,
    (mut serials, snapshot, stats): (watch::Receiver<u32>, Arc<ArcSwap<Snapshot>>, Arc<DnsStats>),
) {
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(s) => s,
        Err(e) => {
            warn!(%target, error = %e, "NOTIFY: no socket; the secondary refreshes on its own timers");
            return;
        }
    };
    let mut id = target.port() ^ 0x5a5a;
    let mut told = 0;
    loop {
        let serial = *serials.borrow_and_update();
        if serial == 0 || serial == told {
            if serials.changed().await.is_err() {
                return;
            }
            continue;
        }
        id = id.wrapping_add(1);
        let msg = signed_message(&snapshot.load(), serial, id);
        match notify(&socket, target, (&msg, id), &mut serials).await {
            Outcome::Acknowledged => stats.notify(true),
            Outcome::GivenUp => {
                warn!(%target, serial, tries = TRIES, "NOTIFY not acknowledged; the secondary refreshes on its own timers");
                stats.notify(false);
            }
            // The loop takes the newest.
            Outcome::Newer => continue,
            Outcome::Stopped => return,
        }
        told = serial;
    }
}

/// The NOTIFY of `serial` with id `id`: the zone's SOA at that serial in
/// the Answer section, signed with the first transfer key where there is
/// one (a secondary that checks TSIG on transfers does on NOTIFY).
fn signed_message(snap: &Snapshot, serial: u32, id: u16) -> Vec<u8> {
    let soa = zone_soa(snap).map(|(ttl, soa)| (ttl, Soa { serial, ..soa }));
    let mut msg = message(
        snap.settings.zone.text(),
        id,
        soa.as_ref().map(|(ttl, s)| (*ttl, s)),
    );
    if let Some(key) = snap.settings.transfer_keys.first() {
        super::tsig::sign_request(&mut msg, key, super::handler::unix_now());
    }
    msg
}

/// How one NOTIFY ended.
enum Outcome {
    Acknowledged,
    GivenUp,
    /// A newer serial came first: announce that one instead.
    Newer,
    /// The serials stopped (shutdown).
    Stopped,
}

/// Sends NOTIFY `msg` (of id `id`) to `target` until it is acknowledged,
/// at most [`TRIES`] times, or until `serials` moves on.
async fn notify(
    socket: &UdpSocket,
    target: SocketAddr,
    (msg, id): (&[u8], u16),
    serials: &mut watch::Receiver<u32>,
) -> Outcome {
    let mut buf = [0u8; 512];
    for attempt in 0..TRIES {
        if let Err(e) = socket.send_to(msg, target).await {
            debug!(%target, error = %e, "NOTIFY not sent");
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1 << attempt);
        loop {
            tokio::select! {
                got = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)) => match got {
                    Ok(Ok((n, from))) if from == target && acknowledges(&buf[..n], id) => {
                        return Outcome::Acknowledged;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                },
                changed = serials.changed() => {
                    return if changed.is_ok() { Outcome::Newer } else { Outcome::Stopped };
                }
            }
        }
    }
    Outcome::GivenUp
}

#[cfg(test)]
mod tests;
