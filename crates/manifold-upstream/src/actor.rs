//! The upstream actor: owns one upstream's lifecycle (spawn, handshake, catalog refresh,
//! health, restart with capped exponential backoff, shutdown). It never sits on the hot path:
//! requests go through the `Connection` it publishes, not through its mailbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_catalog::{Kind, UpstreamSlice, UpstreamState};
use manifold_config::{Transport, UpstreamConfig};
use rustix::process::Signal;
use tokio::sync::oneshot;

use crate::connection::{Connection, Events, Timing};
use crate::handle::Published;
use crate::hub::Hub;
use crate::pending::Peer;
use crate::{handshake, http, process, stdio};

/// Whom an actor's connection serves.
#[derive(Clone)]
pub(crate) enum Role {
    /// Every session; its catalog is the upstream's slice of the merged catalog.
    Shared,
    /// One host session (`isolation = "session"`): the upstream starts with that host's own
    /// capabilities, what it asks of a client or tells hosts goes to that session alone, and
    /// the merged catalog does not change with it.
    Isolated {
        session: u64,
        capabilities: Arc<str>,
        peer: Arc<dyn Peer>,
    },
    /// One team's sessions (an HTTP upstream with headers of the team's own): otherwise like
    /// the shared connection, but the merged catalog does not change with it.
    Team,
}

impl Role {
    fn session(&self) -> Option<u64> {
        match self {
            Role::Shared | Role::Team => None,
            Role::Isolated { session, .. } => Some(*session),
        }
    }
}

/// How the actor reaches what it supervises, beyond the connection.
enum Link {
    /// A child process: its process group is signalled to stop it.
    Process(u32),
    /// An HTTP server: the client opens its stream once the handshake is done.
    Http(Arc<http::Client>),
}

/// An upstream that stayed up this long starts its next backoff from the beginning.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);
/// How often pending requests are checked against their deadlines.
const SWEEP_EVERY: Duration = Duration::from_millis(100);
/// `list_changed` notifications that come within this of each other make one refresh (and at
/// most one notification to hosts): servers often send several in a burst.
const REFRESH_DEBOUNCE: Duration = Duration::from_millis(20);

pub struct UpstreamActor {
    pub(crate) index: usize,
    pub(crate) key: Arc<str>,
    pub(crate) cfg: UpstreamConfig,
    pub(crate) timing: Timing,
    pub(crate) grace: Duration,
    pub(crate) hub: Arc<Hub>,
    /// The connection callers use; for an isolated one, only once its handshake is done.
    published: Arc<Published>,
    /// The connection being started or running.
    current: Option<Arc<Connection>>,
    role: Role,
    generation: u64,
    link: Option<Link>,
    backoff: Duration,
    up_since: Option<Instant>,
    stopping: bool,
    stopped: Vec<oneshot::Sender<()>>,
    slice: Option<Arc<UpstreamSlice>>,
    refresh: RefreshState,
    /// Restarts are counted here (shared by every connection to this upstream).
    counters: Arc<manifold_telemetry::UpstreamCounters>,
}

/// Lists to re-fetch, gathered while a refresh is scheduled or running.
#[derive(Default)]
struct RefreshState {
    kinds: Vec<Kind>,
    scheduled: bool,
    running: bool,
}

impl UpstreamActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        cfg: UpstreamConfig,
        timing: Timing,
        grace: Duration,
        hub: Arc<Hub>,
        published: Arc<Published>,
        role: Role,
    ) -> Self {
        let counters = manifold_telemetry::metrics().upstream(&cfg.key);
        Self {
            index,
            key: cfg.key.as_str().into(),
            backoff: cfg.restart.initial_backoff,
            cfg,
            timing,
            grace,
            hub,
            published,
            current: None,
            role,
            generation: 0,
            link: None,
            up_since: None,
            stopping: false,
            stopped: Vec::new(),
            slice: None,
            refresh: RefreshState::default(),
            counters,
        }
    }
}

impl Actor for UpstreamActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(SWEEP_EVERY, |act, _| {
            if let Some(conn) = &act.current {
                conn.expire(Instant::now());
            }
        });
        self.start(ctx);
    }
}

/// The reader thread saw the process end (sent from that thread).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Exited {
    generation: u64,
    reason: String,
}

/// The upstream said one of its lists changed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Refresh {
    generation: u64,
    kinds: Vec<Kind>,
}

