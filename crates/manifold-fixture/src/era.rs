//! The protocol's two eras in the fixture (`--era`), and what a request of the stateless era
//! (2026-07-28) carries and gets back.
//!
//! - `session` (the default): 2024-11-05 .. 2025-11-25 only, exactly as the fixture always
//!   behaved: `initialize` opens the session (a request that comes first is answered anyway),
//!   `server/discover` and every other 2026-07-28 method is -32601.
//! - `stateless`: 2026-07-28 only. Every request names its revision and the client's
//!   capabilities in `params._meta`; there is no `initialize` (-32601, with the revisions
//!   spoken in `data.supported`), no `ping`, `logging/setLevel` or `resources/(un)subscribe`
//!   (-32601 too).
//! - `dual`: both. Over stdio the first request chooses for the whole connection: one whose
//!   `_meta` names a revision makes it stateless, any other (`initialize` as a session-era
//!   client sends it, or any request without `_meta`) makes it the session era. Over HTTP
//!   each POST chooses: one without `Mcp-Session-Id` whose `MCP-Protocol-Version` header
//!   names no session-era revision (or, without that header, whose `_meta` names a revision)
//!   is stateless, even an `initialize` (-32601 then); everything else is the session era as
//!   before, an `initialize` without such a header opening a session.
//!
//! A stateless request is checked in this order (over HTTP after the header checks of
//! `http::stateless`): the method must exist in 2026-07-28 (-32601), `_meta` must carry
//! `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`
//! (-32602), the revision must be one the fixture speaks (-32022 with `data.supported` and
//! `data.requested`), and `io.modelcontextprotocol/logLevel`, if given, a log level (-32602).
//! Every result then gets `resultType` (`"complete"` unless it says otherwise) and
//! `_meta["io.modelcontextprotocol/serverInfo"]`; complete results of `server/discover`, the
//! four lists and `resources/read` also get the caching hints `ttlMs` and `cacheScope`
//! (`--ttl-ms`, `--cache-scope`).

use clap::ValueEnum;
use manifold_protocol::codes;
use manifold_protocol::version::{meta, Era, ALL, MODERN};
use manifold_protocol::LOG_LEVELS;
use serde_json::{json, Map, Value};

use crate::rpc::{Incoming, RpcError};
use crate::state::State;

/// `--era`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EraFlag {
    /// 2024-11-05 .. 2025-11-25: initialize, then a session.
    Session,
    /// 2026-07-28 only: no handshake, `_meta` on every request.
    Stateless,
    /// Both: the first message of a stdio connection, and each HTTP POST, choose.
    Dual,
}

/// `--cache-scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn name(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

/// The methods whose complete results carry caching hints.
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// What the fixture knows about one stateless-era request while it handles it.
#[derive(Debug, Clone)]
pub struct Modern {
    pub method: String,
    /// The client's capabilities for this request.
    pub capabilities: Value,
    /// Index in `LOG_LEVELS` of the least severe level the client wants to hear about; None:
    /// no log message at all for this request.
    log_level: Option<usize>,
    server_info: Value,
    ttl_ms: u64,
    cache_scope: &'static str,
}

impl Modern {
    /// Whether the client declared capability `name` (`elicitation`, `sampling`, `roots`).
    pub fn declares(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(Value::is_object)
    }

    /// Whether a `notifications/message` of `level` may be sent for this request.
    pub fn wants_log(&self, level: Option<&str>) -> bool {
        let Some(threshold) = self.log_level else {
            return false;
        };
        let severity = level.and_then(|l| LOG_LEVELS.iter().position(|known| *known == l));
        severity.is_some_and(|s| s >= threshold)
    }

    /// `result` as the stateless era sends it: with `resultType`, the server's identity and,
    /// when complete and cacheable, the caching hints.
    pub fn finish(&self, result: Value) -> Value {
        let Value::Object(mut map) = result else {
            return result;
        };
        let complete = match map.get("resultType") {
            None => {
                map.insert("resultType".into(), json!("complete"));
                true
            }
            Some(kind) => kind == "complete",
        };
        if complete && CACHEABLE.contains(&self.method.as_str()) {
            map.entry("ttlMs").or_insert(json!(self.ttl_ms));
            map.entry("cacheScope").or_insert(json!(self.cache_scope));
        }
        let meta = map.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.entry(meta::SERVER_INFO)
                .or_insert_with(|| self.server_info.clone());
        }
        Value::Object(map)
    }
}

