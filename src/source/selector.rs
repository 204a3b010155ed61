//! Label selectors as Linkerd's Links use them, and the three export
//! selectors of a linked cluster.
//!
//! Owns matching (`matchLabels` and the `In`, `NotIn`, `Exists`,
//! `DoesNotExist` expressions the Link CRD allows), rendering a selector as
//! the API's `labelSelector` query, and the rule that a nil or empty
//! selector matches nothing (Linkerd PR #11344). It must not talk to an API.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::model::objects::ExportMode;

use crate::vocab::linkerd::{LABEL_EXPORTED, LABEL_FEDERATED};

/// Why a selector cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    /// An expression's operator is not one of the four the CRD allows.
    #[error("matchExpressions[{index}]: operator {op:?} is not In, NotIn, Exists or DoesNotExist")]
    Operator {
        /// Index of the expression.
        index: usize,
        /// The operator given.
        op: String,
    },
    /// `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with some.
    #[error("matchExpressions[{index}] ({key} {op}): {reason}")]
    Values {
        /// Index of the expression.
        index: usize,
        /// The label key.
        key: String,
        /// The operator.
        op: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A key or value the API would reject in a label selector.
    #[error("{0:?} cannot appear in a label selector")]
    Token(String),
}

/// A set-based selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Operator {
    /// The operator as the CRD spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
        }
    }
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: Operator,
    /// Values (sorted, for `In`/`NotIn`).
    pub values: Vec<String>,
}

/// A non-empty label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector {
    /// `matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    pub expressions: Vec<Requirement>,
}

/// Characters the API accepts in label keys and values.
fn is_token(s: &str) -> bool {
    s.len() <= 317
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

impl Selector {
    /// A selector of one `key=value` pair.
    pub(crate) fn label(key: &str, value: &str) -> Self {
        Self {
            labels: BTreeMap::from([(key.to_owned(), value.to_owned())]),
            expressions: Vec::new(),
        }
    }

    /// Reads an API selector. `Ok(None)` for a nil or empty one: it matches
    /// nothing, as in Linkerd.
    pub(crate) fn from_k8s(sel: Option<&LabelSelector>) -> Result<Option<Self>, SelectorError> {
        let Some(sel) = sel else { return Ok(None) };
        let labels: BTreeMap<String, String> = sel.match_labels.clone().unwrap_or_default();
        for (k, v) in &labels {
            if !is_token(k) || k.is_empty() {
                return Err(SelectorError::Token(k.clone()));
            }
            if !is_token(v) {
                return Err(SelectorError::Token(v.clone()));
            }
        }
        let mut expressions = Vec::new();
        for (index, e) in sel.match_expressions.iter().flatten().enumerate() {
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::Operator {
                        index,
                        op: other.to_owned(),
                    });
                }
            };
            if !is_token(&e.key) || e.key.is_empty() {
                return Err(SelectorError::Token(e.key.clone()));
            }
            let mut values = e.values.clone().unwrap_or_default();
            let needs_values = matches!(op, Operator::In | Operator::NotIn);
            if needs_values == values.is_empty() {
                return Err(SelectorError::Values {
                    index,
                    key: e.key.clone(),
                    op: op.as_str(),
                    reason: if needs_values {
                        "needs at least one value"
                    } else {
                        "takes no values"
                    },
                });
            }
            if let Some(v) = values.iter().find(|v| !is_token(v)) {
                return Err(SelectorError::Token(v.clone()));
            }
            values.sort();
            values.dedup();
            expressions.push(Requirement {
                key: e.key.clone(),
                op,
                values,
            });
        }
        if labels.is_empty() && expressions.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            labels,
            expressions,
        }))
    }

    /// Whether an object with `labels` matches.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
            && self.expressions.iter().all(|r| {
                let have = labels.get(&r.key);
                match r.op {
                    Operator::In => have.is_some_and(|h| r.values.contains(h)),
                    Operator::NotIn => have.is_none_or(|h| !r.values.contains(h)),
                    Operator::Exists => have.is_some(),
                    Operator::DoesNotExist => have.is_none(),
                }
            })
    }

    /// The selector as the API's `labelSelector` parameter.
    pub(crate) fn to_query(&self) -> String {
        let mut parts: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.expressions {
            parts.push(match r.op {
                Operator::In => format!("{} in ({})", r.key, r.values.join(",")),
                Operator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                Operator::Exists => r.key.clone(),
                Operator::DoesNotExist => format!("!{}", r.key),
            });
        }
        parts.join(",")
    }
}

/// The three export selectors of a linked cluster. `None` matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selectors {
    /// Gateway-mode export (Link `selector`).
    pub gateway: Option<Selector>,
    /// Flat-mode export (Link `remoteDiscoverySelector`).
    pub remote_discovery: Option<Selector>,
    /// Federated membership (Link `federatedServiceSelector`).
    pub federated: Option<Selector>,
}

/// Linkerd's default selectors, built once: conversion compares against
/// them for every Service.
pub(crate) static LINKERD_DEFAULTS: std::sync::LazyLock<Selectors> =
    std::sync::LazyLock::new(Selectors::linkerd_defaults);

impl Default for Selectors {
    fn default() -> Self {
        Self::linkerd_defaults()
    }
}

impl Selectors {
    /// Linkerd's defaults: `mirror.linkerd.io/exported=true`,
    /// `=remote-discovery`, `mirror.linkerd.io/federated=member`.
    pub(crate) fn linkerd_defaults() -> Self {
        Self {
            gateway: Some(Selector::label(LABEL_EXPORTED, "true")),
            remote_discovery: Some(Selector::label(LABEL_EXPORTED, "remote-discovery")),
            federated: Some(Selector::label(LABEL_FEDERATED, "member")),
        }
    }

    /// Export mode and federated membership of a Service with `labels`.
    /// Flat wins when both export selectors match (docs/linkerd.md §1.2).
    pub(crate) fn classify(&self, labels: &BTreeMap<String, String>) -> (Option<ExportMode>, bool) {
        let hit = |s: &Option<Selector>| s.as_ref().is_some_and(|s| s.matches(labels));
        let export = if hit(&self.remote_discovery) {
            Some(ExportMode::Flat)
        } else if hit(&self.gateway) {
            Some(ExportMode::Gateway)
        } else {
            None
        };
        (export, hit(&self.federated))
    }

    /// The selectors that are set, each once (two equal selectors need one
    /// watch).
    pub(crate) fn distinct(&self) -> Vec<&Selector> {
        let mut out: Vec<&Selector> = Vec::new();
        for s in [&self.gateway, &self.remote_discovery, &self.federated]
            .into_iter()
            .flatten()
        {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
