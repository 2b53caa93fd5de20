//! Property tests: the one-pass edit against the chain of passes the forwarding path made
//! before it, and the copying rules on generated objects.
//!
//! The chain lives in other crates (the router, the stateless era's host side, the upstream
//! connection), which this crate cannot depend on; its minimal logic is re-implemented here,
//! built on this crate's own `RawObject`, `with_meta` and `json_string` as the originals are.

use proptest::prelude::*;

use super::*;
use crate::object::{json_string, with_meta, RawObject};
use crate::version::meta;
use crate::write;

/// The `_meta` keys a stateless host declares itself with.
const HOST_KEYS: [&str; 4] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_CAPABILITIES,
    meta::CLIENT_INFO,
    meta::LOG_LEVEL,
];

/// What the forwarding path does to one request.
#[derive(Debug, Clone)]
struct Scenario {
    original_name: String,
    upstream_id: u64,
    /// The host speaks the stateless era: its own keys leave `_meta`.
    stateless_host: bool,
    /// The trace context members to set, in the carrier's order.
    trace: Vec<(&'static str, String)>,
    /// A stateless upstream: its request metadata (capabilities, and a log level).
    upstream: Option<(String, Option<&'static str>)>,
    /// The host's client capabilities, for a stateless upstream.
    client_capabilities: Option<String>,
}

// ---- The chain of passes, one function per step (test-only re-implementation). ----

fn old_map_progress_token(params: &str, upstream_id: u64) -> Option<(String, Box<str>)> {
    let mut obj = RawObject::parse(params).ok()?;
    let mut meta = RawObject::parse(obj.get("_meta")?).ok()?;
    let token = Box::from(meta.get("progressToken")?);
    meta.set_raw("progressToken", upstream_id.to_string());
    let meta = meta.to_text();
    obj.set_raw("_meta", meta);
    Some((obj.to_text(), token))
}

fn old_without_host_meta(params: &str) -> Option<String> {
    let mut obj = RawObject::parse(params).ok()?;
    let mut m = RawObject::parse(obj.get("_meta")?).ok()?;
    let mut removed = false;
    for key in HOST_KEYS {
        removed |= m.remove(key);
    }
    if !removed {
        return None;
    }
    let m = m.to_text();
    if m.trim() == "{}" {
        obj.remove("_meta");
    } else {
        obj.set_raw("_meta", m);
    }
    Some(obj.to_text())
}

fn old_with_trace_context(params: &str, carrier: &[(&'static str, String)]) -> Option<String> {
    if !params.contains("\"_meta\"") {
        let rest = params.trim_start().strip_prefix('{')?;
        let members: Vec<String> = carrier
            .iter()
            .map(|(k, v)| format!("{}:{}", json_string(k), json_string(v)))
            .collect();
        let comma = if rest.trim_start().starts_with('}') {
            ""
        } else {
            ","
        };
        return Some(format!(
            "{{\"_meta\":{{{}}}{comma}{rest}",
            members.join(",")
        ));
    }
    let mut obj = RawObject::parse(params).ok()?;
    let mut meta = match obj.get("_meta") {
        Some(m) => RawObject::parse(m).ok()?,
        None => RawObject::default(),
    };
    for (key, value) in carrier {
        meta.set_str(key, value);
    }
    let meta = meta.to_text();
    obj.set_raw("_meta", meta);
    Some(obj.to_text())
}

fn upstream_members(capabilities: &str, level: Option<&str>) -> String {
    let mut members = format!(
        "{}:{},{}:{},{}:{{\"name\":\"manifold\",\"version\":\"1.0.0\"}}",
        json_string(meta::PROTOCOL_VERSION),
        json_string("2026-07-28"),
        json_string(meta::CLIENT_CAPABILITIES),
        capabilities,
        json_string(meta::CLIENT_INFO),
    );
    if let Some(level) = level {
        members.push_str(&format!(
            ",{}:{}",
            json_string(meta::LOG_LEVEL),
            json_string(level)
        ));
    }
    members
}

/// The line and captured token the chain of seven passes produced.
fn old_chain(params: &str, s: &Scenario) -> Option<(String, Option<Box<str>>)> {
    let mut obj = RawObject::parse(params).ok()?;
    obj.set_str("name", &s.original_name);
    let params = obj.to_text();
    let (params, token) = match old_map_progress_token(&params, s.upstream_id) {
        Some((p, token)) => (p, Some(token)),
        None => (params, None),
    };
    let params = match s.stateless_host {
        true => old_without_host_meta(&params).unwrap_or(params),
        false => params,
    };
    let params = match s.trace.is_empty() {
        false => old_with_trace_context(&params, &s.trace).unwrap_or(params),
        true => params,
    };
    let params = match &s.upstream {
        Some((caps, level)) => {
            let params = with_meta(Some(&params), &upstream_members(caps, *level));
            match &s.client_capabilities {
                Some(host) => with_meta(
                    Some(&params),
                    &format!("{}:{host}", json_string(meta::CLIENT_CAPABILITIES)),
                ),
                None => params,
            }
        }
        None => params,
    };
    let mut line = Vec::new();
    write::request(&mut line, s.upstream_id, "tools/call", Some(&params));
    Some((String::from_utf8(line).ok()?, token))
}

/// The same request through one `Edits`.
fn one_pass<'p>(params: &'p str, s: &Scenario) -> Result<(String, Option<&'p str>), EditError> {
    let info = "{\"name\":\"manifold\",\"version\":\"1.0.0\"}";
    let mut edits = Edits::default();
    edits.set_str("name", &s.original_name);
    edits.meta_replace_capture_id("progressToken", s.upstream_id);
    if s.stateless_host {
        edits.meta_remove(&HOST_KEYS);
    }
    for (key, value) in &s.trace {
        edits.meta_set_str(key, value);
    }
    if let Some((caps, level)) = &s.upstream {
        edits.meta_set_raw(meta::PROTOCOL_VERSION, "\"2026-07-28\"");
        edits.meta_set_raw(meta::CLIENT_CAPABILITIES, caps);
        edits.meta_set_raw(meta::CLIENT_INFO, info);
        if let Some(level) = level {
            edits.meta_set_str(meta::LOG_LEVEL, level);
        }
        if let Some(host) = &s.client_capabilities {
            edits.meta_set_raw(meta::CLIENT_CAPABILITIES, host);
        }
    }
    let mut line = Vec::new();
    let built =
        write::request_edited(&mut line, s.upstream_id, "tools/call", Some(params), &edits)?;
    Ok((String::from_utf8(line).unwrap_or_default(), built.captured))
}

// ---- Generators. ----

fn string_text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\é\n/_]{0,10}".prop_map(|s| json_string(&s))
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        Just("_meta".to_owned()),
        Just("name".to_owned()),
        Just("k\\\"ey".to_owned()),
        Just("x\\u0041".to_owned()),
    ]
}

