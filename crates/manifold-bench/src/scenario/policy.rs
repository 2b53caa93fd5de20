//! What the policy step (teams and limits) costs a small `tools/call` over stdio: the
//! `latency` call in interleaved rounds of one run, four ways: the fixture called directly,
//! Manifold with no teams or limits, and Manifold serving as a team (`--team`) with a view
//! (include and exclude globs) and limits that never refuse (a team rate, a team+tool quota,
//! a global per-tool rate), counted in memory, then in Redis. The Redis one talks to a
//! `redis-server` this scenario starts on 127.0.0.1 and kills at its end; without a
//! `redis-server` that setting is not run and the report says why.
//!
//! Every answer is checked: a call answered with an error (a refusal by a limit, an
//! unreachable Redis with `fail_open = false`) is counted, not timed, and any such answer
//! marks the whole run invalid in the report. Before measuring, a Manifold with the same
//! config but a quota of one call shows that the limits are applied and that a refusal is
//! noticed; after it, Redis's own command counts show that every measured call was checked
//! there.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use super::counted;
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::Usage;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats;
use crate::target::TargetSpec;
use manifold_testkit::redis_server::RedisServer;

/// The goal: the policy step in memory adds at most this much to the p50 over no policy.
const POLICY_GOAL_US: f64 = 2.0;

/// The team Manifold serves as.
const TEAM: &str = "red";

/// A team+tool quota no run comes near.
const NEVER_QUOTA: &str = "1000000000/day";

/// Calls made to a Manifold whose quota is one call, after that one call: all are refused.
const REFUSAL_CALLS: usize = 3;

/// Key prefixes in Redis: the refusal check's counts must not meet the measured ones.
const PREFIX: &str = "manifold-load";
const CHECK_PREFIX: &str = "manifold-load-check";

/// The sides, in the order of the JSON document and the table.
pub(crate) const SIDES: [(&str, &str); 4] = [
    ("direct", "direct to the fixture"),
    ("plain", "Manifold, no teams or limits"),
    ("memory", "Manifold, team + limits in memory"),
    ("redis", "Manifold, team + limits in Redis"),
];

/// The comparisons reported: (key, base side, side, name in the table).
pub(crate) const PAIRS: [(&str, usize, usize, &str); 5] = [
    ("plain_vs_direct", 0, 1, "policy: none, added over direct"),
    (
        "memory_vs_direct",
        0,
        2,
        "policy: memory, added over direct",
    ),
    ("redis_vs_direct", 0, 3, "policy: Redis, added over direct"),
    (
        "memory_vs_plain",
        1,
        2,
        "policy step, memory, added over none",
    ),
    (
        "redis_vs_plain",
        1,
        3,
        "policy step, Redis, added over none",
    ),
];

/// Redis commands that run the limit script.
const SCRIPT_COMMANDS: [&str; 4] = ["evalsha", "eval", "evalsha_ro", "eval_ro"];

