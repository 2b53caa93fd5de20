//! Stateless hosts (protocol revision 2026-07-28) over Streamable HTTP: sessionless POSTs
//! checked header by header, answers that say they are complete and who served them, caching
//! hints, the removed methods, `subscriptions/listen`, a closed response stream cancelling its
//! request, and a session-era upstream's questions coming back as `input_required`.

use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const MODERN: &str = "2026-07-28";

/// A stateless host: every request carries its own `_meta` and the headers that match it.
struct Stateless {
    client: Client,
    url: String,
    capabilities: Value,
    next_id: u64,
}

impl Stateless {
    fn new(server: &Server) -> Self {
        Self {
            client: client(),
            url: server.url("/mcp"),
            capabilities: json!({}),
            next_id: 1,
        }
    }

    fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// `params` with this host's `_meta` added.
    fn params(&self, mut params: Value) -> Value {
        let meta = params
            .as_object_mut()
            .unwrap()
            .entry("_meta")
            .or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
        meta["io.modelcontextprotocol/clientCapabilities"] = self.capabilities.clone();
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "test", "version": "1"});
        params
    }

    /// A POST of `body` with the headers a stateless host sends for it.
    fn post(&self, body: &Value) -> RequestBuilder {
        self.post_with(body, &[])
    }

    /// A POST of `body` with the headers a stateless host sends for it, except those given
    /// in `headers` (name, value; `None`: left out).
    fn post_with(&self, body: &Value, headers: &[(&str, Option<&str>)]) -> RequestBuilder {
        let method = body["method"].as_str().unwrap_or_default();
        let name = match method {
            "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
            "resources/read" => body["params"]["uri"].as_str(),
            _ => None,
        };
        let mut all = vec![
            ("mcp-protocol-version", Some(MODERN)),
            ("mcp-method", Some(method)),
        ];
        if name.is_some() {
            all.push(("mcp-name", name));
        }
        for (k, v) in headers {
            all.retain(|(name, _)| name != k);
            all.push((k, *v));
        }
        let mut r = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in all {
            if let Some(v) = v {
                r = r.header(k, v);
            }
        }
        r.body(body.to_string())
    }

    fn body(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": self.params(params)})
    }

    /// A request's answer (from the JSON body, or the end of an SSE stream).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let body = self.body(method, params);
        answer_of(self.post(&body).send().unwrap())
    }

    /// A request's HTTP status and JSON answer.
    fn request_status(&mut self, method: &str, params: Value) -> (StatusCode, Value) {
        let body = self.body(method, params);
        let r = self.post(&body).send().unwrap();
        (r.status(), r.json().unwrap())
    }
}

fn answer_of(r: Response) -> Value {
    assert_eq!(r.status(), StatusCode::OK, "{r:?}");
    if content_type(&r) == "application/json" {
        return r.json().unwrap();
    }
    messages_of(r)
        .into_iter()
        .find(|m| m.get("id").is_some())
        .expect("an answer at the end of the stream")
}

fn assert_stateless_result(r: &Value) {
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(
        r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "manifold",
        "{r}"
    );
}

