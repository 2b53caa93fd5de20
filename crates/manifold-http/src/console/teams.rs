//! Teams and limits: each configured team's view size, live sessions, tool calls and the
//! refusals among them, and the use of every quota window it counts against; the live
//! sessions by transport and protocol version. Read from the router, the limit layer and
//! Manifold's own metrics when the page is asked for.

use super::{access, logged_in_page, refused_page, Console};
use actix_web::{web, HttpRequest, HttpResponse};

use std::collections::BTreeMap;
use std::time::Duration;

use manifold_catalog::Kind;
use manifold_core::router::Router;
use manifold_policy::WindowUse;
use manifold_protocol::version::Era;
use manifold_telemetry::metrics;
use manifold_telemetry::metrics::TeamCalls;

use super::page::{escape, fill, TEAMS};

/// What callers without a team are counted as, in metrics and here.
const ANONYMOUS: &str = "anonymous";

/// The body of the teams page.
pub(super) async fn body(router: &Router) -> String {
    let sessions = sessions_by_team(router);
    let calls = metrics().team_calls();
    let catalog = router.hub().catalog();
    let teams = router.teams();
    let mut names: Vec<String> = Vec::new();
    let mut rows = String::new();
    for team in teams.all() {
        let tools = team.view(&catalog).listing(Kind::Tools).items().len();
        rows.push_str(&team_row(&team.name, Some(tools), &sessions, &calls));
        names.push(team.name.to_string());
    }
    // Callers without a team: a host of an unauthenticated listener, or stdio.
    if sessions.contains_key(ANONYMOUS) || calls.contains_key(ANONYMOUS) {
        rows.push_str(&team_row(ANONYMOUS, None, &sessions, &calls));
    }
    fill(
        TEAMS,
        &[
            ("teams", &rows),
            ("quotas", &quotas(router, &names).await),
            ("sessions", &transports(router)),
        ],
    )
}

fn sessions_by_team(router: &Router) -> BTreeMap<String, usize> {
    let mut by_team: BTreeMap<String, usize> = BTreeMap::new();
    for session in router.sessions().all() {
        *by_team.entry(session.principal().to_string()).or_default() += 1;
    }
    by_team
}

fn team_row(
    name: &str,
    tools: Option<usize>,
    sessions: &BTreeMap<String, usize>,
    calls: &BTreeMap<std::sync::Arc<str>, TeamCalls>,
) -> String {
    let c = calls.get(name).copied().unwrap_or_default();
    // A caller without a team sees every tool: its view is the whole catalog.
    let tools = tools.map_or_else(|| "all".to_owned(), |n| n.to_string());
    format!(
        "<tr data-team=\"{name}\"><td>{name}</td><td class=\"num tools\">{tools}</td>\
         <td class=\"num sessions\">{sessions}</td><td class=\"num calls\">{calls}</td>\
         <td class=\"num rate-limited\">{rate}</td><td class=\"num quota-exceeded\">{quota}</td>\
         <td class=\"num denied\">{denied}</td></tr>\n",
        name = escape(name),
        sessions = sessions.get(name).copied().unwrap_or(0),
        calls = c.calls,
        rate = c.rate_limited,
        quota = c.quota_exceeded,
        denied = c.denied,
    )
}

/// Every quota window's use: each team's limits, then the per-tool limits of every caller.
async fn quotas(router: &Router, teams: &[String]) -> String {
    let Some(limits) = router.limits() else {
        return "<p id=\"no-limits\">No rate limit or quota is configured.</p>".to_owned();
    };
    let mut rows = String::new();
    let scopes = teams
        .iter()
        .map(|t| (t.as_str(), Some(t.as_str())))
        .chain([("every caller", None)]);
    for (label, team) in scopes {
        match limits.usage(team).await {
            Ok(windows) => rows.extend(windows.iter().map(|w| quota_row(label, w))),
            Err(why) => rows.push_str(&format!(
                "<tr class=\"unreadable\"><td>{}</td><td colspan=\"5\">not readable now: {}</td></tr>\n",
                escape(label),
                escape(&why)
            )),
        }
    }
    if rows.is_empty() {
        return "<p id=\"no-quotas\">No quota is configured (rates have no window to show).</p>"
            .to_owned();
    }
    format!(
        "<table id=\"quotas\">\n<thead><tr><th>Counted for</th><th>Limit</th><th>Window</th>\
         <th>Used</th><th>Of</th><th>Resets in</th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>"
    )
}

fn quota_row(scope: &str, w: &WindowUse) -> String {
    format!(
        "<tr data-limit=\"{limit}\" data-window=\"{secs}\"><td>{scope}</td><td>{limit}</td>\
         <td>{window}</td><td class=\"num used\">{used}</td><td class=\"num count\">{count}</td>\
         <td>{resets}</td></tr>\n",
        limit = escape(&w.limit),
        secs = w.window.as_secs(),
        scope = escape(scope),
        window = duration_text(w.window),
        used = w.used,
        count = w.count,
        resets = duration_text(w.resets_in),
    )
}

/// The live sessions by transport, protocol era and version.
fn transports(router: &Router) -> String {
    let mut counts: BTreeMap<(&'static str, &'static str, &'static str), usize> = BTreeMap::new();
    for session in router.sessions().all() {
        let transport = if session.is_stateless() {
            "stateless"
        } else {
            session.transport().name()
        };
        let version = session.version();
        let era = version
            .and_then(manifold_protocol::version::era_of)
            .or(session.is_stateless().then_some(Era::Stateless))
            .map_or("", Era::name);
        let key = (transport, era, version.unwrap_or("not initialized"));
        *counts.entry(key).or_default() += 1;
    }
    if counts.is_empty() {
        return "<p id=\"no-sessions\">No host session is open.</p>".to_owned();
    }
    let rows: String = counts
        .iter()
        .map(|((transport, era, version), n)| {
            format!(
                "<tr data-transport=\"{transport}\" data-era=\"{era}\" data-version=\"{version}\">\
                 <td>{transport}</td><td>{era}</td><td>{version}</td><td class=\"num\">{n}</td></tr>\n",
                version = escape(version),
            )
        })
        .collect();
    format!(
        "<table id=\"sessions\">\n<thead><tr><th>Transport</th><th>Era</th>\
         <th>Protocol version</th><th>Sessions</th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>"
    )
}

/// A duration as people read it: the largest whole unit, and the next one below it.
fn duration_text(d: Duration) -> String {
    let secs = d.as_secs();
    let (days, hours, minutes) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60);
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{minutes} min {} s", secs % 60),
        3600..=86_399 => format!("{hours} h {minutes} min"),
        _ => format!("{days} d {hours} h"),
    }
}

pub(super) async fn teams_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    if let Err(refusal) = access(&req, &console) {
        return refused_page(refusal);
    }
    let body = body(&console.router).await;
    logged_in_page(&req, &console, "Teams", 0, |_| body)
}

#[cfg(test)]
mod tests {
    use super::duration_text;
    use std::time::Duration;

    #[test]
    fn durations_read_in_their_largest_units() {
        let text = |s| duration_text(Duration::from_secs(s));
        assert_eq!(text(42), "42 s");
        assert_eq!(text(3600), "1 h 0 min");
        assert_eq!(text(86_400 + 7200), "1 d 2 h");
        assert_eq!(text(125), "2 min 5 s");
    }
}
