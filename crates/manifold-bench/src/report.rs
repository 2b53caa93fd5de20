//! The machine the figures came from, the goals (BENCHMARKS.md) checked against the figures, and the
//! human tables (stdio against the direct call; HTTP against the peer gateway). Everything is
//! read back from the JSON document, so the tables and the file can never disagree.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// One line of the table.
struct Row {
    figure: String,
    direct: String,
    through: String,
    added: String,
    ratio: String,
    /// Min..max over rounds of the figure the goal is about.
    spread: String,
    goal: Option<(String, bool)>,
}

/// nproc, CPU model, kernel and load: the context any figure needs on a shared machine.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned());
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    json!({
        "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu": cpu,
        "kernel": read("/proc/sys/kernel/osrelease"),
        "loadavg": read("/proc/loadavg"),
    })
}

/// The one-line description of the machine used in the table and in BENCHMARKS.md.
pub fn machine_line(m: &Value) -> String {
    format!(
        "{} cores, {}, kernel {}, loadavg at start {}",
        m["nproc"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?"),
        m["loadavg"].as_str().unwrap_or("?"),
    )
}

/// Every goal (BENCHMARKS.md) that the document has a figure for.
pub fn goals(doc: &Value) -> Value {
    let s = &doc["scenarios"];
    let stdio = rows(s).into_iter().map(|r| (r.figure, r.goal));
    let http = http_rows(s).into_iter().map(|r| (r.figure, r.goal));
    let telemetry = telemetry_rows(&s["telemetry"])
        .into_iter()
        .map(|r| (r.figure, r.goal));
    let policy = policy_rows(&s["policy"])
        .into_iter()
        .map(|r| (r.figure, r.goal));
    let cache = cache_rows(&s["cache"])
        .into_iter()
        .map(|r| (r.figure, r.goal));
    let mut all: Vec<Value> = stdio
        .chain(telemetry)
        .chain(policy)
        .chain(cache)
        .chain(http)
        .filter_map(|(figure, goal)| {
            goal.map(|(goal, met)| json!({ "figure": figure, "goal": goal, "met": met }))
        })
        .collect();
    all.extend(crate::scenario::search::goals(&s["search"]));
    Value::Array(all)
}

pub fn table(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "machine: {}", machine_line(&doc["machine"]));
    if doc["quick"] == true {
        out.push_str("QUICK RUN: small counts, figures are not to be quoted\n");
    }
    let stdio = rows(&doc["scenarios"]);
    if !stdio.is_empty() {
        stdio_table(&mut out, &stdio);
    }
    telemetry_table(&mut out, &doc["scenarios"]["telemetry"]);
    policy_table(&mut out, &doc["scenarios"]["policy"]);
    cache_table(&mut out, &doc["scenarios"]["cache"]);
    replicas_table(&mut out, &doc["scenarios"]["replicas"]);
    crate::scenario::soak::table::write(&mut out, &doc["scenarios"]["soak"]);
    let http = http_rows(&doc["scenarios"]);
    if !http.is_empty() {
        http_table(&mut out, &http);
    }
    stateless_table(&mut out, &doc["scenarios"]);
    crate::scenario::search::table(&mut out, &doc["scenarios"]["search"]);
    out
}

fn stdio_table(out: &mut String, rows: &[Row]) {
    row_table(out, rows, ["direct", "through"]);
}

/// Rows of `Row`, the two compared columns named by `sides`.
fn row_table(out: &mut String, rows: &[Row], sides: [&str; 2]) {
    let header = [
        "figure (median of rounds)",
        sides[0],
        sides[1],
        "added",
        "ratio",
        "spread",
        "goal",
    ];
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>10} {:>10} {:>6} {:>17}  {}",
        header[0], header[1], header[2], header[3], header[4], header[5], header[6]
    );
    for r in rows {
        let goal = r.goal.as_ref().map_or(String::new(), |(g, met)| {
            format!("{g} {}", if *met { "ok" } else { "MISSED" })
        });
        let _ = writeln!(
            out,
            "{:<40} {:>10} {:>10} {:>10} {:>6} {:>17}  {goal}",
            r.figure, r.direct, r.through, r.added, r.ratio, r.spread
        );
    }
}

fn rows(s: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    paired_rows(
        &mut rows,
        &s["latency"],
        "small tools/call",
        &[(0, "<= 10 us", 10.0), (2, "<= 30 us", 30.0)],
    );
    cpu_rows(&mut rows, &s["latency"], "small tools/call");
    throughput_rows(&mut rows, &s["throughput"]);
    list_rows(&mut rows, &s["list"]);
    paired_rows(
        &mut rows,
        &s["big"],
        "1 MB result",
        &[(0, "<= 500 us", 500.0)],
    );
    rss_rows(&mut rows, &s["rss"]);
    rows
}

const PCT: [&str; 4] = ["p50", "p90", "p99", "max"];

/// The sides of the `telemetry` scenario and their names in the table.
const TELEMETRY_SIDES: [(&str, &str); 4] = [
    ("direct", "direct to the fixture"),
    ("off", "Manifold, telemetry off"),
    ("metrics", "Manifold, metrics (default)"),
    ("tracing", "Manifold, metrics + tracing"),
];

