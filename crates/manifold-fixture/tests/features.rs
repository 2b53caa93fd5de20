//! The opt-in features for Manifold's own tests, driven through the fixture binary:
//! `--client-tools` (the test answers the fixture's requests as a client would), `--tasks`
//! and `--subscriptions`, over stdio and over HTTP; and the stateless era of 2026-07-28
//! over stdio (`--era`): multi round-trip requests in both eras, listen streams, log levels.
//! Every wait is bounded.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{
    bounded, call, modern, modern_call, modern_meta, reply, reply_error, rpc, text, Events,
    HttpFixture, StdioFixture,
};

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A client's answer to `request` (roots/list) written by hand, so that the keys of
/// `roots` stay in the order given rather than sorted.
fn roots_answer(request: &Value, roots: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"roots":{roots}}}}}"#,
        request["id"]
    )
}

fn is_tool_error(answer: &Value) -> bool {
    answer["result"]["isError"] == true
}

#[test]
fn ask_roots_returns_the_roots_exactly_as_the_client_sent_them() {
    let mut fixture = StdioFixture::start(&["--client-tools"]);
    fixture.initialize();
    let names = fixture.tool_names(1);
    assert_eq!(names.len(), 20, "{names:?}");
    for tool in [
        "ask_roots",
        "ask_sampling",
        "ask_elicitation",
        "complete_elicitation",
    ] {
        assert!(names.iter().any(|n| n == tool), "{tool}");
    }
    fixture.send(&call(2, "ask_roots", json!({})));
    let request = fixture.receive();
    assert_eq!(request["method"], "roots/list");
    // The tool waits on its own thread: other requests are still answered.
    let (_, pong) = fixture.request(&rpc(3, "ping", json!({})));
    assert_eq!(pong["result"], json!({}));
    let roots = r#"[{"uri":"file:///r","name":"r"}]"#;
    fixture.send_line(&roots_answer(&request, roots));
    let (_, answer) = fixture.until_answer(&json!(2));
    assert_eq!(text(&answer), roots);
    assert!(!is_tool_error(&answer));

    fixture.send(&call(4, "ask_roots", json!({})));
    let request = fixture.receive();
    fixture.send(&reply_error(&request, -32601, "no roots"));
    let (_, answer) = fixture.until_answer(&json!(4));
    assert!(is_tool_error(&answer));
    assert_eq!(text(&answer), "roots/list failed: -32601 no roots");
}

#[test]
fn ask_sampling_sends_the_prompt_and_returns_the_sampled_text() {
    let mut fixture = StdioFixture::start(&["--client-tools"]);
    fixture.initialize();
    fixture.send(&call(1, "ask_sampling", json!({ "prompt": "hi" })));
    let request = fixture.receive();
    assert_eq!(request["method"], "sampling/createMessage");
    let expected = json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": "hi" } }],
        "maxTokens": 16,
    });
    assert_eq!(request["params"], expected);
    let sampled = json!({ "role": "assistant", "content": { "type": "text", "text": "hello" },
                          "model": "m" });
    fixture.send(&reply(&request, sampled));
    let (_, answer) = fixture.until_answer(&json!(1));
    assert_eq!(text(&answer), "hello");

    fixture.send(&call(2, "ask_sampling", json!({ "prompt": "again" })));
    let request = fixture.receive();
    fixture.send(&reply_error(&request, -32600, "sampling refused"));
    let (_, answer) = fixture.until_answer(&json!(2));
    assert!(is_tool_error(&answer));
    assert_eq!(
        text(&answer),
        "sampling/createMessage failed: -32600 sampling refused"
    );

    // Without its argument nothing is asked.
    let (before, answer) = fixture.request(&call(3, "ask_sampling", json!({})));
    assert!(before.is_empty(), "{before:?}");
    assert!(is_tool_error(&answer));
}

