//! Request and notification routing.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::paging::paged;
use crate::rpc::RpcError;
use crate::state::State;
use crate::{calls, catalog, tools};

pub const SUPPORTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_VERSION: &str = "2025-11-25";
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

pub fn request(state: &Arc<State>, method: &str, id: Value, params: Value) {
    // tools/call first: it is the benchmarked path and may answer from another thread.
    if method == "tools/call" {
        return calls::call(state, id, params);
    }
    let page_size = state.args.page_size;
    let reply = match method {
        "ping" => Ok(json!({})),
        "initialize" => Ok(initialize(state, &params)),
        "tools/list" => tools::list(state, &params),
        "prompts/list" if state.prompts_enabled() => paged(
            state.prompts.iter(),
            state.prompts.len(),
            "prompts",
            &params,
            page_size,
        ),
        "prompts/get" if state.prompts_enabled() => catalog::get_prompt(state, &params),
        "resources/list" if state.resources_enabled() => paged(
            state.resources.iter(),
            state.resources.len(),
            "resources",
            &params,
            page_size,
        ),
        "resources/templates/list" if state.resources_enabled() => paged(
            state.templates.iter(),
            state.templates.len(),
            "resourceTemplates",
            &params,
            page_size,
        ),
        "resources/read" if state.resources_enabled() => {
            catalog::read_resource(&state.args.name, &params)
        }
        "completion/complete" => catalog::complete(state, &params),
        "logging/setLevel" => return set_level(state, &id, &params),
        other => Err(RpcError::method_not_found(other)),
    };
    state.out.reply(&id, reply);
}

pub fn notification(state: &State, method: &str, params: &Value) {
    // Everything else (initialized, roots/list_changed, ...) needs no action from a fixture.
    if method == "notifications/cancelled" {
        if let Some(request_id) = params.get("requestId") {
            state.cancel(request_id);
        }
    }
}

/// The version to answer: the forced one, else the client's if supported, else the latest.
pub fn negotiate(forced: Option<&str>, requested: Option<&str>) -> String {
    if let Some(forced) = forced {
        return forced.to_owned();
    }
    match requested {
        Some(v) if SUPPORTED_VERSIONS.contains(&v) => v.to_owned(),
        _ => LATEST_VERSION.to_owned(),
    }
}

fn initialize(state: &State, params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = negotiate(state.args.protocol_version.as_deref(), requested);
    let mut capabilities = Map::new();
    capabilities.insert("tools".into(), json!({ "listChanged": true }));
    if state.prompts_enabled() {
        capabilities.insert("prompts".into(), json!({ "listChanged": true }));
    }
    if state.resources_enabled() {
        capabilities.insert(
            "resources".into(),
            json!({ "listChanged": true, "subscribe": false }),
        );
    }
    capabilities.insert("completions".into(), json!({}));
    capabilities.insert("logging".into(), json!({}));
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": { "name": state.args.name, "version": "0.1.0" },
    });
    if let Some(instructions) = &state.args.instructions {
        result["instructions"] = json!(instructions);
    }
    result
}

fn set_level(state: &State, id: &Value, params: &Value) {
    let level = match params.get("level").and_then(Value::as_str) {
        Some(level) if LOG_LEVELS.contains(&level) => level,
        _ => {
            return state.out.error(
                id,
                &RpcError::invalid_params(format!("Invalid log level: {params}")),
            )
        }
    };
    state.out.result(id, &json!({}));
    // Sent after the response so tests can rely on the order.
    let note = json!({ "level": level, "logger": state.args.name, "data": format!("level set to {level}") });
    state.out.notify("notifications/message", &note);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(None, Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(None, Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate(None, Some("1999-01-01")), LATEST_VERSION);
        assert_eq!(negotiate(None, None), LATEST_VERSION);
        assert_eq!(
            negotiate(Some("2099-01-01"), Some("2025-06-18")),
            "2099-01-01"
        );
    }
}
