use super::*;

#[test]
fn skipped_kinds_from_any_document_fall_into_a_fixed_set() {
    let counters = SourceCounters::default();
    counters.skipped("v2 Service", 1);
    counters.skipped("discovery.k8s.io/v1beta1 EndpointSlice", 2);
    counters.skipped("v1 List", 1);
    counters.skipped("apps/v1 Deployment", 3);
    counters.skipped("v1 Foo\"} 1\nevil_metric{x=\"y", 1);
    for i in 0..300 {
        counters.skipped(&format!("v1 Bogus{i}"), 1);
    }
    assert_eq!(
        counters.read().skipped,
        vec![
            (SkippedKind::Service, 1),
            (SkippedKind::EndpointSlice, 2),
            (SkippedKind::List, 1),
            (SkippedKind::Other, 304),
        ]
    );
}

// ---------------------------------------------------------------- /debug/clusters

use serde_json::json;

/// `/debug/clusters` as it was built before its types existed (`json!`
/// field by field): the page must keep every name and shape.
fn reference(board: &StatusBoard, now: Instant, local_place: &Place) -> serde_json::Value {
    let secs_since = |t: Instant| secs(now.saturating_duration_since(t));
    let clusters: Vec<serde_json::Value> = board
        .snapshot()
        .into_iter()
        .map(|(name, r)| {
            let stale = r.stale_since();
            let mut adjusted = serde_json::Map::new();
            for ((adjustment, reason), n) in &r.adjusted {
                let entry = adjusted
                    .entry(adjustment.label())
                    .or_insert_with(|| json!({}));
                entry[reason.label()] = json!(n);
            }
            json!({
                "name": &*name,
                "local": r.local,
                "origin": r.origin,
                "state": r.phase().label(),
                "unreachableSeconds": r.silent_since.map(secs_since),
                "synced": r.synced,
                "gaveUpWaitingForSync": r.gave_up,
                "secondsSinceStart": secs_since(r.started),
                "staleSeconds": stale.map(secs_since),
                "lastError": r.last_error,
                "secondsSinceLastEvent": r.last_event.map(secs_since),
                "watchRestarts": r.watch_restarts,
                "skippedObjects": r.skipped_objects,
                "adjustedObjects": serde_json::Value::Object(adjusted),
                "services": r.counts.services,
                "mirrorServices": r.counts.mirrors,
                "endpointSlices": r.counts.slices,
                "endpoints": r.counts.endpoints,
                "gatewayAddresses": r.gateway.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "gatewayProbe": r.probe.as_ref().map(|p| json!({
                    "alive": p.alive,
                    "consecutiveFailures": p.consecutive_failures,
                    "successes": p.successes,
                    "failures": p.failures,
                    "lastLatencySeconds": p.last_latency.map(secs),
                    "lastError": p.last_error,
                })),
                "secondsSinceApiAnswered": r.api.as_ref().and_then(|a| a.last_answered()).map(secs_since),
                "apiRequestsInFlight": r.api.as_ref().map(|a| a.in_flight()),
                "apiMaxInFlight": r.api.as_ref().map(|a| a.max_in_flight()),
                "problem": r.problem,
                "fileProblems": r.files,
                "budget": r.budget.as_ref().map(|b| json!({
                    "maxServices": b.budget.max_services,
                    "maxEndpoints": b.budget.max_endpoints,
                    "refusedServices": b.refused.services,
                    "refusedEndpoints": b.refused.endpoints,
                    "refused": b.refused_services.iter().map(ToString::to_string).collect::<Vec<_>>(),
                })),
                "mcs": r.mcs.as_ref().map(|m| json!({
                    "member": m.export_api.is_some(),
                    "status": m.membership(),
                    "serviceExportApi": m.export_api,
                    "serviceImportApi": m.import_api,
                    "clusterPropertyApi": m.property_api,
                    "serviceExports": m.state.exports,
                    "clusterId": m.state.id.as_deref(),
                    "clusterIdProblem": m.state.id_problem,
                })),
                "claims": claims_reference(&r.claims),
                "place": {
                    "region": r.place(local_place).0.region.as_deref(),
                    "zone": r.place(local_place).0.zone.as_deref(),
                },
                "placeFrom": r.place(local_place).1.as_str(),
                "placeProblem": r.place_problem,
            })
        })
        .collect();
    json!({
        "clusters": clusters,
        "problems": lock(&board.problems).clone(),
    })
}

