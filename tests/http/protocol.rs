//! The whole protocol across the merge, for several hosts at once over HTTP: requests from
//! upstreams to the one host that can answer them, per-session log levels, progress tokens
//! and request ids that two sessions share, and isolated upstreams.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

/// A host that declares `capabilities` in its handshake.
fn host_with(server: &Server, capabilities: Value) -> Host {
    let mut host = server.host();
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}});
    let r = host.post_raw(body.to_string()).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    host.session = Some(r.headers()["mcp-session-id"].to_str().unwrap().to_owned());
    let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    host.post_raw(n.to_string()).send().unwrap();
    host
}

/// Calls `tool`, answering every request the response stream carries with `answer(method,
/// params)`; returns the call's answer.
fn call_answering(
    host: &mut Host,
    tool: &str,
    args: Value,
    answer: impl Fn(&str, &Value) -> Value,
) -> Value {
    let (id, r) = host.send("tools/call", json!({"name": tool, "arguments": args}));
    assert_eq!(r.status(), StatusCode::OK);
    if !content_type(&r).starts_with("text/event-stream") {
        return r.json().unwrap();
    }
    let mut events = Events::new(r);
    loop {
        let (_, m) = events
            .next_message()
            .expect("the stream ends with the answer");
        if m["id"] == json!(id) && m.get("method").is_none() {
            return m;
        }
        if let Some(method) = m["method"].as_str().filter(|_| m.get("id").is_some()) {
            let reply =
                json!({"jsonrpc": "2.0", "id": m["id"], "result": answer(method, &m["params"])});
            let r = host.post_raw(reply.to_string()).send().unwrap();
            assert_eq!(r.status(), StatusCode::ACCEPTED);
        }
    }
}

fn sampled(text: &str) -> impl Fn(&str, &Value) -> Value + '_ {
    move |method, _| {
        assert_eq!(method, "sampling/createMessage");
        json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"})
    }
}

fn conformance_fixture(extra: &str) -> String {
    format!(
        "{}{extra}",
        fixture_upstream("alpha", &["--name", "alpha", "--conformance"])
    )
}

#[test]
fn sampling_goes_to_the_host_whose_request_asked_for_it() {
    let server = Server::start(&conformance_fixture(""));
    let mut host = host_with(&server, json!({"sampling": {}}));
    let r = call_answering(
        &mut host,
        "alpha__test_sampling",
        json!({"prompt": "hi"}),
        sampled("from the host"),
    );
    assert_eq!(text_of(&r), "LLM response: from the host", "{r}");
    // A host that cannot sample: the upstream is refused on its behalf, and says so.
    let mut mute = server.ready_host();
    let r = call_answering(
        &mut mute,
        "alpha__test_sampling",
        json!({"prompt": "hi"}),
        sampled("never"),
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(
        text_of(&r).contains("did not declare the sampling capability"),
        "{r}"
    );
}

#[test]
fn a_shared_stdio_upstream_cannot_tell_two_hosts_apart() {
    let server = Server::start(&conformance_fixture(""));
    let busy = server.ready_host();
    let body = json!({"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":3000}}});
    let request = busy.post_raw(body.to_string());
    let pending = std::thread::spawn(move || request.send().unwrap().status());
    std::thread::sleep(Duration::from_millis(300));
    let mut asker = host_with(&server, json!({"sampling": {}}));
    let r = call_answering(
        &mut asker,
        "alpha__test_sampling",
        json!({"prompt": "hi"}),
        sampled("x"),
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
    assert!(text_of(&r).contains("isolation"), "{r}");
    assert_eq!(pending.join().unwrap(), StatusCode::OK);
    drop(busy.delete());
}

