//! `server/discover`: the revisions Manifold speaks and what it offers, for hosts of either
//! era (a host may probe with it before it picks one). Like `initialize`, it waits (bounded)
//! for every upstream's first start, and names only what the caller's team may know of.

use std::sync::Arc;

use crate::context::Context;
use crate::router::Router;
use crate::stateless;

use super::initialize::{discovery, for_caller};

impl Router {
    pub(in crate::router) fn discover(self: &Arc<Self>, ctx: Context) {
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            router
                .hub
                .wait_settled(router.settings.startup_timeout)
                .await;
            let catalog = router.hub.catalog();
            let ttl = stateless::LIST_TTL_MS;
            let result = for_caller(&catalog, &ctx.caller, |known| {
                discovery(&catalog, known, ttl)
            });
            let scope = [("cacheScope", stateless::scope(ctx.caller.team.is_some()))];
            // A stateless result whatever era the host speaks: it is that era's method.
            let result = stateless::complete(&result, &scope);
            ctx.reply(&result);
        });
    }
}
