//! The catalog: every exposed tool, prompt, resource, resource template and skill with its
//! upstream, original name and marks (as `manifold check` prints them), its cache rule and
//! limits; one item's definition, and for one its pin holds, the diff from the pin with the
//! action that re-pins it (the lock file written as `manifold pin` writes it, then a reload).

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use manifold_catalog::marks::{entries, Entry};
use manifold_catalog::{Catalog, Kind, Pin};
use manifold_config::{Config, LimitConfig};

use super::page::{escape, fill, html, see_other, url_encode, CATALOG, CATALOG_ITEM};
use super::{check_post, logged_in_page, Console, PostedForm};

/// A kind's heading, its `data-*` row attribute, and its query-string name.
fn kind_names(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Tools => ("Tools", "tool"),
        Kind::Prompts => ("Prompts", "prompt"),
        Kind::Resources => ("Resources", "resource"),
        Kind::ResourceTemplates => ("Resource templates", "template"),
        Kind::Skills => ("Skills", "skill"),
    }
}

fn kind_of(name: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| kind_names(*k).1 == name)
}

/// `GET /console/catalog`.
pub(super) async fn catalog_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    logged_in_page(&req, &console, "Catalog", 0, |_| body(&console))
}

fn body(console: &Console) -> String {
    let catalog = console.router.hub().catalog();
    let config = console.operations.as_ref().map(|o| o.running());
    let config = config.as_ref().map(|r| &r.config);
    let sections: String = Kind::ALL
        .into_iter()
        .map(|kind| section(&catalog, config, kind))
        .collect();
    let held = catalog.drift().iter().filter(|d| d.held).count();
    fill(
        CATALOG,
        &[
            ("held", &held.to_string()),
            ("collisions", &catalog.collisions().len().to_string()),
            ("sections", &sections),
        ],
    )
}

fn section(catalog: &Catalog, config: Option<&Config>, kind: Kind) -> String {
    let (heading, attribute) = kind_names(kind);
    let entries = entries(catalog, kind);
    let rows: String = entries
        .iter()
        .map(|e| row(catalog, config, attribute, e))
        .collect();
    format!(
        "<h3>{heading} ({count})</h3>\n<table class=\"catalog\" id=\"catalog-{attribute}s\">\
         <thead><tr><th>Exposed</th><th>Upstream</th><th>Original</th><th>Marks</th>\
         <th>Cache</th><th>Limits</th></tr></thead>\n<tbody>\n{rows}</tbody></table>\n",
        count = entries.len(),
    )
}

fn row(catalog: &Catalog, config: Option<&Config>, attribute: &str, e: &Entry<'_>) -> String {
    let upstream = upstream_text(catalog, e);
    let marks = marks_html(e);
    let labels: Vec<&str> = e.marks.iter().map(|m| m.label()).collect();
    let link = format!(
        "<a href=\"/console/catalog/item?kind={attribute}&amp;name={}\">{}</a>",
        url_encode(e.exposed),
        escape(e.exposed)
    );
    let cache = cache_text(catalog, config, e);
    let limits = match (e.kind, config) {
        (Kind::Tools, Some(config)) => limits_text(config, upstream_key(catalog, e), e.exposed),
        _ => String::new(),
    };
    format!(
        "<tr data-{attribute}=\"{exposed}\" data-marks=\"{labels}\"><td>{link}</td>\
         <td>{upstream}</td><td>{original}</td><td>{marks}</td><td>{cache}</td>\
         <td>{limits}</td></tr>\n",
        exposed = escape(e.exposed),
        labels = labels.join(" "),
        upstream = escape(&upstream),
        original = escape(e.original),
        cache = escape(&cache),
        limits = escape(&limits),
    )
}

fn upstream_key<'c>(catalog: &'c Catalog, e: &Entry<'_>) -> &'c str {
    e.upstream
        .and_then(|i| catalog.defs().get(i))
        .map_or("", |d| d.key.as_str())
}

/// The owning upstream's key, or for a collision every claimant with its own name.
fn upstream_text(catalog: &Catalog, e: &Entry<'_>) -> String {
    match e.collision {
        Some(c) => c
            .owners
            .iter()
            .map(|(key, name)| format!("{key} ({name})"))
            .collect::<Vec<_>>()
            .join(" and "),
        None => upstream_key(catalog, e).to_owned(),
    }
}

