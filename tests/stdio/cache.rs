//! The result cache over stdio, in front of the fixture with `--hints`: what is kept (by
//! annotations or by name) and what never is (errors, timeouts, answers that came with
//! progress or a request to the host, tasks, oversized arguments), hits answered with the
//! caller's own id, canonical arguments, expiry, the byte budget, coalescing, the host's
//! `manifold/cache` directive, invalidation (resource updates, restarts, list_changed),
//! upstream subscriptions shared with hosts, limits before the cache, config mistakes, and the
//! cache's metrics. Whether the upstream was reached is read from the fixture's own
//! `call_count`: a hit never reaches it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use manifold_testkit::process::*;

/// `cache` on the upstream: its read-only, closed-world tools are kept a minute.
const CACHED: &str = "cache = { ttl = \"60s\" }\n";
/// `resource_cache` on the upstream: its resources/read answers are kept a minute.
const RESOURCES_CACHED: &str = "resource_cache = { ttl = \"60s\" }\n";

const README: &str = "fx+fixture://fx/readme";
const README_UPSTREAM: &str = "fixture://fx/readme";

/// `global` (tables such as `[cache]`), then upstream `fx`, the fixture with `--hints` and
/// `flags`, followed by `settings`: keys of `[upstreams.fx]`, then any tables.
fn config(global: &str, flags: &[&str], settings: &str) -> String {
    let mut args = vec!["--name", "fx", "--hints"];
    args.extend_from_slice(flags);
    format!("{global}\n{}{settings}", fixture_upstream("fx", &args))
}

/// Manifold serving `config(global, flags, settings)` to a host that completed the handshake.
fn serve(global: &str, flags: &[&str], settings: &str) -> Manifold {
    Manifold::ready(&config(global, flags, settings))
}

/// `[upstreams.fx.tool_cache.TOOL]` with `ttl`.
fn tool_cache(tool: &str, ttl: &str) -> String {
    format!("[upstreams.fx.tool_cache.{tool}]\nttl = \"{ttl}\"\n")
}

/// A tools/call of `tool` (exposed name) whose `params._meta` is `meta`.
fn call_with_meta(m: &mut Manifold, tool: &str, args: Value, meta: Value) -> Value {
    m.request(
        "tools/call",
        json!({"name": tool, "arguments": args, "_meta": meta}),
    )
}

#[test]
fn a_repeated_call_is_answered_from_the_cache_with_the_callers_own_id() {
    let mut m = serve("", &[], CACHED);
    m.keep_raw_responses();
    let params = json!({"name": "fx__echo", "arguments": {"text": "hi"}});
    let first_id = m.send_request("tools/call", params.clone());
    let first = m.raw_response(&json!(first_id));
    let second_id = m.send_request("tools/call", params);
    let second = m.raw_response(&json!(second_id));
    assert_eq!(
        m.calls_of("fx", "echo"),
        1,
        "the second call reached the upstream"
    );
    let renumbered = first.replacen(
        &format!("\"id\":{first_id}"),
        &format!("\"id\":{second_id}"),
        1,
    );
    assert_ne!(renumbered, first, "no id {first_id} in {first}");
    assert_eq!(
        second, renumbered,
        "a hit is the stored answer byte for byte, under the caller's id"
    );
}