#[test]
fn a_stateless_host_needs_no_session_and_each_answer_says_who_served_it() {
    let server = Server::start(&two_fixtures());
    let mut host = Stateless::new(&server);
    let d = host.request("server/discover", json!({}));
    assert_stateless_result(&d);
    let versions = d["result"]["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&json!(MODERN)), "{d}");
    assert!(versions.contains(&json!("2025-11-25")), "{d}");
    assert_eq!(d["result"]["capabilities"]["tools"]["listChanged"], true);
    assert!(
        d["result"]["capabilities"].get("tasks").is_none(),
        "session-era tasks are not offered to stateless hosts: {d}"
    );
    let tools = host.request("tools/list", json!({}));
    assert_stateless_result(&tools);
    assert_eq!(tools["result"]["ttlMs"], 60_000, "{tools}");
    assert_eq!(tools["result"]["cacheScope"], "public");
    assert!(tools["result"]["tools"].as_array().unwrap().len() > 20);
    let call = host.request(
        "tools/call",
        json!({"name": "alpha__echo", "arguments": {"text": "stateless"}}),
    );
    assert_stateless_result(&call);
    assert_eq!(text_of(&call), "stateless");
    let read = host.request(
        "resources/read",
        json!({"uri": "alpha+fixture://alpha/readme"}),
    );
    assert_stateless_result(&read);
    assert_eq!(read["result"]["ttlMs"], 0, "{read}");
    assert_eq!(read["result"]["cacheScope"], "public", "{read}");
    for kind in ["prompts/list", "resources/list", "resources/templates/list"] {
        let r = host.request(kind, json!({}));
        assert_stateless_result(&r);
        assert!(
            r["result"]["ttlMs"].is_u64() && r["result"]["cacheScope"].is_string(),
            "{r}"
        );
    }
    // No session was made for any of it.
    assert!(server
        .stderr()
        .lines()
        .all(|l| !l.contains("HTTP session opened")));
}

#[test]
fn the_methods_the_revision_removed_and_an_unknown_resource_are_answered_its_way() {
    let server = Server::start(&two_fixtures());
    let mut host = Stateless::new(&server);
    for method in [
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "initialize",
    ] {
        let (status, r) = host.request_status(
            method,
            json!({"uri": "alpha+fixture://alpha/readme", "level": "info"}),
        );
        assert_eq!(code(&r), -32601, "{method}: {r}");
        // An unknown method is 404 in this revision's transport.
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}");
    }
    let missing = json!({"uri": "alpha+fixture://alpha/nothing-here"});
    let r = host.request("resources/read", missing.clone());
    assert_eq!(
        code(&r),
        -32602,
        "resource not found is invalid params: {r}"
    );
    let r = host.request("resources/read", json!({"uri": "nobody+x://y"}));
    assert_eq!(code(&r), -32602, "{r}");
    // A session-era host still gets the session era's code.
    let mut legacy = server.ready_host();
    let r = legacy.request("resources/read", missing);
    assert_eq!(code(&r), -32002, "{r}");
}

