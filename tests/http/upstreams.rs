//! HTTP upstreams: Manifold reaching the fixture server over Streamable HTTP and over the
//! HTTP+SSE transport, for hosts on stdio; and an HTTP upstream that goes away, loses its
//! session, or comes back.

use std::time::Duration;

use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

fn http_upstream(key: &str, url: &str, transport: Option<&str>) -> String {
    let mut s = format!("[upstreams.{key}]\nurl = {url:?}\n");
    if let Some(t) = transport {
        s.push_str(&format!("transport = {t:?}\n"));
    }
    s.push_str("restart_initial_backoff_ms = 100\nrestart_max_backoff_ms = 400\n");
    s
}

#[test]
fn a_stdio_host_reaches_http_upstreams_of_both_transports() {
    let up = FixtureHttp::start(0, &["--name", "remote"]);
    let config = format!(
        "{}\n{}\n{}",
        http_upstream("streamable", &up.url("/mcp"), Some("streamable-http")),
        http_upstream("legacy", &up.url("/sse"), Some("sse")),
        // No transport named: Streamable HTTP is tried first, and the fallback finds SSE.
        http_upstream("auto", &up.url("/sse"), None),
    );
    let mut m = Manifold::ready(&config);
    for key in ["streamable", "legacy", "auto"] {
        let text = format!("over {key}");
        let r = m.call(&format!("{key}__echo"), json!({"text": text}));
        assert_eq!(text_of(&r), text, "{r}");
    }
    // Progress comes back with the host's token, over the POST's event stream.
    let id = m.send_request(
        "tools/call",
        json!({"name": "streamable__progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "host-token"}}),
    );
    let p = m.wait_for(|v| v["method"] == "notifications/progress");
    assert_eq!(p["params"]["progressToken"], "host-token", "{p}");
    assert_eq!(text_of(&m.response(&json!(id))), "progressed 2");
    // Resources keep their exposed URIs across HTTP.
    let r = m.request(
        "resources/read",
        json!({"uri": "legacy+fixture://remote/readme"}),
    );
    assert_eq!(
        r["result"]["contents"][0]["uri"], "legacy+fixture://remote/readme",
        "{r}"
    );
    // A notification on the session's GET stream (list_changed) refreshes the catalog.
    m.call("streamable__add_tool", json!({"name": "late"}));
    m.wait_for(|v| v["method"] == "notifications/tools/list_changed");
    eventually("the new tool is listed", || {
        m.all_tool_names().contains(&"streamable__late".to_owned())
    });
    assert_eq!(m.close(), Some(0));
    // Shutting down ends the upstream sessions (DELETE) rather than leaving them behind.
    eventually("the upstream saw its session deleted", || {
        up.stderr().contains("deleted")
    });
}

#[test]
fn an_unreachable_http_upstream_fails_fast_and_comes_back() {
    let mut up = FixtureHttp::start(0, &["--name", "remote"]);
    let config = format!(
        "{}\n{}",
        http_upstream("remote", &up.url("/mcp"), None),
        named_fixture("local"),
    );
    let mut m = Manifold::ready(&config);
    assert_eq!(text_of(&m.call("remote__echo", json!({"text": "a"}))), "a");
    up.kill();
    // Calls to it fail at once, naming it; its names stay listed; the others serve on.
    eventually("calls to the dead upstream fail", || {
        let r = m.call("remote__echo", json!({"text": "b"}));
        r.get("error").is_some()
    });
    let r = m.call("remote__echo", json!({"text": "c"}));
    assert_eq!(error_code(&r), -32010, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("remote"),
        "{r}"
    );
    assert!(m.all_tool_names().contains(&"remote__echo".to_owned()));
    assert_eq!(
        text_of(&m.call("local__echo", json!({"text": "fine"}))),
        "fine"
    );
    up.restart();
    eventually("the upstream is back", || {
        let r = m.call("remote__echo", json!({"text": "back"}));
        r.get("result").is_some()
    });
    m.assert_logged("cannot reach");
}

#[test]
fn an_upstream_that_lost_the_session_is_initialized_again() {
    let mut up = FixtureHttp::start(0, &["--name", "remote"]);
    let config = http_upstream("remote", &up.url("/mcp"), Some("streamable-http"));
    let mut m = Manifold::ready(&config);
    assert_eq!(text_of(&m.call("remote__echo", json!({"text": "a"}))), "a");
    // A new server on the same address knows nothing of the old session.
    up.restart();
    eventually("calls work again on a new session", || {
        let r = m.call("remote__echo", json!({"text": "again"}));
        r.get("result").is_some()
    });
    std::thread::sleep(Duration::from_millis(100));
    let log = m.stderr();
    assert!(
        log.contains("lost its session") || log.contains("cannot reach"),
        "{log}"
    );
}

/// How many connections Manifold opened to upstreams (each start, and each restart, opens one).
fn connections(log: &str) -> usize {
    lines_with(log, " connecting")
}

#[test]
fn an_upstream_without_a_session_or_get_stream_serves_without_restarts() {
    // As the conformance suite's session-era client mocks: POST only, no Mcp-Session-Id ever,
    // and the GET stream answered 404.
    let up = FixtureHttp::start(0, &["--name", "remote", "--no-get-stream"]);
    let config = http_upstream("remote", &up.url("/mcp"), None);
    let mut m = Manifold::ready(&config);
    eventually("the upstream refused the GET stream", || {
        up.stderr().contains("GET answered 404")
    });
    // No session was issued, so none was lost: the upstream has no stream, and serves on.
    for text in ["a", "b", "c"] {
        let r = m.call("remote__echo", json!({"text": text}));
        assert_eq!(text_of(&r), text, "{r}\n{}", m.stderr());
    }
    let seen = up.stderr();
    assert_eq!(
        seen.matches("initialize served without a session").count(),
        1,
        "one handshake, no restarts:\n{seen}"
    );
    let log = m.stderr();
    assert_eq!(connections(&log), 1, "{log}");
    assert!(!log.contains("lost its session"), "{log}");
}

#[test]
fn a_refused_probe_is_retried_once_at_the_revision_both_speak() {
    // As the conformance suite's request-metadata mock: the first request is refused with
    // -32022, whose data.supported lists the very revision Manifold asked for.
    let up = FixtureHttp::start(
        0,
        &[
            "--name",
            "remote",
            "--era",
            "stateless",
            "--refuse-first-version",
        ],
    );
    let config = http_upstream("remote", &up.url("/mcp"), None);
    let mut m = Manifold::ready(&config);
    let r = m.call("remote__echo", json!({"text": "a"}));
    assert_eq!(text_of(&r), "a", "{r}\n{}", m.stderr());
    let seen = up.stderr();
    assert!(
        seen.contains("server/discover refused: unsupported protocol version \"2026-07-28\""),
        "{seen}"
    );
    // The retry is a stateless-era request of that revision, in its header and its _meta.
    assert!(
        seen.contains(
            "after the version refusal: server/discover with MCP-Protocol-Version 2026-07-28 \
             and _meta 2026-07-28"
        ),
        "{seen}"
    );
    let log = m.stderr();
    assert_eq!(connections(&log), 1, "no restart: {log}");
}