/// The revisions `server/discover` lists, and an unsupported-version error's `supported`.
pub fn supported(state: &State) -> Vec<&'static str> {
    match state.args.era {
        EraFlag::Dual => ALL.to_vec(),
        _ => MODERN.to_vec(),
    }
}

pub fn server_info(state: &State) -> Value {
    json!({ "name": state.args.name, "version": "0.1.0" })
}

/// The era of one message read from stdio: `--era`, or with `dual` the era its connection
/// chose with its first request (see the module doc).
pub fn of_stdio_message(state: &State, msg: &Incoming) -> Era {
    match state.args.era {
        EraFlag::Session => Era::Session,
        EraFlag::Stateless => Era::Stateless,
        EraFlag::Dual => {
            if let Some(era) = state.stdio_era.get() {
                return *era;
            }
            let era = if names_revision(&msg.params) {
                Era::Stateless
            } else {
                Era::Session
            };
            // Only a request decides: notifications and answers before it change nothing.
            if msg.method.is_some() && msg.id.is_some() {
                return *state.stdio_era.get_or_init(|| era);
            }
            era
        }
    }
}

/// Whether `params._meta` names a protocol revision (a stateless-era request).
pub fn names_revision(params: &Value) -> bool {
    meta_of(params)
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .is_some()
}

fn meta_of(params: &Value) -> Option<&Map<String, Value>> {
    params.get("_meta").and_then(Value::as_object)
}

/// The revision a request's `_meta` names, if it names one as a string.
pub fn revision_of(params: &Value) -> Option<&str> {
    meta_of(params)
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .and_then(Value::as_str)
}

/// Whether `method` exists in 2026-07-28 and on this fixture.
fn is_method(state: &State, method: &str) -> bool {
    match method {
        "server/discover"
        | "tools/list"
        | "tools/call"
        | "completion/complete"
        | "subscriptions/listen" => true,
        "prompts/list" | "prompts/get" => state.prompts_enabled(),
        "resources/list" | "resources/templates/list" | "resources/read" => {
            state.resources_enabled()
        }
        _ if crate::skills::is_method(method) => state.args.skills,
        other => state.args.extension_method.as_deref() == Some(other),
    }
}

/// Checks a stateless-era request (see the module doc) and returns what its handling needs.
pub fn accept(state: &State, method: &str, params: &Value) -> Result<Modern, RpcError> {
    if !is_method(state, method) {
        return Err(method_not_found(state, method));
    }
    let meta = meta_of(params);
    let version = meta.and_then(|m| m.get(meta::PROTOCOL_VERSION));
    let capabilities = meta
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
        .filter(|c| c.is_object());
    let mut missing = Vec::new();
    if !version.is_some_and(Value::is_string) {
        missing.push(meta::PROTOCOL_VERSION);
    }
    if capabilities.is_none() {
        missing.push(meta::CLIENT_CAPABILITIES);
    }
    if !missing.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: missing _meta keys: {}",
            missing.join(", ")
        )));
    }
    let version = version.and_then(Value::as_str).unwrap_or_default();
    if !MODERN.contains(&version) {
        return Err(unsupported_version(state, version));
    }
    let log_level =
        match meta.and_then(|m| m.get(meta::LOG_LEVEL)) {
            None => None,
            Some(level) => {
                let known = level
                    .as_str()
                    .and_then(|l| LOG_LEVELS.iter().position(|k| *k == l));
                Some(known.ok_or_else(|| {
                    RpcError::invalid_params(format!("Invalid log level: {level}"))
                })?)
            }
        };
    Ok(Modern {
        method: method.to_owned(),
        capabilities: capabilities.cloned().unwrap_or_else(|| json!({})),
        log_level,
        server_info: server_info(state),
        ttl_ms: state.args.ttl_ms,
        cache_scope: state.args.cache_scope.name(),
    })
}

fn method_not_found(state: &State, method: &str) -> RpcError {
    if method != "initialize" {
        return RpcError::method_not_found(method);
    }
    // A client of the session era gets nothing else from a stateless server: say what it
    // speaks, the only diagnostic such a client can show.
    RpcError {
        code: codes::METHOD_NOT_FOUND,
        message: "Method not found: initialize (2026-07-28 has no handshake: send \
                  server/discover; data.supported lists the revisions spoken here)"
            .to_owned(),
        data: Some(json!({ "supported": supported(state) })),
    }
}

