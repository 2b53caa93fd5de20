//! The try page: pick a team and a tool (`GET /console/try?team=..&tool=..` shows that tool's
//! form, so no script is needed), fill the form made from its `inputSchema`, and call it
//! (`POST /console/try`) as a host of that team would. The outcome is kept for the login that
//! asked (at most [`KEPT`] outcomes in all) and shown by the page the POST redirects to.

use super::{
    access, check_post, csrf_of, html, logged_in_page, nav, page, refused_page, see_other,
    try_call, Access, Console, PostedForm,
};
use actix_web::{web, HttpRequest, HttpResponse};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use manifold_catalog::Kind;
use manifold_config::ANONYMOUS;
use manifold_core::policy::Caller;
use manifold_core::router::Router;
use manifold_telemetry::recent::TraceId;
use serde_json::Value;

use super::page::{escape, fill, TRY};
use super::try_call::Answer;
use super::try_form::{self, ARG, WHOLE};

/// Outcomes kept at most; past that the oldest is forgotten.
const KEPT: usize = 32;

/// What the page was asked for: its query, or the form posted.
#[derive(Default)]
pub(super) struct Asked {
    pub(super) team: String,
    pub(super) tool: String,
    /// The form's fields (`arg:<name>` or `arguments`), to fill the form again.
    pub(super) values: HashMap<String, String>,
}