/// Whitespace as hosts write it between tokens.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", " ", "\n  "])
}

/// An object's text from members (raw keys, value texts); a key's later repeats are left
/// out, as I-JSON requires of host input.
fn object_text(members: &[(String, String)], ws: &str) -> String {
    let mut seen = Vec::new();
    let mut parts = Vec::new();
    for (k, v) in members {
        if !seen.contains(k) {
            seen.push(k.clone());
            parts.push(format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}"));
        }
    }
    format!("{{{}}}", parts.join(","))
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        any::<i32>().prop_map(|n| n.to_string()),
        Just("2.50e3".to_owned()),
        string_text(),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), ws())
                .prop_map(|(v, ws)| format!("[{}]", v.join(&format!(",{ws}")))),
            (prop::collection::vec((key(), inner), 0..4), ws())
                .prop_map(|(m, ws)| object_text(&m, ws)),
        ]
    })
}

/// A host's `_meta`: maybe a progress token, some of its own stateless-era keys, its own
/// trace context, and other members.
fn host_meta() -> impl Strategy<Value = Option<String>> {
    let token = prop_oneof![any::<u32>().prop_map(|n| n.to_string()), string_text()];
    let own = prop::sample::subsequence(HOST_KEYS.to_vec(), 0..=4);
    (
        prop::option::of(token),
        own,
        prop::option::of(string_text()),
        prop::collection::vec(("[a-z]{1,6}", json_value()), 0..3),
        ws(),
    )
        .prop_map(|(token, own, trace, others, ws)| {
            let mut members: Vec<(String, String)> = Vec::new();
            members.extend(token.map(|t| ("progressToken".to_owned(), t)));
            members.extend(
                own.into_iter()
                    .map(|k| (k.to_owned(), "{\"x\":1}".to_owned())),
            );
            members.extend(trace.map(|t| ("traceparent".to_owned(), t)));
            members.extend(others);
            object_text(&members, ws)
        })
        .prop_map(Some)
        .boxed()
        .prop_union(Just(None).boxed())
}