pub fn unsupported_version(state: &State, requested: &str) -> RpcError {
    RpcError {
        code: codes::UNSUPPORTED_PROTOCOL_VERSION,
        message: "Unsupported protocol version".to_owned(),
        data: Some(json!({ "supported": supported(state), "requested": requested })),
    }
}

/// `server/discover`: the revisions, capabilities and identity of the fixture (the result
/// then gets its `resultType`, `_meta` and caching hints from [`Modern::finish`]).
pub fn discover(state: &State) -> Value {
    let mut capabilities = Map::new();
    capabilities.insert("tools".into(), json!({ "listChanged": true }));
    if state.prompts_enabled() {
        capabilities.insert("prompts".into(), json!({ "listChanged": true }));
    }
    if state.resources_enabled() {
        capabilities.insert(
            "resources".into(),
            json!({ "listChanged": true, "subscribe": state.subscriptions_enabled() }),
        );
    }
    capabilities.insert("completions".into(), json!({}));
    capabilities.insert("logging".into(), json!({}));
    if state.args.skills {
        let skills = json!({ crate::skills::EXTENSION: crate::skills::capability(state) });
        capabilities.insert("extensions".into(), skills);
    }
    crate::extension::declare(state, &mut capabilities);
    let mut result = json!({
        "supportedVersions": supported(state),
        "capabilities": capabilities,
    });
    if let Some(instructions) = &state.args.instructions {
        result["instructions"] = json!(instructions);
    }
    result
}

