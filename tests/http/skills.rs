//! Skills through the merge over HTTP: a Streamable HTTP host and a stateless host see the
//! skills of a stdio upstream and of an HTTP upstream (each era) under their own URIs, read
//! their files verified, and a stateless host's skills answers carry caching hints.

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;
use manifold_testkit::skills::{bytes_of, sha256};

const MODERN: &str = "2026-07-28";

/// Every skill, page after page, asked with `ask`.
fn all_skills(ask: &mut dyn FnMut(Value) -> Value) -> Vec<Value> {
    let mut skills = Vec::new();
    let mut params = json!({});
    loop {
        let page = ask(params);
        skills.extend(
            page["result"]["skills"]
                .as_array()
                .expect("skills")
                .iter()
                .cloned(),
        );
        match page["result"]["nextCursor"].as_str() {
            Some(next) => params = json!({ "cursor": next }),
            None => return skills,
        }
    }
}

/// Reads every file of `skill` with `ask` and checks it against the entry.
fn assert_files_match(skill: &Value, ask: &mut dyn FnMut(&str) -> Value) {
    for file in skill["resources"].as_array().unwrap() {
        let uri = file["uri"].as_str().unwrap();
        let read = ask(uri);
        assert_eq!(read["result"]["contents"][0]["uri"], uri, "{read}");
        let bytes = bytes_of(&read);
        assert_eq!(bytes.len() as u64, file["size"].as_u64().unwrap(), "{uri}");
        assert_eq!(sha256(&bytes), file["digest"], "{uri}");
    }
}

fn config(remote: &FixtureHttp) -> String {
    format!(
        "{}{}",
        fixture_upstream("alpha", &["--name", "alpha", "--skills"]),
        format_args!("[upstreams.remote]\nurl = {:?}\n", remote.url("/mcp"))
    )
}

#[test]
fn a_streamable_http_host_gets_skills_of_stdio_and_http_upstreams() {
    let remote = FixtureHttp::start(0, &["--name", "remote", "--skills", "--era", "dual"]);
    let server = Server::start(&config(&remote));
    let mut host = server.ready_host();
    let skills = all_skills(&mut |params| host.request("skills/list", params));
    let mut uris: Vec<&str> = skills.iter().map(|s| s["uri"].as_str().unwrap()).collect();
    uris.sort();
    assert_eq!(
        uris,
        [
            "skill://alpha/docs/writing/SKILL.md",
            "skill://alpha/pdf/SKILL.md",
            "skill://alpha/review/SKILL.md",
            "skill://remote/docs/writing/SKILL.md",
            "skill://remote/pdf/SKILL.md",
            "skill://remote/review/SKILL.md",
        ]
    );
    let got = host.request("skills/get", json!({"uri": "skill://remote/pdf/SKILL.md"}));
    let skill = got["result"]["skill"].clone();
    assert_eq!(skill["uri"], "skill://remote/pdf/SKILL.md", "{got}");
    assert_files_match(&skill, &mut |uri| {
        host.request("resources/read", json!({"uri": uri}))
    });
    let dir = host.request(
        "resources/directory/read",
        json!({"uri": "skill://remote/docs/writing/"}),
    );
    assert_eq!(
        dir["result"]["resources"][1]["uri"], "skill://remote/docs/writing/references/",
        "{dir}"
    );
    let unknown = host.request(
        "skills/get",
        json!({"uri": "skill://remote/nosuch/SKILL.md"}),
    );
    assert_eq!(code(&unknown), -32602, "{unknown}");
}

#[test]
fn a_stateless_host_gets_skills_with_caching_hints_over_http() {
    let remote = FixtureHttp::start(
        0,
        &[
            "--name",
            "remote",
            "--skills",
            "--era",
            "stateless",
            "--ttl-ms",
            "20000",
        ],
    );
    let server = Server::start(&config(&remote));
    let client = client();
    let mut id = 0;
    let mut ask = |method: &str, mut params: Value| -> Value {
        id += 1;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut r = client
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", method);
        if method == "resources/read" {
            r = r.header("mcp-name", body["params"]["uri"].as_str().unwrap());
        }
        let r = r.body(body.to_string()).send().unwrap();
        let status = r.status();
        let answer: Value = r.json().unwrap();
        assert!(status == StatusCode::OK || code(&answer) != 0, "{answer}");
        answer
    };
    let page = ask("skills/list", json!({}));
    assert_eq!(page["result"]["resultType"], "complete", "{page}");
    assert!(
        page["result"]["ttlMs"].as_u64().unwrap() <= 20_000,
        "{page}"
    );
    assert!(page["result"]["cacheScope"].is_string(), "{page}");
    let skills = all_skills(&mut |params| ask("skills/list", params));
    assert_eq!(skills.len(), 6);
    let got = ask("skills/get", json!({"uri": "skill://remote/pdf/SKILL.md"}));
    assert!(got["result"]["ttlMs"].is_u64(), "{got}");
    assert!(got["result"]["cacheScope"].is_string(), "{got}");
    let skill = got["result"]["skill"].clone();
    assert_files_match(&skill, &mut |uri| {
        ask("resources/read", json!({"uri": uri}))
    });
    let unknown = ask(
        "skills/get",
        json!({"uri": "skill://remote/nosuch/SKILL.md"}),
    );
    assert_eq!(code(&unknown), -32602, "{unknown}");
}
