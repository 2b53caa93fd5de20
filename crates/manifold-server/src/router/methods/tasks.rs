//! `tasks/get`, `tasks/result`, `tasks/cancel` (routed by the task id, for the session that
//! owns the task) and `tasks/list` (every upstream that lists tasks, filtered to the
//! session's own). Which session owns which task is kept in `router/tasks.rs`.

use std::sync::Arc;

use manifold_catalog::Catalog;
use manifold_protocol::{scan, Envelope, RawObject};
use manifold_upstream::{Answer, UpstreamHandle};

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;
use crate::target::Target;
use crate::tasks;

/// Pages of one upstream's `tasks/list` read at most.
const MAX_PAGES: usize = 100;

impl Router {
    /// `tasks/get`, `tasks/result` and `tasks/cancel`.
    pub(in crate::router) fn task(
        self: &Arc<Self>,
        ctx: Context,
        method: &str,
        env: &Envelope<'_>,
    ) {
        let method = match method {
            "tasks/get" => "tasks/get",
            "tasks/result" => "tasks/result",
            _ => "tasks/cancel",
        };
        match self.task_request(&ctx, method, env.params, &self.hub.catalog()) {
            Ok(target) => self.admit(ctx, target, 0),
            Err(e) => ctx.fail(&e),
        }
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel`: routed by the task id, for its owner only.
    fn task_request(
        &self,
        ctx: &Context,
        method: &'static str,
        params: Option<&str>,
        catalog: &Catalog,
    ) -> Result<Target, RouteError> {
        let bad = |m: &str| RouteError::InvalidParams(m.to_owned());
        let params = params.ok_or_else(|| bad("missing params"))?;
        let mut obj = RawObject::parse(params).map_err(|_| bad("params must be an object"))?;
        let exposed = obj
            .get_str("taskId")
            .ok_or_else(|| bad("missing \"taskId\""))?
            .into_owned();
        let unknown = || RouteError::InvalidParams(format!("unknown task {exposed:?}"));
        if self.tasks.owner(&exposed) != Some(ctx.session_id()) {
            return Err(unknown());
        }
        let (upstream, original) = catalog.resolve_uri(&exposed).ok_or_else(unknown)?;
        obj.set_str("taskId", original);
        Ok(Target {
            upstream,
            method,
            params: obj.to_text(),
            timeout: None,
            task: true,
            exposed: None,
            original: None,
            round: 0,
        })
    }

    /// `tasks/list`: every upstream that lists tasks is asked for all its pages, and the
    /// session sees its own tasks, ids exposed, in one page.
    pub(in crate::router) fn list_tasks(self: &Arc<Self>, ctx: Context) {
        let catalog = self.hub.catalog();
        let targets: Vec<(usize, Arc<manifold_upstream::Connection>, String)> = self
            .pool
            .upstreams()
            .iter()
            .filter(|h| {
                catalog
                    .slice(h.index())
                    .is_some_and(|s| s.has_capability("tasks"))
            })
            .filter_map(|h| {
                let prefix = catalog.defs()[h.index()].uri_prefix.clone();
                UpstreamHandle::connection(h).map(|c| (h.index(), c, prefix))
            })
            .collect();
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            let session = ctx.session_id();
            let mut tasks = Vec::new();
            for (_, conn, prefix) in &targets {
                for task in all_tasks(conn).await {
                    let Some(exposed) = tasks::expose_id(&task, prefix) else {
                        continue;
                    };
                    let id = RawObject::parse(&exposed)
                        .ok()
                        .and_then(|o| o.get_str("taskId").map(|t| t.into_owned()));
                    if id.is_some_and(|id| router.tasks.owner(&id) == Some(session)) {
                        tasks.push(exposed);
                    }
                }
            }
            ctx.reply(&format!("{{\"tasks\":[{}]}}", tasks.join(",")));
        });
    }
}

/// Every task an upstream lists, as JSON texts (bounded in pages).
async fn all_tasks(conn: &manifold_upstream::Connection) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| {
            format!(
                "{{\"cursor\":{}}}",
                manifold_protocol::object::json_string(c)
            )
        });
        let Ok(Answer::Result(page)) = conn.request("tasks/list", params.as_deref()).await else {
            tracing::debug!(upstream = conn.name(), "tasks/list failed");
            return out;
        };
        let Ok(obj) = RawObject::parse(&page) else {
            return out;
        };
        if let Some(list) = obj.get("tasks").and_then(|l| scan::elements(l).ok()) {
            out.extend(list.into_iter().map(str::to_owned));
        }
        match obj.get_str("nextCursor") {
            Some(next) if !next.is_empty() => cursor = Some(next.into_owned()),
            _ => return out,
        }
    }
    out
}