/// Each setting's percentiles and server CPU, then what metrics and tracing add over
/// telemetry off (with the goal), then what the OTLP receiver got.
fn telemetry_table(out: &mut String, v: &Value) {
    if v.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nTelemetry, small tools/call over stdio ({} rounds of {} calls, interleaved)",
        v["rounds"], v["calls_per_round"]
    );
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>10} {:>10} {:>10} {:>17} {:>10} {:>9}",
        "setting (median of rounds)",
        "p50",
        "p90",
        "p99",
        "max",
        "spread of p50",
        "CPU/call",
        "switches"
    );
    for (key, name) in TELEMETRY_SIDES {
        let side = &v[key];
        let cpu = &side["server_cpu_per_call"];
        let _ = writeln!(
            out,
            "{name:<40} {:>10} {:>10} {:>10} {:>10} {:>17} {:>10} {:>9}",
            us(num(&side["p50_us"])),
            us(num(&side["p90_us"])),
            us(num(&side["p99_us"])),
            us(num(&side["max_us"])),
            range(&side["spread"]["p50_us"], us),
            us(num(&cpu["cpu_us"])),
            two(num(&cpu["switches"])),
        );
    }
    out.push('\n');
    row_table(out, &telemetry_rows(v), ["off", "with"]);
    let (during, total) = (&v["otlp"]["during_rounds"], &v["otlp"]["total"]);
    let _ = writeln!(
        out,
        "OTLP receiver: {} export requests, {} bytes, {} spans ({} per traced call; during the rounds: {} requests, {} spans)",
        total["requests"],
        total["bytes"],
        total["spans"],
        v["otlp"]["spans_per_call"],
        during["requests"],
        during["spans"],
    );
}

/// What metrics, and metrics with tracing, add over telemetry off; the goal is on tracing.
fn telemetry_rows(v: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    if v.is_null() {
        return rows;
    }
    let limit = num(&v["goal_added_p50_us"]);
    for (key, what) in [
        ("metrics_vs_off", "telemetry: metrics, added"),
        ("tracing_vs_off", "telemetry: metrics + tracing, added"),
    ] {
        let c = &v[key];
        for (i, p) in PCT.iter().take(3).enumerate() {
            let k = format!("{p}_us");
            let added = num(&c["added"][&k]);
            let goal = (key == "tracing_vs_off" && i == 0)
                .then(|| (format!("added <= {}", us(limit)), added <= limit));
            rows.push(Row {
                figure: format!("{what} {p}"),
                direct: us(num(&c["direct"][&k])),
                through: us(num(&c["through"][&k])),
                added: us(added),
                ratio: format!("{:.2}", num(&c["ratio"][*p])),
                spread: range(&c["added"]["spread"][&k], us),
                goal,
            });
        }
    }
    rows
}

/// Each setting's percentiles, server CPU and error answers; then what each adds over the
/// direct call and what the policy step adds over no policy (with the goal); then Redis's
/// side, the refusal check and whether the run is valid.
fn policy_table(out: &mut String, v: &Value) {
    if v.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nTeams and limits (the policy step), small tools/call over stdio ({} rounds of {} calls, interleaved)",
        v["rounds"], v["calls_per_round"]
    );
    counted_sides_table(out, v, &crate::scenario::policy::SIDES);
    out.push('\n');
    row_table(out, &policy_rows(v), ["base", "with"]);
    let redis = &v["redis_server"];
    match redis["not_run"].as_str() {
        Some(why) => {
            let _ = writeln!(out, "Redis setting {why}");
        }
        None => {
            let _ = writeln!(
                out,
                "Redis (redis-server from {}): the limit script ran {} times per measured call; redis-server CPU/call {}",
                redis["binary"].as_str().unwrap_or("?"),
                redis["scripts_per_call"],
                us(num(&redis["cpu_per_call"]["cpu_us"])),
            );
        }
    }
    let checks = &v["refusal_check"];
    if let Some(checks) = checks.as_object() {
        let each: Vec<String> = checks
            .iter()
            .map(|(backend, c)| {
                format!(
                    "{backend} {} of {} ({} {})",
                    c["refused"],
                    c["of"],
                    c["code"],
                    c["kind"].as_str().unwrap_or("?")
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "Refusal check (a team+tool quota of 1 call, then more calls): refused and counted as errors: {}",
            each.join(", ")
        );
    }
    let calls: f64 = crate::scenario::policy::SIDES
        .iter()
        .map(|(k, _)| v[*k]["calls"].as_f64().unwrap_or(0.0))
        .sum();
    validity(out, v, calls);
}

/// Added p50 and p99 of each setting over the direct call and of the policy step over no
/// policy; the goal is on the step in memory, and is never met by an invalid run.
fn policy_rows(v: &Value) -> Vec<Row> {
    added_rows(v, &crate::scenario::policy::PAIRS, "memory_vs_plain")
}

/// Each side's percentiles, server CPU and error answers over stdio; what a hit, a miss and
/// plain forwarding add (with the goal, on the hit); calls/s over HTTP with and without the
/// cache; the upstream's own count of the calls that reached it; whether the run is valid.
fn cache_table(out: &mut String, v: &Value) {
    if v.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nResult cache, small tools/call over stdio ({} rounds of {} calls, interleaved)",
        v["rounds"], v["calls_per_round"]
    );
    counted_sides_table(out, v, &crate::scenario::cache::SIDES);
    out.push('\n');
    row_table(out, &cache_rows(v), ["base", "with"]);
    let redis = &v["redis_server"];
    match redis["not_run"].as_str() {
        Some(why) => {
            let _ = writeln!(out, "Redis-tier side {why}");
        }
        None if !redis.is_null() => {
            let _ = writeln!(
                out,
                "Redis tier (redis-server from {}): {} calls stored beforehand by another Manifold; {} lookups (EVALSHA) during the rounds; its upstream served {} echo calls; redis-server CPU/call {}",
                redis["binary"].as_str().unwrap_or("?"),
                redis["filled_beforehand"],
                redis["commands_during_rounds"]["evalsha"],
                redis["upstream_served_after_rounds"],
                us(num(&redis["cpu_per_call"]["cpu_us"])),
            );
        }
        None => {}
    }
    let http = &v["http"];
    let _ = writeln!(
        out,
        "\nResult cache over Streamable HTTP, {} connections ({} rounds of {} calls, interleaved)",
        http["connections"], http["rounds"], http["calls_per_round"]
    );
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>17} {:>10} {:>10} {:>10} {:>7}",
        "side (median of rounds)", "calls/s", "spread", "p50", "p99", "CPU/call", "errors"
    );
    for (key, name) in [
        ("cached", "cached, every call a hit"),
        ("forwarded", "no cache, every call forwarded"),
    ] {
        let side = &http[key];
        let rate = &side["calls_per_s"];
        let _ = writeln!(
            out,
            "{name:<40} {:>10} {:>17} {:>10} {:>10} {:>10} {:>7}",
            rate1(num(&rate["median"])),
            format!("{}..{}", rate1(num(&rate["min"])), rate1(num(&rate["max"]))),
            us(num(&side["latency"]["p50_us"])),
            us(num(&side["latency"]["p99_us"])),
            us(num(&side["server_cpu_per_call"]["cpu_us"])),
            side["errors"],
        );
    }
    let r = &http["cached_over_forwarded"];
    let _ = writeln!(
        out,
        "cached over forwarded, calls/s: {} ({})",
        two(num(&r["median"])),
        range(&r["spread"], two)
    );
    if let Some(checks) = v["upstream_calls"].as_object() {
        let each: Vec<String> = checks
            .iter()
            .map(|(side, c)| format!("{side} {} (expected {})", c["counted"], c["expected"]))
            .collect();
        let _ = writeln!(
            out,
            "echo calls the upstream served, by its own count: {}",
            each.join(", ")
        );
    }
    validity(out, v, num(&v["calls"]));
}