#[test]
fn ask_elicitation_reports_the_action_and_answer() {
    let mut fixture = StdioFixture::start(&["--client-tools"]);
    fixture.initialize();
    fixture.send(&call(1, "ask_elicitation", json!({ "message": "ok?" })));
    let request = fixture.receive();
    assert_eq!(request["method"], "elicitation/create");
    let schema = json!({ "type": "object", "properties": { "answer": { "type": "string" } },
                         "required": ["answer"] });
    assert_eq!(
        request["params"],
        json!({ "message": "ok?", "requestedSchema": schema })
    );
    let accepted = json!({ "action": "accept", "content": { "answer": "yes" } });
    fixture.send(&reply(&request, accepted));
    assert_eq!(
        text(&fixture.until_answer(&json!(1)).1),
        "action=accept answer=yes"
    );

    fixture.send(&call(2, "ask_elicitation", json!({ "message": "ok?" })));
    let request = fixture.receive();
    fixture.send(&reply(&request, json!({ "action": "decline" })));
    assert_eq!(
        text(&fixture.until_answer(&json!(2)).1),
        "action=decline answer="
    );

    fixture.send(&call(3, "ask_elicitation", json!({ "message": "ok?" })));
    let request = fixture.receive();
    fixture.send(&reply_error(&request, -1, "no elicitation"));
    let (_, answer) = fixture.until_answer(&json!(3));
    assert!(is_tool_error(&answer));
    assert_eq!(
        text(&answer),
        "elicitation/create failed: -1 no elicitation"
    );
}

