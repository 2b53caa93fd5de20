//! The scenarios. Each starts its own processes, runs bounded loops, and returns JSON.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::setup::Setup;
use crate::stats::{self, Summary};
use crate::target::StdioTarget;

/// Sizes of a run; `--quick` shrinks them for the smoke test.
#[derive(Clone, Copy)]
pub struct Sizes {
    pub rounds: usize,
    pub calls: usize,
    pub pipelined: usize,
    /// Upper bound on the wall time of any one loop.
    pub limit: Duration,
}

const ECHO: &str = r#"{"text":"hello from the load generator"}"#;

fn echo_params(tool: &str) -> String {
    format!(r#"{{"name":"{tool}","arguments":{ECHO}}}"#)
}

/// Sequential calls, one in flight; nanoseconds per call.
fn timed_calls(
    t: &mut StdioTarget,
    method: &str,
    params: &str,
    n: usize,
    limit: Duration,
) -> anyhow::Result<Vec<u64>> {
    let until = Instant::now() + limit;
    let mut out = Vec::with_capacity(n);
    while out.len() < n && Instant::now() < until {
        out.push(t.call_raw(method, params)?.as_nanos() as u64);
    }
    Ok(out)
}

/// Interleaved rounds of the same call straight to the fixture and through Manifold.
fn compare(
    s: &Setup,
    sz: Sizes,
    tag: &str,
    params_direct: &str,
    params_through: &str,
    n: usize,
) -> anyhow::Result<Value> {
    let mut direct = StdioTarget::start(&s.fixture, &Setup::fixture_args("alpha", &[]))?;
    let mut through = StdioTarget::start(&s.manifold, &s.manifold_args(tag, "alpha", 1, 0)?)?;
    timed_calls(
        &mut direct,
        "tools/call",
        params_direct,
        n / 10 + 1,
        sz.limit,
    )?;
    timed_calls(
        &mut through,
        "tools/call",
        params_through,
        n / 10 + 1,
        sz.limit,
    )?;
    let (mut d, mut t, mut added) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..sz.rounds {
        let dr = Summary::of(&mut timed_calls(
            &mut direct,
            "tools/call",
            params_direct,
            n,
            sz.limit,
        )?);
        let tr = Summary::of(&mut timed_calls(
            &mut through,
            "tools/call",
            params_through,
            n,
            sz.limit,
        )?);
        d.push(dr);
        t.push(tr);
        added.push(tr.minus(dr));
    }
    let (dm, _) = stats::median(&d);
    let (tm, _) = stats::median(&t);
    let (am, spread) = stats::median(&added);
    Ok(json!({
        "calls_per_round": n, "rounds": sz.rounds,
        "direct": dm.to_json(), "through": tm.to_json(), "added": am.to_json(),
        "added_p50_spread_us": [stats::round(spread.0), stats::round(spread.1)],
        "ratio_p50": stats::round(tm.p50 / dm.p50.max(0.001)),
    }))
}

pub fn latency(s: &Setup, sz: Sizes) -> anyhow::Result<Value> {
    compare(
        s,
        sz,
        "latency",
        &echo_params("echo"),
        &echo_params("alpha__echo"),
        sz.calls,
    )
}

pub fn big(s: &Setup, sz: Sizes) -> anyhow::Result<Value> {
    let p = |tool: &str| format!(r#"{{"name":"{tool}","arguments":{{"bytes":1048576}}}}"#);
    compare(
        s,
        sz,
        "big",
        &p("big"),
        &p("alpha__big"),
        (sz.calls / 50).max(20),
    )
}

/// Keeps `window` requests in flight; returns messages per second.
fn pipelined(
    t: &mut StdioTarget,
    params: &[String],
    total: usize,
    limit: Duration,
) -> anyhow::Result<f64> {
    let window = 128;
    let start = Instant::now();
    let (mut sent, mut done) = (0, 0);
    while done < total && start.elapsed() < limit {
        while sent < total && sent - done < window {
            t.send("tools/call", &params[sent % params.len()])?;
            sent += 1;
        }
        t.read_response()?;
        done += 1;
    }
    while done < sent {
        t.read_response()?;
        done += 1;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

pub fn throughput(s: &Setup, sz: Sizes) -> anyhow::Result<Value> {
    let mut direct = StdioTarget::start(&s.fixture, &Setup::fixture_args("alpha", &[]))?;
    let mut one = StdioTarget::start(&s.manifold, &s.manifold_args("tp1", "alpha", 1, 0)?)?;
    let mut ten = StdioTarget::start(&s.manifold, &s.manifold_args("tp10", "alpha", 10, 0)?)?;
    let spread: Vec<String> = (0..10)
        .map(|i| echo_params(&format!("alpha{i}__echo")))
        .collect();
    let (mut d, mut o, mut te) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..sz.rounds {
        d.push(pipelined(
            &mut direct,
            &[echo_params("echo")],
            sz.pipelined,
            sz.limit,
        )?);
        o.push(pipelined(
            &mut one,
            &[echo_params("alpha__echo")],
            sz.pipelined,
            sz.limit,
        )?);
        te.push(pipelined(&mut ten, &spread, sz.pipelined, sz.limit)?);
    }
    let (d, o, te) = (
        stats::median_of(&mut d),
        stats::median_of(&mut o),
        stats::median_of(&mut te),
    );
    Ok(json!({
        "messages_per_round": sz.pipelined, "window": 128,
        "direct_msgs_per_s": d.round(), "through_1_upstream_msgs_per_s": o.round(),
        "through_10_upstreams_msgs_per_s": te.round(), "ratio_1_upstream": stats::round(o / d),
    }))
}

pub fn list(s: &Setup, sz: Sizes) -> anyhow::Result<Value> {
    let mut out = serde_json::Map::new();
    for upstreams in [10, 100] {
        let mut t = StdioTarget::start(
            &s.manifold,
            &s.manifold_args(&format!("list{upstreams}"), "u", upstreams, 50)?,
        )?;
        let listed = t.call_value("tools/list", "{}")?;
        let tools = listed["result"]["tools"].as_array().map_or(0, Vec::len);
        let n = (sz.calls / 20).max(20);
        let mut rounds = Vec::new();
        for _ in 0..sz.rounds {
            rounds.push(Summary::of(&mut timed_calls(
                &mut t,
                "tools/list",
                "{}",
                n,
                sz.limit,
            )?));
        }
        let (m, spread) = stats::median(&rounds);
        out.insert(format!("{upstreams}x50"), json!({"tools": tools, "latency": m.to_json(), "p50_spread_us": [stats::round(spread.0), stats::round(spread.1)]}));
    }
    Ok(Value::Object(out))
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

pub fn rss(s: &Setup, sz: Sizes) -> anyhow::Result<Value> {
    let mut out = serde_json::Map::new();
    for upstreams in [20, 100] {
        let mut t = StdioTarget::start(
            &s.manifold,
            &s.manifold_args(&format!("rss{upstreams}"), "u", upstreams, 50)?,
        )?;
        std::thread::sleep(Duration::from_millis(500));
        let idle = rss_kib(t.pid());
        let spread: Vec<String> = (0..upstreams)
            .map(|i| echo_params(&format!("u{i}__tool_0")))
            .collect();
        pipelined(&mut t, &spread, sz.pipelined, sz.limit)?;
        t.call_raw("tools/list", "{}")?;
        let loaded = rss_kib(t.pid());
        out.insert(format!("{upstreams}_upstreams"), json!({"tools": upstreams * 50, "idle_mib": stats::round(idle as f64 / 1024.0), "after_load_mib": stats::round(loaded as f64 / 1024.0)}));
    }
    Ok(Value::Object(out))
}
