//! `resources/subscribe` and `resources/unsubscribe`: counted per upstream resource, so the
//! upstream is asked once however many sessions subscribe, and told to stop when the last
//! one leaves.

use std::sync::Arc;

use manifold_protocol::Params;
use manifold_upstream::UpstreamHandle;

use crate::context::Context;
use crate::error::RouteError;
use crate::router::{resolve, Router};
use crate::session::Session;

impl Router {
    pub(in crate::router) fn subscribe(
        self: &Arc<Self>,
        ctx: Context,
        params: &Params<'_>,
        on: bool,
    ) {
        let Some(exposed) = params.uri.as_deref() else {
            return ctx.fail(&RouteError::InvalidParams("missing \"uri\"".into()));
        };
        let Some(session) = ctx.session.clone() else {
            return ctx.fail(&RouteError::InvalidParams(
                "subscriptions need a session".into(),
            ));
        };
        let catalog = self.hub.catalog();
        let sight = ctx.caller.restricted().map(|t| &**t);
        let (upstream, original) = match resolve::resolve_uri(&catalog, exposed, sight) {
            Ok(found) => found,
            Err(e) => return ctx.fail(&e),
        };
        let changed = if on {
            session.subscribe(exposed)
        } else {
            session.unsubscribe(exposed)
        };
        if let Some(relay) = session.relay().filter(|_| changed) {
            relay.changed(&session);
        }
        // A shared session's upstream subscriptions are held by its home replica.
        let first = changed
            && !session.is_away()
            && if on {
                self.interest.subscribe(upstream, &original)
            } else {
                self.interest.unsubscribe(upstream, &original)
            };
        if !first {
            // Another session keeps the upstream subscribed, or nothing changes.
            return ctx.reply("{}");
        }
        let handle = &self.pool.upstreams()[upstream];
        let Some(conn) = handle.connection() else {
            // Asked again when the upstream is back (Listener::upstream_ready).
            return ctx.reply("{}");
        };
        let method = if on {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let upstream_params = format!(
            "{{\"uri\":{}}}",
            manifold_protocol::object::json_string(&original)
        );
        let (router, exposed, original) =
            (Arc::clone(self), exposed.to_owned(), original.into_owned());
        self.runtime.spawn(async move {
            match conn.request(method, Some(&upstream_params)).await {
                Ok(manifold_upstream::Answer::Result(_)) => ctx.reply("{}"),
                Ok(manifold_upstream::Answer::Error(e)) => {
                    if on {
                        // Refused: the session is not subscribed after all.
                        session.unsubscribe(&exposed);
                        router.interest.unsubscribe(upstream, &original);
                        if let Some(relay) = session.relay() {
                            relay.changed(&session);
                        }
                    }
                    ctx.fail_upstream(&e);
                }
                Err(e) => ctx.fail(&RouteError::Upstream(e)),
            }
        });
    }

    /// Asks an upstream to (un)subscribe, without waiting for its answer.
    pub(in crate::router) fn tell_subscription(&self, upstream: usize, uri: &str, subscribe: bool) {
        let asked = self.ask_subscription(upstream, uri, subscribe);
        self.runtime.spawn(asked);
    }

    /// Asks an upstream to (un)subscribe; the future ends with its answer (a failure is
    /// logged). Nothing is asked of an upstream that is not connected: it is asked when it is
    /// back (`Listener::upstream_ready`).
    pub(in crate::router) fn ask_subscription(
        &self,
        upstream: usize,
        uri: &str,
        subscribe: bool,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let conn = self
            .pool
            .upstreams()
            .get(upstream)
            .and_then(UpstreamHandle::connection);
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let params = format!(
            "{{\"uri\":{}}}",
            manifold_protocol::object::json_string(uri)
        );
        let key = self
            .pool
            .upstreams()
            .get(upstream)
            .map(|h| h.key().to_owned())
            .unwrap_or_default();
        async move {
            let Some(conn) = conn else { return };
            if let Err(e) = conn.request(method, Some(&params)).await {
                tracing::warn!(upstream = key, "{method} failed: {e}");
            }
        }
    }
}

/// A session kept in a store shared by replicas holds its upstream subscriptions on its home
/// replica only; these move them when the home changes, and follow what another replica
/// recorded.
impl Router {
    /// Subscribes upstream for each of the session's URIs (this replica became its home).
    pub fn take_subscriptions(&self, session: &Session) {
        for uri in session.subscriptions() {
            self.move_subscription(&uri, true);
        }
    }

    /// Releases upstream each of the session's URIs (another replica became its home).
    pub fn release_subscriptions(&self, session: &Session) {
        for uri in session.subscriptions() {
            self.move_subscription(&uri, false);
        }
    }

    /// Makes the session's subscriptions `wanted` (as another replica recorded them),
    /// subscribing or releasing upstream if this replica is its home.
    pub fn set_subscriptions(&self, session: &Session, wanted: &[String]) {
        let current = session.subscriptions();
        for uri in current.iter().filter(|u| !wanted.contains(u)) {
            if session.unsubscribe(uri) && !session.is_away() {
                self.move_subscription(uri, false);
            }
        }
        for uri in wanted.iter().filter(|u| !current.contains(u)) {
            if session.subscribe(uri) && !session.is_away() {
                self.move_subscription(uri, true);
            }
        }
    }

    fn move_subscription(&self, exposed: &str, on: bool) {
        let catalog = self.hub.catalog();
        let Some((upstream, original)) = catalog.resolve_uri(exposed) else {
            return;
        };
        let first = if on {
            self.interest.subscribe(upstream, &original)
        } else {
            self.interest.unsubscribe(upstream, &original)
        };
        if first {
            self.tell_subscription(upstream, &original, on);
        }
    }
}
