//! The result cache in front of a stateless-era upstream whose answers carry the caching
//! hints SDKs stamp on every result by default (`ttlMs: 0`, `cacheScope: "private"`): the
//! operator's rule outweighs them, and the entries it keeps are dropped by the
//! `notifications/resources/updated` of the upstream's `subscriptions/listen` stream. Teams
//! come from API keys; whether the upstream was reached is read from the fixture's own
//! `call_count`, and hits from `/metrics`.

use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const RED_KEY: &str = "red-hints-key-0123456789abcdef";
const GREEN_KEY: &str = "green-hints-key-0123456789abcdef";

const README: &str = "fx+fixture://fx/readme";
const README_UPSTREAM: &str = "fixture://fx/readme";

/// Teams red and green, an admin listener, and upstream `fx`: the fixture in the stateless
/// era only (found by the default `era = "auto"`), every answer saying it is stale at once
/// and private, with the operator's `resource_cache` of a minute shared by every team.
fn config() -> String {
    let upstream = fixture_upstream(
        "fx",
        &[
            "--name",
            "fx",
            "--hints",
            "--subscriptions",
            "--era",
            "stateless",
            "--ttl-ms",
            "0",
            "--cache-scope",
            "private",
        ],
    );
    format!(
        r#"[server]
admin = "127.0.0.1:0"

[teams.red]
api_keys = ["{RED_KEY}"]

[teams.green]
api_keys = ["{GREEN_KEY}"]

{upstream}resource_cache = {{ ttl = "60s", scope = "shared" }}
"#
    )
}

/// The resource cache's hits of upstream `fx`, summed over tiers (0 if none yet).
fn resource_hits(server: &Server) -> f64 {
    server.metric(
        "manifold_cache_hits_total",
        &[("cache", "resources"), ("upstream", "fx")],
    )
}

#[test]
fn an_operator_rule_outweighs_a_stateless_upstreams_default_hints() {
    let server = Server::start(&config());
    let mut red = server.ready_host_with_key(RED_KEY);
    let mut green = server.ready_host_with_key(GREEN_KEY);
    red.read(README);
    green.read(README);
    red.read(README);
    assert_eq!(
        red.reads_of("fx", README_UPSTREAM),
        1,
        "the second and third reads (by two teams) reached the upstream: its ttlMs 0 and \
         private scope outweighed the configured shared minute"
    );
    // Hits are counted around the answers: wait (bounded) for the figure to settle.
    eventually("two resource hits on /metrics", || {
        resource_hits(&server) == 2.0
    });
}

#[test]
fn a_resource_update_on_a_stateless_upstreams_listen_stream_drops_the_entry() {
    let server = Server::start(&config());
    let mut red = server.ready_host_with_key(RED_KEY);
    red.read(README);
    red.read(README);
    assert_eq!(
        red.reads_of("fx", README_UPSTREAM),
        1,
        "the second read was not a hit"
    );
    // The cache names the URI on the upstream's subscriptions/listen stream; once the stream
    // carries it, the fixture's touch reaches that stream.
    eventually("the listen stream names the cached URI", || {
        let r = red.call("fx__touch", json!({"uri": README_UPSTREAM}));
        text_of(&r) == "touched 1"
    });
    eventually("the update dropped the entry", || {
        red.read(README);
        red.reads_of("fx", README_UPSTREAM) >= 2
    });
    // Kept again after the fresh read.
    let after = red.reads_of("fx", README_UPSTREAM);
    red.read(README);
    assert_eq!(
        red.reads_of("fx", README_UPSTREAM),
        after,
        "the fresh answer was not kept"
    );
}
