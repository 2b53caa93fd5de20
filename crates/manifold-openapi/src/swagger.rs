//! Swagger 2.0 brought to the OpenAPI 3.0 model, so conversion knows one model only.
//!
//! What moves: `host`/`basePath`/`schemes` become `servers`; `definitions`, `parameters`,
//! `responses` and `securityDefinitions` move under `components` (internal `$ref`s follow);
//! `body` and `formData` parameters become a `requestBody` in the `consumes` media type; the
//! other parameters get a `schema` and a style from `collectionFormat`; response schemas get
//! the `produces` media type.

use serde_json::{json, Map, Value};

const SCHEMA_KEYS: &[&str] = &[
    "type",
    "format",
    "items",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "multipleOf",
];
const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch"];

pub(crate) fn to_openapi3(mut doc: Value) -> Value {
    rewrite_refs(&mut doc);
    let Some(root) = doc.as_object_mut() else {
        return doc;
    };
    let consumes = media_list(root.get("consumes"));
    let produces = media_list(root.get("produces"));
    let mut out = Map::new();
    out.insert("openapi".into(), json!("3.0.3"));
    for key in ["info", "tags", "security", "externalDocs"] {
        if let Some(v) = root.remove(key) {
            out.insert(key.into(), v);
        }
    }
    out.insert("servers".into(), servers(root));
    let mut components = Map::new();
    if let Some(Value::Object(defs)) = root.remove("definitions") {
        components.insert("schemas".into(), Value::Object(defs));
    }
    if let Some(Value::Object(params)) = root.remove("parameters") {
        let params = params.into_iter().map(|(k, p)| (k, parameter(p))).collect();
        components.insert("parameters".into(), Value::Object(params));
    }
    if let Some(Value::Object(responses)) = root.remove("responses") {
        let responses = responses
            .into_iter()
            .map(|(k, r)| (k, response(r, &produces)))
            .collect();
        components.insert("responses".into(), Value::Object(responses));
    }
    if let Some(Value::Object(schemes)) = root.remove("securityDefinitions") {
        let schemes = schemes
            .into_iter()
            .map(|(k, s)| (k, security_scheme(s)))
            .collect();
        components.insert("securitySchemes".into(), Value::Object(schemes));
    }
    out.insert("components".into(), Value::Object(components));
    let mut paths = match root.remove("paths") {
        Some(Value::Object(paths)) => paths,
        _ => Map::new(),
    };
    for item in paths.values_mut() {
        path_item(item, &consumes, &produces);
    }
    out.insert("paths".into(), Value::Object(paths));
    Value::Object(out)
}

fn servers(root: &Map<String, Value>) -> Value {
    let base_path = root.get("basePath").and_then(Value::as_str).unwrap_or("");
    match root.get("host").and_then(Value::as_str) {
        Some(host) => {
            let scheme = root
                .get("schemes")
                .and_then(|s| s.get(0))
                .and_then(Value::as_str)
                .unwrap_or("https");
            json!([{"url": format!("{scheme}://{host}{base_path}")}])
        }
        // Without a host the API is served where the description is; the base path is
        // resolved against the description's URL like a relative 3.x server.
        None => json!([{"url": if base_path.is_empty() { "/" } else { base_path }}]),
    }
}

fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get_mut("$ref") {
                for (from, to) in [
                    ("#/definitions/", "#/components/schemas/"),
                    ("#/parameters/", "#/components/parameters/"),
                    ("#/responses/", "#/components/responses/"),
                ] {
                    if let Some(rest) = r.strip_prefix(from) {
                        *r = format!("{to}{rest}");
                    }
                }
            }
            map.values_mut().for_each(rewrite_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

fn media_list(value: Option<&Value>) -> Vec<String> {
    value.map(crate::security::strings).unwrap_or_default()
}

fn path_item(item: &mut Value, consumes: &[String], produces: &[String]) {
    let Some(item) = item.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(params)) = item.get_mut("parameters") {
        let taken = std::mem::take(params);
        *params = taken.into_iter().map(parameter).collect();
    }
    for method in METHODS {
        if let Some(Value::Object(op)) = item.get_mut(*method) {
            operation(op, consumes, produces);
        }
    }
}

