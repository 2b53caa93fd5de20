//! The stateless era (protocol revision 2026-07-28) on the hosts' side: what a request says
//! about its sender in `params._meta` (there is no `initialize` to say it once), and what
//! every answer to such a request carries (`resultType`, and Manifold's server info in
//! `_meta`).
//!
//! Nothing here is kept between requests: a stateless request is served from what it carries,
//! so any replica can serve it.

use std::borrow::Cow;

use manifold_protocol::version::{self, meta};
use manifold_protocol::{needle, RawObject, LOG_LEVELS};

use crate::error::RouteError;
use crate::session::Client;

/// Manifold's name and version, as results' `_meta` gives them.
pub const SERVER_INFO: &str = concat!(
    "{\"name\":\"manifold\",\"version\":\"",
    env!("CARGO_PKG_VERSION"),
    "\"}"
);

/// How long a stateless host may keep a list Manifold serves when no upstream in it says
/// (`ttlMs`): lists change rarely, and `subscriptions/listen` tells of every change at once.
pub const LIST_TTL_MS: u64 = 60_000;

/// A `cacheScope`: `private` (what is served depends on who asks: the caller belongs to a
/// team, or an upstream said so), `public` otherwise.
pub fn scope(private: bool) -> &'static str {
    if private {
        "\"private\""
    } else {
        "\"public\""
    }
}

/// The hints on a resource's contents when the upstream gave none: not to be kept (nothing
/// says how long they stay true), within the caller's authorization context if it has one.
pub fn read_hints(team: bool) -> &'static [(&'static str, &'static str)] {
    if team {
        &[("ttlMs", "0"), ("cacheScope", "\"private\"")]
    } else {
        &[("ttlMs", "0"), ("cacheScope", "\"public\"")]
    }
}

/// What a stateless request declares about its sender.
#[derive(Debug)]
pub struct Asked {
    /// The revision it is spoken in.
    pub version: &'static str,
    /// Its client capabilities and client info, for this request alone.
    pub client: Client,
    /// The least severe log level the host wants to hear for this request (an index into
    /// `LOG_LEVELS`); `None`: no log messages at all.
    pub log_level: Option<u8>,
}

impl Asked {
    /// Whether the host declared capability `name` with this request.
    pub fn declares(&self, name: &str) -> bool {
        self.client.declares(name)
    }

    /// Whether the host declared extension `name` (under `capabilities.extensions`).
    pub fn declares_extension(&self, name: &str) -> bool {
        RawObject::parse(&self.client.capabilities)
            .ok()
            .and_then(|c| c.get("extensions").map(str::to_owned))
            .and_then(|e| {
                RawObject::parse(&e)
                    .ok()
                    .and_then(|e| e.get(name).map(|v| v != "null"))
            })
            .unwrap_or(false)
    }
}

/// Reads what a request declares in `params._meta`. `Ok(None)`: it names no revision there
/// (a session-era request). A revision Manifold does not speak, or one of the session era
/// named per request, is refused as unsupported.
pub fn read(params: Option<&str>) -> Result<Option<Asked>, RouteError> {
    let Some(params) = params else {
        return Ok(None);
    };
    if needle::PROTOCOL_VERSION_META
        .find(params.as_bytes())
        .is_none()
    {
        return Ok(None);
    }
    match RawObject::parse(params) {
        Ok(obj) => read_object(&obj),
        Err(_) => Ok(None),
    }
}

/// [`read`], for params already parsed.
pub fn read_object(params: &RawObject<'_>) -> Result<Option<Asked>, RouteError> {
    let Some(m) = params.get("_meta") else {
        return Ok(None);
    };
    let m = RawObject::parse(m)
        .map_err(|_| RouteError::InvalidParams("_meta must be an object".into()))?;
    let Some(requested) = m.get_str(meta::PROTOCOL_VERSION) else {
        return Ok(None);
    };
    let version = version::known(&requested)
        .filter(|v| version::era_of(v) == Some(version::Era::Stateless))
        .ok_or_else(|| RouteError::UnsupportedVersion {
            requested: requested.into_owned(),
        })?;
    let capabilities = match m.get(meta::CLIENT_CAPABILITIES) {
        Some(c) if c.trim_start().starts_with('{') => c.into(),
        Some(_) => {
            return Err(RouteError::InvalidParams(format!(
                "_meta[{:?}] must be an object",
                meta::CLIENT_CAPABILITIES
            )))
        }
        None => {
            return Err(RouteError::InvalidParams(format!(
                "_meta[{:?}] is required in protocol revision {version}",
                meta::CLIENT_CAPABILITIES
            )))
        }
    };
    let log_level = match m.get_str(meta::LOG_LEVEL) {
        None => None,
        Some(level) => Some(
            LOG_LEVELS
                .iter()
                .position(|l| *l == level)
                .and_then(|i| u8::try_from(i).ok())
                .ok_or_else(|| RouteError::InvalidParams(format!("unknown log level {level:?}")))?,
        ),
    };
    Ok(Some(Asked {
        version,
        client: Client {
            capabilities,
            info: m.get(meta::CLIENT_INFO).map(Box::from),
        },
        log_level,
    }))
}

