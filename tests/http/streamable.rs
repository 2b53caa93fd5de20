//! Streamable HTTP at `/mcp`: what each request gets, status code by status code.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

fn config() -> String {
    two_fixtures()
}

#[test]
fn a_session_starts_with_initialize_and_is_named_by_its_token() {
    let server = Server::start(&config());
    let mut host = server.host();
    let r = host.initialize("2025-06-18");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(content_type(&r), "application/json");
    let token = host
        .session
        .clone()
        .expect("Mcp-Session-Id on the initialize answer");
    assert_eq!(token.len(), 32, "128 random bits as hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let init: Value = r.json().unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    // Another session gets another token.
    let mut other = server.host();
    other.initialize("2025-06-18");
    assert_ne!(other.session, host.session);
    let r = host.call("alpha__echo", json!({"text": "over http"}));
    assert_eq!(text_of(&r), "over http");
    let r = host.request("tools/list", json!({}));
    assert!(r["result"]["tools"].as_array().unwrap().len() > 20, "{r}");
    assert_eq!(host.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn notifications_and_responses_get_202() {
    let server = Server::start(&config());
    let host = server.ready_host();
    let n = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
    let r = host.post_raw(n.to_string()).send().unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert!(r.text().unwrap().is_empty());
    let answer = json!({"jsonrpc": "2.0", "id": 99, "result": {}});
    let r = host.post_raw(answer.to_string()).send().unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
}

#[test]
fn a_request_with_progress_is_answered_with_an_event_stream() {
    let server = Server::start(&config());
    let mut host = server.ready_host();
    let (id, r) = host.send(
        "tools/call",
        json!({"name": "alpha__progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "p-1"}}),
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(content_type(&r), "text/event-stream");
    assert_eq!(r.headers()["x-accel-buffering"], "no");
    let mut events = Events::new(r);
    let mut ids = Vec::new();
    let mut progress = Vec::new();
    let answer = loop {
        let (event_id, m) = events
            .next_message()
            .expect("the stream ends with the answer");
        ids.push(event_id.expect("every event has an id"));
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "p-1", "{m}");
            progress.push(m["params"]["progress"].as_u64().unwrap());
        } else {
            break m;
        }
    };
    assert_eq!(progress, [1, 2, 3]);
    assert_eq!(answer["id"], json!(id));
    assert_eq!(text_of(&answer), "progressed 3");
    assert!(
        events.next_event().is_none(),
        "the stream ends after the answer"
    );
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "event ids are unique: {ids:?}");
}

#[test]
fn every_refusal_has_its_status_code() {
    let server = Server::start(&format!(
        "[server]\nmax_message_bytes = 4096\n\n{}",
        config()
    ));
    let c = client();
    let url = server.url("/mcp");
    let post = |body: &str| {
        c.post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_owned())
    };
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    // No session, and not initialize.
    let r = post(ping).send().unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().unwrap();
    assert_eq!(code(&body), -32600);
    // A session nobody issued.
    let r = post(ping)
        .header("mcp-session-id", "00000000000000000000000000000000")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Unsupported protocol version header.
    let host = server.ready_host();
    let r = post(ping)
        .header("mcp-session-id", host.session.as_deref().unwrap())
        .header("mcp-protocol-version", "1999-01-01")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // A page on another origin (DNS rebinding) is refused; loopback pages may.
    let r = host
        .post_raw(ping)
        .header("origin", "http://evil.example")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = host
        .post_raw(ping)
        .header("origin", "http://localhost:6274")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://localhost:6274"
    );
    // Too large: 413 with a JSON-RPC error.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"alpha__echo","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(10_000)
    );
    let r = host.post_raw(big).send().unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = r.json().unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains("4096"),
        "{body}"
    );
    // Not JSON: 400 with a parse error.
    let r = host.post_raw("{nope").send().unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(code(&r.json().unwrap()), -32700);
    // Other methods: 405 naming the allowed ones.
    let r = c.put(&url).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "GET, POST, DELETE");
    // GET must accept an event stream.
    let r = c
        .get(&url)
        .header("accept", "application/json")
        .header("mcp-session-id", host.session.as_deref().unwrap())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
    // Without MCP-Protocol-Version the host is taken to speak 2025-03-26: still served.
    let r = c
        .post(&url)
        .header("content-type", "application/json")
        .header("mcp-session-id", host.session.as_deref().unwrap())
        .body(ping)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn delete_ends_the_session_and_cancels_what_it_has_in_flight() {
    let server = Server::start(&config());
    let host = server.ready_host();
    let slow = host.post_raw(
        json!({"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":20000}}}).to_string(),
    );
    let pending = std::thread::spawn(move || slow.send());
    let mut watcher = server.ready_host();
    // Time for the request to reach the upstream.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(host.delete().status(), StatusCode::OK);
    eventually("the upstream hears the cancel", || {
        text_of(&watcher.call("alpha__cancelled_count", json!({}))) == "1"
    });
    let r = host
        .post_raw(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "a deleted session is gone"
    );
    assert_eq!(host.delete().status(), StatusCode::NOT_FOUND);
    // The POST still open gets an error saying why its request ended.
    let answer: Value = pending.join().unwrap().unwrap().json().unwrap();
    assert_eq!(code(&answer), -32010, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{answer}"
    );
}

