//! A JSON object as an ordered list of borrowed `(key, raw value)` entries: enough to replace
//! one member (a name, a URI, an id) and write everything else back byte for byte.

use std::borrow::Cow;

use crate::scan::{self, SyntaxError};

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
    fn refuses_non_objects() {
        assert!(RawObject::parse("[1]").is_err());
        assert!(RawObject::parse("\"s\"").is_err());
    }
}
