//! OpenAPI upstreams: a tiny description served by an HTTP server in the test becomes tools;
//! calls reach the service with their path, query and body, wrong arguments never do, error
//! answers are tool errors, and a description that fails to load fails its upstream alone.

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use manifold_testkit::process::*;
use manifold_testkit::rest::{read_request, reply, serve};
use manifold_testkit::stdio::Manifold;
use serde_json::{json, Value};

/// The description: `servers` is relative, so it is resolved against the description's URL.
fn description() -> Value {
    let object = json!({"type": "object"});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "pets", "version": "1"},
        "servers": [{"url": "/api"}],
        "paths": {
            "/pets/{petId}/notes": {
                "parameters": [{"name": "petId", "in": "path", "required": true,
                                "schema": {"type": "integer"}}],
                "post": {
                    "operationId": "addNote",
                    "summary": "Adds a note to a pet",
                    "parameters": [{"name": "verbose", "in": "query",
                                    "schema": {"type": "boolean"}}],
                    "requestBody": {"required": true, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["text"],
                                   "properties": {"text": {"type": "string"}}}}}},
                    "responses": {"200": {"description": "ok",
                        "content": {"application/json": {"schema": object}}}}
                }
            },
            "/pets/{petId}": {
                "delete": {"operationId": "deletePet",
                    "parameters": [{"name": "petId", "in": "path", "required": true,
                                    "schema": {"type": "integer"}}],
                    "responses": {"204": {"description": "gone"}}}
            },
            "/missing": {
                "get": {"operationId": "getMissing",
                    "responses": {"200": {"description": "ok",
                        "content": {"application/json": {"schema": object}}}}}
            }
        }
    })
}

/// Serves the description at `/openapi.json`, echoes every request under `/api/pets` as JSON,
/// and answers 404 to anything else; one request a connection, from a thread that lives as
/// long as the test process.
pub(super) fn service() -> String {
    counted_service().0
}

/// The same service, with how many times its description was fetched.
fn counted_service() -> (String, Arc<AtomicUsize>) {
    let fetched = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&fetched);
    (serve(move |stream| answer(stream, &count)), fetched)
}

fn answer(mut stream: TcpStream, fetched: &AtomicUsize) {
    let Some(request) = read_request(&mut stream) else {
        return;
    };
    let (status, text) = match request.path() {
        "/openapi.json" => {
            fetched.fetch_add(1, Ordering::SeqCst);
            ("200 OK", description().to_string())
        }
        p if p.starts_with("/api/pets") => {
            let body: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
            let echo = json!({"method": request.method, "path": p, "query": request.query(),
                "body": body});
            ("200 OK", echo.to_string())
        }
        _ => ("404 Not Found", r#"{"message":"no such thing"}"#.to_owned()),
    };
    reply(&mut stream, status, "application/json", &text);
}

pub(super) fn config(base: &str) -> String {
    format!("[upstreams.pets]\nopenapi = \"{base}/openapi.json\"\nexclude = [\"operationId:deletePet\"]\n")
}

fn call(m: &mut Manifold, name: &str, arguments: Value) -> Value {
    m.request("tools/call", json!({"name": name, "arguments": arguments}))
}

#[test]
fn openapi_operations_are_tools_and_a_call_sends_path_query_and_body() {
    let base = service();
    let mut m = Manifold::ready(&config(&base));
    let list = m.request("tools/list", json!({}));
    let mut names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["pets__addNote", "pets__getMissing"], "{list}");
    let args = json!({"petId": 7, "verbose": true, "body": {"text": "hi"}});
    let r = call(&mut m, "pets__addNote", args);
    let echo = &r["result"]["structuredContent"];
    assert_eq!(echo["method"], "POST", "{r}");
    assert_eq!(echo["path"], "/api/pets/7/notes", "{r}");
    assert_eq!(echo["query"], "verbose=true", "{r}");
    assert_eq!(echo["body"], json!({"text": "hi"}), "{r}");
}

#[test]
fn openapi_wrong_argument_is_invalid_params_and_a_404_is_a_tool_error() {
    let base = service();
    let mut m = Manifold::ready(&config(&base));
    let r = call(
        &mut m,
        "pets__addNote",
        json!({"petId": "seven", "body": {"text": "x"}}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("petId"),
        "{r}"
    );
    let r = call(&mut m, "pets__getMissing", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r).contains("404"), "{r}");
}

#[test]
fn openapi_description_that_fails_to_load_fails_its_upstream_alone() {
    let dir = TempDir::new("openapi-missing");
    let text = format!(
        "[upstreams.pets]\nopenapi = \"nowhere.yaml\"\n{}",
        named_fixture("alpha")
    );
    let config = dir.write("c.toml", &text);
    let (code, out, err) = run_manifold(&["check", "--config", config.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(out.contains("alpha__echo -> alpha:echo"), "{out}");
    assert!(
        err.contains("upstreams.pets: ") && err.contains("nowhere.yaml"),
        "{out}{err}"
    );
    let mut m = Manifold::ready(&text);
    let list = m.request("tools/list", json!({}));
    assert!(list.to_string().contains("alpha__echo"), "{list}");
    assert!(m.stderr().contains("nowhere.yaml"), "{}", m.stderr());
}

#[test]
fn check_lists_openapi_tools_and_each_skipped_operation_with_why() {
    let base = service();
    let dir = TempDir::new("openapi-check");
    let config = dir.write("c.toml", &config(&base));
    let (code, out, err) = run_manifold(&["check", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    // Each tool line says the operation the tool makes.
    assert!(
        out.contains("pets__addNote -> pets:addNote  [POST /pets/{petId}/notes]"),
        "{out}"
    );
    // The filter reads as the config wrote it.
    assert!(
        out.contains("(deletePet): skipped (excluded by \"operationId:deletePet\")"),
        "{out}"
    );
}

#[test]
fn check_fetches_an_openapi_description_once() {
    let (base, fetched) = counted_service();
    let dir = TempDir::new("openapi-check-once");
    let config = dir.write("c.toml", &config(&base));
    let (code, out, err) = run_manifold(&["check", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    // The tools, the skipped operation and the schemes all come from the one load.
    assert!(out.contains("pets__addNote -> pets:addNote"), "{out}");
    assert!(out.contains("(deletePet): skipped"), "{out}");
    assert_eq!(fetched.load(Ordering::SeqCst), 1, "{out}{err}");
}
