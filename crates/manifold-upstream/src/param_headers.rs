//! `x-mcp-header` (2026-07-28, Streamable HTTP): a tool's input schema may ask for some of
//! its parameters to be mirrored into `Mcp-Param-{Name}` headers of every call, so that
//! intermediaries can route on them without reading the body. A client must send them, and
//! must leave out of its tool list a tool whose annotations break the rules (a header name
//! that is not an HTTP token or repeats another, a parameter that is not a string, integer or
//! boolean, an annotation anywhere but on a chain of `properties`).

use std::collections::HashMap;

use manifold_protocol::{Envelope, RawObject};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::Value;

const ANNOTATION: &str = "x-mcp-header";

/// One parameter to mirror: the header's name part and the parameter's path of property
/// names from the arguments object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamHeader {
    name: String,
    path: Vec<String>,
}

/// The parameters to mirror of each tool that has any, by the upstream's tool name.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders(HashMap<String, Vec<ParamHeader>>);

impl ToolHeaders {
    /// From an upstream's tool list (already checked by [`retain_valid`]).
    pub(crate) fn of(tools: &[Box<RawValue>]) -> Self {
        let mut map = HashMap::new();
        for tool in tools {
            if !tool.get().contains(ANNOTATION) {
                continue;
            }
            let Ok(tool) = serde_json::from_str::<Value>(tool.get()) else {
                continue;
            };
            let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema"))
            else {
                continue;
            };
            if let Ok(headers) = annotations(schema) {
                if !headers.is_empty() {
                    map.insert(name.to_owned(), headers);
                }
            }
        }
        Self(map)
    }

    /// The `Mcp-Param-*` headers of a call of `tool` written out in `line` (a `tools/call`
    /// request): its `params.arguments` are read from the line only when the tool has
    /// annotated parameters, which most tools have not.
    pub(crate) fn call_headers(&self, tool: &str, line: &[u8]) -> Vec<(HeaderName, HeaderValue)> {
        if !self.0.contains_key(tool) {
            return Vec::new();
        }
        let env = Envelope::decode(line.trim_ascii_end()).ok();
        let params = env.and_then(|env| RawObject::parse(env.params?).ok());
        self.headers(tool, params.as_ref().and_then(|p| p.get("arguments")))
    }

    /// The `Mcp-Param-*` headers of a call of `tool` with `arguments` (JSON text): one for
    /// each annotated parameter that has a value (a missing or null one has no header).
    pub(crate) fn headers(
        &self,
        tool: &str,
        arguments: Option<&str>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let (Some(params), Some(arguments)) = (self.0.get(tool), arguments) else {
            return Vec::new();
        };
        let Ok(arguments) = serde_json::from_str::<Value>(arguments) else {
            return Vec::new();
        };
        params
            .iter()
            .filter_map(|p| {
                let value = p.path.iter().try_fold(&arguments, |v, key| v.get(key))?;
                let text = match value {
                    Value::String(s) => crate::http::header_text(s),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                        (Some(i), _, _) => i.to_string(),
                        (_, Some(u), _) => u.to_string(),
                        (_, _, Some(f))
                            if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 =>
                        {
                            format!("{f:.0}")
                        }
                        _ => return None,
                    },
                    _ => return None,
                };
                let name =
                    HeaderName::from_bytes(format!("mcp-param-{}", p.name).as_bytes()).ok()?;
                Some((name, HeaderValue::from_str(&text).ok()?))
            })
            .collect()
    }
}

/// Drops from `tools` every tool whose `x-mcp-header` annotations are invalid, with a warning
/// naming the tool and why.
pub(crate) fn retain_valid(upstream: &str, tools: &mut Vec<Box<RawValue>>) {
    tools.retain(|tool| {
        if !tool.get().contains(ANNOTATION) {
            return true;
        }
        let Ok(parsed) = serde_json::from_str::<Value>(tool.get()) else {
            return true;
        };
        let Some(schema) = parsed.get("inputSchema") else {
            return true;
        };
        match annotations(schema) {
            Ok(_) => true,
            Err(why) => {
                let name = parsed["name"].as_str().unwrap_or("?");
                tracing::warn!(
                    upstream,
                    tool = name,
                    "tool left out: its input schema's x-mcp-header {why}"
                );
                false
            }
        }
    });
}