#[test]
fn complete_elicitation_notifies_before_its_answer() {
    let mut fixture = StdioFixture::start(&["--client-tools"]);
    fixture.initialize();
    let complete = call(1, "complete_elicitation", json!({ "elicitationId": "e-1" }));
    let (before, answer) = fixture.request(&complete);
    assert_eq!(
        before,
        [
            json!({ "jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                 "params": { "elicitationId": "e-1" } })
        ]
    );
    assert_eq!(text(&answer), "sent");
}

/// tools/call of `sleep` for `ms` as a task.
fn sleep_task(id: u64, ms: u64, ttl: Option<u64>) -> Value {
    let mut sleep = call(id, "sleep", json!({ "ms": ms }));
    sleep["params"]["task"] = ttl.map_or_else(|| json!({}), |ttl| json!({ "ttl": ttl }));
    sleep
}

fn task_request(id: u64, method: &str, task: &str) -> Value {
    rpc(id, method, json!({ "taskId": task }))
}

/// Asserts `note` is the status notification of `task` with `status`.
fn assert_status(note: &Value, task: &str, status: &str) {
    assert_eq!(note["method"], "notifications/tasks/status", "{note}");
    assert_eq!(
        (
            note["params"]["taskId"].as_str(),
            note["params"]["status"].as_str()
        ),
        (Some(task), Some(status)),
        "{note}"
    );
}

fn assert_error(answer: &Value, code: i64, message: &str) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert_eq!(answer["error"]["message"], message, "{answer}");
}

#[test]
fn a_task_runs_completes_and_keeps_its_result() {
    let mut fixture = StdioFixture::start(&["--tasks"]);
    let init = fixture.initialize();
    let declared = json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    assert_eq!(init["result"]["capabilities"]["tasks"], declared);

    let (before, created) = fixture.request(&sleep_task(1, 300, Some(60_000)));
    assert!(before.is_empty(), "{before:?}");
    let task = &created["result"]["task"];
    assert_eq!(task["taskId"], "task-1");
    assert_eq!(task["status"], "working");
    assert_eq!(
        (task["ttl"].as_u64(), task["pollInterval"].as_u64()),
        (Some(60_000), Some(50))
    );
    let created_at = task["createdAt"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.contains('T'),
        "{created_at}"
    );
    assert_eq!(task["lastUpdatedAt"], task["createdAt"]);

    let (_, got) = fixture.request(&task_request(2, "tasks/get", "task-1"));
    assert_eq!(got["result"]["status"], "working");
    // tasks/result waits; the status notification comes before its answer.
    let (before, result) = fixture.request(&task_request(3, "tasks/result", "task-1"));
    assert_eq!(before.len(), 1, "{before:?}");
    assert_status(&before[0], "task-1", "completed");
    assert_eq!(text(&result), "slept 300");
    assert_eq!(
        result["result"]["_meta"][RELATED_TASK],
        json!({ "taskId": "task-1" })
    );
    let (_, got) = fixture.request(&task_request(4, "tasks/get", "task-1"));
    assert_eq!(got["result"]["status"], "completed");
    assert_eq!(got["result"]["createdAt"], created_at);

    // A tool error fails the task; its result is still there.
    let mut fail = call(5, "fail", json!({}));
    fail["params"]["task"] = json!({});
    let (_, created) = fixture.request(&fail);
    assert_eq!(created["result"]["task"]["ttl"], Value::Null);
    let (before, result) = fixture.request(&task_request(6, "tasks/result", "task-2"));
    assert_status(&before[0], "task-2", "failed");
    assert!(is_tool_error(&result));
    assert_eq!(result["result"]["_meta"][RELATED_TASK]["taskId"], "task-2");
}

#[test]
fn a_cancelled_task_stops_and_tasks_list_pages() {
    let mut fixture = StdioFixture::start(&["--tasks", "--page-size", "1"]);
    fixture.initialize();
    fixture.request(&sleep_task(1, 0, None));
    let (before, result) = fixture.request(&task_request(2, "tasks/result", "task-1"));
    assert_status(&before[0], "task-1", "completed");
    assert_eq!(text(&result), "slept 0");

    fixture.request(&sleep_task(3, 5_000, None));
    let (before, cancelled) = fixture.request(&task_request(4, "tasks/cancel", "task-2"));
    assert_eq!(before.len(), 1, "{before:?}");
    assert_status(&before[0], "task-2", "cancelled");
    assert_eq!(cancelled["result"]["taskId"], "task-2");
    assert_eq!(cancelled["result"]["status"], "cancelled");
    // The tool stopped at once and says nothing more.
    std::thread::sleep(Duration::from_millis(100));
    let (before, _) = fixture.request(&rpc(5, "ping", json!({})));
    assert!(before.is_empty(), "{before:?}");

    let (_, again) = fixture.request(&task_request(6, "tasks/cancel", "task-2"));
    assert_error(&again, -32602, "task task-2 is already cancelled");
    let (_, done) = fixture.request(&task_request(7, "tasks/cancel", "task-1"));
    assert_error(&done, -32602, "task task-1 is already completed");
    let (_, result) = fixture.request(&task_request(8, "tasks/result", "task-2"));
    assert_error(&result, -32603, "task task-2 was cancelled");
    let (_, unknown) = fixture.request(&task_request(9, "tasks/get", "task-9"));
    assert_error(&unknown, -32602, "unknown task task-9");

    let mut seen = Vec::new();
    let mut params = json!({});
    for id in 10..20 {
        let (_, page) = fixture.request(&rpc(id, "tasks/list", params.clone()));
        for task in page["result"]["tasks"].as_array().unwrap() {
            seen.push(format!(
                "{} {}",
                task["taskId"].as_str().unwrap(),
                task["status"].as_str().unwrap()
            ));
        }
        match page["result"].get("nextCursor") {
            Some(cursor) => params = json!({ "cursor": cursor }),
            None => break,
        }
    }
    assert_eq!(seen, ["task-1 completed", "task-2 cancelled"]);
}

#[test]
fn subscriptions_are_kept_per_client_and_touch_notifies_them() {
    let mut fixture = StdioFixture::start(&["--subscriptions"]);
    let init = fixture.initialize();
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        true
    );
    let names = fixture.tool_names(1);
    assert_eq!(names.len(), 18, "{names:?}");
    assert!(names.iter().any(|n| n == "touch") && names.iter().any(|n| n == "subscriptions"));

    let (readme, data) = ("fixture://fixture/readme", "fixture://fixture/data.json");
    for (id, uri) in [(2, readme), (3, data)] {
        let (_, answer) = fixture.request(&rpc(id, "resources/subscribe", json!({ "uri": uri })));
        assert_eq!(answer["result"], json!({}));
    }
    // No update follows a subscription: the next message is a ping's answer.
    let (before, _) = fixture.request(&rpc(4, "ping", json!({})));
    assert!(before.is_empty(), "{before:?}");
    let (_, listed) = fixture.request(&call(5, "subscriptions", json!({})));
    assert_eq!(text(&listed), format!(r#"["{data}","{readme}"]"#));

    let (before, touched) = fixture.request(&call(6, "touch", json!({ "uri": readme })));
    let updated = json!({ "jsonrpc": "2.0", "method": "notifications/resources/updated",
                          "params": { "uri": readme } });
    assert_eq!(before, [updated]);
    assert_eq!(text(&touched), "touched 1");
    let (before, touched) = fixture.request(&call(7, "touch", json!({ "uri": "fixture://x" })));
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&touched), "touched 0");

    let unsubscribe = rpc(8, "resources/unsubscribe", json!({ "uri": readme }));
    assert_eq!(fixture.request(&unsubscribe).1["result"], json!({}));
    let (_, listed) = fixture.request(&call(9, "subscriptions", json!({})));
    assert_eq!(text(&listed), format!(r#"["{data}"]"#));
    let (before, touched) = fixture.request(&call(10, "touch", json!({ "uri": readme })));
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&touched), "touched 0");
}

