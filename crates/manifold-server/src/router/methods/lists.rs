//! `tools/list`, `prompts/list`, `resources/list` and `resources/templates/list`: pages of
//! the merged catalog, or of the caller's team's view, serialized once per catalog (or view)
//! generation.

use std::sync::Arc;

use manifold_catalog::Kind;
use manifold_protocol::Params;

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;
use crate::stateless;

/// A page, with the caching hints a stateless host gets with it: how long it stays fresh, and
/// whether only the caller's authorization context may keep it.
fn reply(ctx: &Context, body: &str) {
    if !ctx.is_stateless() {
        return ctx.reply(body);
    }
    let ttl = stateless::LIST_TTL_MS.to_string();
    let hints = [
        ("ttlMs", ttl.as_str()),
        ("cacheScope", stateless::scope(ctx.caller.team.is_some())),
    ];
    ctx.reply_with(body, &hints);
}

impl Router {
    pub(in crate::router) fn list(
        self: &Arc<Self>,
        ctx: Context,
        method: &str,
        params: &Params<'_>,
    ) {
        if ctx.is_stateless() && !self.hub.is_settled() {
            // A stateless host has no initialize that waited for the upstreams' first start:
            // its first list waits for it (bounded) instead.
            let (router, method, cursor) = (
                Arc::clone(self),
                method.to_owned(),
                params.cursor.as_deref().map(str::to_owned),
            );
            self.runtime.spawn(async move {
                router
                    .hub
                    .wait_settled(router.settings().startup_timeout)
                    .await;
                router.list_page(ctx, &method, cursor.as_deref());
            });
            return;
        }
        self.list_page(ctx, method, params.cursor.as_deref());
    }

    fn list_page(&self, ctx: Context, method: &str, cursor: Option<&str>) {
        let kind = match method {
            "tools/list" => Kind::Tools,
            "prompts/list" => Kind::Prompts,
            "resources/list" => Kind::Resources,
            _ => Kind::ResourceTemplates,
        };
        let catalog = self.hub.catalog();
        let page = match ctx.caller.restricted() {
            // Pages of a team's view are serialized once per view, like the catalog's.
            Some(team) => team
                .view(&catalog)
                .listing(kind)
                .page(cursor)
                .map(|body| reply(&ctx, body)),
            None => catalog
                .listing(kind)
                .page(cursor)
                .map(|body| reply(&ctx, body)),
        };
        if page.is_err() {
            ctx.fail(&RouteError::BadCursor);
        }
    }
}
