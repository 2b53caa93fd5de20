//! A call's arguments checked against the operation's schemas, then the HTTP request.

use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

use crate::check::check;
use crate::convert::{Body, Operation, Param};
use crate::error::ArgError;
use crate::Location;

/// The request a call makes; the caller sends it (and adds credentials).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Upper case.
    pub method: String,
    /// Absolute: the server URL, the filled path and the query.
    pub url: String,
    /// Header parameters and a `Cookie` header for cookie parameters.
    pub headers: Vec<(String, String)>,
    pub content_type: Option<String>,
    pub body: Option<Vec<u8>>,
}

impl Operation {
    /// Checks `arguments` (a JSON object, or null for none) and builds the request; a wrong
    /// argument is an error naming it, and no request is made.
    pub fn request(&self, arguments: &Value) -> Result<HttpRequest, ArgError> {
        let empty = Map::new();
        let args = match arguments {
            Value::Null => &empty,
            Value::Object(map) => map,
            _ => return Err(ArgError::NotAnObject),
        };
        self.check_arguments(args)?;
        let mut path = self.path.clone();
        let (mut query, mut headers, mut cookies) = (Vec::new(), Vec::new(), Vec::new());
        for p in &self.params {
            let Some(value) = args.get(&p.member).filter(|v| !v.is_null()) else {
                continue;
            };
            match p.location {
                Location::Path => {
                    path = path.replace(&format!("{{{}}}", p.name), &path_value(p, value))
                }
                Location::Query => query.extend(query_pairs(p, value)),
                Location::Header => headers.push((p.name.clone(), header_value(p, value)?)),
                Location::Cookie => {
                    cookies.push(format!("{}={}", p.name, encode(&header_value(p, value)?)))
                }
            }
        }
        if !cookies.is_empty() {
            headers.push(("Cookie".to_string(), cookies.join("; ")));
        }
        let mut url = format!("{}{}", self.server_url, path);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        let (content_type, body) = match (&self.body, args.get("body").filter(|v| !v.is_null())) {
            (Some(b), Some(value)) => {
                let (ct, bytes) = body_bytes(b, value)?;
                (Some(ct), Some(bytes))
            }
            _ => (None, None),
        };
        Ok(HttpRequest {
            method: self.method.clone(),
            url,
            headers,
            content_type,
            body,
        })
    }

