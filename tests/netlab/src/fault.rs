//! Silent network faults on one TCP port of a [`Host`], made with nftables inside the host's
//! namespace: a table `inet netlab` with an input and an output chain, replaced as a whole in
//! one transaction by [`Host::fault`] and removed by [`Host::heal`].
//!
//! It owns that table only. It must not touch any other table, any other namespace, or ports
//! other than the one it is given, so that kubesim's control endpoint on another port keeps
//! working while the API port is faulted.

use std::fmt;
use std::process::Command;

use crate::NetlabError;
use crate::lab::{Host, run};

/// What happens to the packets of one TCP port (the server's side of it, in its namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Everything to and from the port is dropped: connections hang, new ones time out.
    Blackhole,
    /// Packets to the port are answered with a TCP reset: new connections are refused and
    /// open ones are reset at their next packet, quickly.
    Reset,
    /// Packets to the server are dropped; its replies would still flow.
    DropInbound,
    /// The server's packets are dropped; requests still reach it.
    DropOutbound,
    /// New connections (a SYN without ACK) are dropped; open connections keep working.
    DropNew,
}

impl Fault {
    /// Every fault, in declaration order.
    pub const ALL: [Fault; 5] = [
        Fault::Blackhole,
        Fault::Reset,
        Fault::DropInbound,
        Fault::DropOutbound,
        Fault::DropNew,
    ];

    /// A short name for test and benchmark output: `blackhole`, `reset`, `drop-in`,
    /// `drop-out`, `drop-new`.
    pub fn label(self) -> &'static str {
        match self {
            Fault::Blackhole => "blackhole",
            Fault::Reset => "reset",
            Fault::DropInbound => "drop-in",
            Fault::DropOutbound => "drop-out",
            Fault::DropNew => "drop-new",
        }
    }

    /// The rules of the input and the output chain for server port `port`.
    fn rules(self, port: u16) -> (Vec<String>, Vec<String>) {
        let inbound = format!("tcp dport {port}");
        let outbound = format!("tcp sport {port}");
        match self {
            Fault::Blackhole => (
                vec![format!("{inbound} drop")],
                vec![format!("{outbound} drop")],
            ),
            Fault::Reset => (vec![format!("{inbound} reject with tcp reset")], vec![]),
            Fault::DropInbound => (vec![format!("{inbound} drop")], vec![]),
            Fault::DropOutbound => (vec![], vec![format!("{outbound} drop")]),
            // Not `ct state new`: conntrack starts tracking in a namespace only once a rule
            // needs it, and then takes the first packet of a connection opened before as
            // new, which would cut exactly the connections this fault must spare. A SYN
            // without ACK opens a connection and nothing else does.
            Fault::DropNew => (
                vec![format!("{inbound} tcp flags & (syn | ack) == syn drop")],
                vec![],
            ),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Creating the table first makes the delete succeed whether or not it existed, so that
/// replacing and healing are each one transaction.
const CLEAR: &str = "table inet netlab\ndelete table inet netlab\n";

/// The nft script that replaces the netlab table with `fault` on `port`.
fn ruleset(fault: Fault, port: u16) -> String {
    let (input, output) = fault.rules(port);
    let chain = |name: &str, rules: &[String]| {
        let mut text = format!(
            "    chain {name} {{\n        type filter hook {name} priority 0; policy accept;\n"
        );
        for rule in rules {
            text.push_str(&format!("        {rule}\n"));
        }
        text.push_str("    }\n");
        text
    };
    format!(
        "{CLEAR}table inet netlab {{\n{}{}}}\n",
        chain("input", &input),
        chain("output", &output)
    )
}

impl Host {
    /// Replaces the current fault (if any) with `fault` on TCP port `port` of this host.
    pub fn fault(&self, port: u16, fault: Fault) -> Result<(), NetlabError> {
        self.nft(&ruleset(fault, port))
    }

    /// Removes the current fault, if any.
    pub fn heal(&self) -> Result<(), NetlabError> {
        self.nft(CLEAR)
    }

    fn nft(&self, script: &str) -> Result<(), NetlabError> {
        let mut cmd = Command::new(&self.netns.tools.ip);
        cmd.args(["netns", "exec", &self.netns.name])
            .arg(&self.netns.tools.nft)
            .args(["-f", "-"]);
        run(&mut cmd, Some(script)).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_kebab_case() {
        let labels: Vec<&str> = Fault::ALL.iter().map(|f| f.label()).collect();
        assert_eq!(
            labels,
            ["blackhole", "reset", "drop-in", "drop-out", "drop-new"]
        );
        assert_eq!(Fault::DropNew.to_string(), "drop-new");
    }

    #[test]
    fn each_fault_names_only_its_port() {
        for fault in Fault::ALL {
            let text = ruleset(fault, 6443);
            assert!(text.starts_with(CLEAR), "{text}");
            for line in text.lines().filter(|l| l.contains("tcp ")) {
                assert!(line.contains("port 6443 "), "{fault}: {line}");
            }
        }
        let blackhole = ruleset(Fault::Blackhole, 6443);
        assert!(
            blackhole.contains("tcp dport 6443 drop") && blackhole.contains("tcp sport 6443 drop")
        );
    }
}
