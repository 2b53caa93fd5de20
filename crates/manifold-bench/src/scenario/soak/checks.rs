//! What the soak checks after its load, besides each answer: the counts of the answers, the
//! fixtures' own counts of what reached them, and Manifold's own counts in `/metrics`.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use super::load::Seen;
use super::mix::Kind;
use super::UPSTREAMS;
use crate::scenario::cache::fixture_count;
use crate::session::Session;
use crate::target::HttpServer;

/// How long `/metrics` may take to count the last requests (a request's outcome is recorded
/// as it finishes, which can be just after its answer was read).
const METRICS_WAIT: Duration = Duration::from_secs(3);

/// Every way the answers went wrong.
pub fn answer_failures(seen: &Seen) -> Vec<String> {
    let mut failures = Vec::new();
    let unexpected: u64 = seen.unexpected.iter().sum();
    let unanswered: u64 = seen.unanswered.iter().sum();
    for (what, n) in [
        ("requests lost (no answer named them)", seen.lost),
        ("requests answered more than once", seen.duplicated),
        ("answers to ids never sent", seen.strays),
        ("requests answered otherwise than expected", unexpected),
        ("requests whose answer did not come", unanswered),
        ("requests not sent before the deadline", seen.unsent),
    ] {
        if n > 0 {
            failures.push(format!("{n} {what}"));
        }
    }
    if let (false, Some(first)) = (failures.is_empty(), &seen.first_problem) {
        failures.push(format!("the first problem: {first}"));
    }
    failures
}

/// The fixtures' own counts: every call sent reached its upstream once, and the cached and
/// refused tools were called only while priming.
pub fn fixture_counts(
    probe: &mut Session,
    seen: &Seen,
    failures: &mut Vec<String>,
) -> Result<Value> {
    let mut checks = Vec::new();
    for i in 0..UPSTREAMS {
        checks.push((i, "tool:echo", seen.calls_to[i] as usize));
        checks.push((i, "tool:add", 1));
    }
    checks.push((0, "tool:whoami", 1));
    let mut out = Vec::new();
    for (i, what, expected) in checks {
        let counted = fixture_count(probe, &format!("alpha{i}"), what)?;
        if counted != expected {
            failures.push(format!(
                "alpha{i} counted {counted} of {what}, expected {expected}"
            ));
        }
        out.push(json!({ "upstream": format!("alpha{i}"), "what": what, "expected": expected, "counted": counted }));
    }
    Ok(Value::Array(out))
}

/// One count read from `/metrics`: the sum of every series of a metric whose labels hold
/// `label`, and what it must be.
struct Count {
    key: &'static str,
    /// The metric's name and the brace that opens its labels.
    series: &'static str,
    label: &'static str,
    expected: u64,
}

/// Manifold's own counts (`/metrics`): a cache hit for every hit sent (and a miss for each
/// priming call), `rate_limited` for every refusal sent (and the priming one).
pub fn metrics(server: &HttpServer, seen: &Seen, failures: &mut Vec<String>) -> Result<Value> {
    let counts = [
        Count {
            key: "cache_hits",
            series: "manifold_cache_hits_total{",
            label: "",
            expected: seen.sent[Kind::Hit.index()],
        },
        Count {
            key: "cache_misses",
            series: "manifold_cache_misses_total{",
            label: "",
            expected: UPSTREAMS as u64,
        },
        Count {
            key: "rate_limited",
            series: "mcp_server_operation_duration_seconds_count{",
            label: "outcome=\"rate_limited\"",
            expected: seen.sent[Kind::Refusal.index()] + 1,
        },
    ];
    let began = Instant::now();
    let mut counted = read_metrics(server, &counts)?;
    // Polled while a count is short: the last requests may not be counted yet.
    let short = |counted: &[u64]| counted.iter().zip(&counts).any(|(n, c)| *n < c.expected);
    while short(&counted) && began.elapsed() < METRICS_WAIT {
        std::thread::sleep(Duration::from_millis(50));
        counted = read_metrics(server, &counts)?;
    }
    let mut out = Map::new();
    for (c, got) in counts.iter().zip(counted) {
        if got != c.expected {
            failures.push(format!(
                "/metrics: {} ({}{}}}) is {got}, expected {}",
                c.key, c.series, c.label, c.expected
            ));
        }
        out.insert(
            c.key.into(),
            json!({ "expected": c.expected, "counted": got }),
        );
    }
    Ok(Value::Object(out))
}

/// Each count's sum, read now.
fn read_metrics(server: &HttpServer, counts: &[Count]) -> Result<Vec<u64>> {
    let (status, body) = crate::scenario::replicas::get(server.addr(), "/metrics")?;
    if status != 200 {
        bail!("GET /metrics: HTTP {status}");
    }
    let text = String::from_utf8_lossy(&body);
    let sum = |c: &Count| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(c.series) && l.contains(c.label))
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .map(|n| n as u64)
            .sum()
    };
    Ok(counts.iter().map(sum).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wrong_answer_fails_the_run_and_names_the_first() {
        assert!(answer_failures(&Seen::default()).is_empty());
        let seen = Seen {
            lost: 2,
            unexpected: [0, 0, 1, 0],
            first_problem: Some("a list answered with ...".into()),
            ..Seen::default()
        };
        let failures = answer_failures(&seen);
        assert_eq!(failures.len(), 3, "{failures:?}");
        assert!(failures[0].starts_with("2 requests lost"), "{failures:?}");
        assert!(failures[2].contains("a list answered"), "{failures:?}");
    }
}