#[test]
fn arguments_hit_in_any_key_order_and_spacing_and_other_arguments_miss() {
    let mut m = serve("", &[], CACHED);
    // `progress` without a progressToken sends no progress; it ignores `opts`.
    let args = json!({"steps": 2, "interval_ms": 0, "opts": {"a": 1, "b": [1, {"c": 2, "d": 3}]}});
    assert_eq!(
        text_of(&m.call("fx__progress", args.clone())),
        "progressed 2"
    );
    assert_eq!(m.calls_of("fx", "progress"), 1);
    // The same arguments, keys in another order at every depth, spaces and tabs between.
    m.send_raw(
        "{\"jsonrpc\":\"2.0\",\"id\":\"reordered\",\"method\":\"tools/call\",\"params\":{\"arguments\":\
         { \"opts\" : {\"b\":[1,{\"d\":3,\t\"c\":2}], \"a\":1},\t\"interval_ms\": 0 , \"steps\":2 },\
         \"name\":\"fx__progress\"}}",
    );
    let reordered = m.response(&json!("reordered"));
    assert_eq!(text_of(&reordered), "progressed 2", "{reordered}");
    assert_eq!(
        m.calls_of("fx", "progress"),
        1,
        "reordered arguments missed"
    );
    // `_meta` is not part of the key.
    let r = call_with_meta(&mut m, "fx__progress", args.clone(), json!({"note": "x"}));
    assert_eq!(text_of(&r), "progressed 2");
    assert_eq!(m.calls_of("fx", "progress"), 1, "another _meta missed");
    // Other arguments are other entries.
    let mut other = args.clone();
    other["opts"]["b"][1]["d"] = json!(4);
    m.call("fx__progress", other);
    assert_eq!(m.calls_of("fx", "progress"), 2, "a nested difference hit");
    m.call("fx__progress", json!({"steps": 2, "interval_ms": 0}));
    assert_eq!(m.calls_of("fx", "progress"), 3, "fewer arguments hit");
    m.call(
        "fx__progress",
        json!({"steps": 3, "interval_ms": 0, "opts": args["opts"]}),
    );
    assert_eq!(m.calls_of("fx", "progress"), 4, "another value hit");
}

#[test]
fn the_upstream_cache_keeps_only_read_only_closed_world_tools() {
    let mut m = serve("", &[], CACHED);
    for _ in 0..2 {
        m.echo("fx__echo", "hi");
        // Read-only but open-world, explicitly and by default.
        m.call("fx__whoami", json!({}));
        assert_eq!(text_of(&m.call("fx__add", json!({"a": 1, "b": 2}))), "3");
        // Not read-only.
        m.call("fx__log", json!({"message": "m"}));
    }
    assert_eq!(m.calls_of("fx", "echo"), 1, "echo was not cached");
    assert_eq!(
        m.calls_of("fx", "whoami"),
        2,
        "whoami (open-world) was cached"
    );
    assert_eq!(
        m.calls_of("fx", "add"),
        2,
        "add (open-world by default) was cached"
    );
    assert_eq!(m.calls_of("fx", "log"), 2, "log (not read-only) was cached");
}

#[test]
fn a_tool_named_in_tool_cache_is_kept_whatever_its_hints() {
    let settings = format!(
        "{}{}",
        tool_cache("whoami", "60s"),
        tool_cache("add", "60s")
    );
    let mut m = serve("", &[], &settings);
    for _ in 0..2 {
        m.echo("fx__echo", "hi");
        m.call("fx__whoami", json!({}));
        assert_eq!(text_of(&m.call("fx__add", json!({"a": 1, "b": 2}))), "3");
    }
    assert_eq!(m.calls_of("fx", "whoami"), 1, "whoami was not cached");
    assert_eq!(m.calls_of("fx", "add"), 1, "add was not cached");
    // Without `cache` on the upstream, its read-only tools are not kept.
    assert_eq!(m.calls_of("fx", "echo"), 2, "echo was cached");
}

#[test]
fn an_entry_expires_after_its_ttl() {
    let mut m = serve("", &[], "cache = { ttl = \"1s\" }\n");
    m.echo("fx__echo", "x");
    m.echo("fx__echo", "x");
    assert_eq!(m.calls_of("fx", "echo"), 1, "not cached before its ttl");
    std::thread::sleep(Duration::from_millis(2500));
    m.echo("fx__echo", "x");
    assert_eq!(
        m.calls_of("fx", "echo"),
        2,
        "still cached well past its ttl"
    );
}

