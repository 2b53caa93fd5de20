//! `UpstreamHandle`: what the rest of Manifold holds to reach an upstream. It hides the actor
//! framework: callers get the live connection for the hot path and async methods for the rest.
//! `Isolation` starts the per-session connections of upstreams configured with
//! `isolation = "session"`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix::{Actor, Addr, ArbiterHandle};
use arc_swap::{ArcSwap, ArcSwapOption};
use manifold_config::UpstreamConfig;
use manifold_protocol::version::Era;
use tokio::sync::watch;

use crate::actor::{Reconfigure, RefreshStale, Role, Shutdown, UpstreamActor};
use crate::connection::{Connection, Timing};
use crate::health::{Breaker, BreakerView};
use crate::hub::Hub;
use crate::openapi::OpenApiReport;
use crate::pending::Peer;

/// A cheap, cloneable handle to one upstream (or one session's connection to it).
#[derive(Clone)]
pub struct UpstreamHandle {
    index: usize,
    key: Arc<str>,
    addr: Addr<UpstreamActor>,
    published: Arc<Published>,
}

/// The connection an actor publishes for callers, and a signal when it changes.
pub(crate) struct Published {
    current: ArcSwapOption<Connection>,
    changed: watch::Sender<u64>,
    /// When the first of the upstream's lists goes stale by its caching hint, in
    /// milliseconds on [`clock_ms`]; `u64::MAX`: none will (or a refresh is asked for).
    stale_at: AtomicU64,
    /// The circuit breaker every connection of this actor passes its calls through.
    pub(crate) breaker: Arc<Breaker>,
    /// How it is reached, as configured: an index into [`TRANSPORTS`] (a reload may change
    /// it).
    transport: AtomicU8,
    /// What the last load of an OpenAPI upstream's description found beyond its tools.
    openapi: Mutex<Option<Arc<OpenApiReport>>>,
}

/// The transports' labels, as metrics and spans name them (`openapi`: an in-process server
/// that makes HTTP requests of its own).
const TRANSPORTS: [&str; 4] = ["stdio", "http", "sse", "openapi"];

/// A monotonic clock in milliseconds, cheap to compare against from any thread.
pub(crate) fn clock_ms(at: Instant) -> u64 {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    u64::try_from(at.saturating_duration_since(*EPOCH).as_millis()).unwrap_or(u64::MAX - 1)
}

impl Published {
    pub(crate) fn new(breaker: Arc<Breaker>, cfg: &UpstreamConfig) -> Arc<Self> {
        let published = Arc::new(Self {
            current: ArcSwapOption::empty(),
            changed: watch::channel(0).0,
            stale_at: AtomicU64::new(u64::MAX),
            breaker,
            transport: AtomicU8::new(0),
            openapi: Mutex::new(None),
        });
        published.set_transport(cfg);
        published
    }

    /// Records how `cfg` reaches the upstream.
    pub(crate) fn set_transport(&self, cfg: &UpstreamConfig) {
        let label = transport_label(cfg);
        let index = TRANSPORTS.iter().position(|t| *t == label).unwrap_or(0);
        self.transport.store(index as u8, Ordering::Relaxed);
    }

    /// When the first list goes stale (`None`: never).
    pub(crate) fn set_stale_at(&self, at: Option<Instant>) {
        self.stale_at
            .store(at.map_or(u64::MAX, clock_ms), Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> Option<Arc<Connection>> {
        self.current.load_full()
    }

    pub(crate) fn set_openapi(&self, report: OpenApiReport) {
        *self.openapi.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(report));
    }

    pub(crate) fn store(&self, conn: Option<Arc<Connection>>) {
        self.current.store(conn);
        self.changed.send_modify(|n| *n += 1);
    }
}

fn transport_label(cfg: &UpstreamConfig) -> &'static str {
    match &cfg.transport {
        manifold_config::Transport::Stdio(_) => "stdio",
        manifold_config::Transport::Http(h) if h.kind == manifold_config::HttpKind::Sse => "sse",
        manifold_config::Transport::Http(_) => "http",
        manifold_config::Transport::OpenApi(_) => "openapi",
    }
}

/// Timeouts of an upstream: the defaults, with the upstream's own request timeout over them.
fn timing(cfg: &UpstreamConfig, defaults: Timing) -> Timing {
    let request = cfg.request_timeout.unwrap_or(defaults.request);
    Timing {
        request,
        max: defaults.max.max(request),
    }
}

