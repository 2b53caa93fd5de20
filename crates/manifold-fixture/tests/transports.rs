//! The fixture binary driven over its transports: Streamable HTTP and HTTP+SSE (`--http`),
//! and stdio for the conformance tools that ask the client something; and Streamable HTTP
//! of the stateless era (`--era`). Every wait is bounded.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{
    bounded, call, initialize, modern, modern_call, text, Events, HttpFixture, StdioFixture,
};

#[tokio::test]
async fn streamable_sessions_are_required_and_end_on_delete() {
    let server = HttpFixture::start(&[]);
    let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
    assert_eq!(server.post(None, &ping).await.status(), 400);
    assert_eq!(server.post(Some("nope"), &ping).await.status(), 404);
    let session = server.initialize().await;
    let answer = server
        .post(Some(&session), &ping)
        .await
        .bytes()
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer, json!({ "jsonrpc": "2.0", "id": 1, "result": {} }));
    let delete = server.client.delete(server.url("/mcp"));
    let deleted = bounded(delete.header("mcp-session-id", &session).send()).await;
    assert_eq!(deleted.unwrap().status(), StatusCode::OK);
    assert_eq!(server.post(Some(&session), &ping).await.status(), 404);
}

#[tokio::test]
async fn notifications_before_the_answer_make_a_primed_sse_stream() {
    let server = HttpFixture::start(&[]);
    let session = server.initialize().await;
    let mut progress = call(2, "progress", json!({ "steps": 2 }));
    progress["params"]["_meta"] = json!({ "progressToken": "p" });
    let mut events = Events::new(server.post(Some(&session), &progress).await);
    let priming = events.next().await.unwrap();
    assert_eq!(
        (priming.data.as_str(), priming.id.as_deref()),
        ("", Some("1-0"))
    );
    for step in 1..=2 {
        let note = events.next_message().await.unwrap();
        assert_eq!(note["method"], "notifications/progress");
        assert_eq!(note["params"]["progress"], step);
    }
    let answer = events.next_message().await.unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "progressed 2");
    assert!(
        events.next().await.is_none(),
        "the stream ends with the answer"
    );
}

#[tokio::test]
async fn the_get_stream_carries_list_changed() {
    let server = HttpFixture::start(&[]);
    let session = server.initialize().await;
    let get = server.client.get(server.url("/mcp"));
    let get = get
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session);
    let mut own = Events::new(bounded(get.send()).await.unwrap());
    let added = server
        .post(
            Some(&session),
            &call(3, "add_tool", json!({ "name": "extra" })),
        )
        .await;
    assert_eq!(added.headers()["content-type"], "application/json");
    let note = own.next_message().await.unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn sampling_goes_out_on_the_call_stream_and_the_answer_comes_back() {
    let server = HttpFixture::start(&["--conformance"]);
    let session = server.initialize().await;
    let sampling = call(4, "test_sampling", json!({ "prompt": "hello" }));
    let mut events = Events::new(server.post(Some(&session), &sampling).await);
    let request = events.next_message().await.unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["params"]["messages"][0]["content"]["text"], "hello");
    let reply = json!({ "jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "content": { "type": "text", "text": "hi there" }, "model": "m" } });
    assert_eq!(server.post(Some(&session), &reply).await.status(), 202);
    let answer = events.next_message().await.unwrap();
    assert_eq!(answer["id"], 4);
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "LLM response: hi there"
    );
}

