//! Opening a connection: learning which era of the protocol the upstream speaks (the
//! `server/discover` probe), the session era's `initialize` handshake, and fetching the
//! upstream's catalog, every page of it, with the caching hints stateless-era lists carry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_catalog::{CacheHint, Kind, UpstreamSlice};
use manifold_config::EraChoice;
use manifold_protocol::object::with_meta;
use manifold_protocol::version::{self, meta, Era};
use manifold_protocol::{codes, RawObject};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::connection::{meta_members, Connection};
use crate::pending::Answer;

/// A server that keeps returning cursors is cut off after this many pages.
const MAX_PAGES: usize = 10_000;

/// How long the `server/discover` probe waits for an answer before the upstream counts as
/// one of the session era (which may ignore a request before `initialize`), unless the
/// upstream's request timeout is shorter. Short enough that a silent upstream still starts
/// within the default `server.startup_timeout_ms` (10 s).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a shared connection declares to its upstream: Manifold forwards these requests to the
/// host that owns the request in flight, which answers them if it can (a host that cannot gets
/// the request refused on its behalf). Extensions are those whose payloads Manifold carries
/// through to hosts intact: MCP Apps (`ui://` resources and the `_meta` naming them are mapped
/// like any other URI).
const MANIFOLD_CAPABILITIES: &str = concat!(
    r#"{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}},"#,
    r#""extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html;profile=mcp-app"]}}}"#
);

/// How to open a connection.
pub(crate) struct Plan {
    /// The era asked for; `Auto` probes.
    pub era: EraChoice,
    /// How long the probe waits.
    pub probe_timeout: Duration,
    /// Over HTTP: in the stateless era, tools with invalid `x-mcp-header` annotations are
    /// left out, as that transport requires.
    pub http: bool,
}

/// Learns the upstream's era (probing unless the plan says the session era), runs
/// `initialize` / `notifications/initialized` on a session-era upstream, then fetches every
/// list the upstream declared a capability for.
/// A session's own connection (`capabilities` given: that host's own) fetches no lists: the
/// catalog comes from the shared connection.
pub(crate) async fn run(
    conn: Arc<Connection>,
    capabilities: Option<Arc<str>>,
    plan: Plan,
) -> Result<UpstreamSlice, String> {
    let isolated = capabilities.is_some();
    let capabilities = capabilities.as_deref().unwrap_or(MANIFOLD_CAPABILITIES);
    let mut slice = match plan.era {
        EraChoice::Session => initialize(&conn, capabilities).await?,
        EraChoice::Auto | EraChoice::Stateless => {
            match discover(&conn, capabilities, plan.probe_timeout).await {
                Probe::Stateless(slice) => *slice,
                Probe::Session(why) if plan.era == EraChoice::Auto => {
                    tracing::debug!(upstream = %conn.name(), "{why}: speaking the session era (initialize)");
                    initialize(&conn, capabilities).await?
                }
                Probe::Session(why) => {
                    return Err(format!(
                        "it does not speak the stateless era ({why}), which era = \"stateless\" requires"
                    ))
                }
            }
        }
    };
    for kind in Kind::ALL {
        if declares(&slice, kind) && !isolated {
            fetch_into(&conn, &mut slice, kind, plan.http).await?;
        }
    }
    Ok(slice)
}

/// What the probe found.
enum Probe {
    /// A stateless-era revision Manifold speaks (the connection is set to it), with what the
    /// upstream said of itself.
    Stateless(Box<UpstreamSlice>),
    /// Anything else, and why: the session era, if any.
    Session(String),
}

#[derive(Deserialize)]
struct DiscoverResult {
    #[serde(rename = "supportedVersions")]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Option<Box<RawValue>>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<std::collections::HashMap<String, Box<RawValue>>>,
}

/// Probes with `server/discover`, in the newest stateless-era revision Manifold speaks. After
/// an unsupported-version error the probe is sent once more, in the newest revision both speak
/// by its `data.supported`: even the one just asked for, since a server may refuse the first
/// request it sees whatever it names; a second refusal means the session era.
async fn discover(conn: &Connection, capabilities: &str, limit: Duration) -> Probe {
    let mut version = version::MODERN_LATEST;
    let mut retried = false;
    loop {
        let params = with_meta(None, &meta_members(version, capabilities));
        let answer = match conn.probe(version, &params, limit).await {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                return Probe::Session(format!(
                    "no answer to server/discover within {}",
                    humanize(limit)
                ))
            }
            Err(e) => return Probe::Session(format!("server/discover failed: {e}")),
        };
        let error = match answer {
            Answer::Result(result) => return discovered(conn, capabilities, &result),
            Answer::Error(error) => error,
        };
        let offered = (crate::connection::error_code(&error)
            == Some(codes::UNSUPPORTED_PROTOCOL_VERSION))
        .then(|| supported_of(&error))
        .flatten();
        match offered
            .as_deref()
            .and_then(|o| version::newest_modern(o.iter().map(String::as_str)))
        {
            Some(common) if !retried => {
                tracing::debug!(upstream = %conn.name(), "server/discover in {version} was refused as an unsupported version; asking again in {common}");
                retried = true;
                version = common;
            }
            _ => return Probe::Session(format!("server/discover was refused: {error}")),
        }
    }
}

