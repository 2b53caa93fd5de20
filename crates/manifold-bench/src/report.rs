//! The machine the figures came from, and the human table with PERF.md's goals beside them.

use std::fmt::Write as _;

use serde_json::{json, Value};

pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({ "nproc": nproc, "cpu": cpu, "kernel": kernel })
}

pub fn table(doc: &Value) -> String {
    let s = &doc["scenarios"];
    let mut out = String::new();
    let m = &doc["machine"];
    let _ = writeln!(
        out,
        "machine: {} cores, {}, kernel {}",
        m["nproc"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "{:<44} {:>14} {:>14}",
        "figure (medians of rounds)", "measured", "goal"
    );
    let mut row = |name: &str, v: &Value, unit: &str, goal: &str| {
        if !v.is_null() {
            let _ = writeln!(out, "{name:<44} {:>11} {unit:<2} {goal:>14}", v.to_string());
        }
    };
    let lat = &s["latency"];
    row(
        "small tools/call, direct p50",
        &lat["direct"]["p50_us"],
        "us",
        "",
    );
    row(
        "small tools/call, through p50",
        &lat["through"]["p50_us"],
        "us",
        "",
    );
    row(
        "small tools/call, added p50",
        &lat["added"]["p50_us"],
        "us",
        "<= 10 us",
    );
    row(
        "small tools/call, added p90",
        &lat["added"]["p90_us"],
        "us",
        "",
    );
    row(
        "small tools/call, added p99",
        &lat["added"]["p99_us"],
        "us",
        "<= 30 us",
    );
    row(
        "small tools/call, added max",
        &lat["added"]["max_us"],
        "us",
        "",
    );
    let tp = &s["throughput"];
    row("pipelined, direct", &tp["direct_msgs_per_s"], "/s", "");
    row(
        "pipelined, through, 1 upstream",
        &tp["through_1_upstream_msgs_per_s"],
        "/s",
        ">= 150k/s",
    );
    row(
        "pipelined, through, 10 upstreams",
        &tp["through_10_upstreams_msgs_per_s"],
        "/s",
        "",
    );
    row(
        "tools/list 10 x 50, p50",
        &s["list"]["10x50"]["latency"]["p50_us"],
        "us",
        "<= 100 us",
    );
    row(
        "tools/list 100 x 50, p50",
        &s["list"]["100x50"]["latency"]["p50_us"],
        "us",
        "<= 1000 us",
    );
    row(
        "1 MB result, added p50",
        &s["big"]["added"]["p50_us"],
        "us",
        "<= 500 us",
    );
    row(
        "RSS idle, 20 upstreams / 1000 tools",
        &s["rss"]["20_upstreams"]["idle_mib"],
        "MB",
        "<= 15 MB",
    );
    row(
        "RSS after load, 20 upstreams",
        &s["rss"]["20_upstreams"]["after_load_mib"],
        "MB",
        "",
    );
    row(
        "RSS idle, 100 upstreams / 5000 tools",
        &s["rss"]["100_upstreams"]["idle_mib"],
        "MB",
        "<= 40 MB",
    );
    row(
        "RSS after load, 100 upstreams",
        &s["rss"]["100_upstreams"]["after_load_mib"],
        "MB",
        "",
    );
    out
}
