//! A stateless host (protocol revision 2026-07-28) over stdio: the era is the first request's,
//! every request carries its own `_meta`, and `subscriptions/listen` shares stdout with the
//! answers, its notifications tagged, until the host cancels it.

use std::time::Duration;

use serde_json::{json, Value};

use manifold_testkit::http::code;
use manifold_testkit::process::*;

/// `params` with a stateless host's `_meta` (capabilities `caps`).
fn modern(mut params: Value, caps: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    params
}

#[test]
fn the_first_request_picks_the_stateless_era_for_the_process() {
    let mut m = Manifold::start(&two_fixtures());
    // server/discover alone picks no era: a host may probe with it.
    let d = m.request("server/discover", json!({}));
    assert_eq!(d["result"]["resultType"], "complete", "{d}");
    let r = m.request(
        "tools/call",
        modern(
            json!({"name": "alpha__echo", "arguments": {"text": "one"}}),
            json!({}),
        ),
    );
    assert_eq!(text_of(&r), "one");
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "manifold"
    );
    let list = m.request("tools/list", modern(json!({}), json!({})));
    assert_eq!(list["result"]["ttlMs"], 60_000, "{list}");
    // From now on the process speaks the stateless era: no handshake, no bare request.
    let init = m.request(
        "initialize",
        modern(
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
            json!({}),
        ),
    );
    assert_eq!(code(&init), -32601, "{init}");
    let bare = m.request("tools/list", json!({}));
    assert_eq!(code(&bare), -32602, "{bare}");
    // An unsupported revision per request is told which ones are.
    let future = m.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                         "io.modelcontextprotocol/clientCapabilities": {}}}),
    );
    assert_eq!(code(&future), -32022, "{future}");
    assert!(future["error"]["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
}

#[test]
fn a_session_that_began_with_initialize_refuses_stateless_requests() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.request(
        "tools/call",
        modern(
            json!({"name": "alpha__echo", "arguments": {"text": "x"}}),
            json!({}),
        ),
    );
    assert_eq!(code(&r), -32600, "{r}");
    assert_eq!(
        text_of(&m.call("alpha__echo", json!({"text": "still"}))),
        "still"
    );
}

#[test]
fn listen_over_stdio_is_tagged_and_ends_when_the_host_cancels_it() {
    let mut m = Manifold::start(&two_fixtures());
    m.request("tools/list", modern(json!({}), json!({})));
    let listen = m.send_request(
        "subscriptions/listen",
        modern(
            json!({"notifications": {"toolsListChanged": true}}),
            json!({}),
        ),
    );
    let ack = m.wait_for(|v| v["method"] == "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(listen)
    );
    m.request(
        "tools/call",
        modern(
            json!({"name": "alpha__add_tool", "arguments": {"name": "fresh"}}),
            json!({}),
        ),
    );
    let changed = m.wait_for(|v| v["method"] == "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(listen),
        "{changed}"
    );
    let is_changed = |v: &Value| v["method"] == "notifications/tools/list_changed";
    // Whatever else the first change brought is read first.
    while m.sees_within(Duration::from_millis(200), is_changed) {
        m.wait_for(is_changed);
    }
    // Cancelled: no more notifications for it.
    m.notify("notifications/cancelled", json!({"requestId": listen}));
    m.request(
        "tools/call",
        modern(
            json!({"name": "alpha__add_tool", "arguments": {"name": "later"}}),
            json!({}),
        ),
    );
    let after = m.request(
        "tools/call",
        modern(
            json!({"name": "alpha__echo", "arguments": {"text": "end"}}),
            json!({}),
        ),
    );
    assert_eq!(text_of(&after), "end");
    assert!(!m.sees_within(Duration::from_millis(500), is_changed));
}
