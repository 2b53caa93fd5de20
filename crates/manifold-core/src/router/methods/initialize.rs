//! `initialize`: the negotiated version, capabilities that reflect what the upstreams offer,
//! and a `serverInfo` that says what this merged server is. All of it comes from the
//! upstreams the host may know of: a team is never told of an upstream its view hides, not
//! even through a capability only that upstream offers.

use std::sync::Arc;

use manifold_protocol::{version, Envelope, RawObject};

use crate::context::Context;
use crate::error::RouteError;
use crate::extensions;
use crate::policy::Caller;
use crate::router::Router;
use crate::session::Client;
use manifold_catalog::skills::EXTENSION as SKILLS;
use manifold_catalog::{Catalog, UpstreamSlice, UpstreamState};
use serde_json::{json, Map, Value};

impl Router {
    pub(in crate::router) fn initialize(self: &Arc<Self>, ctx: Context, env: &Envelope<'_>) {
        let params = match env.routing_params() {
            Ok(p) => p,
            Err(e) => return ctx.fail(&RouteError::InvalidParams(e.to_string())),
        };
        let Some(session) = ctx.session.clone() else {
            return ctx.fail(&RouteError::InvalidParams(
                "initialize needs a session".into(),
            ));
        };
        if let Err(e) = self.choose_discovery(&ctx, params.meta) {
            return ctx.fail(&e);
        }
        if !session.begin_initialize() {
            return ctx.fail(&RouteError::AlreadyInitialized);
        }
        let negotiated = version::negotiate(params.protocol_version.as_deref());
        let client = Client {
            capabilities: params.capabilities.unwrap_or("{}").into(),
            info: env
                .params
                .and_then(|p| RawObject::parse(p).ok())
                .and_then(|p| p.get("clientInfo").map(Box::from)),
        };
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            // Answer with the whole catalog: wait (bounded) for every upstream's first start.
            router
                .hub
                .wait_settled(router.settings.startup_timeout)
                .await;
            let catalog = router.hub.catalog();
            let result = for_caller(&catalog, session.caller(), |known| {
                result(&catalog, negotiated, known)
            });
            session.finish_initialize(negotiated, client);
            ctx.reply(&result);
        });
    }
}

/// Runs `make` with which upstreams (by index) `caller` may know of: those its team's view
/// admits, or all of them.
pub(in crate::router) fn for_caller<R>(
    catalog: &Catalog,
    caller: &Caller,
    make: impl FnOnce(&dyn Fn(usize) -> bool) -> R,
) -> R {
    match caller.restricted() {
        Some(team) => {
            let view = team.view(catalog);
            make(&|i| view.knows_upstream(i))
        }
        // Every upstream but those a reload removed.
        None => make(&|i| catalog.defs().get(i).is_some_and(|d| !d.retired)),
    }
}

/// The initialize result for `catalog`, as JSON text, naming only the upstreams (by index)
/// for which `known` holds.
fn result(catalog: &Catalog, version: &str, known: impl Fn(usize) -> bool) -> String {
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(catalog, &known, false),
        "serverInfo": server_info(catalog, &known),
        "instructions": instructions(catalog, &known),
    });
    result.to_string()
}

/// The `server/discover` result for `catalog` (without what every stateless answer carries):
/// every revision Manifold speaks, and what `initialize` would say of the upstreams for which
/// `known` holds.
pub(in crate::router) fn discovery(
    catalog: &Catalog,
    known: impl Fn(usize) -> bool,
    ttl_ms: u64,
) -> String {
    json!({
        "supportedVersions": version::ALL,
        "capabilities": capabilities(catalog, &known, true),
        "instructions": instructions(catalog, &known),
        "ttlMs": ttl_ms,
    })
    .to_string()
}