/// The annotated parameters of an input schema, or why its annotations are invalid.
pub(crate) fn annotations(schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), &mut found)?;
    if count(schema, false) != found.len() {
        return Err(
            "annotates something that is not reached from the root by properties alone".into(),
        );
    }
    for (i, a) in found.iter().enumerate() {
        if found[..i]
            .iter()
            .any(|b| b.name.eq_ignore_ascii_case(&a.name))
        {
            return Err(format!("{:?} is given to more than one parameter", a.name));
        }
    }
    Ok(found)
}

/// The annotations on the chain of `properties` from `schema`.
fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get(ANNOTATION) {
            let name = name
                .as_str()
                .filter(|n| !n.is_empty() && n.bytes().all(is_token_byte))
                .ok_or_else(|| format!("of {key:?} is not an HTTP header name token"))?;
            let kind = property.get("type").and_then(Value::as_str);
            if !matches!(kind, Some("string" | "integer" | "boolean")) {
                return Err(format!(
                    "is on {key:?}, which is not a string, integer or boolean"
                ));
            }
            found.push(ParamHeader {
                name: name.to_owned(),
                path: path.clone(),
            });
        }
        walk(property, path, found)?;
        path.pop();
    }
    Ok(())
}

/// Every `x-mcp-header` member anywhere in `value` (not counting properties of that name).
fn count(value: &Value, property_names: bool) -> usize {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let own = usize::from(k == ANNOTATION && !property_names);
                own + count(v, k == "properties" && !property_names)
            })
            .sum(),
        Value::Array(items) => items.iter().map(|v| count(v, false)).sum(),
        _ => 0,
    }
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    #[test]
    fn annotated_parameters_become_headers() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"},
            "opts": {"type": "object", "properties": {
                "limit": {"type": "integer", "x-mcp-header": "Limit"},
                "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}
            }}
        }});
        let tools = vec![
            raw(json!({"name": "sql", "inputSchema": schema})),
            raw(json!({"name": "plain", "inputSchema": {"type": "object"}})),
        ];
        let headers = ToolHeaders::of(&tools);
        let got = headers.headers(
            "sql",
            Some(r#"{"region":"Hello, 世界","query":"x","opts":{"limit":42,"dry":false}}"#),
        );
        let got: Vec<(String, String)> = got
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            got,
            [
                ("mcp-param-dry-run".to_owned(), "false".to_owned()),
                ("mcp-param-limit".to_owned(), "42".to_owned()),
                (
                    "mcp-param-region".to_owned(),
                    "=?base64?SGVsbG8sIOS4lueVjA==?=".to_owned()
                ),
            ]
        );
        // A missing or null value has no header; other tools have none.
        assert!(headers
            .headers("sql", Some(r#"{"region":null,"opts":{}}"#))
            .is_empty());
        assert!(headers
            .headers("plain", Some(r#"{"region":"x"}"#))
            .is_empty());
    }

    #[test]
    fn only_a_call_of_an_annotated_tool_has_its_arguments_read() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}
        }});
        let headers = ToolHeaders::of(&[raw(json!({"name": "sql", "inputSchema": schema}))]);
        let call = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"sql\",\"arguments\":{\"region\":\"eu\"}}}\n";
        let got = headers.call_headers("sql", call);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].0.as_str(), got[0].1.to_str().unwrap()),
            ("mcp-param-region", "eu")
        );
        // Another tool's call is not read at all (nor is a body that is no JSON).
        assert!(headers.call_headers("plain", call).is_empty());
        assert!(headers.call_headers("sql", b"not JSON\n").is_empty());
    }

    #[test]
    fn invalid_annotations_leave_the_tool_out() {
        let bad = [
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "bad name"}}}),
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A"},
                                  "b": {"type": "string", "x-mcp-header": "a"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}),
        ];
        for schema in &bad {
            assert!(annotations(schema).is_err(), "{schema}");
        }
        // A property may be named like the annotation.
        let fine = json!({"properties": {"x-mcp-header": {"type": "string"}}});
        assert_eq!(annotations(&fine), Ok(Vec::new()));
        let mut tools = vec![
            raw(
                json!({"name": "ok", "inputSchema": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}),
            ),
            raw(json!({"name": "bad", "inputSchema": bad[1]})),
            raw(json!({"name": "plain"})),
        ];
        retain_valid("up", &mut tools);
        let names: Vec<String> = tools
            .iter()
            .map(|t| serde_json::from_str::<Value>(t.get()).unwrap()["name"].to_string())
            .collect();
        assert_eq!(names, ["\"ok\"", "\"plain\""]);
    }
}