#[test]
fn conformance_alone_still_confirms_a_subscription_with_an_update() {
    let mut fixture = StdioFixture::start(&["--conformance"]);
    fixture.initialize();
    let uri = "test://watched-resource";
    let (_, answer) = fixture.request(&rpc(1, "resources/subscribe", json!({ "uri": uri })));
    assert_eq!(answer["result"], json!({}));
    let update = fixture.receive();
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], uri);
}

#[test]
fn without_the_new_flags_none_of_it_exists() {
    let mut fixture = StdioFixture::start(&[]);
    let init = fixture.initialize();
    assert!(init["result"]["capabilities"].get("tasks").is_none());
    let (_, listed) = fixture.request(&rpc(1, "tasks/list", json!({})));
    assert_eq!(listed["error"]["code"], -32601);
    // A task asked of a server without tasks: the call simply runs.
    let mut echo = call(2, "echo", json!({ "text": "plain" }));
    echo["params"]["task"] = json!({ "ttl": 1000 });
    assert_eq!(text(&fixture.request(&echo).1), "plain");
    for (id, tool) in [(3, "ask_roots"), (4, "touch"), (5, "subscriptions")] {
        let (_, unknown) = fixture.request(&call(id, tool, json!({})));
        assert_error(&unknown, -32602, &format!("Unknown tool: {tool}"));
    }
}

#[tokio::test]
async fn client_tools_over_http_ask_on_the_call_stream() {
    let server = HttpFixture::start(&["--client-tools"]);
    let session = server.initialize().await;
    let ask = call(1, "ask_roots", json!({}));
    let mut events = Events::new(server.post(Some(&session), &ask).await);
    let request = events.next_message().await.unwrap();
    assert_eq!(request["method"], "roots/list");
    let roots = r#"[{"uri":"file:///w","name":"w"}]"#;
    let answered = server
        .post_text(Some(&session), roots_answer(&request, roots))
        .await;
    assert_eq!(answered.status(), 202);
    let answer = events.next_message().await.unwrap();
    assert_eq!((answer["id"].as_u64(), text(&answer)), (Some(1), roots));

    let complete = call(2, "complete_elicitation", json!({ "elicitationId": "e-2" }));
    let mut events = Events::new(server.post(Some(&session), &complete).await);
    let note = events.next_message().await.unwrap();
    assert_eq!(note["method"], "notifications/elicitation/complete");
    assert_eq!(note["params"]["elicitationId"], "e-2");
    assert_eq!(text(&events.next_message().await.unwrap()), "sent");
}

