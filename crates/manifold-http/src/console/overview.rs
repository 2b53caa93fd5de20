//! The overview: every upstream with its state, era and protocol version, transport,
//! restarts, breaker, and the tool calls sent to it, read from the router and Manifold's own
//! metrics when the page is asked for.

use manifold_catalog::UpstreamState;
use manifold_core::router::Router;
use manifold_telemetry::metrics;
use manifold_telemetry::metrics::CallCounts;
use manifold_upstream::BreakerState;

use std::time::Instant;

use super::latency::{self, History, Latency};
use super::page::{escape, fill, OVERVIEW};

/// One upstream as the overview shows it.
struct Row {
    key: String,
    /// `up`, `starting` or `down`.
    state: &'static str,
    /// Why it is down.
    why: Option<String>,
    era: &'static str,
    version: String,
    transport: &'static str,
    restarts: u64,
    breaker: String,
    calls: CallCounts,
    latency: Latency,
}

/// The body of the overview page.
pub(super) fn body(router: &Router, history: &History) -> String {
    let rows = rows(router, history);
    let up = rows.iter().filter(|r| r.state == "up").count();
    let html: String = rows.iter().map(row_html).collect();
    fill(
        OVERVIEW,
        &[
            ("up", &up.to_string()),
            ("total", &rows.len().to_string()),
            ("rows", &html),
        ],
    )
}

/// Samples every upstream's call durations into `history` when a sample is due.
pub(super) fn sample(history: &History) {
    let counts = metrics()
        .upstream_calls()
        .into_iter()
        .map(|(key, calls)| (key, calls.durations))
        .collect();
    history.sample(Instant::now(), counts);
}

fn rows(router: &Router, history: &History) -> Vec<Row> {
    let catalog = router.hub().catalog();
    let handles = router.upstreams();
    let calls = metrics().upstream_calls();
    let now = Instant::now();
    let mut rows = Vec::new();
    for (i, def) in catalog.defs().iter().enumerate() {
        if def.retired {
            continue;
        }
        let (state, why) = match catalog.state(i) {
            UpstreamState::Up => ("up", None),
            UpstreamState::Starting => ("starting", None),
            UpstreamState::Down { reason } => ("down", Some(reason.to_string())),
        };
        let slice = catalog.slice(i);
        let handle = handles.get(i);
        rows.push(Row {
            key: def.key.clone(),
            state,
            why,
            era: slice.and_then(|s| s.era()).map_or("", |e| e.name()),
            version: slice
                .map(|s| s.protocol_version.clone())
                .unwrap_or_default(),
            transport: handle.map_or("", |h| h.transport()),
            restarts: metrics().upstream_restarts(&def.key),
            breaker: handle.map_or_else(String::new, |h| breaker_text(&h.breaker())),
            latency: {
                let durations = calls
                    .get(def.key.as_str())
                    .map_or(&[][..], |c| &c.durations);
                history.latency(&def.key, now, durations)
            },
            calls: calls.get(def.key.as_str()).cloned().unwrap_or_default(),
        });
    }
    rows
}

/// The breaker's state, and why while it is not closed.
fn breaker_text(b: &manifold_upstream::BreakerView) -> String {
    match (&b.state, &b.reason) {
        (BreakerState::Closed, _) | (_, None) => b.state.label().to_owned(),
        (_, Some(reason)) => format!("{}: {reason}", b.state.label()),
    }
}

fn row_html(r: &Row) -> String {
    let why = r.why.as_deref().map_or_else(String::new, |why| {
        format!(" <span class=\"why\">{}</span>", escape(why))
    });
    format!(
        "<tr data-upstream=\"{key}\"><td>{key}</td>\
         <td><span class=\"state state-{state}\">{state}</span>{why}</td>\
         <td>{era}</td><td>{version}</td><td>{transport}</td>\
         <td class=\"num\">{restarts}</td><td>{breaker}</td>\
         <td class=\"num\">{calls}</td><td class=\"num\">{errors}</td>\
         <td class=\"num p50\">{p50}</td><td class=\"num p95\">{p95}</td>\
         <td class=\"chart\">{chart}</td></tr>\n",
        key = escape(&r.key),
        state = r.state,
        era = r.era,
        version = escape(&r.version),
        transport = r.transport,
        restarts = r.restarts,
        breaker = escape(&r.breaker),
        calls = r.calls.calls,
        errors = r.calls.errors,
        p50 = r.latency.p50.map_or_else(String::new, latency::human),
        p95 = r.latency.p95.map_or_else(String::new, latency::human),
        chart = r.latency.chart,
    )
}
