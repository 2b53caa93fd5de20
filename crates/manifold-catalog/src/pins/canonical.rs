//! One text per JSON value, so that a digest does not depend on how a server happens to write
//! its definitions: object members sorted by name, strings escaped one way, no insignificant
//! whitespace. Numbers are kept exactly as written, because parsing them into floats would
//! change large integers and make `1.0` and `1` depend on the parser.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// `raw` (valid JSON) in canonical form, on one line.
pub fn compact(raw: &str) -> Result<String, serde_json::Error> {
    let mut out = String::with_capacity(raw.len());
    write_value(raw, &mut out, None)?;
    Ok(out)
}

/// `raw` (valid JSON) with its members sorted as in [`compact`], indented two spaces a level,
/// one member or element a line: the layout of the lock file and of diffs.
pub fn pretty(raw: &str) -> Result<String, serde_json::Error> {
    let mut out = String::with_capacity(raw.len() * 2);
    write_value(raw, &mut out, Some(0))?;
    Ok(out)
}

/// `sha256:<hex>` of `text`.
pub fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hash {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Whether `text` has the form [`digest`] produces.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Writes one value; `depth` is the indentation level when pretty, `None` when compact.
fn write_value(raw: &str, out: &mut String, depth: Option<usize>) -> Result<(), serde_json::Error> {
    let raw = raw.trim_matches([' ', '\t', '\n', '\r']);
    match raw.as_bytes().first() {
        Some(b'{') => {
            let members: BTreeMap<String, &RawValue> = serde_json::from_str(raw)?;
            write_object(&members, out, depth)
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(raw)?;
            write_array(&items, out, depth)
        }
        Some(b'"') => {
            let text: String = serde_json::from_str(raw)?;
            out.push_str(&serde_json::to_string(&text)?);
            Ok(())
        }
        // Numbers, true, false and null: validated by the parser that produced `raw`.
        _ => {
            out.push_str(raw);
            Ok(())
        }
    }
}

fn write_object(
    members: &BTreeMap<String, &RawValue>,
    out: &mut String,
    depth: Option<usize>,
) -> Result<(), serde_json::Error> {
    if members.is_empty() {
        out.push_str("{}");
        return Ok(());
    }
    out.push('{');
    for (i, (name, value)) in members.iter().enumerate() {
        separate(out, i, depth.map(|d| d + 1));
        out.push_str(&serde_json::to_string(name)?);
        out.push_str(if depth.is_some() { ": " } else { ":" });
        write_value(value.get(), out, depth.map(|d| d + 1))?;
    }
    close(out, '}', depth);
    Ok(())
}

fn write_array(
    items: &[&RawValue],
    out: &mut String,
    depth: Option<usize>,
) -> Result<(), serde_json::Error> {
    if items.is_empty() {
        out.push_str("[]");
        return Ok(());
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        separate(out, i, depth.map(|d| d + 1));
        write_value(item.get(), out, depth.map(|d| d + 1))?;
    }
    close(out, ']', depth);
    Ok(())
}

/// What goes before the `i`th member or element.
fn separate(out: &mut String, i: usize, depth: Option<usize>) {
    if i > 0 {
        out.push(',');
    }
    if let Some(depth) = depth {
        out.push('\n');
        indent(out, depth);
    }
}

fn close(out: &mut String, bracket: char, depth: Option<usize>) {
    if let Some(depth) = depth {
        out.push('\n');
        indent(out, depth);
    }
    out.push(bracket);
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_order_and_whitespace_do_not_matter() {
        let a = compact(r#"{"b": [1, {"y": true, "x": null}], "a": "\u0041"}"#).unwrap();
        let b = compact(r#"{ "a":"A","b":[ 1,{"x":null,"y":true} ] }"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, r#"{"a":"A","b":[1,{"x":null,"y":true}]}"#);
    }

    #[test]
    fn numbers_stay_as_written() {
        let text = compact(r#"{"n": 1.0, "m": 1e3, "big": 123456789012345678901234567890}"#);
        assert_eq!(
            text.unwrap(),
            r#"{"big":123456789012345678901234567890,"m":1e3,"n":1.0}"#
        );
        assert_ne!(compact("1.0").unwrap(), compact("1").unwrap());
    }

    #[test]
    fn pretty_sorts_and_indents() {
        let text = pretty(r#"{"b": {"d": [], "c": [1, 2]}, "a": {}}"#).unwrap();
        assert_eq!(
            text,
            "{\n  \"a\": {},\n  \"b\": {\n    \"c\": [\n      1,\n      2\n    ],\n    \"d\": []\n  }\n}"
        );
        assert_eq!(
            compact(&text).unwrap(),
            compact(r#"{"a":{},"b":{"c":[1,2],"d":[]}}"#).unwrap()
        );
    }

    #[test]
    fn digests_are_sha256_in_hex() {
        let d = digest("abc");
        assert_eq!(
            d,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_digest(&d));
        assert!(!is_digest("sha256:BA78"));
        assert!(!is_digest(&d.replace("sha256:", "sha1:")));
    }
}
