//! The protocol across the merge over stdio: cancels that race answers, bursts of
//! `list_changed`, requests from upstreams to the host.

use std::time::Duration;

use serde_json::json;

use manifold_testkit::process::*;

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
        let names = m.all_tool_names();
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

/// A host that can serve roots and elicitation, in front of `alpha` with `flags`.
fn capable(flags: &[&str], server: &str) -> Manifold {
    let mut args = vec!["--name", "alpha"];
    args.extend_from_slice(flags);
    let mut m = Manifold::start(&format!("{server}\n{}", fixture_upstream("alpha", &args)));
    let init = m.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}, "elicitation": {}, "sampling": {}},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    m.notify("notifications/initialized", json!({}));
    m
}

#[test]
fn roots_and_elicitation_notices_reach_the_host() {
    let mut m = capable(&["--client-tools"], "");
    let id = m.send_request(
        "tools/call",
        json!({"name": "alpha__ask_roots", "arguments": {}}),
    );
    let ask = m.wait_for(|v| v["method"] == "roots/list");
    // The host's answer reaches the upstream byte for byte (member order included).
    m.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"roots":[{{"uri":"file:///work","name":"work"}}]}}}}"#,
        ask["id"]
    ));
    assert_eq!(
        text_of(&m.response(&json!(id))),
        r#"[{"uri":"file:///work","name":"work"}]"#
    );
    let id = m.send_request(
        "tools/call",
        json!({"name": "alpha__complete_elicitation", "arguments": {"elicitationId": "e-7"}}),
    );
    let done = m.wait_for(|v| v["method"] == "notifications/elicitation/complete");
    assert_eq!(done["params"]["elicitationId"], "e-7");
    assert_eq!(text_of(&m.response(&json!(id))), "sent");
    // The host's roots changed: the upstream hears of it (and would ask again).
    m.notify("notifications/roots/list_changed", json!({}));
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_task_lives_under_an_id_the_host_can_route() {
    let mut m = capable(&["--tasks"], "");
    let created = m.request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 200}, "task": {"ttl": 60000}}),
    );
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(task_id, "alpha+task-1", "{created}");
    let status = m.wait_for(|v| {
        v["method"] == "notifications/tasks/status" && v["params"]["status"] == "completed"
    });
    assert_eq!(status["params"]["taskId"], task_id.as_str());
    let got = m.request("tasks/get", json!({"taskId": task_id}));
    assert_eq!(
        (
            got["result"]["taskId"].as_str(),
            got["result"]["status"].as_str()
        ),
        (Some(task_id.as_str()), Some("completed")),
        "{got}"
    );
    let result = m.request("tasks/result", json!({"taskId": task_id}));
    assert_eq!(text_of(&result), "slept 200", "{result}");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    let listed = m.request("tasks/list", json!({}));
    assert_eq!(
        listed["result"]["tasks"][0]["taskId"],
        task_id.as_str(),
        "{listed}"
    );
    // Cancelling a running task.
    let second = m.request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 20000}, "task": {}}),
    );
    let second_id = second["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = m.request("tasks/cancel", json!({"taskId": second_id}));
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // Ids Manifold did not give out are unknown.
    for bad in ["task-1", "beta+task-1", "alpha+task-99"] {
        let r = m.request("tasks/get", json!({"taskId": bad}));
        assert_eq!(error_code(&r), -32602, "{bad}: {r}");
    }
}

#[test]
fn a_subscription_reaches_the_upstream_and_its_updates_come_back() {
    let mut m = capable(&["--subscriptions"], "");
    let uri = "alpha+fixture://alpha/readme";
    let init = m.request("resources/subscribe", json!({"uri": uri}));
    assert_eq!(init["result"], json!({}), "{init}");
    let subs = text_of(&m.call("alpha__subscriptions", json!({})));
    assert_eq!(subs, r#"["fixture://alpha/readme"]"#);
    assert_eq!(
        text_of(&m.call("alpha__touch", json!({"uri": "fixture://alpha/readme"}))),
        "touched 1"
    );
    let updated = m.wait_for(|v| v["method"] == "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], uri);
    assert_eq!(
        m.request("resources/unsubscribe", json!({"uri": uri}))["result"],
        json!({})
    );
    assert_eq!(text_of(&m.call("alpha__subscriptions", json!({}))), "[]");
}

#[test]
fn timeouts_per_tool_and_progress_that_extends_them() {
    let server = "[server]\nrequest_timeout_ms = 400\nmax_request_timeout_ms = 1500\n";
    let config = format!(
        "{server}\n{}tool_timeouts = {{ sleep = 200 }}\n",
        named_fixture("alpha")
    );
    let mut m = Manifold::ready(&config);
    // `sleep` has 200 ms of its own.
    let r = m.call("alpha__sleep", json!({"ms": 3000}));
    assert_eq!(error_code(&r), -32011, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("alpha")
            && r["error"]["message"].as_str().unwrap().contains("200ms"),
        "{r}"
    );
    eventually("the upstream was told to stop", || {
        text_of(&m.call("alpha__cancelled_count", json!({}))) == "1"
    });
    // Progress every 200 ms keeps a 400 ms request alive for 1 s...
    let r = m.request(
        "tools/call",
        json!({"name": "alpha__progress", "arguments": {"steps": 5, "interval_ms": 200}, "_meta": {"progressToken": "p"}}),
    );
    assert_eq!(text_of(&r), "progressed 5", "{r}");
    // ...but not past the maximum.
    let r = m.request(
        "tools/call",
        json!({"name": "alpha__progress", "arguments": {"steps": 15, "interval_ms": 200}, "_meta": {"progressToken": "q"}}),
    );
    assert_eq!(error_code(&r), -32011, "{r}");
}
