//! Requests that Manifold routes, fans out or answers itself, and notifications both ways.

use std::time::Duration;

use serde_json::json;

use manifold_testkit::process::*;

#[test]
fn initialize_negotiates_and_describes_the_merged_server() {
    let mut m = Manifold::start(&two_fixtures());
    let r = m.request("initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    let result = &r["result"];
    assert_eq!(result["protocolVersion"], "2025-03-26");
    assert_eq!(result["serverInfo"]["name"], "manifold");
    assert!(result["serverInfo"]["title"]
        .as_str()
        .unwrap()
        .contains("alpha"));
    for cap in ["tools", "prompts", "resources", "completions", "logging"] {
        assert!(
            result["capabilities"].get(cap).is_some(),
            "{cap} missing: {r}"
        );
    }
    let mut m = Manifold::start(&fixture_upstream(
        "alpha",
        &["--name", "alpha", "--no-prompts", "--no-resources"],
    ));
    let r = m.request("initialize", json!({"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert_eq!(
        r["result"]["protocolVersion"], "2025-11-25",
        "unknown versions get our latest"
    );
    assert!(
        r["result"]["capabilities"].get("prompts").is_none(),
        "no upstream offers prompts: {r}"
    );
    assert!(r["result"]["capabilities"].get("resources").is_none());
}

#[test]
fn prompts_and_completions_route_to_the_owner() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.request(
        "prompts/get",
        json!({"name": "beta__greet", "arguments": {"name": "Ada"}}),
    );
    let text = r["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("Ada") && text.contains("beta"), "{r}");
    let r = m.request("completion/complete", json!({"ref": {"type": "ref/prompt", "name": "alpha__greet"}, "argument": {"name": "name", "value": "b"}}));
    assert_eq!(r["result"]["completion"]["values"], json!(["bob"]), "{r}");
    let r = m.request("completion/complete", json!({"ref": {"type": "ref/resource", "uri": "beta+fixture://beta/items/{id}"}, "argument": {"name": "id", "value": "2"}}));
    assert_eq!(r["result"]["completion"]["values"], json!(["2"]), "{r}");
    let r = m.request("completion/complete", json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "x", "value": ""}}));
    assert_eq!(error_code(&r), -32602);
}

#[test]
fn set_level_fans_out_to_every_upstream() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.request("logging/setLevel", json!({"level": "debug"}));
    assert_eq!(r["result"], json!({}), "{r}");
    for who in ["alpha", "beta"] {
        // The logger names the upstream, then the upstream's own logger.
        let logger = format!("{who}/{who}");
        let n = m.wait_for(|msg| {
            msg["method"] == "notifications/message" && msg["params"]["logger"] == logger
        });
        assert!(
            n["params"]["data"].as_str().unwrap().contains("debug"),
            "{n}"
        );
    }
}

#[test]
fn a_slow_upstream_does_not_block_another() {
    let mut m = Manifold::ready(&two_fixtures());
    let slow = m.send_request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 3000}}),
    );
    let fast = m.send_request(
        "tools/call",
        json!({"name": "beta__echo", "arguments": {"text": "quick"}}),
    );
    let same_upstream = m.send_request(
        "tools/call",
        json!({"name": "alpha__echo", "arguments": {"text": "also quick"}}),
    );
    let first = m.wait_for(|msg| msg.get("id").is_some());
    assert_ne!(
        first["id"],
        json!(slow),
        "the slow call answered first: {first}"
    );
    let mut ids = vec![first["id"].clone()];
    ids.push(m.wait_for(|msg| msg.get("id").is_some())["id"].clone());
    assert!(
        ids.contains(&json!(fast)) && ids.contains(&json!(same_upstream)),
        "{ids:?}"
    );
    assert_eq!(text_of(&m.response(&json!(slow))), "slept 3000");
}

