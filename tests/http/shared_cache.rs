//! The result cache shared by replicas through a real Redis (`[cache] backend = "redis"`):
//! several `manifold serve --listen` processes, one `redis-server` started for the test, and
//! either one fixture over HTTP that every replica reaches (an answer stored through one
//! replica is a hit on the others; identical calls at once on one replica make one lookup and
//! one upstream call; a team's entry never serves another team; a resource update heard by
//! the replicas holding it reaches one that does not; Redis down or frozen costs nothing but
//! the sharing) or a fixture process per replica, as stdio upstreams are
//! (a catalog change only one replica sees drops the others' entries, memory included).
//! Whether an upstream was reached is read from the fixture's own `call_count`.

use std::time::{Duration, Instant};

use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;
use manifold_testkit::redis_server::{unique_prefix, RedisServer};

const README: &str = "fx+fixture://fx/readme";
const README_UPSTREAM: &str = "fixture://fx/readme";

const RED_KEY: &str = "red-shared-cache-key-0123456789";
const GREEN_KEY: &str = "green-shared-cache-key-0123456789";

/// `[cache]` in `redis` under `prefix` (lookups waiting at most `timeout_ms`), an admin
/// listener, then `rest`.
fn config(redis: &RedisServer, prefix: &str, timeout_ms: u64, rest: &str) -> String {
    format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n\
         [cache]\nbackend = \"redis\"\nredis_url = {url:?}\nkey_prefix = {prefix:?}\n\
         redis_timeout_ms = {timeout_ms}\n\n{rest}",
        url = redis.url()
    )
}

/// Upstream `fx`: the fixture over HTTP at `fixture`, its read-only tools and its resources
/// cached a minute.
fn http_upstream(fixture: &FixtureHttp) -> String {
    format!(
        "[upstreams.fx]\nurl = {:?}\ntransport = \"streamable-http\"\n\
         cache = {{ ttl = \"60s\" }}\nresource_cache = {{ ttl = \"60s\", scope = \"shared\" }}\n",
        fixture.url("/mcp")
    )
}

/// Upstream `fx`: a fixture process of the replica's own, cached as [`http_upstream`].
fn own_upstream() -> String {
    format!(
        "{}cache = {{ ttl = \"60s\" }}\nresource_cache = {{ ttl = \"60s\", scope = \"shared\" }}\n",
        fixture_upstream("fx", &["--name", "fx", "--hints", "--subscriptions"])
    )
}

/// The fixture over HTTP as these tests use it.
fn http_fixture() -> FixtureHttp {
    FixtureHttp::start(0, &["--name", "fx", "--hints", "--subscriptions"])
}

/// How many keys of Redis match `pattern`.
fn keys(redis: &RedisServer, pattern: &str) -> usize {
    let n = redis.command(&["EVAL", "return #redis.call('KEYS', ARGV[1])", "0", pattern]);
    n.parse()
        .unwrap_or_else(|_| panic!("KEYS {pattern} answered {n}"))
}

/// Waits (five seconds at most) until `cond` holds: Redis is written after the host has its
/// answer. Whether it then holds is checked by what follows, and the layout of what was
/// written at the end of each test.
fn settle(cond: impl FnMut() -> bool) {
    poll_for(Duration::from_secs(5), cond);
}

/// Waits until Redis holds `n` keys matching `pattern` (see [`settle`]).
fn stored(redis: &RedisServer, pattern: &str, n: usize) {
    settle(|| keys(redis, pattern) == n);
}

/// The value of the first key matching `pattern` (empty if none).
fn value_of(redis: &RedisServer, pattern: &str) -> String {
    redis.command(&[
        "EVAL",
        "local k = redis.call('KEYS', ARGV[1])[1]; return k and redis.call('GET', k) or ''",
        "0",
        pattern,
    ])
}

fn hits(server: &Server, tier: &str) -> f64 {
    server.metric(
        "manifold_cache_hits_total",
        &[("cache", "tools"), ("upstream", "fx"), ("tier", tier)],
    )
}

