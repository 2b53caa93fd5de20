//! The actor's side of its catalog: refreshing its lists when the upstream says they changed
//! or their caching hints ran out, and the stateless era's `subscriptions/listen` stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_catalog::{Kind, UpstreamSlice, UpstreamState};
use manifold_config::Transport;
use manifold_protocol::version::Era;

use super::{Link, ListenNews, Listening, Refresh, RefreshStale, Role, UpstreamActor};
use crate::connection::ListenFilter;
use crate::handshake;

/// `list_changed` notifications that come within this of each other make one refresh (and at
/// most one notification to hosts): servers often send several in a burst.
const REFRESH_DEBOUNCE: Duration = Duration::from_millis(20);
/// A `subscriptions/listen` stream that ended is opened again after this, doubling up to
/// [`LISTEN_MAX_BACKOFF`]; an acknowledged stream starts the delay over.
const LISTEN_BACKOFF: Duration = Duration::from_secs(1);
const LISTEN_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// After a refresh of stale lists failed, they count as fresh this long (so that hosts' list
/// requests do not each ask a failing upstream again).
const STALE_RETRY: Duration = Duration::from_secs(5);

/// How the actor reopens the `subscriptions/listen` stream.
pub(super) struct ListenPlan {
    /// The delay before an ended stream is opened again.
    backoff: Duration,
    /// A reopening for changed subscriptions is planned.
    planned: bool,
}

impl Default for ListenPlan {
    fn default() -> Self {
        Self {
            backoff: LISTEN_BACKOFF,
            planned: false,
        }
    }
}

impl Handler<Refresh> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, msg: Refresh, ctx: &mut Context<Self>) {
        if msg.generation != self.generation {
            return;
        }
        for kind in msg.kinds {
            if !self.refresh.kinds.contains(&kind) {
                self.refresh.kinds.push(kind);
            }
        }
        self.schedule_refresh(ctx);
    }
}

impl UpstreamActor {
    /// Refreshes the gathered lists a little later, unless that is already planned or a
    /// refresh is running (it schedules the next one when it ends).
    fn schedule_refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refresh.scheduled || self.refresh.running || self.refresh.kinds.is_empty() {
            return;
        }
        self.refresh.scheduled = true;
        ctx.run_later(REFRESH_DEBOUNCE, |act, ctx| act.run_refresh(ctx));
    }

    fn run_refresh(&mut self, ctx: &mut Context<Self>) {
        self.refresh.scheduled = false;
        let (Some(conn), Some(old)) = (self.current.clone(), self.slice.clone()) else {
            self.refresh.kinds.clear();
            return;
        };
        let kinds = std::mem::take(&mut self.refresh.kinds);
        self.refresh.running = true;
        let generation = self.generation;
        let http = matches!(self.cfg.transport, Transport::Http(_));
        let fut = handshake::refresh(conn, old, kinds, http);
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |res, act: &mut Self, ctx| {
                act.refresh.running = false;
                if generation != act.generation {
                    return;
                }
                match res {
                    Ok(slice) => {
                        let same = act.slice.as_ref().is_some_and(|old| old.same_lists(&slice));
                        let slice = Arc::new(slice);
                        act.slice = Some(Arc::clone(&slice));
                        if same {
                            // Only when it was fetched changed: nothing hosts or caches need hear.
                            act.hub.replace_slice(act.index, slice);
                        } else {
                            act.hub.update(act.index, UpstreamState::Up, Some(slice));
                        }
                        act.mark_staleness();
                        act.tools_changed();
                    }
                    Err(e) => {
                        tracing::warn!(upstream = %act.key, "refreshing its catalog failed: {e}");
                        act.published
                            .set_stale_at(Some(Instant::now() + STALE_RETRY));
                    }
                }
                act.schedule_refresh(ctx);
            }),
        );
    }
}

