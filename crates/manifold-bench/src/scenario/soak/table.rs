//! The soak's figures as text, read back from its JSON like every other table.

use std::fmt::Write as _;

use serde_json::Value;

use super::mix::KINDS;

/// The soak's table, or nothing when it did not run.
pub fn write(out: &mut String, v: &Value) {
    if v.is_null() {
        return;
    }
    let c = &v["config"];
    let verdict = if v["passed"] == true {
        "PASSED"
    } else {
        "FAILED"
    };
    let _ = writeln!(
        out,
        "\nSoak: {} s at {} requests/s from {} HTTP sessions to {} upstreams, after {} s of \
         warm-up: {verdict}",
        cell(&c["seconds"]),
        cell(&c["rate_per_s"]),
        cell(&c["sessions"]),
        cell(&c["upstreams"]),
        cell(&c["warmup_seconds"])
    );
    for failure in v["failures"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  FAILURE: {}", cell(failure));
    }
    counts(out, v);
    resources(out, &v["resources"]);
    minutes(out, &v["per_minute"]);
}

/// What became of the requests, by kind, and the rate and lag of the schedule.
fn counts(out: &mut String, v: &Value) {
    let r = &v["requests"];
    let _ = writeln!(
        out,
        "requests: {} scheduled, {} sent, {} answered; lost {}, duplicated {}, stray answers {}, \
         unexpected {}, unsent {}",
        cell(&r["scheduled"]),
        cell(&r["sent"]),
        cell(&r["answered"]),
        cell(&r["lost"]),
        cell(&r["duplicated"]),
        cell(&r["stray_answers"]),
        cell(&r["unexpected"]),
        cell(&r["unsent"])
    );
    kinds(out, &v["kinds"]);
    let (rate, lag) = (&v["rate"], &v["lag"]);
    let _ = writeln!(
        out,
        "rate: {} answered/s of {} (measured {} s); schedule lag p50 {} us, p99 {} us, max {} \
         us, {} sent over 10 ms late",
        cell(&rate["achieved_per_s"]),
        cell(&rate["target_per_s"]),
        cell(&rate["measured_s"]),
        cell(&lag["p50_us"]),
        cell(&lag["p99_us"]),
        cell(&lag["max_us"]),
        cell(&lag["over_10ms"])
    );
}

/// A figure as text: strings without quotes, whole numbers without a fraction, so that
/// widths apply (a JSON value's own `Display` ignores them).
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn kinds(out: &mut String, k: &Value) {
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "kind", "sent", "as expected", "other", "p50 us", "p99 us", "max us"
    );
    for kind in KINDS {
        let s = &k[kind.name()];
        let l = &s["latency"];
        let other = s["unexpected"].as_u64().unwrap_or(0) + s["unanswered"].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>12} {:>10} {:>10} {:>10} {:>10}",
            kind.name(),
            cell(&s["sent"]),
            cell(&s["as_expected"]),
            other,
            cell(&l["p50_us"]),
            cell(&l["p99_us"]),
            cell(&l["max_us"])
        );
    }
}

fn resources(out: &mut String, r: &Value) {
    let rss = &r["rss_kib"];
    let _ = writeln!(
        out,
        "Manifold RSS: start {} KiB, max {}, end {}; slope {} KiB/min over the first half, {} \
         over the second",
        cell(&rss["start"]),
        cell(&rss["max"]),
        cell(&rss["end"]),
        cell(&rss["slope_kib_per_min_first_half"]),
        cell(&rss["slope_kib_per_min_second_half"])
    );
    let span = |v: &Value| {
        format!(
            "{} / {} / {}",
            cell(&v["start"]),
            cell(&v["max"]),
            cell(&v["end"])
        )
    };
    let ups = &r["upstream_processes"];
    let _ = writeln!(
        out,
        "start / max / end: open fds {}, threads {}; upstream processes {}..{} of {}; CPU {}% \
         of one",
        span(&r["fds"]),
        span(&r["threads"]),
        cell(&ups["min"]),
        cell(&ups["max"]),
        cell(&ups["expected"]),
        cell(&r["cpu"]["percent_of_one_cpu"])
    );
}

fn minutes(out: &mut String, m: &Value) {
    let Some(rows) = m.as_array().filter(|rows| rows.len() > 1) else {
        return;
    };
    let _ = writeln!(
        out,
        "{:>6} {:>10} {:>10} {:>10} {:>12} {:>10} {:>6} {:>8}",
        "minute", "answers", "p50 us", "p99 us", "lag p99 us", "RSS KiB", "fds", "threads"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:>6} {:>10} {:>10} {:>10} {:>12} {:>10} {:>6} {:>8}",
            cell(&row["minute"]),
            cell(&row["answers"]),
            cell(&row["p50_us"]),
            cell(&row["p99_us"]),
            cell(&row["lag_p99_us"]),
            cell(&row["rss_kib"]),
            cell(&row["fds"]),
            cell(&row["threads"])
        );
    }
}
