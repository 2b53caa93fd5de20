//! Integration test: a real Prometheus scrapes Manifold's `/metrics` while hosts call tools
//! through it with every outcome, and then every panel query of the Grafana dashboards under
//! `dashboards/` is evaluated against that Prometheus. A query that does not parse, that finds
//! no data, or that names a metric or label Manifold does not export fails the test.
//!
//! Needs the `prometheus` binary on PATH: `tests/run.sh` unpacks the Debian package
//! `prometheus` under `tests/.cache`. Everything listens on 127.0.0.1 only, and every wait is
//! bounded.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use manifold_testkit::http::{self, get_text, Server};
use manifold_testkit::metrics::series;
use manifold_testkit::process::*;

/// A tool name no upstream has: Manifold refuses it, and it must never become a label value.
const UNKNOWN_TOOL: &str = "no_such_tool_q7x";

/// Every outcome the test provokes, on the host side.
const OUTCOMES: [&str; 6] = [
    "ok",
    "tool_error",
    "protocol_error",
    "timeout",
    "cancelled",
    "unavailable",
];

#[test]
fn dashboards_have_data_from_a_real_prometheus() {
    let started = Instant::now();
    let prometheus_bin = prometheus_on_path();

    // Manifold over stdio with three fixture upstreams: alpha's `sleep` times out after
    // 200 ms (and alpha is pinged every 200 ms), beta's `sleep` is left to be cancelled, gamma is crashed and restarted. Results
    // are cached: alpha's `echo` for an hour, its `add` in a budget of 1 KiB of its own (a
    // dozen different calls overflow it: evictions by size), beta's `echo` for 500 ms
    // (expired), gamma's `echo` until gamma restarts (invalidated).
    let config = format!(
        "[server]\nrequest_timeout_ms = 10000\n\n\
         {}tool_timeouts = {{ sleep = 200 }}\nhealth_interval = \"200ms\"\n\n{}\n\
         {}restart_initial_backoff_ms = 50\nrestart_max_backoff_ms = 200\n\n\
         [upstreams.alpha.tool_cache.echo]\nttl = \"1h\"\n\n\
         [upstreams.alpha.tool_cache.add]\nttl = \"1h\"\nmax_bytes = 1024\n\n\
         [upstreams.beta.tool_cache.echo]\nttl = \"500ms\"\n\n\
         [upstreams.gamma.tool_cache.echo]\nttl = \"1h\"\n",
        named_fixture("alpha"),
        named_fixture("beta"),
        named_fixture("gamma"),
    );
    let mut m = Manifold::start_args(&config, &["--admin", "127.0.0.1:0"]);
    let admin = m.admin_port();
    let init = m.initialize();
    assert!(init.get("result").is_some(), "initialize failed: {init}");

    // A second Manifold serving Streamable HTTP (its /metrics on the same listener), so that
    // host sessions end while Prometheus watches: a stdio session ends only with the process.
    // Its sessions are in tool discovery's search mode (delta's tools pinned): find_tools
    // feeds the discovery panels.
    let h = Server::start(&format!(
        "[discovery]\nmode = \"search\"\npinned = [\"delta__*\"]\n\n{}",
        named_fixture("delta")
    ));
    let mut resident = h.ready_host();
    let r = resident.call("delta__echo", json!({"text": "stays"}));
    assert_eq!(r["result"]["content"][0]["text"], "stays", "{r}");

    let client = http::client();
    let targets = [
        format!("http://127.0.0.1:{admin}/metrics"),
        h.url("/metrics"),
    ];
    let mut prom = Prometheus::start(&prometheus_bin, &[admin, h.port]);
    prom.wait_ready(&client);
    prom.wait_until(&client, "both Manifolds scraped", |p, c| {
        p.value(c, "count(up == 1)") == Some(2.0)
    });

    // Two waves, each seen by Prometheus before the next, so that rate() has two samples of
    // every series the first wave made.
    for n in 1..=2 {
        wave(&mut m, &h, n);
        let total = op_count(&scrape_all(&targets));
        prom.wait_until(
            &client,
            &format!("wave {n} scraped ({total} requests)"),
            |p, c| {
                p.value(c, "sum(mcp_server_operation_duration_seconds_count)")
                    .is_some_and(|v| v >= total)
            },
        );
    }
    prom.wait_until(&client, "manifold_upstream_up in Prometheus", |p, c| {
        p.value(c, "count(manifold_upstream_up)") == Some(4.0)
    });
    // The cache counts an entry as expired when it next tidies up, which takes cache traffic:
    // a hit each time round until beta's short-lived entries are counted.
    let expired =
        "manifold_cache_evictions_total{cache=\"tools\",upstream=\"beta\",cause=\"expired\"}";
    eventually("an expired cache entry counted", || {
        assert_eq!(
            text_of(&m.call("alpha__echo", json!({"text": "cached"}))),
            "cached"
        );
        series(&m.scrape(), expired).is_some_and(|v| v > 0.0)
    });
    prom.wait_until(&client, "the expired entry in Prometheus", |p, c| {
        p.value(c, &format!("sum({expired})"))
            .is_some_and(|v| v > 0.0)
    });

    let exposition = scrape_all(&targets);
    let mut tools = m.all_tool_names();
    let listed = resident.request("tools/list", json!({}));
    tools.extend(
        listed["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned()),
    );
    check_exposition(&exposition, &tools);
    let exported = Exported::parse(&exposition);

    let dashboards = dashboards();
    assert!(!dashboards.is_empty(), "no dashboards/*.json");
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for (file, dashboard) in &dashboards {
        let name = file.file_name().unwrap().to_string_lossy();
        check_datasource_variable(&name, dashboard, &mut failures);
        for (var, selector, label) in variable_queries(dashboard) {
            let what = format!("{name}: variable ${var}");
            exported.check_expr(&what, &selector, &mut failures);
            exported.check_label(&what, &label, &mut failures);
            let values = prom.label_values(&client, &label, &selector);
            if values.is_empty() {
                failures.push(format!(
                    "{what}: label_values({selector}, {label}) is empty"
                ));
            }
        }
        for panel in panels(dashboard) {
            let title = panel["title"].as_str().unwrap_or("(untitled)");
            let what = format!("{name}: panel {title:?}");
            if panel["description"]
                .as_str()
                .unwrap_or("")
                .trim()
                .is_empty()
            {
                failures.push(format!("{what} has no description"));
            }
            check_panel_datasource(&what, panel, &mut failures);
            let targets = panel["targets"].as_array().cloned().unwrap_or_default();
            if targets.is_empty() {
                failures.push(format!("{what} has no targets"));
            }
            for t in targets {
                let what = format!("{what} target {}", t["refId"].as_str().unwrap_or("?"));
                let Some(expr) = t["expr"].as_str() else {
                    failures.push(format!("{what} has no expr"));
                    continue;
                };
                for label in legend_labels(t["legendFormat"].as_str().unwrap_or("")) {
                    exported.check_label(&format!("{what} legend"), &label, &mut failures);
                }
                let expr = substitute(expr);
                exported.check_expr(&what, &expr, &mut failures);
                evaluated += 1;
                if let Err(e) = prom.has_data(&client, &expr) {
                    failures.push(format!("{what}: {e}\n  {expr}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the dashboards' checks failed:\n- {}",
        failures.len(),
        failures.join("\n- ")
    );
    assert!(evaluated >= 10, "only {evaluated} panel queries found");

    drop(resident);
    eprintln!(
        "{evaluated} panel queries evaluated; the test took {:?}",
        started.elapsed()
    );
}

/// One wave of host traffic producing every outcome, each checked from the host's side.
fn wave(m: &mut Manifold, h: &Server, n: u64) {
    // ok; alpha's `echo` and `add` are cached: different arguments are misses, the same
    // again are hits, and a dozen different `add`s overflow its budget.
    for i in 0..5 {
        let r = m.call("alpha__echo", json!({"text": format!("w{n} {i}")}));
        assert_eq!(text_of(&r), format!("w{n} {i}"));
    }
    for _ in 0..3 {
        let r = m.call("alpha__echo", json!({"text": "cached"}));
        assert_eq!(text_of(&r), "cached");
    }
    for i in 0..12 {
        let r = m.call("alpha__add", json!({"a": i, "b": n}));
        assert_eq!(text_of(&r), (i + n).to_string());
    }
    assert_eq!(text_of(&m.call("beta__echo", json!({"text": "b"}))), "b");
    assert_eq!(text_of(&m.call("gamma__echo", json!({"text": "g"}))), "g");
    let r = m.request("tools/list", json!({}));
    assert!(r.get("result").is_some(), "{r}");

    // tool_error: a result with isError.
    let r = m.call("alpha__fail", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");

    // protocol_error: a tool that does not exist, refused by Manifold...
    let r = m.call(UNKNOWN_TOOL, json!({}));
    assert_eq!(error_code(&r), -32602, "{r}");
    // ...and JSON-RPC errors from the upstream, for a tool call (while nothing else is in
    // flight to alpha) and for a prompt.
    let r = m.call("alpha__null_id_error", json!({}));
    assert_eq!(error_code(&r), -32700, "{r}");
    let r = m.request("prompts/get", json!({"name": "alpha__greet"}));
    assert_eq!(error_code(&r), -32602, "{r}");

    // timeout: alpha's `sleep` has 200 ms.
    let r = m.call("alpha__sleep", json!({"ms": 5000}));
    assert_eq!(error_code(&r), -32011, "{r}");

    // cancelled: the host gives up on a slow call once it is at the upstream.
    let id = m.send_request(
        "tools/call",
        json!({"name": "beta__sleep", "arguments": {"ms": 15000}}),
    );
    let inflight = "manifold_upstream_inflight_requests{upstream=\"beta\"}";
    eventually("beta's sleep in flight", || {
        series(&m.scrape(), inflight) == Some(1.0)
    });
    m.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    eventually("beta's sleep no longer in flight", || {
        series(&m.scrape(), inflight) == Some(0.0)
    });

    // unavailable: gamma exits in the middle of a call, and is restarted.
    let restarts = "manifold_upstream_restarts_total{upstream=\"gamma\"}";
    let before = series(&m.scrape(), restarts).unwrap_or(0.0);
    let r = m.call("gamma__crash", json!({}));
    assert!(r.get("error").is_some(), "{r}");
    eventually("gamma restarted and up", || {
        let text = m.scrape();
        series(&text, restarts).is_some_and(|v| v > before)
            && series(&text, "manifold_upstream_up{upstream=\"gamma\"}") == Some(1.0)
    });
    eventually("gamma's tools back", || {
        m.call("gamma__echo", json!({"text": "back"}))
            .get("result")
            .is_some()
    });

    // An HTTP host session that begins and ends.
    let mut host = h.ready_host();
    let r = host.call("delta__echo", json!({"text": "http"}));
    assert_eq!(r["result"]["content"][0]["text"], "http", "{r}");
    let r = host.call("find_tools", json!({"query": "echo text back"}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(host
        .request("tools/list", json!({}))
        .get("result")
        .is_some());
    assert!(host.delete().status().is_success());
    let ended = "mcp_server_session_duration_seconds_count{transport=\"http\"}";
    eventually("the HTTP session's end recorded", || {
        series(&get_text(&h.url("/metrics")), ended) == Some(n as f64)
    });
}

/// What Manifold's own /metrics must say, whatever the dashboards do with it.
fn check_exposition(text: &str, tools: &[String]) {
    assert!(
        !text.contains(UNKNOWN_TOOL),
        "a tool name the host made up became a label value:\n{text}"
    );
    for family in [
        "mcp_server_operation_duration_seconds",
        "mcp_client_operation_duration_seconds",
    ] {
        let count = format!("{family}_count");
        let outcomes: BTreeSet<String> = samples(text)
            .filter(|s| s.name == count)
            .filter_map(|s| s.labels.get("outcome").cloned())
            .collect();
        for o in OUTCOMES {
            assert!(
                outcomes.contains(o),
                "{count} has no outcome=\"{o}\" series (has {outcomes:?}):\n{text}"
            );
        }
    }
    // Every tool label is empty or a tool of the catalog.
    let mut known: BTreeSet<&str> = tools.iter().map(String::as_str).collect();
    known.insert("");
    for s in samples(text) {
        if let Some(tool) = s.labels.get("tool") {
            assert!(
                known.contains(tool.as_str()),
                "tool label {tool:?} is not in the catalog"
            );
        }
    }
    // The unknown tool counts as a tools/call refused by Manifold itself: no upstream, no tool.
    let refused = samples(text).find(|s| {
        s.name == "mcp_server_operation_duration_seconds_count"
            && s.labels.get("method").map(String::as_str) == Some("tools/call")
            && s.labels.get("outcome").map(String::as_str) == Some("protocol_error")
            && s.labels.get("upstream").map(String::as_str) == Some("")
    });
    assert!(
        refused.is_some_and(|s| s.value >= 2.0),
        "no refused tools/call:\n{text}"
    );
    for (metric, at_least) in [
        // Wave 1 fills alpha's "cached" echo, and every call after is a hit (from memory: no
        // shared tier here); wave 2's echo and add arguments are new (misses).
        (
            "manifold_cache_hits_total{cache=\"tools\",upstream=\"alpha\",tier=\"memory\"}",
            5.0,
        ),
        (
            "manifold_cache_misses_total{cache=\"tools\",upstream=\"alpha\"}",
            2.0 * 17.0,
        ),
        (
            "manifold_cache_evictions_total{cache=\"tools\",upstream=\"alpha\",cause=\"size\"}",
            1.0,
        ),
        (
            "manifold_cache_evictions_total{cache=\"tools\",upstream=\"gamma\",cause=\"invalidated\"}",
            1.0,
        ),
        (
            "manifold_cache_bytes{cache=\"tools\",upstream=\"alpha\"}",
            1.0,
        ),
        (
            "manifold_cache_entries{cache=\"tools\",upstream=\"alpha\"}",
            1.0,
        ),
        // Rendered without a shared tier too, at 0.
        (
            "manifold_cache_store_errors_total{operation=\"lookup\"}",
            0.0,
        ),
        ("manifold_upstream_restarts_total{upstream=\"gamma\"}", 2.0),
        ("manifold_sessions{transport=\"stdio\"}", 1.0),
        ("manifold_sessions{transport=\"http\"}", 1.0),
        (
            "manifold_catalog_items{upstream=\"alpha\",kind=\"tools\"}",
            1.0,
        ),
        (
            "manifold_host_bytes_total{transport=\"stdio\",direction=\"in\"}",
            1.0,
        ),
        (
            "manifold_upstream_bytes_total{upstream=\"alpha\",direction=\"out\"}",
            1.0,
        ),
    ] {
        let v = series(text, metric).unwrap_or_else(|| panic!("no {metric} in\n{text}"));
        assert!(
            v >= at_least,
            "{metric} is {v}, expected at least {at_least}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus

/// The `prometheus` binary on PATH; its absence fails the test rather than skipping it.
fn prometheus_on_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`prometheus` is not on PATH. This test evaluates the dashboards against a \
                 real Prometheus; tests/run.sh unpacks the Debian package `prometheus` under \
                 tests/.cache and puts it on PATH"
            )
        })
}

/// A running Prometheus with its own storage, killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Prometheus {
    fn start(bin: &Path, ports: &[u16]) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let targets: Vec<String> = ports.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = dir.write(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: manifold\n    static_configs:\n      \
                 - targets: [{}]\n",
                targets.join(", ")
            ),
        );
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", bin.display()));
        Prometheus { child, port, dir }
    }

    fn log(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn wait_ready(&mut self, client: &Client) {
        let until = Instant::now() + WAIT;
        loop {
            let ready = client
                .get(self.url("/-/ready"))
                .send()
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("Prometheus exited ({status}); its log:\n{}", self.log());
            }
            assert!(
                Instant::now() < until,
                "Prometheus not ready within {WAIT:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls `cond` until true; on the deadline, fails with Prometheus's log.
    fn wait_until(&self, client: &Client, what: &str, cond: impl Fn(&Self, &Client) -> bool) {
        let until = Instant::now() + WAIT;
        loop {
            if cond(self, client) {
                return;
            }
            assert!(
                Instant::now() < until,
                "timed out waiting for: {what}; Prometheus log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The answer of an instant query, as JSON.
    fn query(&self, client: &Client, expr: &str) -> Result<Value, String> {
        let url = self.url(&format!("/api/v1/query?query={}", encode(expr)));
        let r = client.get(url).send().map_err(|e| e.to_string())?;
        let status = r.status();
        let text = r.text().map_err(|e| e.to_string())?;
        let body: Value =
            serde_json::from_str(&text).map_err(|e| format!("{status}: {e}: {text}"))?;
        if body["status"] != "success" {
            return Err(format!(
                "{status}: {} {}",
                body["errorType"].as_str().unwrap_or(""),
                body["error"].as_str().unwrap_or(&text)
            ));
        }
        Ok(body["data"].clone())
    }

    /// The single value of a query answered with one sample, if it is.
    fn value(&self, client: &Client, expr: &str) -> Option<f64> {
        let data = self.query(client, expr).ok()?;
        let result = data["result"].as_array()?;
        match result.as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// Ok when `expr` parses and answers at least one sample with a number (not NaN).
    fn has_data(&self, client: &Client, expr: &str) -> Result<(), String> {
        let data = self.query(client, expr)?;
        let values: Vec<&str> = match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["value"][1].as_str())
                .collect(),
            Some("scalar") => data["result"][1].as_str().into_iter().collect(),
            other => return Err(format!("unexpected result type {other:?}")),
        };
        if values.is_empty() {
            return Err("no series".into());
        }
        if !values
            .iter()
            .any(|v| v.parse::<f64>().is_ok_and(f64::is_finite))
        {
            return Err(format!("only {values:?}"));
        }
        Ok(())
    }

    fn label_values(&self, client: &Client, label: &str, selector: &str) -> Vec<String> {
        let url = self.url(&format!(
            "/api/v1/label/{label}/values?match[]={}",
            encode(selector)
        ));
        let body: Value = client.get(url).send().unwrap().json().unwrap();
        assert_eq!(body["status"], "success", "{body}");
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter's value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Manifold's /metrics

fn scrape_all(urls: &[String]) -> String {
    urls.iter().map(|u| get_text(u)).collect()
}

/// Host requests counted so far.
fn op_count(text: &str) -> f64 {
    samples(text)
        .filter(|s| s.name == "mcp_server_operation_duration_seconds_count")
        .map(|s| s.value)
        .sum()
}

struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of an exposition.
fn samples(text: &str) -> impl Iterator<Item = Sample> + '_ {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (name, rest) = match line.find(['{', ' ']) {
                Some(i) => line.split_at(i),
                None => panic!("bad sample line {line:?}"),
            };
            let mut labels = BTreeMap::new();
            let mut rest = rest;
            if let Some(inner) = rest.strip_prefix('{') {
                let (pairs, after) = parse_labels(inner)
                    .unwrap_or_else(|| panic!("bad labels in sample line {line:?}"));
                labels = pairs;
                rest = after;
            }
            let value = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("bad value in sample line {line:?}"));
            Sample {
                name: name.to_owned(),
                labels,
                value,
            }
        })
}

/// Parses `k="v",...}`; returns the pairs and what follows the brace.
fn parse_labels(mut s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut out = BTreeMap::new();
    loop {
        s = s.trim_start_matches(',');
        if let Some(rest) = s.strip_prefix('}') {
            return Some((out, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].to_owned();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.insert(key, value);
        s = &s[end + 1..];
    }
}

/// The metric families Manifold exports, with their types and labels.
struct Exported {
    /// Family name to type (`counter`, `gauge`, `histogram`).
    types: BTreeMap<String, String>,
    /// Family name to every label name its samples carry.
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Exported {
    fn parse(text: &str) -> Exported {
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                    panic!("bad TYPE line {line:?}");
                };
                types.insert(name.to_owned(), kind.to_owned());
            }
        }
        let mut exported = Exported {
            types,
            labels: BTreeMap::new(),
        };
        for s in samples(text) {
            let (family, _) = exported
                .family(&s.name)
                .unwrap_or_else(|| panic!("sample {} has no TYPE", s.name));
            let set = exported.labels.entry(family).or_default();
            set.extend(s.labels.into_keys().filter(|k| k != "le"));
        }
        exported
    }

    /// The family of a series name, and whether it is a histogram's `_bucket`.
    fn family(&self, name: &str) -> Option<(String, bool)> {
        match self.types.get(name).map(String::as_str) {
            Some("histogram") => return None, // a histogram has no series of its bare name
            Some(_) => return Some((name.to_owned(), false)),
            None => {}
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if self.types.get(base).map(String::as_str) == Some("histogram") {
                    return Some((base.to_owned(), suffix == "_bucket"));
                }
            }
        }
        None
    }

    fn all_labels(&self) -> BTreeSet<&str> {
        self.labels.values().flatten().map(String::as_str).collect()
    }

    fn check_label(&self, what: &str, label: &str, failures: &mut Vec<String>) {
        if label != "le" && label != "__name__" && !self.all_labels().contains(label) {
            failures.push(format!(
                "{what} uses label {label:?}, which Manifold does not export (it exports {:?})",
                self.all_labels()
            ));
        }
    }

    /// Every metric and label `expr` names must be Manifold's.
    fn check_expr(&self, what: &str, expr: &str, failures: &mut Vec<String>) {
        let refs = match references(expr) {
            Ok(refs) => refs,
            Err(e) => {
                failures.push(format!("{what}: cannot read {expr:?}: {e}"));
                return;
            }
        };
        for label in &refs.grouping {
            self.check_label(what, label, failures);
        }
        for (metric, matchers) in &refs.selectors {
            let Some(metric) = metric else {
                for label in matchers {
                    self.check_label(what, label, failures);
                }
                continue;
            };
            let Some((family, bucket)) = self.family(metric) else {
                failures.push(format!(
                    "{what} names metric {metric:?}, which Manifold does not export"
                ));
                continue;
            };
            let own = self.labels.get(&family).cloned().unwrap_or_default();
            for label in matchers {
                let ok = own.contains(label) || label == "__name__" || (bucket && label == "le");
                if !ok {
                    failures.push(format!(
                        "{what} matches label {label:?} of {metric}, which has only {own:?}"
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The dashboards

fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (p, v)
        })
        .collect()
}

/// Every panel that is not a row, including those inside collapsed rows.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p["type"] == "row" {
                walk(&p["panels"], out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The Prometheus data source variable, defaulting to the provisioned data source's uid.
fn check_datasource_variable(name: &str, dashboard: &Value, failures: &mut Vec<String>) {
    let vars = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let Some(ds) = vars.iter().find(|v| v["name"] == "datasource") else {
        failures.push(format!("{name}: no `datasource` variable"));
        return;
    };
    if ds["type"] != "datasource" || ds["query"] != "prometheus" {
        failures.push(format!(
            "{name}: `datasource` is not a Prometheus data source variable"
        ));
    }
    let provisioned = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../dashboards/provisioning/datasources/prometheus.yaml");
    let yaml = std::fs::read_to_string(&provisioned).unwrap_or_default();
    let uid = ds["current"]["value"].as_str().unwrap_or("");
    let matches = yaml.lines().any(|l| {
        l.trim()
            .strip_prefix("uid:")
            .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == uid)
    });
    if uid.is_empty() || !matches {
        failures.push(format!(
            "{name}: the default data source {uid:?} is not the uid in {}",
            provisioned.display()
        ));
    }
}

fn check_panel_datasource(what: &str, panel: &Value, failures: &mut Vec<String>) {
    let mut sources = vec![&panel["datasource"]];
    sources.extend(
        panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| &t["datasource"]),
    );
    for ds in sources {
        if ds["uid"] != "${datasource}" {
            failures.push(format!("{what}: data source {ds} is not ${{datasource}}"));
        }
    }
}

/// The query variables as (name, selector, label), from `label_values(selector, label)`.
fn variable_queries(dashboard: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap_or("?").to_owned();
        let query = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .or_else(|| v["definition"].as_str())
            .unwrap_or_else(|| panic!("variable {name} has no query"));
        let inner = query
            .trim()
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: not label_values(...): {query}"));
        let (selector, label) = inner
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("variable {name}: label_values needs a label: {query}"));
        out.push((name, substitute(selector.trim()), label.trim().to_owned()));
    }
    out
}

/// Grafana's variables as the test evaluates them: every selection is "All".
fn substitute(expr: &str) -> String {
    let mut out = expr.to_owned();
    for (from, to) in [
        ("${upstream}", ".*"),
        ("$upstream", ".*"),
        ("${tool}", ".*"),
        ("$tool", ".*"),
        ("${team}", ".*"),
        ("$team", ".*"),
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "1m"),
        ("$__interval", "1m"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
    ] {
        out = out.replace(from, to);
    }
    assert!(
        !out.contains('$'),
        "a variable the test does not know in {expr:?}"
    );
    out
}

/// The label names in a legend format's `{{label}}`s.
fn legend_labels(format: &str) -> Vec<String> {
    format
        .split("{{")
        .skip(1)
        .filter_map(|part| part.split_once("}}"))
        .map(|(label, _)| label.trim().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// What a PromQL expression names (a tokenizer, not a parser: enough to find names)

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Str,
    Punct(char),
    Number,
}

fn tokenize(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unterminated string".into()),
                    Some('\\') if c != '`' => i += 2,
                    Some(&q) if q == c => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            out.push(Token::Str);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token::Number);
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    Ok(out)
}

#[derive(Debug, Default)]
struct References {
    /// Each selector: its metric name (None for a bare `{...}`) and its matchers' labels.
    selectors: Vec<(Option<String>, Vec<String>)>,
    /// Labels in by, without, on, ignoring, group_left and group_right.
    grouping: Vec<String>,
}

fn references(expr: &str) -> Result<References, String> {
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let tokens = tokenize(expr)?;
    let mut refs = References::default();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(name) if tokens.get(i + 1) == Some(&Token::Punct('(')) => {
                if GROUPING.contains(&name.as_str()) {
                    i += 2;
                    loop {
                        match tokens.get(i) {
                            Some(Token::Ident(label)) => refs.grouping.push(label.clone()),
                            Some(Token::Punct(',')) => {}
                            Some(Token::Punct(')')) => break,
                            other => return Err(format!("odd token {other:?} in {name}(...)")),
                        }
                        i += 1;
                    }
                }
                i += 1;
            }
            Token::Ident(name) if tokens.get(i + 1) == Some(&Token::Punct('{')) => {
                let (matchers, next) = matchers(&tokens, i + 2)?;
                refs.selectors.push((Some(name.clone()), matchers));
                i = next;
            }
            Token::Ident(name) if name.starts_with("mcp_") || name.starts_with("manifold_") => {
                refs.selectors.push((Some(name.clone()), Vec::new()));
                i += 1;
            }
            Token::Punct('{') => {
                let (matchers, next) = matchers(&tokens, i + 1)?;
                refs.selectors.push((None, matchers));
                i = next;
            }
            _ => i += 1,
        }
    }
    Ok(refs)
}

/// The label names of `name op "value", ... }` from `i`; returns them and the index after `}`.
fn matchers(tokens: &[Token], mut i: usize) -> Result<(Vec<String>, usize), String> {
    let mut labels = Vec::new();
    loop {
        match tokens.get(i) {
            Some(Token::Punct('}')) => return Ok((labels, i + 1)),
            Some(Token::Punct(',')) => i += 1,
            Some(Token::Ident(label)) => {
                labels.push(label.clone());
                i += 1;
                while let Some(Token::Punct('=' | '!' | '~')) = tokens.get(i) {
                    i += 1;
                }
                if tokens.get(i) != Some(&Token::Str) {
                    return Err(format!("matcher on {label} without a quoted value"));
                }
                i += 1;
            }
            other => return Err(format!("odd token {other:?} in a selector")),
        }
    }
}

#[test]
fn the_expression_reader_finds_metrics_and_labels() {
    let refs = references(
        "sum by (le, upstream) (rate(mcp_x_bucket{tool=~\"a,}\", team!=\"b\"}[1m]))\n\
         and on (upstream) topk(10, manifold_y) / ignoring(kind) {outcome=\"ok\"} # {nope}",
    )
    .unwrap();
    assert_eq!(refs.grouping, ["le", "upstream", "upstream", "kind"]);
    assert_eq!(
        refs.selectors,
        [
            (
                Some("mcp_x_bucket".into()),
                vec!["tool".into(), "team".into()]
            ),
            (Some("manifold_y".into()), vec![]),
            (None, vec!["outcome".into()]),
        ]
    );
    assert_eq!(
        substitute("rate(x{upstream=~\"$upstream\"}[$__rate_interval]) @ $__range"),
        "rate(x{upstream=~\".*\"}[1m]) @ 5m"
    );
    assert_eq!(
        legend_labels("{{upstream}} {{ direction }}"),
        ["upstream", "direction"]
    );
    let (labels, rest) = parse_labels("a=\"x\\\"y\",b=\"\"} 3").unwrap();
    assert_eq!(labels["a"], "x\"y");
    assert_eq!(labels["b"], "");
    assert_eq!(rest, " 3");
}
