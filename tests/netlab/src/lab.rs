//! Lab hosts: each [`Host`] is a Linux network namespace joined to the root namespace by a
//! veth pair carrying a /30 from 198.18.0.0/15, with `lo` up and no default route, so a server
//! inside is reachable from the test process at [`Host::addr`] and nothing inside can reach
//! past [`Host::gateway`].
//!
//! It owns the namespaces, veths and addresses it creates and the processes running in those
//! namespaces: dropping a [`Host`] (or the [`Lab`] that made it) kills those processes and
//! removes the namespace and its veth, also while a test panics. It must not touch any other
//! namespace, link, address or process, and takes addresses only from 198.18.0.0/15. The one
//! thing it leaves in place on purpose is an `unreachable` route for 198.18.0.0/15 in the root
//! namespace, so that nothing sent to a lab address ever leaves the machine (see
//! [`Lab::new`]).

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::NetlabError;

/// Namespaces made by this process so far: part of every name, so names never repeat.
static NEXT_HOST: AtomicU32 = AtomicU32::new(0);

/// /30s in 198.18.0.0/15.
const SLOTS: u32 = 1 << 15;

/// Linux's limit on interface names (IFNAMSIZ less the NUL).
const IFNAME_MAX: usize = 15;

/// The lab's tools, found once.
#[derive(Debug)]
pub(crate) struct Tools {
    pub(crate) ip: PathBuf,
    pub(crate) nft: PathBuf,
}

