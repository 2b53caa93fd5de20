//! Routing a host's messages: decode the envelope, answer what Manifold answers itself (each
//! method in its own file under `methods/`), and forward the rest to the owning upstream with
//! names, URIs, ids and progress tokens rewritten (`forward.rs`).
//!
//! The router knows no transport: a message comes with an [`Origin`](crate::Origin) (its
//! session, if any, and the outlet its answers go to), and each request gets a
//! [`Context`](crate::Context) that travels with it (`intake.rs`). Everything runs synchronously on the thread that read the message; only the handshake,
//! fan-outs and layers that wait on I/O continue on the async runtime.
//!
//! A router is built once, from its [`Parts`]; a configuration reload swaps whole parts of it
//! (`reload.rs`): the layers, teams and caches (one [`Live`], read once per request), and
//! the upstreams' definitions and connections, which only grow.

mod ask;
mod batch;
mod cached;
mod consent;
mod extension;
mod forward;
mod inflight;
mod input;
mod intake;
mod interest;
mod listener;
mod methods;
mod reload;
mod resolve;
#[cfg(test)]
mod tests;
mod verify;

use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;

use manifold_config::ServerSettings;
use manifold_upstream::{Hub, Isolation, Pool, UpstreamHandle};
use tokio::sync::mpsc;

use crate::cache::{Cache, Released};
use crate::fanout::Fanout;
use crate::layer::Layer;
use crate::policy::{Caller, Teams};
use crate::sessions::Sessions;
use crate::tasks::Tasks;

pub use crate::target::Target;
pub use reload::Reload;

/// What a message turned out to be, for transports whose answer depends on it (HTTP gives
/// 202 to notifications and responses, 400 to what it cannot accept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// A request: exactly one answer goes to the origin's outlet.
    Request,
    /// A batch holding this many requests: one array of answers goes to the outlet (none if
    /// zero).
    Batch(usize),
    Notification,
    Response,
    /// Not a usable message: an error without id went to the outlet.
    Rejected,
    /// Nothing at all (a blank line).
    Empty,
}

/// Everything a router is made of, given once.
pub struct Parts {
    pub hub: Arc<Hub>,
    /// Each upstream's shared connection, by index.
    pub upstreams: Vec<UpstreamHandle>,
    /// Starts the connections of sessions and teams that need their own; `None`: every
    /// request uses the shared connection.
    pub isolation: Option<Isolation>,
    pub sessions: Arc<Sessions>,
    /// Where sessions are asked to end (the registry's receiver): the router's reaper ends
    /// them.
    pub ending: mpsc::UnboundedReceiver<(u64, String)>,
    pub settings: ServerSettings,
    pub runtime: tokio::runtime::Handle,
    /// What every forwarded request passes through, in order.
    pub layers: Vec<Arc<dyn Layer>>,
    pub teams: Arc<Teams>,
    /// The team a stdio host runs as (`server.team`, `--team`); none: anonymous.
    pub stdio_team: Option<String>,
    /// The result caches, when any upstream has one.
    pub cache: Option<Arc<Cache>>,
    /// Where caches send the upstream subscriptions their entries held when the entries go,
    /// and where the router hears of them (made by [`releases`]).
    pub released: (Releases, Released),
    /// `[discovery]`: tool discovery for callers without a team (teams have their own).
    pub discovery: manifold_config::DiscoverySettings,
}

/// Where caches send the upstream subscriptions their entries no longer hold.
pub type Releases = mpsc::UnboundedSender<(usize, Box<str>)>;

/// A channel for [`Parts::released`].
pub fn releases() -> (Releases, Released) {
    mpsc::unbounded_channel()
}

/// What a configuration reload replaces, read once for each request that needs it: a
/// request goes on with the parts it started with.
pub struct Live {
    /// What every forwarded request passes through, in order.
    pub layers: Arc<[Arc<dyn Layer>]>,
    pub teams: Arc<Teams>,
    pub cache: Option<Arc<Cache>>,
}

