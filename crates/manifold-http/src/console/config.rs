//! The configuration page: the file in force with every secret redacted, the last reload's
//! report or refusal (whatever asked for it: a signal, a watched file, `POST /reload`, this
//! page), and a button that reloads.

use std::time::SystemTime;

use actix_web::{web, HttpRequest, HttpResponse};

use super::operations::ReloadRecord;
use super::page::{escape, fill, see_other, CONFIG};
use super::{check_post, logged_in_page, Console, PostedForm};

/// `GET /console/config`.
pub(super) async fn config_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    logged_in_page(&req, &console, "Configuration", 0, |csrf| {
        body(&console, csrf)
    })
}

fn body(console: &Console, csrf: Option<&str>) -> String {
    let Some(operations) = &console.operations else {
        return "<p class=\"notice\">The configuration is not shown here.</p>".to_owned();
    };
    let running = operations.running();
    let text = match &running.redacted {
        Ok(text) => text.clone(),
        Err(why) => format!("(not shown: {why})"),
    };
    let csrf = csrf.map_or_else(String::new, |c| {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(c)
        )
    });
    let last = operations.last_reload().map_or_else(
        || "<p>No reload since start.</p>".to_owned(),
        |r| record_html(&r),
    );
    fill(
        CONFIG,
        &[
            ("path", &escape(&running.path.display().to_string())),
            ("csrf", &csrf),
            ("last", &last),
            ("text", &escape(&text)),
        ],
    )
}

/// A reload's outcome: when and why it ran, and what it changed or why it was refused.
fn record_html(record: &ReloadRecord) -> String {
    let ago = SystemTime::now()
        .duration_since(record.at)
        .map_or(0, |d| d.as_secs());
    let when = format!("asked by {} {ago} s ago", escape(&record.trigger));
    match &record.outcome {
        Ok(report) => format!(
            "<p class=\"done\" id=\"reload-outcome\" data-outcome=\"reloaded\">Reloaded ({when}).</p>\n{}",
            report_html(report)
        ),
        Err(why) => format!(
            "<p class=\"notice\" id=\"reload-outcome\" data-outcome=\"refused\">Refused ({when}): \
             the running configuration stays.</p>\n<pre id=\"reload-refusal\">{}</pre>",
            escape(why)
        ),
    }
}

/// The reload's report (JSON text) as a list: the upstreams added, removed, restarted and
/// updated, the parts of the configuration that changed, and what waits for a restart.
fn report_html(report: &str) -> String {
    let Ok(serde_json::Value::Object(report)) = serde_json::from_str(report) else {
        return format!("<pre id=\"reload-report\">{}</pre>", escape(report));
    };
    let names = |value: Option<&serde_json::Value>| -> String {
        let list: Vec<&str> = value
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        if list.is_empty() {
            "none".to_owned()
        } else {
            escape(&list.join(", "))
        }
    };
    let upstreams = report.get("upstreams");
    let mut rows = String::new();
    for what in ["added", "removed", "restarted", "updated"] {
        rows.push_str(&format!(
            "<tr data-report=\"{what}\"><th>Upstreams {what}</th><td>{}</td></tr>\n",
            names(upstreams.and_then(|u| u.get(what)))
        ));
    }
    let changed: Vec<&str> = report
        .iter()
        .filter(|(_, v)| v.as_bool() == Some(true))
        .map(|(k, _)| k.as_str())
        .filter(|k| *k != "reloaded")
        .collect();
    let changed = if changed.is_empty() {
        "nothing else".to_owned()
    } else {
        escape(&changed.join(", "))
    };
    rows.push_str(&format!(
        "<tr data-report=\"changed\"><th>Also changed</th><td>{changed}</td></tr>\n\
         <tr data-report=\"at_restart\"><th>Takes effect at restart</th><td>{}</td></tr>\n",
        names(report.get("at_restart"))
    ));
    format!("<table class=\"detail\" id=\"reload-report\">\n{rows}</table>")
}

/// `POST /console/config/reload`: loads the file again, then shows the page with the outcome
/// (303).
pub(super) async fn reload(
    req: HttpRequest,
    console: web::Data<Console>,
    form: PostedForm,
) -> HttpResponse {
    if let Err(refusal) = check_post(&req, &console, form) {
        return refusal;
    }
    if let Some(reload) = &console.reload {
        // The outcome is recorded by the reload loop whatever it is; the page shows it.
        let _ = reload().await;
    }
    see_other("/console/config")
}
