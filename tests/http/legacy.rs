//! The 2024-11-05 HTTP+SSE transport at `/sse`.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

/// Opens an HTTP+SSE session's stream, as a host does.
fn open_sse(server: &Server, c: &reqwest::blocking::Client) -> reqwest::blocking::Response {
    c.get(server.url("/sse"))
        .header("accept", "text/event-stream")
        .timeout(Duration::from_secs(3600))
        .send()
        .unwrap()
}

/// Posts one message to a session's endpoint.
fn post_to(c: &reqwest::blocking::Client, url: &str, body: Value) -> reqwest::blocking::Response {
    c.post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
}

#[test]
fn the_stream_names_the_endpoint_and_carries_the_answers() {
    let server = Server::start(&two_fixtures());
    let c = client();
    let r = open_sse(&server, &c);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(content_type(&r), "text/event-stream");
    let mut events = Events::new(r);
    let endpoint = events.next_event().unwrap();
    assert_eq!(endpoint.kind.as_deref(), Some("endpoint"));
    assert!(
        endpoint.data.starts_with("/messages?sessionId="),
        "{endpoint:?}"
    );
    let post_url = server.url(&endpoint.data);
    let post = |body: Value| post_to(&c, &post_url, body);
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"1"}}});
    assert_eq!(post(init).status(), StatusCode::ACCEPTED);
    let (_, answer) = events.next_message().unwrap();
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"beta__echo","arguments":{"text":"old school"}}});
    assert_eq!(post(call).status(), StatusCode::ACCEPTED);
    let (_, answer) = events.next_message().unwrap();
    assert_eq!(text_of(&answer), "old school");
    // Errors go on the stream too.
    post(json!({"jsonrpc":"2.0","id":3,"method":"nope"}));
    let (_, answer) = events.next_message().unwrap();
    assert_eq!(code(&answer), -32601);
    // Closing the stream ends the session.
    events.close();
    eventually("the session ends with its stream", || {
        post(json!({"jsonrpc":"2.0","id":4,"method":"ping"})).status() == StatusCode::NOT_FOUND
    });
}

#[test]
fn unknown_sessions_are_refused() {
    let server = Server::start(&two_fixtures());
    let c = client();
    let r = c
        .post(server.url("/messages?sessionId=nope"))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = c.post(server.url("/messages")).body("{}").send().unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[test]
fn a_host_that_does_not_read_its_stream_gets_429_then_catches_up() {
    // Answers of 64 KiB to a host that does not read its stream for a while: past
    // session_queue_bytes new requests are refused with 429, the session lives on, and once
    // the host reads, every accepted call has its answer.
    let config = format!(
        "[server]\nsession_queue_bytes = 1048576\n\n{}",
        named_fixture("alpha")
    );
    let server = Server::start(&config);
    let c = client();
    let r = open_sse(&server, &c);
    let mut events = Events::new(r);
    let post_url = server.url(&events.next_event().unwrap().data);
    let post = |body: Value| post_to(&c, &post_url, body);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"1"}}});
    post(init);
    assert_eq!(events.next_message().unwrap().1["id"], 0);
    post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let mut accepted = 0u64;
    let refusal = loop {
        assert!(accepted < 2000, "never refused");
        let call = json!({"jsonrpc":"2.0","id":accepted + 1,"method":"tools/call","params":{"name":"alpha__big","arguments":{"bytes":65536}}});
        let r = post(call);
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            break r;
        }
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        accepted += 1;
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(refusal.headers()["retry-after"], "1");
    let body: Value = refusal.json().unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has not read"),
        "{body}"
    );
    for _ in 0..accepted {
        let (_, answer) = events.next_message().unwrap();
        assert_eq!(text_of(&answer).len(), 65536);
    }
    let r = post(json!({"jsonrpc":"2.0","id":"again","method":"ping"}));
    assert_eq!(r.status(), StatusCode::ACCEPTED, "the session lives on");
    assert_eq!(events.next_message().unwrap().1["id"], "again");
}