fn marks_html(e: &Entry<'_>) -> String {
    e.marks
        .iter()
        .map(|m| format!("<span class=\"mark mark-{0}\">{0}</span> ", m.label()))
        .collect()
}

/// The cache rule, as `check` words it.
fn cache_text(catalog: &Catalog, config: Option<&Config>, e: &Entry<'_>) -> String {
    let Some(item) = e.item else {
        return String::new();
    };
    let key = upstream_key(catalog, e);
    let upstream = config.and_then(|c| c.upstreams.iter().find(|u| u.key == key));
    manifold_core::cache::rule_note(catalog, upstream, e.kind, item).unwrap_or_default()
}

/// The limits that count calls of the tool `exposed` of upstream `upstream`: `[limits.tools]`
/// for every caller together, and each team's own for the tool and for its upstream.
fn limits_text(config: &Config, upstream: &str, exposed: &str) -> String {
    let mut parts = Vec::new();
    if let Some(limit) = config.limits.tools.get(exposed) {
        parts.push(format!("all callers: {}", limit_text(limit)));
    }
    for team in &config.teams {
        if let Some(limit) = team.tool_limits.get(exposed) {
            parts.push(format!("team {}: {}", team.name, limit_text(limit)));
        }
        if let Some(limit) = team.upstream_limits.get(upstream) {
            let text = limit_text(limit);
            parts.push(format!("team {} (upstream {upstream}): {text}", team.name));
        }
    }
    parts.join("; ")
}

fn limit_text(limit: &LimitConfig) -> String {
    let rate = limit
        .rate
        .map(|r| format!("{} per {:?} (burst {})", r.count, r.period, r.burst));
    let quotas = limit
        .quotas
        .iter()
        .map(|q| format!("{} per {:?}", q.count, q.window));
    rate.into_iter()
        .chain(quotas)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `GET /console/catalog/item?kind=tool&name=...` (`repinned=1` after a re-pin).
pub(super) async fn item_page(
    req: HttpRequest,
    console: web::Data<Console>,
    query: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let kind = query.get("kind").and_then(|k| kind_of(k));
    let name = query.get("name").cloned().unwrap_or_default();
    let repinned = query.get("repinned").is_some();
    logged_in_page(&req, &console, &name, 0, |csrf| match kind {
        Some(kind) => item_body(&console, kind, &name, csrf, repinned),
        None => "<p class=\"notice\">No such kind of item.</p>".to_owned(),
    })
}

fn item_body(
    console: &Console,
    kind: Kind,
    name: &str,
    csrf: Option<&str>,
    repinned: bool,
) -> String {
    let catalog = console.router.hub().catalog();
    let config = console.operations.as_ref().map(|o| o.running());
    let config = config.as_ref().map(|r| &r.config);
    let all = entries(&catalog, kind);
    let Some(e) = all.iter().find(|e| e.exposed == name) else {
        return format!(
            "<p class=\"notice\" id=\"missing\">{} is not in the catalog.</p>",
            escape(name)
        );
    };
    let (_, attribute) = kind_names(kind);
    let notice = if repinned {
        "<p class=\"done\" id=\"repinned\">Re-pinned: the lock file was written and the \
         configuration reloaded.</p>"
    } else {
        ""
    };
    let definition = e
        .item
        .map(|i| i.raw.to_string())
        .or_else(|| e.drift.map(|d| d.current.get().to_owned()))
        .and_then(|raw| manifold_catalog::pins::pretty(&raw).ok())
        .unwrap_or_default();
    let limits = match (kind, config) {
        (Kind::Tools, Some(config)) => limits_text(config, upstream_key(&catalog, e), e.exposed),
        _ => String::new(),
    };
    fill(
        CATALOG_ITEM,
        &[
            ("kind", attribute),
            ("name", &escape(e.exposed)),
            ("notice", notice),
            ("upstream", &escape(&upstream_text(&catalog, e))),
            ("original", &escape(e.original)),
            ("marks", &marks_html(e)),
            ("cache", &escape(&cache_text(&catalog, config, e))),
            ("limits", &escape(&limits)),
            ("drift", &drift_html(&catalog, e, attribute, csrf)),
            ("definition", &escape(&definition)),
        ],
    )
}

/// The drift from the pin: why, the line diff, and (for a held one) the re-pin form.
fn drift_html(catalog: &Catalog, e: &Entry<'_>, attribute: &str, csrf: Option<&str>) -> String {
    let Some(d) = e.drift else {
        return String::new();
    };
    let lines: String = d.diff().lines().map(diff_line).collect();
    let csrf = csrf.map_or_else(String::new, |c| {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(c)
        )
    });
    let key = catalog
        .defs()
        .get(d.upstream)
        .map_or("", |def| def.key.as_str());
    format!(
        "<h3>Not as pinned</h3>\n<p id=\"drift-reason\">{verdict}: {reason}.</p>\n\
         <pre class=\"diff\" id=\"diff\">{lines}</pre>\n\
         <form method=\"post\" action=\"/console/catalog/repin\">{csrf}\
         <input type=\"hidden\" name=\"kind\" value=\"{attribute}\">\
         <input type=\"hidden\" name=\"upstream\" value=\"{key}\">\
         <input type=\"hidden\" name=\"original\" value=\"{original}\">\
         <input type=\"hidden\" name=\"name\" value=\"{exposed}\">\
         <button type=\"submit\" id=\"repin\">Re-pin</button> \
         <span class=\"why\">approves the definition as it is now: the lock file is written \
         as manifold pin writes it, then the configuration is reloaded</span></form>\n",
        verdict = if d.held { "Held" } else { "Served" },
        reason = escape(&d.reason()),
        key = escape(key),
        original = escape(&d.original),
        exposed = escape(&d.exposed),
    )
}

