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
//! Every answer is counted: an error answer is counted instead of timed, and any makes the run
//! invalid. After the rounds, the fixture's own count of its `echo` calls (its `call_count`
//! tool, called through each Manifold and not cached) must be exactly what should have reached
//! it: the first call alone where every later call was a hit, every call where each was a miss
//! or nothing was cached. Otherwise the run is invalid too.

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use super::counted;
use super::http_throughput::{self, Kind, Side as HttpSide};
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};

/// The goal: a hit adds at most this much to the p50 of the direct call.
const HIT_GOAL_US: f64 = 10.0;

/// The fixture's `echo`, cached for longer than any run.
const CACHED: &str = "[upstreams.alpha.tool_cache.echo]\nttl = \"1h\"\n";

/// The budget of every cache together where every call is a miss: about 1,700 entries of
/// this call (310 bytes each, answer and key), so the cache is full before the warm-up ends
/// and every measured miss pushes an entry out.
const MISS_BUDGET: &str = "[cache]\nmax_bytes = \"512KiB\"\n";

/// The sides over stdio, in the order of the JSON document and the table.
pub(crate) const SIDES: [(&str, &str); 4] = [
    ("direct", "direct to the fixture"),
    ("hit", "Manifold, cached, every call a hit"),
    ("miss", "Manifold, cached, every call a miss"),
    ("uncached", "Manifold, no cache"),
];

/// The comparisons reported: (key, base side, side, name in the table).
pub(crate) const PAIRS: [(&str, usize, usize, &str); 5] = [
    ("hit_vs_direct", 0, 1, "cache hit, added over direct"),
    ("miss_vs_direct", 0, 2, "cache miss, added over direct"),
    ("uncached_vs_direct", 0, 3, "no cache, added over direct"),
    ("hit_vs_uncached", 3, 1, "cache hit, added over no cache"),
    ("miss_vs_uncached", 3, 2, "cache miss, added over no cache"),
];

pub fn cache(setup: &Setup, plan: &Plan) -> Result<Value> {
    let ups = [Upstream::plain("alpha")];
    let direct = RequestLine::echo("echo");
    let same = RequestLine::echo("alpha__echo");
    let distinct = RequestLine::echo_numbered("alpha__echo");
    let miss_tables = format!("{CACHED}\n{MISS_BUDGET}");
    let specs = [
        (setup.direct("cache-direct", &[]), &direct),
        (setup.through_as("cache-hit", &ups, CACHED, None)?, &same),
        (
            setup.through_as("cache-miss", &ups, &miss_tables, None)?,
            &distinct,
        ),
        (setup.through("cache-uncached", &ups)?, &distinct),
    ];
    let mut sides = counted::start_all(&specs, setup, plan, ECHO_TEXT.len())?;
    let (calls, warmup) = (plan.latency_calls, Plan::warmup(plan.latency_calls));
    counted::rounds(&mut sides, plan, calls)?;

    let mut v = Map::new();
    let mut invalid = Vec::new();
    counted::report(&sides, &SIDES, &PAIRS, &Value::Null, &mut v, &mut invalid)?;
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
        json!({ "hit": CACHED, "miss": miss_tables, "uncached": "" }),
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

/// How many `echo` calls the fixture behind `session` served, by its own count (its
/// `call_count` tool, called through Manifold), against how many should have reached it.
fn upstream_calls(
    session: &mut Session,
    name: &str,
    expected: usize,
    invalid: &mut Vec<String>,
) -> Result<Value> {
    let line = RequestLine::tools_call("alpha__call_count", &json!({ "what": "tool:echo" }));
    session.ready()?;
    let result = session.result(&line)?;
    let text = result.pointer("/content/0/text").and_then(Value::as_str);
    let Some(served) = text.and_then(|t| t.parse::<usize>().ok()) else {
        bail!(
            "{}: call_count answered {}",
            session.label(),
            super::excerpt(&result)
        );
    };
    if served != expected {
        invalid.push(format!(
            "{name}: the upstream served {served} echo calls, expected {expected}"
        ));
    }
    Ok(json!({ "expected": expected, "counted": served }))
}