impl UpstreamHandle {
    /// Starts the upstream's actor, which spawns and supervises the process. Must be called
    /// from within a running actix system. `defaults` apply where the upstream's config sets
    /// no request timeout of its own.
    pub fn start(
        index: usize,
        cfg: UpstreamConfig,
        defaults: Timing,
        grace: Duration,
        hub: Arc<Hub>,
    ) -> Self {
        let shared = Variant {
            role: Role::Shared,
            headers: None,
            credential: None,
            arbiter: None,
            #[cfg(any(test, feature = "scripted"))]
            script: None,
        };
        spawn(index, cfg, defaults, grace, hub, shared)
    }

    /// Starts an upstream like [`UpstreamHandle::start`] whose connections talk to a script
    /// (see [`crate::scripted`]) instead of its configured transport.
    #[cfg(any(test, feature = "scripted"))]
    pub(crate) fn start_scripted(
        index: usize,
        cfg: UpstreamConfig,
        defaults: Timing,
        grace: Duration,
        hub: Arc<Hub>,
        script: Arc<crate::scripted::Played>,
    ) -> Self {
        let shared = Variant {
            role: Role::Shared,
            headers: None,
            credential: None,
            arbiter: None,
            script: Some(script),
        };
        spawn(index, cfg, defaults, grace, hub, shared)
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn key_arc(&self) -> Arc<str> {
        Arc::clone(&self.key)
    }

    /// How Manifold reaches it: `stdio`, `http` (Streamable HTTP, or its fallback) or `sse`.
    pub fn transport(&self) -> &'static str {
        TRANSPORTS[usize::from(self.published.transport.load(Ordering::Relaxed)) % TRANSPORTS.len()]
    }

