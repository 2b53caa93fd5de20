//! The canonical form of tool arguments (`manifold_protocol::canonical`), which the result
//! cache keys calls by: it is JSON equal in value to its input (serde_json's reading, the last
//! of a repeated member winning), canonical already (applying it again changes nothing), and
//! neither whitespace nor the order of distinct members changes it.

use manifold_protocol::{canonical, scan};

use crate::json;

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let form = canonical(text);
    let Some(value) = json::value(text) else {
        // Not JSON to serde_json: the canonical form may still exist (numbers serde_json
        // cannot hold as a double keep their text), but must then be canonical itself.
        if let Some(form) = form {
            assert_eq!(canonical(&form).as_ref(), Some(&form), "idempotent");
        }
        return;
    };
    let form = form.unwrap_or_else(|| panic!("serde_json reads {text:?}, canonical does not"));
    assert_eq!(json::value(&form), Some(value), "the value of {form:?}");
    assert_eq!(canonical(&form).as_ref(), Some(&form), "idempotent");
    assert_eq!(canonical(&spaced(&form)), Some(form.clone()), "whitespace");
    if let Some(reversed) = reversed_members(&form) {
        assert_eq!(canonical(&reversed), Some(form), "member order");
    }
}

/// `json` (compact) with whitespace after every structural character outside strings.
fn spaced(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        out.push(c);
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if matches!(c, '{' | '[' | ',' | ':') {
            out.push_str(" \n\t");
        }
    }
    format!("\r\n {out} \t")
}

/// A top-level object with its members in reverse order, if its member names are distinct
/// (with a name twice, which comes last decides its value).
fn reversed_members(json: &str) -> Option<String> {
    let mut members = Vec::new();
    scan::for_each_member(json, |m| members.push((m.key, m.value))).ok()?;
    let mut names: Vec<&str> = members.iter().map(|m| m.0).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != members.len() {
        return None;
    }
    let body: Vec<String> = members
        .iter()
        .rev()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    Some(format!("{{{}}}", body.join(",")))
}
