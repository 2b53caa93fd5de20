//! Requests the cache may answer: looked up, or filled by forwarding the request as usual
//! while its answer is kept. Identical requests at the same time wait for one fill; those
//! whose fill stored nothing try the store once more, then go upstream themselves. With the
//! shared tier, the fill first looks there (one lookup for all the identical requests of
//! this process); what it finds is served and kept in memory for the time it has left.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use manifold_catalog::Catalog;
use manifold_protocol::RawObject;
use manifold_telemetry::Tier;
use manifold_upstream::Answer;
use tokio::sync::oneshot;

use super::{inflight::Fill, Router};
use crate::cache::{Cache, Family, FromShared, Lookup, Plan, Ticket};
use crate::context::Context;
use crate::target::Target;

/// A request waiting on the cache, taken by whichever step answers it.
type Slot = Arc<Mutex<Option<(Context, Target)>>>;

fn take(slot: &Slot) -> Option<(Context, Target)> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

impl Router {
    /// Sends the request upstream, or answers it from the cache.
    pub(super) fn dispatch(self: &Arc<Self>, ctx: Context, target: Target) {
        // A caller without a usable token of their own is asked for consent before anything
        // is answered, from the cache either (a revoked caller is not served what was kept).
        if self.pool.per_caller(target.upstream) {
            return self.dispatch_for_caller(ctx, target);
        }
        self.dispatch_ready(ctx, target);
    }

    /// [`Router::dispatch`] once the caller may reach the upstream.
    pub(super) fn dispatch_ready(self: &Arc<Self>, ctx: Context, target: Target) {
        let live = self.live();
        let Some(cache) = &live.cache else {
            return self.send(ctx, target, None);
        };
        match cache.plan(&ctx, &target, &self.hub.catalog()) {
            Ok(Plan::Forward) => self.send(ctx, target, None),
            Ok(Plan::Bypass) => {
                record(&ctx, "bypass");
                self.send(ctx, target, None);
            }
            Ok(Plan::Use(lookup)) => {
                let (router, cache) = (Arc::clone(self), Arc::clone(cache));
                self.run_here_first(
                    async move { router.cached(&cache, ctx, target, *lookup).await },
                );
            }
            Err(e) => ctx.fail(&e),
        }
    }

    /// Runs `work` on this thread until it first waits, then on the runtime. A hit is answered
    /// without leaving the thread that read the request, and a miss is forwarded from it; only
    /// what waits (a fill's entry, an identical request's fill) moves to the runtime.
    fn run_here_first(&self, work: impl Future<Output = ()> + Send + 'static) {
        let mut work = Box::pin(work);
        let mut here = std::task::Context::from_waker(futures::task::noop_waker_ref());
        // The runtime polls it again at once, with a waker of its own: nothing is missed.
        if work.as_mut().poll(&mut here).is_pending() {
            self.runtime.spawn(work);
        }
    }

    async fn cached(self: Arc<Self>, cache: &Cache, ctx: Context, target: Target, lookup: Lookup) {
        if lookup.refresh {
            // Gone before the request is sent: a request after its answer gets the fresh
            // entry, or waits for it.
            lookup.store().invalidate(&lookup.key).await;
        }
        let slot: Slot = Arc::new(Mutex::new(Some((ctx, target))));
        // A request that waited for another's fill, which kept nothing (its answer was not to
        // be kept, or it failed), tries once more, then asks for itself.
        for _ in 0..2 {
            let init = {
                let (router, slot) = (Arc::clone(&self), Arc::clone(&slot));
                let lookup = &lookup;
                async move {
                    // Only the first of identical requests runs this: it asks the shared tier,
                    // if any, then goes upstream.
                    let Some((ctx, target)) = take(&slot) else {
                        return Err(());
                    };
                    let ticket = match cache.look_shared(lookup).await {
                        FromShared::Unused => None,
                        FromShared::Missing(ticket) => Some(ticket),
                        FromShared::Found { ticket, .. } if lookup.refresh => Some(ticket),
                        FromShared::Found {
                            result,
                            remaining,
                            ticket,
                        } => match cache.keepable(lookup, Some(remaining)) {
                            Some(ttl) => {
                                return router.serve_shared(cache, lookup, ctx, result, ttl).await
                            }
                            // The upstream changed meanwhile.
                            None => Some(ticket),
                        },
                    };
                    record(&ctx, "miss");
                    lookup.counters.miss();
                    router.fill(cache, lookup, ctx, target, ticket).await
                }
            };
            let found = lookup.store().try_get_with(lookup.key.clone(), init).await;
            let Some((ctx, target)) = take(&slot) else {
                // This request filled it: the store's upkeep is done a little at a time,
                // after the host has its answer, rather than in rare long batches.
                lookup.store().run_pending_tasks().await;
                return;
            };
            match found {
                Ok(entry) => {
                    record(&ctx, "hit");
                    lookup.counters.hit(Tier::Memory);
                    return ctx.reply(&entry.result);
                }
                Err(_) => {
                    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((ctx, target))
                }
            }
        }
        if let Some((ctx, target)) = take(&slot) {
            record(&ctx, "miss");
            lookup.counters.miss();
            self.send(ctx, target, None);
        }
    }

