use super::*;
use serde_json::json;

fn labels(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("test labels must be an object"),
    }
}

const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[test]
fn label_selector_matching() {
    let object = labels(json!({
        "app": "web",
        "tier": "frontend",
        "example.com/owner": "team-a",
        "replicas": "3",
        "blank": "",
    }));
    // (selector, matches the object above, matches an object without labels)
    let cases: &[(&str, bool, bool)] = &[
        ("", true, true),
        ("app=web", true, false),
        ("app==web", true, false),
        ("app=api", false, false),
        ("app!=api", true, true),
        ("app!=web", false, true),
        ("missing!=x", true, true),
        ("app in (web,api)", true, false),
        ("app in (api)", false, false),
        ("app notin (api)", true, true),
        ("app notin (web)", false, true),
        ("missing notin (x)", true, true),
        ("app", true, false),
        ("!app", false, true),
        ("!missing", true, true),
        ("app=web,tier=frontend", true, false),
        ("app=web,tier=backend", false, false),
        (
            "  app = web ,  tier in ( frontend , backend )  ",
            true,
            false,
        ),
        ("example.com/owner=team-a", true, false),
        ("blank=", true, false),
        ("blank in ()", true, false),
        ("blank in (,x)", true, false),
        ("app in (x,)", false, false),
        ("replicas>2", true, false),
        ("replicas>3", false, false),
        ("replicas<4", true, false),
        ("app>1", false, false),
        ("in in (in)", false, false),
        ("app in (in,notin,web)", true, false),
        ("app=web,!missing,tier notin (backend)", true, false),
    ];
    for (selector, with_labels, without_labels) in cases {
        let parsed = LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(
            parsed.matches(Some(&object)),
            *with_labels,
            "{selector:?} against labelled object"
        );
        assert_eq!(
            parsed.matches(None),
            *without_labels,
            "{selector:?} against object without labels"
        );
    }
}

