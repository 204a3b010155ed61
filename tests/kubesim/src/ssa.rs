//! TEMPORARY stand-in until the SSA module lands (being written in parallel).
#![allow(missing_docs, dead_code, clippy::too_many_arguments)]
use serde_json::Value;
pub struct Conflict { pub manager: String, pub api_version: String, pub field: String }
#[derive(Debug)] pub enum SsaError { Conflicts { message: String, conflicts: Vec<Conflict> }, Invalid(String) }
impl std::fmt::Debug for Conflict { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "c") } }
#[derive(Default)] pub struct Schema;
impl Schema { pub fn for_kind(_g: &str, _k: &str) -> Self { Schema } }
pub fn apply(live: Option<&Value>, config: &Value, _m: &str, _f: bool, _a: &str, _s: Option<&str>, _n: &str, _sc: &Schema) -> Result<Value, SsaError> {
    let mut out = live.cloned().unwrap_or(Value::Null);
    json_patch::merge(&mut out, config);
    Ok(out)
}
pub fn update(_old: Option<&Value>, new: &Value, _m: &str, _a: &str, _s: Option<&str>, _n: &str, _sc: &Schema) -> Result<Value, SsaError> { Ok(new.clone()) }
