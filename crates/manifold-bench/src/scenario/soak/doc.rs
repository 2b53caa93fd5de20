//! The soak's figures as JSON: its config, the counts of requests by kind, the rate
//! achieved and the schedule's lag, latency by kind and by minute, and every sample.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::load::Seen;
use super::mix::{Mix, KINDS};
use super::sample::Sample;
use super::{Shape, UPSTREAMS};
use crate::stats::{round, Summary};

/// What ran: the schedule, the share of each kind of request, the lists' sizes as checked
/// before the load, and what was added to Manifold's config.
pub fn config(shape: Shape, tables: &str, items: [usize; 3]) -> Value {
    let shares = Mix::shares();
    let mix: Map<String, Value> = KINDS
        .iter()
        .zip(shares)
        .map(|(k, s)| (k.name().to_owned(), json!(s)))
        .collect();
    json!({
        "seconds": shape.seconds,
        "warmup_seconds": shape.warmup_s,
        "rate_per_s": shape.rate,
        "sessions": shape.sessions,
        "upstreams": UPSTREAMS,
        "mix": mix,
        "list_items": { "tools": items[0], "resources": items[1], "prompts": items[2] },
        "manifold_tables": tables,
    })
}

/// What became of every request of the run, the warm-up included.
pub fn requests(seen: &Seen, shape: Shape) -> Value {
    let sent: u64 = seen.sent.iter().sum();
    let good: u64 = seen.good.iter().sum();
    let unexpected: u64 = seen.unexpected.iter().sum();
    json!({
        "scheduled": shape.total(),
        "sent": sent,
        "answered": good + unexpected,
        "answered_as_expected": good,
        "unexpected": unexpected,
        "unanswered": seen.unanswered.iter().sum::<u64>(),
        "lost": seen.lost,
        "duplicated": seen.duplicated,
        "stray_answers": seen.strays,
        "unsent": seen.unsent,
        "first_problem": seen.first_problem,
    })
}

/// Each kind's counts, and its latency over the measured part.
pub fn kinds(seen: &Seen) -> Value {
    let mut out = Map::new();
    for kind in KINDS {
        let i = kind.index();
        let mut samples: Vec<u64> = seen
            .latency
            .iter()
            .flat_map(|m| m[i].iter().copied())
            .collect();
        out.insert(
            kind.name().into(),
            json!({
                "sent": seen.sent[i],
                "as_expected": seen.good[i],
                "unexpected": seen.unexpected[i],
                "unanswered": seen.unanswered[i],
                "latency": Summary::of(&mut samples).to_json(),
            }),
        );
    }
    Value::Object(out)
}

/// The target rate against the rate answered: the measured part's answers over the time
/// it took (all of the run but the warm-up).
pub fn rate(seen: &Seen, shape: Shape, elapsed: Duration) -> Value {
    let answered: usize = seen
        .latency
        .iter()
        .flat_map(|m| m.iter().map(Vec::len))
        .sum();
    let measured_s = (elapsed.as_secs_f64() - shape.warmup_s).max(1e-9);
    json!({
        "target_per_s": shape.rate,
        "achieved_per_s": round(answered as f64 / measured_s),
        "measured_answers": answered,
        "measured_s": round(measured_s),
        "elapsed_s": round(elapsed.as_secs_f64()),
    })
}

/// How late requests went out against the schedule (the load generator's own lag).
pub fn lag(seen: &Seen) -> Value {
    let mut all: Vec<u64> = seen.lag.iter().flatten().copied().collect();
    let late = all.iter().filter(|ns| **ns > 10_000_000).count();
    let mut v = Summary::of(&mut all).to_json();
    v["over_10ms"] = json!(late);
    v
}

/// Each measured minute: answers, their latency (all kinds), the lag, and Manifold's
/// resources at the minute's end.
pub fn per_minute(seen: &Seen, samples: &[Sample], shape: Shape) -> Value {
    let mut out = Vec::new();
    for (m, kinds) in seen.latency.iter().enumerate() {
        let mut all: Vec<u64> = kinds.iter().flatten().copied().collect();
        let mut lag = seen.lag.get(m).cloned().unwrap_or_default();
        let end = shape.warmup_s + 60.0 * (m + 1) as f64;
        let at = samples
            .iter()
            .rev()
            .find(|s| s.t_s <= end)
            .or(samples.last());
        let (answers, latency, lag) = (all.len(), Summary::of(&mut all), Summary::of(&mut lag));
        out.push(json!({
            "minute": m + 1,
            "answers": answers,
            "p50_us": round(latency.at[0]),
            "p99_us": round(latency.at[2]),
            "lag_p99_us": round(lag.at[2]),
            "rss_kib": at.map(|s| s.rss_kib),
            "fds": at.map(|s| s.fds),
            "threads": at.map(|s| s.threads),
        }));
    }
    Value::Array(out)
}

/// Every sample, one array per figure.
pub fn series(samples: &[Sample]) -> Value {
    json!({
        "t_s": samples.iter().map(|s| round(s.t_s)).collect::<Vec<_>>(),
        "rss_kib": samples.iter().map(|s| s.rss_kib).collect::<Vec<_>>(),
        "fds": samples.iter().map(|s| s.fds).collect::<Vec<_>>(),
        "threads": samples.iter().map(|s| s.threads).collect::<Vec<_>>(),
        "upstreams": samples.iter().map(|s| s.children.len()).collect::<Vec<_>>(),
    })
}
