//! Arguments checked against the types of their schemas before any request is made.

use serde_json::{Map, Value};

use crate::error::ArgError;

/// Nesting checked at most; deeper values are left to the service.
const MAX_DEPTH: usize = 32;

/// Checks `value` (the argument `name`) against `schema`: type, enum, required members, items.
pub(crate) fn check(
    name: &str,
    value: &Value,
    schema: &Value,
    defs: &Map<String, Value>,
) -> Result<(), ArgError> {
    walk(name, value, schema, defs, 0)
}

fn walk(
    name: &str,
    value: &Value,
    schema: &Value,
    defs: &Map<String, Value>,
    depth: usize,
) -> Result<(), ArgError> {
    let Some(schema) = resolve(schema, defs) else {
        return Ok(());
    };
    if depth > MAX_DEPTH {
        return Ok(());
    }
    if let Some(types) = types(schema) {
        if !types.iter().any(|t| is_type(value, t)) {
            let expected = types
                .iter()
                .map(|t| article(t))
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(ArgError::Type {
                name: name.to_string(),
                expected,
            });
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(value) {
            let list = allowed
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ArgError::Enum {
                name: name.to_string(),
                allowed: list,
            });
        }
    }
    match value {
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(&format!("{name}[{i}]"), item, item_schema, defs, depth + 1)?;
                }
            }
        }
        Value::Object(members) => object(name, members, schema, defs, depth)?,
        _ => {}
    }
    Ok(())
}

fn object(
    name: &str,
    members: &Map<String, Value>,
    schema: &Value,
    defs: &Map<String, Value>,
    depth: usize,
) -> Result<(), ArgError> {
    if let Some(Value::Array(required)) = schema.get("required") {
        for r in required.iter().filter_map(Value::as_str) {
            if !members.contains_key(r) {
                return Err(ArgError::Missing(format!("{name}.{r}")));
            }
        }
    }
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (key, member) in members {
            if let Some(s) = props.get(key) {
                walk(&format!("{name}.{key}"), member, s, defs, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// The schema behind `#/$defs/...` references.
fn resolve<'v>(schema: &'v Value, defs: &'v Map<String, Value>) -> Option<&'v Value> {
    let mut schema = schema;
    for _ in 0..16 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => schema = defs.get(r.strip_prefix("#/$defs/")?)?,
            None => return Some(schema),
        }
    }
    None
}

fn types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn is_type(value: &Value, t: &str) -> bool {
    match t {
        "string" => value.is_string(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn article(t: &str) -> String {
    match t {
        "integer" | "array" | "object" => format!("an {t}"),
        "null" => "null".to_string(),
        _ => format!("a {t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_enums_and_missing_members_name_the_argument() {
        let defs = json!({"Pet": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}});
        let defs = defs.as_object().unwrap();
        let pet = json!({"$ref": "#/$defs/Pet"});
        assert_eq!(
            check("body", &json!({"name": "Rex", "age": 3}), &pet, defs),
            Ok(())
        );
        assert_eq!(
            check("body", &json!({"name": "Rex", "age": "3"}), &pet, defs)
                .unwrap_err()
                .to_string(),
            "argument `body.age` must be an integer"
        );
        assert_eq!(
            check("body", &json!({}), &pet, defs),
            Err(ArgError::Missing("body.name".into()))
        );
        let status = json!({"type": "string", "enum": ["available", "sold"]});
        assert_eq!(
            check("status", &json!("lost"), &status, defs)
                .unwrap_err()
                .to_string(),
            "argument `status` must be one of \"available\", \"sold\""
        );
        let ids = json!({"type": "array", "items": {"type": "integer"}});
        assert_eq!(
            check("ids", &json!([1, 2.5]), &ids, defs)
                .unwrap_err()
                .parameter(),
            Some("ids[1]")
        );
        assert_eq!(
            check(
                "n",
                &json!(null),
                &json!({"type": ["integer", "null"]}),
                defs
            ),
            Ok(())
        );
    }
}
