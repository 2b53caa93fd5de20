//! What the result cache costs and saves on a small `tools/call`, in one run.
//!
//! Over stdio, one request in flight, in interleaved rounds, four ways: the fixture called
//! directly; Manifold with the fixture's `echo` cached (`[upstreams.alpha.tool_cache.echo]`,
//! `ttl = "1h"`) and the same arguments on every call, so that after the first call (a miss)
//! every call is a hit; the same cache with arguments that differ on every call (an `n` that is
//! the request's id), so that every call is a miss and a fill, under a budget small enough to
//! keep the cache full and evicting; and the same differing calls through a Manifold with no
//! cache (plain forwarding). Over Streamable HTTP: calls/s at 16 connections against the cached
//! tool (every call a hit) beside the same load with no cache (every call forwarded).
//!
//! A fifth side measures the shared tier (`[cache] backend = "redis"`) against a
//! `redis-server` this scenario starts on 127.0.0.1 and kills at its end: the differing calls
//! of the miss side, under the same memory budget, through a Manifold whose every call is
//! already in Redis, stored there beforehand by another Manifold (same Redis and key prefix,
//! the same calls with the same ids). So every call misses memory and is a Redis-tier hit: the
//! lookup script, the answer served, kept in memory and an entry pushed out, as a miss pushes
//! one out. Without a `redis-server` that side is not run and the report says why. Redis's own
//! command counts must show a lookup for every measured call, and the fixture behind that
//! Manifold must have served no call at all.
//!
//! Every answer is counted: an error answer is counted instead of timed, and any makes the run
//! invalid. After the rounds, the fixture's own count of its `echo` calls (its `call_count`
//! tool, called through each Manifold and not cached) must be exactly what should have reached
//! it: the first call alone where every later call was a hit, every call where each was a miss
//! or nothing was cached. Otherwise the run is invalid too.

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use std::collections::BTreeMap;

use super::counted;
use super::http_throughput::{self, Kind, Side as HttpSide};
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::Usage;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::target::TargetSpec;
use manifold_testkit::redis_server::RedisServer;

/// The goal: a hit adds at most this much to the p50 of the direct call.
const HIT_GOAL_US: f64 = 10.0;

/// The fixture's `echo`, cached for longer than any run.
const CACHED: &str = "[upstreams.alpha.tool_cache.echo]\nttl = \"1h\"\n";

/// The budget of every cache together where every call is a miss: about 1,700 entries of
/// this call (310 bytes each, answer and key), so the cache is full before the warm-up ends
/// and every measured miss pushes an entry out.
const MISS_BUDGET: &str = "[cache]\nmax_bytes = \"512KiB\"\n";

/// The shared tier's key prefix.
const REDIS_PREFIX: &str = "manifold-load-cache";

/// The sides over stdio, in the order of the JSON document and the table.
pub(crate) const SIDES: [(&str, &str); 5] = [
    ("direct", "direct to the fixture"),
    ("hit", "Manifold, cached, every call a hit"),
    ("miss", "Manifold, cached, every call a miss"),
    ("uncached", "Manifold, no cache"),
    ("redis_hit", "Manifold, every call a Redis-tier hit"),
];

/// The comparisons reported: (key, base side, side, name in the table).
pub(crate) const PAIRS: [(&str, usize, usize, &str); 8] = [
    ("hit_vs_direct", 0, 1, "cache hit, added over direct"),
    ("miss_vs_direct", 0, 2, "cache miss, added over direct"),
    ("uncached_vs_direct", 0, 3, "no cache, added over direct"),
    ("hit_vs_uncached", 3, 1, "cache hit, added over no cache"),
    ("miss_vs_uncached", 3, 2, "cache miss, added over no cache"),
    (
        "redis_hit_vs_direct",
        0,
        4,
        "Redis-tier hit, added over direct",
    ),
    (
        "redis_hit_vs_uncached",
        3,
        4,
        "Redis-tier hit, added over no cache",
    ),
    (
        "redis_hit_vs_hit",
        1,
        4,
        "Redis-tier hit, added over memory hit",
    ),
];

/// The Redis side's tables: the echo cached, in Redis at `url`, in the miss side's budget.
fn redis_tables(url: &str) -> String {
    format!(
        "{CACHED}\n{MISS_BUDGET}backend = \"redis\"\nredis_url = \"{url}\"\n\
         key_prefix = \"{REDIS_PREFIX}\"\nredis_timeout_ms = 1000\n"
    )
}

/// Stores in Redis, through a Manifold of its own (`spec`), the differing calls the Redis side
/// will make: `count` of them, ids from 1, as the Redis side numbers its own.
fn fill_redis(
    spec: &TargetSpec,
    setup: &Setup,
    plan: &Plan,
    line: &RequestLine,
    count: usize,
) -> Result<counted::Tally> {
    let mut filler = counted::Side::start(spec, line, setup.limits)?;
    let mut left = count;
    while left > 0 {
        let n = left.min(plan.latency_calls.max(1));
        filler.calls(n, plan.round_limit)?;
        left -= n;
    }
    Ok(filler.seen)
}

