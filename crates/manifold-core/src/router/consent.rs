//! Requests to an upstream whose `auth` gives each caller a token of their own: they go on the
//! caller's own connection (one upstream session per caller, never one whose token changes per
//! call), and a caller with no usable token is asked for consent in the host's own protocol:
//! - a session-era host that declared URL elicitation: the error -32042 carrying the link, then
//!   `notifications/elicitation/complete` once the authorization server's callback arrived;
//! - a stateless-era host: an `input_required` result with the URL elicitation, whose retry
//!   (with `requestState`) sends the request again;
//! - any other host: a tool error result (other methods: an error) whose text holds the link.
//!
//! Never a form elicitation: a secret never passes through the host.

use std::sync::Arc;

use manifold_auth::{Broker, Completed, CredentialError};
use manifold_protocol::object::json_string;
use manifold_upstream::{CallerFor, Credential, UpstreamHandle};

use super::inflight;
use super::Router;
use crate::context::Context;
use crate::credentials::{caller_of, BrokerCredential};
use crate::error::{Consent, RouteError};
use crate::request_state::State;
use crate::target::Target;

/// The elicitation capability a host must declare to be sent a URL.
const URL_MODE: &str = r#"{"mode":"url"}"#;

impl Router {
    /// The credential broker, once the server gave one.
    pub fn set_broker(&self, broker: Arc<Broker>) {
        let _ = self.broker.set(broker);
    }

    /// A consent finished (its callback arrived): the host that was sent the link hears
    /// `notifications/elicitation/complete`, and every session hears that the upstream's
    /// tools may have changed (its catalog may be readable now).
    pub fn consent_completed(&self, completed: &Completed) {
        let session = completed
            .binding
            .as_deref()
            .and_then(|b| b.parse::<u64>().ok())
            .and_then(|id| self.sessions.get(id));
        if let Some(session) = session {
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/elicitation/complete\",\"params\":{{\"elicitationId\":{}}}}}",
                json_string(&completed.id)
            );
            session.stream().notify(&[line.as_bytes()]);
        }
        if let Some(index) = self.pool.index_of(&completed.upstream) {
            self.pool.upstreams()[index].restart_if_down();
        }
    }

    /// A caller's connections to upstreams were revoked (`upstream`: one; `None`: all): they
    /// are stopped, so that the next request asks for consent again.
    pub fn credentials_revoked(&self, upstream: Option<&str>, owner: &manifold_auth::Owner) {
        let index = upstream.and_then(|u| self.pool.index_of(u));
        if upstream.is_some() && index.is_none() {
            return;
        }
        let hex = owner.hex();
        let taken = self
            .pool
            .take_callers(self.settings.http.session_idle_timeout, Some((index, &hex)));
        self.stop_all(taken);
    }

    /// Sends a request of an upstream whose tokens are per caller, on the caller's own
    /// connection, or asks the host for consent.
    pub(super) fn send_for_caller(
        self: &Arc<Self>,
        ctx: Context,
        target: Target,
        fill: Option<inflight::Fill>,
    ) {
        let handle = self.pool.upstreams()[target.upstream].clone();
        let Some(broker) = self.broker.get() else {
            return ctx.fail(&RouteError::Upstream(
                manifold_upstream::UpstreamError::Unauthorized {
                    upstream: handle.key().to_owned(),
                    reason: "this Manifold has no credential broker".into(),
                    consent: false,
                },
            ));
        };
        // Whether the caller has a usable token was asked before the cache
        // (`dispatch_for_caller`), which every request passes before it is sent: not asked
        // again. A token gone meanwhile fails this request (-32018); the next asks for consent.
        let caller = caller_of(&ctx);
        let owner: Arc<str> = caller.owner.hex().into();
        let credential = || -> Arc<dyn Credential> {
            Arc::new(BrokerCredential {
                broker: Arc::clone(broker),
                upstream: handle.key().to_owned(),
                caller: caller.clone(),
            })
        };
        let own = self.pool.caller(
            target.upstream,
            CallerFor {
                owner: &owner,
                credential: &credential,
            },
        );
        let Some(own) = own else {
            return ctx.fail(&unstarted(&handle));
        };
        if let Some(conn) = own.connection() {
            return self.send_on(&conn, ctx, target, fill);
        }
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            router.send_when_connected(own, ctx, target, fill).await;
        });
    }

    /// A request of a per-caller upstream, before the cache: a caller with no usable token is
    /// asked for consent; the others go on (to the cache, then their own connection).
    pub(super) fn dispatch_for_caller(self: &Arc<Self>, ctx: Context, target: Target) {
        let Some(broker) = self.broker.get().cloned() else {
            return self.dispatch_ready(ctx, target);
        };
        let caller = caller_of(&ctx);
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            let key = router.pool.upstreams()[target.upstream].key().to_owned();
            if broker.ready(&key, &caller).await {
                router.dispatch_ready(ctx, target);
            } else {
                router.ask_consent(&broker, ctx, &target, &caller).await;
            }
        });
    }

    /// Sends the request on `own` once its handshake is done (bounded).
    async fn send_when_connected(
        &self,
        own: UpstreamHandle,
        ctx: Context,
        target: Target,
        fill: Option<inflight::Fill>,
    ) {
        let conn = match own.connection() {
            Some(conn) => Some(conn),
            None => own.connected(self.settings.startup_timeout).await,
        };
        match conn {
            Some(conn) => self.send_on(&conn, ctx, target, fill),
            None => ctx.fail(&unstarted(&own)),
        }
    }

    /// Asks the host of `ctx` to have its user authorize `target`'s upstream.
    async fn ask_consent(
        &self,
        broker: &Broker,
        ctx: Context,
        target: &Target,
        caller: &manifold_auth::Caller,
    ) {
        let upstream = self.pool.upstreams()[target.upstream].key().to_owned();
        let elicits = !ctx.is_stateless()
            && ctx.client().is_some_and(|c| {
                crate::stateless::may_ask(&c.capabilities, "elicitation/create", Some(URL_MODE))
                    .is_ok()
            });
        let binding = elicits.then(|| ctx.session_id().to_string());
        let link = match broker.consent(&upstream, caller, binding).await {
            Ok(link) => link,
            Err(e) => return ctx.fail(&refused(&upstream, &e)),
        };
        let consent = Consent {
            message: format!(
                "{upstream} needs your authorization: open {} to connect your account, then try again",
                link.url
            ),
            upstream,
            url: link.url,
            id: link.id,
            elicit: elicits,
        };
        if ctx.is_stateless() {
            return self.ask_stateless(ctx, target, &consent, link.expires_at_ms);
        }
        if !elicits && target.method == "tools/call" {
            let result = format!(
                "{{\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"isError\":true}}",
                json_string(&consent.message)
            );
            return ctx.reply(&result);
        }
        ctx.fail(&RouteError::Consent(Box::new(consent)))
    }

    /// A stateless host: an `input_required` result asking for the URL elicitation, with a
    /// sealed `requestState` that sends the request again when the host retries.
    fn ask_stateless(&self, ctx: Context, target: &Target, consent: &Consent, expires: u64) {
        let state = State {
            caller: ctx.caller.id.to_string(),
            method: target.method.to_owned(),
            name: target.exposed.as_deref().unwrap_or_default().to_owned(),
            park: None,
            upstream: None,
            expires,
        };
        let params = format!(
            "{{\"mode\":\"url\",\"message\":{},\"url\":{},\"elicitationId\":{}}}",
            json_string(&consent.message),
            json_string(&consent.url),
            json_string(&consent.id)
        );
        let result = format!(
            "{{\"resultType\":\"input_required\",\"inputRequests\":{{\"authorize\":{{\"method\":\"elicitation/create\",\"params\":{params}}}}},\"requestState\":{}}}",
            json_string(&self.parked.sealer().seal(&state))
        );
        ctx.reply(&result);
    }
}

