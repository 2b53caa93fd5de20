//! Added latency with one request in flight: a small echo, and a 1 MB result. The fixture is
//! called directly and through Manifold in alternating rounds of the same run.

use anyhow::Result;
use serde_json::{json, Value};

use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::Usage;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{self, Summary};

const BIG_BYTES: usize = 1024 * 1024;

/// A small `tools/call` echo (~150 B), direct vs through.
pub fn latency(setup: &Setup, plan: &Plan) -> Result<Value> {
    let direct = RequestLine::echo("echo");
    let through = RequestLine::echo("alpha__echo");
    let calls = plan.latency_calls;
    let mut v = paired(
        setup,
        plan,
        "latency",
        [&direct, &through],
        calls,
        ECHO_TEXT.len(),
    )?;
    v["request_bytes"] = json!({ "direct": direct.len_with(1), "through": through.len_with(1) });
    Ok(v)
}

/// A `big` tool result of exactly 1 MB of text, direct vs through.
pub fn big(setup: &Setup, plan: &Plan) -> Result<Value> {
    let args = json!({ "bytes": BIG_BYTES });
    let mut direct = RequestLine::tools_call("big", &args);
    let mut through = RequestLine::tools_call("alpha__big", &args);
    (direct.min_answer, through.min_answer) = (BIG_BYTES, BIG_BYTES);
    let mut v = paired(
        setup,
        plan,
        "big",
        [&direct, &through],
        plan.big_calls,
        BIG_BYTES,
    )?;
    v["result_bytes"] = json!(BIG_BYTES);
    Ok(v)
}

/// Rounds of `calls` one-at-a-time calls, alternating between the fixture alone and the
/// fixture behind Manifold, both started once and kept for the whole scenario.
fn paired(
    setup: &Setup,
    plan: &Plan,
    tag: &str,
    lines: [&RequestLine; 2],
    calls: usize,
    text_len: usize,
) -> Result<Value> {
    let direct = setup.direct(&format!("{tag}-direct"), &[]);
    let through = setup.through(&format!("{tag}-through"), &[Upstream::plain("alpha")])?;
    let mut sessions = [
        Session::start(&direct, setup.limits)?,
        Session::start(&through, setup.limits)?,
    ];
    let warmup = Plan::warmup(calls);
    for (session, line) in sessions.iter_mut().zip(lines) {
        let result = session.result(line)?;
        super::expect_text(session.label(), &result, text_len)?;
        session.timed_calls(line, warmup, plan.round_limit)?;
    }
    let (rounds, cpu) = measure(&mut sessions, plan, lines, calls)?;
    let mut v = stats::compare(&rounds[0], &rounds[1]);
    v["rounds"] = json!(plan.rounds);
    v["calls_per_round"] = json!(calls);
    v["warmup_calls"] = json!(warmup);
    v["server_cpu_per_call"] = json!({ "direct": cpu[0], "through": cpu[1] });
    v["answer_bytes"] = json!({
        "direct": sessions[0].last_answer_len, "through": sessions[1].last_answer_len });
    v["startup_ms"] = json!({
        "direct": ms(sessions[0].startup), "through": ms(sessions[1].startup) });
    Ok(v)
}

/// The interleaved rounds; per side, each round's summary and the server process's CPU time
/// and context switches per call over all rounds (for Manifold: its own, not the upstream's).
fn measure(
    sessions: &mut [Session; 2],
    plan: &Plan,
    lines: [&RequestLine; 2],
    calls: usize,
) -> Result<([Vec<Summary>; 2], [Value; 2])> {
    let usage = |s: &Session| s.pid().map_or(Ok(Usage::default()), Usage::of);
    let before = [usage(&sessions[0])?, usage(&sessions[1])?];
    let mut rounds: [Vec<Summary>; 2] = [Vec::new(), Vec::new()];
    for round in 0..plan.rounds {
        // Alternate which side goes first, so neither always follows the other's burst.
        for k in 0..2 {
            let side = (round + k) % 2;
            let mut samples = sessions[side].timed_calls(lines[side], calls, plan.round_limit)?;
            rounds[side].push(Summary::of(&mut samples));
        }
    }
    let mut cpu = [Value::Null, Value::Null];
    for side in 0..2 {
        let done = rounds[side].iter().map(|r| r.count).sum();
        cpu[side] = usage(&sessions[side])?.per_call(before[side], done);
    }
    Ok((rounds, cpu))
}

pub fn ms(d: std::time::Duration) -> f64 {
    stats::round(d.as_secs_f64() * 1000.0)
}
