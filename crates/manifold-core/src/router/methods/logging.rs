//! `logging/setLevel`: each session has its own level; each upstream that logs is asked for
//! the most verbose level any session wants.

use std::sync::Arc;

use manifold_protocol::{Params, LOG_LEVELS};
use manifold_upstream::UpstreamHandle;

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;

impl Router {
    /// `logging/setLevel` sets this session's level; each upstream that logs is asked for the
    /// most verbose level any session wants.
    pub(in crate::router) fn set_level(self: &Arc<Self>, ctx: Context, params: &Params<'_>) {
        let Some(level) = params.level.as_deref() else {
            return ctx.fail(&RouteError::InvalidParams("missing \"level\"".into()));
        };
        let Some(index) = LOG_LEVELS.iter().position(|l| *l == level) else {
            return ctx.fail(&RouteError::InvalidParams(format!(
                "\"level\" must be one of {}",
                LOG_LEVELS.join(", ")
            )));
        };
        if let Some(session) = &ctx.session {
            session.set_log_level(u8::try_from(index).unwrap_or_default());
            if let Some(relay) = session.relay() {
                relay.changed(session);
            }
        }
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            router.apply_log_levels(None).await;
            ctx.reply("{}");
        });
    }

    /// The level upstream `upstream` must be asked for before a stateless request that wants
    /// its log messages at its level goes to it, if it logs and was asked for less.
    pub(in crate::router) fn log_level_to_ask(&self, ctx: &Context, upstream: usize) -> Option<u8> {
        let level = ctx.asked.as_ref()?.log_level?;
        let logs = self
            .hub
            .catalog()
            .slice(upstream)
            .is_some_and(|s| s.has_capability("logging"));
        let asked = self.interest.level_of(upstream);
        (logs && asked.is_none_or(|a| a > level)).then_some(level)
    }

    /// Asks `conn`'s upstream for `level` (`logging/setLevel`), and records it.
    pub(in crate::router) async fn ask_log_level(
        &self,
        conn: &manifold_upstream::Connection,
        upstream: usize,
        level: u8,
    ) {
        let params = format!("{{\"level\":\"{}\"}}", LOG_LEVELS[usize::from(level)]);
        match conn.request("logging/setLevel", Some(&params)).await {
            Ok(_) => self.interest.set_level(upstream, level),
            Err(e) => tracing::warn!(upstream, "logging/setLevel failed: {e}"),
        }
    }

    /// Asks each upstream that logs (or only `only`) for the most verbose level any session
    /// wants, when that differs from what it was last asked. Nothing is asked while no
    /// session has set a level: upstreams keep their own default.
    pub async fn apply_log_levels(self: &Arc<Self>, only: Option<usize>) {
        let requests = self
            .pool
            .upstreams()
            .iter()
            .filter_map(|h| self.fanout.logger_level(h.index()))
            .min();
        let Some(wanted) = self
            .sessions
            .all()
            .iter()
            .filter_map(|s| s.log_level())
            .chain(requests)
            .min()
        else {
            return;
        };
        let catalog = self.hub.catalog();
        let targets: Vec<UpstreamHandle> = self
            .pool
            .upstreams()
            .iter()
            .filter(|h| only.is_none_or(|i| i == h.index()))
            .filter(|h| {
                catalog
                    .slice(h.index())
                    .is_some_and(|s| s.has_capability("logging"))
            })
            .filter(|h| only.is_some() || self.interest.level_of(h.index()) != Some(wanted))
            .cloned()
            .collect();
        let params = format!("{{\"level\":\"{}\"}}", LOG_LEVELS[usize::from(wanted)]);
        for handle in targets {
            let Some(conn) = handle.connection() else {
                continue;
            };
            match conn.request("logging/setLevel", Some(&params)).await {
                Ok(_) => self.interest.set_level(handle.index(), wanted),
                Err(e) => tracing::warn!(upstream = handle.key(), "logging/setLevel failed: {e}"),
            }
        }
    }
}
