//! Runs `manifold-load latency --quick`, `http-latency --quick`, `telemetry --quick`,
//! `policy --quick`, `cache --quick`, `replicas --quick`, `search --quick` and a short `soak` against the debug
//! binaries to prove the tool works end to end, over stdio and over Streamable HTTP as a
//! session-era host and as a stateless one (without the peer gateway: no network, no peer
//! build), with spans exported to the tool's own OTLP receiver, with teams and limits (in
//! Redis too when a `redis-server` is found), with the result cache, with replicas behind
//! HAProxy (when HAProxy and a `redis-server` are found), with tool search over the labelled
//! query set, and under a steady paced load. It checks the shape and sanity of the JSON
//! output, never a timing threshold: timings on a shared two-core machine are for
//! BENCHMARKS.md, not for pass/fail. The soak's own pass/fail conditions (every request
//! answered once, as expected; descriptors, threads and upstream processes flat) are counts,
//! and are asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The debug binaries of the `manifold` package, beside this package's own in the target
/// directory (wherever `CARGO_TARGET_DIR` puts it); `cargo build --workspace` makes them
/// (cargo only exposes `CARGO_BIN_EXE_*` of this package's own binaries).
fn debug_binaries() -> Option<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_BIN_EXE_manifold-load")).parent()?;
    let (manifold, fixture) = (dir.join("manifold"), dir.join("manifold-fixture"));
    (manifold.exists() && fixture.exists()).then_some((manifold, fixture))
}

/// Runs one scenario with `--quick`; checks that it printed `row` in its table.
fn run_quick(scenario: &str, row: &str) -> Option<Value> {
    run_quick_printing(scenario, &[row])
}

/// Runs one scenario with `--quick`; checks that it printed each of `rows`.
fn run_quick_printing(scenario: &str, rows: &[&str]) -> Option<Value> {
    let (output, doc) = run(scenario, &["--quick"])?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "manifold-load failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for row in rows {
        assert!(stdout.contains(row), "no {row:?} on stdout: {stdout}");
    }
    Some(doc)
}

