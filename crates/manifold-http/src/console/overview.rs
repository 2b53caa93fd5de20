//! The overview: every upstream with its state, era and protocol version, transport,
//! restarts, breaker, and the tool calls sent to it, read from the router and Manifold's own
//! metrics when the page is asked for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use manifold_catalog::UpstreamState;
use manifold_core::replicas::{replica_id, ReplicaCard};
use manifold_core::router::Router;
use manifold_telemetry::metrics;
use manifold_telemetry::metrics::CallCounts;
use manifold_upstream::BreakerState;

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
pub(super) fn body(
    router: &Router,
    history: &History,
    replicas: Option<Result<Vec<ReplicaCard>, String>>,
) -> String {
    let rows = rows(router, history);
    let up = rows.iter().filter(|r| r.state == "up").count();
    let html: String = rows.iter().map(row_html).collect();
    fill(
        OVERVIEW,
        &[
            ("up", &up.to_string()),
            ("total", &rows.len().to_string()),
            ("rows", &html),
            ("replica", &escape(replica_id())),
            ("replicas", &replicas_html(replicas)),
        ],
    )
}

/// The replicas sharing a Redis with this one (`None`: none is shared), this one marked.
fn replicas_html(replicas: Option<Result<Vec<ReplicaCard>, String>>) -> String {
    let replicas = match replicas {
        None => return String::new(),
        Some(Err(why)) => {
            return format!(
                "<p class=\"notice\" id=\"replicas-unknown\">The other replicas cannot be \
                 listed: {}</p>",
                escape(&why)
            )
        }
        Some(Ok(replicas)) => replicas,
    };
    let rows: String = replicas
        .iter()
        .map(|r| {
            let this = if r.id == replica_id() {
                " (this one)"
            } else {
                ""
            };
            let admin = r.admin.as_deref().map_or_else(String::new, |a| {
                format!("<a href=\"http://{a}/console/\">{a}</a>", a = escape(a))
            });
            format!(
                "<tr data-replica=\"{id}\"><td>{id}{this}</td><td>{admin}</td><td>{version}</td>\
                 <td class=\"num\">{up} of {total}</td><td>{started}</td></tr>\n",
                id = escape(&r.id),
                version = escape(&r.version),
                up = r.upstreams_up,
                total = r.upstreams,
                started = ago(r.started),
            )
        })
        .collect();
    format!(
        "<h2>Replicas</h2>\n<p>Every replica announcing itself through the shared Redis (each \
         every 10 s, forgotten 30 s after its last).</p>\n<table id=\"replicas\">\n<thead><tr>\
         <th>Replica</th><th>Admin address</th><th>Version</th><th>Upstreams up</th>\
         <th>Started</th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n"
    )
}

/// Samples every upstream's call durations into `history` when a sample is due.
pub(super) fn sample(history: &History) {
    sample_of(history, &metrics().upstream_calls(), Instant::now());
}

fn sample_of(history: &History, calls: &BTreeMap<Arc<str>, CallCounts>, now: Instant) {
    let counts = calls
        .iter()
        .map(|(key, c)| (Arc::clone(key), c.durations.clone()))
        .collect();
    history.sample(now, counts);
}

fn rows(router: &Router, history: &History) -> Vec<Row> {
    let catalog = router.hub().catalog();
    let handles = router.upstreams();
    let calls = metrics().upstream_calls();
    let now = Instant::now();
    // The page's own read is a sample too, when one is due.
    sample_of(history, &calls, now);
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

/// How long ago `unix_seconds` was, roughly: `40 s ago`, `12 min ago`, `5 h ago`, `3 d ago`.
fn ago(unix_seconds: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secs = now.saturating_sub(unix_seconds);
    match secs {
        0..=119 => format!("{secs} s ago"),
        120..=7199 => format!("{} min ago", secs / 60),
        7200..=172_799 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86_400),
    }
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
