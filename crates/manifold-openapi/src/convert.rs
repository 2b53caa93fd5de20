//! Operations become tools: the tool definition as JSON text, and what a call needs.

use std::collections::HashMap;

use serde_json::{json, Map, Value};
use url::Url;

use crate::error::ConvertError;
use crate::filter::{Facts, Options};
use crate::load::Document;
use crate::naming::{is_valid, tool_name};
use crate::security::SecurityNeed;
use crate::{operation, Location};

pub(crate) const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// One operation as a tool.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The tool's name.
    pub name: String,
    /// The tool definition, JSON text: name, title, description, inputSchema, outputSchema,
    /// annotations.
    pub tool: String,
    /// The HTTP method, upper case.
    pub method: String,
    /// The path template (`/pets/{petId}`), also the route label of traces.
    pub path: String,
    /// The server the path is appended to, absolute.
    pub server_url: String,
    pub params: Vec<Param>,
    pub body: Option<Body>,
    /// Alternatives: a call needs every scheme of one of them. Empty when none is declared.
    pub security: Vec<Vec<SecurityNeed>>,
    /// The `$defs` of the input schema, for checking arguments that refer to them.
    pub(crate) input_defs: Map<String, Value>,
    /// Whether a 2xx answer was promised as JSON (HTML instead is an error).
    pub(crate) promises_json: bool,
}

/// A parameter of the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Its name in the request.
    pub name: String,
    /// Its member in the tool's arguments (`{name}__{in}` when the name is used twice).
    pub member: String,
    pub location: Location,
    /// `form`, `simple`, `label`, `matrix`, `deepObject`, `spaceDelimited`, `pipeDelimited`,
    /// or `json` for a parameter described by `content` (sent as JSON text).
    pub style: String,
    pub explode: bool,
    pub required: bool,
    /// Its schema as in the tool's `inputSchema`.
    pub schema: Value,
}

/// The request body: the argument `body`.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    pub media_type: String,
    pub required: bool,
    pub schema: Value,
}

/// An operation that did not become a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `GET /pets (listPets)`.
    pub operation: String,
    pub reason: String,
}

/// The tools of a description and the operations left out.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub tools: Vec<Operation>,
    pub skipped: Vec<Skipped>,
}

/// An operation found in the description, before it becomes a tool.
pub(crate) struct Found<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub item: &'a Value,
    pub item_doc: String,
    pub op: &'a Value,
}

impl Found<'_> {
    fn label(&self) -> String {
        let id = self.op.get("operationId").and_then(Value::as_str);
        let method = self.method.to_ascii_uppercase();
        match id {
            Some(id) => format!("{method} {} ({id})", self.path),
            None => format!("{method} {}", self.path),
        }
    }

    fn facts(&self) -> Facts<'_> {
        let tags = self.op.get("tags").and_then(Value::as_array);
        Facts {
            operation_id: self.op.get("operationId").and_then(Value::as_str),
            tags: tags
                .map(|t| t.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
            method: self.method,
            path: self.path,
        }
    }
}

/// Converts every operation of `doc`; duplicate tool names and invalid renames are errors.
pub fn convert(doc: &Document, options: &Options) -> Result<Conversion, ConvertError> {
    let mut conversion = Conversion {
        tools: Vec::new(),
        skipped: Vec::new(),
    };
    let mut owners: HashMap<String, String> = HashMap::new();
    for found in operations(doc, &mut conversion.skipped) {
        let label = found.label();
        let skip = |reason: String| Skipped {
            operation: label.clone(),
            reason,
        };
        if let Some(reason) = options.rejects(&found.facts()) {
            conversion.skipped.push(skip(reason));
            continue;
        }
        if conversion.tools.len() >= options.max_tools {
            conversion
                .skipped
                .push(skip(format!("over the cap of {} tools", options.max_tools)));
            continue;
        }
        let name = chosen_name(&found, options)?;
        if let Some(first) = owners.get(&name) {
            return Err(ConvertError::DuplicateName {
                name,
                first: first.clone(),
                second: label,
            });
        }
        match operation::build(doc, &found, name.clone(), options) {
            Ok(op) => {
                owners.insert(name, label);
                conversion.tools.push(op);
            }
            Err(reason) => conversion.skipped.push(skip(reason)),
        }
    }
    Ok(conversion)
}

