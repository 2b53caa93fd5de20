//! A JSON object as an ordered list of borrowed `(key, raw value)` entries: enough to replace
//! one member (a name, a URI, an id) and write everything else back byte for byte.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// An object whose members keep their order and their exact bytes.
#[derive(Debug, Default, Clone)]
pub struct RawObject<'a> {
    entries: Vec<(Cow<'a, str>, Cow<'a, RawValue>)>,
}

impl<'a> RawObject<'a> {
    /// Parses `raw`, which must be a JSON object.
    pub fn parse(raw: &'a RawValue) -> Result<Self, serde_json::Error> {
        serde_json::from_str(raw.get())
    }

    /// Parses `text`, which must be a JSON object.
    pub fn parse_str(text: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The raw value of the first member named `key`.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// The member `key` decoded as a string, if it is one.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        let raw = self.get(key)?;
        serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()
    }

    /// Replaces the member `key` (or appends it) with an already encoded JSON value.
    pub fn set_raw(&mut self, key: &'a str, value: Box<RawValue>) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = Cow::Owned(value),
            None => self.entries.push((Cow::Borrowed(key), Cow::Owned(value))),
        }
    }

    /// Replaces the member `key` (or appends it) with a JSON string.
    pub fn set_str(&mut self, key: &'a str, value: &str) {
        self.set_raw(key, string_value(value));
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
            out.extend_from_slice(value.get().as_bytes());
        }
        out.push(b'}');
    }

    /// The object's JSON text. Built only from valid JSON pieces, so it needs no
    /// re-validation: the request path uses this rather than `to_raw`.
    pub fn to_text(&self) -> String {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write_to(&mut out);
        // Keys are &str and values are RawValue text, both valid UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }

    /// The object as a boxed raw value.
    pub fn to_raw(&self) -> Box<RawValue> {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write_to(&mut out);
        // The bytes are built from valid JSON pieces, so this cannot fail; fall back to an
        // empty object rather than panic should that ever change.
        String::from_utf8(out)
            .ok()
            .and_then(|s| RawValue::from_string(s).ok())
            .unwrap_or_else(|| string_value_raw("{}"))
    }

    fn len_hint(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum::<usize>()
            + 2
    }
}

/// Encodes `s` as a JSON string value.
pub fn string_value(s: &str) -> Box<RawValue> {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_json_str(&mut out, s);
    String::from_utf8(out)
        .ok()
        .and_then(|s| RawValue::from_string(s).ok())
        .unwrap_or_else(|| string_value_raw("\"\""))
}

fn string_value_raw(text: &str) -> Box<RawValue> {
    // Only ever called with literal valid JSON.
    RawValue::from_string(text.to_owned()).unwrap_or_default()
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

impl<'de: 'a, 'a> Deserialize<'de> for RawObject<'a> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    entries.push((key, Cow::Borrowed(value)));
                }
                Ok(RawObject { entries })
            }
        }
        de.deserialize_map(EntriesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_one_member_and_keeps_the_rest_byte_for_byte() {
        let text = r#"{"name":"echo", "x-unknown":{"deep":[1,2.50e3,"\u00e9"]},"description":"say \"hi\""}"#;
        let mut obj = RawObject::parse_str(text).unwrap();
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
        let mut obj = RawObject::parse_str(r#"{"a":1}"#).unwrap();
        obj.set_raw("b", RawValue::from_string("[true]".into()).unwrap());
        assert!(obj.remove("a"));
        assert!(!obj.remove("zz"));
        assert_eq!(obj.to_raw().get(), r#"{"b":[true]}"#);
        assert_eq!(obj.to_text(), r#"{"b":[true]}"#);
    }

    #[test]
    fn escapes_keys_and_strings() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\nd\u0001é""#);
        let obj = RawObject::parse_str(r#"{"k\"ey":1}"#).unwrap();
        assert_eq!(obj.to_raw().get(), r#"{"k\"ey":1}"#);
    }

    #[test]
    fn refuses_non_objects() {
        assert!(RawObject::parse_str("[1]").is_err());
        assert!(RawObject::parse_str("\"s\"").is_err());
    }
}
