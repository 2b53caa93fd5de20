//! The try page's form, made from a tool's `inputSchema`: a string is a text input, a number
//! or integer a number input, a boolean a checkbox, an enum a select, and anything else (an
//! array, an object, a schema without a type) a textarea taking JSON. What the form sends back
//! is read into the call's `arguments`, or into the reasons it cannot be, before anything is
//! sent.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::page::escape;

/// The prefix of an argument's form field (`arg:text` for argument `text`).
pub(super) const ARG: &str = "arg:";
/// The field of a tool whose schema names no properties: the whole arguments object as JSON.
pub(super) const WHOLE: &str = "arguments";

/// One argument's field.
pub(super) struct Field {
    name: String,
    kind: FieldKind,
    required: bool,
    description: String,
}

enum FieldKind {
    Text,
    Number {
        integer: bool,
    },
    Boolean,
    /// The allowed values; the form sends an index into them.
    Choice(Vec<Value>),
    Json,
}

/// The fields of a tool's `inputSchema`, in its order; `None` when it names no properties
/// (the form then takes the whole arguments object as JSON).
pub(super) fn fields(schema: Option<&Value>) -> Option<Vec<Field>> {
    let schema = schema?;
    let properties = schema.get("properties")?.as_object()?;
    if properties.is_empty() {
        return None;
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields = properties
        .iter()
        .map(|(name, property)| Field {
            name: name.clone(),
            kind: kind_of(property),
            required: required.contains(&name.as_str()),
            description: property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        })
        .collect();
    Some(fields)
}

fn kind_of(property: &Value) -> FieldKind {
    if let Some(choices) = property.get("enum").and_then(Value::as_array) {
        return FieldKind::Choice(choices.clone());
    }
    // `"type": ["string", "null"]` is a string that may be left out.
    let ty = match property.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    };
    match ty {
        Some("string") => FieldKind::Text,
        Some("number") => FieldKind::Number { integer: false },
        Some("integer") => FieldKind::Number { integer: true },
        Some("boolean") => FieldKind::Boolean,
        _ => FieldKind::Json,
    }
}

/// The form's inputs for `fields` (or the one JSON textarea for `None`), filled with
/// `values` (what was sent last, by field name).
pub(super) fn inputs(fields: Option<&[Field]>, values: &HashMap<String, String>) -> String {
    let Some(fields) = fields else {
        let value = values.get(WHOLE).map_or("{}", String::as_str);
        return format!(
            "<div class=\"field\"><label for=\"field-arguments\">Arguments (a JSON object)</label>\
             <textarea id=\"field-arguments\" name=\"{WHOLE}\" rows=\"6\">{}</textarea></div>\n",
            escape(value)
        );
    };
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| input(i, f, values.get(&format!("{ARG}{}", f.name))))
        .collect()
}

fn input(index: usize, f: &Field, value: Option<&String>) -> String {
    let id = format!("field-{index}");
    let name = escape(&format!("{ARG}{}", f.name));
    let value = value.map_or("", String::as_str);
    let required = if f.required { " required" } else { "" };
    let control = match &f.kind {
        FieldKind::Text => format!(
            "<input id=\"{id}\" name=\"{name}\" type=\"text\" value=\"{}\"{required}>",
            escape(value)
        ),
        FieldKind::Number { integer } => format!(
            "<input id=\"{id}\" name=\"{name}\" type=\"number\" step=\"{}\" value=\"{}\"{required}>",
            if *integer { "1" } else { "any" },
            escape(value)
        ),
        FieldKind::Boolean => format!(
            "<input id=\"{id}\" name=\"{name}\" type=\"checkbox\" value=\"true\"{}>",
            if value == "true" { " checked" } else { "" }
        ),
        FieldKind::Choice(choices) => choice(&id, &name, choices, value, f.required),
        FieldKind::Json => format!(
            "<textarea id=\"{id}\" name=\"{name}\" rows=\"3\" placeholder=\"JSON\"{required}>{}</textarea>",
            escape(value)
        ),
    };
    let mark = if f.required {
        " <span class=\"required\">(required)</span>"
    } else {
        ""
    };
    format!(
        "<div class=\"field\" data-arg=\"{arg}\"><label for=\"{id}\">{arg}{mark}</label>{control}\
         <span class=\"hint\">{}</span></div>\n",
        escape(&f.description),
        arg = escape(&f.name),
    )
}

fn choice(id: &str, name: &str, choices: &[Value], value: &str, required: bool) -> String {
    let mut out = format!("<select id=\"{id}\" name=\"{name}\">");
    if !required {
        out.push_str("<option value=\"\">(left out)</option>");
    }
    for (i, c) in choices.iter().enumerate() {
        let label = c.as_str().map_or_else(|| c.to_string(), str::to_owned);
        let selected = if value == i.to_string() {
            " selected"
        } else {
            ""
        };
        out.push_str(&format!(
            "<option value=\"{i}\"{selected}>{}</option>",
            escape(&label)
        ));
    }
    out.push_str("</select>");
    out
}