    /// What the last load of an OpenAPI upstream's description found beyond its tools (the
    /// operations skipped, the schemes without a value); `None` for other upstreams, and
    /// before a description has loaded.
    pub fn openapi_report(&self) -> Option<Arc<OpenApiReport>> {
        self.published
            .openapi
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The live connection, or `None` while the upstream is down or restarting.
    pub fn connection(&self) -> Option<Arc<Connection>> {
        self.published.load()
    }

    /// The live connection, waiting up to `limit` for one (a connection being started).
    pub async fn connected(&self, limit: Duration) -> Option<Arc<Connection>> {
        let mut changed = self.published.changed.subscribe();
        let wait = async {
            loop {
                if let Some(conn) = self.published.load() {
                    return Some(conn);
                }
                if changed.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(limit, wait).await.ok().flatten()
    }

    /// The protocol era of the live connection (`None` while there is none). A connection
    /// still probing counts as the session era.
    pub fn era(&self) -> Option<Era> {
        self.published.load().map(|c| c.era())
    }

    /// Asks for the upstream's lists whose caching hint (`ttlMs`, stateless era) ran out to
    /// be fetched again, without waiting: hosts go on seeing the current catalog until the
    /// new lists are in, and a list that changed is announced to them as after a
    /// `list_changed`; one that did not is not. Call it wherever a list is served. Cheap
    /// when nothing is stale (one clock read and one atomic load); repeated calls while a
    /// refresh is asked for or running make one refresh. Lists without a positive `ttlMs`
    /// (every session-era upstream's) never go stale: they are fetched again when the
    /// upstream says they changed.
    pub fn refresh_if_stale(&self) {
        let at = self.published.stale_at.load(Ordering::Relaxed);
        if at == u64::MAX || clock_ms(Instant::now()) < at {
            return;
        }
        let asked = self.published.stale_at.compare_exchange(
            at,
            u64::MAX,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        if asked.is_ok() {
            self.addr.do_send(RefreshStale);
        }
    }

    /// Its circuit breaker: the state, and why it is not closed.
    pub fn breaker(&self) -> BreakerView {
        self.published.breaker.view()
    }

    /// Replaces the upstream's connection with one started from `cfg` (a reloaded
    /// configuration): the current one serves until the new one is ready, then finishes its
    /// calls in flight, for up to `drain`. `defaults` apply as in [`UpstreamHandle::start`].
    pub fn reconfigure(&self, cfg: UpstreamConfig, defaults: Timing, drain: Duration) {
        let timing = timing(&cfg, defaults);
        self.addr.do_send(Reconfigure { cfg, timing, drain });
    }

    /// Has an OpenAPI upstream read its description again (a reload): when its tools changed,
    /// the catalog follows as after a `list_changed`; a description that can no longer be read
    /// leaves the tools it had. A stopped one is started now instead, which reads it anyway.
    /// For OpenAPI upstreams only (the caller knows the configuration): the notification is
    /// Manifold's own, which no other server knows.
    pub fn reread_description(&self) {
        match self.connection() {
            Some(conn) => {
                if let Err(e) = conn.notify(crate::openapi::REREAD, None) {
                    tracing::warn!(upstream = %self.key, "its description was not read again: {e}");
                }
            }
            None => self.restart_if_down(),
        }
    }

    /// Starts a stopped connection now rather than after its backoff: what it lacked (a
    /// token) may be there now. A running one is left alone.
    pub fn restart_if_down(&self) {
        self.addr.do_send(crate::actor::StartNow);
    }

    /// Stops the upstream; returns once its processes are gone (or the grace ran out).
    pub async fn shutdown(&self) {
        let _ = self.addr.send(Shutdown).await;
    }
}

/// Starts the connections of upstreams configured with `isolation = "session"`: one per host
/// session, on first use. Callable from any thread: the actors run on the system's arbiter.
#[derive(Clone)]
pub struct Isolation {
    arbiter: ArbiterHandle,
    hub: Arc<Hub>,
    /// By upstream index; a reload swaps in the new ones (a removed upstream keeps its last).
    configs: Arc<ArcSwap<Vec<UpstreamConfig>>>,
    defaults: Timing,
    grace: Duration,
}

impl Isolation {
    /// Must be called from within the running actix system, whose arbiter will run the
    /// isolated connections.
    pub fn new(
        hub: Arc<Hub>,
        configs: Vec<UpstreamConfig>,
        defaults: Timing,
        grace: Duration,
    ) -> Self {
        Self {
            arbiter: actix::Arbiter::current(),
            hub,
            configs: Arc::new(ArcSwap::from_pointee(configs)),
            defaults,
            grace,
        }
    }

    /// The upstream configurations connections are started with from now on, by index.
    pub fn set_configs(&self, configs: Vec<UpstreamConfig>) {
        self.configs.store(Arc::new(configs));
    }

    /// Whether upstream `index` has `auth` that gives each caller a token of their own.
    pub fn per_caller(&self, index: usize) -> bool {
        let configs = self.configs.load();
        let Some(cfg) = configs.get(index) else {
            return false;
        };
        let auth = match &cfg.transport {
            manifold_config::Transport::Http(h) => h.auth.as_ref(),
            manifold_config::Transport::OpenApi(o) => o.auth.as_ref(),
            manifold_config::Transport::Stdio(_) => None,
        };
        auth.is_some_and(manifold_config::UpstreamAuth::per_caller)
    }

    /// How many connections of its own upstream `index` may have, if it gives each session one.
    pub fn limit(&self, index: usize) -> Option<usize> {
        match self.configs.load().get(index)?.isolation {
            manifold_config::Isolation::Shared => None,
            manifold_config::Isolation::Session { limit } => Some(limit),
        }
    }

    /// A connection to HTTP upstream `index` for one team's sessions, sending `headers` (the
    /// team's own) in place of the upstream's headers of the same names.
    pub fn start_for_team(
        &self,
        index: usize,
        headers: &BTreeMap<String, String>,
    ) -> Option<UpstreamHandle> {
        let team = Variant {
            role: Role::Team,
            headers: Some(headers),
            credential: None,
            arbiter: Some(&self.arbiter),
            #[cfg(any(test, feature = "scripted"))]
            script: None,
        };
        self.spawn(index, team)
    }

    /// A connection to HTTP upstream `index` for one caller, sending the token `credential`
    /// gives (an upstream whose `auth` is per caller): otherwise like a team's.
    pub fn start_for_caller(
        &self,
        index: usize,
        credential: Arc<dyn crate::Credential>,
    ) -> Option<UpstreamHandle> {
        let caller = Variant {
            role: Role::Team,
            headers: None,
            credential: Some(credential),
            arbiter: Some(&self.arbiter),
            #[cfg(any(test, feature = "scripted"))]
            script: None,
        };
        self.spawn(index, caller)
    }

    /// A connection to upstream `index` for session `session` alone: started with the host's
    /// `capabilities` (JSON text), its requests to a client go to `peer`.
    pub fn start(
        &self,
        index: usize,
        session: u64,
        capabilities: &str,
        peer: Arc<dyn Peer>,
    ) -> Option<UpstreamHandle> {
        let isolated = Variant {
            role: Role::Isolated {
                session,
                capabilities: capabilities.into(),
                peer,
            },
            headers: None,
            credential: None,
            arbiter: Some(&self.arbiter),
            #[cfg(any(test, feature = "scripted"))]
            script: None,
        };
        self.spawn(index, isolated)
    }

    /// Starts a connection of upstream `index` on the system's arbiter; `None` for an index
    /// with no upstream.
    fn spawn(&self, index: usize, variant: Variant<'_>) -> Option<UpstreamHandle> {
        let cfg = self.configs.load().get(index)?.clone();
        let hub = Arc::clone(&self.hub);
        Some(spawn(index, cfg, self.defaults, self.grace, hub, variant))
    }
}

/// What one connection to an upstream differs in from the others: the shared connection, a
/// team's and a session's are otherwise started alike.
struct Variant<'a> {
    role: Role,
    /// Headers sent in place of the upstream's own of the same names (case-insensitive): a
    /// team's, on an HTTP upstream. They mean nothing to a stdio upstream and are ignored.
    headers: Option<&'a BTreeMap<String, String>>,
    /// The token source of a caller's own connection (an upstream with per-caller `auth`).
    credential: Option<Arc<dyn crate::Credential>>,
    /// The arbiter the actor runs on. `None` starts it on the calling thread's arbiter, built
    /// before `spawn` returns; `Some` may be called from any thread, and the actor is built on
    /// that arbiter's thread.
    arbiter: Option<&'a ArbiterHandle>,
    /// The script its connections talk to, for a scripted upstream (tests).
    #[cfg(any(test, feature = "scripted"))]
    script: Option<Arc<crate::scripted::Played>>,
}

/// Starts an actor for a connection to upstream `index` and returns the handle to it. The one
/// place an upstream actor is started, so every kind of connection gets the same timeouts,
/// labels and published slot.
fn spawn(
    index: usize,
    mut cfg: UpstreamConfig,
    defaults: Timing,
    grace: Duration,
    hub: Arc<Hub>,
    variant: Variant<'_>,
) -> UpstreamHandle {
    // On an OpenAPI upstream, a team's `security.SCHEME` replaces that scheme's value.
    if let (Some(headers), manifold_config::Transport::OpenApi(openapi)) =
        (variant.headers, &mut cfg.transport)
    {
        crate::openapi::team_security(&mut openapi.security, headers);
    }
    let own = match &mut cfg.transport {
        manifold_config::Transport::Http(http) => Some(&mut http.headers),
        manifold_config::Transport::OpenApi(openapi) => Some(&mut openapi.headers),
        manifold_config::Transport::Stdio(_) => None,
    };
    if let (Some(headers), Some(own)) = (variant.headers, own) {
        for (name, value) in headers.iter().filter(|(n, _)| !n.starts_with("security.")) {
            own.retain(|existing, _| !existing.eq_ignore_ascii_case(name));
            own.insert(name.clone(), value.clone());
        }
    }
    // Only the shared connection's breaker is the upstream's in metrics.
    let exported = matches!(variant.role, Role::Shared);
    let counters = manifold_telemetry::metrics().upstream(&cfg.key);
    let breaker = Breaker::new(&cfg.key, &cfg.health, counters, exported);
    let published = Published::new(breaker, &cfg);
    let key: Arc<str> = cfg.key.as_str().into();
    let timing = timing(&cfg, defaults);
    let slot = Arc::clone(&published);
    let role = variant.role;
    let credential = variant.credential;
    #[cfg(any(test, feature = "scripted"))]
    let script = variant.script;
    let build = move || {
        let mut actor = UpstreamActor::new(index, cfg, timing, grace, hub, slot, role);
        actor.credential = credential;
        #[cfg(any(test, feature = "scripted"))]
        {
            actor.script = script;
        }
        actor
    };
    let addr = match variant.arbiter {
        None => build().start(),
        Some(arbiter) => UpstreamActor::start_in_arbiter(arbiter, move |_| build()),
    };
    UpstreamHandle {
        index,
        key,
        addr,
        published,
    }
}