fn chosen_name(found: &Found<'_>, options: &Options) -> Result<String, ConvertError> {
    let id = found.op.get("operationId").and_then(Value::as_str);
    let name = tool_name(id, found.method, found.path);
    let rename = id
        .and_then(|id| options.renames.get(id))
        .or_else(|| options.renames.get(&name));
    match rename {
        Some(to) if is_valid(to) => Ok(to.clone()),
        Some(to) => Err(ConvertError::BadRename {
            from: name,
            to: to.clone(),
        }),
        None => Ok(name),
    }
}

/// Every operation in path order then method order; a path item that cannot be read is skipped.
fn operations<'a>(doc: &'a Document, skipped: &mut Vec<Skipped>) -> Vec<Found<'a>> {
    let mut out = Vec::new();
    let Some(paths) = doc.root().get("paths").and_then(Value::as_object) else {
        return out;
    };
    for (path, item) in paths {
        let (item_doc, item) = match doc.deref(doc.url(), item) {
            Ok(found) => found,
            Err(e) => {
                skipped.push(Skipped {
                    operation: path.clone(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        for method in METHODS {
            if let Some(op) = item.get(*method).filter(|op| op.is_object()) {
                out.push(Found {
                    method,
                    path,
                    item,
                    item_doc: item_doc.clone(),
                    op,
                });
            }
        }
    }
    out
}

/// The server an operation is sent to: `base_url`, else the first of the operation's, the
/// path's or the document's `servers` (variables at their defaults), resolved against the
/// description's own URL.
pub(crate) fn server_url(
    doc: &Document,
    found: &Found<'_>,
    options: &Options,
) -> Result<String, String> {
    let declared = options.base_url.clone().or_else(|| {
        [found.op, found.item, doc.root()]
            .iter()
            .find_map(|v| v.get("servers").and_then(|s| s.get(0)))
            .map(with_defaults)
    });
    let declared = declared.unwrap_or_else(|| "/".to_string());
    let base = Url::parse(doc.url()).map_err(|e| e.to_string())?;
    let url = base
        .join(&declared)
        .map_err(|e| format!("server URL {declared}: {e}"))?;
    Ok(url.as_str().trim_end_matches('/').to_string())
}

fn with_defaults(server: &Value) -> String {
    let mut url = server
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_string();
    if let Some(vars) = server.get("variables").and_then(Value::as_object) {
        for (name, var) in vars {
            let default = var.get("default").and_then(Value::as_str).unwrap_or("");
            url = url.replace(&format!("{{{name}}}"), default);
        }
    }
    url
}

/// The bounded description: summary, a blank line, description.
pub(crate) fn description(op: &Value, method: &str, path: &str, max: usize) -> String {
    let text = |k: &str| {
        op.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let full = match (text("summary"), text("description")) {
        (Some(s), Some(d)) if s != d => format!("{s}\n\n{d}"),
        (Some(s), _) => s.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => format!("{} {path}", method.to_ascii_uppercase()),
    };
    if full.chars().count() <= max {
        return full;
    }
    let mut cut: String = full.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Hints from the method.
pub(crate) fn annotations(method: &str) -> Value {
    let mut hints = json!({"openWorldHint": true});
    match method {
        "get" | "head" => hints["readOnlyHint"] = json!(true),
        "put" => hints["idempotentHint"] = json!(true),
        "delete" => {
            hints["idempotentHint"] = json!(true);
            hints["destructiveHint"] = json!(true);
        }
        _ => {}
    }
    hints
}

#[cfg(test)]
#[path = "convert_tests.rs"]
pub(crate) mod tests;
