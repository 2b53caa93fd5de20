//! Manifold's resident memory with 20 upstreams (1,000 tools) and 100 (5,000 tools): idle
//! after startup, after the host lists the tools, at the peak of a pipelined load spread over
//! every upstream, and after it. Each round starts a fresh Manifold.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::mcp::RequestLine;
use crate::procstat::status_mb;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::Across;

const TOOLS_EACH: usize = 50;
const SIZES: [usize; 2] = [20, 100];
/// Lets startup work finish (catalog merges, thread stacks touched) before "idle".
const SETTLE: Duration = Duration::from_millis(300);
const FIGURES: [&str; 7] = [
    "startup_ms",
    "idle_mb",
    "after_list_mb",
    "load_peak_mb",
    "after_load_mb",
    "hwm_mb",
    "load_calls_per_s",
];

pub fn rss(setup: &Setup, plan: &Plan) -> Result<Value> {
    let mut rounds: [Vec<[f64; 7]>; 2] = Default::default();
    for round in 0..plan.rss_rounds {
        for k in 0..2 {
            let i = (round + k) % 2;
            rounds[i].push(one(setup, plan, SIZES[i])?);
        }
    }
    let mut out = Map::new();
    for (i, n) in SIZES.into_iter().enumerate() {
        let mut entry = Map::new();
        entry.insert("upstreams".into(), json!(n));
        entry.insert("tools".into(), json!(n * TOOLS_EACH));
        for (f, name) in FIGURES.iter().enumerate() {
            entry.insert(
                (*name).into(),
                Across::of(rounds[i].iter().map(|r| r[f])).to_json(),
            );
        }
        out.insert(format!("{n}x{TOOLS_EACH}"), Value::Object(entry));
    }
    out.insert("rounds".into(), json!(plan.rss_rounds));
    out.insert("load_calls".into(), json!(plan.pipelined_calls));
    Ok(Value::Object(out))
}

/// One fresh Manifold with `n` upstreams; the figures in `FIGURES` order.
fn one(setup: &Setup, plan: &Plan, n: usize) -> Result<[f64; 7]> {
    let spec = setup.through(
        &format!("rss-{n}x{TOOLS_EACH}"),
        &Upstream::many("u", n, TOOLS_EACH),
    )?;
    let mut session = Session::start(&spec, setup.limits)?;
    let pid = session.pid().context("RSS needs a local process")?;
    std::thread::sleep(SETTLE);
    let idle = status_mb(pid, "VmRSS:")?;
    let listed = session.result(&RequestLine::new("tools/list", &json!({})))?;
    super::expect_tools(session.label(), &listed, n * TOOLS_EACH)?;
    let after_list = status_mb(pid, "VmRSS:")?;
    let lines: Vec<RequestLine> = (0..n)
        .map(|i| RequestLine::echo(&format!("u{i}__tool_{}", i % TOOLS_EACH)))
        .collect();
    let mut peak = after_list;
    let mut sample = || peak = peak.max(status_mb(pid, "VmRSS:").unwrap_or(0.0));
    let rate = session.pipelined(
        &lines,
        plan.pipelined_calls,
        plan.window,
        plan.round_limit,
        &mut sample,
    )?;
    let after_load = status_mb(pid, "VmRSS:")?;
    let hwm = status_mb(pid, "VmHWM:")?;
    let startup = super::latency::ms(session.startup);
    Ok([
        startup,
        idle,
        after_list,
        peak.max(after_load),
        after_load,
        hwm,
        rate.per_sec().round(),
    ])
}
