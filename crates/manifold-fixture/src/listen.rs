//! `subscriptions/listen` (stateless era): the long-lived request whose stream carries the
//! change notifications a client opted in to, in place of the session era's own stream and
//! `resources/subscribe`.
//!
//! The fixture first sends `notifications/subscriptions/acknowledged` with the part of the
//! filter it honours (prompts and resources only when it has them; `resourceSubscriptions`
//! only when it can tell of resource updates: --conformance or --subscriptions). Then, on
//! the same stream and only when asked for, `notifications/tools/list_changed` (`add_tool`,
//! `test_trigger_tool_change`), `notifications/prompts/list_changed`
//! (`test_trigger_prompt_change`) and `notifications/resources/updated` for the subscribed
//! URIs (`touch`; with --conformance alone, one right after the acknowledgement, as
//! `resources/subscribe` does in the session era). Every one of them carries
//! `_meta["io.modelcontextprotocol/subscriptionId"]`, the id of the listen request.
//!
//! Over HTTP the stream is the POST's SSE response, which stays open until the client closes
//! it (that ends the subscription). Over stdio it is stdout: the client ends a subscription
//! with `notifications/cancelled` naming the listen request, and when stdin closes the fixture
//! ends every open one with `notifications/cancelled` of its own, as the schema asks of a
//! server tearing a stdio subscription down.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use manifold_protocol::version::meta;
use serde_json::{json, Map, Value};

use crate::exchange::{Call, Sink};
use crate::rpc::{self, RpcError};
use crate::state::State;

/// A change a listen stream may be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    Tools,
    Prompts,
    /// `notifications/resources/updated` for this URI.
    Updated(&'a str),
}

impl Change<'_> {
    /// The list_changed notification of a list change.
    pub fn list_changed(&self) -> Option<&'static str> {
        match self {
            Change::Tools => Some("notifications/tools/list_changed"),
            Change::Prompts => Some("notifications/prompts/list_changed"),
            Change::Updated(_) => None,
        }
    }
}

/// What one listen stream opted in to (and the fixture honours). The resource list never
/// changes, but the capability says it may: `resourcesListChanged` is acknowledged.
#[derive(Debug, Default, Clone, PartialEq)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: Option<Vec<String>>,
}

impl Filter {
    /// The part of `requested` the fixture honours.
    fn honoured(state: &State, requested: &Map<String, Value>) -> Result<Self, RpcError> {
        let flag = |key: &str| requested.get(key).and_then(Value::as_bool) == Some(true);
        let uris = match requested.get("resourceSubscriptions") {
            None => None,
            Some(Value::Array(uris)) => {
                let uris: Option<Vec<String>> =
                    uris.iter().map(|u| u.as_str().map(str::to_owned)).collect();
                Some(uris.ok_or_else(|| {
                    RpcError::invalid_params("resourceSubscriptions must be a list of URIs")
                })?)
            }
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "resourceSubscriptions must be a list of URIs",
                ))
            }
        };
        Ok(Self {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged") && state.prompts_enabled(),
            resources: flag("resourcesListChanged") && state.resources_enabled(),
            uris: uris.filter(|_| state.subscriptions_enabled()),
        })
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                out.insert(key.into(), json!(true));
            }
        }
        if let Some(uris) = &self.uris {
            out.insert("resourceSubscriptions".into(), json!(uris));
        }
        Value::Object(out)
    }

    fn wants(&self, change: &Change) -> bool {
        match change {
            Change::Tools => self.tools,
            Change::Prompts => self.prompts,
            Change::Updated(uri) => self
                .uris
                .as_ref()
                .is_some_and(|uris| uris.iter().any(|u| u == uri)),
        }
    }
}

struct Listen {
    /// The listen request's key (`exchange::request_key`).
    key: String,
    id: Value,
    filter: Filter,
    sink: Arc<dyn Sink>,
}

impl Listen {
    fn send(&self, method: &str, mut params: Value) {
        if let Some(params) = params.as_object_mut() {
            params.insert(
                "_meta".into(),
                json!({ meta::SUBSCRIPTION_ID: self.id.clone() }),
            );
        }
        self.sink.send(rpc::notification(method, &params));
    }
}

