//! `--subscriptions`: resources/subscribe and unsubscribe remembered per client (the one
//! stdio client, or each HTTP session), and two tools to drive them: `touch` sends
//! `notifications/resources/updated` to every client subscribed to a URI, `subscriptions`
//! shows what the calling client is subscribed to. Unlike `--conformance`, subscribing sends
//! no update: tests decide when a resource "changes".

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{json, Value};

use crate::calls::{arg_str, text_result, tool_error};
use crate::exchange::Call;
use crate::listen::Change;
use crate::rpc::{self, RpcError};
use crate::state::State;
use crate::tools::descriptor;
use crate::Args;

/// The subscribed URIs of every client, by client name (`Sink::client`). Sets are sorted
/// so `subscriptions` answers the same text whatever the order of subscribing.
#[derive(Default)]
pub struct Subscriptions {
    by_client: Mutex<HashMap<String, BTreeSet<String>>>,
}

impl Subscriptions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, BTreeSet<String>>> {
        self.by_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes `client` to `uri`, or unsubscribes it (a no-op if it was not subscribed).
    pub fn set(&self, client: &str, uri: &str, subscribed: bool) {
        let mut by_client = self.lock();
        if subscribed {
            let uris = by_client.entry(client.to_owned()).or_default();
            uris.insert(uri.to_owned());
        } else if let Some(uris) = by_client.get_mut(client) {
            uris.remove(uri);
            if uris.is_empty() {
                by_client.remove(client);
            }
        }
    }

    /// The URIs `client` is subscribed to, sorted.
    pub fn of(&self, client: &str) -> Vec<String> {
        let by_client = self.lock();
        by_client
            .get(client)
            .map(|uris| uris.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The clients subscribed to `uri`, sorted (so notifications go out in a stable order).
    pub fn subscribers(&self, uri: &str) -> Vec<String> {
        let by_client = self.lock();
        let mut clients: Vec<String> = by_client
            .iter()
            .filter(|(_, uris)| uris.contains(uri))
            .map(|(client, _)| client.clone())
            .collect();
        clients.sort();
        clients
    }
}

/// resources/subscribe and unsubscribe: remembered for the calling client, answered `{}`.
pub fn request(state: &State, call: &Call, method: &str, params: &Value) {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return call.error(RpcError::invalid_params("Missing uri"));
    };
    let subscribed = method == "resources/subscribe";
    state.subscriptions.set(call.client(), uri, subscribed);
    call.result(json!({}));
}

const URI_PROP: &str = r#"{"uri": {"type": "string"}}"#;

pub fn tools(args: &Args) -> Vec<Value> {
    let server = &args.name;
    let uri = serde_json::from_str(URI_PROP).unwrap_or_else(|_| json!({}));
    vec![
        descriptor(
            "touch",
            format!(
                "Sends notifications/resources/updated for `uri` to every client subscribed \
                 to it and returns how many (fixture server {server})."
            ),
            uri,
            &["uri"],
        ),
        descriptor(
            "subscriptions",
            format!(
                "Returns the JSON array of URIs this client is subscribed to (fixture server \
                 {server})."
            ),
            json!({}),
            &[],
        ),
    ]
}

pub fn is_tool(name: &str) -> bool {
    matches!(name, "touch" | "subscriptions")
}

/// Runs subscription tool `name` (`is_tool` said it is one).
pub fn call_tool(state: &State, call: &Call, name: &str, args: &Value) -> Value {
    if name == "subscriptions" {
        let uris = state.subscriptions.of(call.client());
        return text_result(json!(uris).to_string());
    }
    match arg_str(args, "uri") {
        Ok(uri) => text_result(format!("touched {}", touch(state, uri))),
        Err(e) => tool_error(e),
    }
}

/// Notifies every session-era client subscribed to `uri` on its own stream, and every listen
/// stream subscribed to it (stateless era); how many were reached.
fn touch(state: &State, uri: &str) -> usize {
    let line = rpc::notification("notifications/resources/updated", &json!({ "uri": uri }));
    let sessions = state
        .subscriptions
        .subscribers(uri)
        .iter()
        .filter(|client| state.transport.send_to(client, &line))
        .count();
    sessions + state.changed(&Change::Updated(uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_per_client_sorted_and_undone() {
        let subs = Subscriptions::default();
        subs.set("a", "u2", true);
        subs.set("a", "u1", true);
        subs.set("a", "u1", true);
        subs.set("b", "u2", true);
        assert_eq!(subs.of("a"), ["u1", "u2"]);
        assert_eq!(subs.subscribers("u2"), ["a", "b"]);
        subs.set("b", "u2", false);
        subs.set("b", "never", false);
        assert!(subs.of("b").is_empty());
        assert_eq!(subs.subscribers("u2"), ["a"]);
        assert!(subs.subscribers("u3").is_empty());
    }

    #[test]
    fn both_tools_are_listed() {
        let args = <Args as clap::Parser>::parse_from(["fixture"]);
        for tool in tools(&args) {
            assert!(is_tool(tool["name"].as_str().unwrap_or_default()));
        }
        assert!(!is_tool("echo"));
    }
}