#[test]
fn label_selector_is_empty() {
    let cases: &[(&str, bool)] = &[("", true), ("   ", true), ("a", false), ("a=b", false)];
    for (selector, empty) in cases {
        let parsed = LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(parsed.is_empty(), *empty, "{selector:?}");
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (selector, error) cases
fn label_selector_errors() {
    let too_long = "a".repeat(64);
    let long_key = format!("{too_long}=x");
    let long_value = format!("k={too_long}");
    let cases: Vec<(&str, String)> = vec![
        (
            "a=b c",
            "found 'c', expected: ',' or 'end of string'".into(),
        ),
        (
            "a=b,",
            "found '', expected: identifier after ','".into(),
        ),
        (
            ",a",
            "found ',', expected: !, identifier, or 'end of string'".into(),
        ),
        (
            "a b",
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt".into(),
        ),
        (
            "a in b",
            "unable to parse requirement: found 'b' expected: '('".into(),
        ),
        (
            "a in (b c)",
            "unable to parse requirement: found 'c', expected: ',' or ')'".into(),
        ),
        (
            "a in (b",
            "unable to parse requirement: found '', expected: ',' or ')'".into(),
        ),
        (
            "a in (=)",
            "unable to parse requirement: found '=', expected: ',', ')' or identifier".into(),
        ),
        (
            "a in (b,=",
            "unable to parse requirement: found '=', expected: ',', or identifier".into(),
        ),
        (
            "a==(",
            "unable to parse requirement: found '(', expected: identifier".into(),
        ),
        (
            "!=a",
            "found '!=', expected: !, identifier, or 'end of string'".into(),
        ),
        (
            "! =a",
            "unable to parse requirement: found '=', expected: identifier".into(),
        ),
        (
            "!a=b",
            "found '=', expected: ',' or 'end of string'".into(),
        ),
        (
            "app=we b",
            "found 'b', expected: ',' or 'end of string'".into(),
        ),
        (
            "-app=x",
            format!("unable to parse requirement: <nil>: Invalid value: \"-app\": {NAME_PART_REGEX}"),
        ),
        (
            "a/b/c=x",
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
        ),
        (
            "/a=x",
            "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty".into(),
        ),
        (
            "a/=x",
            format!("unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; {NAME_PART_REGEX}"),
        ),
        (
            "Example.com/a=x",
            "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
        ),
        (
            long_key.as_str(),
            format!("unable to parse requirement: <nil>: Invalid value: \"{too_long}\": name part must be no more than 63 bytes"),
        ),
        (
            "app=-x",
            format!("unable to parse requirement: values[0][app]: Invalid value: \"-x\": {LABEL_VALUE_REGEX}"),
        ),
        (
            long_value.as_str(),
            format!("unable to parse requirement: values[0][k]: Invalid value: \"{too_long}\": must be no more than 63 bytes"),
        ),
        (
            // Values are validated in sorted order, so "-a" is values[0].
            "k in (z_, -a)",
            format!("unable to parse requirement: [values[0][k]: Invalid value: \"-a\": {LABEL_VALUE_REGEX}, values[1][k]: Invalid value: \"z_\": {LABEL_VALUE_REGEX}]"),
        ),
        (
            "k>abc",
            "unable to parse requirement: values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
        ),
        (
            "k>-1",
            format!("unable to parse requirement: values[0][k]: Invalid value: \"-1\": {LABEL_VALUE_REGEX}"),
        ),
    ];
    for (selector, want) in cases {
        let got = LabelSelector::parse(selector).map(|_| ());
        assert_eq!(
            got,
            Err(SelectorError::Label(want.clone())),
            "selector {selector:?}"
        );
        if let Err(e) = LabelSelector::parse(selector) {
            assert_eq!(e.to_string(), want, "display of {selector:?}");
        }
    }
}

#[test]
fn label_selector_from_k8s() {
    use metav1::LabelSelectorRequirement as Req;
    let sel = |labels: &[(&str, &str)], exprs: Vec<Req>| metav1::LabelSelector {
        match_labels: if labels.is_empty() {
            None
        } else {
            Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        },
        match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
    };
    let req = |key: &str, op: &str, values: &[&str]| Req {
        key: key.into(),
        operator: op.into(),
        values: if values.is_empty() {
            None
        } else {
            Some(values.iter().map(ToString::to_string).collect())
        },
    };
    let object = labels(json!({"app": "web", "tier": "frontend"}));
    let matching: Vec<(metav1::LabelSelector, bool)> = vec![
        (sel(&[], vec![]), true),
        (sel(&[("app", "web")], vec![]), true),
        (sel(&[("app", "api")], vec![]), false),
        (
            sel(&[("app", "web")], vec![req("tier", "In", &["frontend"])]),
            true,
        ),
        (sel(&[], vec![req("tier", "NotIn", &["frontend"])]), false),
        (sel(&[], vec![req("tier", "Exists", &[])]), true),
        (sel(&[], vec![req("tier", "DoesNotExist", &[])]), false),
    ];
    for (selector, want) in matching {
        let parsed = LabelSelector::from_k8s(&selector)
            .unwrap_or_else(|e| panic!("{selector:?} should convert: {e}"));
        assert_eq!(parsed.matches(Some(&object)), want, "{selector:?}");
    }

    let errors: Vec<(metav1::LabelSelector, &str)> = vec![
        (
            sel(&[], vec![req("tier", "Equals", &["x"])]),
            "\"Equals\" is not a valid label selector operator",
        ),
        (
            sel(&[], vec![req("tier", "In", &[])]),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            sel(&[], vec![req("tier", "Exists", &["a", "b"])]),
            "values: Invalid value: []string{\"a\", \"b\"}: values set must be empty for exists and does not exist",
        ),
    ];
    for (selector, want) in errors {
        assert_eq!(
            LabelSelector::from_k8s(&selector).map(|_| ()),
            Err(SelectorError::Label(want.to_string())),
            "{selector:?}"
        );
    }
}

#[test]
fn field_selector_matching() {
    let pod = json!({
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"a": "b"}},
        "spec": {"nodeName": "node-1", "hostNetwork": false, "priority": 7},
        "status": {"phase": "Running"},
        "weird": "a,b=c\\d",
    });
    let supported = [
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.hostNetwork",
        "spec.priority",
        "spec.missing",
        "status.phase",
        "weird",
    ];
    let cases: &[(&str, bool)] = &[
        ("", true),
        (",", true),
        ("metadata.name=web-0", true),
        ("metadata.name==web-0", true),
        ("metadata.name=web-1", false),
        ("metadata.name!=web-1", true),
        ("metadata.name!=web-0", false),
        ("metadata.name=web-0,metadata.namespace=default", true),
        ("metadata.name=web-0,metadata.namespace=other", false),
        ("metadata.name=web-0,", true),
        ("spec.nodeName=node-1,status.phase!=Pending", true),
        ("spec.missing=", true),
        ("spec.missing!=", false),
        ("spec.missing=x", false),
        ("spec.hostNetwork=false", true),
        ("spec.priority=7", true),
        ("metadata.name=", false),
        ("weird=a\\,b\\=c\\\\d", true),
        ("weird=a", false),
    ];
    for (selector, want) in cases {
        let parsed = FieldSelector::parse(selector, &supported)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(parsed.matches(&pod), *want, "{selector:?}");
    }
}

