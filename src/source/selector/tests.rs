use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: op.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn sel(match_labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
    LabelSelector {
        match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    }
}

#[test]
fn nil_and_empty_match_nothing() {
    assert_eq!(Selector::from_k8s(None), Ok(None));
    assert_eq!(
        Selector::from_k8s(Some(&LabelSelector::default())),
        Ok(None)
    );
    assert_eq!(Selector::from_k8s(Some(&sel(&[], vec![]))), Ok(None));
}

/// (selector, object labels, matches, query text)
type MatchCase = (
    LabelSelector,
    &'static [(&'static str, &'static str)],
    bool,
    &'static str,
);

#[test]
fn matching_table() {
    let cases: Vec<MatchCase> = vec![
        (
            sel(&[("a", "1")], vec![]),
            &[("a", "1"), ("b", "2")],
            true,
            "a=1",
        ),
        (sel(&[("a", "1")], vec![]), &[("a", "2")], false, "a=1"),
        (sel(&[("a", "1")], vec![]), &[], false, "a=1"),
        (
            sel(&[], vec![expr("a", "In", &["2", "1"])]),
            &[("a", "2")],
            true,
            "a in (1,2)",
        ),
        (
            sel(&[], vec![expr("a", "In", &["1"])]),
            &[],
            false,
            "a in (1)",
        ),
        (
            sel(&[], vec![expr("a", "NotIn", &["1"])]),
            &[],
            true,
            "a notin (1)",
        ),
        (
            sel(&[], vec![expr("a", "NotIn", &["1"])]),
            &[("a", "1")],
            false,
            "a notin (1)",
        ),
        (
            sel(&[], vec![expr("a", "Exists", &[])]),
            &[("a", "")],
            true,
            "a",
        ),
        (
            sel(&[], vec![expr("a", "DoesNotExist", &[])]),
            &[("a", "x")],
            false,
            "!a",
        ),
        (
            sel(&[("x", "y")], vec![expr("a", "DoesNotExist", &[])]),
            &[("x", "y")],
            true,
            "x=y,!a",
        ),
    ];
    for (i, (s, have, want, query)) in cases.into_iter().enumerate() {
        let s = Selector::from_k8s(Some(&s))
            .expect("valid")
            .expect("non-empty");
        assert_eq!(
            s.matches(&labels(have)),
            want,
            "case {i}: {s:?} on {have:?}"
        );
        assert_eq!(s.to_query(), query, "case {i}");
    }
}

#[test]
fn invalid_selectors_are_errors() {
    let bad = [
        (sel(&[], vec![expr("a", "Gt", &["1"])]), "operator \"Gt\""),
        (
            sel(&[], vec![expr("a", "In", &[])]),
            "needs at least one value",
        ),
        (
            sel(&[], vec![expr("a", "Exists", &["1"])]),
            "takes no values",
        ),
        (sel(&[("a b", "1")], vec![]), "cannot appear"),
        (sel(&[("a", "x,y")], vec![]), "cannot appear"),
    ];
    for (s, want) in bad {
        let e = Selector::from_k8s(Some(&s))
            .expect_err("invalid")
            .to_string();
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn classify_with_defaults_and_custom() {
    let d = Selectors::linkerd_defaults();
    assert_eq!(
        d.classify(&labels(&[(LABEL_EXPORTED, "true")])),
        (Some(ExportMode::Gateway), false)
    );
    assert_eq!(
        d.classify(&labels(&[
            (LABEL_EXPORTED, "remote-discovery"),
            (LABEL_FEDERATED, "member")
        ])),
        (Some(ExportMode::Flat), true)
    );
    assert_eq!(d.classify(&labels(&[("app", "x")])), (None, false));
    // Flat wins when both export selectors match.
    let both = Selectors {
        gateway: Some(Selector::label("team", "a")),
        remote_discovery: Some(Selector::label("team", "a")),
        federated: None,
    };
    assert_eq!(
        both.classify(&labels(&[("team", "a")])),
        (Some(ExportMode::Flat), false)
    );
    assert_eq!(both.distinct().len(), 1);
    assert_eq!(d.distinct().len(), 3);
}