/// Routes every session's messages to the upstreams.
pub struct Router {
    hub: Arc<Hub>,
    /// Every upstream's connections: the shared ones, and those of sessions and teams.
    pool: Pool,
    sessions: Arc<Sessions>,
    settings: ServerSettings,
    runtime: tokio::runtime::Handle,
    /// The layers, teams and caches, swapped whole by a reload.
    live: ArcSwap<Live>,
    /// Who a stdio host runs as.
    stdio_caller: Arc<Caller>,
    /// Given to the caches a reload makes.
    releases: Releases,
    /// Tool discovery: settings of callers without a team, and the search index.
    discovery: crate::discovery::Discovery,
    /// Which sessions hear what upstreams say.
    fanout: Fanout,
    /// What upstreams were asked on the hosts' behalf (log levels, subscriptions).
    interest: interest::Interest,
    /// Which session owns each task.
    tasks: Arc<Tasks>,
    /// Stateless hosts' requests parked while session-era upstreams wait for their input.
    parked: Arc<input::park::Parked>,
    /// The credential broker of upstreams with `auth`, once the server gave one.
    broker: std::sync::OnceLock<Arc<manifold_auth::Broker>>,
    /// The replicas sharing a Redis with this one, once the server announced itself there.
    presence: std::sync::OnceLock<Arc<dyn crate::replicas::Presence>>,
    /// Which upstream serves each method of an extension that passes through.
    owners: extension::Owners,
    /// The unknown extensions several upstreams declare, as last logged.
    conflicts: crate::extensions::Conflicts,
    /// Itself, for work that continues on the runtime.
    this: Weak<Router>,
}

impl Router {
    /// The router made of `parts`: it starts its reaper (and the cache's upkeep) on the
    /// runtime and becomes the hub's listener.
    pub fn new(parts: Parts) -> Arc<Self> {
        let stdio_caller = parts
            .stdio_team
            .as_deref()
            .and_then(|name| parts.teams.get(name))
            .map_or_else(Caller::anonymous, |team| {
                let id: Arc<str> = format!("stdio:{}", team.name).into();
                Caller::of_team(Arc::clone(team), id)
            });
        let (releases, released) = parts.released;
        let team_configs: Vec<_> = parts.teams.all().map(|t| (**t.config()).clone()).collect();
        let discovery = crate::discovery::Discovery::new(parts.discovery, &team_configs);
        let keys = parts
            .upstreams
            .iter()
            .map(UpstreamHandle::key_arc)
            .collect();
        let tasks: Arc<Tasks> = Arc::default();
        // A parked request waits for its host's retry as long as any request waits for an
        // answer: past that, its upstream request has timed out anyway.
        let parked = Arc::new(input::park::Parked::new(
            parts.settings.request_state_key.as_ref(),
            parts.settings.request_timeout,
            parts.runtime.clone(),
        ));
        let router = Arc::new_cyclic(|this| Self {
            hub: parts.hub,
            pool: Pool::new(parts.upstreams, parts.isolation),
            fanout: Fanout::new(Arc::clone(&parts.sessions), keys, Arc::clone(&tasks)),
            sessions: parts.sessions,
            settings: parts.settings,
            runtime: parts.runtime,
            live: ArcSwap::from_pointee(Live {
                layers: parts.layers.into(),
                teams: parts.teams,
                cache: parts.cache,
            }),
            stdio_caller,
            releases,
            discovery,
            interest: interest::Interest::default(),
            tasks,
            parked,
            broker: std::sync::OnceLock::new(),
            presence: std::sync::OnceLock::new(),
            owners: extension::Owners::default(),
            conflicts: crate::extensions::Conflicts::default(),
            this: this.clone(),
        });
        // The router decides which sessions hear what upstreams say.
        let listener: Weak<dyn manifold_upstream::Listener> = router.this.clone();
        router.hub.set_listener(listener);
        router.run_reaper(parts.ending);
        router.maintain_cache(released);
        router
    }

    /// The limit layer now, when any limit is configured.
    pub fn limits(&self) -> Option<Arc<crate::policy::LimitLayer>> {
        self.live()
            .layers
            .iter()
            .find_map(|layer| Arc::clone(layer).limit_layer())
    }

    /// The configured teams.
    pub fn teams(&self) -> Arc<Teams> {
        Arc::clone(&self.live.load().teams)
    }

