//! A description's schemas as one tool's JSON Schema: every `$ref` becomes a reference into
//! the tool's own `$defs`, each shared definition copied once and only when reachable, so
//! recursive schemas stay finite and shared ones are not repeated at each use.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use crate::error::LoadError;
use crate::load::{Document, Version};

/// Input schemas leave out `readOnly` members, output schemas `writeOnly` ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Input,
    Output,
}

/// Inline schemas nested deeper than this are refused rather than walked.
const MAX_DEPTH: usize = 64;

const SCHEMA_MAPS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
const DROPPED: &[&str] = &[
    "discriminator",
    "xml",
    "externalDocs",
    "nullable",
    "example",
];

/// The `$defs` of one tool's schema, filled as its schemas are translated.
pub(crate) struct Defs<'a> {
    doc: &'a Document,
    mode: Mode,
    names: HashMap<(String, String), String>,
    taken: HashSet<String>,
    pending: Vec<(String, String, String)>,
    out: Map<String, Value>,
}

impl<'a> Defs<'a> {
    pub(crate) fn new(doc: &'a Document, mode: Mode) -> Defs<'a> {
        Defs {
            doc,
            mode,
            names: HashMap::new(),
            taken: HashSet::new(),
            pending: Vec::new(),
            out: Map::new(),
        }
    }

    /// Translates one schema written in document `ctx`.
    pub(crate) fn schema(&mut self, ctx: &str, schema: &Value) -> Result<Value, LoadError> {
        self.walk(ctx, schema, 0)
    }

    /// The definitions every translated schema reaches.
    pub(crate) fn finish(mut self) -> Result<Map<String, Value>, LoadError> {
        while let Some((name, doc, pointer)) = self.pending.pop() {
            let target = self
                .doc
                .get(&doc, &pointer)
                .cloned()
                .unwrap_or(Value::Bool(true));
            let translated = self.walk(&doc, &target, 0)?;
            self.out.insert(name, translated);
        }
        Ok(self.out)
    }

    fn walk(&mut self, ctx: &str, schema: &Value, depth: usize) -> Result<Value, LoadError> {
        if depth > MAX_DEPTH {
            return Err(LoadError::Invalid {
                url: ctx.to_string(),
                detail: format!("a schema nested deeper than {MAX_DEPTH} levels"),
            });
        }
        let Some(map) = schema.as_object() else {
            return Ok(schema.clone());
        };
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            let name = self.def_name(ctx, reference)?;
            let mut out = json!({"$ref": format!("#/$defs/{name}")});
            if let Some(d) = map.get("description") {
                out["description"] = d.clone();
            }
            return Ok(out);
        }
        let mut out = Map::new();
        for (key, value) in map {
            if key.starts_with("x-") || DROPPED.contains(&key.as_str()) {
                continue;
            }
            let translated = if SCHEMA_MAPS.contains(&key.as_str()) {
                self.walk_map(ctx, key, value, depth)?
            } else if SCHEMA_LISTS.contains(&key.as_str()) {
                self.walk_list(ctx, value, depth)?
            } else if is_schema_keyword(key) {
                self.walk(ctx, value, depth + 1)?
            } else {
                value.clone()
            };
            out.insert(key.clone(), translated);
        }
        self.openapi_30(map, &mut out);
        prune_required(map, &mut out);
        if let Some(example) = map.get("example") {
            out.entry("examples").or_insert_with(|| json!([example]));
        }
        Ok(Value::Object(out))
    }

    fn walk_map(
        &mut self,
        ctx: &str,
        key: &str,
        value: &Value,
        depth: usize,
    ) -> Result<Value, LoadError> {
        let Some(members) = value.as_object() else {
            return Ok(value.clone());
        };
        let mut out = Map::new();
        for (name, member) in members {
            if key == "properties" && self.left_out(ctx, member) {
                continue;
            }
            out.insert(name.clone(), self.walk(ctx, member, depth + 1)?);
        }
        Ok(Value::Object(out))
    }

