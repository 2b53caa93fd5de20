//! `tasks/get`, `tasks/result`, `tasks/cancel` (routed by the task id, for the session that
//! owns the task) and `tasks/list` (every upstream that lists tasks, filtered to the
//! session's own). Which session owns which task is kept in `router/tasks.rs`.

use std::sync::Arc;

use manifold_catalog::{rewrite, Catalog};
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
            Ok(target) => self.admit(ctx, target),
            Err(e) => ctx.fail(&e),
        }
    }

    /// The tasks extension's `tasks/get`, `tasks/cancel` and `tasks/update` for a stateless
    /// host. A stateless upstream's task: forwarded as it is (ids mapped). A session-era
    /// upstream's: the task in the extension's shape, with its result (or error) in it once it
    /// is over (fetched with the session era's `tasks/result`, which no longer blocks then); it
    /// takes no input through `tasks/update`.
    pub(in crate::router) fn extension_task(
        self: &Arc<Self>,
        ctx: Context,
        method: &str,
        env: &Envelope<'_>,
    ) {
        let method = match method {
            "tasks/get" => "tasks/get",
            "tasks/update" => "tasks/update",
            _ => "tasks/cancel",
        };
        let catalog = self.hub.catalog();
        let target = match self.task_request(&ctx, method, env.params, &catalog) {
            Ok(target) => target,
            Err(e) => return ctx.fail(&e),
        };
        let prefix = catalog.defs()[target.upstream].uri_prefix.clone();
        drop(catalog);
        let stateless_upstream = self.pool.upstreams()[target.upstream]
            .era()
            .is_some_and(|e| e == manifold_protocol::version::Era::Stateless);
        if stateless_upstream {
            // The upstream speaks the extension itself: the request goes to it as it is.
            return self.admit(ctx, target);
        }
        if method == "tasks/update" {
            return ctx.fail(&RouteError::InvalidParams(
                "this task's upstream speaks the session era, whose tasks take no input through tasks/update".into(),
            ));
        }
        let Some(conn) = self.pool.upstreams()[target.upstream].connection() else {
            return ctx.fail(&RouteError::Upstream(
                manifold_upstream::UpstreamError::Unavailable {
                    upstream: self.pool.upstreams()[target.upstream].key().to_owned(),
                    reason: "it is not connected".into(),
                },
            ));
        };
        self.runtime.spawn(async move {
            let task = match conn.request(method, Some(&target.params)).await {
                Ok(Answer::Result(task)) => task,
                Ok(Answer::Error(error)) => {
                    ctx.fail_upstream(&error);
                    return;
                }
                Err(e) => return ctx.fail(&RouteError::Upstream(e)),
            };
            let Some(shaped) =
                tasks::expose_id(&task, &prefix).and_then(|t| tasks::extension_task(&t))
            else {
                return ctx.fail(&RouteError::Internal(
                    "the upstream's task is not an object".into(),
                ));
            };
            let status = RawObject::parse(&task)
                .ok()
                .and_then(|t| t.get_str("status").map(|s| s.into_owned()));
            let over = matches!(status.as_deref(), Some("completed" | "failed"));
            if method != "tasks/get" || !over {
                return ctx.reply(&shaped);
            }
            let Ok(mut obj) = RawObject::parse(&shaped) else {
                return;
            };
            // Over: its result (or error) goes in it.
            match conn.request("tasks/result", Some(&target.params)).await {
                Ok(Answer::Result(result)) => {
                    let mapped = rewrite::result_uris("tools/call", &result, &prefix);
                    let result = mapped.unwrap_or(result.to_string());
                    let result = tasks::expose_related(&result, &prefix).unwrap_or(result);
                    obj.set_raw("result", result);
                }
                Ok(Answer::Error(error)) => obj.set_raw("error", error.to_string()),
                Err(e) => return ctx.fail(&RouteError::Upstream(e)),
            }
            ctx.reply(&obj.to_text());
        });
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
        if self.tasks.owner(&exposed) != Some(ctx.task_owner()) {
            return Err(unknown());
        }
        let (upstream, original) = catalog.resolve_uri(&exposed).ok_or_else(unknown)?;
        obj.set_str("taskId", &original);
        Ok(Target {
            upstream,
            method,
            params: obj.to_text(),
            timeout: None,
            task: true,
            exposed: None,
            original: None,
            round: 0,
            extension: None,
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
            let session = ctx.task_owner();
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
