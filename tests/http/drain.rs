//! SIGTERM while serving HTTP drains before Manifold stops: `/readyz` fails at once while
//! everything is still served for `server.drain_delay`; then new requests get 503 with
//! `Retry-After` (answers and notifications for work in flight still pass) while requests in
//! progress get up to `server.drain_timeout` to finish; what is left then is answered with an
//! error, and the process exits.
//!
//! Bounds are generous (slow machines): the tests assert outcomes and their order, not
//! milliseconds.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use reqwest::blocking::Response;
use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

/// `extra` in `[server]`, and the fixture `alpha`.
fn config(extra: &str) -> String {
    format!("[server]\n{extra}\n\n{}", named_fixture("alpha"))
}

fn readyz(url: &str) -> (StatusCode, Value) {
    let r = client().get(url).send().unwrap();
    (r.status(), r.json().unwrap())
}

/// Sends a tools/call of `alpha__sleep` for `ms` on `host`'s session, in the background;
/// returns the HTTP status and the answer.
fn sleep_call(host: &Host, id: &str, ms: u64) -> JoinHandle<(StatusCode, Value)> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "alpha__sleep", "arguments": {"ms": ms}}});
    let request = host.post_raw(body.to_string());
    std::thread::spawn(move || {
        let r = request.send().expect("an answer, not a dropped connection");
        let status = r.status();
        let answer = messages_of(r).pop().unwrap_or(Value::Null);
        (status, answer)
    })
}

/// Host requests in flight over Streamable HTTP, from `/metrics` (open on the listener).
fn in_flight(server: &Server) -> u64 {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let series = "manifold_host_inflight_requests{transport=\"http\"}";
    manifold_testkit::metrics::series(&text, series).map_or(0, |n| n as u64)
}

fn ping(host: &mut Host) -> Response {
    host.send("ping", json!({})).1
}

#[test]
fn readiness_fails_at_once_while_requests_are_still_served_for_the_delay() {
    let mut server = Server::start(&config("drain_delay = \"3s\"\nadmin = \"127.0.0.1:0\""));
    let mut host = server.ready_host();
    let admin = server.admin_url("/readyz");
    eventually("ready", || {
        readyz(&server.url("/readyz")).0 == StatusCode::OK
    });
    assert!(server.scrape().contains("\nmanifold_draining 0\n"));

    send_signal(server.child.id(), "TERM");
    let signalled = Instant::now();
    eventually("readiness fails", || {
        readyz(&server.url("/readyz")).0 == StatusCode::SERVICE_UNAVAILABLE
    });
    // Within the delay (nothing yet refuses: a refusal would fail the calls below).
    for url in [server.url("/readyz"), admin] {
        let (status, body) = readyz(&url);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{url}");
        assert_eq!(
            (&body["ready"], &body["draining"]),
            (&json!(false), &json!(true))
        );
    }
    let r = client().get(server.url("/healthz")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK, "alive all along");
    let text = server.scrape();
    assert!(text.contains("\nmanifold_draining 1\n"), "{text}");
    let r = host.call("alpha__echo", json!({"text": "still served"}));
    assert_eq!(text_of(&r), "still served", "{r}");
    let mut late = server.host();
    assert_eq!(
        late.initialize("2025-06-18").status(),
        StatusCode::OK,
        "new sessions too, during the delay"
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "too slow to check within the delay; the outcome above proves nothing"
    );

    // Nothing in flight: the process exits once the delay is over.
    let status = exit_within(&mut server.child, WAIT)
        .unwrap_or_else(|| panic!("manifold did not exit; stderr:\n{}", server.stderr()));
    assert!(status.success(), "{status}");
    // The log's last lines may still be on their way from the exited process's pipe.
    eventually("the log says the drain ended", || {
        server.stderr().contains("drained")
    });
    let log = server.stderr();
    assert!(
        log.contains("draining: readiness now fails; serving for 3s"),
        "{log}"
    );
}