#[test]
fn a_dropped_connection_is_not_a_cancellation() {
    let server = Server::start(&config());
    let host = server.ready_host();
    let body = json!({"jsonrpc":"2.0","id":"d1","method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":400}}});
    // The host gives up on the response before it comes.
    let r = host
        .post_raw(body.to_string())
        .timeout(Duration::from_millis(100))
        .send();
    assert!(
        r.is_err(),
        "the request should have timed out on the host side"
    );
    std::thread::sleep(Duration::from_millis(700));
    let mut watcher = server.ready_host();
    assert_eq!(
        text_of(&watcher.call("alpha__cancelled_count", json!({}))),
        "0",
        "the upstream must not be told to cancel"
    );
}

#[test]
fn the_get_stream_carries_session_notifications_and_resumes() {
    let server = Server::start(&format!("[server]\nsse_keepalive_ms = 200\n\n{}", config()));
    let mut host = server.ready_host();
    let mut events = Events::new(host.listen(None));
    // A quiet stream gets keep-alive comments; the first also shows the stream is attached.
    let e = events.next_event().unwrap();
    assert!(e.comment, "{e:?}");
    host.call("alpha__add_tool", json!({"name": "first"}));
    let (id, m) = events.next_message().unwrap();
    assert_eq!(m["method"], "notifications/tools/list_changed");
    let first_id = id.unwrap();
    events.close();
    // While no stream is open, more notifications are kept for a resuming host.
    // Changes closer together than the debounce window coalesce into one notice, so
    // these are spaced well apart to give the replay two events to carry.
    host.call("alpha__add_tool", json!({"name": "second"}));
    std::thread::sleep(Duration::from_millis(150));
    host.call("alpha__add_tool", json!({"name": "third"}));
    std::thread::sleep(Duration::from_millis(200));
    let mut resumed = Events::new(host.listen(Some(&first_id)));
    let (a, m1) = resumed.next_message().unwrap();
    let (b, m2) = resumed.next_message().unwrap();
    assert_eq!(m1["method"], "notifications/tools/list_changed");
    assert_eq!(m2["method"], "notifications/tools/list_changed");
    assert!(a.unwrap() != first_id && b.is_some());
}

#[test]
fn a_post_stream_can_be_resumed_with_last_event_id() {
    let server = Server::start(&config());
    let mut host = server.ready_host();
    let (id, r) = host.send(
        "tools/call",
        json!({"name": "alpha__progress", "arguments": {"steps": 4}, "_meta": {"progressToken": 7}}),
    );
    let mut events = Events::new(r);
    let (first, _) = events.next_message().unwrap();
    events.close();
    // The rest, answer included, is replayed on a GET naming the last event seen.
    let messages = messages_of(host.listen(first.as_deref()));
    let progress: Vec<u64> = messages
        .iter()
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    assert_eq!(progress, [2, 3, 4]);
    let answer = messages.last().unwrap();
    assert_eq!(answer["id"], json!(id));
    assert_eq!(text_of(answer), "progressed 4");
}

#[test]
fn batches_are_answered_as_arrays_for_2025_03_26() {
    let server = Server::start(&config());
    let mut host = server.host();
    let r = host.initialize("2025-03-26");
    assert_eq!(r.status(), StatusCode::OK);
    let batch = r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"in a batch"}}},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#;
    let r = host
        .post_raw(batch)
        .header("mcp-protocol-version", "2025-03-26")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let answers: Value = r.json().unwrap();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 2);
    let b = answers.iter().find(|a| a["id"] == "b").unwrap();
    assert_eq!(text_of(b), "in a batch");
    let only_notes = r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#;
    let r = host
        .post_raw(only_notes)
        .header("mcp-protocol-version", "2025-03-26")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
}

#[test]
fn a_session_has_a_bound_on_requests_in_progress() {
    let server = Server::start(&format!(
        "[server]\nmax_requests_per_session = 2\n\n{}",
        config()
    ));
    let host = server.ready_host();
    let sleeper = |id: u64| {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":1500}}});
        let request = host.post_raw(body.to_string());
        std::thread::spawn(move || request.send().unwrap().status())
    };
    let running = [sleeper(1), sleeper(2)];
    std::thread::sleep(Duration::from_millis(400));
    let r = host
        .post_raw(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(code(&r.json().unwrap()), -32013);
    for t in running {
        assert_eq!(t.join().unwrap(), StatusCode::OK);
    }
    let r = host
        .post_raw(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the bound frees up");
}
