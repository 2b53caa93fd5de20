//! The protocol across the merge over stdio: cancels that race answers, bursts of
//! `list_changed`, requests from upstreams to the host.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

#[test]
fn a_cancel_that_races_the_answer_is_harmless() {
    let mut m = Manifold::ready(&two_fixtures());
    for i in 0..100 {
        let id = m.send_request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"text": format!("r{i}")}}),
        );
        m.notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "race"}),
        );
    }
    // Whatever was answered was answered whole; the session goes on.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    assert_eq!(
        text_of(&m.call("beta__echo", json!({"text": "after"}))),
        "after"
    );
    // And cancelling `initialize` is never forwarded (there is nothing to cancel).
    m.notify("notifications/cancelled", json!({"requestId": 0}));
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_burst_of_list_changed_reaches_the_host_once() {
    let mut m = Manifold::ready(&two_fixtures());
    let ids: Vec<u64> = (0..10)
        .map(|i| {
            m.send_request(
                "tools/call",
                json!({"name": "alpha__add_tool", "arguments": {"name": format!("burst_{i}")}}),
            )
        })
        .collect();
    for id in ids {
        let r = m.response(&json!(id));
        assert!(r.get("result").is_some(), "{r}");
    }
    // Every new tool shows up...
    eventually("all ten new tools are listed", || {
        let names = m.names("tools/list", "tools", "name");
        (0..10).all(|i| names.contains(&format!("alpha__burst_{i}")))
    });
    std::thread::sleep(Duration::from_millis(300));
    // ...announced once (twice at most, if the burst straddled a refresh), not ten times.
    let mut announced = 0;
    while m.sees_within(Duration::from_millis(50), |v| {
        v["method"] == "notifications/tools/list_changed"
    }) {
        let _ = m.wait_for(|v| v["method"] == "notifications/tools/list_changed");
        announced += 1;
    }
    assert!(
        (1..=2).contains(&announced),
        "{announced} list_changed for one burst"
    );
}

#[test]
fn the_host_answers_the_upstreams_sampling_and_elicitation() {
    let mut m = Manifold::start(&fixture_upstream(
        "alpha",
        &["--name", "alpha", "--conformance"],
    ));
    let init = m.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}, "elicitation": {}},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    m.notify("notifications/initialized", json!({}));
    let id = m.send_request(
        "tools/call",
        json!({"name": "alpha__test_sampling", "arguments": {"prompt": "hello"}}),
    );
    let ask = m.wait_for(|v| v["method"] == "sampling/createMessage");
    // Manifold's own id: the host never sees the upstream's.
    assert!(
        ask["id"].as_str().is_some_and(|s| s.starts_with("mf-")),
        "{ask}"
    );
    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "hello");
    m.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}}));
    assert_eq!(text_of(&m.response(&json!(id))), "LLM response: sampled");
    // An error from the host goes back to the upstream as the error it is.
    let id = m.send_request(
        "tools/call",
        json!({"name": "alpha__test_elicitation", "arguments": {"message": "name?"}}),
    );
    let ask = m.wait_for(|v| v["method"] == "elicitation/create");
    m.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user went away"}}));
    let r = m.response(&json!(id));
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text_of(&r).contains("user went away"), "{r}");
    // An answer to nothing is ignored.
    m.send(&json!({"jsonrpc": "2.0", "id": "mf-999", "result": {}}));
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}
