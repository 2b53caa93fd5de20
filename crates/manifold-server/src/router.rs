//! Routing a host's messages: decode the envelope, answer what Manifold answers itself
//! (handshake, ping, lists from the cached catalog), and forward the rest to the owning
//! upstream with names, URIs, ids and progress tokens rewritten.
//!
//! The router knows no transport: a message comes with an [`Origin`] (its session, if any,
//! and the outlet its answers go to), and each request gets a [`Context`] that travels with
//! it. Everything runs synchronously on the thread that read the message; only the handshake,
//! fan-outs and layers that wait on I/O continue on the async runtime.

mod cached;
mod inflight;
mod notify;
mod resolve;
mod tasks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use manifold_catalog::{Kind as ListKind, UpstreamState};
use manifold_config::ServerSettings;
use manifold_protocol::envelope::{canonical_id, is_valid_id};
use manifold_protocol::{
    scan, version, write, Envelope, Kind, MessageError, Params, Place, RawObject,
};
use manifold_telemetry::{spans, trace};
use manifold_upstream::{Connection, Forward, Hub, Isolation, UpstreamError, UpstreamHandle};
use tokio::sync::mpsc;

use crate::cache::Cache;
use crate::context::{reply_error, Context, Origin, Route};
use crate::error::RouteError;
use crate::initialize;
use crate::layer::{Check, Layer};
use crate::outlet::BatchOutlet;
use crate::policy::{Caller, Teams};
use crate::session::Client;
use crate::sessions::Sessions;

pub use resolve::Target;

/// The log levels of `logging/setLevel`, least severe first (RFC 5424, as MCP names them).
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The revision whose hosts may send JSON-RPC batches: it requires servers to accept them,
/// and the next one removed them.
const BATCH_VERSION: &str = "2025-03-26";

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

/// Routes every session's messages to the upstreams.
pub struct Router {
    hub: Arc<Hub>,
    upstreams: Vec<UpstreamHandle>,
    sessions: Arc<Sessions>,
    settings: ServerSettings,
    runtime: tokio::runtime::Handle,
    layers: Vec<Arc<dyn Layer>>,
    /// What upstreams were asked on the hosts' behalf (log levels, subscriptions).
    interest: notify::Interest,
    /// Which session owns each task.
    tasks: Arc<tasks::Tasks>,
    /// Starts the connections of upstreams that give each session its own.
    isolation: OnceLock<Isolation>,
    /// Those connections, by (upstream, session). Locked to look one up, add or remove it.
    isolated: Mutex<HashMap<(usize, u64), UpstreamHandle>>,
    /// Connections of HTTP upstreams that send a team's own headers, by (upstream, team);
    /// started on the team's first use.
    team_conns: Mutex<HashMap<(usize, Arc<str>), UpstreamHandle>>,
    /// The configured teams (none until set).
    teams: OnceLock<Arc<Teams>>,
    /// Who a stdio host runs as (`server.team`, `--team`); anonymous until set.
    stdio_caller: OnceLock<Arc<Caller>>,
    /// The result caches (none until set, and none when no upstream has one).
    cache: OnceLock<Arc<Cache>>,
    /// Itself, for work that continues on the runtime.
    this: Weak<Router>,
}

impl Router {
    pub fn new(
        hub: Arc<Hub>,
        upstreams: Vec<UpstreamHandle>,
        sessions: Arc<Sessions>,
        settings: ServerSettings,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Self::with_layers(hub, upstreams, sessions, settings, runtime, Vec::new())
    }

    /// A router whose forwarded requests pass through `layers`, in order.
    pub fn with_layers(
        hub: Arc<Hub>,
        upstreams: Vec<UpstreamHandle>,
        sessions: Arc<Sessions>,
        settings: ServerSettings,
        runtime: tokio::runtime::Handle,
        layers: Vec<Arc<dyn Layer>>,
    ) -> Arc<Self> {
        let router = Arc::new_cyclic(|this| Self {
            hub,
            upstreams,
            sessions,
            settings,
            runtime,
            layers,
            interest: notify::Interest::default(),
            tasks: Arc::default(),
            isolation: OnceLock::new(),
            isolated: Mutex::new(HashMap::new()),
            team_conns: Mutex::new(HashMap::new()),
            teams: OnceLock::new(),
            stdio_caller: OnceLock::new(),
            cache: OnceLock::new(),
            this: this.clone(),
        });
        // The router decides which sessions hear what upstreams say.
        let listener: Weak<dyn manifold_upstream::Listener> = router.this.clone();
        router.hub.set_listener(listener);
        router
    }

