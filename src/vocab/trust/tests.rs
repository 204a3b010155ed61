use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn nets(list: &str) -> Vec<IpNet> {
    parse_cidrs([list]).expect("test CIDRs")
}

#[test]
fn special_classes() {
    use Special::*;
    let cases: &[(&str, Option<Special>)] = &[
        // IPv4.
        ("0.0.0.0", Some(Unspecified)),
        ("0.1.2.3", Some(Unspecified)),
        ("127.0.0.1", Some(Loopback)),
        ("127.255.255.254", Some(Loopback)),
        ("169.254.0.1", Some(LinkLocal)),
        ("169.254.169.254", Some(Metadata)),
        ("100.100.100.200", Some(Metadata)),
        ("224.0.0.1", Some(Multicast)),
        ("239.255.255.250", Some(Multicast)),
        ("255.255.255.255", Some(Broadcast)),
        // IPv6.
        ("::", Some(Unspecified)),
        ("::1", Some(Loopback)),
        ("fe80::1", Some(LinkLocal)),
        ("febf::1", Some(LinkLocal)),
        ("ff02::1", Some(Multicast)),
        ("ff05::2", Some(Multicast)),
        ("fd00:ec2::254", Some(Metadata)),
        // IPv4-mapped and IPv4-compatible forms are their IPv4 address's.
        ("::ffff:127.0.0.1", Some(Loopback)),
        ("::ffff:169.254.169.254", Some(Metadata)),
        ("::ffff:0.0.0.0", Some(Unspecified)),
        ("::ffff:224.0.0.1", Some(Multicast)),
        ("::ffff:255.255.255.255", Some(Broadcast)),
        ("::127.0.0.1", Some(Loopback)),
        ("::169.254.1.1", Some(LinkLocal)),
        ("::ffff:10.1.2.3", None),
        // Ordinary addresses, the documentation ranges among them.
        ("10.1.2.3", None),
        ("100.64.0.1", None),
        ("100.100.100.201", None),
        ("192.0.2.1", None),
        ("198.51.100.20", None),
        ("203.0.113.10", None),
        ("8.8.8.8", None),
        ("fd00:40::20:1", None),
        ("fd00:ec2::253", None),
        ("2001:db8::1", None),
        ("fec0::1", None),
    ];
    for (addr, want) in cases {
        assert_eq!(special(ip(addr)), *want, "{addr}");
    }
}

#[test]
fn address_rules() {
    let settings = TrustSettings {
        deny_addresses: nets("10.99.0.0/16, 203.0.113.66"),
        exempt_addresses: nets("127.0.0.0/8"),
        ..TrustSettings::default()
    };
    let open = Trust::new(settings.clone(), Claims::default());
    let bounded = Trust::new(
        settings,
        Claims {
            allowed_addresses: Some(nets("10.10.0.0/16,fd00:10::/64,127.0.0.1")),
            ..Claims::default()
        },
    );
    let cases: &[(&str, &Trust, &str, Result<(), Rejected>)] = &[
        ("pod address", &open, "10.1.2.3", Ok(())),
        (
            "metadata",
            &open,
            "169.254.169.254",
            Err(Rejected::Special(Special::Metadata)),
        ),
        ("exempted loopback", &open, "127.0.0.5", Ok(())),
        (
            "the exemption covers only its range",
            &open,
            "::1",
            Err(Rejected::Special(Special::Loopback)),
        ),
        (
            "operator's deny list",
            &open,
            "10.99.1.1",
            Err(Rejected::Denied(nets("10.99.0.0/16")[0])),
        ),
        (
            "a denied address, as a /32",
            &open,
            "203.0.113.66",
            Err(Rejected::Denied(nets("203.0.113.66/32")[0])),
        ),
        (
            "the deny list matches an IPv4-mapped address",
            &open,
            "::ffff:10.99.0.7",
            Err(Rejected::Denied(nets("10.99.0.0/16")[0])),
        ),
        ("inside allowedAddresses", &bounded, "10.10.3.4", Ok(())),
        (
            "inside allowedAddresses, v6",
            &bounded,
            "fd00:10::9",
            Ok(()),
        ),
        (
            "outside allowedAddresses",
            &bounded,
            "10.20.0.1",
            Err(Rejected::NotAllowed),
        ),
        (
            "allowedAddresses never lift a special class",
            &bounded,
            "169.254.169.254",
            Err(Rejected::Special(Special::Metadata)),
        ),
        (
            "an exempted address still needs allowedAddresses",
            &bounded,
            "127.0.0.2",
            Err(Rejected::NotAllowed),
        ),
    ];
    for (name, trust, addr, want) in cases {
        assert_eq!(trust.check_address(ip(addr)), *want, "{name}");
    }
}

#[test]
fn namespace_rules() {
    let default = Trust::default();
    let listed = Trust::new(
        TrustSettings {
            own_namespace: Arc::from("dns-system"),
            ..TrustSettings::default()
        },
        Claims {
            allowed_namespaces: Some(parse_namespaces(["shop, kube-system"]).expect("names")),
            denied_namespaces: parse_namespaces(["legacy"]).expect("names"),
            ..Claims::default()
        },
    );
    let denied_only = Trust::new(
        TrustSettings::default(),
        Claims {
            denied_namespaces: parse_namespaces(["legacy"]).expect("names"),
            ..Claims::default()
        },
    );
    let cases: &[(&str, &Trust, &str, Result<(), NamespaceDenied>)] = &[
        ("an application namespace", &default, "shop", Ok(())),
        (
            "kube-system",
            &default,
            "kube-system",
            Err(NamespaceDenied::System),
        ),
        (
            "kube-public",
            &default,
            "kube-public",
            Err(NamespaceDenied::System),
        ),
        (
            "kube-node-lease",
            &default,
            "kube-node-lease",
            Err(NamespaceDenied::System),
        ),
        (
            "our own namespace",
            &default,
            "clusterset-dns",
            Err(NamespaceDenied::System),
        ),
        ("allowed by name", &listed, "kube-system", Ok(())),
        ("in the allow list", &listed, "shop", Ok(())),
        (
            "outside the allow list",
            &listed,
            "data",
            Err(NamespaceDenied::NotAllowed),
        ),
        (
            "the deny list wins",
            &listed,
            "legacy",
            Err(NamespaceDenied::Listed),
        ),
        (
            "deny list alone",
            &denied_only,
            "legacy",
            Err(NamespaceDenied::Listed),
        ),
        ("deny list alone, others pass", &denied_only, "data", Ok(())),
    ];
    for (name, trust, ns, want) in cases {
        assert_eq!(trust.check_namespace(ns), *want, "{name}");
    }
}

#[test]
fn list_parsing() {
    assert_eq!(
        parse_cidrs(["10.0.0.0/8,fd00::/8", " 192.0.2.1 ", ""]).expect("parses"),
        vec![
            "10.0.0.0/8".parse::<IpNet>().expect("net"),
            "fd00::/8".parse().expect("net"),
            "192.0.2.1/32".parse().expect("net"),
        ]
    );
    assert_eq!(
        parse_cidrs(["10.0.0.0/33"]),
        Err(ListError::NotCidr("10.0.0.0/33".into()))
    );
    assert_eq!(
        parse_cidrs(["10.1.0.0/8"]).map_err(|e| e.to_string()),
        Err("\"10.1.0.0/8\" has host bits set; did you mean 10.0.0.0/8?".into())
    );
    assert_eq!(
        parse_namespaces(["shop,Data"]),
        Err(ListError::NotNamespace("Data".into()))
    );
}
