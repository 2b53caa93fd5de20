use super::*;

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// The members of the JSON object `text`, in order.
fn members(text: &str) -> Result<Vec<Member<'_>>, SyntaxError> {
    let mut out = Vec::new();
    for_each_member(text, |m| out.push(m))?;
    Ok(out)
}

fn serde_accepts(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

/// serde_json's view of an object's members, for comparison.
fn serde_members(text: &str) -> Option<Vec<(String, String)>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let members = ordered_members(&mut de).ok()?;
    Some(
        members
            .into_iter()
            .map(|(k, v)| (k, v.get().to_owned()))
            .collect(),
    )
}

fn ordered_members<'de>(
    de: &mut serde_json::Deserializer<serde_json::de::StrRead<'de>>,
) -> Result<Vec<(String, &'de RawValue)>, serde_json::Error> {
    use serde::de::{Deserializer as _, MapAccess, Visitor};
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
            let mut out = Vec::new();
            while let Some(k) = m.next_key::<String>()? {
                out.push((k, m.next_value()?));
            }
            Ok(out)
        }
    }
    let out = de.deserialize_map(V)?;
    de.end()?;
    Ok(out)
}

fn scanner_members(text: &str) -> Option<Vec<(String, String)>> {
    let members = members(text).ok()?;
    members
        .into_iter()
        .map(|m| Some((m.key_text()?.into_owned(), m.value.to_owned())))
        .collect()
}

#[test]
fn accepts_valid_json() {
    for text in [
        "0",
        "-0",
        "-12.5e+3",
        "1E9",
        "0.000",
        "true",
        "false",
        "null",
        r#""""#,
        r#""a\"b\\c\/d\b\f\n\r\t\u00e9\uD83D\uDE00""#,
        r#""\ud800""#,
        "\"é 漢字 😀\"",
        " \t\r\n[1, [2, {\"a\": [ ]}], {} ] \n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"hi"}}}"#,
    ] {
        assert_eq!(validate(text), Ok(()), "{text}");
        assert!(serde_accepts(text), "{text}");
    }
}

#[test]
fn refuses_invalid_json_with_a_position() {
    for (text, at) in [
        ("", 0),
        ("{", 1),
        ("[1,]", 3),
        ("{\"a\" 1}", 5),
        ("{\"a\":1,}", 7),
        ("01", 1),
        ("1.", 2),
        ("1e", 2),
        ("-", 1),
        ("+1", 0),
        (".5", 0),
        ("tru", 0),
        ("nul", 0),
        ("\"abc", 4),
        ("\"a\tb\"", 2),
        ("\"\\x\"", 1),
        ("\"\\u12G4\"", 1),
        ("{} {}", 3),
        ("{'a':1}", 1),
        ("[1 2]", 3),
        ("{\"a\":1 \"b\":2}", 7),
    ] {
        let err = validate(text).expect_err(text);
        assert_eq!(err.at, at, "{text}: {err}");
        assert!(!serde_accepts(text), "{text}");
    }
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    // serde_json skips values it does not build at any depth; the scanner recurses, so it
    // stops at the depth serde_json allows for values it does build.
    for depth in [1, MAX_DEPTH - 1, MAX_DEPTH] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(validate(&text), Ok(()), "depth {depth}");
        let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        assert_eq!(validate(&text), Ok(()), "depth {depth}");
    }
    for depth in [MAX_DEPTH + 1, 100_000] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(validate(&text).unwrap_err().problem, "nested too deeply");
        let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        assert_eq!(validate(&text).unwrap_err().problem, "nested too deeply");
    }
}

#[test]
fn strict_scans_read_any_depth_to_the_end_without_recursing() {
    // A host's message nested past the limit is a breach, not a parse error: its id and the
    // place of the breach are still read.
    for depth in [MAX_DEPTH + 1, 100_000] {
        for text in [
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
            format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
            format!(
                "{}{{\"b\":[1,{{}},[]],\"c\":\"x\"}}{}",
                "[".repeat(depth),
                "]".repeat(depth)
            ),
        ] {
            let v = validate_strict(&text).unwrap().expect("a breach");
            assert!(v.problem.contains("64 levels"), "{v}");
        }
    }
    // Below the limit's depth, the grammar is still checked.
    let deep = "[".repeat(MAX_DEPTH + 5);
    for (bad, problem) in [
        (format!("{deep}1,]"), "expected a value"),
        (format!("{deep}{{\"a\" 1}}"), "expected ':'"),
        (format!("{deep}{{1:1}}"), "expected a key"),
        (format!("{deep}1}}"), "expected ',' or ']'"),
        (format!("{deep}\"x"), "unterminated string"),
        (deep.clone(), "unexpected end of input"),
    ] {
        assert_eq!(
            validate_strict(&bad).unwrap_err().problem,
            problem,
            "{problem}"
        );
    }
}