#[test]
fn an_isolated_upstream_gives_each_session_its_own_process() {
    let dir = TempDir::new("isolated");
    let pids = dir.path().join("pids");
    let config = format!(
        "{}isolation = \"session\"\nisolation_limit = 2\n",
        fixture_upstream(
            "alpha",
            &[
                "--name",
                "alpha",
                "--conformance",
                "--pid-file",
                pids.to_str().unwrap()
            ]
        )
    );
    let server = Server::start(&config);
    // The shared connection serves the catalog.
    eventually("the catalog connection started", || {
        read_pids(&pids).len() == 1
    });
    let shared_pid = read_pids(&pids)[0];
    let mut busy = server.ready_host();
    let body = json!({"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":2000}}});
    let request = busy.post_raw(body.to_string());
    let pending = std::thread::spawn(move || request.send().unwrap().status());
    std::thread::sleep(Duration::from_millis(500));
    // With a connection of its own, the upstream's request reaches the one host it is for,
    // although another session has a request in flight.
    let mut asker = host_with(&server, json!({"sampling": {}}));
    let r = call_answering(
        &mut asker,
        "alpha__test_sampling",
        json!({"prompt": "hi"}),
        sampled("mine"),
    );
    assert_eq!(text_of(&r), "LLM response: mine", "{r}");
    assert_eq!(pending.join().unwrap(), StatusCode::OK);
    let whoami = |host: &mut Host| text_of(&host.call("alpha__whoami", json!({})));
    let (busy_pid, asker_pid) = (whoami(&mut busy), whoami(&mut asker));
    assert_ne!(busy_pid, asker_pid, "each session has its own process");
    assert_eq!(
        read_pids(&pids).len(),
        3,
        "the catalog's and one per session"
    );
    // The limit holds.
    let mut third = server.ready_host();
    let r = third.call("alpha__echo", json!({"text": "x"}));
    assert_eq!(code(&r), -32010, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("isolation_limit"),
        "{r}"
    );
    // A session's process ends with the session.
    let asker_pid: u32 = asker_pid.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(asker.delete().status(), StatusCode::OK);
    eventually("the session's process exits", || !process_alive(asker_pid));
    assert!(process_alive(shared_pid));
    // Its place is free again.
    assert_eq!(
        text_of(&third.call("alpha__echo", json!({"text": "now"}))),
        "now"
    );
}

