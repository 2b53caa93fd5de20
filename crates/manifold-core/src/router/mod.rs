//! Routing a host's messages: decode the envelope, answer what Manifold answers itself (each
//! method in its own file under `methods/`), and forward the rest to the owning upstream with
//! names, URIs, ids and progress tokens rewritten (`forward.rs`).
//!
//! The router knows no transport: a message comes with an [`Origin`] (its session, if any,
//! and the outlet its answers go to), and each request gets a [`Context`] that travels with
//! it. Everything runs synchronously on the thread that read the message; only the handshake,
//! fan-outs and layers that wait on I/O continue on the async runtime.
//!
//! A router is built once, from its [`Parts`]; a configuration reload swaps whole parts of it
//! (`reload.rs`): the layers, teams and caches (one [`Live`], read once per request), and
//! the upstreams' definitions and connections, which only grow.

mod batch;
mod cached;
mod forward;
mod gather;
mod inflight;
mod interest;
mod listener;
mod methods;
mod mrtr;
mod reload;
mod resolve;

use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;

use manifold_config::ServerSettings;
use manifold_protocol::envelope::{canonical_id, is_valid_id};
use manifold_protocol::{version, write, Envelope, Kind, MessageError, Params, Place, RawObject};
use manifold_telemetry::trace;
use manifold_upstream::{Hub, Isolation, Pool, UpstreamHandle};
use tokio::sync::mpsc;

