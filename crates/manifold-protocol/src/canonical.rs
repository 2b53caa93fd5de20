//! One text per JSON value, for keys that must not depend on how a host happened to write
//! its arguments (the result cache keys a tool call by them).

use crate::object::json_string;
use crate::scan;

/// `raw` JSON in a canonical form: object members sorted by key, no insignificant
/// whitespace, strings escaped one way. Numbers keep their own text (`1.0` and `1` are two
/// keys): read as doubles, different numbers could share a key. `None` if it is not JSON.
pub fn canonical(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    write_canonical(raw, &mut out)?;
    Some(out)
}

fn write_canonical(raw: &str, out: &mut String) -> Option<()> {
    let raw = raw.trim();
    match raw.as_bytes().first()? {
        b'{' => {
            let mut members = Vec::new();
            let mut keys_ok = true;
            scan::for_each_member(raw, |m| match m.key_text() {
                Some(key) => members.push((key, m.value)),
                None => keys_ok = false,
            })
            .ok()?;
            keys_ok.then_some(())?;
            members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (key, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_string(&key));
                out.push(':');
                write_canonical(value, out)?;
            }
            out.push('}');
        }
        b'[' => {
            out.push('[');
            for (i, item) in scan::elements(raw).ok()?.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        b'"' => out.push_str(&json_string(&scan::string_value(raw)?)),
        // Numbers, true, false, null: a scanned value is one token.
        _ => out.push_str(raw),
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_arguments_ignore_member_order_and_whitespace() {
        let a = canonical(r#"{"b": [1, {"y": 2, "x": "\u0041"}], "a": null}"#).unwrap();
        let b = canonical(r#"{"a":null,"b":[1,{"x":"A","y":2}]}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, r#"{"a":null,"b":[1,{"x":"A","y":2}]}"#);
        assert_ne!(
            canonical("[1,2]"),
            canonical("[2,1]"),
            "arrays keep their order"
        );
        assert_eq!(canonical("{"), None);
    }
}
