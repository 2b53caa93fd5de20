//! An independent reading of JSON text, through serde_json, for the envelope targets: a
//! second opinion on the grammar and on the I-JSON rules (RFC 7493) that host input is held
//! to, written without the scanner under test.

use std::collections::HashSet;
use std::fmt;

use serde::de::Visitor;
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess};
use serde_json::Value;

/// The deepest nesting a host may send (the message object is level 1).
pub(crate) const HOST_MAX_DEPTH: usize = 64;

/// The value of `text`, if serde_json reads it.
pub(crate) fn value(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok()
}

/// Why serde_json refuses `text`, if it does.
pub(crate) fn refusal(text: &str) -> Option<String> {
    serde_json::from_str::<IgnoredAny>(text)
        .err()
        .map(|e| e.to_string())
}

/// Whether a refusal is one the grammar-only scanner does not make: a number too large for a
/// double, or a `\u` escape that is half of a surrogate pair (the scanner checks the grammar,
/// serde_json also decodes).
pub(crate) fn beyond_grammar(refusal: &str) -> bool {
    refusal.contains("number out of range") || refusal.contains("surrogate")
}

/// Whether `text` is I-JSON as Manifold holds hosts to it: serde_json reads it, no object has
/// a member name twice (after unescaping), and nothing nests deeper than `HOST_MAX_DEPTH`
/// counting from `depth` (0 for a whole message).
pub(crate) fn is_ijson(text: &str, depth: usize) -> bool {
    let mut de = serde_json::Deserializer::from_str(text);
    Strict { depth }.deserialize(&mut de).is_ok() && de.end().is_ok()
}

/// Reads one value, refusing duplicate member names and nesting past the limit.
struct Strict {
    /// How deep the value's container sits.
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(E::custom("not finite"))
        }
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        if depth > HOST_MAX_DEPTH {
            return Err(A::Error::custom("too deep"));
        }
        while seq.next_element_seed(Strict { depth })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        if depth > HOST_MAX_DEPTH {
            return Err(A::Error::custom("too deep"));
        }
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(A::Error::custom("a member name twice"));
            }
            map.next_value_seed(Strict { depth })?;
        }
        Ok(())
    }
}