#[test]
fn members_are_exact_slices_in_order() {
    let text = r#" { "b" : [1, 2] , "a\u0041":"x\"y", "":null,"n":-1.5e3 } "#;
    let got = members(text).unwrap();
    let seen: Vec<(&str, bool, &str)> = got
        .iter()
        .map(|m| (m.key, m.key_escaped, m.value))
        .collect();
    assert_eq!(
        seen,
        [
            ("b", false, "[1, 2]"),
            ("a\\u0041", true, r#""x\"y""#),
            ("", false, "null"),
            ("n", false, "-1.5e3"),
        ]
    );
    assert_eq!(got[1].key_text().as_deref(), Some("aA"));
    assert_eq!(members("[1]").unwrap_err().problem, "expected an object");
    assert_eq!(elements(" [1, \"a\" ,{}] ").unwrap(), ["1", "\"a\"", "{}"]);
}

#[test]
fn string_values_borrow_unless_escaped() {
    assert!(matches!(
        string_value("\"plain\""),
        Some(Cow::Borrowed("plain"))
    ));
    assert_eq!(string_value(r#""a\nb\u00e9""#).as_deref(), Some("a\nbé"));
    assert_eq!(string_value("12"), None);
    assert_eq!(string_value("\"a\"b\""), None);
    // A lone surrogate is valid JSON text but not a string Rust can hold.
    assert_eq!(string_value(r#""\ud800""#), None);
}

#[test]
fn long_strings_find_control_characters_anywhere() {
    for at in [0, 31, 32, 63, 64, 1000, 4095] {
        let mut s = "x".repeat(4096);
        s.replace_range(at..=at, "\u{1}");
        let text = format!("\"{s}\"");
        assert_eq!(
            validate(&text).unwrap_err().problem,
            "control character in a string"
        );
        assert!(!serde_accepts(&text));
    }
    assert_eq!(validate(&format!("\"{}\"", "é".repeat(5000))), Ok(()));
}

/// A small deterministic generator: random documents, then random mutations of them.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn random_value(rng: &mut Rng, depth: usize, out: &mut String) {
    let kind = if depth > 4 {
        rng.below(4)
    } else {
        rng.below(7)
    };
    match kind {
        0 => out.push_str(rng.pick(&["0", "-1", "12.5", "1e5", "-0.0E-2", "99999999999999999999"])),
        1 => out.push_str(rng.pick(&["true", "false", "null"])),
        2 | 3 => out.push_str(rng.pick(&[
            r#""""#,
            r#""text""#,
            r#""a\"b""#,
            r#""\u00e9\n""#,
            "\"é😀\"",
            r#""\\""#,
        ])),
        4 | 5 => {
            out.push('{');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push_str(rng.pick(&[",", " , "]));
                }
                out.push_str(rng.pick(&[r#""k""#, r#""id""#, r#""k\u0041""#, r#""""#]));
                out.push_str(rng.pick(&[":", " : "]));
                random_value(rng, depth + 1, out);
            }
            out.push('}');
        }
        _ => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                random_value(rng, depth + 1, out);
            }
            out.push(']');
        }
    }
}

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..=rng.below(3) {
        let alphabet = [
            '{', '}', '[', ']', '"', '\\', ':', ',', ' ', '0', '1', '-', '.', 'e', '+', 'u', 'n',
            't', 'a', '\u{1}', '\n', 'é',
        ];
        let c = alphabet[rng.below(alphabet.len())];
        let at = rng.below(chars.len() + 1);
        match rng.below(3) {
            0 => chars.insert(at, c),
            1 if at < chars.len() => {
                chars.remove(at);
            }
            _ if at < chars.len() => chars[at] = c,
            _ => chars.push(c),
        }
    }
    chars.into_iter().collect()
}

#[test]
fn agrees_with_serde_json_on_generated_documents() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..20_000 {
        let mut doc = String::new();
        random_value(&mut rng, 0, &mut doc);
        for text in [doc.clone(), mutate(&mut rng, &doc)] {
            let ours = validate(&text).is_ok();
            assert_eq!(ours, serde_accepts(&text), "validate disagrees on {text:?}");
            if ours {
                valid += 1;
            } else {
                invalid += 1;
            }
            if text.trim_start().starts_with('{') {
                assert_eq!(
                    scanner_members(&text),
                    serde_members(&text),
                    "members disagree on {text:?}"
                );
            }
        }
    }
    // Both kinds were exercised in quantity.
    assert!(
        valid > 10_000 && invalid > 5_000,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn every_position_of_a_special_byte_agrees_with_serde_json() {
    // Covers the word-at-a-time run, its byte-by-byte tail and the hand-over to memchr.
    for len in 0..80 {
        for at in 0..len {
            for special in ["\"", "\\", "\\n", "\\u00e9", "\u{1f}", "\u{7f}", "é"] {
                let mut body = "a".repeat(len);
                body.replace_range(at..=at, special);
                let text = format!("\"{body}\"");
                assert_eq!(validate(&text).is_ok(), serde_accepts(&text), "{text:?}");
            }
        }
    }
}

/// A strict reference for I-JSON, built on `serde_json`: it refuses lone surrogates in strings
/// and keys and numbers beyond a double when it decodes them; duplicate keys and depth are
/// checked here. `None` for text that is not JSON at all.
fn reference_strict(text: &str) -> Option<bool> {
    use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use std::collections::HashSet;

    struct Check {
        depth: usize,
    }
    impl<'de> DeserializeSeed<'de> for Check {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Check {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any value")
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
            if self.depth + 1 > HOST_MAX_DEPTH {
                return Err(serde::de::Error::custom("too deep"));
            }
            while seq
                .next_element_seed(Check {
                    depth: self.depth + 1,
                })?
                .is_some()
            {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            if self.depth + 1 > HOST_MAX_DEPTH {
                return Err(serde::de::Error::custom("too deep"));
            }
            let mut keys = HashSet::new();
            while let Some(k) = map.next_key::<String>()? {
                if !keys.insert(k) {
                    return Err(serde::de::Error::custom("duplicate key"));
                }
                map.next_value_seed(Check {
                    depth: self.depth + 1,
                })?;
            }
            Ok(())
        }
    }
    if !serde_accepts(text) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let ok = Check { depth: 0 }.deserialize(&mut de).is_ok() && de.end().is_ok();
    Some(ok)
}

fn random_strict_value(rng: &mut Rng, depth: usize, out: &mut String) {
    let nines = "9".repeat(400);
    match rng.below(if depth > 4 { 3 } else { 5 }) {
        0 => out.push_str(rng.pick(&[
            "1",
            "1e308",
            "1e309",
            "-1e400",
            "2.5E-400",
            "123456789012345678901234567890",
            &nines,
        ])),
        1 => out.push_str(rng.pick(&[
            r#""ok""#,
            r#""\ud800""#,
            r#""\udc00x""#,
            r#""\ud83d\ude00""#,
            r#""\ud83dx\ude00""#,
            r#""\ud800\ud800""#,
            r#""\uDBFF\uDFFF""#,
        ])),
        2 => out.push_str("null"),
        3 => {
            out.push('{');
            for i in 0..rng.below(12) {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(rng.pick(&[
                    r#""k""#,
                    r#""\u006b""#,
                    r#""name""#,
                    r#""n\u0061me""#,
                    r#""\ud800""#,
                    r#""a""#,
                    r#""b""#,
                    r#""c""#,
                    r#""d""#,
                    r#""e""#,
                    r#""f""#,
                    r#""g""#,
                    r#""h""#,
                    r#""i""#,
                ]));
                out.push(':');
                random_strict_value(rng, depth + 1, out);
            }
            out.push('}');
        }
        _ => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                random_strict_value(rng, depth + 1, out);
            }
            out.push(']');
        }
    }
}

#[test]
fn strict_scanning_agrees_with_a_strict_reference() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let mut doc = String::new();
        random_strict_value(&mut rng, 0, &mut doc);
        for text in [doc.clone(), mutate(&mut rng, &doc)] {
            let ours = validate_strict(&text);
            let reference = reference_strict(&text);
            assert_eq!(ours.is_ok(), reference.is_some(), "grammar: {text:?}");
            if let (Ok(violation), Some(strict_ok)) = (ours, reference) {
                assert_eq!(
                    violation.is_none(),
                    strict_ok,
                    "I-JSON: {text:?} {violation:?}"
                );
                if strict_ok {
                    accepted += 1;
                } else {
                    refused += 1;
                }
            }
        }
    }
    assert!(
        accepted > 3_000 && refused > 3_000,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn strict_depth_is_counted_over_the_whole_text() {
    for depth in [HOST_MAX_DEPTH - 1, HOST_MAX_DEPTH] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(validate_strict(&text), Ok(None), "depth {depth}");
    }
    let depth = HOST_MAX_DEPTH + 1;
    let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    let v = validate_strict(&text).unwrap().unwrap();
    assert_eq!(v.at, (depth - 1) * 5, "{v}");
    assert_eq!(reference_strict(&text), Some(false));
}
