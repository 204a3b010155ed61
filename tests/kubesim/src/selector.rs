//! Label and field selectors as kube-apiserver parses and evaluates them for the
//! `labelSelector` and `fieldSelector` query parameters.
//!
//! This module owns the selector grammar, kube's validation of label keys and values,
//! and matching against object JSON. Error texts are kube-apiserver's own, so the
//! caller can put them verbatim into a `400 BadRequest` Status.
//!
//! It must not know about HTTP, storage or specific resources: which field paths a
//! resource supports is the caller's knowledge, passed in to [`FieldSelector::parse`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use serde_json::{Map, Value};

use crate::kubemsg::{
    aggregate, go_quote, go_string_slice, invalid, label_key_errors, label_value_errors,
};

/// Why a selector could not be parsed. `Display` is the exact text kube-apiserver
/// puts into the Status message of its 400 response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    /// A label selector that kube's parser or requirement validation rejects; the text is
    /// complete (e.g. `unable to parse requirement: ...` or `found ',', expected: ...`).
    #[error("{0}")]
    Label(String),
    /// A field selector term with no `=`, `==` or `!=` operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldSyntax {
        /// The whole selector as given.
        selector: String,
        /// The offending comma-separated term.
        term: String,
    },
    /// A backslash in a field selector value not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// An unescaped `,` or `=` in a field selector value. kube formats the character
    /// with Go's `%v` on a rune, which prints its code point as a decimal number.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedChar(char),
    /// A field path the resource does not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

// ---------------------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Mirrors kube's `NewRequirement`: validates and reports every problem at once,
    /// with kube's field paths (the parser passes no base path, so they start at `key`
    /// and `values`).
    fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        let mut errs = Vec::new();
        let key_errs = label_key_errors(key);
        if !key_errs.is_empty() {
            errs.push(invalid("key", &go_quote(key), &key_errs.join("; ")));
        }
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(invalid(
                "values",
                &go_string_slice(&values),
                "for 'in', 'notin' operators, values set can't be empty",
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                errs.push(invalid(
                    "values",
                    &go_string_slice(&values),
                    "exact-match compatibility requires one single value",
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(invalid(
                "values",
                &go_string_slice(&values),
                "values set must be empty for exists and does not exist",
            )),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid(
                        "values",
                        &go_string_slice(&values),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(invalid(
                            &format!("values[{i}]"),
                            &go_quote(v),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = label_value_errors(v);
            if !value_errs.is_empty() {
                errs.push(invalid(
                    &format!("values[{i}][{key}]"),
                    &go_quote(v),
                    &value_errs.join("; "),
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key: key.to_string(),
                op,
                values,
            })
        } else {
            Err(SelectorError::Label(aggregate(errs)))
        }
    }

    fn matches<'a>(&self, lookup: &impl Fn(&str) -> Option<&'a str>) -> bool {
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                lookup(&self.key).is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotIn | Operator::NotEquals => {
                lookup(&self.key).is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => lookup(&self.key).is_some(),
            Operator::DoesNotExist => lookup(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = lookup(&self.key).and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

/// A parsed `labelSelector` query parameter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the kube syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
    /// and also `a>1`/`a<1` (which kube accepts too), comma-separated (AND), whitespace
    /// tolerant. Errors carry kube's exact wording, e.g.
    /// `unable to parse requirement: values[0][app]: Invalid value: "-x": ...`; key and
    /// value validation is kube's (qualified name key with optional DNS subdomain prefix;
    /// values ≤63 chars of `[A-Za-z0-9._-]` starting and ending alphanumeric, or empty).
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser.parse().map_err(SelectorError::Label)?;
        // kube sorts by key so that evaluation and printing are deterministic.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Converts a structured selector (as in `aggregationRule.clusterRoleSelectors` or a
    /// workload's `spec.selector`) the way kube's `LabelSelectorAsSelector` does: an empty
    /// selector matches everything; errors carry kube's wording.
    pub(crate) fn from_k8s(selector: &metav1::LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(
                key,
                Operator::Equals,
                vec![value.clone()],
            )?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::Label(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )));
                }
            };
            requirements.push(Requirement::new(
                &expr.key,
                op,
                expr.values.clone().unwrap_or_default(),
            )?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// `labels` is the object's metadata.labels (None = no labels). `!=` and `notin` match
    /// objects lacking the key, as kube does. A non-string label value (never produced by
    /// kube, possible in hand-written JSON) compares as its JSON text.
    pub(crate) fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let rendered: BTreeMap<&str, String> = labels
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.as_str(), text)
            })
            .collect();
        self.matches_with(|key| rendered.get(key).map(String::as_str))
    }

    /// Matches against labels held in any map, given a lookup function.
    pub(crate) fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(&lookup))
    }

    /// True when the selector places no restriction (it matches every object).
    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte lexer with kube's quirks kept on purpose: a NUL byte reads like end of input,
