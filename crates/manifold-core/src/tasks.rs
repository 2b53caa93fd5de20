//! Tasks (2025-11-25, experimental): a task-augmented `tools/call` returns a task whose id
//! Manifold namespaces like a resource URI (`{uri prefix}+{upstream's id}`), so that two
//! upstreams' ids never clash and `tasks/get`, `tasks/result` and `tasks/cancel` route by the
//! id alone. A task belongs to the session that created it: other sessions get the error an
//! unknown task gets, `tasks/list` shows each session its own, and status notifications go to
//! the owner only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use manifold_catalog::uri;
use manifold_protocol::RawObject;

/// Tasks remembered at most; the oldest are forgotten first (they have long expired).
const TASKS_KEPT: usize = 10_000;
/// The `_meta` key that ties a message to a task.
const RELATED: &str = "io.modelcontextprotocol/related-task";

/// Which session owns each task (by exposed id).
#[derive(Default)]
pub struct Tasks {
    /// Locked only to record or look up an owner.
    inner: Mutex<Owners>,
}

#[derive(Default)]
struct Owners {
    by_id: HashMap<String, u64>,
    order: VecDeque<String>,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, Owners> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, task: &str, session: u64) {
        let mut o = self.lock();
        if o.by_id.insert(task.to_owned(), session).is_none() {
            o.order.push_back(task.to_owned());
        }
        while o.order.len() > TASKS_KEPT {
            if let Some(old) = o.order.pop_front() {
                o.by_id.remove(&old);
            }
        }
    }

    pub fn owner(&self, task: &str) -> Option<u64> {
        self.lock().by_id.get(task).copied()
    }

    /// Forgets every task of a session that ended.
    pub(crate) fn forget(&self, session: u64) {
        let mut o = self.lock();
        o.by_id.retain(|_, s| *s != session);
        let Owners { by_id, order } = &mut *o;
        order.retain(|t| by_id.contains_key(t));
    }

    /// A result that may carry a task (a task-augmented `tools/call`): its id exposed and
    /// recorded as the session's. Returns the result and the task's exposed id.
    pub(crate) fn created(
        &self,
        result: &str,
        prefix: &str,
        session: u64,
    ) -> Option<(String, String)> {
        let mut obj = RawObject::parse(result).ok()?;
        if obj.get("task").is_none() && obj.get_str("resultType").is_some_and(|t| t == "task") {
            // The tasks extension's handle (a stateless upstream's): the task at the top.
            let exposed = uri::expose(prefix, &obj.get_str("taskId")?);
            self.record(&exposed, session);
            obj.set_str("taskId", &exposed);
            return Some((obj.to_text(), exposed));
        }
        let mut task = RawObject::parse(obj.get("task")?).ok()?;
        let exposed = uri::expose(prefix, &task.get_str("taskId")?);
        self.record(&exposed, session);
        task.set_str("taskId", &exposed);
        obj.set_raw("task", task.to_text());
        Some((obj.to_text(), exposed))
    }
}

/// The tasks extension of the stateless era.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A session-era `Task` object as the tasks extension has it: `ttl` and `pollInterval` are
/// `ttlMs` and `pollIntervalMs`; the other members are kept. `None`: not an object.
pub(crate) fn extension_task(task: &str) -> Option<String> {
    let mut obj = RawObject::parse(task).ok()?;
    for (from, to) in [("ttl", "ttlMs"), ("pollInterval", "pollIntervalMs")] {
        if let Some(value) = obj.get(from).map(str::to_owned) {
            obj.remove(from);
            obj.set_raw(to, value);
        }
    }
    Some(obj.to_text())
}

/// A session-era `CreateTaskResult` (`{"task": Task}`) as the extension's (`resultType`
/// `task`, the task's members at the top).
pub(crate) fn extension_created(result: &str) -> Option<String> {
    let obj = RawObject::parse(result).ok()?;
    let task = extension_task(obj.get("task")?)?;
    let mut task = RawObject::parse(&task).ok()?.to_text();
    // `{"resultType":"task",` + the task's members.
    let rest = task.split_off(1);
    Some(format!("{{\"resultType\":\"task\",{rest}"))
}

/// A `Task` object (or a result that is one) with its id exposed.
pub(crate) fn expose_id(task: &str, prefix: &str) -> Option<String> {
    let mut obj = RawObject::parse(task).ok()?;
    let exposed = uri::expose(prefix, &obj.get_str("taskId")?);
    obj.set_str("taskId", &exposed);
    Some(obj.to_text())
}

/// A `tasks/result` result: the related-task id in its `_meta` exposed.
pub(crate) fn expose_related(result: &str, prefix: &str) -> Option<String> {
    let mut obj = RawObject::parse(result).ok()?;
    let mut meta = RawObject::parse(obj.get("_meta")?).ok()?;
    let related = expose_id(meta.get(RELATED)?, prefix)?;
    meta.set_raw(RELATED, related);
    obj.set_raw("_meta", meta.to_text());
    Some(obj.to_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_tasks_get_exposed_ids_and_an_owner() {
        let tasks = Tasks::default();
        let r = r#"{"task":{"taskId":"t-1","status":"working","ttl":null,"createdAt":"x","lastUpdatedAt":"x"}}"#;
        let (out, task) = tasks.created(r, "ev", 7).unwrap();
        assert!(out.contains(r#""taskId":"ev+t-1""#), "{out}");
        assert_eq!(task, "ev+t-1");
        assert_eq!(tasks.owner("ev+t-1"), Some(7));
        tasks.forget(7);
        assert_eq!(tasks.owner("ev+t-1"), None);
        assert!(tasks.created(r#"{"content":[]}"#, "ev", 7).is_none());
    }

    #[test]
    fn session_era_tasks_take_the_extensions_shape() {
        let created = r#"{"task":{"taskId":"p+t","status":"working","ttl":60000,"pollInterval":500,"createdAt":"a","lastUpdatedAt":"b"}}"#;
        let out: serde_json::Value =
            serde_json::from_str(&extension_created(created).unwrap()).unwrap();
        assert_eq!(out["resultType"], "task");
        assert_eq!(out["taskId"], "p+t");
        assert_eq!(out["ttlMs"], 60000);
        assert_eq!(out["pollIntervalMs"], 500);
        assert!(
            out.get("ttl").is_none() && out.get("task").is_none(),
            "{out}"
        );
        let unlimited =
            extension_task(r#"{"taskId":"x","status":"completed","ttl":null}"#).unwrap();
        assert_eq!(
            unlimited,
            r#"{"taskId":"x","status":"completed","ttlMs":null}"#
        );
    }

    #[test]
    fn related_task_ids_in_results_are_exposed() {
        let r = r#"{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-2"},"x":1}}"#;
        let out = expose_related(r, "ev").unwrap();
        assert!(out.contains(r#"{"taskId":"ev+t-2"}"#), "{out}");
        assert!(out.contains(r#""x":1"#));
        assert_eq!(
            expose_id(r#"{"taskId":"a","status":"completed"}"#, "p").unwrap(),
            r#"{"taskId":"p+a","status":"completed"}"#
        );
    }
}