    fn walk_list(&mut self, ctx: &str, value: &Value, depth: usize) -> Result<Value, LoadError> {
        let Some(items) = value.as_array() else {
            return Ok(value.clone());
        };
        let items = items
            .iter()
            .map(|s| self.walk(ctx, s, depth + 1))
            .collect::<Result<_, _>>()?;
        Ok(Value::Array(items))
    }

    /// Whether a member is left out in this mode (`readOnly` from input, `writeOnly` from output).
    fn left_out(&self, ctx: &str, member: &Value) -> bool {
        let flag = match self.mode {
            Mode::Input => "readOnly",
            Mode::Output => "writeOnly",
        };
        let set = |v: &Value| v.get(flag).and_then(Value::as_bool) == Some(true);
        set(member) || self.doc.deref(ctx, member).is_ok_and(|(_, v)| set(v))
    }

    /// OpenAPI 3.0 spellings that JSON Schema says otherwise: `nullable` and boolean exclusive bounds.
    fn openapi_30(&self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        if self.doc.version() == Version::OpenApi31 {
            return;
        }
        if map.get("nullable").and_then(Value::as_bool) == Some(true) {
            if let Some(Value::String(t)) = map.get("type") {
                out.insert("type".into(), json!([t, "null"]));
            }
            if let Some(Value::Array(values)) = out.get_mut("enum") {
                if !values.contains(&Value::Null) {
                    values.push(Value::Null);
                }
            }
        }
        for (flag, bound) in [
            ("exclusiveMaximum", "maximum"),
            ("exclusiveMinimum", "minimum"),
        ] {
            if let Some(Value::Bool(exclusive)) = map.get(flag) {
                out.remove(flag);
                if let (true, Some(b)) = (*exclusive, out.remove(bound)) {
                    out.insert(flag.into(), b);
                }
            }
        }
    }
}

/// Members left out in this mode are no longer required.
fn prune_required(map: &Map<String, Value>, out: &mut Map<String, Value>) {
    if let (Some(Value::Array(required)), Some(Value::Object(props))) =
        (out.get("required"), out.get("properties"))
    {
        if let Some(orig) = map.get("properties").and_then(Value::as_object) {
            let kept: Vec<Value> = required
                .iter()
                .filter(|r| {
                    r.as_str()
                        .is_some_and(|r| props.contains_key(r) || !orig.contains_key(r))
                })
                .cloned()
                .collect();
            out.insert("required".into(), Value::Array(kept));
        }
    }
}

impl Defs<'_> {
    fn def_name(&mut self, ctx: &str, reference: &str) -> Result<String, LoadError> {
        let key = self.doc.target(ctx, reference)?;
        if let Some(name) = self.names.get(&key) {
            return Ok(name.clone());
        }
        let base = def_base(&key.0, &key.1);
        let mut name = base.clone();
        let mut n = 1;
        while self.taken.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        self.taken.insert(name.clone());
        self.names.insert(key.clone(), name.clone());
        self.pending.push((name.clone(), key.0, key.1));
        Ok(name)
    }
}

fn is_schema_keyword(key: &str) -> bool {
    matches!(
        key,
        "items"
            | "additionalProperties"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "additionalItems"
    )
}

/// A definition's name: the last pointer segment, or the file's stem for a whole file.
fn def_base(doc: &str, pointer: &str) -> String {
    let raw = match pointer.rsplit('/').next() {
        Some(last) if !last.is_empty() => last.replace("~1", "/").replace("~0", "~"),
        _ => {
            let file = doc.rsplit('/').next().unwrap_or(doc);
            file.split('.').next().unwrap_or(file).to_string()
        }
    };
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "schema".to_string()
    } else {
        clean
    }
}

/// The JSON Schema type keyword of a schema, for deciding how an output is shaped.
pub(crate) fn declared_type<'v>(
    schema: &'v Value,
    defs: &'v Map<String, Value>,
) -> Option<&'v str> {
    let mut schema = schema;
    for _ in 0..16 {
        match schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            Some(name) => schema = defs.get(name)?,
            None => break,
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => Some(t),
        None if schema.get("properties").is_some() => Some("object"),
        _ => None,
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
