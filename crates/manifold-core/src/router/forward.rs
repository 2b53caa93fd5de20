//! Forwarding: a request Manifold does not answer itself is resolved to its upstream, passed
//! through the layers and the cache, and written on the connection the pool chooses, with an
//! [`Inflight`] exchange that brings the answer back to the host.

use std::sync::Arc;

use manifold_catalog::{Kind as ListKind, UpstreamState};
use manifold_protocol::object::Edits;
use manifold_protocol::version::{meta, Era};
use manifold_protocol::{write, Envelope, RawObject};
use manifold_telemetry::spans;
use manifold_telemetry::trace::Carrier;
use manifold_upstream::{
    Connection, Forward, Outbound, SessionFor, TeamFor, UpstreamError, UpstreamHandle,
};

use super::inflight::{self, Inflight};
use super::input::gather;
use super::input::park::Park;
use super::{resolve, Router};
use crate::context::{Context, Route};
use crate::error::RouteError;
use crate::layer::{Check, Layer};
use crate::target::Target;
use crate::{request_state, stateless};

impl Router {
    /// `tools/call`, `prompts/get`, `resources/read` and the skills extension's `skills/get`
    /// and `resources/directory/read`: their params are parsed once, for routing and
    /// rewriting together.
    pub(super) fn forward(self: &Arc<Self>, ctx: Context, method: &str, env: &Envelope<'_>) {
        if ctx.is_stateless() {
            if let Some(state) = request_state(env.params) {
                return self.resume(ctx, method, env, &state);
            }
        }
        // Tool discovery's own tool, when the caller is in search mode.
        if method == "tools/call" && self.discovery.active() && self.find_tools(&ctx, env) {
            return;
        }
        let catalog = self.hub.catalog();
        let sight = ctx.caller.restricted().map(|t| &**t);
        let target = match method {
            "tools/call" => resolve::named(&catalog, env, ListKind::Tools, sight)
                .and_then(|t| task_for_stateless(&ctx, &catalog, t)),
            "prompts/get" => resolve::named(&catalog, env, ListKind::Prompts, sight),
            _ => resolve::by_uri(&catalog, env, method, sight),
        };
        match self.or_unlisted(&catalog, env, sight, target) {
            Ok(target) => {
                if let (true, Some(session), Some(name)) =
                    (self.discovery.active(), &ctx.session, &target.exposed)
                {
                    session.found().touch(name);
                }
                self.admit(ctx, target)
            }
            Err(e) => ctx.fail(&e),
        }
    }

    /// Passes the request through the layers, then sends it upstream.
    pub(super) fn admit(self: &Arc<Self>, ctx: Context, target: Target) {
        // The guard, not a clone: no shared count touched unless a layer makes it wait.
        let live = self.live();
        self.admit_from(ctx, target, &live.layers, 0);
    }