/// The `data.supported` of an unsupported-version error.
fn supported_of(error: &str) -> Option<Vec<String>> {
    let data = RawObject::parse(error).ok()?.get("data")?.to_owned();
    let supported = RawObject::parse(&data).ok()?.get("supported")?.to_owned();
    serde_json::from_str(&supported).ok()
}

/// A `server/discover` result: the stateless era if it offers a revision of that era
/// Manifold speaks.
fn discovered(conn: &Connection, capabilities: &str, result: &str) -> Probe {
    let found: DiscoverResult = match serde_json::from_str(result) {
        Ok(found) => found,
        Err(e) => return Probe::Session(format!("its server/discover result is malformed: {e}")),
    };
    let offered = found.supported_versions.iter().map(String::as_str);
    let Some(version) = version::newest_modern(offered) else {
        return Probe::Session(format!(
            "its server/discover offers {:?}, no stateless-era revision Manifold speaks ({})",
            found.supported_versions,
            version::MODERN.join(", ")
        ));
    };
    conn.set_stateless(version, capabilities);
    let server_info = found.meta.and_then(|mut m| m.remove(meta::SERVER_INFO));
    Probe::Stateless(Box::new(UpstreamSlice {
        capabilities: found.capabilities,
        protocol_version: version.to_owned(),
        instructions: found.instructions,
        server_info,
        ..UpstreamSlice::default()
    }))
}

/// The session era's handshake: `initialize`, then `notifications/initialized`.
async fn initialize(conn: &Connection, capabilities: &str) -> Result<UpstreamSlice, String> {
    conn.set_session();
    let params = format!(
        r#"{{"protocolVersion":"{}","capabilities":{capabilities},"clientInfo":{{"name":"manifold","version":"{}"}}}}"#,
        version::LATEST,
        env!("CARGO_PKG_VERSION")
    );
    let result = result_of(
        conn.request("initialize", Some(&params)).await,
        "initialize",
    )?;
    #[derive(Deserialize)]
    struct InitResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: String,
        #[serde(default)]
        capabilities: Option<Box<RawValue>>,
        #[serde(default)]
        instructions: Option<String>,
        #[serde(default, rename = "serverInfo")]
        server_info: Option<Box<RawValue>>,
    }
    let init: InitResult = serde_json::from_str(&result)
        .map_err(|e| format!("its initialize result is malformed: {e}"))?;
    if !version::is_supported(&init.protocol_version) {
        return Err(format!(
            "it answered protocol version {:?}, which Manifold does not speak (supported: {})",
            init.protocol_version,
            version::SUPPORTED.join(", ")
        ));
    }
    conn.notify("notifications/initialized", None)
        .map_err(|e| e.to_string())?;
    Ok(UpstreamSlice {
        capabilities: init.capabilities,
        protocol_version: init.protocol_version,
        instructions: init.instructions,
        server_info: init.server_info,
        ..UpstreamSlice::default()
    })
}

/// Re-fetches the given lists into a copy of `old`.
pub(crate) async fn refresh(
    conn: Arc<Connection>,
    old: Arc<UpstreamSlice>,
    kinds: Vec<Kind>,
    http: bool,
) -> Result<UpstreamSlice, String> {
    let mut slice = UpstreamSlice {
        tools: old.tools.clone(),
        prompts: old.prompts.clone(),
        resources: old.resources.clone(),
        templates: old.templates.clone(),
        skills: old.skills.clone(),
        capabilities: old.capabilities.clone(),
        protocol_version: old.protocol_version.clone(),
        instructions: old.instructions.clone(),
        server_info: old.server_info.clone(),
        hints: old.hints,
        fetched: old.fetched,
    };
    for kind in kinds {
        if declares(&slice, kind) {
            fetch_into(&conn, &mut slice, kind, http).await?;
        }
    }
    Ok(slice)
}

/// Whether the upstream declared the capability list `kind` needs: skills are the skills
/// extension's, which rides on resources (its files are read with `resources/read`).
fn declares(slice: &UpstreamSlice, kind: Kind) -> bool {
    let cap = match kind {
        Kind::Tools => "tools",
        Kind::Prompts => "prompts",
        Kind::Resources | Kind::ResourceTemplates => "resources",
        Kind::Skills => return slice.declares_skills(),
    };
    slice.has_capability(cap)
}

fn slot(slice: &mut UpstreamSlice, kind: Kind) -> &mut Vec<Box<RawValue>> {
    match kind {
        Kind::Tools => &mut slice.tools,
        Kind::Prompts => &mut slice.prompts,
        Kind::Resources => &mut slice.resources,
        Kind::ResourceTemplates => &mut slice.templates,
        Kind::Skills => &mut slice.skills,
    }
}