#[test]
fn field_selector_empty() {
    let supported = ["metadata.name", "metadata.namespace"];
    let cases: &[(&str, bool)] = &[
        ("", true),
        ("metadata.name=a", false),
        ("metadata.name!=a", false),
        ("metadata.namespace=x", false),
        ("metadata.name=a\\,b", false),
    ];
    for (selector, empty) in cases {
        let parsed = FieldSelector::parse(selector, &supported)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(parsed.is_empty(), *empty, "{selector:?}");
    }
}

#[test]
fn field_selector_errors() {
    let supported = ["metadata.name", "metadata.namespace"];
    let cases: &[(&str, &str)] = &[
        (
            "metadata.name",
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
        ),
        (
            "metadata.name=a,oops",
            "invalid selector: 'metadata.name=a,oops'; can't understand 'oops'",
        ),
        (
            "spec.nodeName=x",
            "field label not supported: spec.nodeName",
        ),
        (
            "metadata.name=a, metadata.namespace=b",
            "field label not supported:  metadata.namespace",
        ),
        ("=x", "field label not supported: "),
        // Syntax errors win over unsupported fields even when they sort later.
        (
            "a=b,zzz",
            "invalid selector: 'a=b,zzz'; can't understand 'zzz'",
        ),
        // Of two unsupported fields, the one sorting first is reported.
        ("z=1,b=2", "field label not supported: b"),
        (
            "metadata.name=a=b",
            "invalid field selector: unescaped character in value: 61",
        ),
        (
            "metadata.name!==a",
            "invalid field selector: unescaped character in value: 61",
        ),
        (
            "metadata.name=a\\x",
            "invalid field selector: invalid escape sequence: \\x",
        ),
        (
            "metadata.name=a\\",
            "invalid field selector: invalid escape sequence: \\",
        ),
    ];
    for (selector, want) in cases {
        match FieldSelector::parse(selector, &supported) {
            Ok(_) => panic!("{selector:?} should fail with {want:?}"),
            Err(e) => assert_eq!(e.to_string(), *want, "{selector:?}"),
        }
    }
}

#[test]
fn go_quoting() {
    let cases: &[(&str, &str)] = &[
        ("plain", "\"plain\""),
        ("a\"b\\c", "\"a\\\"b\\\\c\""),
        ("tab\tnl\n", "\"tab\\tnl\\n\""),
        ("\u{1}\u{7f}", "\"\\x01\\x7f\""),
        ("héllo ✓", "\"héllo ✓\""),
        ("\u{a0}\u{200b}", "\"\\u00a0\\u200b\""),
    ];
    for (input, want) in cases {
        assert_eq!(go_quote(input), *want, "{input:?}");
    }
}
