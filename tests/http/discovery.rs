//! Tool discovery over Streamable HTTP against fixture upstreams: settings a host chooses at
//! `initialize`, `find_tools` only in search mode, a schema budget, and the counters on
//! `/metrics`. (The official SDK client drives the whole flow in tests/interop.)

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

fn config(discovery: &str) -> String {
    format!("{discovery}\n{}", two_fixtures())
}

#[test]
fn a_host_chooses_its_own_settings_at_initialize() {
    let server = Server::start(&config(
        "[discovery]\nmode = \"search\"\npinned = [\"alpha__echo\"]\n",
    ));
    let mut searching = server.ready_host();
    assert_eq!(searching.tool_names(), ["alpha__echo", "find_tools"]);
    // Off for this session: the whole view, and find_tools is nobody's.
    let mut whole = server.host();
    let r =
        whole.initialize_with_meta("2025-06-18", json!({"manifold/discovery": {"mode": "off"}}));
    assert_eq!(r.status(), StatusCode::OK);
    let all = whole.tool_names();
    assert!(
        all.len() > 20 && !all.contains(&"find_tools".to_owned()),
        "{all:?}"
    );
    let r = whole.call("find_tools", json!({"query": "echo"}));
    assert_eq!(code(&r), -32602, "{r}");
    // A budget of one found tool.
    let mut one = server.host();
    let meta = json!({"manifold/discovery": {"max_tools": 2}});
    assert_eq!(
        one.initialize_with_meta("2025-06-18", meta).status(),
        StatusCode::OK
    );
    let r = one.call("find_tools", json!({"query": "add two numbers", "k": 3}));
    let found = &r["result"]["structuredContent"];
    assert_eq!(found["tools"].as_array().unwrap().len(), 3, "{r}");
    assert_eq!(found["added"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        one.tool_names().len(),
        3,
        "alpha__echo, one found, find_tools"
    );
    // Settings that make no sense are refused with what is wrong.
    let mut bad = server.host();
    let r = bad.initialize_with_meta("2025-06-18", json!({"manifold/discovery": {"mode": "all"}}));
    let v: Value = r.json().unwrap();
    assert_eq!(code(&v), -32602, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("mode"),
        "{v}"
    );
}

#[test]
fn a_host_may_choose_search_where_the_configuration_has_none() {
    let server = Server::start(&config(""));
    let mut whole = server.ready_host();
    let all = whole.tool_names();
    assert!(
        all.len() > 20 && !all.contains(&"find_tools".to_owned()),
        "{all:?}"
    );
    let mut searching = server.host();
    let meta = json!({"manifold/discovery": {"mode": "search", "pinned": ["alpha__echo"]}});
    assert_eq!(
        searching.initialize_with_meta("2025-06-18", meta).status(),
        StatusCode::OK
    );
    assert_eq!(searching.tool_names(), ["alpha__echo", "find_tools"]);
    let r = searching.call("find_tools", json!({"query": "add two numbers", "k": 1}));
    assert_eq!(
        r["result"]["structuredContent"]["added"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{r}"
    );
    assert_eq!(
        searching.tool_names().len(),
        3,
        "alpha__echo, one found, find_tools"
    );
    // The other session still lists the whole catalog.
    assert_eq!(whole.tool_names(), all);
}

#[test]
fn a_schema_budget_and_the_counters_on_metrics() {
    let server = Server::start(&config(
        "[discovery]\nmode = \"search\"\nmax_schema_bytes = 1024\n",
    ));
    let mut host = server.ready_host();
    let r = host.call("find_tools", json!({"query": "echo text back", "k": 10}));
    assert!(r["result"]["isError"] == false, "{r}");
    let listed = host.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    let bytes: usize = tools
        .iter()
        .filter(|t| t["name"] != "find_tools")
        .map(|t| t.to_string().len())
        .sum();
    assert!(
        bytes <= 1024 && tools.len() > 1,
        "{bytes} bytes in {listed}"
    );
    let r = host.call("find_tools", json!({"k": 3}));
    assert_eq!(code(&r), -32602, "{r}");
    let metrics = get_text(&server.url("/metrics"));
    for line in [
        "manifold_discovery_searches_total{team=\"anonymous\"} 1",
        "manifold_discovery_list_bytes_total{team=\"anonymous\",listing=\"served\"}",
        "manifold_discovery_list_bytes_total{team=\"anonymous\",listing=\"full\"}",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}