/// Finds `name` on PATH or in the sbin directories, which a non-login root shell's PATH may
/// lack.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Runs `cmd` to completion; its stdout, or an error naming it with its stderr.
pub(crate) fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String, NetlabError> {
    let command = format!("{cmd:?}");
    let fail = |detail: String| NetlabError::Command {
        command: command.clone(),
        detail,
    };
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| fail(e.to_string()))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| fail(format!("writing stdin: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One namespace and its veth; tears both down (after killing what runs inside) once, on drop
/// or when the [`Lab`] goes first.
#[derive(Debug)]
pub(crate) struct Netns {
    pub(crate) name: String,
    host_if: String,
    pub(crate) tools: Arc<Tools>,
    torn_down: AtomicBool,
}

impl Netns {
    fn teardown(&self) {
        if self.torn_down.swap(true, Ordering::SeqCst) {
            return;
        }
        // Only processes netlab started live in this namespace: nothing else enters it.
        let pids = run(
            Command::new(&self.tools.ip).args(["netns", "pids", &self.name]),
            None,
        )
        .unwrap_or_default();
        for pid in pids
            .lines()
            .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
        {
            // SIGCONT first, so that a stopped process dies at once.
            signal(pid, libc::SIGCONT);
            signal(pid, libc::SIGKILL);
        }
        // Deleting the root end removes both ends now; the namespace's own teardown would
        // remove them only once the kernel gets round to it.
        let _ = run(
            Command::new(&self.tools.ip).args(["link", "del", &self.host_if]),
            None,
        );
        if let Err(e) = run(
            Command::new(&self.tools.ip).args(["netns", "del", &self.name]),
            None,
        ) {
            eprintln!("netlab: could not remove namespace {}: {e}", self.name);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Sends `sig` to `pid`; whether it was delivered (a process already gone is no error here).
#[allow(unsafe_code)]
pub(crate) fn signal(pid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Makes sure no packet for 198.18.0.0/15 leaves this machine: an `unreachable` route for the
/// whole range in the root namespace (each host's /30 is more specific and wins), unless the
/// range has a route already.
///
/// Without it, a socket that outlives its host (a client closing after the namespace went, so
/// retransmitting its FIN for minutes) would send through the default route. The route must
/// outlive those sockets, even this process, so it is the one thing netlab leaves in place; it
/// sends nothing anywhere and only concerns a range reserved for benchmarking.
fn contain_lab_range(tools: &Tools) -> Result<(), NetlabError> {
    const RANGE: &str = "198.18.0.0/15";
    let ip = |args: &[&str]| run(Command::new(&tools.ip).args(args), None);
    if ip(&["route", "show", "exact", RANGE])?.trim().is_empty() {
        // `replace` rather than `add`: a parallel test process may be doing the same.
        ip(&["route", "replace", "unreachable", RANGE])?;
    }
    Ok(())
}

/// Makes [`Host`]s; dropping it removes every namespace it made that is still there.
#[derive(Debug)]
pub struct Lab {
    tools: Arc<Tools>,
    made: Mutex<Vec<Weak<Netns>>>,
}

impl Lab {
    /// A lab, or `Ok(None)` (after one line on stderr saying why) when this process is not
    /// root or the `ip` and `nft` commands are missing, so that a test can skip.
    ///
    /// It adds an `unreachable` route for 198.18.0.0/15 to the root namespace if that range
    /// has no route, and leaves it there: a client socket that outlives its host keeps
    /// retransmitting for minutes, and must not do so through the default route.
    pub fn new() -> Result<Option<Lab>, NetlabError> {
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        #[allow(unsafe_code)]
        let root = unsafe { libc::geteuid() } == 0;
        let tools = find_tool("ip").zip(find_tool("nft"));
        let Some((ip, nft)) = tools.filter(|_| root) else {
            eprintln!("netlab: skipped: needs root and the `ip` and `nft` commands");
            return Ok(None);
        };
        let tools = Arc::new(Tools { ip, nft });
        contain_lab_range(&tools)?;
        Ok(Some(Lab {
            tools,
            made: Mutex::new(Vec::new()),
        }))
    }

    /// A new host named `label` (for messages only): a fresh namespace `csdns-<pid>-<n>`, a
    /// veth pair and a /30 from 198.18.0.0/15 that no interface of this machine has.
    pub fn host(&self, label: &str) -> Result<Host, NetlabError> {
        let pid = std::process::id();
        let n = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
        let name = format!("csdns-{pid}-{n}");
        let host_if = format!("cs{pid:x}h{n}");
        let ns_if = format!("cs{pid:x}n{n}");
        if host_if.len() > IFNAME_MAX || ns_if.len() > IFNAME_MAX {
            return Err(NetlabError::Command {
                command: format!("ip link add {host_if}"),
                detail: format!("interface names are limited to {IFNAME_MAX} bytes"),
            });
        }
        // Other test processes allocate too: the check and the assignment are one step.
        let lock = AllocationLock::take()?;
        let network = free_slot(&self.tools, pid, n)?;
        let ip = |args: &[&str]| run(Command::new(&self.tools.ip).args(args), None);
        ip(&["netns", "add", &name])?;
        let netns = Arc::new(Netns {
            name,
            host_if,
            tools: self.tools.clone(),
            torn_down: AtomicBool::new(false),
        });
        let gateway = Ipv4Addr::from(u32::from(network) + 1);
        let addr = Ipv4Addr::from(u32::from(network) + 2);
        let (ns, hif) = (netns.name.as_str(), netns.host_if.as_str());
        let steps: [&[&str]; 6] = [
            &[
                "link", "add", hif, "type", "veth", "peer", "name", &ns_if, "netns", ns,
            ],
            &["addr", "add", &format!("{gateway}/30"), "dev", hif],
            &["link", "set", hif, "up"],
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/30"),
                "dev",
                &ns_if,
            ],
            &["-n", ns, "link", "set", &ns_if, "up"],
            &["-n", ns, "link", "set", "lo", "up"],
        ];
        for step in steps {
            ip(step)?;
        }
        drop(lock);
        if let Ok(mut made) = self.made.lock() {
            made.retain(|w| w.strong_count() > 0);
            made.push(Arc::downgrade(&netns));
        }
        Ok(Host {
            label: label.to_owned(),
            netns,
            addr,
            gateway,
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let made = match self.made.lock() {
            Ok(mut made) => std::mem::take(&mut *made),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for netns in made.iter().filter_map(Weak::upgrade) {
            netns.teardown();
        }
    }
}

/// An exclusive lock on a file in the temp directory, held while a /30 is chosen and
/// assigned, so that parallel test processes never pick the same one.
struct AllocationLock {
    _file: File,
}

impl AllocationLock {
    fn take() -> Result<AllocationLock, NetlabError> {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join("netlab-addresses.lock");
        let file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| NetlabError::Io {
                what: format!("opening {}", path.display()),
                source,
            })?;
        // SAFETY: flock(2) on a descriptor that `file` owns and keeps open; it blocks until
        // the other holder is done.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(NetlabError::Io {
                what: format!("locking {}", path.display()),
                source: std::io::Error::last_os_error(),
            });
        }
        // Closing the file releases the lock.
        Ok(AllocationLock { _file: file })
    }
}

/// The IPv4 networks assigned to this namespace's interfaces, from `ip -o -4 addr`.
fn assigned(tools: &Tools) -> Result<Vec<(Ipv4Addr, u8)>, NetlabError> {
    let out = run(
        Command::new(&tools.ip).args(["-o", "-4", "addr", "show"]),
        None,
    )?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet")?;
            let (ip, len) = words.next()?.split_once('/')?;
            Some((ip.parse().ok()?, len.parse().ok()?))
        })
        .collect())
}

/// A /30 of 198.18.0.0/15 that overlaps nothing assigned here, starting from a /24 derived
/// from the pid (so parallel processes start apart) and this process's `n`th host.
fn free_slot(tools: &Tools, pid: u32, n: u32) -> Result<Ipv4Addr, NetlabError> {
    let taken = assigned(tools)?;
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    let start = (pid % 512) * 64 + n;
    (0..SLOTS)
        .map(|i| Ipv4Addr::from(base + ((start + i) % SLOTS) * 4))
        .find(|candidate| !taken.iter().any(|&(ip, len)| overlaps(*candidate, ip, len)))
        .ok_or(NetlabError::NoFreeSubnet)
}

/// Whether the /30 at `net` and `ip/len` share an address.
fn overlaps(net: Ipv4Addr, ip: Ipv4Addr, len: u8) -> bool {
    let prefix = u32::from(len.min(30));
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(net) & mask == u32::from(ip) & mask
}

/// A network namespace with one veth to the root namespace; see the module docs. The
/// namespace goes when the host and every [`Sim`](crate::Sim) started in it are dropped, or
/// when its [`Lab`] is.
#[derive(Debug)]
pub struct Host {
    label: String,
    pub(crate) netns: Arc<Netns>,
    addr: Ipv4Addr,
    gateway: Ipv4Addr,
}

impl Host {
    /// The namespace end's address: what servers inside bind to and clients dial.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The root namespace end's address (the other half of the /30).
    pub fn gateway(&self) -> Ipv4Addr {
        self.gateway
    }

    /// The label given to [`Lab::host`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The namespace's name, as `ip netns list` shows it.
    pub fn netns_name(&self) -> &str {
        &self.netns.name
    }

    /// A command that runs `program` inside the namespace (`ip netns exec <ns> <program>`).
    /// Whatever it starts is killed when the host goes (once it has entered the namespace:
    /// `ip netns exec` enters it just before it execs `program`).
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut cmd = Command::new(&self.netns.tools.ip);
        cmd.args(["netns", "exec", &self.netns.name])
            .arg(program.as_ref());
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_checked_at_the_shorter_prefix() {
        let net = Ipv4Addr::new(198, 18, 3, 4);
        assert!(overlaps(net, Ipv4Addr::new(198, 18, 3, 5), 30));
        assert!(overlaps(net, Ipv4Addr::new(198, 18, 3, 6), 32));
        assert!(!overlaps(net, Ipv4Addr::new(198, 18, 3, 8), 30));
        assert!(overlaps(net, Ipv4Addr::new(198, 18, 0, 1), 15));
        assert!(!overlaps(net, Ipv4Addr::new(192, 0, 2, 2), 24));
        assert!(
            overlaps(net, Ipv4Addr::new(10, 0, 0, 1), 0),
            "a default /0 covers all"
        );
    }

    #[test]
    fn slots_stay_in_the_lab_range() {
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
        for slot in [0, 1, SLOTS - 1] {
            let net = Ipv4Addr::from(base + slot * 4);
            assert!(
                crate::in_lab_range(net) && crate::in_lab_range(Ipv4Addr::from(u32::from(net) + 3))
            );
        }
        assert!(!crate::in_lab_range(Ipv4Addr::from(base + SLOTS * 4)));
    }
}