#[tokio::test]
async fn a_closed_stream_resumes_with_last_event_id() {
    let server = HttpFixture::start(&["--conformance"]);
    let session = server.initialize().await;
    let reconnect = call(5, "test_reconnection", json!({}));
    let mut events = Events::new(server.post(Some(&session), &reconnect).await);
    let priming = events.next().await.unwrap();
    assert!(events.next().await.is_none(), "closed before the answer");
    let get = server.client.get(server.url("/mcp"));
    let get = get
        .header("mcp-session-id", &session)
        .header("last-event-id", priming.id.unwrap());
    let mut resumed = Events::new(bounded(get.send()).await.unwrap());
    let answer = resumed.next_message().await.unwrap();
    assert_eq!(answer["id"], 5);
    assert!(answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Reconnection test completed"));
}

#[tokio::test]
async fn the_http_sse_transport_answers_on_its_stream() {
    let server = HttpFixture::start(&[]);
    let open = bounded(server.client.get(server.url("/sse")).send()).await;
    let mut stream = Events::new(open.unwrap());
    let endpoint = stream.next().await.unwrap();
    assert_eq!(endpoint.kind, "endpoint");
    assert!(endpoint.data.starts_with("/messages?sessionId="));
    let post = server
        .client
        .post(server.url(&endpoint.data))
        .body(initialize().to_string());
    assert_eq!(bounded(post.send()).await.unwrap().status(), 202);
    let answer = stream.next_message().await.unwrap();
    assert_eq!(answer["result"]["serverInfo"]["name"], "web");
    let lost = server.client.post(server.url("/messages?sessionId=x"));
    assert_eq!(
        bounded(lost.body(initialize().to_string()).send())
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let server = HttpFixture::start(&[]);
    for (name, value) in [
        ("host", "evil.example.com"),
        ("origin", "http://evil.example.com"),
    ] {
        let post = server.client.post(server.url("/mcp")).header(name, value);
        let refused = bounded(post.body(initialize().to_string()).send())
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{name}");
    }
    let local = server
        .client
        .post(server.url("/mcp"))
        .header("origin", "http://localhost:1");
    let accepted = bounded(local.body(initialize().to_string()).send())
        .await
        .unwrap();
    assert_eq!(accepted.status(), StatusCode::OK);
}

#[test]
fn elicitation_over_stdio_reads_the_answer_from_stdin() {
    let mut fixture = StdioFixture::start(&["--conformance"]);
    fixture.send(&initialize());
    assert_eq!(fixture.receive()["id"], 0);
    fixture.send(&call(1, "test_elicitation", json!({ "message": "who?" })));
    let request = fixture.receive();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "who?");
    // Other requests are still served while the call waits for the answer.
    fixture.send(&json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }));
    assert_eq!(fixture.receive()["id"], 2);
    fixture.send(&json!({ "jsonrpc": "2.0", "id": request["id"],
                          "result": { "action": "accept", "content": { "username": "u" } } }));
    let answer = fixture.receive();
    assert_eq!(answer["id"], 1);
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        text,
        r#"User response: action=accept, content={"username":"u"}"#
    );
}

#[test]
fn without_conformance_the_catalog_and_methods_stay_as_they_were() {
    let mut fixture = StdioFixture::start(&[]);
    fixture.send(&initialize());
    let init = fixture.receive();
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        false
    );
    fixture.send(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }));
    let tools = fixture.receive();
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names.len(), 16);
    assert!(!names.iter().any(|n| n.starts_with("test_")));
    let subscribe = json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                            "params": { "uri": "fixture://fixture/readme" } });
    fixture.send(&subscribe);
    assert_eq!(fixture.receive()["error"]["code"], -32601);
}

#[tokio::test]
async fn trace_context_reports_meta_and_the_traceparent_header() {
    let server = HttpFixture::start(&[]);
    let session = server.initialize().await;
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut traced = call(2, "trace_context", json!({}));
    traced["params"]["_meta"] = json!({ "traceparent": parent, "progressToken": 1 });
    let request = server
        .client
        .post(server.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &session)
        .header("traceparent", parent)
        .body(traced.to_string());
    let response = bounded(request.send()).await.expect("POST");
    let answer: Value = serde_json::from_slice(&bounded(response.bytes()).await.unwrap()).unwrap();
    let seen: Value = serde_json::from_str(text(&answer)).unwrap();
    assert_eq!(
        seen,
        json!({ "meta": { "traceparent": parent, "progressToken": 1 }, "header": parent, "authorization": null })
    );
    // Without either, both are null.
    let plain = server
        .request(&session, &call(3, "trace_context", json!({})))
        .await;
    let seen: Value = serde_json::from_str(text(&plain)).unwrap();
    assert_eq!(
        seen,
        json!({ "meta": null, "header": null, "authorization": null })
    );
    // Over stdio there is no header.
    let mut fixture = StdioFixture::start(&[]);
    fixture.initialize();
    fixture.send(&traced);
    let (_, answer) = fixture.until_answer(&json!(2));
    let seen: Value = serde_json::from_str(text(&answer)).unwrap();
    assert_eq!(seen["header"], Value::Null);
    assert_eq!(seen["meta"]["traceparent"], parent);
}

