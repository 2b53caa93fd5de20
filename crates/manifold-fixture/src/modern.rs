//! Request and notification routing of the stateless era (2026-07-28): the same handlers as
//! the session era's (`methods`), behind the checks and with the additions of `era`.

use std::sync::Arc;

use manifold_protocol::codes;
use serde_json::Value;

use crate::exchange::{request_key, Call, Sink};
use crate::rpc::{Incoming, RpcError};
use crate::state::State;
use crate::{calls, catalog, era, extension, listen, methods};

/// Handles one stateless-era message from a client whose messages about it go to `sink`.
pub fn dispatch(state: &Arc<State>, mut msg: Incoming, sink: Arc<dyn Sink>) {
    let Some(method) = msg.method.take() else {
        // A response: stateless-era clients send none; one that comes is treated as always.
        return methods::response(state, msg);
    };
    let Some(id) = msg.id.take() else {
        return notification(state, sink.client(), &method, &msg.params);
    };
    match era::accept(state, &method, &msg.params) {
        Ok(modern) => request(
            state,
            Call::stateless(id, sink, modern),
            &method,
            msg.params,
        ),
        Err(e) => Call::new(id, sink).error(e),
    }
}

fn request(state: &Arc<State>, call: Call, method: &str, params: Value) {
    match method {
        "tools/call" => calls::call(state, call, params),
        "prompts/get" => catalog::prompt_request(state, call, params),
        "subscriptions/listen" => listen::open(state, call, &params),
        "server/discover" => call.result(era::discover(state)),
        // Not found is "invalid params" since 2026-07-28 (it was -32002).
        "resources/read" => call.reply(catalog::read(state, &params).map_err(|e| {
            if e.code == codes::RESOURCE_NOT_FOUND {
                RpcError {
                    code: codes::INVALID_PARAMS,
                    ..e
                }
            } else {
                e
            }
        })),
        other if state.args.skills && crate::skills::is_method(other) => {
            call.reply(crate::skills::request(state, other, &params))
        }
        other => call.reply(
            methods::listing(state, other, &params)
                .or_else(|| extension::answer(state, other, &params))
                .unwrap_or_else(|| Err(RpcError::method_not_found(other))),
        ),
    }
}

/// Over stdio a client cancels a request, or ends a subscription, with
/// `notifications/cancelled` (over HTTP it closes the request's stream instead).
fn notification(state: &State, client: &str, method: &str, params: &Value) {
    if method == "notifications/cancelled" {
        if let Some(request_id) = params.get("requestId") {
            let key = request_key(client, request_id);
            state.cancel(&key);
            state.listens.end(&key);
        }
    }
    extension::heard(state, method);
}