#[test]
fn headers_must_agree_with_the_body() {
    let server = Server::start(&two_fixtures());
    let mut host = Stateless::new(&server);
    let call = host.body(
        "tools/call",
        json!({"name": "alpha__echo", "arguments": {"text": "x"}}),
    );
    let refused = |r: Response, code_wanted: i64| {
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{r:?}");
        let body: Value = r.json().unwrap();
        assert_eq!(code(&body), code_wanted, "{body}");
        body
    };
    // Mcp-Name names another tool, is given twice, or is missing.
    refused(
        host.post_with(&call, &[("mcp-name", Some("alpha__add"))])
            .send()
            .unwrap(),
        -32020,
    );
    refused(
        host.post(&call)
            .header("mcp-name", "alpha__echo")
            .send()
            .unwrap(),
        -32020,
    );
    let body = refused(
        host.post_with(&call, &[("mcp-name", None)]).send().unwrap(),
        -32020,
    );
    assert_eq!(
        body["id"], call["id"],
        "the refusal names the request: {body}"
    );
    // Mcp-Method names another method, or is missing.
    refused(
        host.post_with(&call, &[("mcp-method", Some("tools/list"))])
            .send()
            .unwrap(),
        -32020,
    );
    refused(
        host.post_with(&call, &[("mcp-method", None)])
            .send()
            .unwrap(),
        -32020,
    );
    // The body's _meta names no version, or another one.
    let mut unversioned = call.clone();
    unversioned["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    // (No revision in the body at all is invalid params, still with 400.)
    refused(host.post(&unversioned).send().unwrap(), -32602);
    // An unknown revision, in the header and the body alike.
    let mut future = call.clone();
    future["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let body = refused(
        host.post_with(&future, &[("mcp-protocol-version", Some("2099-01-01"))])
            .send()
            .unwrap(),
        -32022,
    );
    // The header names the stateless revision, the body another one.
    let mut older = call.clone();
    older["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    refused(host.post(&older).send().unwrap(), -32020);
    assert_eq!(body["error"]["data"]["requested"], "2099-01-01");
    assert!(body["error"]["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&json!(MODERN)));
    // There is no standing GET stream in this revision.
    let r = host
        .client
        .get(&host.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    // Params that are not an object are refused as such, with 400.
    let mut listed = host.body("tools/list", json!({}));
    listed["params"] = json!([1]);
    let body = refused(host.post(&listed).send().unwrap(), -32602);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("object"),
        "{body}"
    );
    // And the headers that agree are served.
    assert_eq!(text_of(&answer_of(host.post(&call).send().unwrap())), "x");
}

#[test]
fn a_closed_response_stream_cancels_its_request_upstream() {
    let server = Server::start(&two_fixtures());
    let mut host = Stateless::new(&server);
    let slow = host.body(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 20000}}),
    );
    // The host gives up on the answer: in this revision that is a cancellation.
    let r = host.post(&slow).timeout(Duration::from_millis(300)).send();
    assert!(r.is_err(), "the call should have been given up");
    eventually("the upstream hears the cancel", || {
        let r = host.request(
            "tools/call",
            json!({"name": "alpha__cancelled_count", "arguments": {}}),
        );
        text_of(&r) == "1"
    });
}

#[test]
fn subscriptions_listen_is_acknowledged_then_carries_only_what_was_asked_tagged() {
    let config = format!(
        "{}{}",
        fixture_upstream("alpha", &["--name", "alpha", "--subscriptions"]),
        named_fixture("beta")
    );
    let server = Server::start(&config);
    let mut host = Stateless::new(&server);
    // Every upstream is up (their start changes the lists, which is not what is tested).
    host.request("tools/list", json!({}));
    let listen = host.body(
        "subscriptions/listen",
        json!({"notifications": {
            "toolsListChanged": true,
            "resourceSubscriptions": ["alpha+fixture://alpha/readme", "nobody+x://nowhere"]
        }}),
    );
    let r = host.post(&listen).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(content_type(&r), "text/event-stream");
    let mut events = Events::new(r);
    let (_, ack) = events.next_message().unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let tag = &ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"];
    assert_eq!(*tag, listen["id"], "{ack}");
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["alpha+fixture://alpha/readme"]),
        "a URI nobody serves is not agreed to: {ack}"
    );
    assert!(ack["params"]["notifications"]
        .get("promptsListChanged")
        .is_none());
    // A resource update it asked for, then a tool list change; a prompt list change it did
    // not ask for never shows.
    eventually("the upstream subscription is in place", || {
        let r = host.request(
            "tools/call",
            json!({"name": "alpha__touch", "arguments": {"uri": "fixture://alpha/readme"}}),
        );
        text_of(&r) != "0"
    });
    let (_, updated) = events.next_message().unwrap();
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], "alpha+fixture://alpha/readme");
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen["id"]
    );
    host.request(
        "tools/call",
        json!({"name": "alpha__add_tool", "arguments": {"name": "fresh"}}),
    );
    let next = loop {
        let (_, m) = events.next_message().unwrap();
        // Further updates of the touched resource may still arrive.
        if m["method"] != "notifications/resources/updated" {
            break m;
        }
    };
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
    assert_eq!(
        next["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen["id"]
    );
    events.close();
}

/// A fixture whose tools ask their client (roots, sampling, elicitation).
fn asking() -> String {
    fixture_upstream("ask", &["--name", "ask", "--client-tools"])
}