/// Each case's calls/s and latency (under load and on one connection), then where its CPU
/// goes and which replica served its calls, the comparisons between cases, what adopting a
/// session costs, and whether the run is valid.
fn replicas_table(out: &mut String, v: &Value) {
    use crate::scenario::replicas::{ADOPTION, CASES, PAIRS};
    if v.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nReplicas behind HAProxy, session-era Streamable HTTP: {} connections ({} rounds of {} calls, then {} on one connection, interleaved)",
        v["connections"], v["rounds"], v["calls_per_round"], v["single_calls_per_round"]
    );
    let _ = writeln!(
        out,
        "{:<40} {:>8} {:>15} {:>10} {:>10} {:>12} {:>12} {:>7}",
        "case (median of rounds)",
        "calls/s",
        "spread",
        "p50",
        "p99",
        "1 conn p50",
        "1 conn p99",
        "errors"
    );
    for (key, name) in CASES {
        let c = &v[key];
        let rate = &c["calls_per_s"];
        let _ = writeln!(
            out,
            "{name:<40} {:>8} {:>15} {:>10} {:>10} {:>12} {:>12} {:>7}",
            rate1(num(&rate["median"])),
            format!("{}..{}", rate1(num(&rate["min"])), rate1(num(&rate["max"]))),
            us(num(&c["latency"]["p50_us"])),
            us(num(&c["latency"]["p99_us"])),
            us(num(&c["one_connection"]["p50_us"])),
            us(num(&c["one_connection"]["p99_us"])),
            c["errors"],
        );
    }
    let _ = writeln!(
        out,
        "\n{:<40} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>11}  served per replica",
        "CPU per call under load",
        "client",
        "HAProxy",
        "Manifold",
        "fixture",
        "Redis",
        "total",
        "Redis cmds"
    );
    for (key, name) in CASES {
        let c = &v[key];
        let cpu = &c["cpu_us_per_call"];
        let total: f64 = ["client", "haproxy", "manifold", "fixture", "redis"]
            .iter()
            .map(|r| cpu[*r].as_f64().unwrap_or(0.0))
            .sum();
        let served: Vec<String> = c["served_per_replica"]
            .as_array()
            .into_iter()
            .flatten()
            .map(ToString::to_string)
            .collect();
        let cell = |x: &Value| {
            if x.is_null() {
                String::new()
            } else {
                us(num(x))
            }
        };
        let _ = writeln!(
            out,
            "{name:<40} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>11}  {}",
            cell(&cpu["client"]),
            cell(&cpu["haproxy"]),
            cell(&cpu["manifold"]),
            cell(&cpu["fixture"]),
            cell(&cpu["redis"]),
            us(total),
            c["redis"]["commands_per_call"]
                .as_f64()
                .map_or(String::new(), two),
            served.join(" / "),
        );
    }
    let _ = writeln!(
        out,
        "\n{:<44} {:>6} {:>13} {:>10} {:>10} {:>12} {:>17}",
        "comparison (case over base)",
        "rate",
        "spread",
        "added p50",
        "added p99",
        "1 conn p50",
        "spread"
    );
    for (key, _, _, what) in PAIRS {
        let c = &v[key];
        let one = &c["one_connection"]["added"];
        let _ = writeln!(
            out,
            "{what:<44} {:>6} {:>13} {:>10} {:>10} {:>12} {:>17}",
            two(num(&c["rate_ratio"]["median"])),
            range(&c["rate_ratio"]["spread"], two),
            us(num(&c["latency"]["added"]["p50_us"])),
            us(num(&c["latency"]["added"]["p99_us"])),
            us(num(&one["p50_us"])),
            range(&one["spread"]["p50_us"], us),
        );
    }
    let a = &v["adoption"];
    let _ = writeln!(
        out,
        "\nSessions on replicas, no load balancer, one request in flight ({} sessions: {} per round)",
        a["sessions"], a["sessions_per_round"]
    );
    let _ = writeln!(
        out,
        "{:<56} {:>10} {:>10} {:>17}",
        "request of a session (median of rounds)", "p50", "p99", "spread of p50"
    );
    for (key, what) in ADOPTION {
        let r = &a[key];
        let _ = writeln!(
            out,
            "{what:<56} {:>10} {:>10} {:>17}",
            us(num(&r["p50_us"])),
            us(num(&r["p99_us"])),
            range(&r["spread"]["p50_us"], us),
        );
    }
    for (key, what) in [
        (
            "initialize_redis_vs_memory",
            "initialize, Redis added over memory",
        ),
        ("adopting_vs_held", "adoption, added over a held session's"),
        (
            "adopting_vs_adopted",
            "adoption, added over the next request's",
        ),
    ] {
        let added = &a[key]["added"];
        let _ = writeln!(
            out,
            "{what:<56} {:>10} {:>10} {:>17}",
            us(num(&added["p50_us"])),
            us(num(&added["p99_us"])),
            range(&added["spread"]["p50_us"], us),
        );
    }
    if let Some(per) = a["redis_commands_per_session"].as_object() {
        let each: Vec<String> = per.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "Redis commands per session: {}", each.join(", "));
    }
    let _ = writeln!(
        out,
        "HAProxy: {}",
        v["haproxy"]["version"].as_str().unwrap_or("?")
    );
    let down: Vec<String> = CASES
        .iter()
        .filter_map(|(key, _)| {
            let n = v[*key]["replicas_marked_down"].as_u64()?;
            (n > 0).then(|| format!("{key} {n}"))
        })
        .collect();
    if !down.is_empty() {
        let _ = writeln!(
            out,
            "HAProxy marked a replica down (a health check failed), times: {}",
            down.join(", ")
        );
    }
    validity(out, v, num(&v["calls"]));
}

