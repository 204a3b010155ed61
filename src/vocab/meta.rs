//! Kubernetes' rules for object metadata we write from what another
//! cluster said (a ServiceExport's `exportedLabels` and
//! `exportedAnnotations`): which keys and values the local API server
//! accepts, so an invalid entry from a remote cluster is dropped with a
//! reason instead of failing the whole write. Mirrors apimachinery's
//! `IsQualifiedName`, `IsValidLabelValue` and the annotation size limit.

/// The longest name part of a qualified name (and of a label value).
const MAX_NAME: usize = 63;
/// The longest prefix of a qualified name (a DNS subdomain).
const MAX_PREFIX: usize = 253;
/// apimachinery's limit on the total size of an object's annotations.
pub(crate) const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Letters, digits, `-`, `_` and `.`, starting and ending with a letter or
/// digit, at most 63 bytes; empty when `allow_empty`.
fn is_name_part(s: &str, allow_empty: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return allow_empty;
    }
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    b.len() <= MAX_NAME
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
}

/// An RFC 1123 subdomain: dot-separated lower-case labels, at most 253.
fn is_subdomain(s: &str) -> bool {
    s.len() <= MAX_PREFIX
        && !s.is_empty()
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= MAX_NAME
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
pub(crate) fn is_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => is_subdomain(prefix) && is_name_part(name, false),
        None => is_name_part(key, false),
    }
}

/// A label value: empty, or a name part.
pub(crate) fn is_label_value(value: &str) -> bool {
    is_name_part(value, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_as_the_api_server_judges_them() {
        let keys = [
            ("app", true),
            ("dummy-label", true),
            ("example.com/tier", true),
            ("a/b/c", false),
            ("Example.com/x", false),
            ("/x", false),
            ("x/", false),
            ("-x", false),
            ("", false),
            (&*"k".repeat(63), true),
            (&*"k".repeat(64), false),
            (&*format!("{}/k", "p".repeat(254)), false),
        ];
        for (key, want) in keys {
            assert_eq!(is_qualified_name(key), want, "key {key:?}");
        }
        let values = [
            ("", true),
            ("true", true),
            ("a.b_c-d", true),
            ("a b", false),
            ("x-", false),
            (&*"v".repeat(64), false),
        ];
        for (value, want) in values {
            assert_eq!(is_label_value(value), want, "value {value:?}");
        }
    }
}