#[tokio::test]
async fn stateless_http_checks_its_headers_and_has_no_session() {
    let server = HttpFixture::start(&[
        "--era",
        "stateless",
        "--ttl-ms",
        "60000",
        "--cache-scope",
        "public",
    ]);
    for verb in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = bounded(server.client.request(verb, server.url("/mcp")).send()).await;
        assert_eq!(response.unwrap().status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    let (status, listed) = server
        .modern_json(&modern(1, "tools/list", json!({})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let result = &listed["result"];
    assert_eq!(
        (result["ttlMs"].clone(), result["cacheScope"].clone()),
        (json!(60000), json!("public"))
    );
    assert_eq!(result["resultType"], "complete");
    let (status, init) = server
        .modern_json(&modern(2, "initialize", json!({})))
        .await;
    assert_eq!(
        (status, init["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!(-32601))
    );
    assert_eq!(init["id"], 2);
    let echo = modern_call(3, "echo", json!({ "text": "hi" }));
    for headers in [
        &[("mcp-method", "tools/list")][..],
        &[("mcp-name", "other")],
        &[("mcp-protocol-version", "2025-11-25")],
    ] {
        let response = server.post_modern_with(&echo, headers).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(
            (answer["error"]["code"].clone(), answer["id"].clone()),
            (json!(-32020), json!(3))
        );
    }
    let padded = server
        .post_modern_with(&echo, &[("mcp-name", "  echo ")])
        .await;
    assert_eq!(padded.status(), StatusCode::OK);
    let mut old = modern(4, "tools/list", json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let (status, refused) = server.modern_json(&old).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        refused["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })
    );
    let read = modern(
        5,
        "resources/read",
        json!({ "uri": "fixture://web/nothing" }),
    );
    let (_, missing) = server.modern_json(&read).await;
    assert_eq!(missing["error"]["code"], -32602);
}

#[tokio::test]
async fn stateless_http_streams_end_with_their_request_and_closing_one_cancels_it() {
    let server = HttpFixture::start(&["--conformance", "--era", "dual"]);
    let listen = modern(
        1,
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true } }),
    );
    let mut stream = Events::new(server.post_modern(&listen).await);
    let ack = stream.next().await.unwrap();
    assert_eq!(ack.id, None, "stateless streams cannot be resumed");
    let ack: Value = serde_json::from_str(&ack.data).unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let (_, added) = server
        .modern_json(&modern_call(2, "test_trigger_tool_change", json!({})))
        .await;
    assert_eq!(text(&added), "added test_dynamic_tool");
    let changed = stream.next_message().await.unwrap();
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );
    drop(stream);
    // A request whose response is dropped is cancelled.
    let sleep = modern_call(3, "sleep", json!({ "ms": 5000 }));
    let sleep = server.post_modern(&sleep);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), sleep)
            .await
            .is_err()
    );
    let mut cancelled = String::new();
    for _ in 0..50 {
        let (_, count) = server
            .modern_json(&modern_call(4, "cancelled_count", json!({})))
            .await;
        cancelled = text(&count).to_owned();
        if cancelled == "1" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, "1");
    // The session era is served at the same endpoint.
    let session = server.initialize().await;
    let answer = server
        .request(&session, &call(5, "echo", json!({ "text": "old" })))
        .await;
    assert_eq!(text(&answer), "old");
    assert!(answer["result"].get("resultType").is_none());
}