    /// The layers, teams and caches now. Cheap: no lock, no copy.
    pub(crate) fn live(&self) -> arc_swap::Guard<Arc<Live>> {
        self.live.load()
    }

    /// Swaps in the layers, teams and caches of a reloaded configuration.
    pub fn set_live(&self, live: Live) {
        self.live.store(Arc::new(live));
    }

    /// Where a cache made for this router sends the subscriptions its entries release.
    pub fn releases(&self) -> &Releases {
        &self.releases
    }

    /// Who a stdio host runs as.
    pub fn stdio_caller(&self) -> Arc<Caller> {
        Arc::clone(&self.stdio_caller)
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Whether the session (this replica's copy) owns the task.
    pub fn owns_task(&self, session: u64, task: &str) -> bool {
        self.tasks.owner(task) == Some(session)
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Keeps where this replica announces itself and reads the others (set once).
    pub fn set_presence(&self, presence: Arc<dyn crate::replicas::Presence>) {
        let _ = self.presence.set(presence);
    }

    /// The replicas sharing a Redis with this one, when they announce themselves.
    pub fn presence(&self) -> Option<&Arc<dyn crate::replicas::Presence>> {
        self.presence.get()
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// Every upstream's shared connection, by index (a reload adds to them; none leaves).
    pub fn upstreams(&self) -> arc_swap::Guard<Arc<Vec<UpstreamHandle>>> {
        self.pool.upstreams()
    }

    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Requests in flight to upstream `index`, on its shared connection and on every
    /// session's own.
    pub fn in_flight(&self, index: usize) -> usize {
        self.pool.in_flight(index)
    }

    /// Ends sessions as they are asked to end (see [`crate::outlet::Ending`]), on the
    /// runtime, until every sender is gone.
    fn run_reaper(self: &Arc<Self>, mut asked: mpsc::UnboundedReceiver<(u64, String)>) {
        let router = Arc::downgrade(self);
        self.runtime.spawn(async move {
            while let Some((id, reason)) = asked.recv().await {
                let Some(router) = router.upgrade() else {
                    return;
                };
                router.end_session(id, &reason);
            }
        });
    }

    /// Keeps the cache within its bounds once a second, and releases the upstream
    /// subscriptions its entries held as they go.
    fn maintain_cache(self: &Arc<Self>, mut released: Released) {
        let maintained = Arc::downgrade(self);
        self.runtime.spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(router) = maintained.upgrade() else {
                    return;
                };
                // Whichever cache serves now (a reload may have replaced it).
                let cache = router.live().cache.clone();
                drop(router);
                if let Some(cache) = cache {
                    cache.maintain().await;
                }
            }
        });
        let router = Arc::downgrade(self);
        self.runtime.spawn(async move {
            while let Some((upstream, uri)) = released.recv().await {
                let Some(router) = router.upgrade() else {
                    return;
                };
                router.release_subscription(upstream, &uri);
            }
        });
    }

    /// Ends a session: it leaves the registry, its streams close, and every request it still
    /// has in flight is cancelled upstream. Ending an ended session does nothing.
    pub fn end_session(&self, id: u64, reason: &str) {
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        session.mark_ended(reason);
        manifold_telemetry::metrics().session_ended(session.transport().metric(), session.age());
        session.abandon_outbound(&format!("the host session ended: {reason}"));
        self.end_listen(id, None);
        self.tasks.forget(id);
        for handle in self.pool.end_session(id) {
            self.runtime.spawn(async move { handle.shutdown().await });
        }
        if let Some(router) = self.this.upgrade() {
            router.forget_session(&session);
        }
        let cancelled = self.cancel_in_flight(id, reason);
        tracing::info!(
            session = id,
            transport = session.transport().name(),
            cancelled,
            "session ended: {reason}"
        );
    }

    /// Cancels upstream every request session `id` has in flight (on shared connections and
    /// its own); each is answered with an error giving `reason`. Returns how many there were.
    pub fn cancel_in_flight(&self, id: u64, reason: &str) -> usize {
        self.pool
            .connections_of(id)
            .iter()
            .map(|c| c.cancel_session(id, reason))
            .sum()
    }
}
