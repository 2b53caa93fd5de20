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

/// What a decode produced, comparable across the two paths.
fn summary(r: Result<Envelope<'_>, MessageError>) -> String {
    match r {
        Ok(e) => format!(
            "{:?} {:?} {:?} {:?} {:?} {:?}",
            e.jsonrpc, e.id, e.method, e.params, e.result, e.error
        ),
        Err(MessageError::Parse(_)) => "parse error".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_scanner_and_serde_paths_agree() {
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
        r#"  {"id":"x","jsonrpc":"2.0","result":{"content":[]},"x-extra":[1,{"a":null}]}  "#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":null}"#,
        r#"{"jsonrpc":"2.0","method":"tools\/call","id":1}"#,
        r#"{"jsonrpc":"2.0","me\u0074hod":"ping","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","params":null,"params":null,"method":"x"}"#,
        r#"{"x":1,"x":2,"jsonrpc":"2.0","method":"ping","id":3}"#,
        r#"{"jsonrpc":2,"method":"ping","id":1}"#,
        r#"{"jsonrpc":"2.0","method":null,"id":1}"#,
        r#"{"jsonrpc":"2.0","method":7,"id":1}"#,
        r#"{"jsonrpc":"2.0","method":"ping","id":1"#,
        r#"[{"jsonrpc":"2.0","method":"ping","id":1}]"#,
        r#""just a string""#,
        "",
    ];
    for line in lines {
        assert_eq!(
            summary(Envelope::decode(line.as_bytes())),
            summary(Envelope::decode_with_serde(line.as_bytes())),
            "{line}"
        );
    }
    // Bytes that are not UTF-8 go to serde_json, which reports them.
    assert!(matches!(
        Envelope::decode(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"),
        Err(MessageError::Parse(_))
    ));
}