    fn check_arguments(&self, args: &Map<String, Value>) -> Result<(), ArgError> {
        for key in args.keys() {
            let known = self.params.iter().any(|p| &p.member == key)
                || (self.body.is_some() && key == "body");
            if !known {
                return Err(ArgError::Unknown(key.clone()));
            }
        }
        for p in &self.params {
            match args.get(&p.member).filter(|v| !v.is_null()) {
                Some(value) => check(&p.member, value, &p.schema, &self.input_defs)?,
                None if p.required => return Err(ArgError::Missing(p.member.clone())),
                None => {}
            }
        }
        if let Some(b) = &self.body {
            match args.get("body").filter(|v| !v.is_null()) {
                Some(value) => check("body", value, &b.schema, &self.input_defs)?,
                None if b.required => return Err(ArgError::Missing("body".to_string())),
                None => {}
            }
        }
        Ok(())
    }
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`).
const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but the unreserved characters, so a value never adds a path
/// segment, a query separator or a header line.
pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, RESERVED).to_string()
}

/// A scalar as text (strings unquoted); arrays and objects as JSON text.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The pieces of a value: the items of an array, `k, v` pairs of an object, or the scalar.
fn pieces(value: &Value) -> Vec<(Option<String>, String)> {
    match value {
        Value::Array(items) => items.iter().map(|v| (None, text(v))).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (Some(k.clone()), text(v)))
            .collect(),
        scalar => vec![(None, text(scalar))],
    }
}

/// `simple`, `label` or `matrix` serialization, each piece percent-encoded.
fn path_value(p: &Param, value: &Value) -> String {
    let joined = |pair_sep: &str, sep: &str| {
        pieces(value)
            .into_iter()
            .map(|(k, v)| match k {
                Some(k) => format!("{}{pair_sep}{}", encode(&k), encode(&v)),
                None => encode(&v),
            })
            .collect::<Vec<_>>()
            .join(sep)
    };
    let pair_sep = if p.explode { "=" } else { "," };
    match p.style.as_str() {
        "label" => format!(".{}", joined(pair_sep, if p.explode { "." } else { "," })),
        "matrix" => format!(";{}={}", p.name, joined(pair_sep, ",")),
        "json" => encode(&value.to_string()),
        _ => joined(pair_sep, ","),
    }
}

fn query_pairs(p: &Param, value: &Value) -> Vec<String> {
    let name = encode(&p.name);
    let parts = pieces(value);
    let enc = |(k, v): &(Option<String>, String)| match k {
        Some(k) => format!("{},{}", encode(k), encode(v)),
        None => encode(v),
    };
    match (p.style.as_str(), value) {
        ("json", _) => vec![format!("{name}={}", encode(&value.to_string()))],
        ("deepObject", Value::Object(_)) => parts
            .iter()
            .map(|(k, v)| {
                format!(
                    "{name}%5B{}%5D={}",
                    encode(k.as_deref().unwrap_or("")),
                    encode(v)
                )
            })
            .collect(),
        ("spaceDelimited", Value::Array(_)) => vec![format!(
            "{name}={}",
            parts.iter().map(enc).collect::<Vec<_>>().join("%20")
        )],
        ("pipeDelimited", Value::Array(_)) => vec![format!(
            "{name}={}",
            parts.iter().map(enc).collect::<Vec<_>>().join("|")
        )],
        (_, Value::Object(_)) if p.explode => parts
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k.as_deref().unwrap_or("")), encode(v)))
            .collect(),
        (_, Value::Array(_)) if p.explode => parts
            .iter()
            .map(|(_, v)| format!("{name}={}", encode(v)))
            .collect(),
        _ => vec![format!(
            "{name}={}",
            parts.iter().map(enc).collect::<Vec<_>>().join(",")
        )],
    }
}

fn header_value(p: &Param, value: &Value) -> Result<String, ArgError> {
    let out = match p.style.as_str() {
        "json" => value.to_string(),
        _ => pieces(value)
            .into_iter()
            .map(|(k, v)| match k {
                Some(k) if p.explode => format!("{k}={v}"),
                Some(k) => format!("{k},{v}"),
                None => v,
            })
            .collect::<Vec<_>>()
            .join(","),
    };
    if out.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(ArgError::Unsendable {
            name: p.member.clone(),
            detail: "a line break in a header".to_string(),
        });
    }
    Ok(out)
}

fn body_bytes(body: &Body, value: &Value) -> Result<(String, Vec<u8>), ArgError> {
    let media = body.media_type.clone();
    let not = |expected: &str| ArgError::Type {
        name: "body".to_string(),
        expected: expected.to_string(),
    };
    match media.as_str() {
        "application/x-www-form-urlencoded" => {
            let map = value.as_object().ok_or_else(|| not("an object"))?;
            let pairs: Vec<String> = map
                .iter()
                .flat_map(|(k, v)| match v {
                    Value::Array(items) => items
                        .iter()
                        .map(|i| format!("{}={}", encode(k), encode(&text(i))))
                        .collect(),
                    _ => vec![format!("{}={}", encode(k), encode(&text(v)))],
                })
                .collect();
            Ok((media, pairs.join("&").into_bytes()))
        }
        "multipart/form-data" => multipart(value.as_object().ok_or_else(|| not("an object"))?),
        "application/octet-stream" => {
            let b64 = value.as_str().ok_or_else(|| not("base64 text"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| not("base64 text"))?;
            Ok((media, bytes))
        }
        _ => Ok((media, value.to_string().into_bytes())),
    }
}

/// One part per field, text as is and other values as JSON text; the boundary is chosen so
/// that no field contains it.
fn multipart(fields: &Map<String, Value>) -> Result<(String, Vec<u8>), ArgError> {
    let parts: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.replace(['"', '\r', '\n'], "_"), text(v)))
        .collect();
    let mut boundary = "manifold-form-boundary".to_string();
    while parts
        .iter()
        .any(|(k, v)| k.contains(&boundary) || v.contains(&boundary))
    {
        boundary.push('-');
    }
    let mut out = String::new();
    for (name, value) in &parts {
        out.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    out.push_str(&format!("--{boundary}--\r\n"));
    Ok((
        format!("multipart/form-data; boundary={boundary}"),
        out.into_bytes(),
    ))
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