#[test]
fn an_answer_cached_through_one_replica_is_a_hit_on_the_others() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("cache-hit");
    let fixture = http_fixture();
    let config = config(&redis, &prefix, 2000, &http_upstream(&fixture));
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(&config)).collect();
    let mut hosts: Vec<Host> = replicas.iter().map(Server::ready_host).collect();

    hosts[0].echo("fx__echo", "x");
    assert_eq!(hosts[0].calls_of("fx", "echo"), 1);
    stored(&redis, &format!("{prefix}:cache:*"), 1);
    hosts[1].echo("fx__echo", "x");
    hosts[2].echo("fx__echo", "x");
    assert_eq!(
        hosts[1].calls_of("fx", "echo"),
        1,
        "another replica asked the upstream again"
    );
    assert_eq!(hits(&replicas[1], "redis"), 1.0);
    assert_eq!(hits(&replicas[2], "redis"), 1.0);
    // Kept in the replica's memory with the time it had left: the next hit stays there.
    hosts[1].echo("fx__echo", "x");
    assert_eq!(hits(&replicas[1], "memory"), 1.0);
    assert_eq!(hits(&replicas[1], "redis"), 1.0);
    // Other arguments are another entry.
    hosts[2].echo("fx__echo", "y");
    assert_eq!(hosts[2].calls_of("fx", "echo"), 2);
    // Under the upstream's name and generation 0, shared (no teams), with the entry's ttl.
    stored(&redis, &format!("{prefix}:cache:fx:0:tools:shared:*"), 2);
    assert_eq!(keys(&redis, &format!("{prefix}:cache:*")), 2);
    let ttl: i64 = redis
        .command(&[
            "EVAL",
            "return redis.call('PTTL', redis.call('KEYS', ARGV[1])[1])",
            "0",
            &format!("{prefix}:cache:fx:0:tools:*"),
        ])
        .parse()
        .unwrap();
    assert!((1..=60_000).contains(&ttl), "PTTL {ttl}");
}

/// How many times Redis was asked to run a script it holds (`EVALSHA`; the tests' own
/// scripts are sent with `EVAL`).
fn scripts_run(redis: &RedisServer) -> u64 {
    let info = redis.command(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|l| {
            let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            (name == "evalsha").then_some(())?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            calls.trim().parse::<u64>().ok()
        })
        .sum()
}

#[test]
fn identical_calls_at_once_on_one_replica_make_one_lookup_and_one_upstream_call() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("cache-coalesced");
    let fixture = http_fixture();
    let rest = format!(
        "{}[upstreams.fx.tool_cache.sleep]\nttl = \"60s\"\n",
        http_upstream(&fixture)
    );
    let server = Server::start(&config(&redis, &prefix, 2000, &rest));
    let mut hosts: Vec<Host> = (0..4).map(|_| server.ready_host()).collect();
    // Redis learns the scripts (lookup, store) on a first call.
    hosts[0].echo("fx__echo", "warm-up");
    stored(&redis, &format!("{prefix}:cache:*"), 1);
    let before = scripts_run(&redis);
    let start = std::sync::Barrier::new(hosts.len());
    std::thread::scope(|s| {
        for host in &mut hosts {
            let start = &start;
            s.spawn(move || {
                start.wait();
                let r = host.call("fx__sleep", json!({"ms": 500}));
                assert_eq!(text_of(&r), "slept 500", "{r}");
            });
        }
    });
    assert_eq!(
        hosts[0].calls_of("fx", "sleep"),
        1,
        "identical calls were not coalesced"
    );
    stored(&redis, &format!("{prefix}:cache:*"), 2);
    // One lookup and one store, for the four calls.
    assert_eq!(scripts_run(&redis) - before, 2);
}

#[test]
fn a_teams_entry_never_serves_another_team_on_another_replica() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("cache-teams");
    let fixture = http_fixture();
    let teams = format!(
        "[teams.red]\napi_keys = [\"{RED_KEY}\"]\n\n[teams.green]\napi_keys = [\"{GREEN_KEY}\"]\n\n{}",
        http_upstream(&fixture)
    );
    let config = config(&redis, &prefix, 2000, &teams);
    let (a, b) = (Server::start(&config), Server::start(&config));
    let mut red_on_a = a.ready_host_with_key(RED_KEY);
    let mut green_on_b = b.ready_host_with_key(GREEN_KEY);
    let mut red_on_b = b.ready_host_with_key(RED_KEY);

    red_on_a.echo("fx__echo", "x");
    let entries = format!("{prefix}:cache:fx:*");
    stored(&redis, &entries, 1);
    green_on_b.echo("fx__echo", "x");
    assert_eq!(
        green_on_b.calls_of("fx", "echo"),
        2,
        "green was given red's entry"
    );
    stored(&redis, &entries, 2);
    // Red's entry is there for red, on any replica.
    red_on_b.echo("fx__echo", "x");
    assert_eq!(
        red_on_b.calls_of("fx", "echo"),
        2,
        "red missed its own entry on B"
    );
    assert_eq!(hits(&b, "redis"), 1.0);
    for scope in ["team.red", "team.green"] {
        assert_eq!(
            keys(&redis, &format!("{prefix}:cache:fx:0:tools:{scope}:*")),
            1
        );
    }
    assert_eq!(keys(&redis, &entries), 2);
}