    /// Lets upstreams configured with `isolation = "session"` give each session a connection
    /// of its own (set once, at start).
    pub fn set_isolation(&self, isolation: Isolation) {
        let _ = self.isolation.set(isolation);
    }

    /// Sets the teams, and the one a stdio host runs as (set once, at start).
    pub fn set_teams(&self, teams: Arc<Teams>, stdio_team: Option<&str>) {
        if let Some(team) = stdio_team.and_then(|name| teams.get(name)) {
            let id: Arc<str> = format!("stdio:{}", team.name).into();
            let _ = self.stdio_caller.set(Caller::of_team(Arc::clone(team), id));
        }
        let _ = self.teams.set(teams);
    }

    /// Answers what it can from `cache` (set once, at start). Upstream subscriptions the
    /// cache's entries held arrive on `released` when the entries go.
    pub fn set_cache(
        self: &Arc<Self>,
        cache: Arc<Cache>,
        mut released: mpsc::UnboundedReceiver<(usize, Box<str>)>,
    ) {
        let _ = self.cache.set(Arc::clone(&cache));
        let maintained = Arc::downgrade(&cache);
        self.runtime.spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(cache) = maintained.upgrade() else {
                    return;
                };
                cache.maintain().await;
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

    /// The configured teams.
    pub fn teams(&self) -> Option<&Arc<Teams>> {
        self.teams.get()
    }

    /// Who a stdio host runs as.
    pub fn stdio_caller(&self) -> Arc<Caller> {
        self.stdio_caller
            .get()
            .cloned()
            .unwrap_or_else(Caller::anonymous)
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    pub fn upstreams(&self) -> &[UpstreamHandle] {
        &self.upstreams
    }

    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Ends sessions as they are asked to end (see [`crate::sessions::Ending`]), on the
    /// runtime, until every sender is gone.
    pub fn run_reaper(self: &Arc<Self>, mut asked: mpsc::UnboundedReceiver<(u64, String)>) {
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

    /// Ends a session: it leaves the registry, its streams close, and every request it still
    /// has in flight is cancelled upstream. Ending an ended session does nothing.
    pub fn end_session(&self, id: u64, reason: &str) {
        let Some(session) = self.sessions.remove(id) else {
            return;
        };
        session.mark_ended(reason);
        manifold_telemetry::metrics().session_ended(session.transport().metric(), session.age());
        session.abandon_outbound(&format!("the host session ended: {reason}"));
        self.tasks.forget(id);
        self.end_isolated(id);
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
        self.connections_of(id)
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
                reply_error(&*origin.outlet, None, &e.into());
                Handled::Rejected
            }
        }
    }

    /// Handles one decoded message from a host.
    pub fn handle_envelope(self: &Arc<Self>, origin: &Origin, env: &Envelope<'_>) -> Handled {
        let kind = match env.kind() {
            Ok(kind) => kind,
            Err(e) => {
                reply_error(&*origin.outlet, usable_id(env), &e.into());
                return Handled::Rejected;
            }
        };
        match kind {
            Kind::Request => {
                let Some(id) = env.id.filter(|_| usable_id(env).is_some()) else {
                    let e = refusal(env).unwrap_or(RouteError::Message(MessageError::Invalid(
                        "unusable id".into(),
                    )));
                    reply_error(&*origin.outlet, None, &e);
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
        let reply = origin
            .session
            .as_ref()
            .zip(env.id)
            .and_then(|(s, id)| s.answered(&canonical_id(id)));
        let Some(reply) = reply else {
            tracing::debug!(id = env.id, "answer from the host matches no request");
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
            &RouteError::Oversize { len, max },
        );
    }

    fn request(self: &Arc<Self>, ctx: Context, method: &str, env: &Envelope<'_>) {
        let ready = ctx.session.as_ref().is_none_or(|s| s.is_ready());
        match method {
            "initialize" => return self.initialize(ctx, env),
            "ping" => return ctx.reply("{}"),
            _ if !ready => return ctx.fail(&RouteError::NotInitialized),
            _ => {}
        }
        let catalog = self.hub.catalog();
        let sight = ctx.caller.restricted().map(|t| &**t);
        // The forwarded methods parse their params once, for routing and rewriting together.
        let target = match method {
            "tools/call" => resolve::named(&catalog, env, ListKind::Tools, sight),
            "prompts/get" => resolve::named(&catalog, env, ListKind::Prompts, sight),
            "resources/read" => resolve::read(&catalog, env, sight),
            _ => return self.local(ctx, method, env),
        };
        match target {
            Ok(target) => self.admit(ctx, target, 0),
            Err(e) => ctx.fail(&e),
        }
    }

    /// Methods answered from the catalog, or fanned out.
    fn local(self: &Arc<Self>, ctx: Context, method: &str, env: &Envelope<'_>) {
        let params = match env.routing_params() {
            Ok(p) => p,
            Err(e) => return ctx.fail(&RouteError::InvalidParams(e.to_string())),
        };
        let kind = match method {
            "tools/list" => ListKind::Tools,
            "prompts/list" => ListKind::Prompts,
            "resources/list" => ListKind::Resources,
            "resources/templates/list" => ListKind::ResourceTemplates,
            "completion/complete" => {
                let sight = ctx.caller.restricted().map(|t| &**t);
                return match resolve::complete(&self.hub.catalog(), env, &params, sight) {
                    Ok(target) => self.admit(ctx, target, 0),
                    Err(e) => ctx.fail(&e),
                };
            }
            "logging/setLevel" => return self.set_level(ctx, &params),
            "resources/subscribe" => return self.subscribe(ctx, &params, true),
            "resources/unsubscribe" => return self.subscribe(ctx, &params, false),
            "tasks/list" => return self.list_tasks(ctx),
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                let method = match method {
                    "tasks/get" => "tasks/get",
                    "tasks/result" => "tasks/result",
                    _ => "tasks/cancel",
                };
                let target = self.task_request(&ctx, method, env.params, &self.hub.catalog());
                return match target {
                    Ok(target) => self.admit(ctx, target, 0),
                    Err(e) => ctx.fail(&e),
                };
            }
            _ => return ctx.fail(&RouteError::UnknownMethod(method.to_owned())),
        };
        let catalog = self.hub.catalog();
        let page = match ctx.caller.restricted() {
            // Pages of a team's view are serialized once per view, like the catalog's.
            Some(team) => team
                .view(&catalog)
                .listing(kind)
                .page(params.cursor.as_deref())
                .map(|body| ctx.reply(body)),
            None => catalog
                .listing(kind)
                .page(params.cursor.as_deref())
                .map(|body| ctx.reply(body)),
        };
        if page.is_err() {
            ctx.fail(&RouteError::BadCursor);
        }
    }

    fn initialize(self: &Arc<Self>, ctx: Context, env: &Envelope<'_>) {
        let params = match env.routing_params() {
            Ok(p) => p,
            Err(e) => return ctx.fail(&RouteError::InvalidParams(e.to_string())),
        };
        let Some(session) = ctx.session.clone() else {
            return ctx.fail(&RouteError::InvalidParams(
                "initialize needs a session".into(),
            ));
        };
        if !session.begin_initialize() {
            return ctx.fail(&RouteError::AlreadyInitialized);
        }
        let negotiated = version::negotiate(params.protocol_version.as_deref());
        let client = Client {
            capabilities: params.capabilities.unwrap_or("{}").into(),
            info: env
                .params
                .and_then(|p| RawObject::parse(p).ok())
                .and_then(|p| p.get("clientInfo").map(Box::from)),
        };
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            // Answer with the whole catalog: wait (bounded) for every upstream's first start.
            router
                .hub
                .wait_settled(router.settings.startup_timeout)
                .await;
            let catalog = router.hub.catalog();
            let result = match session.caller().restricted() {
                Some(team) => {
                    let view = team.view(&catalog);
                    initialize::result(&catalog, negotiated, |i| view.knows_upstream(i))
                }
                None => initialize::result(&catalog, negotiated, |_| true),
            };
            session.finish_initialize(negotiated, client);
            ctx.reply(&result);
        });
    }

    /// `logging/setLevel` sets this session's level; each upstream that logs is asked for the
    /// most verbose level any session wants.
    fn set_level(self: &Arc<Self>, ctx: Context, params: &Params<'_>) {
        let Some(level) = params.level.as_deref() else {
            return ctx.fail(&RouteError::InvalidParams("missing \"level\"".into()));
        };
        let Some(index) = LOG_LEVELS.iter().position(|l| *l == level) else {
            return ctx.fail(&RouteError::InvalidParams(format!(
                "\"level\" must be one of {}",
                LOG_LEVELS.join(", ")
            )));
        };
        if let Some(session) = &ctx.session {
            session.set_log_level(u8::try_from(index).unwrap_or_default());
        }
        let router = Arc::clone(self);
        self.runtime.spawn(async move {
            router.apply_log_levels(None).await;
            ctx.reply("{}");
        });
    }

    /// `resources/subscribe` and `resources/unsubscribe`: counted per upstream resource, so
    /// the upstream is asked once however many sessions subscribe, and told to stop when the
    /// last one leaves.
    fn subscribe(self: &Arc<Self>, ctx: Context, params: &Params<'_>, on: bool) {
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
        let first = if on {
            session.subscribe(exposed) && self.interest.subscribe(upstream, original)
        } else {
            session.unsubscribe(exposed) && self.interest.unsubscribe(upstream, original)
        };
        if !first {
            // Another session keeps the upstream subscribed, or nothing changes.
            return ctx.reply("{}");
        }
        let handle = &self.upstreams[upstream];
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
            manifold_protocol::object::json_string(original)
        );
        let (router, exposed, original) =
            (Arc::clone(self), exposed.to_owned(), original.to_owned());
        self.runtime.spawn(async move {
            match conn.request(method, Some(&upstream_params)).await {
                Ok(manifold_upstream::Answer::Result(_)) => ctx.reply("{}"),
                Ok(manifold_upstream::Answer::Error(e)) => {
                    if on {
                        // Refused: the session is not subscribed after all.
                        session.unsubscribe(&exposed);
                        router.interest.unsubscribe(upstream, &original);
                    }
                    let mut out = Vec::new();
                    write::raw_error_response(&mut out, &ctx.id, &e);
                    ctx.outlet.answer(&[&out]);
                }
                Err(e) => ctx.fail(&RouteError::Upstream(e)),
            }
        });
    }

