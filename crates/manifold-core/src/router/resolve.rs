//! Turning a forwarded request into its target: which upstream owns the name or URI it names,
//! and its params as that upstream must see them. Pure functions of the catalog and the
//! request, so every refusal happens before anything is sent.

use std::borrow::Cow;
use std::sync::Arc;

use manifold_catalog::{rewrite, Catalog, Item, Kind, Resolved};
use manifold_protocol::{Envelope, Params, RawObject};
use manifold_telemetry::trace::Carrier;

use crate::error::RouteError;
use crate::policy::Team;
use crate::target::Target;

/// `tools/call` and `prompts/get`: routed by `name`.
pub(super) fn named(
    catalog: &Catalog,
    env: &Envelope<'_>,
    kind: Kind,
    sight: Option<&Team>,
) -> Result<Target, RouteError> {
    let method = match kind {
        Kind::Tools => "tools/call",
        _ => "prompts/get",
    };
    let params = params_object(env)?;
    let item = {
        let name = string_member(&params, "name")?;
        resolve_named(catalog, kind, &name, sight)?
    };
    let task = kind == Kind::Tools && params.get("task").is_some();
    let timeout = match kind {
        Kind::Tools => catalog.defs()[item.upstream]
            .tool_timeouts
            .get(&item.original)
            .copied(),
        _ => None,
    };
    Ok(Target {
        upstream: item.upstream,
        method,
        params: env.params.unwrap_or_default().to_owned(),
        timeout,
        task,
        exposed: Some(item.exposed.as_str().into()),
        original: Some(Arc::from(item.original.as_str())),
        round: 0,
        extension: None,
    })
}

/// `resources/read`, and the skills extension's `skills/get` and `resources/directory/read`:
/// routed by `uri`. Whatever lies in a held skill's directory is refused.
pub(super) fn by_uri(
    catalog: &Catalog,
    env: &Envelope<'_>,
    method: &str,
    sight: Option<&Team>,
) -> Result<Target, RouteError> {
    let method = match method {
        "skills/get" => "skills/get",
        "resources/directory/read" => "resources/directory/read",
        _ => "resources/read",
    };
    let params = params_object(env)?;
    let (upstream, exposed, original) = {
        let uri = string_member(&params, "uri")?;
        let (upstream, original) = match method {
            "resources/read" => resolve_uri(catalog, &uri, sight)?,
            _ => resolve_skill_uri(catalog, method, &uri, sight)?,
        };
        if let Some(drift) = catalog.held_skill(&uri) {
            return Err(RouteError::Held {
                kind: "Skill",
                name: drift.exposed.clone(),
                reason: drift.reason(),
            });
        }
        (upstream, Arc::from(&*uri), original.into_owned())
    };
    Ok(Target {
        upstream,
        method,
        params: env.params.unwrap_or_default().to_owned(),
        timeout: None,
        task: false,
        exposed: Some(exposed),
        original: Some(Arc::from(original.as_str())),
        round: 0,
        extension: None,
    })
}

/// `completion/complete`: routed by the prompt or template its `ref` names.
pub(super) fn complete(
    catalog: &Catalog,
    env: &Envelope<'_>,
    params: &Params<'_>,
    sight: Option<&Team>,
) -> Result<Target, RouteError> {
    let bad = |m: &str| RouteError::InvalidParams(m.to_owned());
    let reference = params.reference.ok_or_else(|| bad("missing \"ref\""))?;
    let reference = RawObject::parse(reference).map_err(|_| bad("\"ref\" must be an object"))?;
    let all = env.params.ok_or_else(|| bad("missing params"))?;
    let (upstream, raw) = match string_member(&reference, "type").as_deref() {
        Ok("ref/prompt") => {
            let name = string_member(&reference, "name").map_err(in_ref)?;
            let item = resolve_named(catalog, Kind::Prompts, &name, sight)?;
            (
                item.upstream,
                rewrite::set_ref_member(all, "name", &item.original),
            )
        }
        Ok("ref/resource") => {
            let uri = string_member(&reference, "uri").map_err(in_ref)?;
            let (upstream, original) = resolve_uri(catalog, &uri, sight)?;
            (upstream, rewrite::set_ref_member(all, "uri", &original))
        }
        _ => {
            return Err(bad(
                "\"ref.type\" must be \"ref/prompt\" or \"ref/resource\"",
            ))
        }
    };
    Ok(Target {
        upstream,
        method: "completion/complete",
        params: raw.ok_or_else(|| bad("malformed params"))?,
        timeout: None,
        task: false,
        exposed: None,
        original: None,
        round: 0,
        extension: None,
    })
}

/// The request's params as an object of raw members: parsed once, then read and rewritten.
fn params_object<'a>(env: &Envelope<'a>) -> Result<RawObject<'a>, RouteError> {
    let raw = env
        .params
        .ok_or_else(|| RouteError::InvalidParams("missing params".into()))?;
    RawObject::parse(raw).map_err(|_| RouteError::InvalidParams("params must be an object".into()))
}

/// The string member `key`, or the error that says it is missing or not a string.
fn string_member<'o>(obj: &'o RawObject<'_>, key: &str) -> Result<Cow<'o, str>, RouteError> {
    match obj.get(key) {
        None | Some("null") => Err(RouteError::InvalidParams(format!("missing \"{key}\""))),
        Some(_) => obj
            .get_str(key)
            .ok_or_else(|| RouteError::InvalidParams(format!("\"{key}\" must be a string"))),
    }
}