    /// Answers the request with `result`, found in the shared tier, and keeps it in memory
    /// for `ttl`. A resource is subscribed to upstream as a fill's is, so that this replica
    /// too hears of a change while it holds the entry.
    async fn serve_shared(
        self: &Arc<Self>,
        cache: &Cache,
        lookup: &Lookup,
        ctx: Context,
        result: Box<str>,
        ttl: std::time::Duration,
    ) -> Result<Arc<crate::cache::Entry>, ()> {
        record(&ctx, "hit");
        lookup.counters.hit(Tier::Redis);
        ctx.reply(&result);
        drop(ctx);
        let subscription = match lookup.family() {
            Family::Resources => {
                self.hold_subscription(lookup.upstream(), lookup.key_name())
                    .await
            }
            Family::Tools => None,
        };
        cache
            .entry_for(lookup, result, ttl, subscription)
            .map_err(|subscription| {
                if let Some((upstream, uri)) = subscription {
                    self.release_subscription(upstream, &uri);
                }
            })
    }

    /// Forwards the request; the host gets the answer as always, and the cache an entry when
    /// the answer may be kept (in the shared tier too, with `ticket`). A resource read is first
    /// subscribed to upstream (where the upstream allows), so that a change after the read is
    /// heard.
    async fn fill(
        self: &Arc<Self>,
        cache: &Cache,
        lookup: &Lookup,
        ctx: Context,
        target: Target,
        ticket: Option<Ticket>,
    ) -> Result<Arc<crate::cache::Entry>, ()> {
        let subscription = match lookup.family() {
            Family::Resources => {
                self.hold_subscription(target.upstream, lookup.key_name())
                    .await
            }
            Family::Tools => None,
        };
        let (tx, rx) = oneshot::channel();
        self.send(ctx, target, Some(Fill::new(tx)));
        let kept = match rx.await {
            Ok(Some(result)) => cache.entry(lookup, result, subscription),
            _ => Err(subscription),
        };
        if let (Ok(entry), Some(ticket)) = (&kept, ticket) {
            cache.share(ticket, entry);
        }
        kept.map_err(|subscription| {
            if let Some((upstream, uri)) = subscription {
                self.release_subscription(upstream, &uri);
            }
        })
    }

    /// Subscribes upstream to `uri` for the cache (once, however many entries hold it), when
    /// the upstream supports subscribing. `None`: entries rely on their ttl alone.
    async fn hold_subscription(&self, upstream: usize, uri: &str) -> Option<(usize, Box<str>)> {
        if !can_subscribe(&self.hub.catalog(), upstream) {
            return None;
        }
        if !self.interest.subscribe(upstream, uri) {
            return Some((upstream, uri.into()));
        }
        let conn = self.pool.upstreams().get(upstream)?.connection();
        let params = format!(
            "{{\"uri\":{}}}",
            manifold_protocol::object::json_string(uri)
        );
        let answer = match conn {
            Some(conn) => conn
                .request("resources/subscribe", Some(&params))
                .await
                .ok(),
            None => None,
        };
        if let Some(Answer::Result(_)) = answer {
            return Some((upstream, uri.into()));
        }
        tracing::debug!(
            upstream = self.pool.upstreams()[upstream].key(),
            uri,
            "could not subscribe for the cache; its entry lasts its ttl"
        );
        self.interest.unsubscribe(upstream, uri);
        None
    }

    /// An entry that held a subscription went: the upstream is told to stop when nothing
    /// else (another entry, a host) still wants it.
    pub(super) fn release_subscription(&self, upstream: usize, uri: &str) {
        if self.interest.unsubscribe(upstream, uri) {
            self.tell_subscription(upstream, uri, false);
        }
    }
}

/// Notes on the request's span how the cache served it.
fn record(ctx: &Context, how: &'static str) {
    if !ctx.span.is_disabled() {
        ctx.span.record("manifold.cache", how);
    }
}

/// Whether upstream `upstream` declared `resources.subscribe`.
fn can_subscribe(catalog: &Catalog, upstream: usize) -> bool {
    catalog
        .slice(upstream)
        .and_then(|s| s.capabilities.as_deref())
        .and_then(|c| RawObject::parse(c.get()).ok())
        .and_then(|c| c.get("resources").map(str::to_owned))
        .and_then(|r| {
            RawObject::parse(&r)
                .ok()
                .map(|r| r.get("subscribe") == Some("true"))
        })
        .unwrap_or(false)
}
