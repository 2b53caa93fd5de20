//! One operation's tool: parameters merged, the input schema, the body, the output schema.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::convert::{annotations, description, server_url, Body, Found, Operation, Param};
use crate::filter::Options;
use crate::load::Document;
use crate::schema::{declared_type, Defs, Mode};
use crate::security::needs;
use crate::Location;

/// Builds the tool of one operation, or says why it cannot be one.
pub(crate) fn build(
    doc: &Document,
    found: &Found<'_>,
    name: String,
    options: &Options,
) -> Result<Operation, String> {
    let mut defs = Defs::new(doc, Mode::Input);
    let mut params = parameters(doc, found, &mut defs)?;
    let body = body(doc, found, &mut defs)?;
    rename_collisions(&mut params, body.is_some());
    let input_defs = defs.finish().map_err(|e| e.to_string())?;
    let input = input_schema(&params, body.as_ref(), &input_defs);
    let (output, promises_json) = output_schema(doc, found)?;
    let mut tool = json!({
        "name": name,
        "description": description(found.op, found.method, found.path, options.max_description),
        "inputSchema": input,
        "annotations": annotations(found.method),
    });
    if let Some(summary) = found.op.get("summary").and_then(Value::as_str) {
        tool["title"] = json!(summary);
    }
    if let Some(output) = output {
        tool["outputSchema"] = output;
    }
    let tool = tool.to_string();
    if tool.len() > options.max_schema_bytes {
        return Err(format!(
            "its tool is {} bytes, over the cap of {}",
            tool.len(),
            options.max_schema_bytes
        ));
    }
    Ok(Operation {
        name,
        tool,
        method: found.method.to_ascii_uppercase(),
        path: found.path.to_string(),
        server_url: server_url(doc, found, options)?,
        params,
        body,
        security: needs(doc, found.op),
        input_defs,
        promises_json,
    })
}

/// Path-level and operation-level parameters, the operation's winning on (name, in).
fn parameters(
    doc: &Document,
    found: &Found<'_>,
    defs: &mut Defs<'_>,
) -> Result<Vec<Param>, String> {
    let mut merged: Vec<Param> = Vec::new();
    let lists = [(found.item, &found.item_doc), (found.op, &found.item_doc)];
    for (holder, ctx) in lists {
        let Some(list) = holder.get("parameters").and_then(Value::as_array) else {
            continue;
        };
        for raw in list {
            let (pctx, p) = doc.deref(ctx, raw).map_err(|e| e.to_string())?;
            let param = parameter(&pctx, p, defs)?;
            merged
                .retain(|q| (q.name.as_str(), q.location) != (param.name.as_str(), param.location));
            merged.push(param);
        }
    }
    Ok(merged)
}

fn parameter(ctx: &str, p: &Value, defs: &mut Defs<'_>) -> Result<Param, String> {
    let name = p
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a parameter without a name")?;
    let place = p.get("in").and_then(Value::as_str).unwrap_or("");
    let location = Location::parse(place).ok_or_else(|| {
        format!("parameter `{name}` is in `{place}`, not path, query, header or cookie")
    })?;
    let content_schema = p
        .get("content")
        .and_then(Value::as_object)
        .and_then(|c| c.values().next())
        .and_then(|m| m.get("schema"));
    let (raw_schema, json_text) = match (p.get("schema"), content_schema) {
        (Some(s), _) => (s.clone(), false),
        (None, Some(s)) => (s.clone(), true),
        (None, None) => (json!({}), false),
    };
    let mut schema = defs.schema(ctx, &raw_schema).map_err(|e| e.to_string())?;
    if let (Some(d), Some(obj)) = (p.get("description"), schema.as_object_mut()) {
        obj.entry("description").or_insert_with(|| d.clone());
    }
    let default_style = match location {
        Location::Query | Location::Cookie => "form",
        Location::Path | Location::Header => "simple",
    };
    let style = if json_text {
        "json"
    } else {
        p.get("style")
            .and_then(Value::as_str)
            .unwrap_or(default_style)
    };
    Ok(Param {
        name: name.to_string(),
        member: name.to_string(),
        location,
        style: style.to_string(),
        explode: p
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == "form"),
        required: location == Location::Path
            || p.get("required").and_then(Value::as_bool) == Some(true),
        schema,
    })
}

/// A name used in two locations (or `body` with a body) gets the suffix `__{in}`.
fn rename_collisions(params: &mut [Param], has_body: bool) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for p in params.iter() {
        *counts.entry(p.name.clone()).or_default() += 1;
    }
    for p in params.iter_mut() {
        if counts[&p.name] > 1 || (has_body && p.name == "body") {
            p.member = format!("{}__{}", p.name, p.location.as_str());
        }
    }
}

