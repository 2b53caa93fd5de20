//! `--extension NAME[=SETTINGS]` and `--extension-method METHOD`: an extension Manifold does
//! not know, declared under `capabilities.extensions` (in `initialize` and `server/discover`)
//! with SETTINGS (a JSON object; `{}` when left out), and one method of it that echoes what it
//! was sent. The echo names the `uri` it was given at its top level (so a test sees the URI as
//! the upstream got it, and as the host gets it back) and every notification of a method the
//! fixture does not know that it heard so far (so a test sees where a host's went).

use std::sync::Mutex;

use serde_json::{json, Map, Value};

use crate::rpc::RpcError;
use crate::state::State;

/// Notifications of unknown methods heard so far, by method, in order.
static HEARD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Adds the declared extension to `capabilities`, if one was asked for.
pub fn declare(state: &State, capabilities: &mut Map<String, Value>) {
    let Some(spec) = &state.args.extension else {
        return;
    };
    let (name, settings) = match spec.split_once('=') {
        Some((name, settings)) => (name, settings),
        None => (spec.as_str(), "{}"),
    };
    let settings = match serde_json::from_str::<Value>(settings) {
        Ok(settings @ Value::Object(_)) => settings,
        _ => {
            eprintln!("manifold-fixture: --extension {spec}: the settings must be a JSON object");
            std::process::exit(2);
        }
    };
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| json!({}));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(name.to_owned(), settings);
    }
}

/// The answer to `method` when it is the extension's method; `None` for any other.
pub fn answer(state: &State, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
    if state.args.extension_method.as_deref() != Some(method) {
        return None;
    }
    let heard = HEARD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Some(Ok(json!({
        "server": state.args.name,
        "method": method,
        "params": params,
        "uri": params.get("uri").cloned().unwrap_or(Value::Null),
        "heard": heard,
    })))
}

/// Remembers a notification of a method the fixture has no use for, when it declares an
/// extension (its methods' notifications are what a test looks for).
pub fn heard(state: &State, method: &str) {
    if state.args.extension.is_some() && !method.starts_with("notifications/cancelled") {
        HEARD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(method.to_owned());
    }
}