/// and operator symbols are matched greedily.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
        }
        let s = String::from_utf8_lossy(&buf).into_owned();
        match keyword(&s) {
            Some(tok) => (tok, s),
            None => (Token::Identifier, s),
        }
    }

    fn scan_special(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        let mut last: Option<(Token, String)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
            let s = String::from_utf8_lossy(&buf).into_owned();
            if let Some(tok) = keyword(&s) {
                last = Some((tok, s));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some(found) => found,
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buf)
                ),
            ),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_id_or_keyword()
        }
    }
}

/// Whether `in`/`notin` are operators (after a key) or plain identifiers (everywhere else).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn peek_at(&self, pos: usize, ctx: Context) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(pos)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.peek_at(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.peek_at(self.position, ctx);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!("found '{l}', expected: ',' or 'end of string'"));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return Requirement::new(&key, op, Vec::new()).map_err(|e| e.to_string());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values).map_err(|e| e.to_string())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let key_errs = label_key_errors(&lit);
        if !key_errs.is_empty() {
            // kube validates the key here without a field path, which Go prints as <nil>.
            return Err(invalid("<nil>", &go_quote(&lit), &key_errs.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if (next == Token::EndOfString || next == Token::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    /// Values come back sorted and de-duplicated, as kube's string set does; validation
    /// error paths (`values[i]`) refer to that order.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set.into_iter().collect())
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<std::collections::BTreeSet<String>, String> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (t2, l2) = self.lookahead(Context::Values);
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    // Empty entries such as "(,a)", "(a,)" or "(a,,b)" stand for "".
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Context::Values);
                    if t2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if t2 == Token::Comma {
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    negated: bool,
}

/// A parsed `fieldSelector`: `f=v`, `f==v`, `f!=v`, comma-separated; values may contain
/// the escapes `\,` `\=` `\\` as in kube. No whitespace is trimmed, as in kube.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// `supported` lists the field paths this resource allows (e.g.
    /// `["metadata.name", "metadata.namespace"]`); any other field gives the error
    /// `field label not supported: <field>`. Syntax errors are reported before unsupported
    /// fields, and terms are checked in sorted order, as kube does.
    pub(crate) fn parse(s: &str, supported: &[&str]) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        // kube sorts the raw terms first; this decides which error is reported first.
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let Some((field, op, rhs)) = split_term(part) else {
                return Err(SelectorError::FieldSyntax {
                    selector: s.to_string(),
                    term: part.to_string(),
                });
            };
            terms.push(FieldTerm {
                field: field.to_string(),
                value: unescape_value(rhs)?,
                negated: op == "!=",
            });
        }
        if let Some(bad) = terms
            .iter()
            .find(|t| !supported.contains(&t.field.as_str()))
        {
            return Err(SelectorError::UnsupportedField(bad.field.clone()));
        }
        Ok(FieldSelector { terms })
    }

    /// Looks each dotted path up in the object JSON. A missing field (or a null, object or
    /// array) reads as the empty string, as kube's field sets do; booleans and numbers
    /// compare as their JSON text.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|t| {
            let actual = field_value(object, &t.field);
            (actual == t.value) != t.negated
        })
    }

    /// True when the selector has no terms and so matches every object.
    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// Splits on commas not escaped by a backslash; the escapes stay in the terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The leftmost operator splits a term; `!=` and `==` win over `=` at the same position.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(other) => return Err(SelectorError::InvalidEscape(format!("\\{other}"))),
                None => return Err(SelectorError::InvalidEscape("\\".to_string())),
            },
            ',' | '=' => return Err(SelectorError::UnescapedChar(c)),
            other => out.push(other),
        }
    }
    Ok(out)
}

fn field_value(object: &Value, path: &str) -> String {
    let mut current = object;
    for segment in path.split('.') {
        match current.get(segment) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null | Value::Array(_) | Value::Object(_) => String::new(),
    }
}

#[cfg(test)]
mod tests;