/// Added p50 and p99 of a hit, a miss and no cache over the direct call and of a hit and a
/// miss over no cache; the goal is on the hit over direct, and is never met by an invalid run.
fn cache_rows(v: &Value) -> Vec<Row> {
    added_rows(v, &crate::scenario::cache::PAIRS, "hit_vs_direct")
}

/// Each side's percentiles, server CPU and error answers, one line each; a side that was
/// not run says why.
fn counted_sides_table(out: &mut String, v: &Value, sides: &[(&str, &str)]) {
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>10} {:>10} {:>10} {:>17} {:>10} {:>9} {:>7}",
        "setting (median of rounds)",
        "p50",
        "p90",
        "p99",
        "max",
        "spread of p50",
        "CPU/call",
        "switches",
        "errors"
    );
    for (key, name) in sides {
        let side = &v[*key];
        if let Some(why) = side["not_run"].as_str() {
            let _ = writeln!(out, "{name:<40} {why}");
            continue;
        }
        let cpu = &side["server_cpu_per_call"];
        let _ = writeln!(
            out,
            "{name:<40} {:>10} {:>10} {:>10} {:>10} {:>17} {:>10} {:>9} {:>7}",
            us(num(&side["p50_us"])),
            us(num(&side["p90_us"])),
            us(num(&side["p99_us"])),
            us(num(&side["max_us"])),
            range(&side["spread"]["p50_us"], us),
            us(num(&cpu["cpu_us"])),
            two(num(&cpu["switches"])),
            side["errors"],
        );
    }
}

/// Added p50 and p99 of each comparison in `pairs` that the scenario made; the goal
/// (`goal_added_p50_us`) is on the p50 of `goal_key`, and is never met by an invalid run.
fn added_rows(v: &Value, pairs: &[(&str, usize, usize, &str)], goal_key: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    if v.is_null() {
        return rows;
    }
    let limit = num(&v["goal_added_p50_us"]);
    let valid = v["valid"] == true;
    for (key, _, _, what) in pairs {
        let c = &v[*key];
        if c.is_null() {
            continue;
        }
        for p in ["p50", "p99"] {
            let k = format!("{p}_us");
            let added = num(&c["added"][&k]);
            let goal = (*key == goal_key && p == "p50").then(|| {
                if valid {
                    (format!("added <= {}", us(limit)), added <= limit)
                } else {
                    (format!("added <= {} (INVALID RUN)", us(limit)), false)
                }
            });
            rows.push(Row {
                figure: format!("{what} {p}"),
                direct: us(num(&c["direct"][&k])),
                through: us(num(&c["through"][&k])),
                added: us(added),
                ratio: format!("{:.2}", num(&c["ratio"][p])),
                spread: range(&c["added"]["spread"][&k], us),
                goal,
            });
        }
    }
    rows
}

/// "Valid" with the number of calls made, or why the run is invalid.
fn validity(out: &mut String, v: &Value, calls: f64) {
    if v["valid"] == true {
        let _ = writeln!(out, "Valid: no error answer in {calls} calls");
    } else {
        let _ = writeln!(out, "INVALID RUN: the figures above are not to be quoted");
        for why in v["invalid_because"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  {}", why.as_str().unwrap_or("?"));
        }
    }
}

/// A line of the HTTP table: Manifold beside the peer gateway.
struct HttpRow {
    figure: String,
    manifold: String,
    peer: String,
    /// Manifold over the peer.
    ratio: String,
    /// Min..max over rounds of Manifold's figure.
    spread: String,
    goal: Option<(String, bool)>,
}

/// The stdio added latency recorded before HTTP was served (BENCHMARKS.md, commit 1c23b70,
/// on another machine): serving HTTP must not make the stdio path slower. With
/// `--manifold-before` the earlier build is measured in the same run instead.
const STDIO_ADDED_BEFORE_US: f64 = 13.0;
/// How much worse than the earlier build still counts as "no worse": about the run-to-run
/// spread of the added p50 on the two-core machines used.
const STDIO_NOISE_US: f64 = 1.0;
/// The HTTP goals: end to end p50, calls/s at 16 connections over 10 upstreams, RSS with
/// 1,000 idle sessions and 20 upstreams.
const HTTP_P50_GOAL_US: f64 = 50.0;
const HTTP_RATE_GOAL: f64 = 40_000.0;
const HTTP_RSS_GOAL_MB: f64 = 25.0;

fn http_table(out: &mut String, rows: &[HttpRow]) {
    out.push_str(
        "\nStreamable HTTP (session era), Manifold beside the peer gateway (mcp-proxy) in the same run\n",
    );
    let _ = writeln!(
        out,
        "{:<52} {:>10} {:>10} {:>7} {:>17}  goal",
        "figure (median of rounds)", "manifold", "peer", "ratio", "spread"
    );
    for r in rows {
        let goal = r.goal.as_ref().map_or(String::new(), |(g, met)| {
            format!("{g} {}", if *met { "ok" } else { "MISSED" })
        });
        let _ = writeln!(
            out,
            "{:<52} {:>10} {:>10} {:>7} {:>17}  {goal}",
            r.figure, r.manifold, r.peer, r.ratio, r.spread
        );
    }
}