#[test]
fn requests_time_out_with_a_clear_error() {
    let config = format!(
        "[server]\nrequest_timeout_ms = 300\n\n{}",
        named_fixture("alpha")
    );
    let mut m = Manifold::ready(&config);
    let r = m.call("alpha__sleep", json!({"ms": 5000}));
    assert_eq!(error_code(&r), -32011, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("alpha"),
        "{r}"
    );
    // The upstream was told to stop working on it.
    eventually("the upstream sees the cancellation", || {
        text_of(&m.call("alpha__cancelled_count", json!({}))) == "1"
    });
}

#[test]
fn cancellation_reaches_the_owning_upstream_with_its_id() {
    let mut m = Manifold::ready(&two_fixtures());
    let id = m.send_request(
        "tools/call",
        json!({"name": "beta__sleep", "arguments": {"ms": 10000}}),
    );
    // Make sure the call reached beta before cancelling it.
    assert_eq!(text_of(&m.call("beta__echo", json!({"text": "x"}))), "x");
    m.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "user"}),
    );
    eventually("beta counts one cancellation", || {
        text_of(&m.call("beta__cancelled_count", json!({}))) == "1"
    });
    assert_eq!(
        text_of(&m.call("alpha__cancelled_count", json!({}))),
        "0",
        "only the owner is told"
    );
    assert!(
        !m.sees_within(Duration::from_millis(300), |msg| msg["id"] == json!(id)),
        "a cancelled request must not be answered"
    );
}

#[test]
fn progress_comes_back_with_the_hosts_token() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.request("tools/call", json!({"name": "alpha__progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-1"}}));
    assert!(r.get("result").is_some(), "{r}");
    for step in 1..=3 {
        let p = m.wait_for(|msg| {
            msg["method"] == "notifications/progress" && msg["params"]["progress"] == json!(step)
        });
        assert_eq!(p["params"]["progressToken"], "tok-1", "{p}");
    }
}

#[test]
fn list_changes_reach_the_host_and_the_catalog() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.call("alpha__add_tool", json!({"name": "fresh"}));
    assert!(r.get("result").is_some(), "{r}");
    m.wait_for(|msg| msg["method"] == "notifications/tools/list_changed");
    let tools = m.all_tool_names();
    assert!(tools.contains(&"alpha__fresh".into()), "{tools:?}");
    assert_eq!(
        text_of(&m.call("alpha__fresh", json!({"text": "new"}))),
        "new"
    );
}

#[test]
fn upstream_log_messages_and_stderr_are_relayed() {
    let mut m = Manifold::ready(&two_fixtures());
    m.call(
        "beta__log",
        json!({"level": "warning", "message": "disk nearly full"}),
    );
    let n = m.wait_for(|msg| msg["method"] == "notifications/message");
    assert_eq!(n["params"]["data"], "disk nearly full");
    eventually("stderr relayed with the upstream's name", || {
        let err = m.stderr();
        err.lines()
            .any(|l| l.contains("manifold-fixture beta started") && l.contains("upstream=beta"))
    });
}

#[test]
fn large_results_arrive_whole_and_in_order_among_small_ones() {
    // Results larger than a pipe-full cross in parts (and grow the pipes); every answer must
    // still be one whole line, in the order the upstream answered.
    let mut m = Manifold::ready(&named_fixture("alpha"));
    let mut expected = Vec::new();
    for (i, bytes) in [70_000u64, 3 << 20, 10, 1 << 20, 200_000]
        .into_iter()
        .enumerate()
    {
        let big = m.send_request(
            "tools/call",
            json!({"name": "alpha__big", "arguments": {"bytes": bytes}}),
        );
        let small = m.send_request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"text": format!("after {i}")}}),
        );
        expected.push((big, bytes, small, format!("after {i}")));
    }
    for (big, bytes, small, text) in expected {
        let r = m.recv();
        assert_eq!(r["id"], json!(big));
        let got = text_of(&r);
        assert_eq!(got.len() as u64, bytes);
        assert!(
            got.bytes().all(|b| b == got.as_bytes()[0]),
            "one repeated character"
        );
        let r = m.recv();
        assert_eq!(r["id"], json!(small));
        assert_eq!(text_of(&r), text);
    }
}
