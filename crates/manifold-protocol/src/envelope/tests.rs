use super::*;

fn kind(line: &str) -> Result<Kind, MessageError> {
    Envelope::decode(line.as_bytes())?.kind()
}

#[test]
fn classifies_requests_notifications_and_responses() {
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        Ok(Kind::Request)
    );
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#),
        Ok(Kind::Request)
    );
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        Ok(Kind::Notification)
    );
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        Ok(Kind::Response)
    );
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#),
        Ok(Kind::Response)
    );
    assert!(matches!(
        kind(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
        Err(MessageError::Invalid(_))
    ));
    assert_eq!(
        kind(r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"}}"#),
        Ok(Kind::Response)
    );
}

#[test]
fn refuses_what_is_not_json_rpc() {
    assert!(matches!(kind("not json"), Err(MessageError::Parse(_))));
    assert!(matches!(
        kind(r#"{"jsonrpc":"2.0","id":1,"method":"#),
        Err(MessageError::Parse(_))
    ));
    assert!(matches!(kind("42"), Err(MessageError::Invalid(_))));
    assert!(matches!(
        kind(r#"{"id":1,"method":"ping"}"#),
        Err(MessageError::Invalid(_))
    ));
    assert!(matches!(
        kind(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
        Err(MessageError::Invalid(_))
    ));
    assert!(matches!(
        kind(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
        Err(MessageError::Invalid(_))
    ));
    assert!(matches!(
        kind(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
        Err(MessageError::Invalid(_))
    ));
    assert!(matches!(
        kind(r#"{"jsonrpc":"2.0","method":5}"#),
        Err(MessageError::Invalid(_))
    ));
    assert_eq!(
        kind(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
        Err(MessageError::Batch)
    );
    assert!(matches!(kind("[1,"), Err(MessageError::Parse(_))));
}

#[test]
fn payloads_stay_raw_and_borrowed() {
    let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__b","arguments":{"x":[1, 2.50]},"extra":true}}"#;
    let env = Envelope::decode(line.as_bytes()).unwrap();
    assert_eq!(env.id.unwrap(), "7");
    let params = env.routing_params().unwrap();
    assert_eq!(params.name.as_deref(), Some("a__b"));
    assert_eq!(
        env.params.unwrap(),
        r#"{"name":"a__b","arguments":{"x":[1, 2.50]},"extra":true}"#
    );
}

#[test]
fn escaped_names_are_decoded() {
    let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\u005fb"}}"#;
    let env = Envelope::decode(line.as_bytes()).unwrap();
    assert_eq!(env.routing_params().unwrap().name.as_deref(), Some("a_b"));
}

#[test]
fn params_that_are_not_an_object_are_invalid() {
    let env = Envelope::decode(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).unwrap();
    assert!(env.routing_params().is_err());
}

#[test]
fn wrong_types_keep_the_id_readable() {
    for line in [
        r#"{"jsonrpc":2.0,"id":"k1","method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":"k1","method":42}"#,
        r#"{"jsonrpc":"1.0","id":"k1","method":"ping"}"#,
    ] {
        let env = Envelope::decode_host(line.as_bytes()).unwrap();
        assert_eq!(env.id, Some("\"k1\""), "{line}");
        assert!(
            matches!(env.kind(), Err(MessageError::Invalid(_))),
            "{line}"
        );
    }
}

#[test]
fn escaped_and_repeated_json_rpc_keys() {
    let env = Envelope::decode(br#"{"jsonrpc":"2.0","me\u0074hod":"ping","id":1}"#).unwrap();
    assert_eq!(env.method.as_deref(), Some("ping"));
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","\u006dethod":"x"}"#,
    ] {
        assert!(
            matches!(
                Envelope::decode(line.as_bytes()),
                Err(MessageError::Invalid(_))
            ),
            "{line}"
        );
    }
}

#[test]
fn not_utf8_anywhere_is_a_parse_error() {
    for line in [
        &b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"[..],
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x-ignored\":\"\xc3\"}"[..],
    ] {
        assert!(matches!(
            Envelope::decode_host(line),
            Err(MessageError::Parse(_))
        ));
    }
}

fn violation(line: &str) -> Option<(String, Place)> {
    let env = Envelope::decode_host(line.as_bytes()).unwrap();
    env.violation().map(|(v, p)| (v.problem.clone(), *p))
}

#[test]
fn host_messages_are_held_to_i_json() {
    let ok = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1e300,"s":"\ud83d\ude00"}}}"#;
    assert_eq!(violation(ok), None);
    for (line, problem, place) in [
        (
            r#"{"jsonrpc":"2.0","id":"k11","method":"tools/call","params":{"name":"calc__sum","name":"whoami","arguments":{}}}"#,
            "appears twice",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","\u006eame":"b"}}"#,
            "appears twice",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"ref":{"name":"a","name":"b"}}}"#,
            "appears twice",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"x":1e400}}"#,
            "range of a double",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"\ud800"}}"#,
            "lone surrogate",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"\udc00":1}}"#,
            "lone surrogate",
            Place::Params,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"\ud800","method":"x"}"#,
            "lone surrogate",
            Place::Id,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"x","x-extra":{"a":1,"a":2}}"#,
            "appears twice",
            Place::Elsewhere,
        ),
    ] {
        let (got, at) = violation(line).unwrap_or_else(|| panic!("accepted: {line}"));
        assert!(got.contains(problem), "{line}: {got}");
        assert_eq!(at, place, "{line}");
        // Upstream traffic is only held to the grammar.
        assert!(Envelope::decode(line.as_bytes()).is_ok(), "{line}");
    }
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a","arguments":{}1{}}}}}"#,
        "[".repeat(125),
        "]".repeat(125)
    );
    let (got, at) = violation(&deep).unwrap();
    assert!(got.contains("64 levels"), "{got}");
    assert_eq!(at, Place::Params);
    // Past the depth the grammar scan itself recurses to, the id is still read and the
    // breach still placed.
    let deeper = format!(
        r#"{{"jsonrpc":"2.0","id":"n3","method":"tools/call","params":{{"name":"a","arguments":{{"deep":{}1{}}},"x":1}},"z":2}}"#,
        "[".repeat(500),
        "]".repeat(500)
    );
    let env = Envelope::decode_host(deeper.as_bytes()).unwrap();
    assert_eq!(env.id, Some("\"n3\""));
    let (got, at) = env.violation().unwrap();
    assert!(got.problem.contains("64 levels"), "{got}");
    assert_eq!(*at, Place::Params);
    // Upstream traffic that deep is refused as before.
    assert!(Envelope::decode(deeper.as_bytes()).is_err());
}

