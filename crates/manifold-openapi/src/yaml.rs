//! Reading a description's bytes as JSON or YAML into one JSON value.

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Parses JSON when the text starts like JSON, YAML otherwise (YAML 1.2 is a superset of JSON,
/// but serde_json's messages are clearer for a broken JSON file).
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let text = text.trim_start_matches('\u{feff}');
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| e.to_string());
    }
    let docs = YamlLoader::load_from_str(text).map_err(|e| e.to_string())?;
    match docs.into_iter().next() {
        Some(doc) => to_json(doc),
        None => Err("the document is empty".to_string()),
    }
}

fn to_json(yaml: Yaml) -> Result<Value, String> {
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(text) => real(&text),
        Yaml::String(s) => Value::String(s),
        Yaml::Array(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                map.insert(key_text(key)?, to_json(value)?);
            }
            Value::Object(map)
        }
        Yaml::Alias(_) | Yaml::BadValue => return Err("an unresolved YAML alias".to_string()),
    })
}

/// A float YAML wrote; the ones JSON cannot hold (infinities, NaN) stay text.
fn real(text: &str) -> Value {
    match text.parse::<f64>().ok().and_then(Number::from_f64) {
        Some(n) => Value::Number(n),
        None => Value::String(text.to_string()),
    }
}

/// Keys such as the status code `200:` are YAML integers; OpenAPI means them as text.
fn key_text(key: Yaml) -> Result<String, String> {
    match key {
        Yaml::String(s) | Yaml::Real(s) => Ok(s),
        Yaml::Integer(i) => Ok(i.to_string()),
        Yaml::Boolean(b) => Ok(b.to_string()),
        Yaml::Null => Ok("null".to_string()),
        other => Err(format!("a mapping key that is not a scalar: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_status_keys_become_text_and_numbers_stay_numbers() {
        let value = parse(b"responses:\n  200:\n    description: ok\nmax: 1.5\nn: 3\n").unwrap();
        assert_eq!(
            value,
            json!({"responses": {"200": {"description": "ok"}}, "max": 1.5, "n": 3})
        );
    }

    #[test]
    fn broken_json_and_yaml_are_errors_with_a_position() {
        let err = parse(b"{\"openapi\": ").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err = parse(b"openapi: [3.0\n").unwrap_err();
        assert!(!err.is_empty());
        assert_eq!(parse(b"").unwrap_err(), "the document is empty");
    }
}
