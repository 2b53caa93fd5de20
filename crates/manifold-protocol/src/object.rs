//! A JSON object as an ordered list of borrowed `(key, raw value)` entries: enough to replace
//! one member (a name, a URI, an id) and write everything else back byte for byte.

use std::borrow::Cow;

use crate::scan::{self, SyntaxError};

pub mod edits;
pub use edits::{EditError, Edited, Edits};

/// An object whose members keep their order and their exact bytes. Values are JSON text:
/// slices of the parsed input, or text written by this crate.
#[derive(Debug, Default, Clone)]
pub struct RawObject<'a> {
    entries: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> RawObject<'a> {
    /// Parses `text`, which must be a JSON object.
    pub fn parse(text: &'a str) -> Result<Self, SyntaxError> {
        let mut entries = Vec::with_capacity(8);
        let mut bad_key = None;
        scan::for_each_member(text, |m| match m.key_text() {
            Some(key) => entries.push((key, Cow::Borrowed(m.value))),
            None => bad_key = Some(m.key),
        })?;
        if bad_key.is_some() {
            return Err(SyntaxError {
                at: 0,
                problem: "a key is not a valid string",
            });
        }
        Ok(Self { entries })
    }

    /// The JSON text of the first member named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// The member `key` decoded as a string, if it is one.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        scan::string_value(self.get(key)?)
    }

    /// Replaces the member `key` (or appends it) with `value`, which must be JSON text.
    pub fn set_raw(&mut self, key: &'a str, value: impl Into<Cow<'a, str>>) {
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((Cow::Borrowed(key), value)),
        }
    }

    /// Replaces the member `key` (or appends it) with a JSON string.
    pub fn set_str(&mut self, key: &'a str, value: &str) {
        self.set_raw(key, json_string(value));
    }

    /// Removes the member `key`, returning whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| k != key);
        before != self.entries.len()
    }

    /// Appends the object's JSON text to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (key, value)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_str(out, key);
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
        }
        out.push(b'}');
    }

    /// The object's JSON text. Built only from valid JSON pieces, so it needs no
    /// re-validation.
    pub fn to_text(&self) -> String {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write_to(&mut out);
        // Keys and values are all &str, so the bytes are valid UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }

    fn len_hint(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum::<usize>()
            + 2
    }
}

/// `params` (a request's params as JSON text; `None` or `null` for none) with `members` merged
/// into its `_meta`: `members` is the text of JSON object members without the braces, e.g.
/// `"io.modelcontextprotocol/protocolVersion":"2026-07-28","k":{}`. A key `members` names
/// replaces the same key in `_meta`; every other member of `_meta` (a progress token, a trace
/// context) and of `params` is kept byte for byte. A `_meta` that is not an object is replaced.
/// `params` that are not an object (which no MCP request has) are returned unchanged.
///
/// This is how a request to a stateless-era server gets the per-request metadata that revision
/// requires (its protocol version, the client's capabilities and identity).
pub fn with_meta(params: Option<&str>, members: &str) -> String {
    let params = params.map(str::trim).filter(|p| *p != "null");
    let add_text = format!("{{{members}}}");
    let Ok(add) = RawObject::parse(&add_text) else {
        return params.unwrap_or("{}").to_owned();
    };
    let mut obj = match params {
        None => RawObject::default(),
        Some(p) => match RawObject::parse(p) {
            Ok(obj) => obj,
            Err(_) => return p.to_owned(),
        },
    };
    let mut meta = obj
        .get("_meta")
        .and_then(|m| RawObject::parse(m).ok())
        .unwrap_or_default();
    for (key, value) in &add.entries {
        match meta.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = Cow::Borrowed(value.as_ref()),
            None => meta
                .entries
                .push((Cow::Borrowed(key.as_ref()), Cow::Borrowed(value.as_ref()))),
        }
    }
    let meta_text = meta.to_text();
    obj.set_raw("_meta", meta_text);
    obj.to_text()
}