#[test]
fn params_fields_are_checked_for_type() {
    let p =
        Params::read(r#"{"name":"a","protocolVersion":"2025-06-18","_meta":{"progressToken":1}}"#)
            .unwrap();
    assert_eq!(p.name.as_deref(), Some("a"));
    assert_eq!(p.meta, Some(r#"{"progressToken":1}"#));
    assert_eq!(
        Params::read(r#"{"protocolVersion":20250618}"#)
            .unwrap_err()
            .to_string(),
        "\"protocolVersion\" must be a string"
    );
    assert_eq!(
        Params::read(r#"{"name":5}"#).unwrap_err().to_string(),
        "\"name\" must be a string"
    );
    assert_eq!(Params::read("[]").unwrap_err(), ParamsError::NotAnObject);
}

#[test]
fn canonical_ids_compare_by_value() {
    assert_eq!(canonical_id(r#""\u0073\u0032""#), r#""s2""#);
    assert_eq!(canonical_id(r#""s2""#), r#""s2""#);
    assert_eq!(canonical_id("12"), "12");
    assert_eq!(canonical_id(r#""a\"b""#), r#""a\"b""#);
}

#[test]
fn ids_of_oversize_messages_are_found_where_certain() {
    let body = "x".repeat(1000);
    let cases = [
        (
            format!(r#"{{"jsonrpc":"2.0","id":17,"result":{{"t":"{body}"}}}}"#),
            Some("17"),
        ),
        (
            format!(r#"{{"result":{{"t":"{body}"}},"jsonrpc":"2.0","id":"q-9"}}"#),
            Some("\"q-9\""),
        ),
        // The last "id" belongs to a nested object: not the message's.
        (
            format!(r#"{{"jsonrpc":"2.0","result":{{"t":"{body}","id":5}}}}"#),
            None,
        ),
        // An id inside a string is no id.
        (
            format!(r#"{{"jsonrpc":"2.0","result":{{"t":"{body},\"id\":5"}}}}"#),
            None,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","method":"x","params":{{"t":"{body}"}}}}"#),
            None,
        ),
    ];
    for (line, want) in cases {
        let b = line.as_bytes();
        let (head, tail) = (&b[..200], &b[b.len() - 200..]);
        assert_eq!(id_of_fragments(head, tail).as_deref(), want, "{line}");
    }
    // An id cut by the end of the head is not trusted.
    assert_eq!(id_of_fragments(br#"{"jsonrpc":"2.0","id":12"#, b"}"), None);
}
