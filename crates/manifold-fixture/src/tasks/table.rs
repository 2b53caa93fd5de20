//! Every task of the process, whoever created it. Task `task-N` is entry N-1: ids count from
//! 1 and tasks are never removed, so a lookup is an index and `tasks/list` is in creation
//! order. Each task remembers its owner; to any other client its id is unknown.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::time;
use crate::paging::paged;
use crate::rpc::RpcError;
use crate::state::CancelToken;
use crate::tools::numbered;

const ID_PREFIX: &str = "task-";
/// The polling interval suggested to clients, in milliseconds.
const POLL_INTERVAL_MS: u64 = 50;
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// What the tool of a task ended with: its result, or a JSON-RPC error (unknown tool, ...).
pub type Outcome = Result<Value, RpcError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    fn is_finished(self) -> bool {
        self != Self::Working
    }
}

struct Entry {
    owner: String,
    status: Status,
    created_at: String,
    updated_at: String,
    ttl: Option<u64>,
    outcome: Option<Outcome>,
    token: Arc<CancelToken>,
}

impl Entry {
    /// The Task object of the schema.
    fn task(&self, id: &str) -> Value {
        json!({
            "taskId": id,
            "status": self.status.as_str(),
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttl": self.ttl,
            "pollInterval": POLL_INTERVAL_MS,
        })
    }

    fn set_status(&mut self, status: Status) {
        self.status = status;
        self.updated_at = time::now();
    }
}

/// The task table; `changed` wakes the `tasks/result` calls waiting for a task to finish.
#[derive(Default)]
pub struct Tasks {
    entries: Mutex<Vec<Entry>>,
    changed: Condvar,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new `working` task of `owner`: its id, its Task object, and the token that
    /// `tasks/cancel` sets to stop its tool.
    pub fn create(&self, owner: &str, ttl: Option<u64>) -> (String, Value, Arc<CancelToken>) {
        let now = time::now();
        let token = Arc::new(CancelToken::default());
        let entry = Entry {
            owner: owner.to_owned(),
            status: Status::Working,
            created_at: now.clone(),
            updated_at: now,
            ttl,
            outcome: None,
            token: Arc::clone(&token),
        };
        let mut entries = self.lock();
        entries.push(entry);
        let id = format!("{ID_PREFIX}{}", entries.len());
        let task = entries[entries.len() - 1].task(&id);
        (id, task, token)
    }

    /// Keeps what task `id`'s tool ended with: the task becomes `failed` if that is an error
    /// (a tool error or a JSON-RPC one), else `completed`, and `changed` is called with its
    /// owner and Task. Nothing happens if the task had already finished (it was cancelled
    /// meanwhile).
    pub fn finish(&self, id: &str, outcome: Outcome, changed: impl FnOnce(&str, &Value)) {
        let mut entries = self.lock();
        let Some(entry) = index(id).and_then(|at| entries.get_mut(at)) else {
            return;
        };
        if entry.status.is_finished() {
            return;
        }
        let failed = outcome.as_ref().map_or(true, |result| {
            result.get("isError") == Some(&Value::Bool(true))
        });
        entry.set_status(if failed {
            Status::Failed
        } else {
            Status::Completed
        });
        entry.outcome = Some(outcome);
        // Under the lock: a waiting tasks/result answers only after the client was told.
        changed(&entry.owner, &entry.task(id));
        self.changed.notify_all();
    }

    /// tasks/get: the Task object.
    pub fn get(&self, owner: &str, id: &str) -> Result<Value, RpcError> {
        let mut entries = self.lock();
        Ok(find(&mut entries, owner, id)?.task(id))
    }

