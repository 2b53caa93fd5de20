//! `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list` and the skills
//! extension's `skills/list`: pages of
//! the merged catalog, or of the caller's team's view, serialized once per catalog (or view)
//! generation.

use std::sync::Arc;

use std::time::Instant;

use manifold_catalog::{Catalog, Kind};
use manifold_protocol::Params;

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;
use crate::stateless;

/// How long a stateless host may keep a page of `kind`, and who may: the least time any
/// upstream the caller may know of gave for its part (what is left of it), Manifold's own
/// choice for the parts without one; private if any part is, or if what the caller sees
/// depends on its team.
fn hints(catalog: &Catalog, kind: Kind, ctx: &Context) -> (u64, bool) {
    let view = ctx.caller.restricted().map(|team| team.view(catalog));
    let now = Instant::now();
    let mut ttl = stateless::LIST_TTL_MS;
    let mut private = ctx.caller.team.is_some();
    for (i, slice) in catalog.slices().iter().enumerate() {
        let Some(slice) = slice else { continue };
        if view.as_ref().is_some_and(|v| !v.knows_upstream(i)) {
            continue;
        }
        let Some(hint) = slice.hint(kind) else {
            continue;
        };
        private |= hint.private;
        let left = match slice.fresh_until(kind) {
            Some(until) => {
                u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
            }
            None => hint.ttl_ms,
        };
        ttl = ttl.min(left);
    }
    (ttl, private)
}

/// A page, with the caching hints a stateless host gets with it.
fn reply(ctx: &Context, body: &str, hints: Option<(u64, bool)>) {
    let Some((ttl, private)) = hints else {
        return ctx.reply(body);
    };
    let ttl = ttl.to_string();
    let hints = [
        ("ttlMs", ttl.as_str()),
        ("cacheScope", stateless::scope(private)),
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
            "skills/list" => Kind::Skills,
            _ => Kind::ResourceTemplates,
        };
        // A list an upstream said is fresh only so long is fetched again once it is not
        // (in the background: this answer is what Manifold has now).
        for handle in self.pool.upstreams().iter() {
            handle.refresh_if_stale();
        }
        let catalog = self.hub.catalog();
        let hints = ctx.is_stateless().then(|| hints(&catalog, kind, &ctx));
        // A caller in tool discovery's search mode lists what its session found.
        if kind == Kind::Tools
            && self.list_discovered(&ctx, &catalog, cursor, |body| reply(&ctx, body, hints))
        {
            return;
        }
        let page = match ctx.caller.restricted() {
            // Pages of a team's view are serialized once per view, like the catalog's.
            Some(team) => team
                .view(&catalog)
                .listing(kind)
                .page(cursor)
                .map(|body| reply(&ctx, body, hints)),
            None => catalog
                .listing(kind)
                .page(cursor)
                .map(|body| reply(&ctx, body, hints)),
        };
        if page.is_err() {
            ctx.fail(&RouteError::BadCursor);
        }
    }
}