/// The media types a body can be sent as, preferred first.
fn body_rank(media: &str) -> Option<u8> {
    let media = essence(media);
    match media.as_str() {
        "application/json" => Some(0),
        m if m.ends_with("+json") => Some(1),
        "application/x-www-form-urlencoded" => Some(2),
        "multipart/form-data" => Some(3),
        "application/octet-stream" => Some(4),
        _ => None,
    }
}

fn body(doc: &Document, found: &Found<'_>, defs: &mut Defs<'_>) -> Result<Option<Body>, String> {
    let Some(raw) = found.op.get("requestBody") else {
        return Ok(None);
    };
    let (ctx, body) = doc.deref(&found.item_doc, raw).map_err(|e| e.to_string())?;
    let Some(content) = body
        .get("content")
        .and_then(Value::as_object)
        .filter(|c| !c.is_empty())
    else {
        return Ok(None);
    };
    let Some((media, entry)) = content
        .iter()
        .filter_map(|(m, e)| Some((body_rank(m)?, m, e)))
        .min_by_key(|(r, _, _)| *r)
        .map(|(_, m, e)| (m, e))
    else {
        let offered: Vec<&str> = content.keys().map(String::as_str).collect();
        return Err(format!(
            "request body media types not supported: {}",
            offered.join(", ")
        ));
    };
    let schema = if body_rank(media) == Some(4) {
        json!({"type": "string", "contentEncoding": "base64", "description": "The body's bytes, base64."})
    } else {
        defs.schema(&ctx, entry.get("schema").unwrap_or(&json!({})))
            .map_err(|e| e.to_string())?
    };
    Ok(Some(Body {
        media_type: media.split(';').next().unwrap_or(media).trim().to_string(),
        required: body.get("required").and_then(Value::as_bool) == Some(true),
        schema,
    }))
}

fn input_schema(params: &[Param], body: Option<&Body>, defs: &Map<String, Value>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in params {
        properties.insert(p.member.clone(), p.schema.clone());
        if p.required {
            required.push(json!(p.member));
        }
    }
    if let Some(b) = body {
        properties.insert("body".into(), b.schema.clone());
        if b.required {
            required.push(json!("body"));
        }
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs.clone());
    }
    schema
}

/// A media type without its parameters, lowercased: `application/json; charset=utf-8` is
/// `application/json`.
fn essence(media: &str) -> String {
    media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn is_json(media: &str) -> bool {
    let media = essence(media);
    media == "application/json" || media.ends_with("+json")
}

/// The output schema from the first JSON 2xx answer with a schema, and whether JSON is promised.
fn output_schema(doc: &Document, found: &Found<'_>) -> Result<(Option<Value>, bool), String> {
    let Some(responses) = found.op.get("responses").and_then(Value::as_object) else {
        return Ok((None, false));
    };
    let mut codes: Vec<&String> = responses.keys().filter(|c| c.starts_with('2')).collect();
    codes.sort_by_key(|c| (c.contains(['X', 'x']), c.to_string()));
    let mut promised = false;
    for code in codes {
        let (ctx, response) = doc
            .deref(&found.item_doc, &responses[code])
            .map_err(|e| e.to_string())?;
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            continue;
        };
        let Some(entry) = content.iter().find(|(m, _)| is_json(m)).map(|(_, e)| e) else {
            continue;
        };
        promised = true;
        let Some(schema) = entry.get("schema") else {
            continue;
        };
        let mut defs = Defs::new(doc, Mode::Output);
        let translated = defs.schema(&ctx, schema).map_err(|e| e.to_string())?;
        let defs = defs.finish().map_err(|e| e.to_string())?;
        return Ok((shaped(translated, defs), true));
    }
    Ok((None, promised))
}

/// An object schema as it is; an array or scalar wrapped as `{ "result": ... }`, as the answer's
/// `structuredContent` is; a schema of no single type gives no output schema.
fn shaped(schema: Value, defs: Map<String, Value>) -> Option<Value> {
    let mut out = match declared_type(&schema, &defs)? {
        // A shared object is a `$ref` at the root; MCP hosts (the official SDKs among them)
        // require the output schema's own `type` to be "object", so it is said beside the ref.
        "object" if schema.get("type").is_none() => {
            let mut schema = schema;
            if let Some(members) = schema.as_object_mut() {
                members.insert("type".to_owned(), json!("object"));
            }
            schema
        }
        "object" => schema,
        "array" | "string" | "number" | "integer" | "boolean" => {
            json!({"type": "object", "properties": {"result": schema}, "required": ["result"]})
        }
        _ => return None,
    };
    if !defs.is_empty() {
        out["$defs"] = Value::Object(defs);
    }
    Some(out)
}