    /// tasks/cancel: stops a running task's tool, marks it `cancelled`, calls `changed` with
    /// its owner and Task, and returns the Task.
    pub fn cancel(
        &self,
        owner: &str,
        id: &str,
        changed: impl FnOnce(&str, &Value),
    ) -> Result<Value, RpcError> {
        let mut entries = self.lock();
        let entry = find(&mut entries, owner, id)?;
        if entry.status.is_finished() {
            let status = entry.status.as_str();
            return Err(RpcError::invalid_params(format!(
                "task {id} is already {status}"
            )));
        }
        entry.token.cancel();
        entry.set_status(Status::Cancelled);
        let task = entry.task(id);
        changed(owner, &task);
        self.changed.notify_all();
        Ok(task)
    }

    /// tasks/result: waits up to `timeout` for the task to finish, then answers what its
    /// tool ended with, marked as related to the task.
    pub fn result(&self, owner: &str, id: &str, timeout: Duration) -> Result<Value, RpcError> {
        let mut entries = self.lock();
        let at = find_index(&entries, owner, id)?;
        (entries, _) = self
            .changed
            .wait_timeout_while(entries, timeout, |entries| {
                !entries[at].status.is_finished()
            })
            .unwrap_or_else(PoisonError::into_inner);
        let entry = &entries[at];
        match (&entry.outcome, entry.status) {
            (_, Status::Cancelled) => {
                Err(RpcError::new(-32603, format!("task {id} was cancelled")))
            }
            (Some(Ok(result)), _) => Ok(related(result.clone(), id)),
            (Some(Err(error)), _) => Err(error.clone()),
            (None, _) => Err(RpcError::new(
                -32001,
                format!("task {id} did not finish within {timeout:?}"),
            )),
        }
    }

    /// tasks/list: the Task objects of `owner`, in creation order, a page at a time.
    pub fn list(&self, owner: &str, params: &Value, page_size: usize) -> Result<Value, RpcError> {
        let entries = self.lock();
        let tasks: Vec<Value> = entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.owner == owner)
            .map(|(i, entry)| entry.task(&format!("{ID_PREFIX}{}", i + 1)))
            .collect();
        paged(tasks.iter(), tasks.len(), "tasks", params, page_size)
    }
}

/// The entry index of task id `task-N`, if it is written canonically.
fn index(id: &str) -> Option<usize> {
    numbered(id, ID_PREFIX)?.checked_sub(1)
}

fn find_index(entries: &[Entry], owner: &str, id: &str) -> Result<usize, RpcError> {
    index(id)
        .filter(|&i| entries.get(i).is_some_and(|entry| entry.owner == owner))
        .ok_or_else(|| RpcError::invalid_params(format!("unknown task {id}")))
}

fn find<'a>(entries: &'a mut [Entry], owner: &str, id: &str) -> Result<&'a mut Entry, RpcError> {
    let at = find_index(entries, owner, id)?;
    Ok(&mut entries[at])
}