#[test]
fn a_call_in_flight_finishes_while_new_requests_are_refused_then_the_process_exits() {
    let mut server = Server::start(&config("drain_delay = \"1s\"\ndrain_timeout = \"120s\""));
    let slow_host = server.ready_host();
    let mut other = server.ready_host();
    let slow = sleep_call(&slow_host, "slow", 8000);
    eventually("the call is in flight", || in_flight(&server) == 1);

    send_signal(server.child.id(), "TERM");
    let signalled = Instant::now();
    // After the delay, a new request gets 503 with Retry-After, before anything of it ran.
    let mut refused = None;
    eventually("new requests are refused", || {
        let r = ping(&mut other);
        if r.status() == StatusCode::OK {
            return false;
        }
        refused = Some(r);
        true
    });
    let refused = refused.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()["connection"], "close");
    let id = other.next_id - 1;
    let body: Value = refused.json().unwrap();
    assert_eq!(body["id"], json!(id), "{body}");
    assert_eq!(code(&body), -32603, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{body}"
    );
    // So is a new session, and a new stream.
    let mut new = server.host();
    assert_eq!(
        new.initialize("2025-06-18").status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(other.listen(None).status(), StatusCode::SERVICE_UNAVAILABLE);
    let sse = client()
        .get(server.url("/sse"))
        .header("accept", "text/event-stream")
        .send()
        .unwrap();
    assert_eq!(sse.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(sse.headers()["retry-after"], "1");
    // A notification belongs to work in flight: still taken.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "nothing-by-this-id"}});
    let r = other.post_raw(cancel.to_string()).send().unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);

    // The call started before the signal gets its real result.
    let (status, answer) = slow.join().unwrap();
    let answered = Instant::now();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["id"], "slow", "{answer}");
    assert_eq!(text_of(&answer), "slept 8000", "{answer}");
    // And the process ends soon after: it waited for the call, not for the deadline.
    let status = exit_within(&mut server.child, WAIT)
        .unwrap_or_else(|| panic!("manifold did not exit; stderr:\n{}", server.stderr()));
    assert!(status.success(), "{status}");
    assert!(signalled.elapsed() < Duration::from_secs(120));
    assert!(answered.elapsed() < WAIT);
    // The log's last lines may still be on their way from the exited process's pipe.
    eventually("the log says the drain ended", || {
        server.stderr().contains("drained")
    });
    let log = server.stderr();
    assert!(
        log.contains("refusing new requests; waiting for 1 in-flight (up to 120s)"),
        "{log}"
    );
}

#[test]
fn what_is_still_running_at_the_deadline_gets_an_error_and_the_process_exits() {
    let mut server = Server::start(&config("drain_timeout = \"2s\""));
    let host = server.ready_host();
    // Far longer than the test may take: only the drain's deadline can end it.
    let stuck = sleep_call(&host, "stuck", 600_000);
    // And one of the stateless era, which has no session to end.
    let stateless = {
        let body = json!({"jsonrpc": "2.0", "id": "stuck-too", "method": "tools/call",
            "params": {"name": "alpha__sleep", "arguments": {"ms": 600_000}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}}}});
        let request = client()
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "alpha__sleep")
            .body(body.to_string());
        std::thread::spawn(move || {
            let r = request.send().expect("an answer, not a dropped connection");
            (r.status(), messages_of(r).pop().unwrap_or(Value::Null))
        })
    };
    eventually("both calls are in flight", || in_flight(&server) == 2);

    send_signal(server.child.id(), "TERM");
    let signalled = Instant::now();
    for (call, id) in [(stuck, "stuck"), (stateless, "stuck-too")] {
        let (status, answer) = call.join().unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(code(&answer), -32010, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("shutting down"),
            "{answer}"
        );
    }
    // Not before the deadline, and no hang after it.
    assert!(signalled.elapsed() >= Duration::from_millis(1500));
    let status = exit_within(&mut server.child, WAIT)
        .unwrap_or_else(|| panic!("manifold did not exit; stderr:\n{}", server.stderr()));
    assert!(status.success(), "{status}");
    let log = server.stderr();
    assert!(
        log.contains("drain deadline reached with 2 requests unanswered"),
        "{log}"
    );
}