fn http_rows(s: &Value) -> Vec<HttpRow> {
    let mut rows = Vec::new();
    http_latency_rows(&mut rows, &s["http-latency"]);
    http_throughput_rows(&mut rows, &s["http-throughput"]);
    http_rss_rows(&mut rows, &s["http-rss"]);
    rows
}

fn http_latency_rows(rows: &mut Vec<HttpRow>, v: &Value) {
    if v.is_null() {
        return;
    }
    let plain = |figure: String, manifold: String, spread: String, goal| HttpRow {
        figure,
        manifold,
        peer: String::new(),
        ratio: String::new(),
        spread,
        goal,
    };
    for (i, p) in PCT.iter().enumerate() {
        let key = format!("{p}_us");
        let (m, peer) = (num(&v["http"][&key]), num(&v["peer"][&key]));
        let goal = (i == 0).then(|| {
            (
                format!("<= {}", us(HTTP_P50_GOAL_US)),
                m <= HTTP_P50_GOAL_US,
            )
        });
        rows.push(HttpRow {
            figure: format!("small tools/call over HTTP {p}"),
            manifold: us(m),
            peer: us(peer),
            ratio: ratio(m, peer),
            spread: range(&v["http"]["spread"][&key], us),
            goal,
        });
    }
    for p in ["p50", "p99"] {
        let key = format!("{p}_us");
        rows.push(plain(
            format!("  floor (canned answer, no upstream) {p}"),
            us(num(&v["floor"][&key])),
            range(&v["floor"]["spread"][&key], us),
            None,
        ));
    }
    for p in ["p50", "p99"] {
        let key = format!("{p}_us");
        rows.push(plain(
            format!("  Manifold over the floor {p}"),
            us(num(&v["http_vs_floor"]["added"][&key])),
            range(&v["http_vs_floor"]["added"]["spread"][&key], us),
            None,
        ));
    }
    let before = &v["stdio_before_vs_direct"]["added"];
    for (i, p) in PCT.iter().take(3).enumerate() {
        let key = format!("{p}_us");
        let added = num(&v["stdio_vs_direct"]["added"][&key]);
        // Against the earlier build in the same run when there is one, else against the
        // figure recorded before HTTP was served.
        let goal = (i == 0).then(|| {
            if before.is_null() {
                let text = format!("<= {} (recorded before)", us(STDIO_ADDED_BEFORE_US));
                (text, added <= STDIO_ADDED_BEFORE_US)
            } else {
                let was = num(&before[&key]);
                let text = format!("<= before {} + {}", us(was), us(STDIO_NOISE_US));
                (text, added <= was + STDIO_NOISE_US)
            }
        });
        rows.push(plain(
            format!("small tools/call over stdio, added {p}"),
            us(added),
            range(&v["stdio_vs_direct"]["added"]["spread"][&key], us),
            goal,
        ));
        if !before.is_null() {
            rows.push(plain(
                format!("  the same, earlier build (--manifold-before) {p}"),
                us(num(&before[&key])),
                range(&before["spread"][&key], us),
                None,
            ));
        }
    }
    for (side, what) in [
        ("direct", "direct to the fixture"),
        ("stdio", "through Manifold"),
    ] {
        rows.push(plain(
            format!("small tools/call over stdio, {what} p50"),
            us(num(&v[side]["p50_us"])),
            range(&v[side]["spread"]["p50_us"], us),
            None,
        ));
    }
    let key = "client_cpu_us_per_call";
    rows.push(HttpRow {
        figure: "  load generator CPU/call".into(),
        manifold: us(num(&v["http"][key])),
        peer: us(num(&v["peer"][key])),
        ratio: String::new(),
        spread: format!("stdio: {}", us(num(&v["stdio"][key]))),
        goal: None,
    });
    for (key, what, f) in [
        ("cpu_us", "server CPU/call", us as fn(f64) -> String),
        ("switches", "server switches/call", two),
    ] {
        let m = num(&v["http"]["server_cpu_per_call"][key]);
        let peer = num(&v["peer"]["server_cpu_per_call"][key]);
        rows.push(HttpRow {
            figure: format!("  {what}"),
            manifold: f(m),
            peer: f(peer),
            ratio: ratio(m, peer),
            spread: format!("stdio: {}", f(num(&v["stdio"]["server_cpu_per_call"][key]))),
            goal: None,
        });
    }
}

/// Manifold's stateless path (2026-07-28) beside its session-era path over Streamable HTTP,
/// from the same runs; then why the peer has no stateless figures.
fn stateless_table(out: &mut String, s: &Value) {
    let rows = stateless_rows(s);
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "\nStateless Streamable HTTP (2026-07-28) beside the session era, Manifold in the same run\n",
    );
    row_table(out, &rows, ["session", "stateless"]);
    let note = [&s["http-latency"], &s["http-throughput"]]
        .into_iter()
        .find_map(|v| v["peer_era"].as_str());
    if let Some(note) = note {
        let _ = writeln!(out, "Note: {note}.");
    }
}