use crate::cache::{Cache, Released};
use crate::context::{reply_error, Context, Origin};
use crate::error::RouteError;
use crate::fanout::Fanout;
use crate::layer::Layer;
use crate::policy::{Caller, Teams};
use crate::sessions::Sessions;
use crate::stateless;
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
    parked: Arc<mrtr::Parked>,
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
        let parked = Arc::new(mrtr::Parked::new(
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
            this: this.clone(),
        });
        // The router decides which sessions hear what upstreams say.
        let listener: Weak<dyn manifold_upstream::Listener> = router.this.clone();
        router.hub.set_listener(listener);
        router.run_reaper(parts.ending);
        router.maintain_cache(released);
        router
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

    /// Handles one message from a host.
    pub fn handle_line(self: &Arc<Self>, origin: &Origin, line: &[u8]) -> Handled {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Handled::Empty;
        }
        match Envelope::decode_host(line) {
            Ok(env) => self.handle_envelope(origin, &env),
            Err(MessageError::Batch) => self.batch(origin, line),
            Err(e) => {
                reply_error(&*origin.outlet, None, origin.era(), &e.into());
                Handled::Rejected
            }
        }
    }

    /// Handles one decoded message from a host.
    pub fn handle_envelope(self: &Arc<Self>, origin: &Origin, env: &Envelope<'_>) -> Handled {
        let kind = match env.kind() {
            Ok(kind) => kind,
            Err(e) => {
                reply_error(&*origin.outlet, usable_id(env), origin.era(), &e.into());
                return Handled::Rejected;
            }
        };
        match kind {
            Kind::Request => {
                let Some(id) = env.id.filter(|_| usable_id(env).is_some()) else {
                    let e = refusal(env).unwrap_or(RouteError::Message(MessageError::Invalid(
                        "unusable id".into(),
                    )));
                    reply_error(&*origin.outlet, None, origin.era(), &e);
                    return Handled::Rejected;
                };
                let method = env.method.as_deref().unwrap_or_default();
                let parent = trace::active()
                    .then(|| resolve::meta_trace_context(env.params))
                    .flatten();
                let ctx = Context::new(origin, id, method, parent.as_ref());
                match refusal(env) {
                    Some(e) => ctx.fail(&e),
                    None => self.request(ctx, method, env),
                }
                Handled::Request
            }
            Kind::Notification => {
                if let Some((v, _)) = env.violation() {
                    tracing::debug!(problem = %v, "host notification refused");
                } else {
                    self.notification(origin, env);
                }
                Handled::Notification
            }
            Kind::Response => {
                self.host_answer(origin, env);
                Handled::Response
            }
        }
    }

    /// The host answered one of the requests Manifold sent it for an upstream: the answer
    /// goes back to that upstream, under the upstream's own id.
    fn host_answer(&self, origin: &Origin, env: &Envelope<'_>) {
        let (Some(session), Some(id)) = (origin.session.as_ref(), env.id) else {
            return;
        };
        let id = canonical_id(id);
        let Some(reply) = session.answered(&id) else {
            // A session shared by replicas: the request may be another replica's.
            let elsewhere = session.relay().is_some_and(|relay| {
                let mut message = Vec::new();
                match (env.result, env.error) {
                    (_, Some(error)) => {
                        write::raw_error_response(&mut message, env.id.unwrap_or("null"), error)
                    }
                    (result, None) => write::response(
                        &mut message,
                        env.id.unwrap_or("null"),
                        result.unwrap_or("null"),
                    ),
                }
                relay.answer_elsewhere(session, &id, message)
            });
            if !elsewhere {
                tracing::debug!(id = env.id, "answer from the host matches no request");
            }
            return;
        };
        match (env.result, env.error) {
            (_, Some(error)) => reply.raw_error(error),
            (result, None) => reply.result(result.unwrap_or("null")),
        }
    }

    /// A message over the size limit was dropped unread: tell the host, with the message's
    /// id when it could be read from the kept ends, and keep the session.
    pub fn oversize(&self, origin: &Origin, len: usize, head: &[u8], tail: &[u8]) {
        let max = self.settings.max_message_bytes;
        tracing::warn!(len, max, "message over the size limit refused");
        let id = manifold_protocol::envelope::id_of_fragments(head, tail);
        reply_error(
            &*origin.outlet,
            id.as_deref(),
            origin.era(),
            &RouteError::Oversize { len, max },
        );
    }

    /// A request: answered here (`methods/`) or forwarded (`forward.rs`). A request that
    /// names a stateless revision in `_meta` is served from what it carries; the rest need
    /// their session's `initialize` first (`server/discover` excepted: it is how a client
    /// finds out which era to speak).
    fn request(self: &Arc<Self>, mut ctx: Context, method: &str, env: &Envelope<'_>) {
        let asked = match ctx.asked.take() {
            // Read by the transport already.
            Some(asked) => Ok(Some(asked)),
            None => stateless::read(env.params).map(|a| a.map(Arc::new)),
        };
        match asked {
            Err(e) => return ctx.fail(&e),
            Ok(Some(asked)) => {
                if let Some(session) = &ctx.session {
                    if !session.begin_stateless() {
                        return ctx.fail(&RouteError::Message(MessageError::Invalid(
                            "this session opened with initialize: its requests speak the revision it negotiated, without a protocol version in _meta".into(),
                        )));
                    }
                }
                ctx.version = asked.version;
                ctx.asked = Some(asked);
                if let Some(removed) = REMOVED.iter().find(|m| **m == method) {
                    return ctx.fail(&RouteError::Removed((*removed).to_owned()));
                }
            }
            Ok(None) => {
                if method == "server/discover" {
                    return self.discover(ctx);
                }
                if ctx.session.as_ref().is_some_and(|s| s.is_stateless()) {
                    return ctx.fail(&RouteError::InvalidParams(format!(
                        "this host speaks protocol revision {}: every request carries _meta[{:?}]",
                        version::MODERN_LATEST,
                        version::meta::PROTOCOL_VERSION
                    )));
                }
            }
        }
        let ready = ctx.is_stateless() || ctx.session.as_ref().is_none_or(|s| s.is_ready());
        match method {
            "initialize" => return self.initialize(ctx, env),
            "ping" => return methods::ping(ctx),
            "server/discover" => return self.discover(ctx),
            _ if !ready => return ctx.fail(&RouteError::NotInitialized),
            "tools/call" | "prompts/get" | "resources/read" => {
                return self.forward(ctx, method, env)
            }
            _ => {}
        }
        let params = match env.routing_params() {
            Ok(p) => p,
            Err(e) => return ctx.fail(&RouteError::InvalidParams(e.to_string())),
        };
        match method {
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
                self.list(ctx, method, &params)
            }
            "completion/complete" => self.complete(ctx, env, &params),
            "logging/setLevel" => self.set_level(ctx, &params),
            "resources/subscribe" => self.subscribe(ctx, &params, true),
            "resources/unsubscribe" => self.subscribe(ctx, &params, false),
            "subscriptions/listen" if ctx.is_stateless() => self.listen(ctx, env),
            "tasks/get" | "tasks/cancel" | "tasks/update" if ctx.is_stateless() => {
                self.extension_task(ctx, method, env)
            }
            // The session era's tasks moved to an extension Manifold does not offer
            // stateless hosts.
            _ if ctx.is_stateless() => ctx.fail(&RouteError::UnknownMethod(method.to_owned())),
            "tasks/list" => self.list_tasks(ctx),
            "tasks/get" | "tasks/result" | "tasks/cancel" => self.task(ctx, method, env),
            _ => ctx.fail(&RouteError::UnknownMethod(method.to_owned())),
        }
    }

    fn notification(&self, origin: &Origin, env: &Envelope<'_>) {
        match env.method.as_deref().unwrap_or_default() {
            "notifications/cancelled" => {
                let Some(params) = env.params.and_then(|p| Params::read(p).ok()) else {
                    return;
                };
                let Some(request_id) = params.request_id else {
                    return;
                };
                let session = origin.session.as_ref().map_or(origin.owner, |s| s.id());
                let id = canonical_id(request_id);
                self.end_listen(session, Some(&id));
                let reason = env
                    .params
                    .and_then(|p| RawObject::parse(p).ok())
                    .and_then(|p| p.get_str("reason").map(|r| r.into_owned()));
                let owner = self
                    .pool
                    .connections_of(session)
                    .into_iter()
                    .find(|c| c.cancel_for(session, &id, reason.as_deref()));
                tracing::debug!(
                    request = request_id,
                    forwarded_to = owner.as_ref().map(|c| c.name()),
                    "host cancelled a request"
                );
            }
            // The stateless era removed these; a stateless host's are ignored.
            "notifications/roots/list_changed" | "notifications/elicitation/complete"
                if is_stateless_origin(origin) =>
            {
                tracing::debug!(
                    method = env.method.as_deref(),
                    "a stateless host's notification of a removed kind ignored"
                );
            }
            // Upstreams that asked for roots ask again, of whichever host they then serve.
            "notifications/roots/list_changed" => {
                let session = origin.session.as_ref().map_or(0, |s| s.id());
                for conn in self.pool.connections_of(session) {
                    let _ = conn.notify("notifications/roots/list_changed", None);
                }
            }
            "notifications/initialized" => {}
            other => tracing::debug!(method = other, "host notification ignored"),
        }
    }
}