/// `result` as a stateless host gets it: `resultType` (`complete` unless the result names
/// one, as an upstream's `input_required` does), Manifold's server info in `_meta`, and the
/// `extra` members (raw JSON values) the result does not have yet. A result that names none
/// of them (every session-era upstream's) is not parsed: the members are put first.
pub fn complete<'a>(result: &'a str, extra: &[(&str, &str)]) -> Cow<'a, str> {
    let bytes = result.as_bytes();
    let untouched = needle::RESULT_TYPE.find(bytes).is_none()
        && needle::META_MEMBER.find(bytes).is_none()
        && extra
            .iter()
            .all(|(k, _)| memchr::memmem::find(bytes, k.as_bytes()).is_none());
    if untouched {
        if let Some(rest) = result.trim_start().strip_prefix('{') {
            let mut out = String::with_capacity(result.len() + 128);
            out.push_str("{\"resultType\":\"complete\",");
            for (key, value) in extra {
                out.push('"');
                out.push_str(key);
                out.push_str("\":");
                out.push_str(value);
                out.push(',');
            }
            out.push_str("\"_meta\":{\"");
            out.push_str(meta::SERVER_INFO);
            out.push_str("\":");
            out.push_str(SERVER_INFO);
            out.push('}');
            if !rest.trim_start().starts_with('}') {
                out.push(',');
            }
            out.push_str(rest);
            return Cow::Owned(out);
        }
    }
    let Ok(mut obj) = RawObject::parse(result) else {
        return Cow::Borrowed(result);
    };
    if obj.get("resultType").is_none() {
        obj.set_raw("resultType", "\"complete\"");
    }
    for (key, value) in extra {
        if obj.get(key).is_none() {
            obj.set_raw(key, *value);
        }
    }
    let given = obj.get("_meta").and_then(|m| RawObject::parse(m).ok());
    let m = match given {
        Some(mut m) => {
            m.set_raw(meta::SERVER_INFO, SERVER_INFO);
            m.to_text()
        }
        None => format!("{{\"{}\":{SERVER_INFO}}}", meta::SERVER_INFO),
    };
    obj.set_raw("_meta", m);
    Cow::Owned(obj.to_text())
}

/// The `_meta` keys a stateless host declares itself with: Manifold's own business, not the
/// upstream's (which hears Manifold's, in its own era).
pub const HOST_KEYS: [&str; 4] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_CAPABILITIES,
    meta::CLIENT_INFO,
    meta::LOG_LEVEL,
];

/// Whether a host whose capabilities are `capabilities` (JSON text) may be asked `method`
/// with `params`: the capability the method needs, and for an elicitation in URL mode, that
/// mode (a bare `elicitation` capability means form mode only).
pub fn may_ask(capabilities: &str, method: &str, params: Option<&str>) -> Result<(), &'static str> {
    let needs = match method {
        "sampling/createMessage" => "sampling",
        "elicitation/create" => "elicitation",
        "roots/list" => "roots",
        _ => return Err("unknown"),
    };
    let caps = RawObject::parse(capabilities).ok();
    let declared = caps
        .as_ref()
        .and_then(|c| c.get(needs))
        .filter(|v| *v != "null");
    let Some(declared) = declared else {
        return Err(needs);
    };
    if needs == "elicitation" {
        let url_mode = params
            .and_then(|p| RawObject::parse(p).ok())
            .and_then(|p| p.get_str("mode").map(|m| m == "url"))
            .unwrap_or(false);
        let url_declared = RawObject::parse(declared)
            .ok()
            .is_some_and(|d| d.get("url").is_some_and(|v| v != "null"));
        if url_mode && !url_declared {
            return Err("elicitation.url");
        }
    }
    Ok(())
}