/// A `tools/call`'s params: a name, arguments, maybe a `_meta`, other members, in any order.
fn params() -> impl Strategy<Value = String> {
    (
        string_text(),
        json_value(),
        host_meta(),
        prop::collection::vec(("[a-z]{1,6}", json_value()), 0..3),
        any::<prop::sample::Index>(),
        ws(),
    )
        .prop_map(|(name, args, meta, others, at, ws)| {
            let mut members = vec![("name".to_owned(), name), ("arguments".to_owned(), args)];
            members.extend(others);
            if let Some(meta) = meta {
                members.insert(at.index(members.len() + 1), ("_meta".to_owned(), meta));
            }
            object_text(&members, ws)
        })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let trace = prop::sample::subsequence(vec!["traceparent", "tracestate", "baggage"], 0..=3)
        .prop_map(|keys| keys.into_iter().map(|k| (k, format!("v-{k}"))).collect());
    let level = prop::option::of(prop::sample::select(vec!["debug", "error"]));
    (
        "[a-z_é\"]{1,8}",
        any::<u64>(),
        any::<bool>(),
        trace,
        prop::option::of(("\\{(\"[a-z]{1,4}\":\\{\\})?\\}", level)),
        prop::option::of("\\{(\"[a-z]{1,4}\":\\{\\})?\\}"),
    )
        .prop_map(
            |(name, id, stateless_host, trace, upstream, client)| Scenario {
                original_name: name,
                upstream_id: id,
                stateless_host,
                trace,
                upstream,
                client_capabilities: client,
            },
        )
}

/// JSON values of every kind but objects and `null`.
fn not_an_object() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(json_value(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
        string_text(),
        any::<i32>().prop_map(|n| n.to_string()),
        Just("false".to_owned()),
    ]
}

fn parsed(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// One pass writes, as parsed JSON, what the chain of seven passes wrote, and captures the
    /// same progress token.
    #[test]
    fn one_pass_equals_the_chain_of_passes(params in params(), s in scenario()) {
        let (old_line, old_token) = old_chain(&params, &s).unwrap();
        let (line, token) = one_pass(&params, &s).unwrap();
        prop_assert_eq!(parsed(&line), parsed(&old_line), "params: {}", params);
        prop_assert_eq!(token, old_token.as_deref());
    }

    /// Members no edit names keep their bytes and their order; a set member keeps its place;
    /// a new one comes last.
    #[test]
    fn members_not_edited_are_copied_byte_for_byte(
        members in prop::collection::vec((key(), json_value()), 0..6),
        ws in ws(),
        edit in prop::sample::select(vec!["name", "k\"ey", "new"]),
    ) {
        let members: Vec<_> = members.into_iter().filter(|(k, _)| k != "_meta").collect();
        let params = object_text(&members, ws);
        let mut edits = Edits::default();
        edits.set_raw(edit, "[\"edited\"]");
        let mut out = Vec::new();
        write_params(&mut out, Some(&params), &edits).unwrap();
        let out = String::from_utf8(out).unwrap();
        let written = RawObject::parse(out.strip_prefix(",\"params\":").unwrap()).unwrap();
        let given = RawObject::parse(&params).unwrap();
        let keys = |o: &RawObject<'_>| o.entries.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>();
        let mut want_keys = keys(&given);
        if !want_keys.iter().any(|k| k == edit) {
            want_keys.push(edit.to_owned());
        }
        prop_assert_eq!(keys(&written), want_keys);
        for (key, value) in &given.entries {
            let want = if key == edit { "[\"edited\"]" } else { value.as_ref() };
            prop_assert_eq!(written.get(key), Some(want));
        }
    }

    /// Without edits, the params are copied as they are.
    #[test]
    fn without_edits_params_are_one_copy(params in params()) {
        let mut out = Vec::new();
        write_params(&mut out, Some(&params), &Edits::default()).unwrap();
        prop_assert_eq!(out, format!(",\"params\":{params}").into_bytes());
    }

    /// Params that are not an object are refused, whatever the edits.
    #[test]
    fn params_not_an_object_are_refused(value in not_an_object(), s in scenario()) {
        prop_assert_eq!(one_pass(&value, &s).err(), Some(EditError::NotAnObject));
    }
}
