//! `manifold check`: validate a config, start its upstreams, print the merged catalog with
//! every renamed, sanitized or shortened name (and, with `[pinning]`, every tool and prompt
//! that differs from its pin), and fail on anything a user must fix, a held tool included.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use manifold_catalog::{Catalog, Kind, Mark, UpstreamState};
use manifold_config::UpstreamConfig;
use manifold_core::cache;
use manifold_protocol::RawObject;
use manifold_upstream::{OpenApiReport, UpstreamHandle};

use crate::{pin, run};

mod skills;

pub fn check(path: &Path, no_start: bool) -> anyhow::Result<ExitCode> {
    let (config, defs) = run::load(path)?;
    // The listener's certificate and key are read as `serve` would read them, so that a
    // missing or mismatched file is found before deployment.
    run::tls(&config)?;
    if no_start {
        for (def, cfg) in defs.iter().zip(&config.upstreams) {
            println!(
                "  {} (prefix {:?}, uri prefix {:?}): not started",
                def.key, def.prefix, def.uri_prefix
            );
            if let Some(note) = auth_note(cfg) {
                println!("    auth: {note}");
            }
        }
        println!("ok: {} (not started)", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let (report, problems) = run::with_started(&config, &defs, |catalog, handles| {
        let mut out = render(catalog, &config.skipped, &config.upstreams, handles);
        out.push_str(&render_extensions(catalog));
        out.push_str(&unknown_cached_tools(catalog, &config.upstreams));
        let mut problems = problems(path, catalog);
        if let Some(pinning) = &config.pinning {
            out.push_str(&pin::render_drift(catalog, &pinning.lock));
            problems.extend(pin::held_problems(path, catalog));
        }
        (out, problems)
    });
    print!("{report}");
    if problems.is_empty() {
        println!("ok: {}", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("{p}");
    }
    Ok(ExitCode::FAILURE)
}

fn render(
    catalog: &Catalog,
    skipped: &[(String, String)],
    upstreams: &[UpstreamConfig],
    handles: &[UpstreamHandle],
) -> String {
    let mut out = String::new();
    let defs = catalog.defs();
    let _ = writeln!(out, "upstreams:");
    for (i, def) in defs.iter().enumerate() {
        let state = match catalog.state(i) {
            UpstreamState::Up => "up".to_owned(),
            UpstreamState::Starting => "did not finish starting".to_owned(),
            UpstreamState::Down { reason } => format!("DOWN: {reason}"),
        };
        let _ = writeln!(
            out,
            "  {} (prefix {:?}, uri prefix {:?}): {state}",
            def.key, def.prefix, def.uri_prefix
        );
        if let Some(note) = upstreams.get(i).and_then(auth_note) {
            let _ = writeln!(out, "    auth: {note}");
        }
        if let (UpstreamState::Up, Some(handle)) =
            (catalog.state(i), handles.iter().find(|h| h.index() == i))
        {
            out.push_str(&openapi_report(handle));
        }
    }
    for (key, why) in skipped {
        let _ = writeln!(out, "  {key}: skipped ({why})");
    }
    // The operation each OpenAPI tool makes, by upstream, for the tool lines.
    let reports: HashMap<usize, Arc<OpenApiReport>> = handles
        .iter()
        .filter_map(|h| Some((h.index(), h.openapi_report()?)))
        .collect();
    for kind in Kind::ALL {
        if kind == Kind::Skills {
            out.push_str(&skills::render(catalog));
            continue;
        }
        let items = catalog.listing(kind).items();
        let _ = writeln!(out, "{} ({}):", kind.result_key(), items.len());
        for item in items {
            let note = Mark::of_origin(item.origin)
                .map(|mark| format!("  [{}]", mark.label()))
                .unwrap_or_default();
            let cached = cache::rule_note(catalog, upstreams.get(item.upstream), kind, item)
                .map(|note| format!("  [{note}]"))
                .unwrap_or_default();
            let operation = match (kind, reports.get(&item.upstream)) {
                (Kind::Tools, Some(report)) => report
                    .operations
                    .get(&item.original)
                    .map(|op| format!("  [{op}]"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  {} -> {}:{}{note}{operation}{cached}",
                item.exposed, defs[item.upstream].key, item.original
            );
        }
    }
    out
}

/// One line per extension an upstream declares: merged (Manifold knows it), passed through
/// (from the one upstream that declares it), or not advertised (several declare it).
fn render_extensions(catalog: &Catalog) -> String {
    use manifold_core::extensions::{self, Fate};
    let fates = extensions::fates(catalog, |i| {
        catalog.defs().get(i).is_some_and(|d| !d.retired)
    });
    let mut out = String::new();
    if fates.is_empty() {
        return out;
    }
    let _ = writeln!(out, "extensions ({}):", fates.len());
    for (name, fate) in fates {
        let what = match fate {
            Fate::Merged => "merged".to_owned(),
            Fate::PassedThrough(upstream) => format!(
                "passed through (from {})",
                extensions::keys(catalog, &[upstream])
            ),
            Fate::NotAdvertised(by) => format!(
                "not advertised (declared by {}: its methods cannot be routed)",
                extensions::keys(catalog, &by)
            ),
        };
        let _ = writeln!(out, "  {name}: {what}");
    }
    out
}

/// Warnings (not failures: tools may come later) for `tool_cache` entries that name no tool
/// of a running upstream.
fn unknown_cached_tools(catalog: &Catalog, upstreams: &[UpstreamConfig]) -> String {
    let mut out = String::new();
    for (i, u) in upstreams.iter().enumerate() {
        let (Some(slice), UpstreamState::Up) = (catalog.slice(i), catalog.state(i)) else {
            continue;
        };
        if u.caches.tools.is_empty() {
            continue;
        }
        let names: Vec<String> = slice
            .tools
            .iter()
            .filter_map(|t| tool_name(t.get()))
            .collect();
        for name in u.caches.tools.keys().filter(|n| !names.contains(n)) {
            let _ = writeln!(
                out,
                "warning: upstreams.{}.tool_cache.{name}: the upstream lists no tool {name:?}",
                u.key
            );
        }
    }
    out
}

fn tool_name(tool: &str) -> Option<String> {
    RawObject::parse(tool)
        .ok()?
        .get_str("name")
        .map(|n| n.into_owned())
}

/// Everything that makes `check` fail, each naming the file, the key and the problem.
fn problems(path: &Path, catalog: &Catalog) -> Vec<String> {
    let file = path.display();
    let mut problems = Vec::new();
    for (i, def) in catalog.defs().iter().enumerate() {
        match catalog.state(i) {
            UpstreamState::Up => {}
            UpstreamState::Starting => problems.push(format!(
                "{file}: upstreams.{}: did not finish starting in time",
                def.key
            )),
            UpstreamState::Down { reason } => {
                problems.push(format!("{file}: upstreams.{}: {reason}", def.key))
            }
        }
    }
    for c in catalog.collisions() {
        let owners: Vec<String> = c
            .owners
            .iter()
            .map(|(u, n)| format!("upstreams.{u} {n:?}"))
            .collect();
        problems.push(format!(
            "{file}: {}: name collision: {:?} is wanted by {}; set a prefix or a rename",
            kind_key(c.kind),
            c.exposed,
            owners.join(" and ")
        ));
    }
    for m in catalog.malformed() {
        problems.push(format!("{file}: upstreams.{m}"));
    }
    problems
}

/// What an OpenAPI upstream's load of its description found beyond its tools: the operations
/// that did not become tools, each with why (those that did are the tool lines), and the
/// security schemes no value is configured for (the operations that need them fail until one
/// is). It is the upstream's own load, so `check` fetches the description once.
fn openapi_report(handle: &UpstreamHandle) -> String {
    let mut out = String::new();
    let Some(report) = handle.openapi_report() else {
        return out;
    };
    for (operation, why) in &report.skipped {
        let _ = writeln!(out, "    operation {operation}: skipped ({why})");
    }
    for scheme in &report.unconfigured {
        let _ = writeln!(
            out,
            "    security scheme {scheme}: not configured (set upstreams.{}.security.{scheme})",
            handle.key()
        );
    }
    out
}

/// How an upstream with `auth` is authorized, and what its catalog is read with.
fn auth_note(cfg: &UpstreamConfig) -> Option<String> {
    use manifold_config::{Identity, Transport, UpstreamAuth};
    let Transport::Http(http) = &cfg.transport else {
        return None;
    };
    let key = &cfg.key;
    Some(match http.auth.as_ref()? {
        UpstreamAuth::OAuth(o) if o.identity == Identity::Shared => format!(
            "oauth, one shared account; catalog and calls with the operator's login (manifold login {key})"
        ),
        UpstreamAuth::OAuth(o) if o.catalog_login => format!(
            "oauth, each caller as themselves; catalog read with the operator's login (manifold login {key})"
        ),
        UpstreamAuth::OAuth(_) => "oauth, each caller as themselves; catalog read with the token of a caller who connected (listed once one has)".to_owned(),
        UpstreamAuth::ClientCredentials(_) => "client credentials, Manifold as a machine client".to_owned(),
        UpstreamAuth::TokenExchange(_) => "token exchange of each caller's JWT; catalog read with the token of a caller who called it".to_owned(),
        UpstreamAuth::IdentityAssertion(_) => "identity assertion (enterprise-managed) for each caller; catalog read with the token of a caller who called it".to_owned(),
    })
}

fn kind_key(kind: Kind) -> &'static str {
    match kind {
        Kind::Tools => "tools",
        _ => "prompts",
    }
}