pub fn policy(setup: &Setup, plan: &Plan) -> Result<Value> {
    let ups = [Upstream::plain("alpha")];
    let (direct, through) = (RequestLine::echo("echo"), RequestLine::echo("alpha__echo"));
    // Started first, so that it is dropped last: after every Manifold that talks to it.
    let redis = start_redis();
    let memory = "backend = \"memory\"\n".to_owned();
    let in_redis = |prefix: &str| {
        redis.as_ref().ok().map(|server| {
            format!(
                "backend = \"redis\"\nredis_url = \"{}\"\nkey_prefix = \"{prefix}\"\nfail_open = false\n",
                server.url()
            )
        })
    };

    // The limits are applied, and a refused call is noticed: a quota of one call refuses the
    // calls after it.
    let mut refusals = Map::new();
    let mut backends = vec![("memory", memory.clone())];
    backends.extend(in_redis(CHECK_PREFIX).map(|b| ("redis", b)));
    for (name, backend) in &backends {
        let spec = setup.through_as(
            &format!("policy-check-{name}"),
            &ups,
            &tables(backend, "1/day"),
            Some(TEAM),
        )?;
        refusals.insert((*name).into(), refusal_check(&spec, setup, &through)?);
    }

    let mut specs: Vec<(TargetSpec, &RequestLine)> = vec![
        (setup.direct("policy-direct", &[]), &direct),
        (setup.through_as("policy-plain", &ups, "", None)?, &through),
        (
            setup.through_as(
                "policy-memory",
                &ups,
                &tables(&memory, NEVER_QUOTA),
                Some(TEAM),
            )?,
            &through,
        ),
    ];
    let redis_tables = in_redis(PREFIX).map(|b| tables(&b, NEVER_QUOTA));
    if let Some(t) = &redis_tables {
        specs.push((
            setup.through_as("policy-redis", &ups, t, Some(TEAM))?,
            &through,
        ));
    }
    let mut sides = counted::start_all(&specs, setup, plan, ECHO_TEXT.len())?;
    let (calls, warmup) = (plan.latency_calls, Plan::warmup(plan.latency_calls));
    let redis_before = match &redis {
        Ok(server) => Some((command_calls(server)?, Usage::of(pid_of(server)?)?)),
        Err(_) => None,
    };
    counted::rounds(&mut sides, plan, calls)?;

    let mut v = Map::new();
    let mut invalid = Vec::new();
    let missing = json!({ "not_run": not_run(&redis) });
    counted::report(&sides, &SIDES, &PAIRS, &missing, &mut v, &mut invalid)?;
    let server = match (&redis, redis_before, sides.get(3)) {
        (Ok(server), Some((commands, cpu)), Some(side)) => {
            let after = command_calls(server)?;
            let scripts = script_calls(&after).saturating_sub(script_calls(&commands));
            let checked = side.measured as u64;
            if scripts < checked {
                invalid.push(format!(
                    "redis: Redis ran the limit script {scripts} times for {checked} calls"
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
                "commands_during_rounds": during,
                "scripts_per_call": stats::round2(scripts as f64 / checked.max(1) as f64),
                "cpu_per_call": Usage::of(pid_of(server)?)?.per_call(cpu, side.measured),
            })
        }
        _ => json!({ "not_run": not_run(&redis) }),
    };
    let errors: usize = sides.iter().map(|s| s.seen.errors).sum();
    drop(sides);
    v.insert("redis_server".into(), server);
    v.insert("refusal_check".into(), Value::Object(refusals));
    v.insert("errors".into(), json!(errors));
    v.insert("valid".into(), json!(invalid.is_empty()));
    v.insert("invalid_because".into(), json!(invalid));
    v.insert(
        "config".into(),
        json!({
            "team": TEAM,
            "memory": tables(&memory, NEVER_QUOTA),
            "redis": redis_tables,
        }),
    );
    v.insert("goal_added_p50_us".into(), json!(POLICY_GOAL_US));
    v.insert("rounds".into(), json!(plan.rounds));
    v.insert("calls_per_round".into(), json!(calls));
    v.insert("warmup_calls".into(), json!(warmup));
    v.insert(
        "request_bytes".into(),
        json!({ "direct": direct.len_with(1), "through": through.len_with(1) }),
    );
    Ok(Value::Object(v))
}

/// The team's view and limits (`backend`: the lines of the `[limits]` table that choose
/// where counts are kept). The view admits the called tool through an include glob and hides
/// others through exclude globs; three limits apply to every call of it: the team's rate, the
/// team+tool quota (`quota`), and the global per-tool rate.
fn tables(backend: &str, quota: &str) -> String {
    format!(
        r#"[teams.{TEAM}]
tools = {{ include = ["alpha__*"], exclude = ["alpha__crash", "alpha__big", "alpha__tool_*"] }}
limits = {{ rate = "1000000/s", burst = 1000000 }}

[teams.{TEAM}.tool_limits.alpha__echo]
quota = "{quota}"

[limits]
{backend}
[limits.tools.alpha__echo]
rate = "1000000/s"
"#
    )
}

/// A running server, or why Redis is not measured. It is killed when dropped (success, error
/// or panic).
fn start_redis() -> std::result::Result<RedisServer, String> {
    RedisServer::try_start()
}

fn pid_of(server: &RedisServer) -> Result<u32> {
    server
        .pid()
        .ok_or_else(|| anyhow::anyhow!("redis-server is not running"))
}

/// Calls of each command since the server started (`INFO commandstats`), by name (`evalsha`,
/// `eval`, ...).
pub(crate) fn command_calls(server: &RedisServer) -> Result<BTreeMap<String, u64>> {
    let info = server
        .try_command(&["INFO", "commandstats"])
        .map_err(anyhow::Error::msg)?;
    // cmdstat_evalsha:calls=12,usec=34,...
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

/// One call admitted, then every call refused, and each refusal counted as an error.
fn refusal_check(spec: &TargetSpec, setup: &Setup, line: &RequestLine) -> Result<Value> {
    let mut session = Session::start(spec, setup.limits)?;
    let limit = std::time::Duration::from_secs(30);
    let first = session.counted_calls(line, 1, limit)?;
    if first.errors != 0 {
        bail!(
            "{}: the one call its quota allows was answered with an error: {}",
            session.label(),
            first.first_error.as_deref().unwrap_or("?")
        );
    }
    let refused = session.counted_calls(line, REFUSAL_CALLS, limit)?;
    if refused.errors != REFUSAL_CALLS {
        bail!(
            "{}: a quota of one call let {} of {REFUSAL_CALLS} further calls through: its \
             limits are not applied, and the figures would measure nothing",
            session.label(),
            refused.samples.len()
        );
    }
    let answer = refused.first_error.unwrap_or_default();
    let error = serde_json::from_str::<Value>(&answer).unwrap_or_default()["error"].take();
    Ok(json!({
        "quota": "1/day",
        "refused": refused.errors,
        "of": REFUSAL_CALLS,
        "code": error["code"],
        "kind": error["data"]["kind"],
        "answer": answer,
    }))
}

fn script_calls(calls: &BTreeMap<String, u64>) -> u64 {
    SCRIPT_COMMANDS.iter().filter_map(|c| calls.get(*c)).sum()
}