#[test]
fn a_resource_update_heard_by_the_replicas_holding_it_reaches_the_one_that_does_not() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("cache-updated");
    let fixture = http_fixture();
    let config = config(&redis, &prefix, 2000, &http_upstream(&fixture));
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(&config)).collect();
    let mut hosts: Vec<Host> = replicas.iter().map(Server::ready_host).collect();
    let subscribed = |host: &mut Host| {
        text_of(&host.call("fx__subscriptions", json!({}))) == format!("[{README_UPSTREAM:?}]")
    };

    // A fills, B is answered from Redis; each subscribes upstream while it holds the entry.
    hosts[0].read(README);
    stored(&redis, &format!("{prefix}:cache:fx:*"), 1);
    hosts[1].read(README);
    assert_eq!(hosts[0].reads_of("fx", README_UPSTREAM), 1);
    for (i, host) in hosts.iter_mut().take(2).enumerate() {
        eventually(&format!("replica {i} subscribed upstream"), || {
            subscribed(host)
        });
    }
    assert!(!subscribed(&mut hosts[2]));

    // The update reaches A and B (subscribed), which say so in Redis; C hears nothing of it
    // from the upstream, and must not be given the entry they dropped.
    let touched = hosts[0].call("fx__touch", json!({"uri": README_UPSTREAM}));
    assert_eq!(text_of(&touched), "touched 2", "{touched}");
    // Both count it in the resource's own generation.
    let generation = format!("{prefix}:cache:gen:fx:*");
    settle(|| value_of(&redis, &generation) == "2");
    hosts[2].read(README);
    assert_eq!(
        hosts[2].reads_of("fx", README_UPSTREAM),
        2,
        "a replica was given an entry from before the update"
    );
    // The fresh read is shared under the new generation: A gets it without the upstream.
    let fresh = format!("{prefix}:cache:fx:0.2:resources:shared:*");
    stored(&redis, &fresh, 1);
    hosts[0].read(README);
    assert_eq!(hosts[0].reads_of("fx", README_UPSTREAM), 2);
    assert_eq!(value_of(&redis, &generation), "2");
    assert_eq!(keys(&redis, &fresh), 1);
    assert_eq!(
        keys(&redis, &format!("{prefix}:cache:fx:0.0:resources:shared:*")),
        1
    );
}

#[test]
fn a_catalog_change_seen_by_one_replica_drops_the_entries_of_the_others() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("cache-catalog");
    // Each replica has its own fixture process (as stdio upstreams are run): only A's sees
    // the change.
    let config = config(&redis, &prefix, 2000, &own_upstream());
    let (a, b) = (Server::start(&config), Server::start(&config));
    let (mut on_a, mut on_b) = (a.ready_host(), b.ready_host());

    on_a.echo("fx__echo", "x");
    stored(&redis, &format!("{prefix}:cache:fx:*"), 1);
    on_b.echo("fx__echo", "x");
    on_b.echo("fx__echo", "x");
    assert_eq!(on_b.calls_of("fx", "echo"), 0, "B's upstream was asked");
    assert_eq!(
        hits(&b, "memory"),
        1.0,
        "B does not hold the entry in memory"
    );

    let added = on_a.call("fx__add_tool", json!({"name": "fresh"}));
    assert_eq!(text_of(&added), "added fresh");
    let generation = format!("{prefix}:cache:gen:fx");
    settle(|| redis.command(&["GET", &generation]) == "1");
    // The event reaches B at once (it reads the generation itself only every five seconds).
    std::thread::sleep(Duration::from_millis(200));
    on_b.echo("fx__echo", "x");
    assert_eq!(
        on_b.calls_of("fx", "echo"),
        1,
        "B answered from before a change another replica saw"
    );
    // B's fresh answer is shared under the new generation; A takes it from there.
    stored(&redis, &format!("{prefix}:cache:fx:1:tools:*"), 1);
    on_a.echo("fx__echo", "x");
    assert_eq!(on_a.calls_of("fx", "echo"), 1);
    assert_eq!(hits(&a, "redis"), 1.0);
    assert_eq!(redis.command(&["GET", &generation]), "1");
}

