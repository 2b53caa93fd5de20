//! `--tasks`: the experimental tasks of MCP 2025-11-25, for tools/call. A call whose params
//! carry `task` is answered at once with `{"task": Task}` and its tool runs on a thread of
//! its own; the client follows it with `tasks/get`, `tasks/list`, `tasks/cancel` and
//! `tasks/result`. Every status change after creation is sent to the client that created
//! the task as `notifications/tasks/status`, on its own stream (stdout, or the HTTP
//! session's GET stream: the POST that created the task has ended by then), before any
//! answer that reports the new status (of `tasks/cancel`, or a waiting `tasks/result`).
//!
//! Tasks belong to the client that created them (the HTTP session over HTTP). They are
//! never removed: `ttl` is reported as asked, not enforced, so a test can read a task at
//! any time.

mod table;
mod time;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

pub use table::Tasks;

use crate::calls;
use crate::exchange::Call;
use crate::rpc::{self, RpcError};
use crate::state::State;

/// The longest a `tasks/result` waits for its task to finish.
const RESULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What initialize declares: tasks for tools/call, listable and cancellable.
pub fn capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

pub fn is_method(method: &str) -> bool {
    matches!(
        method,
        "tasks/get" | "tasks/list" | "tasks/cancel" | "tasks/result"
    )
}

/// A tools/call that asks for a task: answers the new task, then runs the tool on its own
/// thread with the call's way back (its progress and questions to the client still reach
/// the client, after the answer).
pub fn start(state: &Arc<State>, call: Call, params: Value) {
    let ttl = params.pointer("/task/ttl").and_then(Value::as_u64);
    let (id, task, token) = state.tasks.create(call.client(), ttl);
    // Answered before the tool starts, so no status notification can come before it.
    call.result(json!({ "task": task }));
    let shared = Arc::clone(state);
    calls::spawn(state, move || {
        calls::service_delay(&shared);
        let outcome = calls::run(&shared, &call, &params, Some(&token))
            .unwrap_or_else(|| Err(RpcError::new(-32603, "the tool sent no result")));
        shared.tasks.finish(&id, outcome, |owner, task| {
            notify_status(&shared, owner, task);
        });
    });
}

/// tasks/get, tasks/list, tasks/cancel and tasks/result (`is_method` said it is one).
pub fn request(state: &Arc<State>, call: Call, method: &str, params: &Value) {
    if method == "tasks/list" {
        let page_size = state.args.page_size;
        return call.reply(state.tasks.list(call.client(), params, page_size));
    }
    let Some(id) = params.get("taskId").and_then(Value::as_str) else {
        return call.error(RpcError::invalid_params("Missing taskId"));
    };
    match method {
        "tasks/get" => call.reply(state.tasks.get(call.client(), id)),
        "tasks/cancel" => cancel(state, &call, id),
        _ => {
            // Waits for the task: on a thread of its own, so other requests (tasks/cancel,
            // the answers to the task's questions) are still read meanwhile.
            let id = id.to_owned();
            let shared = Arc::clone(state);
            calls::spawn(state, move || {
                call.reply(shared.tasks.result(call.client(), &id, RESULT_TIMEOUT));
            });
        }
    }
}

/// Tells the task's owner (the caller) that it was cancelled, then answers the Task.
fn cancel(state: &State, call: &Call, id: &str) {
    let cancelled = state.tasks.cancel(call.client(), id, |owner, task| {
        notify_status(state, owner, task);
    });
    call.reply(cancelled);
}

/// Sends `notifications/tasks/status`. Called under the task table's lock, so that the
/// notification of a status always comes before any answer that reports that status.
fn notify_status(state: &State, owner: &str, task: &Value) {
    let note = rpc::notification("notifications/tasks/status", task);
    // An HTTP session deleted meanwhile has nobody left to tell.
    state.transport.send_to(owner, &note);
}
