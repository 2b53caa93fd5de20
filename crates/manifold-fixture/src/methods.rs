//! Request and notification routing.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::exchange::{log_params, request_key, Call, Sink};
use crate::paging::paged;
use crate::rpc::{Incoming, RpcError};
use crate::state::State;
use crate::{calls, catalog, extension, skills, subscriptions, tasks, tools};

pub const SUPPORTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST_VERSION: &str = "2025-11-25";

/// Handles one message from a client whose messages about it go to `sink`.
pub fn dispatch(state: &Arc<State>, mut msg: Incoming, sink: Arc<dyn Sink>) {
    let Some(method) = msg.method.take() else {
        // A response: the fixture's only requests are its own questions to the client.
        return response(state, msg);
    };
    match msg.id.take() {
        Some(id) => request(state, Call::new(id, sink), &method, msg.params),
        None => notification(state, sink.client(), &method, &msg.params),
    }
}

fn request(state: &Arc<State>, call: Call, method: &str, params: Value) {
    // tools/call first: it is the benchmarked path and may answer from another thread.
    if method == "tools/call" {
        return calls::call(state, call, params);
    }
    let reply = match method {
        "ping" => Ok(json!({})),
        "initialize" => {
            let capabilities = params.get("capabilities").unwrap_or(&Value::Null);
            state.remember_capabilities(call.client(), capabilities);
            Ok(initialize(state, &params))
        }
        "prompts/get" if state.prompts_enabled() => {
            return catalog::prompt_request(state, call, params)
        }
        "resources/read" if state.resources_enabled() => catalog::read(state, &params),
        "resources/subscribe" | "resources/unsubscribe" if state.subscriptions_enabled() => {
            return subscription(state, &call, method, &params)
        }
        _ if state.args.skills && skills::is_method(method) => {
            skills::request(state, method, &params)
        }
        _ if state.args.tasks && tasks::is_method(method) => {
            return tasks::request(state, call, method, &params)
        }
        "logging/setLevel" => return set_level(state, &call, &params),
        other => listing(state, other, &params)
            .or_else(|| extension::answer(state, other, &params))
            .unwrap_or_else(|| Err(RpcError::method_not_found(other))),
    };
    call.reply(reply);
}

/// The lists and completion, the same in both eras; None for any other method.
pub fn listing(state: &State, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
    let page_size = state.args.page_size;
    Some(match method {
        "tools/list" => tools::list(state, params),
        "prompts/list" if state.prompts_enabled() => catalog::list_prompts(state, params),
        "resources/list" if state.resources_enabled() => paged(
            state.resources.iter(),
            state.resources.len(),
            "resources",
            params,
            page_size,
        ),
        "resources/templates/list" if state.resources_enabled() => paged(
            state.templates.iter(),
            state.templates.len(),
            "resourceTemplates",
            params,
            page_size,
        ),
        "completion/complete" => catalog::complete(state, params),
        _ => return None,
    })
}

fn notification(state: &State, client: &str, method: &str, params: &Value) {
    // Everything else (initialized, roots/list_changed, ...) needs no action from a fixture.
    if method == "notifications/cancelled" {
        if let Some(request_id) = params.get("requestId") {
            state.cancel(&request_key(client, request_id));
        }
    }
    extension::heard(state, method);
}

/// A client's answer to one of the fixture's requests (roots, sampling, elicitation):
/// handed to the call waiting for it. An answer nobody waits for is dropped, as for any late
/// answer.
pub fn response(state: &State, msg: Incoming) {
    let Some(id) = msg.id else { return };
    let answer = match (msg.result, msg.error) {
        (Some(result), _) => Ok(result),
        (None, Some(error)) => Err(error),
        (None, None) => Err(json!({ "code": -32603, "message": "answer without result or error" })),
    };
    state.resolve(&id, answer);
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
            json!({ "listChanged": true, "subscribe": state.subscriptions_enabled() }),
        );
    }
    capabilities.insert("completions".into(), json!({}));
    capabilities.insert("logging".into(), json!({}));
    if state.args.tasks {
        capabilities.insert("tasks".into(), tasks::capability());
    }
    if state.args.skills {
        let skills = json!({ skills::EXTENSION: skills::capability(state) });
        capabilities.insert("extensions".into(), skills);
    }
    extension::declare(state, &mut capabilities);
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

fn set_level(state: &State, call: &Call, params: &Value) {
    let level = match params.get("level").and_then(Value::as_str) {
        Some(level) if manifold_protocol::LOG_LEVELS.contains(&level) => level,
        _ => {
            return call.error(RpcError::invalid_params(format!(
                "Invalid log level: {params}"
            )))
        }
    };
    call.result(json!({}));
    // Sent after the response so tests can rely on the order (over HTTP it goes to the
    // session's own stream, as the POST's ended with the response).
    let note = log_params(level, &state.args.name, format!("level set to {level}"));
    call.notify("notifications/message", &note);
}

/// resources/subscribe and unsubscribe. With --subscriptions they are remembered per client
/// (see `subscriptions`). With --conformance alone: the fixture's resources never change,
/// so a subscription is confirmed with one `notifications/resources/updated` right after
/// the answer, letting tests see where such notifications go.
fn subscription(state: &State, call: &Call, method: &str, params: &Value) {
    if state.args.subscriptions {
        return subscriptions::request(state, call, method, params);
    }
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return call.error(RpcError::invalid_params("Missing uri"));
    };
    call.result(json!({}));
    if method == "resources/subscribe" {
        call.notify("notifications/resources/updated", &json!({ "uri": uri }));
    }
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