/// The error a stateless-era request gets for a capability it did not declare.
pub fn missing_capability(capability: &str, why: &str) -> RpcError {
    RpcError {
        code: codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
        message: format!("Missing required client capability {capability}: {why}"),
        data: Some(json!({ "requiredCapabilities": { capability: {} } })),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::exchange::Transport;
    use crate::Args;

    struct Nowhere;

    impl Transport for Nowhere {
        fn broadcast(&self, _: &[u8]) {}
        fn send_to(&self, _: &str, _: &[u8]) -> bool {
            false
        }
        fn exit(&self, code: i32) -> ! {
            std::process::exit(code)
        }
    }

    pub fn state(flags: &[&str]) -> State {
        let args = <Args as clap::Parser>::parse_from(
            ["fixture", "--name", "zed"].iter().chain(flags).copied(),
        );
        State::new(args, 1, Arc::new(Nowhere))
    }

    fn meta(extra: Value) -> Value {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        meta.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({ "_meta": meta })
    }

    #[test]
    fn requests_are_checked_in_order() {
        let s = state(&["--era", "stateless"]);
        for removed in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
            "tasks/get",
        ] {
            let e = accept(&s, removed, &json!({})).unwrap_err();
            assert_eq!(e.code, -32601, "{removed}");
        }
        let init = accept(&s, "initialize", &meta(json!({}))).unwrap_err();
        assert_eq!(init.data, Some(json!({ "supported": ["2026-07-28"] })));
        let bare = accept(&s, "tools/list", &json!({})).unwrap_err();
        assert_eq!(bare.code, -32602);
        assert!(bare.message.contains("protocolVersion") && bare.message.contains("clientCap"));
        let no_caps =
            json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } });
        let e = accept(&s, "tools/list", &no_caps).unwrap_err();
        assert!(e.message.contains("clientCapabilities") && !e.message.contains("protocolV"));
        let old = meta(json!({ "io.modelcontextprotocol/protocolVersion": "2025-11-25" }));
        let e = accept(&s, "server/discover", &old).unwrap_err();
        assert_eq!(e.code, -32022);
        assert_eq!(
            e.data,
            Some(json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" }))
        );
        let loud = meta(json!({ "io.modelcontextprotocol/logLevel": "loud" }));
        assert_eq!(accept(&s, "tools/list", &loud).unwrap_err().code, -32602);
        assert!(accept(&s, "server/discover", &meta(json!({}))).is_ok());
        // A dual server lists the session era too.
        let d = state(&["--era", "dual"]);
        let e = accept(&d, "tools/list", &old).unwrap_err();
        assert_eq!(e.data.unwrap()["supported"].as_array().unwrap().len(), 5);
        // Without resources, their methods do not exist.
        let bare = state(&["--era", "stateless", "--no-resources"]);
        assert_eq!(
            accept(&bare, "resources/read", &meta(json!({})))
                .unwrap_err()
                .code,
            -32601
        );
    }

    #[test]
    fn log_levels_filter_per_request() {
        let s = state(&["--era", "stateless"]);
        let quiet = accept(&s, "tools/call", &meta(json!({}))).unwrap();
        assert!(!quiet.wants_log(Some("emergency")));
        let warn = meta(json!({ "io.modelcontextprotocol/logLevel": "warning" }));
        let warn = accept(&s, "tools/call", &warn).unwrap();
        assert!(warn.wants_log(Some("error")) && warn.wants_log(Some("warning")));
        assert!(!warn.wants_log(Some("info")) && !warn.wants_log(None));
    }

    #[test]
    fn results_get_their_type_identity_and_cache_hints() {
        let s = state(&[
            "--era",
            "stateless",
            "--ttl-ms",
            "5000",
            "--cache-scope",
            "public",
        ]);
        let list = accept(&s, "tools/list", &meta(json!({}))).unwrap();
        let r = list.finish(json!({ "tools": [], "_meta": { "k": 1 } }));
        assert_eq!(r["resultType"], "complete");
        assert_eq!(
            (r["ttlMs"].clone(), r["cacheScope"].clone()),
            (json!(5000), json!("public"))
        );
        assert_eq!(r["_meta"]["k"], 1);
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/serverInfo"],
            json!({ "name": "zed", "version": "0.1.0" })
        );
        let call = accept(&s, "tools/call", &meta(json!({}))).unwrap();
        let r = call.finish(json!({ "content": [] }));
        assert!(r.get("ttlMs").is_none() && r.get("cacheScope").is_none());
        let read = accept(&s, "resources/read", &meta(json!({}))).unwrap();
        let pending = read.finish(json!({ "resultType": "input_required", "requestState": "x" }));
        assert!(
            pending.get("ttlMs").is_none(),
            "interim results are not cacheable"
        );
        // Defaults: immediately stale, private.
        let d = state(&["--era", "dual"]);
        let r = accept(&d, "resources/list", &meta(json!({})))
            .unwrap()
            .finish(json!({ "resources": [] }));
        assert_eq!(
            (r["ttlMs"].clone(), r["cacheScope"].clone()),
            (json!(0), json!("private"))
        );
    }

    #[test]
    fn the_first_request_chooses_the_era_of_a_dual_stdio_connection() {
        let msg = |text: &str| Incoming::parse(text.as_bytes()).unwrap();
        let d = state(&["--era", "dual"]);
        let note = msg(r#"{"method":"notifications/initialized"}"#);
        assert_eq!(of_stdio_message(&d, &note), Era::Session);
        assert!(
            d.stdio_era.get().is_none(),
            "a notification chooses nothing"
        );
        let modern = msg(
            r#"{"id":1,"method":"initialize","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        );
        assert_eq!(of_stdio_message(&d, &modern), Era::Stateless);
        let later = msg(r#"{"id":2,"method":"initialize","params":{}}"#);
        assert_eq!(of_stdio_message(&d, &later), Era::Stateless);
        let d = state(&["--era", "dual"]);
        assert_eq!(of_stdio_message(&d, &later), Era::Session);
        assert_eq!(of_stdio_message(&d, &modern), Era::Session);
        let s = state(&[]);
        assert_eq!(of_stdio_message(&s, &modern), Era::Session);
    }

    #[test]
    fn discover_lists_what_is_enabled() {
        let s = state(&["--era", "stateless", "--no-prompts", "--instructions", "hi"]);
        let r = discover(&s);
        assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
        assert!(r["capabilities"].get("prompts").is_none());
        assert_eq!(r["capabilities"]["resources"]["subscribe"], false);
        assert_eq!(r["instructions"], "hi");
        let e = missing_capability("sampling", "x");
        assert_eq!(e.code, -32021);
        assert_eq!(
            e.data.unwrap()["requiredCapabilities"],
            json!({ "sampling": {} })
        );
    }
}