fn operation(op: &mut Map<String, Value>, consumes: &[String], produces: &[String]) {
    let consumes = media_list(op.get("consumes"))
        .into_iter()
        .next()
        .or_else(|| consumes.first().cloned());
    let produces = match media_list(op.get("produces")) {
        list if list.is_empty() => produces.to_vec(),
        list => list,
    };
    let params = match op.remove("parameters") {
        Some(Value::Array(params)) => params,
        _ => Vec::new(),
    };
    let (mut kept, mut form) = (Vec::new(), Vec::new());
    for param in params {
        match param.get("in").and_then(Value::as_str) {
            Some("body") => {
                let media = consumes
                    .clone()
                    .unwrap_or_else(|| "application/json".into());
                let required = param.get("required").cloned().unwrap_or(json!(false));
                let schema = param.get("schema").cloned().unwrap_or(json!({}));
                op.insert(
                    "requestBody".into(),
                    json!({"required": required, "content": {media: {"schema": schema}}}),
                );
            }
            Some("formData") => form.push(param),
            _ => kept.push(parameter(param)),
        }
    }
    if !form.is_empty() {
        op.insert("requestBody".into(), form_body(form, consumes.as_deref()));
    }
    op.insert("parameters".into(), Value::Array(kept));
    if let Some(Value::Object(responses)) = op.get_mut("responses") {
        for r in responses.values_mut() {
            *r = response(std::mem::take(r), &produces);
        }
    }
}

fn form_body(fields: Vec<Value>, consumes: Option<&str>) -> Value {
    let has_file = fields
        .iter()
        .any(|f| f.get("type").and_then(Value::as_str) == Some("file"));
    let media = match consumes {
        Some(m) if m.starts_with("multipart/") => "multipart/form-data",
        _ if has_file => "multipart/form-data",
        _ => "application/x-www-form-urlencoded",
    };
    let (mut properties, mut required) = (Map::new(), Vec::new());
    for field in fields {
        let Some(name) = field
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            continue;
        };
        if field.get("required").and_then(Value::as_bool) == Some(true) {
            required.push(json!(name));
        }
        properties.insert(name, schema_of(&field));
    }
    let schema = json!({"type": "object", "properties": properties, "required": required});
    json!({"required": !required.is_empty(), "content": {media: {"schema": schema}}})
}

/// A non-body parameter: its type keywords move into `schema`, `collectionFormat` into a style.
fn parameter(mut param: Value) -> Value {
    if param.get("$ref").is_some() || param.get("in").and_then(Value::as_str) == Some("body") {
        return param;
    }
    let schema = schema_of(&param);
    let Some(map) = param.as_object_mut() else {
        return param;
    };
    let format = map.remove("collectionFormat");
    for key in SCHEMA_KEYS {
        map.remove(*key);
    }
    map.insert("schema".into(), schema);
    let (style, explode) = match format.as_ref().and_then(Value::as_str) {
        Some("multi") => ("form", true),
        Some("ssv") => ("spaceDelimited", false),
        Some("pipes") => ("pipeDelimited", false),
        _ => ("form", false),
    };
    if map.get("in").and_then(Value::as_str) == Some("query") {
        map.insert("style".into(), json!(style));
        map.insert("explode".into(), json!(explode));
    }
    param
}

fn schema_of(param: &Value) -> Value {
    let mut schema = Map::new();
    for key in SCHEMA_KEYS {
        if let Some(v) = param.get(*key) {
            schema.insert(key.to_string(), v.clone());
        }
    }
    if schema.get("type").and_then(Value::as_str) == Some("file") {
        schema.insert("type".into(), json!("string"));
        schema.insert("format".into(), json!("binary"));
    }
    Value::Object(schema)
}