#[test]
fn a_session_era_upstreams_question_comes_back_as_input_required_and_the_retry_completes_it() {
    let server = Server::start(&asking());
    let mut host = Stateless::new(&server).with_capabilities(json!({"elicitation": {}}));
    let params = json!({"name": "ask__ask_elicitation", "arguments": {"message": "colour?"}});
    let first = host.request("tools/call", params.clone());
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let requests = first["result"]["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, asked) = requests.iter().next().unwrap();
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["message"], "colour?");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"action": "accept", "content": {"answer": "teal"}});
    let retry = |state: &str, name: &str| {
        let mut p = params.clone();
        p["name"] = json!(name);
        p["requestState"] = json!(state);
        p["inputResponses"] = json!({ key.clone(): answer.clone() });
        p
    };
    // A state altered by one character, or presented for another tool, is refused.
    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let r = host.request("tools/call", retry(&tampered, "ask__ask_elicitation"));
    assert_eq!(code(&r), -32602, "{r}");
    let r = host.request("tools/call", retry(&state, "ask__ask_sampling"));
    assert_eq!(code(&r), -32602, "{r}");
    // The real one completes the call with the host's answer.
    let done = host.request("tools/call", retry(&state, "ask__ask_elicitation"));
    assert_stateless_result(&done);
    assert_eq!(text_of(&done), "action=accept answer=teal", "{done}");
    // And cannot be used again.
    let r = host.request("tools/call", retry(&state, "ask__ask_elicitation"));
    assert_eq!(code(&r), -32602, "{r}");
}

#[test]
fn a_question_the_host_did_not_declare_it_can_answer_is_refused_for_it() {
    let server = Server::start(&asking());
    // Declares elicitation, not sampling.
    let mut host = Stateless::new(&server).with_capabilities(json!({"elicitation": {}}));
    // The upstream's sampling request is refused for it with the stateless era's own error,
    // which this upstream passes on: the call fails with -32021 (and 400) naming sampling.
    let (status, r) = host.request_status(
        "tools/call",
        json!({"name": "ask__ask_sampling", "arguments": {"prompt": "hi"}}),
    );
    assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
    assert_eq!(code(&r), -32021, "{r}");
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{r}"
    );
}

#[test]
fn log_messages_reach_only_the_requests_that_asked_at_their_level() {
    let server = Server::start(&two_fixtures());
    let mut host = Stateless::new(&server);
    let log = |level: &str, message: &str, asked: Option<&str>| {
        let mut params =
            json!({"name": "alpha__log", "arguments": {"level": level, "message": message}});
        if let Some(asked) = asked {
            params["_meta"] = json!({"io.modelcontextprotocol/logLevel": asked});
        }
        params
    };
    // Asked at warning: a warning comes on the request's own stream, before its answer.
    let body = host.body("tools/call", log("warning", "careful", Some("warning")));
    let r = host.post(&body).send().unwrap();
    assert_eq!(content_type(&r), "text/event-stream");
    let messages = messages_of(r);
    // (The upstream may also say, at that level, that its level was set.)
    let note = messages
        .iter()
        .find(|m| m["method"] == "notifications/message" && m["params"]["data"] == "careful")
        .expect("the log message on the request's stream");
    assert_eq!(note["params"]["level"], "warning");
    assert_eq!(note["params"]["data"], "careful", "{note}");
    assert!(
        note["params"]["logger"]
            .as_str()
            .unwrap()
            .starts_with("alpha/"),
        "named after its upstream: {note}"
    );
    assert_eq!(text_of(messages.last().unwrap()), "logged");
    // Below the level asked: nothing but the answer.
    let body = host.body("tools/call", log("info", "chatter", Some("warning")));
    let messages = messages_of(host.post(&body).send().unwrap());
    assert!(
        messages.iter().all(|m| m.get("method").is_none()),
        "{messages:?}"
    );
    // Not asked at all: nothing either, whatever the level.
    let body = host.body("tools/call", log("error", "loud", None));
    let r = host.post(&body).send().unwrap();
    assert_eq!(content_type(&r), "application/json");
    assert_eq!(text_of(&r.json::<Value>().unwrap()), "logged");
}