impl UpstreamActor {
    /// Tells callers when the first of its lists goes stale by its caching hint (see
    /// `UpstreamHandle::refresh_if_stale`). Only the shared connection's lists make the
    /// catalog, so only they go stale.
    pub(super) fn mark_staleness(&self) {
        let at = match (&self.role, &self.slice) {
            (Role::Shared, Some(slice)) => Kind::ALL
                .into_iter()
                .filter_map(|k| slice.fresh_until(k))
                .min(),
            _ => None,
        };
        self.published.set_stale_at(at);
    }

    /// Tells a stateless-era HTTP upstream's client its tools, whose calls mirror annotated
    /// parameters into headers: this connection's own list, or for a session's own
    /// connection (which fetches none) the shared one's.
    pub(super) fn tools_changed(&self) {
        let (Some(Link::Http(client)), Some(conn)) = (&self.link, &self.current) else {
            return;
        };
        if conn.era() != Era::Stateless {
            return;
        }
        match (&self.role, &self.slice) {
            (Role::Isolated { .. }, _) => {
                if let Some(shared) = self.hub.catalog().slice(self.index) {
                    client.set_tools(&shared.tools);
                }
            }
            (_, Some(slice)) => client.set_tools(&slice.tools),
            (_, None) => {}
        }
    }

    /// Opens the stateless era's `subscriptions/listen` stream: the shared connection asks
    /// for the list changes the upstream declared it sends; every connection asks for the
    /// resources subscribed to on it.
    pub(super) fn start_listening(&mut self, slice: &UpstreamSlice) {
        let Some(conn) = &self.current else { return };
        let filter = match self.role {
            Role::Shared => ListenFilter {
                tools: slice.has_feature("tools", "listChanged"),
                prompts: slice.has_feature("prompts", "listChanged"),
                resources: slice.has_feature("resources", "listChanged"),
            },
            Role::Isolated { .. } | Role::Team => ListenFilter::default(),
        };
        conn.start_listening(filter);
    }
}

impl Handler<RefreshStale> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, _: RefreshStale, ctx: &mut Context<Self>) {
        let Some(slice) = self.slice.clone() else {
            return;
        };
        let now = Instant::now();
        for kind in Kind::ALL {
            let stale = slice.fresh_until(kind).is_some_and(|until| until <= now);
            if stale && !self.refresh.kinds.contains(&kind) {
                self.refresh.kinds.push(kind);
            }
        }
        if self.refresh.kinds.is_empty() {
            // Nothing stale after all (a refresh just ended): say when something will be.
            self.mark_staleness();
        }
        self.schedule_refresh(ctx);
    }
}

impl Handler<Listening> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, msg: Listening, ctx: &mut Context<Self>) {
        // Streams end with their upstream when Manifold stops it: nothing to open again.
        if msg.generation != self.generation || self.life.phase().is_stopping() {
            return;
        }
        match msg.what {
            ListenNews::Acknowledged => self.listen.backoff = LISTEN_BACKOFF,
            ListenNews::Changed => {
                if !self.listen.planned {
                    self.listen.planned = true;
                    // Subscriptions often change in a burst (every one of a host's, after a
                    // restart): one new stream for all of them.
                    ctx.run_later(REFRESH_DEBOUNCE, move |act, _| {
                        act.listen.planned = false;
                        if let (Some(conn), true) = (&act.current, act.generation == msg.generation)
                        {
                            conn.listen_again();
                        }
                    });
                }
            }
            ListenNews::Ended(end) if end.unsupported() => {
                tracing::info!(upstream = %self.key, "it does not serve subscriptions/listen; its list changes and resource updates will not be heard");
            }
            ListenNews::Ended(end) => {
                let delay = self.listen.backoff;
                self.listen.backoff = (delay * 2).min(LISTEN_MAX_BACKOFF);
                tracing::info!(upstream = %self.key, "its subscriptions/listen stream ended ({end}); listening again in {}ms", delay.as_millis());
                ctx.run_later(delay, move |act, _| {
                    let Some(conn) = &act.current else { return };
                    if act.generation == msg.generation && !conn.is_listening() {
                        conn.listen_again();
                    }
                });
            }
        }
    }
}
