//! Live calls: the last host requests (`manifold_telemetry::recent`), rendered on the page
//! and served as JSON for the page's script, which adds new ones without reloading. Never a
//! request's arguments or its answer: the ring does not hold them.

use super::{access, forbidden, logged_in_page, no_console, page, Console, Refusal};
use actix_web::{web, HttpRequest, HttpResponse};
use std::collections::HashMap;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use manifold_telemetry::recent::{recent_calls, CallRecord, RECENT_CALLS};
use serde::Serialize;

use super::page::{escape, fill, CALLS};

/// The body of the live calls page: the last calls, newest first.
pub(super) fn body() -> String {
    let calls = recent_calls().since(0, RECENT_CALLS);
    let last = calls.first().map_or(0, |c| c.seq);
    let rows: String = calls.iter().map(|c| row_html(&Shown::of(c))).collect();
    fill(
        CALLS,
        &[
            ("last", &last.to_string()),
            ("limit", &RECENT_CALLS.to_string()),
            ("rows", &rows),
        ],
    )
}

/// The calls after `after` (a `seq`), newest first, as the page's script reads them.
pub(super) fn json(after: u64) -> String {
    let calls: Vec<Shown> = recent_calls()
        .since(after, RECENT_CALLS)
        .iter()
        .map(Shown::of)
        .collect();
    serde_json::to_string(&Page { calls }).unwrap_or_else(|_| "{\"calls\":[]}".to_owned())
}

#[derive(Serialize)]
struct Page {
    calls: Vec<Shown>,
}

/// One call as the page shows it (and the JSON gives it: the script fills the same cells).
#[derive(Serialize)]
struct Shown {
    seq: u64,
    /// `HH:MM:SS.mmm`, UTC.
    time: String,
    team: String,
    /// The tool or prompt name, else the method.
    name: String,
    method: &'static str,
    upstream: String,
    transport: &'static str,
    outcome: &'static str,
    /// Milliseconds, with one decimal.
    latency: String,
    trace: String,
}

impl Shown {
    fn of(c: &CallRecord) -> Self {
        Self {
            seq: c.seq,
            time: clock(c.at),
            team: c.team.to_string(),
            name: c.subject.as_deref().unwrap_or(c.method).to_owned(),
            method: c.method,
            upstream: c.upstream.as_deref().unwrap_or("").to_owned(),
            transport: c.transport,
            outcome: c.outcome.label(),
            latency: format!("{:.1}", c.latency.as_secs_f64() * 1000.0),
            trace: c.trace.map(|t| t.to_string()).unwrap_or_default(),
        }
    }
}

/// The time of day of `at`, UTC, to the millisecond.
fn clock(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_millis()
    )
}

fn row_html(c: &Shown) -> String {
    format!(
        "<tr data-seq=\"{seq}\" data-tool=\"{name}\"><td>{time}</td><td>{team}</td>\
         <td>{name}</td><td>{upstream}</td><td>{transport}</td>\
         <td><span class=\"outcome outcome-{outcome}\">{outcome}</span></td>\
         <td class=\"num\">{latency}</td><td class=\"trace\">{trace}</td></tr>\n",
        seq = c.seq,
        name = escape(&c.name),
        time = c.time,
        team = escape(&c.team),
        upstream = escape(&c.upstream),
        transport = c.transport,
        outcome = c.outcome,
        latency = c.latency,
        trace = c.trace,
    )
}

pub(super) async fn calls_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    logged_in_page(&req, &console, "Live calls", 0, |_| body())
}

/// `GET /console/calls.json?after=<seq>`: the calls after the last one the page shows.
pub(super) async fn calls_json(
    req: HttpRequest,
    console: web::Data<Console>,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(refusal) = access(&req, &console) {
        return match refusal {
            Refusal::NoToken => no_console(),
            Refusal::LoggedOut => forbidden("log in to the console first (/console/login)"),
        };
    }
    let after = query.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json(after))
}

pub(super) async fn calls_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(page::CALLS_SCRIPT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_utc_to_the_millisecond() {
        let at = UNIX_EPOCH + Duration::from_millis(86_400_000 * 3 + 3_723_045);
        assert_eq!(clock(at), "01:02:03.045");
    }
}