impl Asked {
    pub(super) fn of(query: &HashMap<String, String>) -> Self {
        let get = |k: &str| {
            query
                .get(k)
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        Self {
            team: get("team"),
            tool: get("tool"),
            values: query
                .iter()
                .filter(|(k, _)| k.starts_with(ARG) || *k == WHOLE)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// One call made from the page and how it ended.
pub(super) struct Outcome {
    pub(super) asked: Asked,
    pub(super) trace: TraceId,
    pub(super) answer: Answer,
}

/// The outcomes of calls made from the page, each for the login that made it.
#[derive(Default)]
pub(super) struct Tries {
    kept: Mutex<VecDeque<(String, String, Arc<Outcome>)>>,
}

impl Tries {
    /// Keeps `outcome` for `owner` (a login's session, or "" for the bearer token): the id
    /// the page asks for it by.
    pub(super) fn keep(&self, owner: &str, outcome: Outcome) -> String {
        let id = outcome.trace.to_string();
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back((id.clone(), owner.to_owned(), Arc::new(outcome)));
        id
    }

    pub(super) fn find(&self, owner: &str, id: &str) -> Option<Arc<Outcome>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .find(|(i, o, _)| i == id && o == owner)
            .map(|(_, _, outcome)| Arc::clone(outcome))
    }
}

/// Who the page's call runs as: a configured team, or anonymous (no team). `None`: no such
/// team.
pub(super) fn caller_of(router: &Router, team: &str) -> Option<Arc<Caller>> {
    if team.is_empty() || team == ANONYMOUS {
        return Some(Caller::anonymous());
    }
    let team = Arc::clone(router.teams().get(team)?);
    Some(Caller::of_team(team, "console".into()))
}

/// The tool's definition (as hosts see it), if the catalog has it.
pub(super) fn definition(router: &Router, tool: &str) -> Option<Value> {
    let catalog = router.hub().catalog();
    let item = catalog.listing(Kind::Tools).get(tool)?;
    serde_json::from_str(&item.raw).ok()
}

/// The page: the picker, the chosen tool's form (with `problems` if the last one sent could
/// not be read) and the outcome of a call.
pub(super) fn body(
    router: &Router,
    asked: &Asked,
    csrf: Option<&str>,
    problems: &[String],
    outcome: Option<&Outcome>,
) -> String {
    let tool = (!asked.tool.is_empty()).then(|| definition(router, &asked.tool));
    let form = match tool {
        None => String::new(),
        Some(None) => format!(
            "<p class=\"notice\" id=\"no-tool\">No tool named {} is in the catalog.</p>",
            escape(&asked.tool)
        ),
        Some(Some(definition)) => call_form(asked, &definition, csrf, problems),
    };
    fill(
        TRY,
        &[
            ("teams", &team_options(router, &asked.team)),
            ("tools", &tool_options(router, asked)),
            ("form", &form),
            ("outcome", &outcome.map(outcome_html).unwrap_or_default()),
        ],
    )
}

fn team_options(router: &Router, chosen: &str) -> String {
    let teams = router.teams();
    let mut names: Vec<&str> = teams.all().map(|t| &*t.name).collect();
    names.sort_unstable();
    names.push(ANONYMOUS);
    names
        .iter()
        .map(|name| {
            let selected = if *name == chosen { " selected" } else { "" };
            let label = if *name == ANONYMOUS {
                "anonymous (no team: sees everything)".to_owned()
            } else {
                escape(name)
            };
            format!(
                "<option value=\"{}\"{selected}>{label}</option>",
                escape(name)
            )
        })
        .collect()
}

/// Every tool of the catalog; those the chosen team does not see are marked (calling one
/// shows the refusal its hosts get).
fn tool_options(router: &Router, asked: &Asked) -> String {
    let catalog = router.hub().catalog();
    let team = router.teams().get(&asked.team).cloned();
    let mut items: Vec<_> = catalog.listing(Kind::Tools).items().iter().collect();
    items.sort_unstable_by(|a, b| a.exposed.cmp(&b.exposed));
    items
        .iter()
        .map(|item| {
            let key = catalog
                .defs()
                .get(item.upstream)
                .map_or("", |d| d.key.as_str());
            let hidden = team
                .as_ref()
                .is_some_and(|t| !t.sees(Kind::Tools, key, &item.exposed));
            let mark = if hidden {
                " (not in the team's view)"
            } else {
                ""
            };
            let selected = if item.exposed == asked.tool {
                " selected"
            } else {
                ""
            };
            format!(
                "<option value=\"{name}\"{selected}>{name}{mark}</option>",
                name = escape(&item.exposed)
            )
        })
        .collect()
}

fn call_form(asked: &Asked, definition: &Value, csrf: Option<&str>, problems: &[String]) -> String {
    let fields = try_form::fields(definition.get("inputSchema"));
    let inputs = try_form::inputs(fields.as_deref(), &asked.values);
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let csrf = csrf.map_or_else(String::new, |c| {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(c)
        )
    });
    let problems = match problems.is_empty() {
        true => String::new(),
        false => {
            let items: String = problems
                .iter()
                .map(|p| format!("<li>{}</li>", escape(p)))
                .collect();
            format!("<div class=\"notice\" id=\"form-problems\"><p>Nothing was sent:</p><ul>{items}</ul></div>")
        }
    };
    format!(
        "<h3>{tool}</h3><p class=\"why\">{description}</p>{problems}\
         <form id=\"try-form\" class=\"try\" method=\"post\" action=\"/console/try\">{csrf}\
         <input type=\"hidden\" name=\"team\" value=\"{team}\">\
         <input type=\"hidden\" name=\"tool\" value=\"{tool}\">\n{inputs}\
         <button type=\"submit\" id=\"call\">Call as {team_label}</button></form>",
        tool = escape(&asked.tool),
        description = escape(description),
        team = escape(&asked.team),
        team_label = escape(if asked.team.is_empty() {
            ANONYMOUS
        } else {
            &asked.team
        }),
    )
}

fn outcome_html(o: &Outcome) -> String {
    let (kind, shown) = match &o.answer {
        Answer::None(why) => ("none", format!("<p>No answer: {}</p>", escape(why))),
        Answer::Response(response) => match (response.get("result"), response.get("error")) {
            (_, Some(error)) => ("error", error_html(error)),
            (Some(result), None) => result_html(result),
            (None, None) => (
                "none",
                "<p>The answer has neither a result nor an error.</p>".to_owned(),
            ),
        },
    };
    let exported = if manifold_telemetry::trace::active() {
        "exported with the call's spans"
    } else {
        "traces are not exported: no OTLP endpoint is configured"
    };
    format!(
        "<section id=\"outcome\" data-outcome=\"{kind}\"><h3>Outcome: {tool} as {team}</h3>\
         <p>Trace id <code id=\"trace-id\">{trace}</code> <span class=\"why\">({exported})</span></p>\
         {shown}</section>",
        tool = escape(&o.asked.tool),
        team = escape(if o.asked.team.is_empty() { ANONYMOUS } else { &o.asked.team }),
        trace = o.trace,
    )
}

fn error_html(error: &Value) -> String {
    let code = error.get("code").map_or_else(String::new, Value::to_string);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let data = error
        .get("data")
        .map(|d| format!("<pre class=\"json\">{}</pre>", escape(&pretty(d))))
        .unwrap_or_default();
    format!(
        "<p class=\"notice\" id=\"call-error\">Error <span id=\"error-code\">{}</span>: {}</p>{data}",
        escape(&code),
        escape(message)
    )
}

fn result_html(result: &Value) -> (&'static str, String) {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let content: String = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(content_html).collect())
        .unwrap_or_default();
    let structured = result
        .get("structuredContent")
        .map(|s| {
            format!(
                "<h4>structuredContent</h4><pre class=\"json\" id=\"structured\">{}</pre>",
                escape(&pretty(s))
            )
        })
        .unwrap_or_default();
    let html = format!(
        "<p>isError: <span id=\"is-error\">{is_error}</span></p><h4>content</h4>\
         <div id=\"content\">{content}</div>{structured}\
         <details><summary>The whole result</summary><pre class=\"json\">{}</pre></details>",
        escape(&pretty(result))
    );
    (if is_error { "tool_error" } else { "ok" }, html)
}

fn content_html(item: &Value) -> String {
    match (item.get("type").and_then(Value::as_str), item.get("text")) {
        (Some("text"), Some(Value::String(text))) => {
            format!("<pre class=\"content-text\">{}</pre>", escape(text))
        }
        _ => format!("<pre class=\"json\">{}</pre>", escape(&pretty(item))),
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

pub(super) async fn try_page(
    req: HttpRequest,
    console: web::Data<Console>,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let owner = match access(&req, &console) {
        Ok(access) => owner_of(&access).to_owned(),
        Err(refusal) => return refused_page(refusal),
    };
    // The outcome of a call posted from the page (Post/Redirect/Get), shown with its form.
    let outcome = query
        .get("outcome")
        .and_then(|id| console.tries.find(&owner, id));
    let asked = Asked::of(&query);
    let asked = outcome.as_ref().map_or(&asked, |o| &o.asked);
    logged_in_page(&req, &console, "Try a tool", 0, |csrf| {
        body(&console.router, asked, csrf, &[], outcome.as_deref())
    })
}

/// `POST /console/try`: reads the form into the call's arguments (or shows why it cannot,
/// sending nothing), calls the tool as the chosen team, and redirects to the page showing how
/// the call ended.
pub(super) async fn try_call(
    req: HttpRequest,
    console: web::Data<Console>,
    form: PostedForm,
) -> HttpResponse {
    let (access, form) = match check_post(&req, &console, form) {
        Ok(posted) => posted,
        Err(refusal) => return refusal,
    };
    let asked = Asked::of(&form);
    let Some(caller) = caller_of(&console.router, &asked.team) else {
        return try_refused(&console, &access, &asked, "no such team".to_owned());
    };
    let Some(definition) = definition(&console.router, &asked.tool) else {
        return try_refused(&console, &access, &asked, "no such tool".to_owned());
    };
    let fields = try_form::fields(definition.get("inputSchema"));
    let arguments = match try_form::arguments(fields.as_deref(), &asked.values) {
        Ok(arguments) => arguments,
        Err(problems) => return try_page_with(&console, &access, &asked, &problems),
    };
    let Some(trace) = try_call::new_trace_id() else {
        return try_refused(
            &console,
            &access,
            &asked,
            "the system's random source failed".to_owned(),
        );
    };
    let answer = try_call::call(&console.router, caller, &asked.tool, arguments, trace).await;
    let outcome = Outcome {
        asked,
        trace,
        answer,
    };
    let id = console.tries.keep(owner_of(&access), outcome);
    see_other(&format!("/console/try?outcome={id}"))
}

fn try_refused(console: &Console, access: &Access, asked: &Asked, why: String) -> HttpResponse {
    try_page_with(console, access, asked, &[why])
}

/// The try page for a form that could not be sent, with why (nothing was sent: 400).
fn try_page_with(
    console: &Console,
    access: &Access,
    asked: &Asked,
    problems: &[String],
) -> HttpResponse {
    let csrf = csrf_of(access);
    let body = body(&console.router, asked, csrf, problems, None);
    html(
        HttpResponse::BadRequest(),
        page("Try a tool", &nav(csrf), &body, 0),
    )
}

/// Whose outcomes a request may see: its login's, or the bearer token's.
fn owner_of(access: &Access) -> &str {
    match access {
        Access::Bearer => "",
        Access::Session { session, .. } => session,
    }
}