/// Whether a result is an `input_required` one (a multi round-trip request's interim answer).
pub fn is_input_required(result: &str) -> bool {
    needle::INPUT_REQUIRED.find(result.as_bytes()).is_some()
        && RawObject::parse(result)
            .ok()
            .and_then(|o| o.get_str("resultType").map(|t| t == "input_required"))
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> serde_json::Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    #[test]
    fn a_request_names_its_revision_and_capabilities_in_meta() {
        assert!(read(Some(r#"{"name":"x"}"#)).unwrap().is_none());
        assert!(read(None).unwrap().is_none());
        let asked = read(Some(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},
                "io.modelcontextprotocol/clientInfo":{"name":"h","version":"1"},
                "io.modelcontextprotocol/logLevel":"warning"}}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(asked.version, "2026-07-28");
        assert!(asked.declares("elicitation"));
        assert!(!asked.declares("sampling"));
        assert_eq!(asked.log_level, Some(3));
        assert_eq!(
            asked.client.info.as_deref(),
            Some(r#"{"name":"h","version":"1"}"#)
        );
    }

    #[test]
    fn an_unknown_or_session_era_revision_per_request_is_unsupported() {
        for v in ["2099-01-01", "2025-11-25"] {
            let params = format!(
                r#"{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"{v}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#
            );
            let err = read(Some(&params)).unwrap_err();
            let obj = err.error_object(manifold_protocol::version::Era::Stateless);
            assert_eq!(obj.code, -32022, "{v}");
            let data = value(obj.data.unwrap().get());
            assert_eq!(data["requested"], v);
            assert!(data["supported"]
                .as_array()
                .unwrap()
                .contains(&"2026-07-28".into()));
        }
        let missing = read(Some(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
        ));
        assert_eq!(
            missing
                .unwrap_err()
                .error_object(manifold_protocol::version::Era::Stateless)
                .code,
            -32602
        );
    }

    #[test]
    fn what_the_host_declared_about_itself_is_not_forwarded() {
        let params = r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"h","version":"1"},"io.modelcontextprotocol/logLevel":"info","progressToken":7}}"#;
        // As the forwarding path writes a request: the host's keys taken out of `_meta`.
        let without_host_meta = |params: &str| {
            let mut edits = manifold_protocol::object::Edits::default();
            edits.meta_remove(&HOST_KEYS);
            let mut line = Vec::new();
            manifold_protocol::write::request_edited(&mut line, 1, "m", Some(params), &edits)
                .unwrap();
            let line: serde_json::Value = serde_json::from_slice(&line).unwrap();
            line["params"].clone()
        };
        let out = without_host_meta(params);
        assert_eq!(out, value(r#"{"name":"t","_meta":{"progressToken":7}}"#));
        let bare = r#"{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}"#;
        assert_eq!(without_host_meta(bare), value(r#"{"name":"t"}"#));
        let kept = r#"{"name":"t","_meta":{"progressToken":1}}"#;
        assert_eq!(without_host_meta(kept), value(kept));
    }

    #[test]
    fn a_host_is_asked_only_what_it_declared_it_answers() {
        let form = r#"{"elicitation":{}}"#;
        let both = r#"{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{}}"#;
        let url = Some(r#"{"mode":"url","url":"https://x","message":"m"}"#);
        let plain = Some(r#"{"message":"m","requestedSchema":{}}"#);
        assert_eq!(may_ask(form, "elicitation/create", plain), Ok(()));
        assert_eq!(
            may_ask(form, "elicitation/create", url),
            Err("elicitation.url")
        );
        assert_eq!(may_ask(both, "elicitation/create", url), Ok(()));
        assert_eq!(
            may_ask(form, "sampling/createMessage", None),
            Err("sampling")
        );
        assert_eq!(may_ask(both, "roots/list", None), Ok(()));
        assert_eq!(may_ask(both, "tools/list", None), Err("unknown"));
    }

    #[test]
    fn results_say_they_are_complete_and_who_served_them() {
        for (given, extra) in [
            (r#"{"content":[]}"#, &[][..]),
            (r#"{}"#, &[][..]),
            (
                r#"{"tools":[],"_meta":{"x":1}}"#,
                &[("ttlMs", "0"), ("cacheScope", "\"private\"")][..],
            ),
            (r#"{"tools":[]}"#, &[("ttlMs", "5")][..]),
        ] {
            let out = value(&complete(given, extra));
            assert_eq!(out["resultType"], "complete", "{given}");
            assert_eq!(
                out["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
                "manifold"
            );
            for (k, v) in extra {
                assert_eq!(out[*k], value(v), "{given}");
            }
        }
        let kept = value(&complete(
            r#"{"resultType":"input_required","ttlMs":9,"_meta":{"x":1}}"#,
            &[("ttlMs", "0")],
        ));
        assert_eq!(kept["resultType"], "input_required");
        assert_eq!(kept["ttlMs"], 9);
        assert_eq!(kept["_meta"]["x"], 1);
        assert!(is_input_required(r#"{"resultType":"input_required"}"#));
        assert!(!is_input_required(
            r#"{"content":[{"type":"text","text":"input_required"}]}"#
        ));
    }
}
