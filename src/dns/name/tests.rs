use super::*;
use proptest::prelude::*;

fn zone() -> ZoneName {
    ZoneName::new("clusterset.local").expect("zone")
}

fn parsed(name: &str) -> Option<String> {
    let q = QName::from_text(name).expect("valid name");
    let rel = q.relative_to(&zone())?;
    Some(format!("{:?}", parse(&q, rel)))
}

#[test]
fn parse_table() {
    // (query name, expected parse; None = outside the zone)
    let cases: &[(&str, Option<&str>)] = &[
        ("clusterset.local.", Some("Apex")),
        ("ClusterSet.LOCAL", Some("Apex")),
        ("svc.clusterset.local", Some("Svc")),
        ("dns.clusterset.local", Some("Dns")),
        ("ns.dns.clusterset.local", Some("NsHost")),
        ("dns-version.clusterset.local", Some("DnsVersion")),
        ("pod.clusterset.local", Some("Nothing")),
        ("x.dns.clusterset.local", Some("Nothing")),
        (
            "prod.svc.clusterset.local",
            Some("Namespace { ns: \"prod\" }"),
        ),
        (
            "web-east.prod.svc.clusterset.local",
            Some("Service { key: \"web-east.prod\" }"),
        ),
        (
            "Web-East.PROD.svc.clusterset.local",
            Some("Service { key: \"web-east.prod\" }"),
        ),
        (
            "_tcp.web-east.prod.svc.clusterset.local",
            Some("Proto { key: \"web-east.prod\", proto: \"tcp\" }"),
        ),
        (
            "_http._tcp.web-east.prod.svc.clusterset.local",
            Some("Port { key: \"web-east.prod\", port: \"http\", proto: \"tcp\" }"),
        ),
        (
            "db-0.db-east.prod.svc.clusterset.local",
            Some("Child { key: \"db-east.prod\", child: \"db-0\" }"),
        ),
        (
            "db-0.east.db-federated.prod.svc.clusterset.local",
            Some("Grandchild { key: \"db-federated.prod\", cluster: \"east\", host: \"db-0\" }"),
        ),
        // Mixed underscore forms and deeper names are not in the grammar.
        (
            "_http.db-0.db-east.prod.svc.clusterset.local",
            Some("Nothing"),
        ),
        (
            "db-0._tcp.db-east.prod.svc.clusterset.local",
            Some("Nothing"),
        ),
        (
            "x.db-0.east.db-federated.prod.svc.clusterset.local",
            Some("Nothing"),
        ),
        ("web-east.prod.pod.clusterset.local", Some("Nothing")),
        (
            "*.prod.svc.clusterset.local",
            Some("Service { key: \"*.prod\" }"),
        ),
        ("clusterset.local.example", None),
        ("xclusterset.local", None),
        ("local", None),
        ("", None),
    ];
    for (name, want) in cases {
        assert_eq!(parsed(name).as_deref(), *want, "{name}");
    }
}

#[test]
fn wire_names() {
    // (wire bytes, expected text or error)
    let cases: &[(&[u8], Result<&str, NameError>)] = &[
        (b"\x00", Ok("")),
        (b"\x03WeB\x05Local\x00", Ok("web.local")),
        (b"\x03web", Err(NameError::Truncated)),
        (b"\x03we", Err(NameError::Truncated)),
        (b"", Err(NameError::Truncated)),
        (b"\xc0\x0c", Err(NameError::Pointer)),
        (b"\x40aaaa\x00", Err(NameError::BadLabel(0x40))),
        (b"\x80\x00", Err(NameError::BadLabel(0x80))),
    ];
    for (wire, want) in cases {
        let got = QName::from_wire(wire).map(|(n, _)| n.text().to_owned());
        assert_eq!(got.as_deref().map_err(|e| *e), *want, "{wire:?}");
    }
    let (n, used) = QName::from_wire(b"\x03abc\x00rest").expect("name");
    assert_eq!((n.text(), used, n.wire_len()), ("abc", 5, 5));
    assert_eq!(n.wire_offset(0), 0);
    assert_eq!(n.wire_offset(1), 4);
}

#[test]
fn names_longer_than_255_octets_are_rejected() {
    let mut wire = Vec::new();
    for _ in 0..4 {
        wire.push(63);
        wire.extend_from_slice(&[b'a'; 63]);
    }
    // 4 × 64 = 256 octets before the root: too long.
    wire.push(0);
    assert_eq!(QName::from_wire(&wire).map(|_| ()), Err(NameError::TooLong));
    // 3 labels of 63 and one of 61: 3 × 64 + 62 + 1 = 255 octets, the limit.
    let mut ok = Vec::new();
    for _ in 0..3 {
        ok.push(63);
        ok.extend_from_slice(&[b'a'; 63]);
    }
    ok.push(61);
    ok.extend_from_slice(&[b'a'; 61]);
    ok.push(0);
    let (n, used) = QName::from_wire(&ok).expect("255 octets is allowed");
    assert_eq!((used, n.text().len()), (255, 253));
}

