//! Criterion benches for the work a converted call adds on each call: checking the arguments
//! and building the HTTP request (`Operation::request`), and turning the answer into a
//! `CallToolResult` (`Operation::map_response`). Loading and converting a description happen
//! once per start and are measured by `manifold-load openapi`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use manifold_openapi::{convert, load, Fetch, Operation, Options, DEFAULT_RESPONSE_CAP};
use serde_json::{json, Value};
use url::Url;

/// A repository-like service: a GET with path and query parameters, a POST with a JSON body.
const DESCRIPTION: &str = r##"{
  "openapi": "3.0.3",
  "servers": [{"url": "http://127.0.0.1:8080/api"}],
  "paths": {
    "/repos/{owner}/{repo}/issues": {
      "parameters": [
        {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}}
      ],
      "get": {
        "operationId": "issues/list-for-repo",
        "parameters": [
          {"name": "state", "in": "query", "schema": {"type": "string", "enum": ["open", "closed", "all"]}},
          {"name": "labels", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
          {"name": "per_page", "in": "query", "schema": {"type": "integer"}}
        ],
        "responses": {"200": {"description": "ok", "content": {"application/json": {
          "schema": {"type": "array", "items": {"$ref": "#/components/schemas/issue"}}}}}}
      },
      "post": {
        "operationId": "issues/create",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["title"],
          "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                         "labels": {"type": "array", "items": {"type": "string"}}}}}}},
        "responses": {"201": {"description": "made", "content": {"application/json": {
          "schema": {"$ref": "#/components/schemas/issue"}}}}}
      }
    }
  },
  "components": {"schemas": {"issue": {"type": "object", "properties": {
    "id": {"type": "integer"}, "number": {"type": "integer"}, "title": {"type": "string"},
    "state": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}}}}}
}"##;

struct NoFiles;

impl Fetch for NoFiles {
    fn fetch(&self, _url: &Url) -> Result<Vec<u8>, String> {
        Err("no external files".to_string())
    }
}

fn operations() -> (Operation, Operation) {
    let doc = load(
        DESCRIPTION.as_bytes(),
        "file:///bench/openapi.json",
        &NoFiles,
    )
    .unwrap();
    let mut tools = convert(&doc, &Options::default()).unwrap().tools;
    let create = tools.pop().unwrap();
    let list = tools.pop().unwrap();
    assert_eq!(
        (list.name.as_str(), create.name.as_str()),
        ("issues_list-for-repo", "issues_create")
    );
    (list, create)
}

/// An issue as the service answers it, about 230 bytes.
fn issue(number: u64) -> Value {
    json!({"id": 1_000_000 + number, "number": number, "title": "Login fails after the password reset",
           "state": "open", "labels": ["bug", "auth"], "user": {"login": "octocat", "id": 1},
           "comments": 3, "created_at": "2026-01-02T03:04:05Z"})
}

fn request_path(c: &mut Criterion) {
    let (list, create) = operations();
    let list_args = json!({"owner": "octocat", "repo": "hello world", "state": "open",
                           "labels": ["bug", "auth"], "per_page": 5});
    let create_args = json!({"owner": "octocat", "repo": "hello-world",
                             "body": {"title": "Login fails", "body": "After a reset.", "labels": ["bug"]}});
    let built = list.request(&list_args).unwrap();
    assert_eq!(
        built.url,
        "http://127.0.0.1:8080/api/repos/octocat/hello%20world/issues?state=open&labels=bug&labels=auth&per_page=5"
    );
    c.bench_function("request: GET, 2 path + 3 query parameters", |b| {
        b.iter(|| black_box(list.request(black_box(&list_args)).unwrap()))
    });
    c.bench_function("request: POST, 2 path parameters + JSON body", |b| {
        b.iter(|| black_box(create.request(black_box(&create_args)).unwrap()))
    });
}

fn response_path(c: &mut Criterion) {
    let (list, create) = operations();
    let one = serde_json::to_vec(&issue(7)).unwrap();
    let thirty = serde_json::to_vec(&(1..=30).map(issue).collect::<Vec<_>>()).unwrap();
    let ct = Some("application/json; charset=utf-8");
    let mapped: serde_json::Value =
        serde_json::from_str(&list.map_response(200, ct, &thirty, DEFAULT_RESPONSE_CAP)).unwrap();
    assert_eq!(
        mapped["structuredContent"]["result"]
            .as_array()
            .map(Vec::len),
        Some(30)
    );
    c.bench_function(
        &format!("map_response: JSON object, {} B", one.len()),
        |b| {
            b.iter(|| {
                black_box(create.map_response(201, ct, black_box(&one), DEFAULT_RESPONSE_CAP))
            })
        },
    );
    c.bench_function(
        &format!("map_response: JSON array of 30, {} B", thirty.len()),
        |b| {
            b.iter(|| {
                black_box(list.map_response(200, ct, black_box(&thirty), DEFAULT_RESPONSE_CAP))
            })
        },
    );
    let error = br#"{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}"#;
    c.bench_function("map_response: 404 with a JSON body", |b| {
        b.iter(|| black_box(list.map_response(404, ct, black_box(error), DEFAULT_RESPONSE_CAP)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = request_path, response_path
}
criterion_main!(benches);
