//! OpenAPI upstreams facing a misbehaving service: one that does not answer in time, answers a
//! body over the cap, redirects to another origin, or answers HTML where its description
//! promised JSON. Each is a tool error that says what happened, and the other upstreams (an
//! MCP one and another OpenAPI one) keep serving.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use manifold_testkit::process::*;
use manifold_testkit::stdio::Manifold;
use serde_json::{json, Value};

use super::openapi::service;
use manifold_testkit::rest::{read_request, Request};

/// The cap on answers the faulty upstream is configured with.
const CAP: usize = 1000;
/// How long the slow operation keeps its caller waiting: far past the upstream's timeout.
const SLOW: Duration = Duration::from_secs(60);

/// Every operation promises a JSON object; `getAway` takes where it redirects to.
fn description() -> Value {
    let ok = json!({"200": {"description": "ok",
        "content": {"application/json": {"schema": {"type": "object"}}}}});
    let op = |id: &str| json!({"get": {"operationId": id, "responses": ok}});
    let mut away = op("getAway");
    away["get"]["parameters"] = json!([{"name": "to", "in": "query", "required": true,
                                        "schema": {"type": "string"}}]);
    json!({
        "openapi": "3.0.3",
        "info": {"title": "faulty", "version": "1"},
        "paths": {"/slow": op("getSlow"), "/huge": op("getHuge"), "/away": away,
                  "/html": op("getHtml"), "/fine": op("getFine")}
    })
}

/// The faulty service: each connection on a thread of its own, so that the slow answer holds
/// back no other.
fn faulty() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || misbehave(stream));
        }
    });
    format!("http://{addr}")
}

fn misbehave(mut stream: TcpStream) {
    let Some(Request { target, .. }) = read_request(&mut stream) else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (status, content_type, body, extra) = match path {
        "/openapi.json" => (
            200,
            "application/json",
            description().to_string(),
            String::new(),
        ),
        "/slow" => {
            std::thread::sleep(SLOW);
            (200, "application/json", "{}".to_owned(), String::new())
        }
        "/huge" => {
            let text = json!({"data": "x".repeat(5 * CAP)}).to_string();
            (200, "application/json", text, String::new())
        }
        "/away" => {
            let to = query
                .strip_prefix("to=")
                .unwrap_or_default()
                .replace("%3A", ":");
            let location = format!("Location: http://{to}/fine\r\n");
            (302, "text/plain", String::new(), location)
        }
        "/html" => {
            let page = "<html><body>Please sign in</body></html>".to_owned();
            (200, "text/html; charset=utf-8", page, String::new())
        }
        "/fine" => (
            200,
            "application/json",
            r#"{"ok":true}"#.to_owned(),
            String::new(),
        ),
        _ => (404, "application/json", "{}".to_owned(), String::new()),
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

/// Another origin, which only counts the requests it gets.
fn elsewhere() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                Content-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
        }
    });
    (addr.to_string(), hits)
}

fn config(faulty: &str, pets: &str) -> String {
    format!(
        "[upstreams.faulty]\nopenapi = \"{faulty}/openapi.json\"\nbase_url = \"{faulty}\"\n\
         timeout = \"1s\"\nmax_response_bytes = {CAP}\n\n{}{}",
        super::openapi::config(pets),
        named_fixture("alpha")
    )
}

/// A tool error whose text has every one of `needles`.
fn assert_tool_error(r: &Value, needles: &[&str]) {
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = text_of(r);
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
}

/// The MCP upstream, the other OpenAPI upstream and the faulty one's sound operation serve.
fn others_serve(m: &mut Manifold) {
    assert_eq!(
        text_of(&m.call("alpha__echo", json!({"text": "still"}))),
        "still"
    );
    let r = m.call("pets__addNote", json!({"petId": 1, "body": {"text": "t"}}));
    assert_eq!(
        r["result"]["structuredContent"]["path"], "/api/pets/1/notes",
        "{r}"
    );
    let r = m.call("faulty__getFine", json!({}));
    assert_eq!(r["result"]["structuredContent"], json!({"ok": true}), "{r}");
}

#[test]
fn openapi_service_that_does_not_answer_in_time_is_a_tool_error() {
    let mut m = Manifold::ready(&config(&faulty(), &service()));
    let r = m.call("faulty__getSlow", json!({}));
    assert_tool_error(&r, &["GET /slow", "did not answer in time"]);
    others_serve(&mut m);
}

#[test]
fn openapi_answer_over_the_cap_is_cut_with_a_note() {
    let mut m = Manifold::ready(&config(&faulty(), &service()));
    let r = m.call("faulty__getHuge", json!({}));
    assert_tool_error(&r, &[&format!("longer than the cap of {CAP} bytes"), "cut"]);
    let text = text_of(&r);
    // Only the cap's worth was read, so the note claims no total size it never saw.
    assert!(!text.contains(&format!("{} bytes,", CAP + 1)), "{text}");
    assert!(text.len() < 2 * CAP, "{} bytes: {text}", text.len());
    others_serve(&mut m);
}

#[test]
fn openapi_redirect_to_another_origin_is_not_followed() {
    let (other, hits) = elsewhere();
    let mut m = Manifold::ready(&config(&faulty(), &service()));
    let r = m.call("faulty__getAway", json!({"to": other}));
    assert_tool_error(
        &r,
        &["redirect", &format!("http://{other}/fine"), "not followed"],
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the other origin was asked");
    others_serve(&mut m);
}

#[test]
fn openapi_html_where_json_was_promised_is_a_tool_error() {
    let mut m = Manifold::ready(&config(&faulty(), &service()));
    let r = m.call("faulty__getHtml", json!({}));
    assert_tool_error(&r, &["HTML where JSON was promised", "Please sign in"]);
    others_serve(&mut m);
}