/// One line of a diff, marked by what it is: removed (`-`), added (`+`), or a member's name.
fn diff_line(line: &str) -> String {
    let class = match line.trim_start().as_bytes().first() {
        Some(b'-') => "del",
        Some(b'+') => "add",
        _ => "field",
    };
    format!("<span class=\"{class}\">{}</span>\n", escape(line))
}

/// `POST /console/catalog/repin`: pins the item's current definition, reloads, and shows the
/// item again (303).
pub(super) async fn repin(
    req: HttpRequest,
    console: web::Data<Console>,
    form: PostedForm,
) -> HttpResponse {
    let form = match check_post(&req, &console, form) {
        Ok((_, form)) => form,
        Err(refusal) => return refusal,
    };
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or("");
    let (attribute, upstream, original) = (field("kind"), field("upstream"), field("original"));
    let outcome = match kind_of(attribute) {
        Some(kind) => pin_and_reload(&console, kind, upstream, original).await,
        None => Err("no such kind of item".to_owned()),
    };
    match outcome {
        Ok(()) => see_other(&format!(
            "/console/catalog/item?kind={attribute}&name={}&repinned=1",
            url_encode(field("name"))
        )),
        Err(why) => {
            let text = format!(
                "<h2>Re-pin failed</h2>\n<p class=\"notice\" id=\"repin-failed\">{}</p>\n\
                 <p><a href=\"/console/catalog\">Back to the catalog</a></p>",
                escape(&why)
            );
            html(
                HttpResponse::Conflict(),
                super::page::page("Re-pin failed", "", &text, 0),
            )
        }
    }
}

/// Writes the pin of the item's definition as it is now, then reloads so the catalog is built
/// against it.
async fn pin_and_reload(
    console: &Console,
    kind: Kind,
    upstream: &str,
    original: &str,
) -> Result<(), String> {
    let (Some(operations), Some(reload)) = (&console.operations, &console.reload) else {
        return Err("re-pinning is not served here".to_owned());
    };
    let pin = {
        let catalog = console.router.hub().catalog();
        let drift = catalog.drift().iter().find(|d| {
            d.kind == kind
                && d.original == original
                && catalog
                    .defs()
                    .get(d.upstream)
                    .is_some_and(|u| u.key == upstream)
        });
        let Some(d) = drift else {
            return Err(format!(
                "{original} of upstream {upstream} matches its pin already (or is gone)"
            ));
        };
        Pin {
            digest: d.digest.clone(),
            definition: d.current.clone(),
        }
    };
    operations.repin(upstream, kind, original, pin)?;
    reload().await.map(|_| ())
}
