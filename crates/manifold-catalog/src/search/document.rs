//! What a tool's document holds: the words of each field, read once from the tool's JSON
//! (`Item::raw`) at build time, and what a hit shows of it (title, one line of description).

use serde_json::{Map, Value};

use super::text;
use crate::listing::Item;

/// The fields of a tool's own document. The upstream's fields (its key and its
/// instructions) are shared by every tool of an upstream and live with its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// The original name, and whatever the exposed name adds besides the upstream's prefix
    /// (a rename); the prefix is the upstream key field's.
    Name = 0,
    /// `title` and `annotations.title`.
    Title = 1,
    Description = 2,
    /// The input schema's property names and their descriptions.
    Params = 3,
    /// A term of its own for each annotation hint that is set (see [`HINTS`]).
    Hints = 4,
}

/// How many per-tool fields there are.
pub(crate) const DOC_FIELDS: usize = 5;

/// Nested schemas are read this deep at most (a property of an object property is level 2).
const SCHEMA_DEPTH: usize = 3;

/// How long a hit's summary may be, in characters.
const SUMMARY_CHARS: usize = 160;

/// One tool, analyzed.
#[derive(Debug, Default)]
pub(crate) struct Analyzed {
    /// Terms of each field, by [`Field`], repeats kept.
    pub fields: [Vec<String>; DOC_FIELDS],
    pub title: Option<String>,
    pub summary: String,
}

/// Reads the fields of `item`, a tool of an upstream whose key and prefix have the terms
/// `upstream`. A tool whose JSON cannot be read (the catalog only lists objects, so this
/// should not happen) is still found by its names.
pub(crate) fn analyze(item: &Item, upstream: &[String]) -> Analyzed {
    let mut out = Analyzed::default();
    let names = &mut out.fields[Field::Name as usize];
    text::terms(&item.original, names);
    for term in text::terms_of(&item.exposed) {
        if !names.contains(&term) && !upstream.contains(&term) {
            names.push(term);
        }
    }
    let Ok(Value::Object(tool)) = serde_json::from_str::<Value>(&item.raw) else {
        return out;
    };
    let annotations = tool.get("annotations").and_then(Value::as_object);
    let titles = [tool.get("title"), annotations.and_then(|a| a.get("title"))];
    for title in titles.into_iter().flatten().filter_map(Value::as_str) {
        text::terms(title, &mut out.fields[Field::Title as usize]);
        out.title.get_or_insert_with(|| title.to_owned());
    }
    if let Some(description) = tool.get("description").and_then(Value::as_str) {
        text::terms(description, &mut out.fields[Field::Description as usize]);
        out.summary = summary(description);
    }
    if let Some(schema) = tool.get("inputSchema").and_then(Value::as_object) {
        schema_terms(schema, 1, &mut out.fields[Field::Params as usize]);
    }
    if let Some(annotations) = annotations {
        hint_terms(annotations, &mut out.fields[Field::Hints as usize]);
    }
    out
}

/// The words of a schema's properties: each name, its description, the string values of its
/// `enum`, and the same for the properties of nested objects and of array items.
fn schema_terms(schema: &Map<String, Value>, depth: usize, out: &mut Vec<String>) {
    if depth > SCHEMA_DEPTH {
        return;
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        text::terms(name, out);
        let Some(property) = property.as_object() else {
            continue;
        };
        if let Some(description) = property.get("description").and_then(Value::as_str) {
            text::terms(description, out);
        }
        let values = property.get("enum").and_then(Value::as_array);
        for value in values.into_iter().flatten().filter_map(Value::as_str) {
            text::terms(value, out);
        }
        schema_terms(property, depth + 1, out);
        if let Some(items) = property.get("items").and_then(Value::as_object) {
            schema_terms(items, depth + 1, out);
        }
    }
}

/// The annotation hints a tool may set, each with the term its hints field gets and the
/// analyzed query term that asks for it. A hint's term is of its own vocabulary (the `:` never
/// survives analysis), so that the read-only hint most tools set does not make "read" a word
/// of their documents: "read a file" is about reading, and the word must keep its weight.
/// A query reaches a hint only by naming it ("read-only", "read only", "destructive").
/// `openWorldHint` has none: no one asks for a tool by it.
pub(crate) const HINTS: [Hint; 3] = [
    Hint {
        annotation: "readOnlyHint",
        term: "hint:readonly",
        asked_by: "readonli",
    },
    Hint {
        annotation: "destructiveHint",
        term: "hint:destructive",
        asked_by: "destructiv",
    },
    Hint {
        annotation: "idempotentHint",
        term: "hint:idempotent",
        asked_by: "idempotent",
    },
];

/// One annotation hint's place in the index (see [`HINTS`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hint {
    /// Its key in a tool's `annotations`.
    pub annotation: &'static str,
    /// The term of the hints field of a tool that sets it to true.
    pub term: &'static str,
    /// The query term (analyzed, as `text::terms` gives it) that brings `term`.
    pub asked_by: &'static str,
}

/// The hint terms of the annotations a tool sets to true.
fn hint_terms(annotations: &Map<String, Value>, out: &mut Vec<String>) {
    for hint in HINTS {
        if annotations.get(hint.annotation) == Some(&Value::Bool(true)) {
            out.push(hint.term.to_owned());
        }
    }
}

/// The first line of a description, cut at a word boundary to at most `SUMMARY_CHARS`
/// characters (with an ellipsis when cut).
fn summary(description: &str) -> String {
    let line = description
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= SUMMARY_CHARS {
        return line.to_owned();
    }
    let mut end = line
        .char_indices()
        .nth(SUMMARY_CHARS)
        .map_or(line.len(), |(i, _)| i);
    if let Some(space) = line[..end].rfind(' ') {
        end = space;
    }
    format!("{}…", line[..end].trim_end())
}