    /// Passes the request through the layers from `from` on, then sends it upstream. A layer
    /// that must wait continues the request on the runtime.
    fn admit(self: &Arc<Self>, mut ctx: Context, target: Target, from: usize) {
        if from == 0 {
            self.note_route(&mut ctx, &target);
        }
        for (i, layer) in self.layers.iter().enumerate().skip(from) {
            match layer.check(&ctx, &target) {
                Check::Pass => {}
                Check::Refuse(e) => return ctx.fail(&e),
                Check::Wait(decision) => {
                    let router = Arc::clone(self);
                    self.runtime.spawn(async move {
                        match decision.await {
                            Ok(()) => router.admit(ctx, target, i + 1),
                            Err(e) => ctx.fail(&e),
                        }
                    });
                    return;
                }
            }
        }
        self.dispatch(ctx, target);
    }

    /// Tells the request's metrics and span where it is going.
    fn note_route(&self, ctx: &mut Context, target: &Target) {
        ctx.routed(Route {
            upstream: self.upstreams[target.upstream].key_arc(),
            method: target.method,
            exposed: target.exposed.clone(),
        });
    }

    /// Sends the request to its upstream as a new request whose answer returns to the host:
    /// on the shared connection, or the session's own (started now, if it is the first use).
    fn send(self: &Arc<Self>, ctx: Context, target: Target, fill: Option<inflight::Fill>) {
        let handle = &self.upstreams[target.upstream];
        if let UpstreamState::Down { reason } = self.hub.catalog().state(target.upstream) {
            return ctx.fail(&unavailable(handle, reason));
        }
        let own = match self.isolated_handle(&ctx, target.upstream) {
            Ok(own) => own,
            Err(e) => return ctx.fail(&e),
        };
        let Some(own) = own else {
            return match handle.connection() {
                Some(conn) => self.send_on(&conn, ctx, target, fill),
                None => ctx.fail(&unavailable(handle, "it is starting")),
            };
        };
        if let Some(conn) = own.connection() {
            return self.send_on(&conn, ctx, target, fill);
        }
        // A connection just started: the request waits (bounded) for its handshake.
        let (router, limit) = (Arc::clone(self), self.settings.startup_timeout);
        self.runtime.spawn(async move {
            match own.connected(limit).await {
                Some(conn) => router.send_on(&conn, ctx, target, fill),
                None => ctx.fail(&unavailable(
                    &own,
                    "its connection for this session did not start in time",
                )),
            }
        });
    }