fn stateless_rows(s: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    let v = &s["http-latency"];
    let c = &v["http_stateless_vs_http"];
    if !c.is_null() {
        for p in PCT {
            let key = format!("{p}_us");
            rows.push(Row {
                figure: format!("small tools/call over HTTP {p}"),
                direct: us(num(&c["direct"][&key])),
                through: us(num(&c["through"][&key])),
                added: us(num(&c["added"][&key])),
                ratio: two(num(&c["ratio"][p])),
                spread: range(&c["added"]["spread"][&key], us),
                goal: None,
            });
        }
        for p in ["p50", "p99"] {
            let key = format!("{p}_us");
            let (a, b) = (
                num(&v["http_vs_direct"]["added"][&key]),
                num(&v["http_stateless_vs_direct"]["added"][&key]),
            );
            rows.push(Row {
                figure: format!("  added over direct stdio {p}"),
                direct: us(a),
                through: us(b),
                added: us(b - a),
                ratio: String::new(),
                spread: range(&v["http_stateless_vs_direct"]["added"]["spread"][&key], us),
                goal: None,
            });
        }
        let pair = |figure: &str, a: f64, b: f64, f: fn(f64) -> String| Row {
            figure: figure.into(),
            direct: f(a),
            through: f(b),
            added: f(b - a),
            ratio: ratio(b, a),
            spread: String::new(),
            goal: None,
        };
        let (h, st) = (&v["http"], &v["http_stateless"]);
        for (key, figure, f) in [
            ("cpu_us", "  server CPU/call", us as fn(f64) -> String),
            ("switches", "  server switches/call", two),
        ] {
            let (a, b) = (
                num(&h["server_cpu_per_call"][key]),
                num(&st["server_cpu_per_call"][key]),
            );
            rows.push(pair(figure, a, b, f));
        }
        let key = "client_cpu_us_per_call";
        rows.push(pair(
            "  load generator CPU/call",
            num(&h[key]),
            num(&st[key]),
            us,
        ));
        let req = &v["request_bytes"];
        rows.push(pair(
            "  request body",
            num(&req["through"]),
            num(&req["stateless"]),
            bytes,
        ));
        rows.push(pair(
            "  request, head and body",
            num(&h["request_wire_bytes"]),
            num(&st["request_wire_bytes"]),
            bytes,
        ));
        rows.push(pair(
            "  answer body",
            num(&h["answer_bytes"]),
            num(&st["answer_bytes"]),
            bytes,
        ));
    }
    let t = &s["http-throughput"];
    let (m, st) = (&t["manifold_1"], &t["manifold_1_stateless"]);
    if !st.is_null() {
        let (a, b) = (
            num(&m["calls_per_s"]["median"]),
            num(&st["calls_per_s"]["median"]),
        );
        let r = &t["stateless_1_vs_manifold_1"];
        rows.push(Row {
            figure: format!("calls/s, {} connections, 1 upstream", t["connections"]),
            direct: rate1(a),
            through: rate1(b),
            added: rate1(b - a),
            ratio: two(num(&r["median"])),
            spread: format!(
                "{}..{}",
                two(num(&r["spread"][0])),
                two(num(&r["spread"][1]))
            ),
            goal: None,
        });
        for p in ["p50", "p99"] {
            let key = format!("{p}_us");
            let (a, b) = (num(&m["latency"][&key]), num(&st["latency"][&key]));
            rows.push(Row {
                figure: format!("  latency under that load {p}"),
                direct: us(a),
                through: us(b),
                added: us(b - a),
                ratio: ratio(b, a),
                spread: range(&st["latency"]["spread"][&key], us),
                goal: None,
            });
        }
        let (a, b) = (
            num(&m["server_cpu_per_call"]["cpu_us"]),
            num(&st["server_cpu_per_call"]["cpu_us"]),
        );
        rows.push(Row {
            figure: "  server CPU/call".into(),
            direct: us(a),
            through: us(b),
            added: us(b - a),
            ratio: ratio(b, a),
            spread: String::new(),
            goal: None,
        });
    }
    rows
}

fn http_throughput_rows(rows: &mut Vec<HttpRow>, v: &Value) {
    if v.is_null() {
        return;
    }
    let conns = num(&v["connections"]);
    let floor = &v["floor"]["calls_per_s"];
    if !floor.is_null() {
        rows.push(HttpRow {
            figure: format!("calls/s, {conns} connections, floor (no upstream)"),
            manifold: rate1(num(&floor["median"])),
            peer: String::new(),
            ratio: String::new(),
            spread: format!(
                "{}..{}",
                rate1(num(&floor["min"])),
                rate1(num(&floor["max"]))
            ),
            goal: None,
        });
    }
    for n in ["1", "10"] {
        let (m, p) = (&v[&format!("manifold_{n}")], &v[&format!("peer_{n}")]);
        let rate_m = num(&m["calls_per_s"]["median"]);
        // The goals are about 16 connections and 1,000 sessions, not a quick run's counts.
        let goal = (n == "10" && conns == 16.0).then(|| {
            let text = format!(">= {}/s", rate1(HTTP_RATE_GOAL));
            (text, rate_m >= HTTP_RATE_GOAL)
        });
        let s = if n == "1" { "" } else { "s" };
        rows.push(HttpRow {
            figure: format!("calls/s, {conns} connections, {n} upstream{s}"),
            manifold: rate1(rate_m),
            peer: rate1(num(&p["calls_per_s"]["median"])),
            ratio: ratio(rate_m, num(&p["calls_per_s"]["median"])),
            spread: format!(
                "{}..{}",
                rate1(num(&m["calls_per_s"]["min"])),
                rate1(num(&m["calls_per_s"]["max"]))
            ),
            goal,
        });
        for p_ in ["p50", "p99"] {
            let key = format!("{p_}_us");
            let (a, b) = (num(&m["latency"][&key]), num(&p["latency"][&key]));
            rows.push(HttpRow {
                figure: format!("  latency under that load {p_}"),
                manifold: us(a),
                peer: us(b),
                ratio: ratio(a, b),
                spread: range(&m["latency"]["spread"][&key], us),
                goal: None,
            });
        }
        let key = "client_cpu_us_per_call";
        rows.push(HttpRow {
            figure: "  load generator CPU/call".into(),
            manifold: us(num(&m[key])),
            peer: us(num(&p[key])),
            ratio: String::new(),
            spread: String::new(),
            goal: None,
        });
        let (a, b) = (
            num(&m["server_cpu_per_call"]["cpu_us"]),
            num(&p["server_cpu_per_call"]["cpu_us"]),
        );
        rows.push(HttpRow {
            figure: "  server CPU/call".into(),
            manifold: us(a),
            peer: us(b),
            ratio: ratio(a, b),
            spread: String::new(),
            goal: None,
        });
    }
}