fn response(mut r: Value, produces: &[String]) -> Value {
    let Some(map) = r.as_object_mut() else {
        return r;
    };
    if let Some(schema) = map.remove("schema") {
        let media = produces
            .first()
            .cloned()
            .unwrap_or_else(|| "application/json".into());
        map.insert("content".into(), json!({media: {"schema": schema}}));
    }
    r
}

fn security_scheme(mut s: Value) -> Value {
    let Some(map) = s.as_object_mut() else {
        return s;
    };
    match map.get("type").and_then(Value::as_str) {
        Some("basic") => json!({"type": "http", "scheme": "basic"}),
        Some("oauth2") => {
            let flow = match map.get("flow").and_then(Value::as_str) {
                Some("accessCode") => "authorizationCode",
                Some("application") => "clientCredentials",
                Some("password") => "password",
                _ => "implicit",
            };
            let mut detail = Map::new();
            for (from, to) in [
                ("authorizationUrl", "authorizationUrl"),
                ("tokenUrl", "tokenUrl"),
                ("scopes", "scopes"),
            ] {
                if let Some(v) = map.get(from) {
                    detail.insert(to.into(), v.clone());
                }
            }
            json!({"type": "oauth2", "flows": {flow: detail}})
        }
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swagger_operation_takes_the_3x_shape() {
        let doc = to_openapi3(json!({
            "swagger": "2.0", "host": "api.example.com", "basePath": "/v2", "schemes": ["http"],
            "definitions": {"Pet": {"type": "object"}},
            "paths": {"/pets": {"post": {
                "parameters": [
                    {"name": "tags", "in": "query", "type": "array", "items": {"type": "string"}, "collectionFormat": "pipes"},
                    {"name": "pet", "in": "body", "required": true, "schema": {"$ref": "#/definitions/Pet"}}
                ],
                "responses": {"200": {"description": "ok", "schema": {"$ref": "#/definitions/Pet"}}}
            }}}
        }));
        assert_eq!(
            doc["servers"],
            json!([{"url": "http://api.example.com/v2"}])
        );
        let op = &doc["paths"]["/pets"]["post"];
        assert_eq!(
            op["parameters"][0],
            json!({"name": "tags", "in": "query", "style": "pipeDelimited", "explode": false,
                   "schema": {"type": "array", "items": {"type": "string"}}})
        );
        assert_eq!(
            op["requestBody"],
            json!({"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}})
        );
        assert_eq!(
            op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/Pet"
        );
    }

    #[test]
    fn form_data_with_a_file_becomes_a_multipart_body_and_security_moves() {
        let doc = to_openapi3(json!({
            "swagger": "2.0",
            "securityDefinitions": {"basic": {"type": "basic"}, "o": {"type": "oauth2", "flow": "accessCode",
                "authorizationUrl": "https://a/auth", "tokenUrl": "https://a/token", "scopes": {"read": "r"}}},
            "paths": {"/up": {"post": {"parameters": [
                {"name": "file", "in": "formData", "type": "file", "required": true},
                {"name": "note", "in": "formData", "type": "string"}
            ], "responses": {}}}}
        }));
        assert_eq!(doc["servers"], json!([{"url": "/"}]));
        let body =
            &doc["paths"]["/up"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"];
        assert_eq!(
            body["properties"]["file"],
            json!({"type": "string", "format": "binary"})
        );
        assert_eq!(body["required"], json!(["file"]));
        let schemes = &doc["components"]["securitySchemes"];
        assert_eq!(schemes["basic"], json!({"type": "http", "scheme": "basic"}));
        assert_eq!(
            schemes["o"]["flows"]["authorizationCode"]["tokenUrl"],
            "https://a/token"
        );
    }
}