    /// The session's own connection to `upstream`, when the upstream gives each session one
    /// (`None`: use the shared connection). Starts it on first use, within the limit.
    fn isolated_handle(
        &self,
        ctx: &Context,
        upstream: usize,
    ) -> Result<Option<UpstreamHandle>, RouteError> {
        let Some(isolation) = self.isolation.get() else {
            return Ok(None);
        };
        if let Some(team) = &ctx.caller.team {
            let key = self.upstreams[upstream].key();
            if let Some(headers) = team.config.headers.get(key) {
                return Ok(self.team_handle(isolation, upstream, &team.name, headers));
            }
        }
        let (Some(limit), Some(session)) = (isolation.limit(upstream), &ctx.session) else {
            return Ok(None);
        };
        let mut isolated = self
            .isolated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = isolated.get(&(upstream, session.id())) {
            return Ok(Some(handle.clone()));
        }
        let open = isolated.keys().filter(|(u, _)| *u == upstream).count();
        let key = self.upstreams[upstream].key();
        if open >= limit {
            return Err(unavailable(
                &self.upstreams[upstream],
                &format!("{open} sessions already have a connection of their own to {key:?} (isolation_limit); try again when one ends"),
            ));
        }
        let capabilities = session.client().map_or("{}", |c| &*c.capabilities);
        let peer = Arc::new(inflight::SessionPeer(Arc::downgrade(session)));
        let handle = isolation
            .start(upstream, session.id(), capabilities, peer)
            .ok_or_else(|| unavailable(&self.upstreams[upstream], "it has no configuration"))?;
        tracing::info!(
            upstream = key,
            session = session.id(),
            "started a connection for the session"
        );
        isolated.insert((upstream, session.id()), handle.clone());
        Ok(Some(handle))
    }

