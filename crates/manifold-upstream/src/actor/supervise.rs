//! The actor's side of its lifecycle (see [`super::lifecycle`] for the rules): starting a
//! connection and its handshake, what its end leads to (a restart after the backoff, at once
//! after a child died on its era probe, or the end of a shutdown), and the shutdown itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_catalog::{UpstreamSlice, UpstreamState};
use manifold_config::{EraChoice, HttpKind, Transport};
use manifold_protocol::version::Era;
use rustix::process::Signal;
use tokio::sync::oneshot;

use super::lifecycle::Event;
use super::{
    ConnectionEvents, Exited, Link, RefreshState, Role, Shutdown, UpstreamActor, HEALTHY_AFTER,
};
use crate::connection::Connection;
use crate::{handshake, http, process, stdio};

impl UpstreamActor {
    /// Starts a connection, if one is due (see [`super::lifecycle::Phase::start_due`]).
    pub(super) fn start(&mut self, ctx: &mut Context<Self>) {
        let Some(probe) = self.life.phase().start_due() else {
            return;
        };
        self.generation += 1;
        if self.generation > 1 {
            self.counters
                .restarts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.refresh = RefreshState::default();
        self.listen = super::catalog::ListenPlan::default();
        self.published.set_stale_at(None);
        let generation = self.generation;
        let _span =
            tracing::info_span!("upstream.start", upstream = %self.key, generation).entered();
        let events = Box::new(ConnectionEvents {
            addr: ctx.address(),
            hub: Arc::clone(&self.hub),
            index: self.index,
            generation,
            session: self.role.session(),
            catalog: matches!(self.role, Role::Shared),
        });
        let addr = ctx.address();
        let exited = move |reason: String| addr.do_send(Exited { generation, reason });
        let started = self.open(events, exited);
        let (conn, link) = match started {
            Ok(started) => started,
            Err(reason) => return self.stopped_with(ctx, reason),
        };
        self.life.on(&self.key, Event::Spawned);
        self.link = Some(link);
        conn.set_breaker(Arc::clone(&self.published.breaker));
        self.current = Some(Arc::clone(&conn));
        let capabilities = match &self.role {
            Role::Shared | Role::Team => None,
            Role::Isolated {
                capabilities, peer, ..
            } => {
                conn.set_peer(Arc::clone(peer));
                Some(Arc::clone(capabilities))
            }
        };
        if matches!(self.role, Role::Shared) && !self.life.phase().is_replacing() {
            // Calls may be sent before the handshake ends; the catalog gates them meanwhile.
            // A connection that replaces another is published once ready (`handshake_done`).
            self.published.store(Some(Arc::clone(&conn)));
        }
        let era = self.era_plan(probe);
        if era != EraChoice::Session {
            conn.will_probe();
        }
        let plan = handshake::Plan {
            era,
            probe_timeout: handshake::PROBE_TIMEOUT.min(self.timing.request),
            http: matches!(self.cfg.transport, Transport::Http(_)),
        };
        ctx.spawn(
            actix::fut::wrap_future(handshake::run(conn, capabilities, plan)).map(
                move |res, act: &mut Self, _| {
                    act.handshake_done(generation, res);
                },
            ),
        );
    }

    /// Opens a connection the way its configuration says (or, for a scripted upstream, to
    /// its script).
    fn open(
        &self,
        events: Box<ConnectionEvents>,
        exited: impl FnOnce(String) + Send + 'static,
    ) -> Result<(Arc<Connection>, Link), String> {
        #[cfg(any(test, feature = "scripted"))]
        if let Some(played) = &self.script {
            let exited = Box::new(exited);
            let conn = crate::scripted::connect(played, &self.key, self.timing, events, exited)?;
            return Ok((conn, Link::Scripted));
        }
        match &self.cfg.transport {
            Transport::Stdio(cfg) => {
                let settings = stdio::Settings {
                    key: Arc::clone(&self.key),
                    timing: self.timing,
                    max_message_bytes: self.cfg.max_message_bytes,
                    grace: self.grace,
                };
                stdio::start(cfg, settings, events, exited).map(|s| {
                    tracing::info!(upstream = %self.key, pid = s.pid, "started");
                    (s.conn, Link::Process(s.pid))
                })
            }
            Transport::Http(cfg) => {
                let credential = match (&self.credential, &self.role, &cfg.auth) {
                    (Some(own), _, _) => Some(Arc::clone(own)),
                    (None, Role::Shared, Some(_)) => self.hub.shared_credential(&self.key),
                    _ => None,
                };
                let settings = http::Settings {
                    key: Arc::clone(&self.key),
                    timing: self.timing,
                    max_message_bytes: self.cfg.max_message_bytes,
                    runtime: tokio::runtime::Handle::current(),
                    credential,
                };
                http::start(cfg, settings, events, exited).map(|s| {
                    tracing::info!(upstream = %self.key, url = %cfg.url, "connecting");
                    (s.conn, Link::Http(s.client))
                })
            }
            Transport::OpenApi(cfg) => {
                let exited = Box::new(exited);
                let credential = match (&self.credential, &self.role, &cfg.auth) {
                    (Some(own), _, _) => Some(Arc::clone(own)),
                    (None, Role::Shared, Some(_)) => self.hub.shared_credential(&self.key),
                    _ => None,
                };
                let conn = crate::openapi::connect(
                    cfg,
                    &self.key,
                    self.timing,
                    events,
                    exited,
                    credential,
                    Arc::clone(&self.published),
                )?;
                Ok((conn, Link::OpenApi))
            }
        }
    }

    /// The era this start speaks: as configured, except that `auto` speaks the session era
    /// without probing over the HTTP+SSE transport (of that era only), and when the start may
    /// not probe (once after a child exited on its probe).
    fn era_plan(&self, probe: bool) -> EraChoice {
        let sse = matches!(&self.cfg.transport, Transport::Http(h) if h.kind == HttpKind::Sse);
        match self.cfg.era {
            EraChoice::Auto if sse || !probe => EraChoice::Session,
            era => era,
        }
    }

    fn handshake_done(&mut self, generation: u64, res: Result<UpstreamSlice, String>) {
        // A connection that ended before its handshake's result came is down already.
        if generation != self.generation || self.current.is_none() {
            return;
        }
        match res {
            Ok(slice) => {
                let era = slice.era().unwrap_or(Era::Session);
                tracing::info!(
                    upstream = %self.key, era = era.name(), version = %slice.protocol_version,
                    tools = slice.tools.len(), prompts = slice.prompts.len(),
                    resources = slice.resources.len(), templates = slice.templates.len(), "ready"
                );
                let slice = Arc::new(slice);
                self.slice = Some(Arc::clone(&slice));
                self.up_since = Some(Instant::now());
                self.health_ready(generation);
                self.mark_staleness();
                let replaced = self.life.on(&self.key, Event::Ready);
                match self.role {
                    Role::Shared => {
                        if replaced.is_some() {
                            self.published.store(self.current.clone());
                        }
                        self.hub.update(self.index, UpstreamState::Up, Some(slice));
                        self.hub.settle(self.index);
                        self.hub.ready(self.index);
                    }
                    Role::Isolated { .. } | Role::Team => {
                        self.published.store(self.current.clone());
                    }
                }
                if let Some(old) = replaced {
                    tracing::info!(upstream = %self.key, "its new configuration serves; the old connection finishes its calls in flight");
                    self.retire(old);
                }
                if let Some(Link::Http(client)) = &self.link {
                    client.ready();
                }
                if era == Era::Stateless {
                    self.tools_changed();
                    if let Some(slice) = self.slice.clone() {
                        self.start_listening(&slice);
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(upstream = %self.key, "handshake failed: {reason}");
                // Ending the connection makes its transport report the end, which restarts it.
                if let Some(conn) = &self.current {
                    conn.close(&format!("handshake failed: {reason}"));
                }
                if let Some(Link::Process(pid)) = self.link {
                    process::signal_group(pid, Signal::TERM);
                }
            }
        }
    }

    /// The upstream is down: publish that, fail fast, and schedule a restart.
    pub(super) fn stopped_with(&mut self, ctx: &mut Context<Self>, reason: String) {
        // A child that exits on an unknown first request is of the session era: it is started
        // again at once, with `initialize`.
        let died_probing = self.cfg.era == EraChoice::Auto
            && matches!(self.cfg.transport, Transport::Stdio(_))
            && self.current.as_ref().is_some_and(|c| c.died_probing());
        self.current = None;
        self.link = None;
        self.life.on(&self.key, Event::Ended { died_probing });
        if self.life.phase().is_replacing() {
            return self.replacement_failed(ctx, reason, died_probing);
        }
        self.published.store(None);
        if matches!(self.role, Role::Shared) {
            self.hub.update(
                self.index,
                UpstreamState::Down {
                    reason: reason.clone(),
                },
                None,
            );
            self.hub.settle(self.index);
        }
        if self.life.phase().is_stopping() {
            for tx in self.stopped.drain(..) {
                let _ = tx.send(());
            }
            return;
        }
        if died_probing {
            tracing::info!(upstream = %self.key, "it exited before answering the server/discover probe ({reason}); starting it again with initialize");
            return self.start(ctx);
        }
        let delay = self.next_backoff();
        tracing::warn!(upstream = %self.key, "stopped: {reason}; restarting in {}ms", delay.as_millis());
        self.start_later(ctx, delay);
    }

    /// Starts the upstream again after `delay`, unless something else started it meanwhile
    /// (a reload that changed its configuration).
    pub(super) fn start_later(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let generation = self.generation;
        ctx.run_later(delay, move |act, ctx| {
            if act.generation == generation && act.current.is_none() {
                act.start(ctx);
            }
        });
    }

    pub(super) fn next_backoff(&mut self) -> Duration {
        if self
            .up_since
            .take()
            .is_some_and(|t| t.elapsed() >= HEALTHY_AFTER)
        {
            self.backoff = self.cfg.restart.initial_backoff;
        }
        let delay = self.backoff;
        self.backoff = (self.backoff * 2).min(self.cfg.restart.max_backoff);
        delay
    }
}

/// Start a stopped connection now instead of after its backoff (its credential may have a
/// token now).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartNow;

impl Handler<StartNow> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, _: StartNow, ctx: &mut Context<Self>) {
        if self.current.is_none() && !self.life.phase().is_stopping() {
            self.backoff = self.cfg.restart.initial_backoff;
            self.start(ctx);
        }
    }
}

impl Handler<Exited> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, msg: Exited, ctx: &mut Context<Self>) {
        if msg.generation == self.generation {
            self.stopped_with(ctx, msg.reason);
        }
    }
}

impl Handler<Shutdown> for UpstreamActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        let connected = self.link.is_some();
        let replaced = self.life.on(&self.key, Event::Shutdown { connected });
        self.stop_replaced(replaced, "Manifold is shutting down");
        let Some(link) = &self.link else {
            return Box::pin(async {});
        };
        let (tx, rx) = oneshot::channel();
        self.stopped.push(tx);
        // Closing stdin (or the HTTP session) is the polite stop the spec describes; for a
        // process, signals follow if it is ignored.
        if let Link::Process(pid) = *link {
            ctx.run_later(self.grace, move |_, _| {
                process::signal_group(pid, Signal::TERM)
            });
            ctx.run_later(self.grace * 2, move |_, _| {
                process::signal_group(pid, Signal::KILL)
            });
        }
        if let Some(conn) = &self.current {
            conn.close("Manifold is shutting down");
        }
        let limit = self.grace * 3 + Duration::from_secs(1);
        Box::pin(async move {
            let _ = tokio::time::timeout(limit, rx).await;
        })
    }
}
