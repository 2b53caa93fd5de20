//! Bad input gets a clear error and the session keeps serving.

use serde_json::json;

use manifold_testkit::process::*;

fn one_fixture() -> String {
    format!(
        "[server]\nmax_message_bytes = 4096\n\n{}",
        named_fixture("alpha")
    )
}

#[test]
fn requests_before_initialize_are_refused() {
    let mut m = Manifold::start(&one_fixture());
    let r = m.request("tools/list", json!({}));
    assert_eq!(error_code(&r), -32600, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("initialize"));
    // ping is allowed before initialize.
    assert!(m.request("ping", json!({})).get("result").is_some());
    assert!(m.initialize().get("result").is_some());
    assert_eq!(
        error_code(&m.initialize()),
        -32600,
        "a second initialize must be refused"
    );
}

#[test]
fn malformed_and_invalid_messages_get_errors_and_the_session_survives() {
    let mut m = Manifold::ready(&one_fixture());
    m.send_raw("{this is not json");
    let r = m.recv();
    assert_eq!(error_code(&r), -32700, "{r}");
    assert_eq!(r["id"], json!(null));
    m.send_raw(r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#);
    let r = m.recv();
    assert_eq!((error_code(&r), r["id"].clone()), (-32600, json!(5)), "{r}");
    m.send_raw(r#"[{"jsonrpc":"2.0","id":6,"method":"ping"}]"#);
    assert_eq!(error_code(&m.recv()), -32600);
    m.send_raw(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1,2]}"#);
    assert_eq!(error_code(&m.recv()), -32602);
    let r = m.request("no/such/method", json!({}));
    assert_eq!(error_code(&r), -32601, "{r}");
    assert_eq!(
        text_of(&m.call("alpha__echo", json!({"text": "still here"}))),
        "still here"
    );
}

#[test]
fn unknown_names_get_invalid_params() {
    let mut m = Manifold::ready(&one_fixture());
    let r = m.call("alpha__nope", json!({}));
    assert_eq!(error_code(&r), -32602);
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("alpha__nope"));
    assert_eq!(
        error_code(&m.request("prompts/get", json!({"name": "zz"}))),
        -32602
    );
    assert_eq!(
        error_code(&m.request("tools/call", json!({"arguments": {}}))),
        -32602
    );
    // A tool that ran and failed is a result with isError, not a JSON-RPC error.
    let r = m.call("alpha__fail", json!({}));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
}

#[test]
fn oversize_messages_are_refused_and_the_session_survives() {
    let mut m = Manifold::ready(&one_fixture());
    let big = "x".repeat(10_000);
    m.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "alpha__echo", "arguments": {"text": big}}}));
    let r = m.recv();
    assert_eq!(error_code(&r), -32600, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("4096"),
        "{r}"
    );
    assert_eq!(
        text_of(&m.call("alpha__echo", json!({"text": "after"}))),
        "after"
    );
}

#[test]
fn string_ids_and_large_ids_come_back_unchanged() {
    let mut m = Manifold::ready(&one_fixture());
    for id in [json!("req-1"), json!(9007199254740993u64), json!(-4)] {
        m.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "alpha__echo", "arguments": {"text": "x"}}}));
        let r = m.response(&id);
        assert_eq!(r["id"], id);
        assert_eq!(text_of(&r), "x");
    }
}