/// Runs one scenario with `flags` against the debug binaries: what it printed and its JSON
/// document, whatever its exit status (a soak that fails still writes why).
fn run(scenario: &str, flags: &[&str]) -> Option<(Output, Value)> {
    let Some((manifold, fixture)) = debug_binaries() else {
        eprintln!("SKIPPED: the debug manifold or manifold-fixture is missing; run `cargo build --workspace` first");
        return None;
    };
    let out = std::env::temp_dir().join(format!(
        "manifold-load-smoke-{scenario}-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_manifold-load"))
        .arg(scenario)
        .args(flags)
        .args(["--stall-secs", "120", "--out"])
        .arg(&out)
        .arg("--manifold")
        .arg(&manifold)
        .arg("--fixture")
        .arg(&fixture)
        .output()
        .unwrap();
    let Ok(text) = std::fs::read_to_string(&out) else {
        panic!(
            "manifold-load wrote no {}: {}",
            out.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let doc = serde_json::from_str(&text).unwrap();
    let _ = std::fs::remove_file(&out);
    Some((output, doc))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn quick_latency_run_writes_sane_json() {
    let Some(doc) = run_quick("latency", "small tools/call p50") else {
        return;
    };
    assert_eq!(doc["quick"], true);
    assert!(doc["machine"]["nproc"].as_u64().unwrap() >= 1);
    assert!(doc["machine"]["kernel"].is_string());
    let lat = &doc["scenarios"]["latency"];
    let (rounds, calls) = quick_rounds(lat);
    for side in ["direct", "through"] {
        check_percentiles(side, &lat[side], rounds, calls);
        assert!(f(&lat["answer_bytes"][side]) > 0.0);
        // Each call wakes the server at least once; CPU times may be null in a quick run.
        assert!(f(&lat["server_cpu_per_call"][side]["switches"]) > 0.0);
    }
    // Added is through minus direct of the medians, whatever its sign on a noisy machine.
    let added = f(&lat["added"]["p50_us"]);
    let (d, t) = (f(&lat["direct"]["p50_us"]), f(&lat["through"]["p50_us"]));
    assert!((added - (t - d)).abs() < 0.11, "{added} vs {t} - {d}");
    assert!(f(&lat["ratio"]["p50"]) > 0.0);
    let goals = doc["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 2, "p50 and p99 added-latency goals: {goals:?}");
    assert!(goals.iter().all(|g| g["met"].is_boolean()));
}

/// The rounds and calls per round of a scenario's figures: a quick run's.
fn quick_rounds(s: &Value) -> (u64, u64) {
    let (rounds, calls) = (
        s["rounds"].as_u64().unwrap(),
        s["calls_per_round"].as_u64().unwrap(),
    );
    assert_eq!((rounds, calls), (2, 300), "{s}");
    (rounds, calls)
}

/// Each `(pair, base, side)`: the added p50 is the side's median minus the base's, whatever
/// its sign on a noisy machine.
fn check_added(s: &Value, pairs: &[(&str, &str, &str)]) {
    for (pair, base, side) in pairs {
        let added = f(&s[*pair]["added"]["p50_us"]);
        let (b, w) = (f(&s[*base]["p50_us"]), f(&s[*side]["p50_us"]));
        assert!(
            (added - (w - b)).abs() < 0.11,
            "{pair}: {added} vs {w} - {b}"
        );
    }
}

/// The run reports one goal, on `figure`.
fn check_one_goal(doc: &Value, figure: &str) {
    let goals = doc["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 1, "{goals:?}");
    assert_eq!(goals[0]["figure"], figure, "{goals:?}");
}

/// Percentiles of one side: every call counted, positive and in order.
fn check_percentiles(side: &str, s: &Value, rounds: u64, calls: u64) {
    // Every round ran to its count: the quick run is far from its time limit.
    assert_eq!(s["count"].as_u64().unwrap(), rounds * calls, "{side}: {s}");
    assert_eq!(s["per_round"].as_array().unwrap().len() as u64, rounds);
    let p: Vec<f64> = ["p50_us", "p90_us", "p99_us", "max_us"]
        .iter()
        .map(|k| f(&s[k]))
        .collect();
    assert!(p[0] > 0.0, "{side}: {s}");
    assert!(
        p.windows(2).all(|w| w[0] <= w[1]),
        "{side}: percentiles out of order: {p:?}"
    );
}

#[test]
fn quick_http_latency_run_writes_sane_json() {
    let rows = [
        "small tools/call over HTTP p50",
        "Stateless Streamable HTTP (2026-07-28)",
        "speaks only the session era",
    ];
    let Some(doc) = run_quick_printing("http-latency", &rows) else {
        return;
    };
    assert_eq!(doc["quick"], true);
    assert!(doc["binaries"]["peer"].is_null());
    let lat = &doc["scenarios"]["http-latency"];
    let (rounds, calls) = quick_rounds(lat);
    for side in ["direct", "stdio", "http", "http_stateless", "floor"] {
        let s = &lat[side];
        check_percentiles(side, s, rounds, calls);
        // The same echo answer whatever the transport.
        assert!(f(&s["answer_bytes"]) > 100.0, "{side}: {s}");
        assert!(f(&s["client_cpu_us_per_call"]) > 0.0, "{side}: {s}");
        assert!(
            f(&s["server_cpu_per_call"]["switches"]) > 0.0,
            "{side}: {s}"
        );
        assert!(f(&s["startup_ms"]) > 0.0, "{side}: {s}");
    }
    // No peer was given: its figures are absent and the report says why.
    assert!(lat["peer"].is_null());
    let why = lat["http_vs_peer"]["not_applicable"].as_str().unwrap();
    assert!(why.contains("--peer"), "{why}");
    // The peer would have no stateless figures whatever was given, and the report says so.
    let era = lat["peer_era"].as_str().unwrap();
    assert!(era.contains("session era"), "{era}");
    check_added(
        lat,
        &[
            ("stdio_vs_direct", "direct", "stdio"),
            ("http_vs_direct", "direct", "http"),
            ("http_vs_floor", "floor", "http"),
            ("http_stateless_vs_http", "http", "http_stateless"),
            ("http_stateless_vs_direct", "direct", "http_stateless"),
        ],
    );
    assert!(f(&lat["http_stateless_vs_http"]["ratio"]["p50"]) > 0.0);
    // The stateless request carries `_meta` (a few dozen bytes more), and a stateless answer
    // carries `resultType` and Manifold's server info besides the echo.
    let req = &lat["request_bytes"];
    let extra = f(&req["stateless"]) - f(&req["through"]);
    assert!((60.0..=140.0).contains(&extra), "{req}");
    assert!(
        f(&lat["http_stateless"]["answer_bytes"]) > f(&lat["http"]["answer_bytes"]),
        "{lat}"
    );
    for side in ["http", "http_stateless", "floor"] {
        assert!(
            f(&lat[side]["request_wire_bytes"]) > f(&req["through"]),
            "{side}: {lat}"
        );
    }
    assert!(lat["stdio"]["request_wire_bytes"].is_null());
    let goals = doc["goals"].as_array().unwrap();
    let named: Vec<&str> = goals
        .iter()
        .map(|g| g["figure"].as_str().unwrap())
        .collect();
    assert_eq!(
        named,
        [
            "small tools/call over HTTP p50",
            "small tools/call over stdio, added p50"
        ],
        "{goals:?}"
    );
    assert!(goals.iter().all(|g| g["met"].is_boolean()));
}

#[test]
fn quick_telemetry_run_exports_spans_and_writes_sane_json() {
    let Some(doc) = run_quick("telemetry", "telemetry: metrics + tracing, added p50") else {
        return;
    };
    let t = &doc["scenarios"]["telemetry"];
    let (rounds, calls) = quick_rounds(t);
    for side in ["direct", "off", "metrics", "tracing"] {
        check_percentiles(side, &t[side], rounds, calls);
        assert!(f(&t[side]["answer_bytes"]) > 100.0, "{side}: {t}");
        assert!(f(&t[side]["server_cpu_per_call"]["switches"]) > 0.0);
    }
    check_added(
        t,
        &[
            ("off_vs_direct", "direct", "off"),
            ("metrics_vs_off", "off", "metrics"),
            ("tracing_vs_off", "off", "tracing"),
        ],
    );
    // Every traced call gave a server span and a client span, and they reached the receiver.
    let otlp = &t["otlp"];
    assert!(f(&otlp["total"]["requests"]) >= 1.0, "{otlp}");
    assert!(f(&otlp["total"]["bytes"]) > 0.0, "{otlp}");
    assert_eq!(otlp["total"]["other_requests"], 0, "{otlp}");
    assert_eq!(otlp["total"]["uncounted_bodies"], 0, "{otlp}");
    let traced = f(&otlp["calls_traced"]);
    assert!(f(&otlp["total"]["spans"]) >= 2.0 * traced, "{otlp}");
    assert_eq!(otlp["env"]["OTEL_TRACES_SAMPLER"], "always_on");
    check_one_goal(&doc, "telemetry: metrics + tracing, added p50");
}

#[test]
fn quick_policy_run_counts_every_answer_and_writes_sane_json() {
    let Some(doc) = run_quick("policy", "policy step, memory, added over none p50") else {
        return;
    };
    let p = &doc["scenarios"]["policy"];
    let (rounds, calls) = quick_rounds(p);
    // Without a redis-server the Redis setting is skipped, and the report says why.
    let redis_ran = p["redis_server"]["not_run"].is_null();
    let mut sides = vec!["direct", "plain", "memory"];
    if redis_ran {
        sides.push("redis");
        assert!(f(&p["redis_server"]["scripts_per_call"]) >= 1.0, "{p}");
    } else {
        let why = p["redis"]["not_run"].as_str().unwrap();
        assert!(why.contains("redis-server") || why.contains("MANIFOLD_REDIS_SERVER"));
    }
    for side in &sides {
        check_percentiles(side, &p[side], rounds, calls);
        assert_eq!(p[side]["errors"], 0, "{side}: {p}");
        assert!(
            f(&p[side]["calls"]) > (rounds * calls) as f64,
            "{side}: {p}"
        );
    }
    assert_eq!(p["valid"], true, "{p}");
    assert_eq!(p["errors"], 0);
    // The limits are applied, and refusals are counted.
    let check = &p["refusal_check"]["memory"];
    assert_eq!(check["refused"], check["of"], "{check}");
    assert_eq!(check["kind"], "quota_exceeded", "{check}");
    check_added(
        p,
        &[
            ("plain_vs_direct", "direct", "plain"),
            ("memory_vs_plain", "plain", "memory"),
        ],
    );
    check_one_goal(&doc, "policy step, memory, added over none p50");
}

#[test]
fn quick_cache_run_counts_every_answer_and_upstream_call() {
    let Some(doc) = run_quick("cache", "cache hit, added over direct p50") else {
        return;
    };
    let c = &doc["scenarios"]["cache"];
    let (rounds, calls) = quick_rounds(c);
    // Without a redis-server the Redis-tier side is skipped, and the report says why.
    let redis_ran = c["redis_server"]["not_run"].is_null();
    let mut sides = vec!["direct", "hit", "miss", "uncached"];
    if redis_ran {
        sides.push("redis_hit");
        let r = &c["redis_server"];
        // Every measured call was looked up in Redis, and none reached the upstream: another
        // Manifold had stored them all.
        let lookups = f(&r["commands_during_rounds"]["evalsha"]);
        assert!(lookups >= (rounds * calls) as f64, "{r}");
        assert_eq!(r["upstream_served_after_rounds"], 0, "{r}");
        assert!(f(&r["filled_beforehand"]) > (rounds * calls) as f64, "{r}");
    } else {
        let why = c["redis_hit"]["not_run"].as_str().unwrap();
        assert!(why.contains("redis-server") || why.contains("MANIFOLD_REDIS_SERVER"));
    }
    for side in sides {
        check_percentiles(side, &c[side], rounds, calls);
        assert_eq!(c[side]["errors"], 0, "{side}: {c}");
        assert!(f(&c[side]["answer_bytes"]) > 100.0, "{side}: {c}");
        assert!(
            f(&c[side]["calls"]) > (rounds * calls) as f64,
            "{side}: {c}"
        );
    }
    // A hit never reached the upstream: it served the first call alone. Every miss did.
    let up = &c["upstream_calls"];
    for side in ["hit", "http_cached"] {
        assert_eq!(up[side]["counted"], 1, "{side}: {up}");
    }
    for (side, made) in [
        ("miss", &c["miss"]["calls"]),
        ("uncached", &c["uncached"]["calls"]),
        ("http_forwarded", &c["http"]["forwarded"]["calls_made"]),
    ] {
        assert_eq!(&up[side]["counted"], made, "{side}: {up}");
        assert_eq!(up[side]["counted"], up[side]["expected"], "{side}: {up}");
    }
    for side in ["cached", "forwarded"] {
        let h = &c["http"][side];
        assert!(f(&h["calls_per_s"]["median"]) > 0.0, "{side}: {h}");
        assert_eq!(h["errors"], 0, "{side}: {h}");
        // Every round ran to its count.
        assert_eq!(
            f(&h["calls"]),
            rounds as f64 * f(&c["http"]["calls_per_round"]),
            "{side}: {h}"
        );
    }
    assert!(f(&c["http"]["cached_over_forwarded"]["median"]) > 0.0);
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(c["errors"], 0);
    check_added(
        c,
        &[
            ("hit_vs_direct", "direct", "hit"),
            ("miss_vs_uncached", "uncached", "miss"),
        ],
    );
    if redis_ran {
        check_added(c, &[("redis_hit_vs_hit", "hit", "redis_hit")]);
    }
    check_one_goal(&doc, "cache hit, added over direct p50");
}

/// Whether `program` is there as the load tool looks for it: `$variable`, `PATH`, or unpacked
/// under the repository's `tests/.cache` (`unpacked`, from the repository root).
fn found(program: &str, variable: &str, unpacked: &str) -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os(variable).is_some()
        || std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        || root.join(unpacked).is_file()
}

#[test]
fn quick_replicas_run_measures_every_case_and_adoption() {
    let haproxy = found(
        "haproxy",
        "MANIFOLD_HAPROXY",
        "tests/.cache/haproxy/usr/sbin/haproxy",
    );
    let redis = found(
        "redis-server",
        "MANIFOLD_REDIS_SERVER",
        "tests/.cache/redis/usr/bin/redis-server",
    );
    if !(haproxy && redis) {
        eprintln!("SKIPPED: HAProxy or redis-server missing; run `bash tests/replicas/install.sh` and `bash tests/redis/install.sh`");
        return;
    }
    let Some(doc) = run_quick_printing(
        "replicas",
        &["(d) as (c), no affinity", "Redis store: (c) over (b)"],
    ) else {
        return;
    };
    let r = &doc["scenarios"]["replicas"];
    assert_eq!(r["valid"], true, "{r}");
    assert_eq!(r["errors"], 0);
    let rounds = f(&r["rounds"]);
    for (case, replicas) in [
        ("fixture", 0),
        ("direct", 1),
        ("lb1_memory", 1),
        ("lb3_memory", 3),
        ("lb3_redis", 3),
        ("lb3_redis_rr", 3),
    ] {
        let c = &r[case];
        assert!(f(&c["calls_per_s"]["median"]) > 0.0, "{case}: {c}");
        assert_eq!(f(&c["latency"]["count"]), rounds * f(&r["calls_per_round"]));
        let single = rounds * f(&r["single_calls_per_round"]);
        assert_eq!(f(&c["one_connection"]["count"]), single, "{case}: {c}");
        let served = c["served_per_replica"].as_array().unwrap();
        assert_eq!(served.len(), replicas, "{case}: {c}");
        // Without affinity every replica serves.
        if case == "lb3_redis_rr" {
            assert!(served.iter().all(|n| f(n) > 0.0), "{c}");
        }
    }
    for pair in [
        "haproxy_vs_direct",
        "redis_vs_memory",
        "round_robin_vs_affinity",
    ] {
        assert!(f(&r[pair]["rate_ratio"]["median"]) > 0.0, "{pair}: {r}");
        assert!(r[pair]["one_connection"]["added"]["p50_us"].is_number());
    }
    let a = &r["adoption"];
    let sessions = rounds * f(&a["sessions_per_round"]);
    assert_eq!(f(&a["sessions"]), sessions, "{a}");
    for kind in [
        "initialize_memory",
        "initialize_redis",
        "held",
        "adopting",
        "adopted",
        "redis_ping",
    ] {
        assert_eq!(f(&a[kind]["count"]), sessions, "{kind}: {a}");
    }
    // Each adoption read the session's record from Redis.
    assert!(f(&a["redis_commands_per_session"]["hgetall"]) >= 1.0, "{a}");
}

/// `search --quick` runs in the load tool's own process (it starts the fixture and, when
/// installed, the reference servers, but no Manifold), so it needs only the fixture: the kit
/// builds it next to this test's binaries, and no `manifold` binary is asked for. Manifold's ranking must find more of the
/// development half's tools in its first five than the baseline does.
#[test]
fn quick_search_run_beats_the_baseline() {
    let fixture = manifold_testkit::process::fixture_bin();
    let out = std::env::temp_dir().join(format!(
        "manifold-load-smoke-search-{}.json",
        std::process::id()
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_manifold-load"))
        .args(["search", "--quick", "--out"])
        .arg(&out)
        .args(["--fixture", fixture])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "manifold-load failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Tool search:"), "{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out);
    let s = &doc["scenarios"]["search"];
    assert!(f(&s["catalog"]["tools"]) > 1_000.0, "{}", s["catalog"]);
    assert_eq!(
        s["catalog"]["real_tools"]["fixture"], 16,
        "{}",
        s["catalog"]
    );
    assert!(f(&s["queries"]["dev"]) >= 150.0, "{}", s["queries"]);
    let dev = &s["quality"]["dev"];
    let (ours, base) = (
        f(&dev["manifold"]["recall_at_5"]),
        f(&dev["baseline"]["recall_at_5"]),
    );
    assert!(
        ours > base,
        "recall@5 on the development half: Manifold {ours}, baseline {base}"
    );
    let cost = &s["cost"];
    assert_eq!(cost["tools"], 1_000);
    assert!(f(&cost["search_us"]["p50_us"]) > 0.0, "{cost}");
    assert!(f(&cost["heap_bytes"]) > 0.0, "{cost}");
    let size = &s["size"];
    assert!(
        f(&size["with_discovery"]["bytes"]) * 20.0 < f(&size["without_discovery"]["bytes"]),
        "{size}"
    );
}

/// A short soak: 15 s at 400 requests/s from 16 HTTP sessions to 10 upstreams. The pass/fail
/// conditions are asserted from the JSON, each on its own, and then the exit status.
#[test]
fn short_soak_answers_every_request_once_and_stays_flat() {
    let began = std::time::Instant::now();
    let flags = ["--soak-seconds", "15", "--soak-rate", "400"];
    let Some((output, doc)) = run("soak", &flags) else {
        return;
    };
    let s = &doc["scenarios"]["soak"];
    eprintln!(
        "soak: {:.1} s of wall time; {}",
        began.elapsed().as_secs_f64(),
        s["requests"]
    );
    let r = &s["requests"];
    let scheduled = f(&r["scheduled"]);
    assert_eq!(scheduled, 400.0 * (15.0 + 2.0), "{r}");
    for (count, expected) in [("sent", scheduled), ("answered", scheduled)] {
        assert_eq!(f(&r[count]), expected, "{count}: {r}");
    }
    for zero in [
        "lost",
        "duplicated",
        "stray_answers",
        "unexpected",
        "unanswered",
        "unsent",
    ] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    // Every kind was sent, and answered as it must be: a result, or the refusal (-32014).
    for kind in ["call", "hit", "list", "refusal"] {
        let k = &s["kinds"][kind];
        assert!(f(&k["sent"]) > 0.0, "{kind}: {k}");
        assert_eq!(k["as_expected"], k["sent"], "{kind}: {k}");
        assert!(f(&k["latency"]["p50_us"]) > 0.0, "{kind}: {k}");
    }
    // The fixtures saw every call once and no hit or refusal; Manifold counted every hit and
    // every refusal as such.
    for check in s["fixture_counts"].as_array().unwrap() {
        assert_eq!(check["counted"], check["expected"], "{check}");
    }
    let metrics = s["metrics"].as_object().unwrap();
    assert_eq!(metrics.len(), 3, "{metrics:?}");
    for (name, m) in metrics {
        assert_eq!(m["counted"], m["expected"], "{name}: {m}");
    }
    let hits = &metrics["cache_hits"];
    assert_eq!(hits["counted"], s["kinds"]["hit"]["sent"], "{hits}");
    // Descriptors and threads stayed within their tolerance; the upstreams stayed the same 10.
    let res = &s["resources"];
    for figure in ["fds", "threads"] {
        let v = &res[figure];
        let tolerance = f(&v["tolerance"]);
        assert!(f(&v["max"]) - f(&v["start"]) <= tolerance, "{figure}: {v}");
        assert!(f(&v["end"]) - f(&v["start"]) <= tolerance, "{figure}: {v}");
    }
    let ups = &res["upstream_processes"];
    for count in ["min", "max", "expected"] {
        assert_eq!(ups[count], 10, "{ups}");
    }
    assert_eq!(ups["samples_with_other_pids"], 0, "{ups}");
    assert_eq!(ups["zombies_max"], 0, "{ups}");
    assert!(f(&res["samples"]) >= 15.0, "{res}");
    assert!(
        f(&res["rss_kib"]["max"]) >= f(&res["rss_kib"]["start"]),
        "{res}"
    );
    assert!(f(&s["rate"]["achieved_per_s"]) > 0.0, "{}", s["rate"]);
    assert_eq!(s["passed"], true, "{}", s["failures"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Soak: 15 s at 400 requests/s"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "manifold-load failed: {stderr}");
}