fn http_rss_rows(rows: &mut Vec<HttpRow>, v: &Value) {
    if v.is_null() {
        return;
    }
    let sessions = num(&v["sessions"]);
    let ups = num(&v["upstreams"]);
    for (case, what) in [
        ("closed", "connections closed"),
        ("open", "connections open"),
    ] {
        let (m, p) = (&v[&format!("manifold_{case}")], &v[&format!("peer_{case}")]);
        for (field, figure, f) in [
            (
                "one_session_mb",
                format!("RSS {ups} upstreams, 1 session"),
                mb as fn(f64) -> String,
            ),
            (
                "sessions_mb",
                format!("RSS {ups} upstreams, {sessions} sessions, {what}"),
                mb,
            ),
            ("per_session_kb", "  per session".to_owned(), kb),
        ] {
            if case == "open" && field == "one_session_mb" {
                continue;
            }
            let (a, b) = (num(&m[field]["median"]), num(&p[field]["median"]));
            let goal = (case == "closed" && field == "sessions_mb" && sessions == 1000.0)
                .then(|| (format!("<= {HTTP_RSS_GOAL_MB} MB"), a <= HTTP_RSS_GOAL_MB));
            rows.push(HttpRow {
                figure,
                manifold: f(a),
                peer: f(b),
                ratio: ratio(a, b),
                spread: format!("{}..{}", f(num(&m[field]["min"])), f(num(&m[field]["max"]))),
                goal,
            });
        }
    }
}

/// Manifold over the peer, or nothing when either is missing.
fn ratio(manifold: f64, peer: f64) -> String {
    if manifold.is_nan() || peer.is_nan() || peer == 0.0 {
        return String::new();
    }
    format!("{:.2}", manifold / peer)
}

/// Direct, through, added and ratio per percentile; `goals` are (percentile index, text,
/// limit on the added figure).
fn paired_rows(rows: &mut Vec<Row>, v: &Value, what: &str, goals: &[(usize, &str, f64)]) {
    if v.is_null() {
        return;
    }
    for (i, p) in PCT.iter().enumerate() {
        let key = format!("{p}_us");
        let added = num(&v["added"][&key]);
        let goal = goals
            .iter()
            .find(|g| g.0 == i)
            .map(|&(_, text, limit)| (format!("added {text}"), added <= limit));
        rows.push(Row {
            figure: format!("{what} {p}"),
            direct: us(num(&v["direct"][&key])),
            through: us(num(&v["through"][&key])),
            added: us(added),
            ratio: format!("{:.2}", num(&v["ratio"][*p])),
            spread: range(&v["added"]["spread"][&key], us),
            goal,
        });
    }
}

/// The server process's own CPU time and context switches per call (Manifold's excludes
/// its upstream's), from /proc: where the added latency is spent.
fn cpu_rows(rows: &mut Vec<Row>, v: &Value, what: &str) {
    let cpu = &v["server_cpu_per_call"];
    if cpu.is_null() {
        return;
    }
    for (key, name, f) in [
        ("cpu_us", "server CPU", us as fn(f64) -> String),
        ("switches", "server switches", two),
    ] {
        let (d, t) = (num(&cpu["direct"][key]), num(&cpu["through"][key]));
        rows.push(Row {
            figure: format!("{what} {name}/call"),
            direct: f(d),
            through: f(t),
            added: String::new(),
            ratio: String::new(),
            spread: String::new(),
            goal: None,
        });
    }
}

fn throughput_rows(rows: &mut Vec<Row>, v: &Value) {
    if v.is_null() {
        return;
    }
    let direct = num(&v["direct"]["calls_per_s"]["median"]);
    for (key, what, goal) in [
        ("through_1", "1 upstream", true),
        ("through_10", "10 upstreams", false),
    ] {
        let a = &v[key]["calls_per_s"];
        let through = num(&a["median"]);
        rows.push(Row {
            figure: format!("pipelined calls/s, {what}"),
            direct: rate(direct),
            through: rate(through),
            added: String::new(),
            ratio: format!("{:.2}", num(&v[&format!("ratio_{}", &key[8..])])),
            spread: format!("{}..{}", rate(num(&a["min"])), rate(num(&a["max"]))),
            goal: goal.then(|| (">= 150k/s".to_owned(), through >= 150_000.0)),
        });
    }
}

fn list_rows(rows: &mut Vec<Row>, v: &Value) {
    for (key, limit) in [("10x50", 100.0), ("100x50", 1000.0)] {
        let lat = &v[key]["latency"];
        if lat.is_null() {
            continue;
        }
        for p in ["p50", "p99"] {
            let k = format!("{p}_us");
            let through = num(&lat[&k]);
            let goal = (p == "p50").then(|| (format!("<= {}", us(limit)), through <= limit));
            rows.push(Row {
                figure: format!(
                    "tools/list {key} ({}) {p}",
                    size(num(&v[key]["answer_bytes"]))
                ),
                direct: String::new(),
                through: us(through),
                added: String::new(),
                ratio: String::new(),
                spread: range(&lat["spread"][&k], us),
                goal,
            });
        }
    }
}

fn rss_rows(rows: &mut Vec<Row>, v: &Value) {
    for (key, limit) in [("20x50", 15.0), ("100x50", 40.0)] {
        let e = &v[key];
        if e.is_null() {
            continue;
        }
        for (field, what) in [
            ("idle_mb", "idle"),
            ("after_list_mb", "after list"),
            ("load_peak_mb", "load peak"),
            ("hwm_mb", "peak (VmHWM)"),
        ] {
            let a = &e[field];
            let goal = (field == "idle_mb")
                .then(|| (format!("<= {limit} MB"), num(&a["median"]) <= limit));
            rows.push(Row {
                figure: format!("RSS {key}, {what}"),
                direct: String::new(),
                through: mb(num(&a["median"])),
                added: String::new(),
                ratio: String::new(),
                spread: format!("{}..{}", mb(num(&a["min"])), mb(num(&a["max"]))),
                goal,
            });
        }
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn range(v: &Value, f: fn(f64) -> String) -> String {
    format!("{}..{}", f(num(&v[0])), f(num(&v[1])))
}

fn us(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    if x.abs() >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.1} us")
    }
}