/// The call's `arguments` from the form's `values`, or every reason it cannot be made.
pub(super) fn arguments(
    fields: Option<&[Field]>,
    values: &HashMap<String, String>,
) -> Result<Value, Vec<String>> {
    let Some(fields) = fields else {
        let text = values.get(WHOLE).map_or("", |t| t.trim());
        let text = if text.is_empty() { "{}" } else { text };
        return match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err(vec!["the arguments must be a JSON object".to_owned()]),
            Err(e) => Err(vec![format!("the arguments are not JSON: {e}")]),
        };
    };
    let mut arguments = Map::new();
    let mut problems = Vec::new();
    for f in fields {
        let raw = values
            .get(&format!("{ARG}{}", f.name))
            .map_or("", String::as_str);
        match value_of(f, raw) {
            Ok(Some(v)) => {
                arguments.insert(f.name.clone(), v);
            }
            Ok(None) if f.required => problems.push(format!("{} is required", f.name)),
            Ok(None) => {}
            Err(why) => problems.push(format!("{}: {why}", f.name)),
        }
    }
    match problems.is_empty() {
        true => Ok(Value::Object(arguments)),
        false => Err(problems),
    }
}

/// One argument's value from its field's text; `None`: left out.
fn value_of(f: &Field, raw: &str) -> Result<Option<Value>, String> {
    let text = raw.trim();
    // A checkbox sends nothing when it is not ticked: that is `false`, not "left out".
    if let FieldKind::Boolean = f.kind {
        return Ok(Some(Value::Bool(text == "true")));
    }
    if text.is_empty() {
        return Ok(None);
    }
    match &f.kind {
        FieldKind::Text => Ok(Some(Value::String(raw.to_owned()))),
        FieldKind::Number { integer: true } => text
            .parse::<i64>()
            .map(|n| Some(Value::from(n)))
            .map_err(|_| format!("{text:?} is not a whole number")),
        FieldKind::Number { integer: false } => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(|n| Some(Value::Number(n)))
            .ok_or_else(|| format!("{text:?} is not a number")),
        FieldKind::Choice(choices) => text
            .parse::<usize>()
            .ok()
            .and_then(|i| choices.get(i))
            .map(|c| Some(c.clone()))
            .ok_or_else(|| "not one of the choices".to_owned()),
        FieldKind::Json => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| format!("not JSON: {e}")),
        FieldKind::Boolean => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["text", "count"], "properties": {
            "text": {"type": "string", "description": "what to say"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "loud": {"type": "boolean"},
            "mode": {"enum": ["a", 2]},
            "tags": {"type": "array", "items": {"type": "string"}}
        }})
    }

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn each_type_gets_its_control_and_required_ones_are_marked() {
        let schema = schema();
        let fields = fields(Some(&schema));
        let html = inputs(fields.as_deref(), &HashMap::new());
        assert!(
            html.contains("name=\"arg:text\" type=\"text\" value=\"\" required"),
            "{html}"
        );
        assert!(
            html.contains("name=\"arg:count\" type=\"number\" step=\"1\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"arg:loud\" type=\"checkbox\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"arg:mode\"><option value=\"\">(left out)"),
            "{html}"
        );
        assert!(html.contains("name=\"arg:tags\" rows=\"3\" placeholder=\"JSON\">"));
        assert!(html.contains("text <span class=\"required\">(required)</span>"));
    }

    #[test]
    fn the_form_becomes_typed_arguments() {
        let schema = schema();
        let fields = fields(Some(&schema));
        let values = form(&[
            ("arg:text", "hi <b>"),
            ("arg:count", "3"),
            ("arg:ratio", "0.5"),
            ("arg:mode", "1"),
            ("arg:tags", "[\"x\"]"),
        ]);
        let args = arguments(fields.as_deref(), &values).unwrap();
        assert_eq!(
            args,
            json!({"text": "hi <b>", "count": 3, "ratio": 0.5, "loud": false, "mode": 2, "tags": ["x"]})
        );
    }

    #[test]
    fn bad_values_are_all_reported_and_nothing_is_made() {
        let schema = schema();
        let fields = fields(Some(&schema));
        let values = form(&[("arg:count", "three"), ("arg:tags", "[oops")]);
        let problems = arguments(fields.as_deref(), &values).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems.iter().any(|p| p == "text is required"),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.starts_with("count: \"three\"")));
        assert!(problems.iter().any(|p| p.starts_with("tags: not JSON")));
    }

    #[test]
    fn a_schema_without_properties_takes_a_json_object() {
        let none = fields(Some(&json!({"type": "object"})));
        assert!(none.is_none());
        let args = arguments(None, &form(&[("arguments", "{\"a\": 1}")])).unwrap();
        assert_eq!(args, json!({"a": 1}));
        assert!(arguments(None, &form(&[("arguments", "[1]")])).is_err());
    }
}