    /// Passes the request through `layers` from `from` on, then sends it upstream. A layer
    /// that must wait continues the request on the runtime, with the same layers.
    fn admit_from(
        self: &Arc<Self>,
        mut ctx: Context,
        target: Target,
        layers: &Arc<[Arc<dyn Layer>]>,
        from: usize,
    ) {
        if from == 0 {
            self.note_route(&mut ctx, &target);
        }
        for (i, layer) in layers.iter().enumerate().skip(from) {
            match layer.check(&ctx, &target) {
                Check::Pass => {}
                Check::Refuse(e) => return ctx.fail(&e),
                Check::Wait(decision) => {
                    let (router, layers) = (Arc::clone(self), Arc::clone(layers));
                    self.runtime.spawn(async move {
                        match decision.await {
                            Ok(()) => router.admit_from(ctx, target, &layers, i + 1),
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
            upstream: self.pool.upstreams()[target.upstream].key_arc(),
            method: target.method,
            exposed: target.exposed.clone(),
        });
    }

    /// Sends the request to its upstream as a new request whose answer returns to the host:
    /// on the shared connection, or the session's own (started now, if it is the first use).
    pub(super) fn send(
        self: &Arc<Self>,
        ctx: Context,
        target: Target,
        fill: Option<inflight::Fill>,
    ) {
        if self.pool.per_caller(target.upstream) {
            return self.send_for_caller(ctx, target, fill);
        }
        let handle = &self.pool.upstreams()[target.upstream];
        if let UpstreamState::Down { reason } = self.hub.catalog().state(target.upstream) {
            return ctx.fail(&unavailable(handle, reason));
        }
        let own = match self.own_connection(&ctx, target.upstream) {
            Ok(own) => own,
            Err(e) => return ctx.fail(&e),
        };
        let Some(own) = own else {
            return match handle.connection() {
                Some(conn) => match self.log_level_to_ask(&ctx, target.upstream) {
                    None => self.send_on(&conn, ctx, target, fill),
                    Some(level) => {
                        // Asked first, on the same connection, so that the call's own log
                        // messages come at the level the host asked for.
                        let router = Arc::clone(self);
                        self.runtime.spawn(async move {
                            router.ask_log_level(&conn, target.upstream, level).await;
                            router.send_on(&conn, ctx, target, fill);
                        });
                    }
                },
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

    /// The connection of its own the request must use (a session's, a team's), from the
    /// pool; `None`: the shared one.
    fn own_connection(
        &self,
        ctx: &Context,
        upstream: usize,
    ) -> Result<Option<UpstreamHandle>, RouteError> {
        let upstreams = self.pool.upstreams();
        let key = upstreams[upstream].key();
        let config = ctx.caller.team.as_ref().map(|team| team.config());
        let team = ctx
            .caller
            .team
            .as_ref()
            .zip(config.as_ref())
            .map(|(team, config)| TeamFor {
                name: &team.name,
                headers: config.headers.get(key),
            });
        let session = ctx.session.as_ref().map(|s| SessionFor {
            id: s.id(),
            capabilities: s.client().map_or("{}", |c| &*c.capabilities),
        });
        let peer = || -> Arc<dyn manifold_upstream::Peer> {
            let weak = ctx.session.as_ref().map(Arc::downgrade).unwrap_or_default();
            Arc::new(super::ask::SessionPeer(weak))
        };
        Ok(self.pool.own(upstream, team, session, peer)?)
    }

    /// Writes the request on `conn`; its answer returns to the host through an exchange.
    pub(super) fn send_on(
        &self,
        conn: &Connection,
        ctx: Context,
        target: Target,
        fill: Option<inflight::Fill>,
    ) {
        let handle = &self.pool.upstreams()[target.upstream];
        let upstream_id = conn.next_id();
        let hop = spans::client(&ctx.span);
        // A session-era host's request to a stateless upstream may come back asking for
        // input: kept, to send it again with the host's answers.
        let retry = (!ctx.is_stateless() && conn.era() == Era::Stateless).then(|| gather::Retry {
            router: self.this.clone(),
            target: target.clone(),
        });
        let carrier = spans::context_of(&hop);
        let Some((line, progress_token)) =
            outbound_line(conn, &ctx, &target, upstream_id, &carrier)
        else {
            return ctx.fail(&RouteError::InvalidParams(
                "params, and their _meta, must be objects".into(),
            ));
        };
        let (method, extension) = self.extension_parts(&target);
        let msg = Outbound::request(upstream_id, method, line)
            .named(target.original.clone())
            .traced(carrier)
            .in_revision(conn.revision());
        let (upstream, tool) = match ctx.route() {
            Some(route) => (Arc::clone(&route.upstream), route.tool().cloned()),
            None => (handle.key_arc(), None),
        };
        let with_tasks = target.task || declares_tasks(&ctx);
        let parking = ctx.is_stateless().then(|| Arc::clone(&self.parked));
        let logging = ctx
            .asked
            .as_ref()
            .and_then(|a| a.log_level)
            .map(|level| self.fanout.log_for(&ctx, target.upstream, level));
        let exchange = Inflight {
            host: std::sync::Mutex::new(inflight::HostSide::Waiting(ctx)),
            parking,
            logging,
            retry,
            hub: Arc::clone(&self.hub),
            upstream: target.upstream,
            method: target.method,
            // A stateless upstream may answer a host that declared the tasks extension with a
            // task handle, unasked.
            tasks: with_tasks.then(|| Arc::clone(&self.tasks)),
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
            extension,
        };
        conn.forward(
            msg,
            Forward {
                exchange: Box::new(exchange),
                progress_token,
                timeout: target.timeout,
            },
        );
    }
}

/// The request's line for `conn`, written once from the host's params with every edit the
/// upstream needs: the name or URI it knows, the host's progress token replaced by the upstream
/// request id (the host's is returned, to map progress back), a stateless host's declarations
/// about itself taken out of `_meta`, the trace context of the upstream hop, and a stateless
/// upstream's request metadata with the capabilities of the host the request is for (what it
/// may ask through input_required). `None`: the params, or their `_meta`, are not objects.
fn outbound_line(
    conn: &Connection,
    ctx: &Context,
    target: &Target,
    upstream_id: u64,
    carrier: &Option<Carrier>,
) -> Option<(Vec<u8>, Option<Box<str>>)> {
    let mut edits = Edits::default();
    if let (Some(member), Some(original)) = (target.names(), &target.original) {
        edits.set_str(member, original);
    }
    edits.meta_replace_capture_id("progressToken", upstream_id);
    if ctx.is_stateless() {
        edits.meta_remove(&stateless::HOST_KEYS);
    }
    if let Some(carrier) = carrier {
        for (key, value) in carrier.iter() {
            edits.meta_set_str(key, value);
        }
    }
    if conn.request_meta(&mut edits) {
        if let Some(client) = ctx.client() {
            edits.meta_set_raw(meta::CLIENT_CAPABILITIES, &client.capabilities);
        }
    }
    let mut line = Vec::with_capacity(target.params.len() + 256);
    let built = write::request_edited(
        &mut line,
        upstream_id,
        target.wire_method(),
        Some(&target.params),
        &edits,
    )
    .ok()?;
    let token = built.captured.map(Box::from);
    Some((line, token))
}

/// A stateless host's call of a tool that must run as a task (`execution.taskSupport:
/// "required"`, a session-era upstream's): asked of the upstream as a task, which the host
/// follows with the tasks extension; refused (-32021) to a host that did not declare that
/// extension with the request.
fn task_for_stateless(
    ctx: &Context,
    catalog: &manifold_catalog::Catalog,
    mut target: Target,
) -> Result<Target, RouteError> {
    if !ctx.is_stateless() || target.task {
        return Ok(target);
    }
    let Some(item) = target
        .exposed
        .as_deref()
        .and_then(|name| catalog.listing(ListKind::Tools).get(name))
    else {
        return Ok(target);
    };
    if !item.task_required {
        return Ok(target);
    }
    if !ctx
        .asked
        .as_ref()
        .is_some_and(|a| a.declares_extension(crate::tasks::EXTENSION))
    {
        return Err(RouteError::MissingCapability {
            capability: crate::tasks::EXTENSION,
            what: format!("tool {:?} runs only as a task, which", item.exposed),
        });
    }
    let mut params = RawObject::parse(&target.params)
        .map_err(|_| RouteError::InvalidParams("params must be an object".into()))?;
    params.set_raw("task", "{}");
    target.params = params.to_text();
    target.task = true;
    Ok(target)
}

/// Whether a stateless host declared the tasks extension with its request.
fn declares_tasks(ctx: &Context) -> bool {
    ctx.asked
        .as_ref()
        .is_some_and(|a| a.declares_extension(crate::tasks::EXTENSION))
}

/// The `requestState` a retry carries, if any.
fn request_state(params: Option<&str>) -> Option<String> {
    let params = params?;
    manifold_protocol::needle::REQUEST_STATE.find(params.as_bytes())?;
    RawObject::parse(params)
        .ok()?
        .get_str("requestState")
        .map(|s| s.into_owned())
}

impl Router {
    /// A stateless host's retry with a `requestState` of Manifold's: it must be one Manifold
    /// sealed, for this caller and this request; then it continues the parked request.
    fn resume(self: &Arc<Self>, mut ctx: Context, method: &str, env: &Envelope<'_>, sealed: &str) {
        let state = match self.parked.sealer().open(sealed, request_state::now_ms()) {
            Ok(state) => state,
            Err(why) => return ctx.fail(&RouteError::RequestState(why.into())),
        };
        let params = env.params.and_then(|p| RawObject::parse(p).ok());
        let named = params.as_ref().and_then(|p| match method {
            "resources/read" | "skills/get" | "resources/directory/read" => p.get_str("uri"),
            _ => p.get_str("name"),
        });
        let named = named.as_deref().unwrap_or_default();
        if !Park::matches(&state, &ctx.caller.id, method, named) {
            return ctx.fail(&RouteError::RequestState(
                "it was issued for another caller or another request".into(),
            ));
        }
        let catalog = self.hub.catalog();
        let sight = ctx.caller.restricted().map(|t| &**t);
        let target = match method {
            "tools/call" => resolve::named(&catalog, env, ListKind::Tools, sight),
            "prompts/get" => resolve::named(&catalog, env, ListKind::Prompts, sight),
            _ => resolve::by_uri(&catalog, env, method, sight),
        };
        // A consent's retry may come before the upstream's catalog could be read with the new
        // grant: its tool is routed as on the first call.
        let target = self.or_unlisted(&catalog, env, sight, target);
        if let Some(upstream_state) = &state.upstream {
            // A stateless upstream's own state: the request goes on to it, with its state.
            return match target {
                Ok(mut target) => {
                    let Ok(mut obj) = RawObject::parse(&target.params) else {
                        return ctx.fail(&RouteError::InvalidParams(
                            "params must be an object".into(),
                        ));
                    };
                    obj.set_raw(
                        "requestState",
                        manifold_protocol::object::json_string(upstream_state),
                    );
                    target.params = obj.to_text();
                    self.admit(ctx, target)
                }
                Err(e) => ctx.fail(&e),
            };
        }
        if state.park.is_none() {
            // A consent's state: the request starts over, now that the caller authorized.
            return match target {
                Ok(mut target) => {
                    if let Ok(mut obj) = RawObject::parse(&target.params) {
                        obj.remove("requestState");
                        obj.remove("inputResponses");
                        target.params = obj.to_text();
                    }
                    self.admit(ctx, target)
                }
                Err(e) => ctx.fail(&e),
            };
        }
        if let Ok(target) = &target {
            self.note_route(&mut ctx, target);
        }
        let responses = params.as_ref().and_then(|p| p.get("inputResponses"));
        self.parked.resume(ctx, &state, responses);
    }
}

impl Router {
    /// `target`, or for an unknown tool or prompt, the per-caller upstream it names whose
    /// catalog nobody could read yet (`unlisted_per_caller`).
    fn or_unlisted(
        &self,
        catalog: &manifold_catalog::Catalog,
        env: &Envelope<'_>,
        sight: Option<&crate::policy::Team>,
        target: Result<Target, RouteError>,
    ) -> Result<Target, RouteError> {
        match target {
            Err(RouteError::UnknownTool(name)) => self
                .unlisted_per_caller(catalog, env, "tools/call", &name, sight)
                .ok_or(RouteError::UnknownTool(name)),
            Err(RouteError::UnknownPrompt(name)) => self
                .unlisted_per_caller(catalog, env, "prompts/get", &name, sight)
                .ok_or(RouteError::UnknownPrompt(name)),
            other => other,
        }
    }

    /// A tool or prompt of a per-caller upstream whose catalog nobody could read yet (no
    /// caller has connected, and no shared login lists it): `{prefix}{separator}{name}` goes to
    /// that upstream as `name`, so that the caller's first call asks for their consent.
    fn unlisted_per_caller(
        &self,
        catalog: &manifold_catalog::Catalog,
        env: &Envelope<'_>,
        method: &'static str,
        name: &str,
        sight: Option<&crate::policy::Team>,
    ) -> Option<Target> {
        let separator = &self.hub.names().separator;
        let (upstream, original) = catalog.defs().iter().enumerate().find_map(|(i, def)| {
            if def.retired || def.prefix.is_empty() || catalog.slice(i).is_some() {
                return None;
            }
            let rest = name
                .strip_prefix(def.prefix.as_str())?
                .strip_prefix(separator.as_str())?;
            (!rest.is_empty() && self.pool.per_caller(i)).then_some((i, rest))
        })?;
        if sight.is_some_and(|team| !team.config().admits_upstream(&catalog.defs()[upstream].key)) {
            return None;
        }
        Some(Target {
            upstream,
            method,
            params: env.params.unwrap_or_default().to_owned(),
            timeout: None,
            task: false,
            exposed: Some(Arc::from(name)),
            original: Some(Arc::from(original)),
            round: 0,
            extension: None,
        })
    }
}

fn unavailable(handle: &UpstreamHandle, reason: &str) -> RouteError {
    RouteError::Upstream(UpstreamError::Unavailable {
        upstream: handle.key().to_owned(),
        reason: reason.to_owned(),
    })
}