pub fn cache(setup: &Setup, plan: &Plan) -> Result<Value> {
    let ups = [Upstream::plain("alpha")];
    let direct = RequestLine::echo("echo");
    let same = RequestLine::echo("alpha__echo");
    let distinct = RequestLine::echo_numbered("alpha__echo");
    let miss_tables = format!("{CACHED}\n{MISS_BUDGET}");
    // Started first, so that it is dropped last: after the Manifold that talks to it.
    let redis = RedisServer::try_start();
    let in_redis = redis.as_ref().ok().map(|r| redis_tables(&r.url()));
    let mut specs: Vec<(TargetSpec, &RequestLine)> = vec![
        (setup.direct("cache-direct", &[]), &direct),
        (setup.through_as("cache-hit", &ups, CACHED, None)?, &same),
        (
            setup.through_as("cache-miss", &ups, &miss_tables, None)?,
            &distinct,
        ),
        (setup.through("cache-uncached", &ups)?, &distinct),
    ];
    let (calls, warmup) = (plan.latency_calls, Plan::warmup(plan.latency_calls));
    let mut filled = None;
    if let Some(tables) = &in_redis {
        // Every id the Redis side will use: its warm-up (a call, its answer checked, the
        // warm-up calls), the upstream's count, the rounds, and a margin.
        let ids = 2 + warmup + 1 + plan.rounds * calls + 16;
        let filler = setup.through_as("cache-redis-fill", &ups, tables, None)?;
        filled = Some(fill_redis(&filler, setup, plan, &distinct, ids)?);
        specs.push((
            setup.through_as("cache-redis", &ups, tables, None)?,
            &distinct,
        ));
    }
    let mut sides = counted::start_all(&specs, setup, plan, ECHO_TEXT.len())?;
    // Before the rounds: what the upstream behind the Redis side served (its warm-up's first
    // calls), and Redis's counts.
    let redis_before = match (&redis, sides.get_mut(4)) {
        (Ok(server), Some(side)) => Some((
            served(&mut side.session)?,
            command_calls(server)?,
            Usage::of(pid_of(server)?)?,
        )),
        _ => None,
    };
    counted::rounds(&mut sides, plan, calls)?;

    let mut v = Map::new();
    let mut invalid = Vec::new();
    let missing = json!({ "not_run": not_run(&redis) });
    counted::report(&sides, &SIDES, &PAIRS, &missing, &mut v, &mut invalid)?;
    let redis_check = match (&redis, redis_before, sides.get_mut(4)) {
        (Ok(server), Some((served_before, commands, cpu)), Some(side)) => {
            let served_after = served(&mut side.session)?;
            if served_after != 0 {
                invalid.push(format!(
                    "redis_hit: the upstream served {served_after} echo calls ({served_before} before the rounds)"
                ));
            }
            if let Some(why) = filled.as_ref().and_then(|f| f.invalid("redis_fill")) {
                invalid.push(why);
            }
            let after = command_calls(server)?;
            let lookups = after
                .get("evalsha")
                .copied()
                .unwrap_or(0)
                .saturating_sub(commands.get("evalsha").copied().unwrap_or(0));
            let measured = side.measured as u64;
            if lookups < measured {
                invalid.push(format!(
                    "redis_hit: Redis ran {lookups} scripts for {measured} calls (some were not looked up there)"
                ));
            }
            let during: BTreeMap<&String, u64> = after
                .iter()
                .map(|(k, n)| (k, n.saturating_sub(commands.get(k).copied().unwrap_or(0))))
                .filter(|(_, n)| *n > 0)
                .collect();
            json!({
                "binary": server.binary(),
                "url": server.url(),
                "filled_beforehand": filled.as_ref().map(|f| f.calls),
                "upstream_served_before_rounds": served_before,
                "upstream_served_after_rounds": served_after,
                "commands_during_rounds": during,
                "cpu_per_call": Usage::of(pid_of(server)?)?.per_call(cpu, side.measured),
            })
        }
        _ => json!({ "not_run": not_run(&redis) }),
    };
    v.insert("redis_server".into(), redis_check);
    // The hit side's first call was its only miss; every call of the others went upstream.
    let mut upstream = Map::new();
    for (i, expected) in [(1, 1), (2, sides[2].seen.calls), (3, sides[3].seen.calls)] {
        let name = SIDES[i].0;
        let check = upstream_calls(&mut sides[i].session, name, expected, &mut invalid)?;
        upstream.insert(name.into(), check);
    }
    let (mut calls_made, mut errors) = (0, 0);
    for side in &sides {
        calls_made += side.seen.calls;
        errors += side.seen.errors;
    }
    drop(sides);

    let http = http(setup, plan, &mut upstream, &mut invalid)?;
    for side in ["cached", "forwarded"] {
        calls_made += http[side]["calls_made"].as_u64().unwrap_or(0) as usize;
        errors += http[side]["errors"].as_u64().unwrap_or(0) as usize;
    }
    v.insert("http".into(), http);
    v.insert("upstream_calls".into(), Value::Object(upstream));
    v.insert("calls".into(), json!(calls_made));
    v.insert("errors".into(), json!(errors));
    v.insert("valid".into(), json!(invalid.is_empty()));
    v.insert("invalid_because".into(), json!(invalid));
    v.insert(
        "config".into(),
        json!({ "hit": CACHED, "miss": miss_tables, "uncached": "", "redis_hit": in_redis }),
    );
    v.insert("goal_added_p50_us".into(), json!(HIT_GOAL_US));
    v.insert("rounds".into(), json!(plan.rounds));
    v.insert("calls_per_round".into(), json!(calls));
    v.insert("warmup_calls".into(), json!(warmup));
    // The differing calls are longer by the id written again: six digits in a full run.
    v.insert(
        "request_bytes".into(),
        json!({
            "direct": direct.len_with(1),
            "hit": same.len_with(1),
            "miss_at_id_100000": distinct.len_with(100_000),
        }),
    );
    Ok(Value::Object(v))
}

