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
            // Stable: of a member name given twice the last one counts (serde_json and most
            // readers), so the two must keep their order.
            members.sort_by(|a, b| a.0.cmp(&b.0));
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

    /// The canonical fuzz target's value check fails on this input (checked in as a
    /// regression input) with an unstable sort, which moved one of two members of the
    /// same name past the other (here `k0`, in an object of more than 20 members, where the
    /// sort stops being an insertion sort), so the canonical form read as another value.
    #[test]
    fn a_name_given_twice_keeps_its_order() {
        let text = concat!(
            r#"{"s0":18,"a0":0,"g1":32,"x0":23,"e0":4,"h0":7,"m0":12,"a1":26,"d1":29,"f1":31,"#,
            r#""g0":6,"d0":3,"k1":36,"u0":20,"i1":34,"e1":30,"j0":9,"k0":"second","b0":1,"#,
            r#""j1":35,"y0":24,"o0":14,"l0":11,"v0":21,"q0":16,"w0":22,"b1":27,"c0":2,"i0":8,"#,
            r#""k0":10,"c1":28,"p0":15,"h1":33,"n0":13,"t0":19,"r0":17,"z0":25,"f0":5}"#,
        );
        let form = canonical(text).unwrap();
        let read = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
        assert_eq!(read(&form), read(text));
        assert!(form.contains(r#""k0":"second","k0":10"#), "{form}");
    }
}