fn size(bytes: f64) -> String {
    if bytes >= 1e6 {
        format!("{:.1} MB", bytes / 1e6)
    } else {
        format!("{:.0} kB", bytes / 1e3)
    }
}

fn bytes(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    format!("{x:.0} B")
}

fn two(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    format!("{x:.2}")
}

fn rate(x: f64) -> String {
    format!("{:.0}k", x / 1000.0)
}

/// Calls per second with one decimal of thousands: HTTP rates are tens of thousands.
fn rate1(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    format!("{:.1}k", x / 1000.0)
}

fn mb(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    format!("{x:.1} MB")
}

fn kb(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    format!("{x:.1} kB")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `policy` result as the scenario writes it, reduced to what the report reads.
    fn policy(errors: u64, redis: Value) -> Value {
        let side = |p50: f64| {
            json!({ "p50_us": p50, "p99_us": p50 + 5.0, "spread": { "p50_us": [p50, p50] },
                    "server_cpu_per_call": { "cpu_us": 9.0, "switches": 2.0 },
                    "calls": 100, "errors": 0 })
        };
        let pair = |a: f64, b: f64| {
            json!({ "direct": { "p50_us": a, "p99_us": a + 5.0 },
                    "through": { "p50_us": b, "p99_us": b + 5.0 },
                    "added": { "p50_us": b - a, "p99_us": b - a,
                               "spread": { "p50_us": [0.0, 1.0], "p99_us": [0.0, 1.0] } },
                    "ratio": { "p50": b / a, "p99": 1.0 } })
        };
        let mut memory = side(21.0);
        memory["errors"] = json!(errors);
        json!({
            "rounds": 7, "calls_per_round": 100, "goal_added_p50_us": 2.0,
            "direct": side(5.0), "plain": side(20.0), "memory": memory, "redis": redis,
            "plain_vs_direct": pair(5.0, 20.0), "memory_vs_direct": pair(5.0, 21.0),
            "memory_vs_plain": pair(20.0, 21.0),
            "redis_server": { "not_run": "not run: redis-server not found" },
            "refusal_check": { "memory": { "refused": 3, "of": 3, "code": -32015,
                                           "kind": "quota_exceeded" } },
            "valid": errors == 0,
            "invalid_because": if errors == 0 { json!([]) } else { json!(["memory: 1 error answers"]) },
        })
    }

    #[test]
    fn the_policy_goal_is_met_only_by_a_valid_run() {
        let skipped = json!({ "not_run": "not run: redis-server not found" });
        let ok = json!({ "scenarios": { "policy": policy(0, skipped.clone()) } });
        let goals = goals(&ok);
        assert_eq!(
            goals[0]["figure"],
            "policy step, memory, added over none p50"
        );
        assert_eq!(goals[0]["met"], true, "{goals}");
        let mut out = String::new();
        policy_table(&mut out, &ok["scenarios"]["policy"]);
        assert!(out.contains("Valid: no error answer in 300 calls"), "{out}");
        assert!(
            out.contains("in Redis         not run: redis-server not found"),
            "{out}"
        );
        assert!(!out.contains("Redis, added"), "{out}");

        let bad = json!({ "scenarios": { "policy": policy(1, skipped) } });
        assert_eq!(goals_of(&bad), [false]);
        let mut out = String::new();
        policy_table(&mut out, &bad["scenarios"]["policy"]);
        assert!(out.contains("INVALID RUN"), "{out}");
        assert!(out.contains("  memory: 1 error answers"), "{out}");
    }

    #[test]
    fn the_cache_goal_is_on_hits_and_met_only_by_a_valid_run() {
        let pair = |a: f64, b: f64| {
            json!({ "direct": { "p50_us": a, "p99_us": a }, "through": { "p50_us": b, "p99_us": b },
                    "added": { "p50_us": b - a, "p99_us": b - a,
                               "spread": { "p50_us": [0.0, 1.0], "p99_us": [0.0, 1.0] } },
                    "ratio": { "p50": b / a, "p99": b / a } })
        };
        let cache = |valid: bool| {
            json!({ "scenarios": { "cache": {
                "rounds": 7, "calls_per_round": 100, "goal_added_p50_us": 10.0,
                "hit_vs_direct": pair(6.0, 9.0), "miss_vs_direct": pair(6.0, 30.0),
                "calls": 1234, "valid": valid,
                "invalid_because": if valid { json!([]) } else { json!(["hit: the upstream served 9 echo calls, expected 1"]) },
                "upstream_calls": { "hit": { "expected": 1, "counted": if valid { 1 } else { 9 } } },
            } } })
        };
        let ok = cache(true);
        let goals = goals(&ok);
        assert_eq!(goals.as_array().unwrap().len(), 1, "{goals}");
        assert_eq!(goals[0]["figure"], "cache hit, added over direct p50");
        assert_eq!(goals[0]["met"], true, "{goals}");
        let mut out = String::new();
        cache_table(&mut out, &ok["scenarios"]["cache"]);
        assert!(
            out.contains("Valid: no error answer in 1234 calls"),
            "{out}"
        );
        assert!(out.contains("hit 1 (expected 1)"), "{out}");
        assert!(out.contains("cache miss, added over direct p50"), "{out}");

        let bad = cache(false);
        assert_eq!(goals_of(&bad), [false]);
        let mut out = String::new();
        cache_table(&mut out, &bad["scenarios"]["cache"]);
        assert!(out.contains("INVALID RUN"), "{out}");
        assert!(out.contains("  hit: the upstream served 9"), "{out}");
    }

    fn goals_of(doc: &Value) -> Vec<bool> {
        goals(doc)
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| g["met"] == true)
            .collect()
    }
}