/// Calls/s at `plan.connections` connections, against the cached tool (every call after the
/// first a hit) and with no cache (every call forwarded), in interleaved rounds.
fn http(
    setup: &Setup,
    plan: &Plan,
    upstream: &mut Map<String, Value>,
    invalid: &mut Vec<String>,
) -> Result<Value> {
    let ups = [Upstream::plain("alpha")];
    let line = [RequestLine::echo("alpha__echo")];
    let specs = [
        (
            "cached",
            setup.manifold_http_tuned("cache-http-cached", &ups, CACHED)?,
        ),
        (
            "forwarded",
            setup.manifold_http("cache-http-forwarded", &ups)?,
        ),
    ];
    let mut sides = Vec::new();
    for (name, spec) in &specs {
        sides.push(HttpSide::open(
            (*name).into(),
            spec,
            setup,
            plan,
            &line,
            Kind::Manifold,
        )?);
    }
    for side in &mut sides {
        side.warm_up(plan)?;
    }
    let rounds = http_throughput::measure(&mut sides, plan, &mut Map::new())?;
    let mut out = Map::new();
    for (side, r) in sides.iter().zip(&rounds) {
        let mut figures = side.to_json(r)?;
        figures["calls_made"] = json!(side.seen.calls);
        out.insert(side.name.clone(), figures);
        invalid.extend(side.seen.invalid(&format!("http {}", side.name)));
    }
    out.insert(
        "cached_over_forwarded".into(),
        http_throughput::rate_ratio(&rounds[0], &rounds[1]),
    );
    let forwarded = sides[1].seen.calls;
    for (side, expected) in sides.iter_mut().zip([1, forwarded]) {
        let name = format!("http_{}", side.name);
        let check = upstream_calls(&mut side.sessions[0], &name, expected, invalid)?;
        upstream.insert(name, check);
    }
    out.insert("connections".into(), json!(plan.connections));
    out.insert("calls_per_round".into(), json!(plan.http_calls));
    out.insert("rounds".into(), json!(plan.rounds));
    Ok(Value::Object(out))
}

/// How many `echo` calls the fixture behind `session` served, by its own count.
fn served(session: &mut Session) -> Result<usize> {
    fixture_count(session, "alpha", "tool:echo")
}

/// How many times `what` happened (`tool:NAME`: calls of a tool) at the fixture `upstream`
/// behind `session`, by its own count: its `call_count` tool, called through Manifold and
/// never cached.
pub(crate) fn fixture_count(session: &mut Session, upstream: &str, what: &str) -> Result<usize> {
    let line =
        RequestLine::tools_call(&format!("{upstream}__call_count"), &json!({ "what": what }));
    session.ready()?;
    let result = session.result(&line)?;
    let text = result.pointer("/content/0/text").and_then(Value::as_str);
    match text.and_then(|t| t.parse::<usize>().ok()) {
        Some(n) => Ok(n),
        None => bail!(
            "{}: call_count answered {}",
            session.label(),
            super::excerpt(&result)
        ),
    }
}

fn pid_of(server: &RedisServer) -> Result<u32> {
    server
        .pid()
        .ok_or_else(|| anyhow::anyhow!("redis-server is not running"))
}

/// Calls of each command since the server started (`INFO commandstats`), by name.
fn command_calls(server: &RedisServer) -> Result<BTreeMap<String, u64>> {
    let info = server
        .try_command(&["INFO", "commandstats"])
        .map_err(anyhow::Error::msg)?;
    Ok(info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        .filter_map(|(name, fields)| {
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.trim().parse().ok()?))
        })
        .collect())
}

fn not_run(redis: &std::result::Result<RedisServer, String>) -> String {
    match redis {
        Ok(_) => "not run".into(),
        Err(why) => format!("not run: {why}"),
    }
}

/// How many `echo` calls the fixture behind `session` served, by its own count (its
/// `call_count` tool, called through Manifold), against how many should have reached it.
fn upstream_calls(
    session: &mut Session,
    name: &str,
    expected: usize,
    invalid: &mut Vec<String>,
) -> Result<Value> {
    let served = served(session)?;
    if served != expected {
        invalid.push(format!(
            "{name}: the upstream served {served} echo calls, expected {expected}"
        ));
    }
    Ok(json!({ "expected": expected, "counted": served }))
}