#[test]
fn the_byte_budget_evicts_the_least_recently_used_entry() {
    // Room for two 40 kB results, not three: in the budget of every cache, or one's own.
    let budgets = [
        ("[cache]\nmax_bytes = \"100KiB\"\n", CACHED),
        ("", "cache = { ttl = \"60s\", max_bytes = \"100KiB\" }\n"),
    ];
    for (global, settings) in budgets {
        let mut m =
            Manifold::ready_args(&config(global, &[], settings), &["--admin", "127.0.0.1:0"]);
        let big = |m: &mut Manifold, bytes: usize| {
            let r = m.call("fx__big", json!({"bytes": bytes}));
            assert_eq!(text_of(&r).len(), bytes);
        };
        big(&mut m, 40_000);
        big(&mut m, 40_001);
        big(&mut m, 40_001);
        let kept = m.calls_of("fx", "big");
        assert_eq!(kept, 2, "a result that fits was not kept ({settings})");
        big(&mut m, 40_002);
        assert_eq!(m.calls_of("fx", "big"), 3);
        // The store evicts when it next does its pending work, which a small call of
        // another key gets it to do; touching the big results before then would make the
        // one touched the most recently used.
        let by_size = [("cache", "tools"), ("cause", "size")];
        eventually(&format!("an entry was evicted ({settings})"), || {
            m.echo("fx__echo", "tick");
            manifold_testkit::metrics::sum(&m.scrape(), "manifold_cache_evictions_total", &by_size)
                >= 1.0
        });
        big(&mut m, 40_000);
        assert_eq!(
            m.calls_of("fx", "big"),
            4,
            "the least recently used result was kept ({settings})"
        );
        big(&mut m, 40_002);
        assert_eq!(
            m.calls_of("fx", "big"),
            4,
            "the newest result was evicted ({settings})"
        );
    }
}

#[test]
fn arguments_over_max_argument_bytes_are_never_cached() {
    let mut m = serve("[cache]\nmax_argument_bytes = 100\n", &[], CACHED);
    let long = "x".repeat(200);
    m.echo("fx__echo", &long);
    m.echo("fx__echo", &long);
    assert_eq!(
        m.calls_of("fx", "echo"),
        2,
        "oversized arguments were cached"
    );
    m.echo("fx__echo", "short");
    m.echo("fx__echo", "short");
    assert_eq!(
        m.calls_of("fx", "echo"),
        3,
        "small arguments were not cached"
    );
}

#[test]
fn concurrent_identical_calls_cost_one_upstream_call() {
    let mut m = serve("", &[], &tool_cache("sleep", "60s"));
    let ids: Vec<u64> = (0..8)
        .map(|_| {
            m.send_request(
                "tools/call",
                json!({"name": "fx__sleep", "arguments": {"ms": 1000}}),
            )
        })
        .collect();
    // Each answer under its own id.
    for id in ids {
        let r = m.response(&json!(id));
        assert_eq!(text_of(&r), "slept 1000", "{r}");
    }
    assert_eq!(
        m.calls_of("fx", "sleep"),
        1,
        "concurrent identical calls were not coalesced"
    );
}

#[test]
fn errors_are_never_cached() {
    let settings = format!(
        "{RESOURCES_CACHED}tool_timeouts = {{ sleep = 200 }}\n{}{}",
        tool_cache("fail", "60s"),
        tool_cache("sleep", "60s")
    );
    let mut m = serve("", &[], &settings);
    for n in 1..=3 {
        let r = m.call("fx__fail", json!({}));
        assert_eq!(r["result"]["isError"], json!(true), "{r}");
        assert_eq!(m.calls_of("fx", "fail"), n, "a tool error was cached");
    }
    // A timeout.
    for n in 1..=2 {
        let r = m.call("fx__sleep", json!({"ms": 2000}));
        assert_eq!(error_code(&r), -32011, "{r}");
        assert_eq!(m.calls_of("fx", "sleep"), n, "a timeout was cached");
    }
    // A JSON-RPC error from the upstream.
    let missing = "fixture://fx/missing";
    for n in 1..=2 {
        let r = m.request("resources/read", json!({"uri": format!("fx+{missing}")}));
        assert_eq!(error_code(&r), -32002, "{r}");
        assert_eq!(m.reads_of("fx", missing), n, "an error answer was cached");
    }
}

