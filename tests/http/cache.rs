//! The result cache across HTTP sessions: concurrent identical calls from two hosts cost one
//! upstream call, an entry is its team's own unless shared, and a shared entry never serves a
//! team that may not see the tool. Teams come from API keys; whether the upstream was reached
//! is read from the fixture's own `call_count` (a hit never reaches it).

use std::sync::Barrier;

use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const RED_KEY: &str = "red-cache-key-0123456789abcdef";
const GREEN_KEY: &str = "green-cache-key-0123456789abcdef";
const BLUE_KEY: &str = "blue-cache-key-0123456789abcdef";

/// Teams red and green, which see every tool, and blue, which may not see `fx__echo`; then
/// upstream `fx`, the fixture with `--hints`, followed by `settings`.
fn config(settings: &str) -> String {
    format!(
        r#"[teams.red]
api_keys = ["{RED_KEY}"]

[teams.green]
api_keys = ["{GREEN_KEY}"]

[teams.blue]
api_keys = ["{BLUE_KEY}"]
tools = {{ exclude = ["fx__echo"] }}

{}{settings}"#,
        fixture_upstream("fx", &["--name", "fx", "--hints"])
    )
}

#[test]
fn two_sessions_calling_at_once_cost_one_upstream_call() {
    let server = Server::start(&config("[upstreams.fx.tool_cache.sleep]\nttl = \"60s\"\n"));
    let mut hosts = [
        server.ready_host_with_key(RED_KEY),
        server.ready_host_with_key(RED_KEY),
    ];
    let start = Barrier::new(hosts.len());
    std::thread::scope(|s| {
        for host in &mut hosts {
            let start = &start;
            s.spawn(move || {
                start.wait();
                let r = host.call("fx__sleep", json!({"ms": 1000}));
                assert_eq!(text_of(&r), "slept 1000", "{r}");
            });
        }
    });
    assert_eq!(
        hosts[0].calls_of("fx", "sleep"),
        1,
        "two sessions' identical calls were not coalesced"
    );
}

#[test]
fn a_team_scoped_entry_serves_only_its_own_team() {
    let server = Server::start(&config("cache = { ttl = \"60s\" }\n"));
    let mut red = server.ready_host_with_key(RED_KEY);
    let mut green = server.ready_host_with_key(GREEN_KEY);
    red.echo("fx__echo", "x");
    red.echo("fx__echo", "x");
    assert_eq!(red.calls_of("fx", "echo"), 1, "red's second call missed");
    green.echo("fx__echo", "x");
    assert_eq!(red.calls_of("fx", "echo"), 2, "green got red's entry");
    green.echo("fx__echo", "x");
    assert_eq!(red.calls_of("fx", "echo"), 2, "green's second call missed");
}

#[test]
fn a_shared_entry_serves_every_team_that_may_see_the_tool() {
    let server = Server::start(&config("cache = { ttl = \"60s\", scope = \"shared\" }\n"));
    let mut red = server.ready_host_with_key(RED_KEY);
    let mut green = server.ready_host_with_key(GREEN_KEY);
    let mut blue = server.ready_host_with_key(BLUE_KEY);
    red.echo("fx__echo", "x");
    green.echo("fx__echo", "x");
    assert_eq!(
        red.calls_of("fx", "echo"),
        1,
        "green missed red's shared entry"
    );
    // Blue may not see the tool: answered as for a tool that does not exist.
    let unknown = blue.call("fx__no_such_tool", json!({"text": "x"}));
    let hidden = blue.call("fx__echo", json!({"text": "x"}));
    let error = |r: &Value, name: &str| {
        let error = r
            .get("error")
            .unwrap_or_else(|| panic!("not an error: {r}"));
        error.to_string().replace(name, "NAME")
    };
    assert_eq!(
        error(&hidden, "fx__echo"),
        error(&unknown, "fx__no_such_tool"),
        "a hidden tool was answered from the shared entry or otherwise than an unknown one"
    );
    assert_eq!(red.calls_of("fx", "echo"), 1);
}