/// A cluster's claims, as `/debug/clusters` showed them before.
fn claims_reference(c: &Claims) -> serde_json::Value {
    let names = |set: &std::collections::BTreeSet<Arc<str>>| {
        set.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    json!({
        "allowedAddresses": c.allowed_addresses.as_ref()
            .map(|nets| nets.iter().map(ToString::to_string).collect::<Vec<_>>()),
        "allowedNamespaces": c.allowed_namespaces.as_ref().map(names),
        "deniedNamespaces": names(&c.denied_namespaces),
    })
}

/// A report with every optional part filled in.
fn full_report(r: &mut ClusterReport, now: Instant) {
    let ago = |s: u64| now - Duration::from_millis(s);
    r.synced = true;
    r.gave_up = true;
    r.broken_since = Some(ago(4_000));
    r.silent_since = Some(ago(3_500));
    r.last_error = Some("watch failed: 410 Gone".to_owned());
    r.last_event = Some(ago(1_250));
    r.watch_restarts = 3;
    r.skipped_objects = 2;
    r.adjusted
        .insert((Adjustment::Skipped, Reason::Undecodable), 2);
    r.adjusted
        .insert((Adjustment::Clamped, Reason::Undecodable), 5);
    r.counts = Counts {
        services: 4,
        mirrors: 1,
        slices: 6,
        endpoints: 12,
    };
    r.gateway = vec![
        "10.0.0.1".parse().expect("ip"),
        "fd00::1".parse().expect("ip"),
    ];
    r.probe = Some(ProbeStatus {
        alive: Some(false),
        consecutive_failures: 2,
        successes: 7,
        failures: 3,
        last_latency: Some(Duration::from_micros(12_345)),
        last_error: Some("connect: refused".to_owned()),
    });
    r.problem = Some("no kubeconfig".to_owned());
    r.files = Some(vec!["a.yaml: bad".to_owned()]);
    r.budget = Some(BudgetReport::default());
    r.api = Some(crate::k8s::layer::ApiLayer::new(8).stats());
    r.mcs = Some(McsStatus {
        discovered: true,
        export_api: Some("serviceexports.multicluster.x-k8s.io/v1alpha1".to_owned()),
        import_api: None,
        property_api: Some("clusterproperties.about.k8s.io/v1alpha1".to_owned()),
        state: McsReport {
            exports: 2,
            id: Some("east-1".into()),
            id_problem: Some("not a DNS label".to_owned()),
        },
    });
    r.claims = Claims {
        allowed_addresses: Some(vec!["10.0.0.0/8".parse().expect("net")]),
        allowed_namespaces: Some(["prod".into(), "web".into()].into()),
        denied_namespaces: ["kube-system".into()].into(),
    };
    r.place = place(Some("us"), Some("us-1"));
    r.property_place = place(Some("eu"), None);
    r.place_problem = Some("zone \"?\" is not a label value".to_owned());
}

fn place(region: Option<&str>, zone: Option<&str>) -> Place {
    Place::parse(region, zone).expect("a place")
}

#[test]
fn debug_clusters_shows_each_place_and_who_said_it() {
    let eu = || place(Some("eu"), None);
    let us = || place(Some("us"), Some("us-1"));
    // (local, configured, from its properties, the local flags, shown
    // region and zone, from)
    type Case = (
        bool,
        Place,
        Place,
        Place,
        (Option<&'static str>, Option<&'static str>),
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            false,
            Place::default(),
            Place::default(),
            eu(),
            (None, None),
            "unknown",
        ),
        (
            false,
            Place::default(),
            us(),
            eu(),
            (Some("us"), Some("us-1")),
            "cluster-property",
        ),
        // A configured place wins whole: no zone from the properties.
        (
            false,
            eu(),
            us(),
            Place::default(),
            (Some("eu"), None),
            "configured",
        ),
        // The flags are the local cluster's, and count as configured.
        (
            true,
            Place::default(),
            us(),
            eu(),
            (Some("eu"), None),
            "configured",
        ),
        (
            true,
            Place::default(),
            us(),
            Place::default(),
            (Some("us"), Some("us-1")),
            "cluster-property",
        ),
        // Another cluster ignores the flags.
        (
            false,
            Place::default(),
            Place::default(),
            us(),
            (None, None),
            "unknown",
        ),
    ];
    for (i, (local, configured, property, flags, (region, zone), from)) in
        cases.into_iter().enumerate()
    {
        let board = StatusBoard::default();
        board.register(&"c".into(), local, "test".to_owned());
        board.update(&"c".into(), |r| {
            r.place = configured;
            r.property_place = property;
        });
        let got = &board.debug_json_at(Instant::now(), &flags)["clusters"][0];
        assert_eq!(
            got["place"],
            json!({"region": region, "zone": zone}),
            "case {i}"
        );
        assert_eq!(got["placeFrom"], from, "case {i}");
    }
}

#[test]
fn debug_clusters_keeps_every_field_name_and_shape() {
    let board = StatusBoard::default();
    let now = Instant::now();
    // One cluster with everything filled in, one as registered, one that
    // never synced (no stale age though broken).
    for name in ["east", "north", "west"] {
        board.register(&name.into(), name == "west", format!("test {name}"));
    }
    board.update(&"east".into(), |r| full_report(r, now));
    board.update(&"north".into(), |r| r.broken_since = Some(now));
    board.set_problems(vec!["Link CRD missing".to_owned()]);
    let local_place = place(Some("eu"), None);
    let got = board.debug_json_at(now, &local_place);
    assert_eq!(got, reference(&board, now, &local_place));
    // Spot checks of what users read, so a broken reference shows too.
    let east = &got["clusters"][0];
    assert_eq!(east["name"], "east");
    assert_eq!(east["state"], "no-credentials");
    assert_eq!(east["gaveUpWaitingForSync"], true);
    assert_eq!(east["staleSeconds"], 4.0);
    assert_eq!(east["gatewayProbe"]["lastLatencySeconds"], 0.012);
    assert_eq!(east["adjustedObjects"]["skipped"]["undecodable"], 2);
    assert_eq!(east["mcs"]["status"], "member");
    assert_eq!(east["claims"]["allowedNamespaces"], json!(["prod", "web"]));
    assert_eq!(east["apiMaxInFlight"], 8);
    assert_eq!(east["place"], json!({"region": "us", "zone": "us-1"}));
    assert_eq!(east["placeFrom"], "configured");
    assert_eq!(east["placeProblem"], "zone \"?\" is not a label value");
    let north = &got["clusters"][1];
    assert_eq!(north["place"], json!({"region": null, "zone": null}));
    assert_eq!(north["placeFrom"], "unknown");
    assert_eq!(north["placeProblem"], serde_json::Value::Null);
    assert_eq!(north["staleSeconds"], serde_json::Value::Null);
    assert_eq!(north["gatewayProbe"], serde_json::Value::Null);
    assert_eq!(north["adjustedObjects"], json!({}));
    assert_eq!(got["problems"], json!(["Link CRD missing"]));
}