/// Whether a message comes from a stateless host: a stdio session settled in that era, or a
/// sessionless request (a stateless POST stands under a number of its own).
fn is_stateless_origin(origin: &Origin) -> bool {
    match &origin.session {
        Some(session) => session.is_stateless(),
        None => origin.owner != 0,
    }
}

/// Methods the stateless era removed: a stateless request for one is told so.
const REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// What makes a well-formed request unacceptable before it is routed: a breach of I-JSON
/// (inside params: -32602; elsewhere: -32600) or params that are not an object.
fn refusal(env: &Envelope<'_>) -> Option<RouteError> {
    if let Some((v, place)) = env.violation() {
        return Some(match place {
            Place::Params => RouteError::InvalidParams(format!("params: {v}")),
            _ => RouteError::Message(MessageError::Invalid(v.to_string().into())),
        });
    }
    match env.params.map(|p| p.trim_start().as_bytes().first()) {
        Some(Some(b'{')) | None => None,
        Some(_) => Some(RouteError::InvalidParams("params must be an object".into())),
    }
}

/// The id of an invalid message, if it has one a host could match (and it is not itself what
/// is wrong with the message).
fn usable_id<'a>(env: &Envelope<'a>) -> Option<&'a str> {
    if env.violation().is_some_and(|(_, p)| *p == Place::Id) {
        return None;
    }
    env.id.filter(|id| is_valid_id(id))
}
