//! Tool discovery as the router serves it (see `crate::discovery`): `tools/list` in search
//! mode, `find_tools`, the found tool a call touches, and found tools that leave the catalog.

use std::sync::Arc;

use manifold_catalog::{Catalog, Kind, Listing};
use manifold_config::{DiscoveryMode, DiscoverySettings};
use manifold_protocol::{write, Envelope, RawObject};
use manifold_telemetry::discovery::DiscoveryCounters;

use crate::context::Context;
use crate::discovery::{self, Listed, Query, FIND_TOOLS};
use crate::error::RouteError;
use crate::policy::Caller;
use crate::router::Router;
use crate::session::Session;

impl Router {
    /// The discovery settings of `ctx`'s caller: what its host chose, else its team's, else
    /// `[discovery]`.
    pub(in crate::router) fn discovery_of(&self, ctx: &Context) -> Arc<DiscoverySettings> {
        if let Some(chosen) = ctx.session.as_ref().and_then(|s| s.found().chosen()) {
            return Arc::new(chosen.clone());
        }
        self.configured_discovery(&ctx.caller)
    }

    /// The discovery settings the configuration gives `caller`: its team's, else
    /// `[discovery]`.
    fn configured_discovery(&self, caller: &Caller) -> Arc<DiscoverySettings> {
        match &caller.team {
            Some(team) => Arc::new(team.config().discovery.clone()),
            None => self.discovery.anonymous(),
        }
    }

    /// A shared session copied from the store (or refreshed) takes what its host chose at
    /// `initialize` (`asked`, applied over this replica's settings for its caller) and the
    /// tools it found on any replica (`found`, most recently used first).
    pub fn restore_discovery(&self, session: &Session, asked: Option<&str>, found: Vec<Box<str>>) {
        if let Some(asked) = asked {
            if session.found().chosen().is_none() {
                let base = self.configured_discovery(session.caller());
                if let Ok(Some((settings, asked))) = discovery::chosen(asked, &base) {
                    self.discovery.chosen(&settings);
                    session.found().choose(settings, asked);
                }
            }
        }
        session.found().set(found);
    }