/// Stop the upstream and every process of its group; resolves once they are gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl UpstreamActor {
    fn start(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.generation += 1;
        if self.generation > 1 {
            self.counters
                .restarts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.refresh = RefreshState::default();
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
        let started = match &self.cfg.transport {
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
                let settings = http::Settings {
                    key: Arc::clone(&self.key),
                    timing: self.timing,
                    max_message_bytes: self.cfg.max_message_bytes,
                    runtime: tokio::runtime::Handle::current(),
                };
                http::start(cfg, settings, events, exited).map(|s| {
                    tracing::info!(upstream = %self.key, url = %cfg.url, "connecting");
                    (s.conn, Link::Http(s.client))
                })
            }
        };
        let (conn, link) = match started {
            Ok(started) => started,
            Err(reason) => return self.stopped_with(ctx, reason),
        };
        self.link = Some(link);
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
        if matches!(self.role, Role::Shared) {
            // Calls may be sent before the handshake ends; the catalog gates them meanwhile.
            self.published.store(Some(Arc::clone(&conn)));
        }
        ctx.spawn(
            actix::fut::wrap_future(handshake::run(conn, capabilities)).map(
                move |res, act: &mut Self, _| {
                    act.handshake_done(generation, res);
                },
            ),
        );
    }

    fn handshake_done(&mut self, generation: u64, res: Result<UpstreamSlice, String>) {
        if generation != self.generation {
            return;
        }
        match res {
            Ok(slice) => {
                tracing::info!(
                    upstream = %self.key, version = %slice.protocol_version, tools = slice.tools.len(),
                    prompts = slice.prompts.len(), resources = slice.resources.len(),
                    templates = slice.templates.len(), "ready"
                );
                let slice = Arc::new(slice);
                self.slice = Some(Arc::clone(&slice));
                self.up_since = Some(Instant::now());
                match self.role {
                    Role::Shared => {
                        self.hub.update(self.index, UpstreamState::Up, Some(slice));
                        self.hub.settle(self.index);
                        self.hub.ready(self.index);
                    }
                    Role::Isolated { .. } | Role::Team => {
                        self.published.store(self.current.clone());
                    }
                }
                if let Some(Link::Http(client)) = &self.link {
                    client.ready();
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
    fn stopped_with(&mut self, ctx: &mut Context<Self>, reason: String) {
        self.current = None;
        self.published.store(None);
        self.link = None;
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
        if self.stopping {
            for tx in self.stopped.drain(..) {
                let _ = tx.send(());
            }
            return;
        }
        let delay = self.next_backoff();
        tracing::warn!(upstream = %self.key, "stopped: {reason}; restarting in {}ms", delay.as_millis());
        ctx.run_later(delay, |act, ctx| act.start(ctx));
    }

    fn next_backoff(&mut self) -> Duration {
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

impl Handler<Exited> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, msg: Exited, ctx: &mut Context<Self>) {
        if msg.generation == self.generation {
            self.stopped_with(ctx, msg.reason);
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
        let fut = handshake::refresh(conn, old, kinds);
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |res, act: &mut Self, ctx| {
                act.refresh.running = false;
                if generation != act.generation {
                    return;
                }
                match res {
                    Ok(slice) => {
                        let slice = Arc::new(slice);
                        act.slice = Some(Arc::clone(&slice));
                        act.hub.update(act.index, UpstreamState::Up, Some(slice));
                    }
                    Err(e) => {
                        tracing::warn!(upstream = %act.key, "refreshing its catalog failed: {e}")
                    }
                }
                act.schedule_refresh(ctx);
            }),
        );
    }
}

impl Handler<Shutdown> for UpstreamActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
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

/// Routes an upstream's notifications: list changes refresh its slice (through the actor),
/// the rest go to the hub for hosts.
struct ConnectionEvents {
    addr: Addr<UpstreamActor>,
    hub: Arc<Hub>,
    index: usize,
    generation: u64,
    /// The one session an isolated connection serves.
    session: Option<u64>,
    /// Whether the merged catalog follows this connection's list changes (the shared one).
    catalog: bool,
}

impl Events for ConnectionEvents {
    fn notification(&self, method: &str, params: Option<&str>) {
        let kinds = match method {
            "notifications/tools/list_changed" => vec![Kind::Tools],
            "notifications/prompts/list_changed" => vec![Kind::Prompts],
            "notifications/resources/list_changed" => {
                vec![Kind::Resources, Kind::ResourceTemplates]
            }
            "notifications/message"
            | "notifications/resources/updated"
            | "notifications/tasks/status" => {
                self.hub.relay(self.index, self.session, method, params);
                return;
            }
            _ => {
                tracing::debug!(upstream = self.index, method, "notification not forwarded");
                return;
            }
        };
        if !self.catalog {
            // The merged catalog comes from the shared connection, not a session's or team's.
            tracing::debug!(
                upstream = self.index,
                method,
                "isolated connection: list change ignored"
            );
            return;
        }
        self.addr.do_send(Refresh {
            generation: self.generation,
            kinds,
        });
    }
}