#[tokio::test]
async fn http_tasks_notify_the_session_stream_and_belong_to_their_session() {
    let server = HttpFixture::start(&["--tasks"]);
    let (a, b) = (server.initialize().await, server.initialize().await);
    let mut own = server.own_stream(&a).await;
    // The POST ends with the task: its answer is plain JSON.
    let created = server.request(&a, &sleep_task(1, 50, Some(1_000))).await;
    let task = &created["result"]["task"];
    assert_eq!(
        (task["taskId"].as_str(), task["status"].as_str()),
        (Some("task-1"), Some("working"))
    );

    let note = own.next_message().await.unwrap();
    assert_status(&note, "task-1", "completed");
    let result = server
        .request(&a, &task_request(2, "tasks/result", "task-1"))
        .await;
    assert_eq!(text(&result), "slept 50");
    assert_eq!(result["result"]["_meta"][RELATED_TASK]["taskId"], "task-1");
    let listed = server.request(&a, &rpc(3, "tasks/list", json!({}))).await;
    assert_eq!(listed["result"]["tasks"][0]["status"], "completed");

    // Another session knows nothing of it.
    let unknown = server
        .request(&b, &task_request(4, "tasks/get", "task-1"))
        .await;
    assert_error(&unknown, -32602, "unknown task task-1");
    let cancel = server
        .request(&b, &task_request(5, "tasks/cancel", "task-1"))
        .await;
    assert_error(&cancel, -32602, "unknown task task-1");
    let listed = server.request(&b, &rpc(6, "tasks/list", json!({}))).await;
    assert_eq!(listed["result"]["tasks"], json!([]));
}