#[test]
fn an_answer_that_came_with_progress_is_not_stored() {
    let mut m = serve("", &[], CACHED);
    let args = json!({"steps": 2});
    let r = call_with_meta(
        &mut m,
        "fx__progress",
        args.clone(),
        json!({"progressToken": "p"}),
    );
    assert_eq!(text_of(&r), "progressed 2", "{r}");
    m.wait_for(|v| v["method"] == "notifications/progress" && v["params"]["progressToken"] == "p");
    // The same call without a token is not answered from the cache...
    m.call("fx__progress", args.clone());
    assert_eq!(
        m.calls_of("fx", "progress"),
        2,
        "an answer with progress was stored"
    );
    // ...and, no progress having come with it, is stored.
    m.call("fx__progress", args);
    assert_eq!(
        m.calls_of("fx", "progress"),
        2,
        "a plain answer was not stored"
    );
}

#[test]
fn an_answer_that_needed_the_host_is_not_stored() {
    let mut m = Manifold::start(&config("", &["--client-tools"], CACHED));
    let init = m.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    m.notify("notifications/initialized", json!({}));
    for round in 1..=2 {
        let id = json!(m.send_request(
            "tools/call",
            json!({"name": "fx__ask_sampling", "arguments": {"prompt": "p"}}),
        ));
        let ask = m.wait_for(|v| v["method"] == "sampling/createMessage" || v["id"] == id);
        assert_eq!(
            ask["method"], "sampling/createMessage",
            "call {round} was answered without asking the host: {ask}"
        );
        m.send(
            &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant",
            "content": {"type": "text", "text": "sampled"}, "model": "m"}}),
        );
        assert_eq!(text_of(&m.response(&id)), "sampled");
    }
    assert_eq!(m.calls_of("fx", "ask_sampling"), 2);
}