/// The open listen streams.
#[derive(Default)]
pub struct Listens {
    open: Mutex<Vec<Listen>>,
}

impl Listens {
    fn lock(&self) -> MutexGuard<'_, Vec<Listen>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells every stream that opted in to `change`; how many were told. Sent under the
    /// lock, so no notification overtakes an acknowledgement.
    pub fn deliver(&self, change: &Change) -> usize {
        let open = self.lock();
        let mut told = 0;
        for listen in open.iter().filter(|l| l.filter.wants(change)) {
            match change {
                Change::Updated(uri) => {
                    listen.send("notifications/resources/updated", json!({ "uri": uri }));
                }
                list => {
                    if let Some(method) = list.list_changed() {
                        listen.send(method, json!({}));
                    }
                }
            }
            told += 1;
        }
        told
    }

    /// Forgets the stream of listen request `key` (its client ended it); sends nothing.
    pub fn end(&self, key: &str) -> bool {
        let mut open = self.lock();
        let before = open.len();
        open.retain(|l| l.key != key);
        open.len() != before
    }

    /// Ends every stdio stream as a server shutting down does: `notifications/cancelled`
    /// naming its listen request.
    pub fn tear_down(&self) {
        let mut open = self.lock();
        for listen in open.drain(..) {
            let params = json!({ "requestId": listen.id, "reason": "the server is shutting down" });
            listen.send("notifications/cancelled", params);
        }
    }
}

/// Answers a `subscriptions/listen` request: acknowledges it and keeps its stream.
pub fn open(state: &State, call: Call, params: &Value) {
    let Some(requested) = params.get("notifications").and_then(Value::as_object) else {
        return call.error(RpcError::invalid_params(
            "subscriptions/listen needs `notifications`, the filter of what to send",
        ));
    };
    let filter = match Filter::honoured(state, requested) {
        Ok(filter) => filter,
        Err(e) => return call.error(e),
    };
    let listen = Listen {
        key: call.key(),
        id: call.id.clone(),
        filter,
        sink: call.sink(),
    };
    let confirm = state.args.conformance && !state.args.subscriptions;
    let mut open = state.listens.lock();
    listen.send(
        "notifications/subscriptions/acknowledged",
        json!({ "notifications": listen.filter.to_json() }),
    );
    if confirm {
        for uri in listen.filter.uris.iter().flatten() {
            listen.send("notifications/resources/updated", json!({ "uri": uri }));
        }
    }
    open.push(listen);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(flags: &[&str]) -> State {
        crate::era::tests::state(flags)
    }

    fn honoured(state: &State, requested: Value) -> Value {
        Filter::honoured(state, requested.as_object().unwrap())
            .unwrap()
            .to_json()
    }

    #[test]
    fn only_what_the_fixture_can_tell_is_acknowledged() {
        let all = json!({ "toolsListChanged": true, "promptsListChanged": true,
                          "resourcesListChanged": true, "resourceSubscriptions": ["u"] });
        assert_eq!(
            honoured(&state(&["--conformance"]), all.clone()),
            all,
            "everything"
        );
        assert_eq!(
            honoured(&state(&["--no-prompts"]), all.clone()),
            json!({ "toolsListChanged": true, "resourcesListChanged": true })
        );
        assert_eq!(
            honoured(&state(&[]), json!({ "toolsListChanged": false })),
            json!({})
        );
        let bad = json!({ "resourceSubscriptions": [1] });
        assert!(Filter::honoured(&state(&[]), bad.as_object().unwrap()).is_err());
    }

    #[test]
    fn filters_choose_the_changes() {
        let s = state(&["--subscriptions"]);
        let f = Filter::honoured(
            &s,
            json!({ "promptsListChanged": true, "resourceSubscriptions": ["a"] })
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert!(f.wants(&Change::Prompts) && f.wants(&Change::Updated("a")));
        assert!(!f.wants(&Change::Tools) && !f.wants(&Change::Updated("b")));
        assert_eq!(Change::Updated("a").list_changed(), None);
    }
}