    /// The settings a host chose in its `initialize` (`_meta`), kept on its session; an
    /// error says what is wrong with them.
    pub(in crate::router) fn choose_discovery(
        &self,
        ctx: &Context,
        meta: Option<&str>,
    ) -> Result<(), RouteError> {
        let (Some(meta), Some(session)) = (meta, &ctx.session) else {
            return Ok(());
        };
        if !meta.contains(discovery::META_KEY) {
            return Ok(());
        }
        let base = self.discovery_of(ctx);
        match discovery::chosen(meta, &base) {
            Ok(Some((settings, asked))) => {
                self.discovery.chosen(&settings);
                session.found().choose(settings, asked);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(why) => Err(RouteError::InvalidParams(why)),
        }
    }

    /// `tools/list` for a caller in search mode: true when it was answered here.
    pub(in crate::router) fn list_discovered(
        &self,
        ctx: &Context,
        catalog: &Catalog,
        cursor: Option<&str>,
        reply: impl FnOnce(&str),
    ) -> bool {
        if !self.discovery.active() {
            return false;
        }
        let settings = self.discovery_of(ctx);
        if settings.mode != DiscoveryMode::Search {
            return false;
        }
        if cursor.is_some() {
            // The page is always whole: a cursor is one this page never gave.
            ctx.fail(&RouteError::BadCursor);
            return true;
        }
        let view = ctx.caller.restricted().map(|team| team.view(catalog));
        let listing = view
            .as_ref()
            .map_or(catalog.listing(Kind::Tools), |v| v.listing(Kind::Tools));
        let session = ctx.session.as_deref().filter(|_| !ctx.is_stateless());
        let found = session
            .map(|s| s.found().recent_first())
            .unwrap_or_default();
        let (listed, evicted) = discovery::select(listing, &settings, &found);
        let counters = counters(ctx);
        if let Some(session) = session.filter(|_| !evicted.is_empty()) {
            session.found().remove(&evicted);
            DiscoveryCounters::add(&counters.evicted, evicted.len());
            if let Some(relay) = session.relay() {
                relay.found_changed(session);
            }
        }
        let body = discovery::page(&listed, ctx.is_stateless());
        DiscoveryCounters::add(&counters.listed_bytes, body.len());
        let full = listing.page(None).map_or(0, str::len);
        DiscoveryCounters::add(&counters.full_bytes, full);
        reply(&body);
        true
    }

    /// A `tools/call` of `find_tools` by a caller in search mode: answered here, and true.
    pub(in crate::router) fn find_tools(&self, ctx: &Context, env: &Envelope<'_>) -> bool {
        // Every call passes here while some caller searches: a scan for the name, not a
        // parse, keeps the others' cost down.
        let named = env
            .params
            .is_some_and(|p| memchr::memmem::find(p.as_bytes(), FIND_TOOLS.as_bytes()).is_some());
        let Some(params) = env
            .params
            .filter(|_| named)
            .and_then(|p| RawObject::parse(p).ok())
        else {
            return false;
        };
        if params.get_str("name").as_deref() != Some(FIND_TOOLS) {
            return false;
        }
        if self.discovery_of(ctx).mode != DiscoveryMode::Search {
            return false;
        }
        let query = match Query::parse(params.get("arguments")) {
            Ok(query) => query,
            Err(why) => {
                ctx.fail(&RouteError::InvalidParams(why));
                return true;
            }
        };
        let catalog = self.hub.catalog();
        let view = ctx.caller.restricted().map(|team| team.view(&catalog));
        let listing = view
            .as_ref()
            .map_or(catalog.listing(Kind::Tools), |v| v.listing(Kind::Tools));
        let hits = self.search(&catalog, listing, &query);
        let counters = counters(ctx);
        DiscoveryCounters::add(&counters.searches, 1);
        DiscoveryCounters::add(&counters.results, hits.len());
        let session = ctx.session.as_deref().filter(|_| !ctx.is_stateless());
        let listed = match session {
            Some(session) => {
                let names: Vec<&str> = hits.iter().map(|h| h.exposed.as_str()).collect();
                let listed = self.list_found(ctx, session, listing, &names);
                DiscoveryCounters::add(&counters.added, listed.added.len());
                DiscoveryCounters::add(&counters.evicted, listed.evicted.len());
                listed
            }
            None => Listed::default(),
        };
        let changed = session.filter(|_| !listed.added.is_empty() || !listed.evicted.is_empty());
        if let Some(session) = changed {
            // Replicas sharing the session hear of its new list before its host does.
            if let Some(relay) = session.relay() {
                relay.found_changed(session);
            }
        }
        ctx.reply(&discovery::result(
            &hits,
            listing,
            &listed,
            session.is_none(),
        ));
        if let Some(session) = changed {
            let mut line = Vec::new();
            write::notification(&mut line, "notifications/tools/list_changed", None);
            session.stream().notify(&[&line]);
        }
        true
    }

    /// The tools of `listing` (the caller's view) that match `query`.
    fn search(
        &self,
        catalog: &Catalog,
        listing: &Listing,
        query: &Query,
    ) -> Vec<manifold_catalog::search::Hit> {
        let index = self.discovery.index(catalog);
        let defs = catalog.defs();
        let upstream = query.upstream.as_deref();
        // The catalog's own listing holds every tool of the index: nothing to look up.
        let whole = std::ptr::eq(listing, catalog.listing(Kind::Tools));
        let admit = |item: &manifold_catalog::Item| {
            (whole || listing.get(&item.exposed).is_some())
                && upstream.is_none_or(|u| {
                    defs.get(item.upstream)
                        .is_some_and(|d| d.key == u || d.prefix == u)
                })
        };
        index.search(&query.query, query.k, &admit)
    }

    /// Adds `names` (found just now) to `session`'s list, evicting the least recently used
    /// found tools that no longer fit its budget. Pinned tools are listed anyway.
    fn list_found(
        &self,
        ctx: &Context,
        session: &Session,
        listing: &Listing,
        names: &[&str],
    ) -> Listed {
        let settings = self.discovery_of(ctx);
        let names: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !settings.pins(n))
            .collect();
        let added = session.found().add(&names);
        let found = session.found().recent_first();
        let (_, evicted) = discovery::select(listing, &settings, &found);
        session.found().remove(&evicted);
        // What was found and did not fit (a budget that pinned tools fill) is not listed.
        let added = added.into_iter().filter(|a| !evicted.contains(a)).collect();
        Listed { added, evicted }
    }

    /// After a catalog change: each session's found tools that left its view leave its list.
    pub(in crate::router) fn prune_found(&self, catalog: &Catalog) {
        if !self.discovery.active() {
            return;
        }
        for session in self.sessions.all() {
            let view = session.caller().restricted().map(|t| t.view(catalog));
            let listing = view
                .as_ref()
                .map_or(catalog.listing(Kind::Tools), |v| v.listing(Kind::Tools));
            session.found().prune(|name| listing.get(name).is_some());
        }
    }
}

/// The discovery counters of `ctx`'s team.
fn counters(ctx: &Context) -> Arc<DiscoveryCounters> {
    manifold_telemetry::metrics()
        .discovery
        .team(ctx.caller.label())
}