#[test]
fn two_sessions_may_use_the_same_ids_and_progress_tokens() {
    let server = Server::start(&two_fixtures());
    let hosts: Vec<Host> = (0..2).map(|_| server.ready_host()).collect();
    let threads: Vec<_> = hosts
        .into_iter()
        .map(|host| {
            std::thread::spawn(move || {
                let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                    "params":{"name":"alpha__progress","arguments":{"steps":40},"_meta":{"progressToken":"same"}}});
                let r = host.post_raw(body.to_string()).send().unwrap();
                let messages = messages_of(r);
                let progress: Vec<&Value> = messages.iter().filter(|m| m["method"] == "notifications/progress").collect();
                assert_eq!(progress.len(), 40);
                assert!(progress.iter().all(|p| p["params"]["progressToken"] == "same"));
                let answer = messages.last().unwrap();
                assert_eq!((answer["id"].clone(), text_of(answer)), (json!(1), "progressed 40".to_owned()));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn each_session_hears_log_messages_at_its_own_level() {
    let server = Server::start(&format!(
        "[server]\nsse_keepalive_ms = 100\n\n{}",
        two_fixtures()
    ));
    let mut verbose = server.ready_host();
    let mut quiet = server.ready_host();
    let defaults = server.ready_host();
    assert_eq!(
        verbose.request("logging/setLevel", json!({"level": "debug"}))["result"],
        json!({})
    );
    assert_eq!(
        quiet.request("logging/setLevel", json!({"level": "error"}))["result"],
        json!({})
    );
    let mut streams: Vec<Events> = [&verbose, &quiet, &defaults]
        .iter()
        .map(|h| Events::attached(h))
        .collect();
    for (level, text) in [("debug", "d1"), ("info", "i1"), ("error", "e1")] {
        verbose.call("alpha__log", json!({"level": level, "message": text}));
    }
    verbose.call(
        "alpha__log",
        json!({"level": "emergency", "message": "end"}),
    );
    let heard = |events: &mut Events| {
        let mut texts = Vec::new();
        loop {
            let (_, m) = events.next_message().expect("a message");
            if m["method"] != "notifications/message" {
                continue;
            }
            assert_eq!(m["params"]["logger"], "alpha/alpha", "{m}");
            let text = m["params"]["data"].as_str().unwrap_or_default().to_owned();
            if text == "end" {
                return texts;
            }
            if ["d1", "i1", "e1"].contains(&text.as_str()) {
                texts.push(text);
            }
        }
    };
    assert_eq!(heard(&mut streams[0]), ["d1", "i1", "e1"]);
    assert_eq!(heard(&mut streams[1]), ["e1"]);
    assert_eq!(
        heard(&mut streams[2]),
        ["i1", "e1"],
        "info and above without a level"
    );
    let _ = quiet.delete();
}

#[test]
fn subscriptions_are_counted_across_sessions_and_end_with_them() {
    let server = Server::start(&format!(
        "[server]\nsse_keepalive_ms = 100\n\n{}",
        fixture_upstream("alpha", &["--name", "alpha", "--subscriptions"])
    ));
    let uri = "alpha+fixture://alpha/readme";
    let upstream_view = |host: &mut Host| text_of(&host.call("alpha__subscriptions", json!({})));
    let mut first = server.ready_host();
    let mut second = server.ready_host();
    let mut bystander = server.ready_host();
    for host in [&mut first, &mut second] {
        assert_eq!(
            host.request("resources/subscribe", json!({"uri": uri}))["result"],
            json!({})
        );
    }
    // One subscription upstream, however many sessions want it.
    assert_eq!(
        upstream_view(&mut bystander),
        r#"["fixture://alpha/readme"]"#
    );
    assert_eq!(
        first.request("resources/unsubscribe", json!({"uri": uri}))["result"],
        json!({})
    );
    assert_eq!(
        upstream_view(&mut bystander),
        r#"["fixture://alpha/readme"]"#,
        "the second still wants it"
    );
    // Updates reach the subscribed session only.
    let mut streams: Vec<Events> = [&first, &second, &bystander]
        .iter()
        .map(|h| {
            let mut e = Events::new(h.listen(None));
            while !e.next_event().expect("the stream").comment {}
            e
        })
        .collect();
    assert_eq!(
        text_of(&bystander.call("alpha__touch", json!({"uri": "fixture://alpha/readme"}))),
        "touched 1"
    );
    let next_update = |events: &mut Events| loop {
        let e = events.next_event().expect("the stream");
        if !e.comment {
            let m: Value = serde_json::from_str(&e.data).unwrap();
            return m;
        }
    };
    let update = next_update(&mut streams[1]);
    assert_eq!(
        (update["method"].as_str(), update["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some(uri))
    );
    // Nothing for the others: their next message is a later marker, not the update.
    bystander.call(
        "alpha__log",
        json!({"level": "emergency", "message": "marker"}),
    );
    for i in [0, 2] {
        let m = next_update(&mut streams[i]);
        assert_eq!(
            m["method"], "notifications/message",
            "session {i} heard {m}"
        );
    }
    // The last session that wanted it ends: the upstream is told.
    assert_eq!(second.delete().status(), StatusCode::OK);
    eventually("the upstream is unsubscribed", || {
        upstream_view(&mut bystander) == "[]"
    });
}

#[test]
fn a_task_belongs_to_the_session_that_started_it() {
    let server = Server::start(&format!(
        "[server]\nsse_keepalive_ms = 100\n\n{}",
        fixture_upstream("alpha", &["--name", "alpha", "--tasks"])
    ));
    let mut owner = server.ready_host();
    let mut other = server.ready_host();
    let mut events = Events::new(owner.listen(None));
    while !events.next_event().expect("the stream").comment {}
    let created = owner.request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 100}, "task": {}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Its status reaches the owner's stream, with the id the owner knows.
    loop {
        let e = events.next_event().expect("the stream");
        if e.comment {
            continue;
        }
        let m: Value = serde_json::from_str(&e.data).unwrap();
        if m["method"] == "notifications/tasks/status" && m["params"]["status"] == "completed" {
            assert_eq!(m["params"]["taskId"], task.as_str());
            break;
        }
    }
    assert_eq!(
        text_of(&owner.request("tasks/result", json!({"taskId": task}))),
        "slept 100"
    );
    // Another session cannot see or touch it.
    assert_eq!(
        code(&other.request("tasks/get", json!({"taskId": task}))),
        -32602
    );
    assert_eq!(
        code(&other.request("tasks/cancel", json!({"taskId": task}))),
        -32602
    );
    let listed = other.request("tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
}

#[test]
fn roots_travel_on_the_stream_of_the_request_that_asked() {
    let server = Server::start(&fixture_upstream(
        "alpha",
        &["--name", "alpha", "--client-tools"],
    ));
    let mut host = host_with(&server, json!({"roots": {}}));
    let r = call_answering(&mut host, "alpha__ask_roots", json!({}), |method, _| {
        assert_eq!(method, "roots/list");
        json!({"roots": [{"uri": "file:///srv", "name": "srv"}]})
    });
    assert!(text_of(&r).contains("file:///srv"), "{r}");
}
