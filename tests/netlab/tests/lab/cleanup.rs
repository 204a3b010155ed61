//! Namespaces, veths and processes go with their Host, their Lab, or a panic.

use std::process::Command;
use std::time::Duration;

use crate::support::lab;

fn netns_listed(name: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

fn address_assigned(ip: std::net::Ipv4Addr) -> bool {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .expect("ip addr runs");
    String::from_utf8_lossy(&out.stdout).contains(&format!("inet {ip}/"))
}

fn process_alive(pid: u32) -> bool {
    // A killed child that nobody waited for yet is a zombie: gone for this purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn dropping_the_lab_removes_its_namespaces_and_kills_what_runs_there() {
    let Some(lab) = lab() else { return };
    let host = lab.host("doomed").expect("a lab host");
    let name = host.netns_name().to_owned();
    let gateway = host.gateway();
    assert!(netns_listed(&name) && address_assigned(gateway));
    let mut sleeper = host
        .command("sleep")
        .arg("60")
        .spawn()
        .expect("sleep runs in the host");
    let pid = sleeper.id();
    // `ip netns exec` enters the namespace and then execs sleep: wait until it has.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .as_deref()
        != Some("sleep\n")
    {
        assert!(std::time::Instant::now() < deadline, "sleep started in 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The host outlives the lab here: the lab still removes what it made.
    drop(lab);
    assert!(!netns_listed(&name), "{name} is gone");
    assert!(!address_assigned(gateway), "the veth is gone");
    let reaped = sleeper.wait().expect("waits");
    assert!(!reaped.success(), "killed: {reaped}");
    assert!(!process_alive(pid));
    drop(host);
}

#[test]
fn a_panicking_test_still_removes_its_host() {
    let Some(lab) = lab() else { return };
    let (tx, rx) = std::sync::mpsc::channel();
    let outcome = std::panic::catch_unwind(|| {
        let host = lab.host("panics").expect("a lab host");
        tx.send(host.netns_name().to_owned()).expect("sends");
        panic!("the test fails with a host alive");
    });
    assert!(outcome.is_err());
    let name = rx
        .recv_timeout(Duration::from_secs(1))
        .expect("the name was sent");
    assert!(!netns_listed(&name), "{name} is gone after the unwind");
}

#[test]
fn hosts_get_distinct_lab_addresses() {
    let Some(lab) = lab() else { return };
    let a = lab.host("a").expect("a lab host");
    let b = lab.host("b").expect("a lab host");
    for ip in [a.addr(), a.gateway(), b.addr(), b.gateway()] {
        assert!(netlab::permitted(ip.into()), "{ip}");
        assert_eq!(ip.octets()[0..1], [198]);
    }
    assert_ne!(
        u32::from(a.addr()) / 4,
        u32::from(b.addr()) / 4,
        "distinct /30s"
    );
    let routes = a
        .command("ip")
        .args(["route", "show"])
        .output()
        .expect("ip route runs in the host");
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(!routes.contains("default"), "no default route: {routes}");
}