#[tokio::test]
async fn http_touch_reaches_only_subscribed_sessions_on_their_own_streams() {
    let server = HttpFixture::start(&["--subscriptions"]);
    let (a, b) = (server.initialize().await, server.initialize().await);
    let (mut a_stream, mut b_stream) = (server.own_stream(&a).await, server.own_stream(&b).await);
    let (readme, data) = ("fixture://web/readme", "fixture://web/data.json");
    let subscribe = |id, uri| rpc(id, "resources/subscribe", json!({ "uri": uri }));
    assert_eq!(
        server.request(&a, &subscribe(1, readme)).await["result"],
        json!({})
    );
    assert_eq!(
        server.request(&b, &subscribe(2, data)).await["result"],
        json!({})
    );

    let touched = server
        .request(&b, &call(3, "touch", json!({ "uri": readme })))
        .await;
    assert_eq!(text(&touched), "touched 1");
    let note = a_stream.next_message().await.unwrap();
    assert_eq!(note["method"], "notifications/resources/updated");
    assert_eq!(note["params"]["uri"], readme);
    // b's first update is about its own subscription: it never heard of the readme.
    let touched = server
        .request(&a, &call(4, "touch", json!({ "uri": data })))
        .await;
    assert_eq!(text(&touched), "touched 1");
    assert_eq!(
        b_stream.next_message().await.unwrap()["params"]["uri"],
        data
    );

    let mine = server
        .request(&a, &call(5, "subscriptions", json!({})))
        .await;
    assert_eq!(text(&mine), format!(r#"["{readme}"]"#));
    // A session that ended is no longer reached.
    let delete = server
        .client
        .delete(server.url("/mcp"))
        .header("mcp-session-id", &b);
    assert_eq!(bounded(delete.send()).await.unwrap().status(), 200);
    let touched = server
        .request(&a, &call(6, "touch", json!({ "uri": data })))
        .await;
    assert_eq!(text(&touched), "touched 0");
}

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Answers `request` (one of the fixture's own) over stdio.
fn answer(fixture: &mut StdioFixture, request: &Value, result: Value) {
    fixture.send(&reply(request, result));
}

fn accepted(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

#[test]
fn a_multi_round_tool_asks_in_rounds_statelessly_and_by_request_in_the_session_era() {
    let tool = "test_input_required_result_multi_round";
    // Stateless: input_required twice, each with a new request state, then the result.
    let mut fixture = StdioFixture::start(&["--conformance", "--era", "stateless"]);
    let (_, first) = fixture.request(&modern_call(1, tool, json!({})));
    let round1 = &first["result"];
    assert_eq!(round1["resultType"], "input_required", "{first}");
    assert_eq!(
        round1["inputRequests"]["step1"]["method"],
        "elicitation/create"
    );
    assert!(
        round1.get("ttlMs").is_none(),
        "interim results carry no caching hints"
    );
    let mut retry = modern_call(2, tool, json!({}));
    retry["params"]["inputResponses"] = json!({ "step1": accepted(json!({ "name": "Alice" })) });
    retry["params"]["requestState"] = round1["requestState"].clone();
    let (_, second) = fixture.request(&retry);
    let round2 = &second["result"];
    assert_eq!(
        round2["inputRequests"]["step2"]["params"]["message"],
        "Step 2: What is your favorite color?"
    );
    assert_ne!(round2["requestState"], round1["requestState"]);
    let mut last = modern_call(3, tool, json!({}));
    last["params"]["inputResponses"] = json!({ "step2": accepted(json!({ "color": "blue" })) });
    last["params"]["requestState"] = round2["requestState"].clone();
    let (_, done) = fixture.request(&last);
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(text(&done), "Alice's favourite colour is blue");
    // The state is bound to its request, and sealed.
    let mut elsewhere = modern_call(4, tool, json!({ "other": 1 }));
    elsewhere["params"]["requestState"] = round2["requestState"].clone();
    assert_eq!(fixture.request(&elsewhere).1["error"]["code"], -32602);
    // Session era: the same tool sends elicitation/create twice and answers the same.
    let mut fixture = StdioFixture::start(&["--conformance"]);
    fixture.initialize();
    fixture.send(&call(1, tool, json!({})));
    let step1 = fixture.receive();
    assert_eq!(step1["params"]["message"], "Step 1: What is your name?");
    assert_eq!(step1["id"], "step1", "the key names the request");
    answer(&mut fixture, &step1, accepted(json!({ "name": "Alice" })));
    let step2 = fixture.receive();
    assert_eq!(step2["method"], "elicitation/create");
    answer(&mut fixture, &step2, accepted(json!({ "color": "blue" })));
    let (_, done) = fixture.until_answer(&json!(1));
    assert_eq!(text(&done), "Alice's favourite colour is blue");
    assert!(done["result"].get("resultType").is_none(), "{done}");
}

#[test]
fn a_round_of_needs_is_asked_at_once_in_the_session_era_too() {
    let mut fixture = StdioFixture::start(&["--conformance"]);
    fixture.initialize();
    fixture.send(&call(
        1,
        "test_input_required_result_multiple_inputs",
        json!({}),
    ));
    let asked: Vec<Value> = (0..3).map(|_| fixture.receive()).collect();
    let ids: Vec<&Value> = asked.iter().map(|r| &r["id"]).collect();
    assert_eq!(
        ids,
        [
            &json!("user_name"),
            &json!("greeting"),
            &json!("client_roots")
        ]
    );
    // Answered in any order.
    answer(
        &mut fixture,
        &asked[2],
        json!({ "roots": [{ "uri": "file:///r" }] }),
    );
    let sampled =
        json!({ "role": "assistant", "content": { "type": "text", "text": "Hi!" }, "model": "m" });
    answer(&mut fixture, &asked[1], sampled);
    answer(
        &mut fixture,
        &asked[0],
        accepted(json!({ "name": "Alice" })),
    );
    let (_, done) = fixture.until_answer(&json!(1));
    assert_eq!(
        text(&done),
        "Hello, Alice! The LLM answered: Hi!; Roots: file:///r"
    );
}

#[test]
fn asking_respects_the_capabilities_of_each_era() {
    let tool = "test_input_required_result_capabilities";
    let mut fixture = StdioFixture::start(&["--conformance", "--era", "stateless"]);
    let mut sampling_only = modern_call(1, tool, json!({}));
    sampling_only["params"]["_meta"] = modern_meta(json!({ "sampling": {} }));
    let (_, answer1) = fixture.request(&sampling_only);
    let asked: Vec<&String> = answer1["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(asked, ["suggestion"]);
    let mut none = modern_call(2, "test_missing_capability", json!({}));
    none["params"]["_meta"] = modern_meta(json!({}));
    let (_, refused) = fixture.request(&none);
    assert_eq!(refused["error"]["code"], -32021);
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({ "sampling": {} })
    );
    // Session era: what initialize did not declare is skipped, a refusal too.
    let mut fixture = StdioFixture::start(&["--conformance"]);
    fixture.initialize(); // declares sampling only
    fixture.send(&call(1, tool, json!({})));
    let ask = fixture.receive();
    assert_eq!(ask["method"], "sampling/createMessage");
    fixture.send(&reply_error(&ask, -32603, "no"));
    let (_, done) = fixture.until_answer(&json!(1));
    assert_eq!(
        text(&done),
        "The client can give neither an elicitation nor a sampling: nothing was asked."
    );
}

#[test]
fn a_dual_stdio_connection_speaks_the_era_of_its_first_request() {
    let mut fixture = StdioFixture::start(&["--conformance", "--era", "dual"]);
    let (_, discovered) = fixture.request(&modern(1, "server/discover", json!({})));
    let result = &discovered["result"];
    assert_eq!(result["supportedVersions"].as_array().unwrap().len(), 5);
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "fixture"
    );
    assert_eq!(
        (result["ttlMs"].clone(), result["cacheScope"].clone()),
        (json!(0), json!("private"))
    );
    let (_, init) = fixture.request(&super_initialize(2));
    assert_eq!(init["error"]["code"], -32601, "{init}");
    let mut session = StdioFixture::start(&["--conformance", "--era", "dual"]);
    session.initialize();
    let (_, discover) = session.request(&modern(3, "server/discover", json!({})));
    assert_eq!(
        discover["error"]["code"], -32601,
        "the session era has no server/discover"
    );
}

fn super_initialize(id: u64) -> Value {
    let mut init = support::initialize();
    init["id"] = json!(id);
    init
}

#[test]
fn stateless_logs_follow_the_level_each_request_asks_for() {
    let mut fixture = StdioFixture::start(&["--era", "stateless"]);
    let log = |id, level: Option<&str>| {
        let mut request = modern_call(id, "log", json!({ "level": "warning", "message": "m" }));
        if let Some(level) = level {
            request["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        request
    };
    let (before, _) = fixture.request(&log(1, None));
    assert!(before.is_empty(), "no level, no log: {before:?}");
    let (before, _) = fixture.request(&log(2, Some("error")));
    assert!(before.is_empty(), "warning is below error: {before:?}");
    let (before, _) = fixture.request(&log(3, Some("info")));
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["params"]["level"], "warning");
    let (_, bad) = fixture.request(&log(4, Some("loud")));
    assert_eq!(bad["error"]["code"], -32602);
}

#[test]
fn a_stdio_listen_stream_gets_what_it_asked_for_until_it_ends() {
    let mut fixture =
        StdioFixture::start(&["--conformance", "--subscriptions", "--era", "stateless"]);
    let filter =
        json!({ "toolsListChanged": true, "resourceSubscriptions": ["test://static-text"] });
    fixture.send(&modern(
        1,
        "subscriptions/listen",
        json!({ "notifications": filter }),
    ));
    let ack = fixture.receive();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], filter);
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], 1);
    let (before, _) = fixture.request(&modern_call(2, "test_trigger_prompt_change", json!({})));
    assert!(before.is_empty(), "prompts were not asked for: {before:?}");
    let (before, _) = fixture.request(&modern_call(
        3,
        "touch",
        json!({ "uri": "test://static-text" }),
    ));
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["method"], "notifications/resources/updated");
    assert_eq!(before[0]["params"]["_meta"][SUBSCRIPTION_ID], 1);
    fixture.send(&modern(
        4,
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true } }),
    ));
    assert_eq!(fixture.receive()["params"]["_meta"][SUBSCRIPTION_ID], 4);
    // The client ends the first; the second gets the next change, then the shutdown.
    fixture.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 1 } }));
    let (before, _) = fixture.request(&modern_call(5, "test_trigger_tool_change", json!({})));
    let ids: Vec<&Value> = before
        .iter()
        .map(|n| &n["params"]["_meta"][SUBSCRIPTION_ID])
        .collect();
    assert_eq!(ids, [&json!(4)], "{before:?}");
    assert_eq!(before[0]["method"], "notifications/tools/list_changed");
    let (before, removed) = fixture.request(&modern_call(6, "test_trigger_tool_change", json!({})));
    assert_eq!(text(&removed), "removed test_dynamic_tool");
    assert_eq!(before.len(), 1, "{before:?}");
    fixture.close_input();
    let end = fixture.receive();
    assert_eq!(end["method"], "notifications/cancelled");
    assert_eq!(end["params"]["requestId"], 4);
}