/// Errors about members of `ref` name them as such.
fn in_ref(e: RouteError) -> RouteError {
    match e {
        RouteError::InvalidParams(m) => RouteError::InvalidParams(m.replacen("\"", "\"ref.", 1)),
        other => other,
    }
}

/// The tool or prompt exposed as `name`, or the error a host should see. A name the team
/// may not see gets exactly the error of a name that does not exist.
fn resolve_named<'c>(
    catalog: &'c Catalog,
    kind: Kind,
    name: &str,
    sight: Option<&Team>,
) -> Result<&'c Item, RouteError> {
    let found = catalog.resolve_name(kind, name);
    if let Some(team) = sight {
        let visible = match &found {
            Resolved::Found(item) => sees(team, catalog, kind, item.upstream, name),
            Resolved::Held(drift) => sees(team, catalog, kind, drift.upstream, name),
            // A collision's claimants are named in its error: only for names the team sees.
            Resolved::Ambiguous(c) => c
                .owners
                .iter()
                .all(|(key, _)| team.config().admits_upstream(key) && team.admits(kind, name)),
            Resolved::Unknown => true,
        };
        if !visible {
            let unknown = match kind {
                Kind::Tools => RouteError::UnknownTool(name.to_owned()),
                _ => RouteError::UnknownPrompt(name.to_owned()),
            };
            return Err(RouteError::Hidden(Box::new(unknown)));
        }
    }
    match found {
        Resolved::Found(item) => Ok(item),
        Resolved::Ambiguous(c) if kind == Kind::Tools => Err(RouteError::ambiguous("tool", c)),
        Resolved::Ambiguous(c) => Err(RouteError::ambiguous("prompt", c)),
        Resolved::Held(drift) => Err(RouteError::Held {
            kind: if kind == Kind::Tools {
                "Tool"
            } else {
                "Prompt"
            },
            name: name.to_owned(),
            reason: drift.reason(),
        }),
        Resolved::Unknown if kind == Kind::Tools => Err(RouteError::UnknownTool(name.to_owned())),
        Resolved::Unknown => Err(RouteError::UnknownPrompt(name.to_owned())),
    }
}

/// The upstream and original URI behind an exposed URI or template (one the team may see).
pub(super) fn resolve_uri<'u>(
    catalog: &Catalog,
    uri: &'u str,
    sight: Option<&Team>,
) -> Result<(usize, Cow<'u, str>), RouteError> {
    let unknown = || RouteError::UnknownResource(uri.to_owned());
    let (upstream, original) = catalog.resolve_uri(uri).ok_or_else(unknown)?;
    match sight {
        Some(team) if !sees(team, catalog, Kind::Resources, upstream, uri) => {
            Err(RouteError::Hidden(Box::new(unknown())))
        }
        _ => Ok((upstream, original)),
    }
}

/// The upstream and original URI behind a URI a skills method names: one the team may see,
/// and for a directory read, of an upstream that declared `directoryRead`. Every refusal is
/// invalid params, as the extension says of a URI that names nothing served.
fn resolve_skill_uri<'u>(
    catalog: &Catalog,
    method: &str,
    uri: &'u str,
    sight: Option<&Team>,
) -> Result<(usize, Cow<'u, str>), RouteError> {
    let unknown = || match method {
        "skills/get" => RouteError::InvalidParams(format!("Unknown skill: {uri}")),
        _ => RouteError::InvalidParams(format!("Not a directory: {uri}")),
    };
    let (upstream, original) = catalog.resolve_uri(uri).ok_or_else(unknown)?;
    if sight.is_some_and(|team| !sees(team, catalog, Kind::Skills, upstream, uri)) {
        return Err(RouteError::Hidden(Box::new(unknown())));
    }
    let slice = catalog.slice(upstream);
    if !slice.is_some_and(|s| s.declares_skills()) {
        return Err(unknown());
    }
    if method == "resources/directory/read" && !slice.is_some_and(|s| s.reads_skill_directories()) {
        return Err(RouteError::InvalidParams(format!(
            "Not a directory: {uri} (its server does not read directories)"
        )));
    }
    Ok((upstream, original))
}

/// Whether `team` may see the item of `kind` that upstream `upstream` exposes as `exposed`.
fn sees(team: &Team, catalog: &Catalog, kind: Kind, upstream: usize, exposed: &str) -> bool {
    catalog
        .defs()
        .get(upstream)
        .is_some_and(|d| team.sees(kind, &d.key, exposed))
}

/// The W3C trace context a host put in `params._meta`, if any.
pub(super) fn meta_trace_context(params: Option<&str>) -> Option<Carrier> {
    let params = params?;
    manifold_protocol::needle::TRACEPARENT.find(params.as_bytes())?;
    let obj = RawObject::parse(params).ok()?;
    let meta = RawObject::parse(obj.get("_meta")?).ok()?;
    let mut carrier = Carrier::default();
    for key in Carrier::KEYS {
        if let Some(value) = meta.get_str(key) {
            carrier.set(key, value.into_owned());
        }
    }
    (!carrier.is_empty()).then_some(carrier)
}