/// `result` with `_meta["io.modelcontextprotocol/related-task"]` naming task `id`.
fn related(mut result: Value, id: &str) -> Value {
    let Some(object) = result.as_object_mut() else {
        return result;
    };
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(RELATED_TASK.to_owned(), json!({ "taskId": id }));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Duration = Duration::ZERO;

    /// Calls `finish`; the Task it reported, if any.
    fn finish(tasks: &Tasks, id: &str, outcome: Outcome) -> Option<(String, Value)> {
        let mut reported = None;
        tasks.finish(id, outcome, |owner, task| {
            reported = Some((owner.to_owned(), task.clone()));
        });
        reported
    }

    fn cancel(tasks: &Tasks, owner: &str, id: &str) -> Result<Value, RpcError> {
        tasks.cancel(owner, id, |_, _| {})
    }

    #[test]
    fn a_task_is_created_working_and_finishes_once() {
        let tasks = Tasks::default();
        let (id, task, _) = tasks.create("a", Some(5000));
        assert_eq!(id, "task-1");
        assert_eq!(task["status"], "working");
        assert_eq!(
            (task["ttl"].as_u64(), task["pollInterval"].as_u64()),
            (Some(5000), Some(50))
        );
        let (owner, done) = finish(&tasks, &id, Ok(json!({ "content": [] }))).unwrap();
        assert_eq!(
            (owner.as_str(), done["status"].as_str()),
            ("a", Some("completed"))
        );
        assert!(finish(&tasks, &id, Ok(json!({}))).is_none());
        let result = tasks.result("a", &id, NOW).unwrap();
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], "task-1");
        let (second, ..) = tasks.create("a", None);
        assert_eq!(tasks.get("a", &second).unwrap()["ttl"], Value::Null);
    }

    #[test]
    fn errors_fail_the_task() {
        let tasks = Tasks::default();
        let (tool_error, ..) = tasks.create("", None);
        let (rpc_error, ..) = tasks.create("", None);
        finish(&tasks, &tool_error, Ok(json!({ "isError": true })));
        finish(
            &tasks,
            &rpc_error,
            Err(RpcError::invalid_params("Unknown tool: x")),
        );
        assert_eq!(tasks.get("", &tool_error).unwrap()["status"], "failed");
        assert_eq!(tasks.result("", &tool_error, NOW).unwrap()["isError"], true);
        assert_eq!(
            tasks.result("", &rpc_error, NOW).unwrap_err().message,
            "Unknown tool: x"
        );
    }

    #[test]
    fn cancel_stops_the_tool_and_only_once() {
        let tasks = Tasks::default();
        let (id, _, token) = tasks.create("a", None);
        let mut told = Vec::new();
        let cancelled = tasks.cancel("a", &id, |owner, task| {
            told.push((owner.to_owned(), task["status"].clone()));
        });
        assert_eq!(cancelled.unwrap()["status"], "cancelled");
        assert_eq!(told, [("a".to_owned(), json!("cancelled"))]);
        assert!(token.is_cancelled());
        let late = finish(&tasks, &id, Ok(json!({})));
        assert!(late.is_none(), "cancelled stays cancelled");
        let again = cancel(&tasks, "a", &id).unwrap_err();
        assert_eq!(
            (again.code, again.message.as_str()),
            (-32602, "task task-1 is already cancelled")
        );
        let result = tasks.result("a", &id, NOW).unwrap_err();
        assert_eq!(
            (result.code, result.message.as_str()),
            (-32603, "task task-1 was cancelled")
        );
    }

    #[test]
    fn tasks_belong_to_their_owner() {
        let tasks = Tasks::default();
        let (id, ..) = tasks.create("a", None);
        tasks.create("b", None);
        assert!(cancel(&tasks, "b", &id).is_err());
        for unknown in [
            tasks.get("b", &id),
            tasks.get("a", "task-9"),
            tasks.get("a", "task-0"),
        ] {
            assert_eq!(unknown.unwrap_err().code, -32602);
        }
        assert_eq!(
            tasks.get("a", "task-01").unwrap_err().message,
            "unknown task task-01"
        );
        let listed = tasks.list("b", &json!({}), 0).unwrap();
        assert_eq!(listed["tasks"][0]["taskId"], "task-2");
        assert_eq!(listed["tasks"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn an_unfinished_result_times_out_and_lists_page() {
        let tasks = Tasks::default();
        let (id, ..) = tasks.create("a", None);
        tasks.create("a", None);
        assert_eq!(tasks.result("a", &id, NOW).unwrap_err().code, -32001);
        let first = tasks.list("a", &json!({}), 1).unwrap();
        let cursor = first["nextCursor"].clone();
        let second = tasks.list("a", &json!({ "cursor": cursor }), 1).unwrap();
        assert_eq!(second["tasks"][0]["taskId"], "task-2");
        assert!(second.get("nextCursor").is_none());
    }

    #[test]
    fn related_keeps_other_meta() {
        let r = related(json!({ "_meta": { "k": 1 } }), "task-3");
        assert_eq!(r["_meta"]["k"], 1);
        assert_eq!(r["_meta"][RELATED_TASK]["taskId"], "task-3");
    }
}
