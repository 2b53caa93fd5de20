//! `Envelope::decode`, the grammar-only decoder of upstream messages: it accepts exactly the
//! JSON objects serde_json reads (bar the numbers and escapes only a decoder refuses), every
//! field it reports is the member serde_json finds, a decoded message written back with the
//! crate's writers decodes to the same fields, and the id read from an oversize message's
//! kept ends is its real id or none.

use manifold_protocol::envelope::{id_of_fragments, Envelope, Kind, MessageError};
use manifold_protocol::write;
use serde_json::Value;

use crate::json;

pub fn check(data: &[u8]) {
    let decoded = Envelope::decode(data);
    agrees_with_serde(data, &decoded, false);
    if let Ok(env) = &decoded {
        // `decode` succeeded, so the bytes are UTF-8.
        let text = String::from_utf8_lossy(data);
        fields_match(&text, env);
        writes_back(env);
        fragments_name_the_id(&text, env);
    }
}

/// Whether the decoder took or refused `data` where serde_json does. `strict`: the host
/// decoder, which reads any nesting to its end instead of refusing it.
pub(crate) fn agrees_with_serde(
    data: &[u8],
    decoded: &Result<Envelope<'_>, MessageError>,
    strict: bool,
) {
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(
            matches!(decoded, Err(MessageError::Parse(_))),
            "not UTF-8, yet {decoded:?}"
        );
        return;
    };
    let first = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .bytes()
        .next();
    match (json::refusal(text), first) {
        // A JSON-RPC member given twice is refused on purpose (which one would count?).
        (None, Some(b'{')) => assert!(
            decoded.is_ok()
                || decoded
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("twice")),
            "serde_json reads it: {decoded:?}"
        ),
        (None, Some(b'[')) => assert!(
            matches!(decoded, Err(MessageError::Batch)),
            "a batch: {decoded:?}"
        ),
        (None, _) => assert!(
            matches!(decoded, Err(MessageError::Invalid(_))),
            "JSON but no object: {decoded:?}"
        ),
        (Some(why), _) => {
            let deep = strict && why.contains("recursion limit");
            assert!(
                decoded.is_err() || json::beyond_grammar(&why) || deep,
                "serde_json refuses it ({why}), the decoder took it"
            );
        }
    }
}

/// Each field is the member serde_json reads (when it reads the text at all).
pub(crate) fn fields_match(text: &str, env: &Envelope<'_>) {
    let Some(Value::Object(obj)) = json::value(text) else {
        return;
    };
    let parse = |raw: &str| json::value(raw).unwrap_or_else(|| panic!("a field {raw:?}"));
    assert_eq!(env.id.map(parse), obj.get("id").cloned(), "id");
    for (field, key) in [
        (env.params, "params"),
        (env.result, "result"),
        (env.error, "error"),
    ] {
        let member = obj.get(key).filter(|v| !v.is_null());
        assert_eq!(field.map(parse).as_ref(), member, "{key}");
    }
    assert_eq!(
        env.method.as_deref(),
        obj.get("method").and_then(Value::as_str),
        "method"
    );
    assert_eq!(
        env.jsonrpc.as_deref(),
        obj.get("jsonrpc").and_then(Value::as_str),
        "jsonrpc"
    );
    if let (Some(params), Ok(routing)) = (obj.get("params"), env.routing_params()) {
        for (got, key) in [
            (routing.name.as_deref(), "name"),
            (routing.uri.as_deref(), "uri"),
            (routing.cursor.as_deref(), "cursor"),
        ] {
            assert_eq!(got, params.get(key).and_then(Value::as_str), "params.{key}");
        }
    }
}

/// A message of a known kind, written back by the crate's writers, decodes to the same
/// kind and fields.
pub(crate) fn writes_back(env: &Envelope<'_>) {
    let Ok(kind) = env.kind() else { return };
    // The writers always write an id; an answer without one (taken, then dropped for want
    // of a request to match) cannot be written back as it came.
    if kind == Kind::Response && env.id.is_none() {
        return;
    }
    let mut out = Vec::new();
    let id = env.id.unwrap_or("null");
    let method = env.method.as_deref().unwrap_or_default();
    match kind {
        Kind::Request => write::request_with_id(&mut out, id, method, env.params),
        Kind::Notification => write::notification(&mut out, method, env.params),
        Kind::Response => match env.error {
            Some(error) => write::raw_error_response(&mut out, id, error),
            None => write::response(&mut out, id, env.result.unwrap_or("null")),
        },
    }
    assert_eq!(out.pop(), Some(b'\n'), "a written message ends its line");
    let again = Envelope::decode(&out).unwrap_or_else(|e| panic!("written back: {e}"));
    assert_eq!(again.kind().ok(), Some(kind), "kind written back");
    assert_eq!(
        again.method,
        env.method.clone().filter(|_| kind != Kind::Response)
    );
    match kind {
        Kind::Notification => assert_eq!(again.id, None),
        _ => assert_eq!(again.id, Some(id), "id written back"),
    }
    if kind == Kind::Response {
        assert_eq!((again.result, again.error), env_answer(env));
    } else {
        assert_eq!(again.params, env.params, "params written back");
    }
}

/// The answer a response carries once written back: its error, else its result.
fn env_answer<'a>(env: &Envelope<'a>) -> (Option<&'a str>, Option<&'a str>) {
    match env.error {
        Some(error) => (None, Some(error)),
        None => (Some(env.result.unwrap_or("null")), None),
    }
}

/// What `id_of_fragments` reads from any first and last bytes of the message is its id.
fn fragments_name_the_id(text: &str, env: &Envelope<'_>) {
    let b = text.as_bytes();
    let n = b.len();
    for head in [n, n / 2, n.saturating_sub(1), n / 3] {
        for tail in [0, n / 2, n.saturating_sub(4), n.saturating_sub(12)] {
            if let Some(id) = id_of_fragments(&b[..head], &b[tail..]) {
                assert_eq!(Some(id.as_str()), env.id, "cut at {head} and {tail}");
            }
        }
    }
}
