//! What telemetry costs a small `tools/call` over stdio: the `latency` call through Manifold
//! with three settings, in interleaved rounds of one run beside the fixture called directly:
//! telemetry off (`[telemetry] metrics = false`, no `OTEL_*` variables), metrics only (the
//! default config), and metrics with every request traced (`OTEL_TRACES_SAMPLER=always_on`,
//! spans exported over OTLP/HTTP protobuf to a receiver this tool runs on 127.0.0.1, whose
//! counts show that the spans really left Manifold). The `OTEL_*` variables are set on that
//! one Manifold process only (its upstream inherits them and ignores them); every `OTEL_*`
//! variable of the load generator's own environment is removed from all three.

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::otlp::{OtlpSink, Received};
use crate::procstat::Usage;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{self, Summary};
use crate::target::TargetSpec;

/// The goal: metrics and full tracing add at most this much to the p50 over telemetry off.
const TRACING_GOAL_US: f64 = 2.0;

/// The sides, in the order of the JSON document and the table.
const SIDES: [(&str, &str); 4] = [
    ("direct", "direct to the fixture"),
    ("off", "Manifold, telemetry off"),
    ("metrics", "Manifold, metrics (default)"),
    ("tracing", "Manifold, metrics + tracing"),
];

pub fn telemetry(setup: &Setup, plan: &Plan) -> Result<Value> {
    let sink = OtlpSink::start(setup.limits.lifetime)?;
    let ups = [Upstream::plain("alpha")];
    let (direct, through) = (RequestLine::echo("echo"), RequestLine::echo("alpha__echo"));
    let clean = inherited_otel();
    let mut traced = clean.clone();
    for (key, value) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
    ] {
        traced.retain(|(k, _)| k != key);
        traced.push((key.to_owned(), Some(value)));
    }
    let specs: [(TargetSpec, &RequestLine); 4] = [
        (setup.direct("telemetry-direct", &[]), &direct),
        (
            setup.through_tuned(
                "telemetry-off",
                &ups,
                "[telemetry]\nmetrics = false\n",
                clean.clone(),
            )?,
            &through,
        ),
        (
            setup.through_tuned("telemetry-metrics", &ups, "", clean)?,
            &through,
        ),
        (
            setup.through_tuned("telemetry-tracing", &ups, "", traced.clone())?,
            &through,
        ),
    ];
    let mut sessions = Vec::new();
    for (spec, line) in &specs {
        sessions.push((Session::start(spec, setup.limits)?, *line));
    }
    let calls = plan.latency_calls;
    let warmup = Plan::warmup(calls);
    for (session, line) in &mut sessions {
        let result = session.result(line)?;
        super::expect_text(session.label(), &result, ECHO_TEXT.len())?;
        session.timed_calls(line, warmup, plan.round_limit)?;
    }
    let usage = |s: &Session| s.pid().map_or(Ok(Usage::default()), Usage::of);
    let before: Vec<Usage> = sessions
        .iter()
        .map(|(s, _)| usage(s))
        .collect::<Result<_>>()?;
    let exported_before = sink.received();
    let mut rounds: Vec<Vec<Summary>> = vec![Vec::new(); sessions.len()];
    for round in 0..plan.rounds {
        // Every side once per round, the order rotating, so no side always follows another.
        for k in 0..sessions.len() {
            let i = (round + k) % sessions.len();
            let (session, line) = &mut sessions[i];
            let mut samples = session.timed_calls(line, calls, plan.round_limit)?;
            rounds[i].push(Summary::of(&mut samples));
        }
    }
    let exported_rounds = sink.received().since(exported_before);
    let mut v = Map::new();
    for (i, (name, _)) in SIDES.iter().enumerate() {
        let mut side = stats::medians(&rounds[i]);
        let (session, _) = &sessions[i];
        let done = rounds[i].iter().map(|r| r.count).sum();
        side["server_cpu_per_call"] = usage(session)?.per_call(before[i], done);
        side["answer_bytes"] = json!(session.last_answer_len);
        side["startup_ms"] = json!(super::latency::ms(session.startup));
        v.insert((*name).into(), side);
    }
    // Ending the traced Manifold exports what its batch processor still holds.
    let traced_calls = 1 + warmup + plan.rounds * calls;
    drop(sessions);
    let exported = settle(&sink);
    if exported.spans == 0 {
        bail!("the traced Manifold exported no spans to the OTLP receiver ({exported:?})");
    }
    v.insert(
        "off_vs_direct".into(),
        stats::compare(&rounds[0], &rounds[1]),
    );
    v.insert(
        "metrics_vs_off".into(),
        stats::compare(&rounds[1], &rounds[2]),
    );
    v.insert(
        "tracing_vs_off".into(),
        stats::compare(&rounds[1], &rounds[3]),
    );
    v.insert(
        "tracing_vs_metrics".into(),
        stats::compare(&rounds[2], &rounds[3]),
    );
    let spans_per_call = exported.spans as f64 / traced_calls as f64;
    v.insert(
        "otlp".into(),
        json!({
            "endpoint": sink.endpoint(),
            "env": traced
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<Map<String, Value>>(),
            "during_rounds": exported_rounds.to_json(),
            "total": exported.to_json(),
            "calls_traced": traced_calls,
            "spans_per_call": stats::round2(spans_per_call),
        }),
    );
    v.insert("goal_added_p50_us".into(), json!(TRACING_GOAL_US));
    v.insert("rounds".into(), json!(plan.rounds));
    v.insert("calls_per_round".into(), json!(calls));
    v.insert("warmup_calls".into(), json!(warmup));
    v.insert(
        "request_bytes".into(),
        json!({ "direct": direct.len_with(1), "through": through.len_with(1) }),
    );
    Ok(Value::Object(v))
}

/// Every `OTEL_*` variable of this process's environment, to be removed from the servers'.
fn inherited_otel() -> Vec<(String, Option<String>)> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("OTEL_"))
        .map(|k| (k, None))
        .collect()
}

/// The receiver's counts once they stop changing: the last export of a Manifold that was
/// just ended is answered before it exits, but give a straggler a moment (at most 2 s).
fn settle(sink: &OtlpSink) -> Received {
    let mut last = sink.received();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = sink.received();
        if now == last {
            break;
        }
        last = now;
    }
    last
}
