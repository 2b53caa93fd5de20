//! Pipelined calls from one host: the fixture alone, Manifold in front of it, and Manifold in
//! front of ten fixtures with the calls spread over all of them.

use anyhow::Result;
use serde_json::{json, Value};

use crate::mcp::RequestLine;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{round2, Across};

const SPREAD: usize = 10;

pub fn throughput(setup: &Setup, plan: &Plan) -> Result<Value> {
    let specs = [
        setup.direct("throughput-direct", &[]),
        setup.through("throughput-1", &[Upstream::plain("alpha")])?,
        setup.through("throughput-10", &Upstream::many("alpha", SPREAD, 0))?,
    ];
    let lines: [Vec<RequestLine>; 3] = [
        vec![RequestLine::echo("echo")],
        vec![RequestLine::echo("alpha__echo")],
        (0..SPREAD)
            .map(|i| RequestLine::echo(&format!("alpha{i}__echo")))
            .collect(),
    ];
    let mut sessions = Vec::new();
    for spec in &specs {
        sessions.push(Session::start(spec, setup.limits)?);
    }
    let (total, window, limit) = (plan.pipelined_calls, plan.window, plan.round_limit);
    for (session, lines) in sessions.iter_mut().zip(&lines) {
        session.pipelined(lines, total / 10 + 1, window, limit, &mut || {})?;
    }
    let (rates, calls) = measure(&mut sessions, &lines, plan)?;
    let [direct, one, ten] = rates.each_ref().map(|r| Across::of(r.iter().copied()));
    let ratio = |a: Across| round2(a.median / direct.median.max(1e-9));
    let [d, o, t] = [direct, one, ten].map(|a| a.to_json());
    let per_round = |i: usize| json!(rates[i].iter().map(|r| r.round()).collect::<Vec<_>>());
    Ok(json!({
        "unit": "calls/s (one request and its answer per call)",
        "rounds": plan.rounds,
        "calls_per_round": total,
        "calls": calls,
        "window": window,
        "ratio_1": ratio(one),
        "ratio_10": ratio(ten),
        "direct": { "calls_per_s": d, "per_round": per_round(0) },
        "through_1": { "calls_per_s": o, "per_round": per_round(1) },
        "through_10": { "calls_per_s": t, "per_round": per_round(2) },
    }))
}

/// Interleaved rounds over the three targets; calls per second of each round, total calls.
fn measure(
    sessions: &mut [Session],
    lines: &[Vec<RequestLine>; 3],
    plan: &Plan,
) -> Result<([Vec<f64>; 3], u64)> {
    let (total, window, limit) = (plan.pipelined_calls, plan.window, plan.round_limit);
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut calls = 0;
    for round in 0..plan.rounds {
        // Rotate the order so no target always runs right after the same other one.
        for k in 0..3 {
            let i = (round + k) % 3;
            let rate = sessions[i].pipelined(&lines[i], total, window, limit, &mut || {})?;
            rates[i].push(rate.per_sec());
            calls += rate.calls;
        }
    }
    Ok((rates, calls))
}