/// Calls with arguments no one used yet, each answered (by the upstream) within two seconds.
fn fresh_calls(host: &mut Host, label: &str, n: usize) {
    for i in 0..n {
        let started = Instant::now();
        let text = format!("{label}-{i}");
        let r = host.call("fx__echo", json!({"text": text}));
        assert_eq!(text_of(&r), text, "{r}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }
}

const UNREACHABLE: &str = "the cache store is unreachable";
const REACHABLE_AGAIN: &str = "the cache store is reachable again";

#[test]
fn calls_go_upstream_while_redis_is_down_or_frozen_and_are_shared_again_once_it_is_back() {
    let mut redis = RedisServer::start();
    let prefix = unique_prefix("cache-outage");
    let fixture = http_fixture();
    let config = config(&redis, &prefix, 250, &http_upstream(&fixture));
    let (a, b) = (Server::start(&config), Server::start(&config));
    let (mut on_a, mut on_b) = (a.ready_host(), b.ready_host());
    on_a.echo("fx__echo", "x");
    stored(&redis, &format!("{prefix}:cache:fx:0:tools:*"), 1);
    on_b.echo("fx__echo", "x");
    assert_eq!(on_b.calls_of("fx", "echo"), 1);

    // Frozen: connections stay open, nothing is answered.
    redis.pause();
    fresh_calls(&mut on_b, "frozen", 3);
    fresh_calls(&mut on_a, "frozen-a", 2);
    assert_eq!(on_b.calls_of("fx", "echo"), 1 + 5);
    redis.resume();
    // Gone.
    redis.stop();
    fresh_calls(&mut on_b, "down", 3);
    assert_eq!(on_b.calls_of("fx", "echo"), 1 + 5 + 3);
    // What a replica holds in memory still answers.
    on_b.echo("fx__echo", "x");
    assert_eq!(on_b.calls_of("fx", "echo"), 9);
    let errors = b.metric(
        "manifold_cache_store_errors_total",
        &[("operation", "lookup")],
    );
    assert!(errors >= 1.0, "no failed lookup counted");
    let stderr = b.stderr();
    assert_eq!(lines_with(&stderr, UNREACHABLE), 1, "{stderr}");

    // Back (empty): once the second it is left alone after a failure has passed, answers are
    // shared again.
    redis.restart();
    std::thread::sleep(Duration::from_millis(1200));
    fresh_calls(&mut on_a, "back", 1);
    stored(&redis, &format!("{prefix}:cache:fx:*:tools:*"), 1);
    let before = on_b.calls_of("fx", "echo");
    fresh_calls(&mut on_b, "back", 1);
    assert_eq!(
        on_b.calls_of("fx", "echo"),
        before,
        "B missed A's entry once Redis was back"
    );
    eventually("B logged that the store is back", || {
        b.stderr().contains(REACHABLE_AGAIN)
    });
}

/// A config mistake names its key, and the URL's password never shows.
#[test]
fn a_shared_cache_without_a_url_or_with_a_bad_one_is_refused() {
    let upstream = "[upstreams.fx]\nurl = \"http://127.0.0.1:1/mcp\"\ncache = { ttl = \"1s\" }\n";
    let err = serve_refused(&format!("[cache]\nbackend = \"redis\"\n\n{upstream}"));
    assert!(err.contains("cache.redis_url"), "{err}");
    let err = serve_refused(&format!(
        "[cache]\nbackend = \"redis\"\nredis_url = \"http://:hunter2@127.0.0.1:1\"\n\n{upstream}"
    ));
    assert!(
        err.contains("cache.redis_url") && err.contains("not a redis:// URL"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}
