//! The router as the hub's listener: what upstreams say goes to the fan-out; what changes
//! about an upstream reaches the cache and what was asked of it on the hosts' behalf.

use manifold_catalog::{Catalog, Kind};
use manifold_protocol::RawObject;
use manifold_upstream::Listener;

use super::Router;

impl Listener for Router {
    fn lists_changed(&self, before: &Catalog, after: &Catalog, kinds: &[Kind]) {
        if kinds.contains(&Kind::Tools) {
            // Found tools that left a session's view leave its list first.
            self.prune_found(after);
        }
        self.fanout.lists_changed(before, after, kinds);
    }

    fn upstream_notification(
        &self,
        upstream: usize,
        session: Option<u64>,
        method: &str,
        params: Option<&str>,
    ) {
        let live = self.live();
        if let ("notifications/resources/updated", Some(cache), Some(p)) =
            (method, &live.cache, params)
        {
            let uri = RawObject::parse(p)
                .ok()
                .and_then(|o| o.get_str("uri").map(|u| u.into_owned()));
            let catalog = self.hub.catalog();
            if let Some((owner, original)) = uri.as_deref().and_then(|u| catalog.resolve_uri(u)) {
                if owner == upstream {
                    cache.resource_updated(upstream, &original);
                }
            }
        }
        self.fanout.upstream_said(upstream, session, method, params);
    }

    fn upstream_changed(&self, upstream: usize) {
        if let Some(cache) = &self.live().cache {
            cache.upstream_changed(upstream, &self.hub.catalog());
        }
    }

    fn upstream_ready(&self, upstream: usize) {
        for uri in self.interest.subscribed_on(upstream) {
            self.tell_subscription(upstream, &uri, true);
        }
        self.interest.forget_level(upstream);
        if let Some(router) = self.this.upgrade() {
            self.runtime
                .spawn(async move { router.apply_log_levels(Some(upstream)).await });
        }
    }
}