    /// The connection to `upstream` that carries `team`'s own headers (started now, if this
    /// is the team's first call there). The host's own credentials are never passed on: the
    /// upstream sees the configured headers only.
    fn team_handle(
        &self,
        isolation: &Isolation,
        upstream: usize,
        team: &Arc<str>,
        headers: &std::collections::BTreeMap<String, String>,
    ) -> Option<UpstreamHandle> {
        let mut conns = self
            .team_conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = conns.get(&(upstream, Arc::clone(team))) {
            return Some(handle.clone());
        }
        let handle = isolation.start_for_team(upstream, headers)?;
        tracing::info!(
            upstream = self.upstreams[upstream].key(),
            team = &**team,
            "started a connection with the team's own headers"
        );
        conns.insert((upstream, Arc::clone(team)), handle.clone());
        Some(handle)
    }

    /// Requests in flight to upstream `index`, on its shared connection and on every
    /// session's own.
    pub fn in_flight(&self, index: usize) -> usize {
        let shared = self.upstreams[index]
            .connection()
            .map_or(0, |c| c.in_flight());
        let isolated = self
            .isolated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|((u, _), _)| *u == index)
            .filter_map(|(_, h)| h.connection())
            .map(|c| c.in_flight())
            .sum::<usize>();
        shared + isolated
    }

    /// Every live connection a session's requests may be on: the shared ones, and the
    /// session's own.
    fn connections_of(&self, session: u64) -> Vec<Arc<Connection>> {
        let mut conns: Vec<Arc<Connection>> = self
            .upstreams
            .iter()
            .filter_map(UpstreamHandle::connection)
            .collect();
        let isolated = self
            .isolated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        conns.extend(
            isolated
                .iter()
                .filter(|((_, s), _)| *s == session)
                .filter_map(|(_, h)| h.connection()),
        );
        conns
    }

    /// Stops every connection that served an ended session alone.
    fn end_isolated(&self, session: u64) {
        let ended: Vec<UpstreamHandle> = {
            let mut isolated = self
                .isolated
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let keys: Vec<(usize, u64)> = isolated
                .keys()
                .filter(|(_, s)| *s == session)
                .copied()
                .collect();
            keys.iter().filter_map(|k| isolated.remove(k)).collect()
        };
        for handle in ended {
            self.runtime.spawn(async move { handle.shutdown().await });
        }
    }

    /// Writes the request on `conn`; its answer returns to the host through an exchange.
    fn send_on(
        &self,
        conn: &Connection,
        ctx: Context,
        target: Target,
        fill: Option<inflight::Fill>,
    ) {
        let handle = &self.upstreams[target.upstream];
        let upstream_id = conn.next_id();
        let hop = spans::client(&ctx.span);
        let (params, progress_token) =
            match resolve::map_progress_token(&target.params, upstream_id) {
                Some((params, token)) => (params, Some(token)),
                None => (target.params, None),
            };
        let params = match spans::context_of(&hop) {
            Some(carrier) => resolve::with_trace_context(&params, &carrier).unwrap_or(params),
            None => params,
        };
        let mut line = Vec::with_capacity(params.len() + 64);
        write::request(&mut line, upstream_id, target.method, Some(&params));
        let (upstream, tool) = match ctx.route() {
            Some(route) => (Arc::clone(&route.upstream), route.tool().cloned()),
            None => (handle.key_arc(), None),
        };
        let exchange = inflight::Inflight {
            ctx: Some(ctx),
            hub: Arc::clone(&self.hub),
            upstream: target.upstream,
            method: target.method,
            tasks: target.task.then(|| Arc::clone(&self.tasks)),
            hop: inflight::Hop {
                span: hop,
                started: std::time::Instant::now(),
                upstream,
                tool,
                original: target.original,
                id: upstream_id,
                transport: handle.transport(),
            },
            fill,
        };
        conn.forward(
            upstream_id,
            &line,
            Forward {
                exchange: Box::new(exchange),
                progress_token,
                timeout: target.timeout,
            },
        );
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
                let session = origin.session.as_ref().map_or(0, |s| s.id());
                let id = canonical_id(request_id);
                let reason = env
                    .params
                    .and_then(|p| RawObject::parse(p).ok())
                    .and_then(|p| p.get_str("reason").map(|r| r.into_owned()));
                let owner = self
                    .connections_of(session)
                    .into_iter()
                    .find(|c| c.cancel_for(session, &id, reason.as_deref()));
                tracing::debug!(
                    request = request_id,
                    forwarded_to = owner.as_ref().map(|c| c.name()),
                    "host cancelled a request"
                );
            }
            // Upstreams that asked for roots ask again, of whichever host they then serve.
            "notifications/roots/list_changed" => {
                let session = origin.session.as_ref().map_or(0, |s| s.id());
                for conn in self.connections_of(session) {
                    let _ = conn.notify("notifications/roots/list_changed", None);
                }
            }
            "notifications/initialized" => {}
            other => tracing::debug!(method = other, "host notification ignored"),
        }
    }

    /// A JSON-RPC batch: accepted from hosts that negotiated the revision that requires it,
    /// answered with one array; refused for everyone else.
    fn batch(self: &Arc<Self>, origin: &Origin, line: &[u8]) -> Handled {
        let version = origin.session.as_ref().and_then(|s| s.version());
        if version != Some(BATCH_VERSION) {
            reply_error(&*origin.outlet, None, &MessageError::Batch.into());
            return Handled::Rejected;
        }
        // The line was checked as JSON by the decoder: it is UTF-8 and an array.
        let elements = std::str::from_utf8(line)
            .ok()
            .and_then(|text| scan::elements(text).ok())
            .unwrap_or_default();
        if elements.is_empty() {
            let e = MessageError::Invalid("an empty batch".into());
            reply_error(&*origin.outlet, None, &e.into());
            return Handled::Rejected;
        }
        let decoded: Vec<_> = elements
            .iter()
            .map(|e| Envelope::decode_host(e.as_bytes()))
            .collect();
        // Every element answers except notifications and responses.
        let expected = decoded
            .iter()
            .filter(|d| match d {
                Ok(env) => !matches!(env.kind(), Ok(Kind::Notification | Kind::Response)),
                Err(_) => true,
            })
            .count();
        let batch = Origin {
            session: origin.session.clone(),
            outlet: Arc::new(BatchOutlet::new(Arc::clone(&origin.outlet), expected)),
            trace: origin.trace.clone(),
            caller: origin.caller.clone(),
        };
        for d in decoded {
            match d {
                Ok(env) if env.method.as_deref() == Some("initialize") && env.id.is_some() => {
                    let e = MessageError::Invalid("initialize must not be part of a batch".into());
                    reply_error(&*batch.outlet, env.id, &e.into());
                }
                Ok(env) => {
                    self.handle_envelope(&batch, &env);
                }
                Err(e) => reply_error(&*batch.outlet, None, &e.into()),
            }
        }
        Handled::Batch(expected)
    }
}

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

fn unavailable(handle: &UpstreamHandle, reason: &str) -> RouteError {
    RouteError::Upstream(UpstreamError::Unavailable {
        upstream: handle.key().to_owned(),
        reason: reason.to_owned(),
    })
}

/// The id of an invalid message, if it has one a host could match (and it is not itself what
/// is wrong with the message).
fn usable_id<'a>(env: &Envelope<'a>) -> Option<&'a str> {
    if env.violation().is_some_and(|(_, p)| *p == Place::Id) {
        return None;
    }
    env.id.filter(|id| is_valid_id(id))
}
