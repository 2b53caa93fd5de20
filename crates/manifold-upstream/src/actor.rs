//! The upstream actor: owns one upstream's lifecycle (spawn, era probe and handshake, catalog
//! refresh, the stateless era's `subscriptions/listen` stream, health, restart with capped
//! exponential backoff, shutdown). It never sits on the hot path: requests go through the
//! `Connection` it publishes, not through its mailbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_catalog::{Kind, UpstreamSlice, UpstreamState};
use manifold_config::{EraChoice, HttpKind, Transport, UpstreamConfig};
use manifold_protocol::version::Era;
use rustix::process::Signal;
use tokio::sync::oneshot;

use crate::connection::{Connection, Events, ListenEnd, ListenFilter, Timing};
use crate::handle::Published;
use crate::hub::Hub;
use crate::pending::Peer;
use crate::{handshake, http, process, stdio};

mod health;
mod reconfigure;

pub(crate) use reconfigure::Reconfigure;

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
/// How often pending requests are checked against their deadlines, and the upstream's health
/// (pings due, the breaker's cooldown, `restart_after`).
const SWEEP_EVERY: Duration = Duration::from_millis(100);
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
    /// The next start speaks the session era without probing: the last process exited
    /// before answering its `server/discover` probe. Once: the start after that probes again.
    skip_probe: bool,
    /// The delay before an ended `subscriptions/listen` stream is opened again.
    listen_backoff: Duration,
    /// A reopening of the listen stream for changed subscriptions is planned.
    listen_planned: bool,
    /// Restarts are counted here (shared by every connection to this upstream).
    counters: Arc<manifold_telemetry::UpstreamCounters>,
    /// Pings, the breaker's probe, the restart of an upstream that stopped answering.
    health: health::Health,
    /// While a new configuration's connection starts: the connection it replaces, which
    /// callers keep using until the new one is ready.
    replacing: Option<reconfigure::Serving>,
    /// Replaced connections finishing their calls in flight.
    retiring: Vec<reconfigure::Retiring>,
    /// How long a replaced connection may take to finish its calls in flight.
    drain: Duration,
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
            skip_probe: false,
            listen_backoff: LISTEN_BACKOFF,
            listen_planned: false,
            counters,
            health: health::Health::default(),
            replacing: None,
            retiring: Vec::new(),
            drain: reconfigure::DEFAULT_DRAIN,
        }
    }
}

impl Actor for UpstreamActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(SWEEP_EVERY, |act, ctx| {
            let now = Instant::now();
            if let Some(conn) = &act.current {
                conn.expire(now);
            }
            act.sweep_retiring(now);
            act.check_health(ctx);
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

/// Hosts found a list of the upstream stale by its caching hint: fetch the stale ones again.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RefreshStale;

/// What the connection's `subscriptions/listen` stream reported.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Listening {
    generation: u64,
    what: ListenNews,
}

enum ListenNews {
    Acknowledged,
    Ended(ListenEnd),
    /// Subscriptions changed: open it again with the new set.
    Changed,
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
        self.listen_backoff = LISTEN_BACKOFF;
        self.listen_planned = false;
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
        if matches!(self.role, Role::Shared) && self.replacing.is_none() {
            // Calls may be sent before the handshake ends; the catalog gates them meanwhile.
            // A connection that replaces another is published once ready (`handshake_done`).
            self.published.store(Some(Arc::clone(&conn)));
        }
        let era = self.era_plan();
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

    /// The era this start speaks: as configured, except that `auto` speaks the session era
    /// without probing over the HTTP+SSE transport (of that era only), and once after a child
    /// exited on its probe.
    fn era_plan(&mut self) -> EraChoice {
        let sse = matches!(&self.cfg.transport, Transport::Http(h) if h.kind == HttpKind::Sse);
        let skip = std::mem::take(&mut self.skip_probe);
        match self.cfg.era {
            EraChoice::Auto if sse || skip => EraChoice::Session,
            era => era,
        }
    }

    fn handshake_done(&mut self, generation: u64, res: Result<UpstreamSlice, String>) {
        if generation != self.generation {
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
                let replaced = self.replacing.take();
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
    fn stopped_with(&mut self, ctx: &mut Context<Self>, reason: String) {
        // A child that exits on an unknown first request is of the session era: it is started
        // again at once, with `initialize`.
        let died_probing = self.cfg.era == EraChoice::Auto
            && matches!(self.cfg.transport, Transport::Stdio(_))
            && self.current.as_ref().is_some_and(|c| c.died_probing());
        self.current = None;
        self.link = None;
        if self.replacing.is_some() && !self.stopping {
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
        if self.stopping {
            for tx in self.stopped.drain(..) {
                let _ = tx.send(());
            }
            return;
        }
        if died_probing {
            tracing::info!(upstream = %self.key, "it exited before answering the server/discover probe ({reason}); starting it again with initialize");
            self.skip_probe = true;
            return self.start(ctx);
        }
        let delay = self.next_backoff();
        tracing::warn!(upstream = %self.key, "stopped: {reason}; restarting in {}ms", delay.as_millis());
        self.start_later(ctx, delay);
    }

    /// Starts the upstream again after `delay`, unless something else started it meanwhile
    /// (a reload that changed its configuration).
    fn start_later(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let generation = self.generation;
        ctx.run_later(delay, move |act, ctx| {
            if act.generation == generation && act.current.is_none() {
                act.start(ctx);
            }
        });
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
    fn mark_staleness(&self) {
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
    fn tools_changed(&self) {
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
    fn start_listening(&mut self, slice: &UpstreamSlice) {
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
        if msg.generation != self.generation || self.stopping {
            return;
        }
        match msg.what {
            ListenNews::Acknowledged => self.listen_backoff = LISTEN_BACKOFF,
            ListenNews::Changed => {
                if !self.listen_planned {
                    self.listen_planned = true;
                    // Subscriptions often change in a burst (every one of a host's, after a
                    // restart): one new stream for all of them.
                    ctx.run_later(REFRESH_DEBOUNCE, move |act, _| {
                        act.listen_planned = false;
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
                let delay = self.listen_backoff;
                self.listen_backoff = (delay * 2).min(LISTEN_MAX_BACKOFF);
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

impl Handler<Shutdown> for UpstreamActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.stop_replaced("Manifold is shutting down");
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

    fn listen_acknowledged(&self) {
        self.listening(ListenNews::Acknowledged);
    }

    fn listen_ended(&self, end: ListenEnd) {
        self.listening(ListenNews::Ended(end));
    }

    fn listen_changed(&self) {
        self.listening(ListenNews::Changed);
    }
}

impl ConnectionEvents {
    fn listening(&self, what: ListenNews) {
        self.addr.do_send(Listening {
            generation: self.generation,
            what,
        });
    }
}

#[cfg(test)]
mod tests;