/// A caller's connection that did not start.
fn unstarted(handle: &UpstreamHandle) -> RouteError {
    RouteError::Upstream(manifold_upstream::UpstreamError::Unavailable {
        upstream: handle.key().to_owned(),
        reason: "the caller's own connection to it did not start in time".into(),
    })
}

/// A consent that could not even be started.
fn refused(upstream: &str, e: &CredentialError) -> RouteError {
    RouteError::Upstream(manifold_upstream::UpstreamError::Unauthorized {
        upstream: upstream.to_owned(),
        reason: e.to_string(),
        consent: false,
    })
}

impl Router {
    /// Stops connections taken from the pool, letting each finish its calls first.
    fn stop_all(&self, taken: Vec<UpstreamHandle>) {
        if taken.is_empty() {
            return;
        }
        self.runtime.spawn(async move {
            futures::future::join_all(taken.iter().map(UpstreamHandle::shutdown)).await;
        });
    }

    /// Every minute, stops the callers' own connections that went unused for as long as an
    /// idle HTTP session lives.
    pub fn reap_caller_connections(self: &Arc<Self>) {
        let this = Arc::downgrade(self);
        self.runtime.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tick.tick().await;
                let Some(router) = this.upgrade() else { return };
                let idle = router.settings.http.session_idle_timeout;
                let taken = router.pool.take_callers(idle, None);
                router.stop_all(taken);
            }
        });
    }
}

impl Router {
    /// The credential broker, if the server gave one.
    pub fn broker(&self) -> Option<&Arc<Broker>> {
        self.broker.get()
    }
}