#[test]
fn a_task_augmented_call_is_never_stored() {
    let mut m = Manifold::start(&config("", &["--tasks"], &tool_cache("sleep", "60s")));
    let init = m.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    m.notify("notifications/initialized", json!({}));
    let params = json!({"name": "fx__sleep", "arguments": {"ms": 10}, "task": {"ttl": 60000}});
    let first = m.request("tools/call", params.clone());
    let second = m.request("tools/call", params);
    let task_id = |r: &Value| {
        r["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("no task in {r}"))
            .to_owned()
    };
    assert_ne!(
        task_id(&first),
        task_id(&second),
        "the second task was the first one's stored answer"
    );
}

#[test]
fn waiters_on_a_cancelled_fill_are_still_answered() {
    let mut m = serve("", &[], &tool_cache("sleep", "60s"));
    let params = json!({"name": "fx__sleep", "arguments": {"ms": 1500}});
    let first = m.send_request("tools/call", params.clone());
    eventually("the first call reached the upstream", || {
        m.calls_of("fx", "sleep") == 1
    });
    let waiters: Vec<u64> = (0..2)
        .map(|_| m.send_request("tools/call", params.clone()))
        .collect();
    m.notify(
        "notifications/cancelled",
        json!({"requestId": first, "reason": "changed my mind"}),
    );
    for id in waiters {
        let r = m.response(&json!(id));
        assert_eq!(text_of(&r), "slept 1500", "{r}");
    }
}

#[test]
fn the_host_can_bypass_or_refresh_the_cache() {
    // `call_count` itself cached: its answer shows which echo calls it has seen.
    let mut m = serve("", &[], &tool_cache("call_count", "60s"));
    let echoes = |m: &mut Manifold, mode: Option<&str>| {
        let meta = mode.map_or(json!({}), |mode| json!({"manifold/cache": mode}));
        text_of(&call_with_meta(
            m,
            "fx__call_count",
            json!({"what": "tool:echo"}),
            meta,
        ))
    };
    assert_eq!(echoes(&mut m, None), "0");
    m.echo("fx__echo", "x");
    assert_eq!(echoes(&mut m, None), "0", "not answered from the cache");
    assert_eq!(echoes(&mut m, Some("bypass")), "1", "bypass was looked up");
    assert_eq!(echoes(&mut m, None), "0", "bypass stored its answer");
    assert_eq!(
        echoes(&mut m, Some("refresh")),
        "1",
        "refresh was looked up"
    );
    assert_eq!(
        echoes(&mut m, None),
        "1",
        "refresh had not replaced the entry by the time it was answered"
    );
    for bad in [json!("sometimes"), json!("BYPASS"), json!(true), json!({})] {
        let r = call_with_meta(
            &mut m,
            "fx__call_count",
            json!({"what": "tool:echo"}),
            json!({"manifold/cache": bad}),
        );
        assert_eq!(error_code(&r), -32602, "{bad}: {r}");
    }
}

#[test]
fn a_bad_cache_directive_is_refused_whatever_the_tool() {
    let mut m = serve("", &[], CACHED);
    // whoami is not kept (open-world): the directive is wrong all the same.
    let r = call_with_meta(
        &mut m,
        "fx__whoami",
        json!({}),
        json!({"manifold/cache": "sometimes"}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    assert_eq!(
        m.calls_of("fx", "whoami"),
        0,
        "a refused request reached the upstream"
    );
}

#[test]
fn a_resource_update_drops_its_entry_and_reaches_no_host_that_did_not_subscribe() {
    let mut m = serve("", &["--subscriptions"], RESOURCES_CACHED);
    let first = m.read(README);
    let second = m.read(README);
    assert_eq!(second["result"], first["result"]);
    assert_eq!(
        m.reads_of("fx", README_UPSTREAM),
        1,
        "the second read was not cached"
    );
    // Manifold subscribes upstream to what it keeps, so that it hears of changes.
    eventually(
        "Manifold subscribed upstream to the cached resource",
        || text_of(&m.call("fx__subscriptions", json!({}))) == format!("[{README_UPSTREAM:?}]"),
    );
    let touched = m.call("fx__touch", json!({"uri": README_UPSTREAM}));
    assert_eq!(text_of(&touched), "touched 1");
    eventually("the update dropped the entry", || {
        m.read(README);
        m.reads_of("fx", README_UPSTREAM) == 2
    });
    m.read(README);
    assert_eq!(
        m.reads_of("fx", README_UPSTREAM),
        2,
        "the fresh read was not kept"
    );
    let heard = m.sees_within(Duration::from_millis(500), |v| {
        v["method"] == "notifications/resources/updated"
    });
    assert!(!heard, "a host that never subscribed heard of the update");
}

/// A host's resources/subscribe (`on`) or unsubscribe of `uri`, which must succeed.
fn subscribe(m: &mut Manifold, uri: &str, on: bool) {
    let method = if on {
        "resources/subscribe"
    } else {
        "resources/unsubscribe"
    };
    let r = m.request(method, json!({"uri": uri}));
    assert_eq!(r["result"], json!({}), "{method}: {r}");
}

#[test]
fn the_cache_and_a_host_subscribing_to_one_resource_do_not_undo_each_other() {
    let config = config("", &["--subscriptions"], RESOURCES_CACHED);
    let mut m = Manifold::ready_args(&config, &["--admin", "127.0.0.1:0"]);
    let upstream_subscribed = |m: &mut Manifold| {
        let uris = text_of(&m.call("fx__subscriptions", json!({})));
        uris.contains(&format!("{README_UPSTREAM:?}"))
    };
    m.read(README);
    eventually("the cache subscribed upstream", || {
        upstream_subscribed(&mut m)
    });
    // A host subscribing and unsubscribing leaves the cache's subscription in place.
    subscribe(&mut m, README, true);
    subscribe(&mut m, README, false);
    assert!(
        upstream_subscribed(&mut m),
        "the host's unsubscribe ended the cache's subscription"
    );
    // The cache letting its entry go leaves a host's subscription in place.
    subscribe(&mut m, README, true);
    let touch = |m: &mut Manifold| text_of(&m.call("fx__touch", json!({"uri": README_UPSTREAM})));
    assert_eq!(touch(&mut m), "touched 1");
    m.wait_for(|v| v["method"] == "notifications/resources/updated");
    let invalidated = [("cache", "resources"), ("cause", "invalidated")];
    eventually("the updated entry was dropped", || {
        // Another resource's read gets the store to process what is pending.
        m.read("fx+fixture://fx/data.json");
        manifold_testkit::metrics::sum(&m.scrape(), "manifold_cache_evictions_total", &invalidated)
            >= 1.0
    });
    assert!(
        upstream_subscribed(&mut m),
        "dropping the entry ended the host's subscription"
    );
    assert_eq!(touch(&mut m), "touched 1");
    m.wait_for(|v| v["method"] == "notifications/resources/updated");
}

#[test]
fn a_restart_of_the_upstream_drops_its_entries() {
    let mut m = serve("", &[], CACHED);
    m.echo("fx__echo", "x");
    m.echo("fx__echo", "x");
    assert_eq!(m.calls_of("fx", "echo"), 1);
    let before = text_of(&m.call("fx__whoami", json!({})));
    let crashed = m.call("fx__crash", json!({}));
    assert!(crashed.get("error").is_some(), "{crashed}");
    eventually("the upstream is back", || {
        let r = m.call("fx__whoami", json!({}));
        r.get("result").is_some() && text_of(&r) != before
    });
    m.echo("fx__echo", "x");
    // The new process counts from zero: a hit would leave it there.
    assert_eq!(
        m.calls_of("fx", "echo"),
        1,
        "answered from before the restart"
    );
}

#[test]
fn a_changed_catalog_drops_the_upstreams_entries() {
    let mut m = serve("", &[], CACHED);
    m.echo("fx__echo", "x");
    m.echo("fx__echo", "x");
    assert_eq!(m.calls_of("fx", "echo"), 1);
    let added = m.call("fx__add_tool", json!({"name": "fresh"}));
    assert_eq!(text_of(&added), "added fresh");
    m.wait_for(|v| v["method"] == "notifications/tools/list_changed");
    eventually("the new catalog dropped the entry", || {
        m.echo("fx__echo", "x");
        m.calls_of("fx", "echo") == 2
    });
}

#[test]
fn a_hit_still_counts_against_the_teams_limits() {
    let teams = "[teams.red]\n\n[teams.red.tool_limits.fx__echo]\nquota = \"2/day\"\n";
    let mut m = Manifold::ready_args(&config(teams, &[], CACHED), &["--team", "red"]);
    m.echo("fx__echo", "x");
    m.echo("fx__echo", "x");
    let refused = m.call("fx__echo", json!({"text": "x"}));
    assert_eq!(error_code(&refused), -32015, "{refused}");
    assert_eq!(m.calls_of("fx", "echo"), 1);
}

#[test]
fn cache_settings_are_checked_and_mistakes_named_by_key() {
    let dir = TempDir::new("cache");
    let check = |name: &str, settings: &str| -> String {
        let path = dir.write(name, &config("", &[], settings));
        let (code, _, err) = run_manifold(
            &["check", "--no-start", "--config", path.to_str().unwrap()],
            &[],
        );
        assert_ne!(code, 0, "{name} was accepted");
        err
    };
    let err = check("no-ttl.toml", "cache = { max_bytes = \"1MiB\" }\n");
    assert!(err.contains("upstreams.fx.cache.ttl"), "{err}");
    let err = check("bad-ttl.toml", "resource_cache = { ttl = \"soon\" }\n");
    assert!(err.contains("upstreams.fx.resource_cache.ttl"), "{err}");
    let err = check(
        "bad-scope.toml",
        "cache = { ttl = \"1s\", scope = \"world\" }\n",
    );
    assert!(err.contains("upstreams.fx.cache.scope"), "{err}");
    let err = check(
        "tool-ttl.toml",
        "[upstreams.fx.tool_cache.echo]\nscope = \"shared\"\n",
    );
    assert!(err.contains("upstreams.fx.tool_cache.echo.ttl"), "{err}");
    let err = check(
        "isolated.toml",
        &format!("isolation = \"session\"\n{CACHED}"),
    );
    assert!(
        err.contains("upstreams.fx") && err.contains("isolation"),
        "{err}"
    );
}

#[test]
fn hits_and_misses_are_counted_per_cache() {
    let settings = format!("{CACHED}{RESOURCES_CACHED}{}", tool_cache("sleep", "60s"));
    let mut m = Manifold::ready_args(&config("", &[], &settings), &["--admin", "127.0.0.1:0"]);
    m.echo("fx__echo", "a"); // miss
    m.echo("fx__echo", "a"); // hit
    m.echo("fx__echo", "b"); // miss
    m.call("fx__whoami", json!({})); // not cached: neither
                                     // One fill and three waiters, which count as hits.
    let sleeps: Vec<u64> = (0..4)
        .map(|_| {
            m.send_request(
                "tools/call",
                json!({"name": "fx__sleep", "arguments": {"ms": 500}}),
            )
        })
        .collect();
    for id in sleeps {
        assert_eq!(text_of(&m.response(&json!(id))), "slept 500");
    }
    for _ in 0..3 {
        m.read(README); // a miss, then two hits
    }
    let expected = [
        ("manifold_cache_misses_total", "tools", 3.0),
        ("manifold_cache_hits_total", "tools", 4.0),
        ("manifold_cache_entries", "tools", 3.0),
        ("manifold_cache_misses_total", "resources", 1.0),
        ("manifold_cache_hits_total", "resources", 2.0),
        ("manifold_cache_entries", "resources", 1.0),
    ];
    let seen = |text: &str| -> Vec<(&str, &str, f64)> {
        expected
            .iter()
            .map(|(name, cache, _)| {
                let labels = [("cache", *cache), ("upstream", "fx")];
                (
                    *name,
                    *cache,
                    manifold_testkit::metrics::sum(text, name, &labels),
                )
            })
            .collect()
    };
    // Counted around the answers: wait (bounded) for the figures to settle, then compare.
    let mut text = m.scrape();
    let until = Instant::now() + WAIT;
    while seen(&text) != expected && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        text = m.scrape();
    }
    assert_eq!(seen(&text), expected, "/metrics:\n{text}");
    for cache in ["tools", "resources"] {
        let labels = [("cache", cache), ("upstream", "fx")];
        let bytes = manifold_testkit::metrics::sum(&text, "manifold_cache_bytes", &labels);
        assert!(bytes > 0.0, "no bytes held by the {cache} cache:\n{text}");
    }
}

#[test]
fn a_rule_outweighs_a_stateless_upstreams_own_hints() {
    // It says its resources are stale at once: the configured minute holds all the same.
    let mut m = serve(
        "",
        &["--era", "dual", "--ttl-ms", "0", "--cache-scope", "public"],
        RESOURCES_CACHED,
    );
    m.read(README);
    m.read(README);
    assert_eq!(
        m.reads_of("fx", README_UPSTREAM),
        1,
        "a ttlMs of 0 outweighed the rule"
    );
    // It says 500 ms: still kept well past that, for the configured minute.
    let mut m = serve(
        "",
        &[
            "--era",
            "dual",
            "--ttl-ms",
            "500",
            "--cache-scope",
            "public",
        ],
        RESOURCES_CACHED,
    );
    m.read(README);
    std::thread::sleep(Duration::from_millis(1500));
    m.read(README);
    assert_eq!(
        m.reads_of("fx", README_UPSTREAM),
        1,
        "the entry went with the upstream's ttlMs, not the rule's"
    );
}