/// `serverInfo`: Manifold, titled with the upstreams it presents.
fn server_info(catalog: &Catalog, known: &impl Fn(usize) -> bool) -> Value {
    let keys: Vec<&str> = catalog
        .defs()
        .iter()
        .enumerate()
        .filter(|(i, _)| known(*i))
        .map(|(_, d)| d.key.as_str())
        .collect();
    json!({
        "name": "manifold",
        "title": format!("Manifold ({})", keys.join(", ")),
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// What the upstreams for which `known` holds offer, merged. A stateless host is offered no
/// session-era tasks (they moved to an extension in its revision) and no subscribe method
/// (`subscriptions/listen` replaced it).
fn capabilities(catalog: &Catalog, known: &impl Fn(usize) -> bool, stateless: bool) -> Value {
    let slices: Vec<_> = catalog
        .slices()
        .iter()
        .enumerate()
        .filter(|(i, _)| known(*i))
        .filter_map(|(_, s)| s.as_ref())
        .collect();
    let offers = |cap: &str| slices.iter().any(|s| s.has_capability(cap));
    let mut caps = Map::new();
    // Tools are always offered: upstreams that are still starting may bring some later, and
    // list_changed tells the host when they do.
    caps.insert("tools".into(), json!({ "listChanged": true }));
    if offers("prompts") {
        caps.insert("prompts".into(), json!({ "listChanged": true }));
    }
    if offers("resources") {
        let subscribe = slices
            .iter()
            .any(|s| s.has_feature("resources", "subscribe"));
        let resources = if stateless {
            json!({ "listChanged": true })
        } else {
            json!({ "listChanged": true, "subscribe": subscribe })
        };
        caps.insert("resources".into(), resources);
    }
    if offers("completions") {
        caps.insert("completions".into(), json!({}));
    }
    if offers("logging") {
        caps.insert("logging".into(), json!({}));
    }
    let mut extensions = upstream_extensions(&slices);
    skills_extension(&slices, &mut extensions, &mut caps);
    if offers("tasks") && stateless {
        // The session era's tasks, offered to stateless hosts as the tasks extension.
        extensions.insert(crate::tasks::EXTENSION.into(), json!({}));
    }
    if !extensions.is_empty() {
        caps.insert("extensions".into(), Value::Object(extensions));
    }
    if offers("tasks") && !stateless {
        // What any upstream supports; a request its upstream cannot serve is refused there.
        let mut tasks = Map::new();
        if slices.iter().any(|s| s.has_feature_object("tasks", "list")) {
            tasks.insert("list".into(), json!({}));
        }
        if slices
            .iter()
            .any(|s| s.has_feature_object("tasks", "cancel"))
        {
            tasks.insert("cancel".into(), json!({}));
        }
        tasks.insert("requests".into(), json!({ "tools": { "call": {} } }));
        caps.insert("tasks".into(), Value::Object(tasks));
    }
    Value::Object(caps)
}

/// The extensions (`capabilities.extensions`) the given upstreams declare, by the extension
/// rule (see [`crate::extensions`]): MCP Apps with the settings of the first upstream that
/// declares it; an extension Manifold does not know with its settings when exactly one of
/// them declares it, and not at all when several do (none of them could be told which of its
/// requests are theirs). Tasks are Manifold's own to offer (see [`capabilities`]), skills are
/// merged on their own.
fn upstream_extensions(slices: &[&Arc<UpstreamSlice>]) -> Map<String, Value> {
    let mut merged = Map::new();
    let mut declarers: std::collections::HashMap<String, usize> = Default::default();
    for slice in slices {
        for (name, settings) in extensions::declared_by(slice) {
            if name == crate::tasks::EXTENSION || name == extensions::SKILLS {
                continue;
            }
            *declarers.entry(name.clone()).or_default() += 1;
            merged.entry(name).or_insert(settings);
        }
    }
    merged.retain(|name, _| extensions::is_known(name) || declarers.get(name) == Some(&1));
    merged
}

/// The skills extension, merged: offered when any of the given upstreams declares it, with
/// `directoryRead: true` only when every one of them does (a directory read for the others
/// would be refused); `resources` is offered with it, since skill files are read with
/// `resources/read`.
fn skills_extension(
    slices: &[&Arc<UpstreamSlice>],
    extensions: &mut Map<String, Value>,
    caps: &mut Map<String, Value>,
) {
    extensions.remove(SKILLS);
    let declaring: Vec<_> = slices.iter().filter(|s| s.declares_skills()).collect();
    if declaring.is_empty() {
        return;
    }
    let settings = match declaring.iter().all(|s| s.reads_skill_directories()) {
        true => json!({ "directoryRead": true }),
        false => json!({}),
    };
    extensions.insert(SKILLS.into(), settings);
    caps.entry("resources")
        .or_insert_with(|| json!({ "listChanged": true }));
}

/// Tells the model what it is talking to, and passes on each upstream's own instructions.
fn instructions(catalog: &Catalog, known: &impl Fn(usize) -> bool) -> Value {
    let mut text = String::from(
        "Manifold presents several MCP servers as one. Tool and prompt names start with the \
         server's prefix; resource URIs start with the server's prefix and '+' (app resources: \
         'ui://' and the prefix). Servers:",
    );
    for (i, def) in catalog.defs().iter().enumerate().filter(|(i, _)| known(*i)) {
        let state = match catalog.state(i) {
            UpstreamState::Up => "available".to_owned(),
            UpstreamState::Starting => "starting".to_owned(),
            UpstreamState::Down { reason } => format!("unavailable: {reason}"),
        };
        text.push_str(&format!(
            "\n- {} (prefix {:?}, {state})",
            def.key, def.prefix
        ));
        if let Some(own) = catalog.slice(i).and_then(|s| s.instructions.as_deref()) {
            text.push_str(&format!(": {}", own.trim()));
        }
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn slice(capabilities: &str) -> Arc<UpstreamSlice> {
        Arc::new(UpstreamSlice {
            capabilities: Some(RawValue::from_string(capabilities.to_owned()).unwrap()),
            ..UpstreamSlice::default()
        })
    }

    #[test]
    fn known_extensions_are_merged_and_an_unknown_one_passes_only_from_a_sole_declarer() {
        let a = slice(
            r#"{"tools":{},"extensions":{"io.modelcontextprotocol/ui":{"x":1},"com.example/other":{"deep":[1,{"k":null}]},"com.example/shared":{"a":1}}}"#,
        );
        let b = slice(
            r#"{"extensions":{"io.modelcontextprotocol/ui":{"x":2},"io.modelcontextprotocol/tasks":{},"com.example/shared":{"b":2}}}"#,
        );
        let plain = slice(r#"{"tools":{}}"#);
        let merged = upstream_extensions(&[&plain, &a, &b]);
        assert_eq!(
            Value::Object(merged),
            json!({
                "io.modelcontextprotocol/ui": {"x": 1},
                "com.example/other": {"deep": [1, {"k": null}]},
            })
        );
        // Seen alone, either declarer passes the shared one through.
        let alone = upstream_extensions(&[&plain, &b]);
        assert_eq!(alone.get("com.example/shared"), Some(&json!({"b": 2})));
        assert!(upstream_extensions(&[&plain]).is_empty());
    }
}