#[test]
fn opaque_labels_never_match() {
    // A label holding a dot must not be split into two labels by the text form.
    let (n, _) = QName::from_wire(b"\x0aweb-east.x\x04prod\x03svc\x0aclusterset\x05local\x00")
        .expect("name");
    assert!(n.is_opaque());
    assert_eq!(n.relative_to(&zone()), Some(3));
    assert_eq!(parse(&n, 3), Parsed::Nothing);
    let (n, _) = QName::from_wire(b"\x03w\xffb\x00").expect("name");
    assert!(n.is_opaque());
    assert_eq!(n.text(), "w?b");
}

#[test]
fn zone_names() {
    assert_eq!(
        ZoneName::new("ClusterSet.Local.").expect("ok").text(),
        "clusterset.local"
    );
    for bad in ["", ".", "a..b", "a_b.local", "é.local"] {
        assert!(ZoneName::new(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn reverse_names() {
    let p = |s: &str| parse_reverse(&QName::from_text(s).expect("name"));
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    assert_eq!(
        p("10.2.10.10.in-addr.arpa"),
        Some(ReverseName::Addr(ip("10.10.2.10")))
    );
    assert_eq!(
        p("2.10.in-addr.arpa"),
        Some(ReverseName::Prefix {
            first: ip("10.2.0.0"),
            last: ip("10.2.255.255"),
        })
    );
    assert_eq!(p("010.2.10.10.in-addr.arpa"), None);
    assert_eq!(p("256.2.10.10.in-addr.arpa"), None);
    assert_eq!(p("1.1.2.10.10.in-addr.arpa"), None);
    let v6 = reverse_name(ip("fd00:20::1"));
    assert_eq!(
        v6,
        "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.0.d.f.ip6.arpa"
    );
    assert_eq!(p(&v6), Some(ReverseName::Addr(ip("fd00:20::1"))));
    assert_eq!(
        p("0.0.d.f.ip6.arpa"),
        Some(ReverseName::Prefix {
            first: ip("fd00::"),
            last: ip("fd00:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        })
    );
    assert_eq!(p("x.0.d.f.ip6.arpa"), None);
    assert_eq!(reverse_name(ip("10.10.2.10")), "10.2.10.10.in-addr.arpa");
}

/// An RFC 1123 label, as Kubernetes names are.
fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"
}

fn parsed_name() -> impl Strategy<Value = (u8, Vec<String>)> {
    (0u8..11, proptest::collection::vec(label(), 5))
}

proptest! {
    #[test]
    fn format_then_parse_is_identity((kind, labels) in parsed_name()) {
        let z = zone();
        let key_owned = format!("{}.{}", labels[0], labels[1]);
        let key = key_owned.as_str();
        let value = match kind {
            0 => Parsed::Apex,
            1 => Parsed::Dns,
            2 => Parsed::NsHost,
            3 => Parsed::DnsVersion,
            4 => Parsed::Svc,
            5 => Parsed::Namespace { ns: &labels[0] },
            6 => Parsed::Service { key },
            7 => Parsed::Proto { key, proto: &labels[2] },
            8 => Parsed::Port { key, port: &labels[2], proto: &labels[3] },
            9 => Parsed::Child { key, child: &labels[2] },
            _ => Parsed::Grandchild { key, cluster: &labels[2], host: &labels[3] },
        };
        let text = format(&value, &z).expect("formattable");
        let q = QName::from_text(&text).expect("formatted names are valid");
        let rel = q.relative_to(&z).expect("inside the zone");
        prop_assert_eq!(parse(&q, rel), value);
    }

    #[test]
    fn parsing_never_panics(labels in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..70), 0..10)) {
        let mut wire = Vec::new();
        for l in &labels {
            wire.push(l.len() as u8);
            wire.extend_from_slice(l);
        }
        wire.extend_from_slice(b"\x03svc\x0aclusterset\x05local\x00");
        if let Ok((q, _)) = QName::from_wire(&wire) {
            if let Some(rel) = q.relative_to(&zone()) {
                let p = parse(&q, rel);
                if let Some(text) = format(&p, &zone()) {
                    // Whatever parses also formats back to the same name.
                    prop_assert_eq!(text, q.text());
                }
            }
            let _ = parse_reverse(&q);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(wire in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = QName::from_wire(&wire);
    }
}