/// `params` without the member `key` of its `_meta` (and without `_meta` once that leaves it
/// empty); `None` when there is no such member, so the caller keeps what it has.
pub fn without_meta_member(params: &str, key: &str) -> Option<String> {
    let mut obj = RawObject::parse(params).ok()?;
    let mut meta = RawObject::parse(obj.get("_meta")?).ok()?;
    if !meta.remove(key) {
        return None;
    }
    if meta.entries.is_empty() {
        obj.remove("_meta");
    } else {
        let text = meta.to_text();
        obj.set_raw("_meta", text);
    }
    Some(obj.to_text())
}

/// Encodes `s` as a JSON string value.
pub fn json_string(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_json_str(&mut out, s);
    // Escaping keeps valid UTF-8 valid.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends `s` as a JSON string (quoted and escaped) to `out`.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_one_member_and_keeps_the_rest_byte_for_byte() {
        let text = r#"{"name":"echo", "x-unknown":{"deep":[1,2.50e3,"\u00e9"]},"description":"say \"hi\""}"#;
        let mut obj = RawObject::parse(text).unwrap();
        assert_eq!(obj.get_str("name").as_deref(), Some("echo"));
        obj.set_str("name", "alpha__echo");
        let mut out = Vec::new();
        obj.write_to(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"name":"alpha__echo","x-unknown":{"deep":[1,2.50e3,"\u00e9"]},"description":"say \"hi\""}"#
        );
    }

    #[test]
    fn appends_and_removes_members() {
        let mut obj = RawObject::parse(r#"{"a":1}"#).unwrap();
        obj.set_raw("b", "[true]");
        assert!(obj.remove("a"));
        assert!(!obj.remove("zz"));
        assert_eq!(obj.to_text(), r#"{"b":[true]}"#);
    }

    #[test]
    fn escapes_keys_and_strings() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\nd\u0001é""#);
        let obj = RawObject::parse(r#"{"k\"ey":1}"#).unwrap();
        assert_eq!(obj.to_text(), r#"{"k\"ey":1}"#);
    }

    #[test]
    fn merges_members_into_meta_keeping_the_rest() {
        let members = r#""v":"2026-07-28","caps":{}"#;
        assert_eq!(
            with_meta(None, members),
            r#"{"_meta":{"v":"2026-07-28","caps":{}}}"#
        );
        assert_eq!(
            with_meta(Some("null"), members),
            r#"{"_meta":{"v":"2026-07-28","caps":{}}}"#
        );
        assert_eq!(
            with_meta(Some(r#"{"name":"t","arguments":{"a":[1, 2]}}"#), members),
            r#"{"name":"t","arguments":{"a":[1, 2]},"_meta":{"v":"2026-07-28","caps":{}}}"#
        );
        // Kept: the members `members` does not name; replaced: those it does.
        assert_eq!(
            with_meta(
                Some(r#"{"_meta":{"progressToken":7,"v":"old"},"cursor":"c"}"#),
                members
            ),
            r#"{"_meta":{"progressToken":7,"v":"2026-07-28","caps":{}},"cursor":"c"}"#
        );
        assert_eq!(
            with_meta(Some(r#"{"_meta":5}"#), members),
            r#"{"_meta":{"v":"2026-07-28","caps":{}}}"#
        );
        assert_eq!(with_meta(Some("[1]"), members), "[1]");
    }

    #[test]
    fn removes_one_meta_member() {
        let p = r#"{"uri":"a","_meta":{"sub":1,"k":2}}"#;
        assert_eq!(
            without_meta_member(p, "sub").as_deref(),
            Some(r#"{"uri":"a","_meta":{"k":2}}"#)
        );
        assert_eq!(
            without_meta_member(r#"{"uri":"a","_meta":{"sub":1}}"#, "sub").as_deref(),
            Some(r#"{"uri":"a"}"#)
        );
        assert_eq!(without_meta_member(p, "zz"), None);
        assert_eq!(without_meta_member(r#"{"uri":"a"}"#, "sub"), None);
    }

    #[test]
    fn refuses_non_objects() {
        assert!(RawObject::parse("[1]").is_err());
        assert!(RawObject::parse("\"s\"").is_err());
    }
}