/// Fetches list `kind` into `slice`, with its hint and the time it was asked for.
async fn fetch_into(
    conn: &Connection,
    slice: &mut UpstreamSlice,
    kind: Kind,
    http: bool,
) -> Result<(), String> {
    let asked = Instant::now();
    let (mut items, hint) = fetch_list(conn, kind).await?;
    if kind == Kind::Tools && http && conn.era() == Era::Stateless {
        crate::param_headers::retain_valid(conn.name(), &mut items);
    }
    *slot(slice, kind) = items;
    slice.hints[kind.index()] = hint;
    slice.fetched[kind.index()] = Some(asked);
    Ok(())
}

/// Fetches a whole list, following `nextCursor`, and the caching hint of its pages.
async fn fetch_list(
    conn: &Connection,
    kind: Kind,
) -> Result<(Vec<Box<RawValue>>, Option<CacheHint>), String> {
    let method = kind.list_method();
    let mut items = Vec::new();
    let mut hints = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| {
            let mut obj = RawObject::default();
            obj.set_str("cursor", c);
            obj.to_text()
        });
        let result = result_of(conn.request(method, params.as_deref()).await, method)?;
        let page = RawObject::parse(&result)
            .map_err(|e| format!("its {method} result is malformed: {e}"))?;
        if page.get_str("resultType").as_deref() == Some("input_required") {
            return Err(format!(
                "its {method} asked for input (input_required), which a list fetch cannot give"
            ));
        }
        let list = page
            .get(kind.result_key())
            .ok_or_else(|| format!("its {method} result has no {:?}", kind.result_key()))?;
        let page_items: Vec<Box<RawValue>> = serde_json::from_str(list)
            .map_err(|e| format!("its {method} result is malformed: {e}"))?;
        items.extend(page_items);
        hints.push(page_hint(&page));
        match page.get_str("nextCursor") {
            Some(next) if !next.is_empty() => cursor = Some(next.into_owned()),
            _ => return Ok((items, list_hint(&hints))),
        }
    }
    Err(format!("its {method} did not end after {MAX_PAGES} pages"))
}

/// The caching hint of one list page (`ttlMs`, `cacheScope`), if it has either. A negative or
/// unreadable `ttlMs` counts as 0, as the revision says.
fn page_hint(page: &RawObject<'_>) -> Option<CacheHint> {
    let ttl = page.get("ttlMs");
    let scope = page.get_str("cacheScope");
    if ttl.is_none() && scope.is_none() {
        return None;
    }
    let ttl_ms = ttl
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)
        // Whole milliseconds; an absurd value is capped rather than wrapped.
        .map_or(0, |t| t.min(u64::MAX as f64) as u64);
    Some(CacheHint {
        ttl_ms,
        private: scope.as_deref() == Some("private"),
    })
}

/// The hint of a whole list: none if no page gave one; else the pages' combined, a page
/// without a hint counting as immediately stale.
fn list_hint(pages: &[Option<CacheHint>]) -> Option<CacheHint> {
    if pages.iter().all(Option::is_none) {
        return None;
    }
    let no_hint = CacheHint {
        ttl_ms: 0,
        private: false,
    };
    CacheHint::combine(pages.iter().map(|h| h.unwrap_or(no_hint)))
}

fn result_of(answer: Result<Answer, crate::UpstreamError>, method: &str) -> Result<String, String> {
    match answer.map_err(|e| format!("{method} failed: {e}"))? {
        Answer::Result(r) => Ok(r),
        Answer::Error(e) => Err(format!("{method} was refused: {e}")),
    }
}

fn humanize(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(page: &str) -> Option<CacheHint> {
        page_hint(&RawObject::parse(page).unwrap())
    }

    #[test]
    fn pages_give_their_caching_hints() {
        assert_eq!(hint(r#"{"tools":[]}"#), None);
        assert_eq!(
            hint(r#"{"tools":[],"ttlMs":60000,"cacheScope":"public","resultType":"complete"}"#),
            Some(CacheHint {
                ttl_ms: 60_000,
                private: false
            })
        );
        assert_eq!(
            hint(r#"{"ttlMs":-5,"cacheScope":"private"}"#),
            Some(CacheHint {
                ttl_ms: 0,
                private: true
            })
        );
        assert_eq!(hint(r#"{"ttlMs":1.5e3}"#).map(|h| h.ttl_ms), Some(1500));
    }

    #[test]
    fn a_list_takes_the_smallest_ttl_and_any_private_page() {
        let h = |ttl_ms, private| Some(CacheHint { ttl_ms, private });
        assert_eq!(list_hint(&[None, None]), None);
        assert_eq!(list_hint(&[h(500, false), h(200, true)]), h(200, true));
        // A page without hints is immediately stale.
        assert_eq!(list_hint(&[h(500, false), None]), h(0, false));
    }

    #[test]
    fn an_unsupported_version_error_names_what_is_supported() {
        let e = r#"{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28","2025-11-25"],"requested":"1900-01-01"}}"#;
        assert_eq!(
            supported_of(e),
            Some(vec!["2026-07-28".to_owned(), "2025-11-25".to_owned()])
        );
        assert_eq!(supported_of(r#"{"code":-32601,"message":"x"}"#), None);
    }
}
