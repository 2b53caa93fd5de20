//! The upstream actor: owns one upstream's lifecycle (spawn, era probe and handshake, catalog
//! refresh, the stateless era's `subscriptions/listen` stream, health, restart with capped
//! exponential backoff, shutdown). It never sits on the hot path: requests go through the
//! `Connection` it publishes, not through its mailbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_catalog::{Kind, UpstreamSlice};
use manifold_config::UpstreamConfig;
use tokio::sync::oneshot;

use crate::connection::{Connection, Events, ListenEnd, Timing};
use crate::handle::Published;
use crate::http;
use crate::hub::Hub;
use crate::pending::Peer;

mod catalog;
mod health;
pub(crate) mod lifecycle;
mod reconfigure;
mod supervise;

pub(crate) use reconfigure::Reconfigure;
pub(crate) use supervise::StartNow;

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
    /// An OpenAPI service served by a thread of the upstream's own: closing the connection
    /// ends it.
    OpenApi,
    /// A script in this process (tests): closing the connection ends it.
    #[cfg(any(test, feature = "scripted"))]
    Scripted,
}

/// An upstream that stayed up this long starts its next backoff from the beginning.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);
/// How often pending requests are checked against their deadlines, and the upstream's health
/// (pings due, the breaker's cooldown, `restart_after`).
const SWEEP_EVERY: Duration = Duration::from_millis(100);

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
    /// Starting, serving, replaced by a new configuration's connection, stopping: see
    /// [`lifecycle::Phase`]. While a new configuration's connection starts, the phase holds the
    /// connection it replaces, which callers keep using until the new one is ready.
    life: lifecycle::Lifecycle<reconfigure::Serving>,
    /// Who waits for the shutdown to be over.
    stopped: Vec<oneshot::Sender<()>>,
    slice: Option<Arc<UpstreamSlice>>,
    refresh: RefreshState,
    /// The stateless era's `subscriptions/listen` stream, as the actor reopens it.
    listen: catalog::ListenPlan,
    /// Restarts are counted here (shared by every connection to this upstream).
    counters: Arc<manifold_telemetry::UpstreamCounters>,
    /// Pings, the breaker's probe, the restart of an upstream that stopped answering.
    health: health::Health,
    /// Replaced connections finishing their calls in flight (whatever the phase: they are
    /// no longer the actor's connection).
    retiring: Vec<reconfigure::Retiring>,
    /// How long a replaced connection may take to finish its calls in flight.
    drain: Duration,
    /// The token source of a caller's own connection to an upstream with `auth` (the shared
    /// connection's comes from the hub).
    pub(crate) credential: Option<Arc<dyn crate::Credential>>,
    /// The script a scripted upstream's connections talk to (tests), in place of its
    /// transport.
    #[cfg(any(test, feature = "scripted"))]
    pub(crate) script: Option<Arc<crate::scripted::Played>>,
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
            life: lifecycle::Lifecycle::new(),
            stopped: Vec::new(),
            slice: None,
            refresh: RefreshState::default(),
            listen: catalog::ListenPlan::default(),
            counters,
            health: health::Health::default(),
            retiring: Vec::new(),
            drain: reconfigure::DEFAULT_DRAIN,
            credential: None,
            #[cfg(any(test, feature = "scripted"))]
            script: None,
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
            // A server of the skills extension tells a change of its skills this way too.
            "notifications/resources/list_changed" => {
                vec![Kind::Resources, Kind::ResourceTemplates, Kind::Skills]
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
