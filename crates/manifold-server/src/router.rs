//! Routing a host's messages: decode the envelope, answer what Manifold answers itself
//! (handshake, ping, lists from the cached catalog), and forward the rest to the owning
//! upstream with names, URIs, ids and progress tokens rewritten.
//!
//! Everything here runs synchronously on the thread that read the line; only the handshake
//! and fan-outs, which must wait, are spawned onto the async runtime.

use std::sync::Arc;

use manifold_catalog::{rewrite, Catalog, Item, Kind as ListKind, Resolved, UpstreamState};
use manifold_config::ServerSettings;
use manifold_protocol::{version, write, Envelope, Kind, Params, RawObject};
use manifold_upstream::{Connection, Downstream, Forward, Hub, UpstreamError, UpstreamHandle};

use crate::error::RouteError;
use crate::initialize;
use crate::session::Session;

/// Routes every session's messages to the upstreams.
pub struct Router {
    hub: Arc<Hub>,
    upstreams: Vec<UpstreamHandle>,
    settings: ServerSettings,
    runtime: tokio::runtime::Handle,
}

impl Router {
    pub fn new(
        hub: Arc<Hub>,
        upstreams: Vec<UpstreamHandle>,
        settings: ServerSettings,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Arc::new(Self {
            hub,
            upstreams,
            settings,
            runtime,
        })
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// Handles one line from the host of `session`.
    pub fn handle_line(self: &Arc<Self>, session: &Arc<Session>, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let env = match Envelope::decode(line) {
            Ok(env) => env,
            Err(e) => return reply_error(session, None, &e.into()),
        };
        match env.kind() {
            Err(e) => reply_error(session, usable_id(&env), &e.into()),
            Ok(Kind::Request) => {
                let Some(id) = env.id else { return };
                let method = env.method.as_deref().unwrap_or_default();
                let span =
                    tracing::debug_span!("mcp.request", method, session = session.session_id());
                let _entered = span.enter();
                if let Err(e) = self.request(session, id, method, &env) {
                    tracing::debug!(error = %e, "request refused");
                    reply_error(session, Some(id), &e);
                }
            }
            Ok(Kind::Notification) => self.notification(session, &env),
            // Manifold sends hosts no requests yet, so there is nothing to match answers to.
            Ok(Kind::Response) => {}
        }
    }

    /// A line over the size limit was dropped: tell the host, keep the session.
    pub fn oversize(&self, session: &Arc<Session>, len: usize) {
        let max = self.settings.max_message_bytes;
        tracing::warn!(len, max, "message over the size limit refused");
        reply_error(session, None, &RouteError::Oversize { len, max });
    }

    fn request(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: &str,
        method: &str,
        env: &Envelope<'_>,
    ) -> Result<(), RouteError> {
        match method {
            "initialize" => return self.initialize(session, id, env),
            "ping" => {
                reply(session, id, "{}");
                return Ok(());
            }
            _ if !session.is_ready() => return Err(RouteError::NotInitialized),
            _ => {}
        }
        // The forwarded methods parse their params once, for routing and rewriting together.
        match method {
            "tools/call" => return self.call_named(session, id, env, ListKind::Tools),
            "prompts/get" => return self.call_named(session, id, env, ListKind::Prompts),
            "resources/read" => return self.read(session, id, env),
            _ => {}
        }
        let params = env
            .routing_params()
            .map_err(|_| RouteError::InvalidParams("params must be an object".into()))?;
        match method {
            "tools/list" => self.list(session, id, ListKind::Tools, &params),
            "prompts/list" => self.list(session, id, ListKind::Prompts, &params),
            "resources/list" => self.list(session, id, ListKind::Resources, &params),
            "resources/templates/list" => {
                self.list(session, id, ListKind::ResourceTemplates, &params)
            }
            "completion/complete" => self.complete(session, id, env, &params),
            "logging/setLevel" => self.set_level(session, id, env),
            _ => Err(RouteError::UnknownMethod(method.to_owned())),
        }
    }

    fn initialize(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: &str,
        env: &Envelope<'_>,
    ) -> Result<(), RouteError> {
        let params = env
            .routing_params()
            .map_err(|_| RouteError::InvalidParams("params must be an object".into()))?;
        if !session.begin_initialize() {
            return Err(RouteError::AlreadyInitialized);
        }
        let negotiated = version::negotiate(params.protocol_version.as_deref());
        let (router, session, id) = (Arc::clone(self), Arc::clone(session), id.to_owned());
        self.runtime.spawn(async move {
            // Answer with the whole catalog: wait (bounded) for every upstream's first start.
            router
                .hub
                .wait_settled(router.settings.startup_timeout)
                .await;
            let result = initialize::result(&router.hub.catalog(), negotiated);
            session.finish_initialize();
            reply(&session, &id, &result);
        });
        Ok(())
    }

    fn list(
        &self,
        session: &Arc<Session>,
        id: &str,
        kind: ListKind,
        params: &Params<'_>,
    ) -> Result<(), RouteError> {
        let catalog = self.hub.catalog();
        let body = catalog
            .listing(kind)
            .page(params.cursor.as_deref())
            .map_err(|_| RouteError::BadCursor)?;
        reply(session, id, body);
        Ok(())
    }

    fn call_named(
        &self,
        session: &Arc<Session>,
        id: &str,
        env: &Envelope<'_>,
        kind: ListKind,
    ) -> Result<(), RouteError> {
        let method = match kind {
            ListKind::Tools => "tools/call",
            _ => "prompts/get",
        };
        let mut params = params_object(env)?;
        let catalog = self.hub.catalog();
        let item = {
            let name = params.get_str("name").ok_or_else(|| missing("name"))?;
            resolve_named(&catalog, kind, &name)?
        };
        params.set_str("name", &item.original);
        self.forward(
            session,
            id,
            item.upstream,
            method,
            &params.to_text(),
            &catalog,
        )
    }

    fn read(&self, session: &Arc<Session>, id: &str, env: &Envelope<'_>) -> Result<(), RouteError> {
        let mut params = params_object(env)?;
        let catalog = self.hub.catalog();
        let (upstream, original) = {
            let uri = params.get_str("uri").ok_or_else(|| missing("uri"))?;
            let (upstream, original) = resolve_uri(&catalog, &uri)?;
            (upstream, original.to_owned())
        };
        params.set_str("uri", &original);
        self.forward(
            session,
            id,
            upstream,
            "resources/read",
            &params.to_text(),
            &catalog,
        )
    }

    /// `completion/complete` goes to the upstream that owns the prompt or template in `ref`.
    fn complete(
        &self,
        session: &Arc<Session>,
        id: &str,
        env: &Envelope<'_>,
        params: &Params<'_>,
    ) -> Result<(), RouteError> {
        let bad = |m: &str| RouteError::InvalidParams(m.to_owned());
        let reference = params.reference.ok_or_else(|| bad("missing \"ref\""))?;
        let reference =
            RawObject::parse(reference.get()).map_err(|_| bad("\"ref\" must be an object"))?;
        let all = env.params.ok_or_else(|| bad("missing params"))?;
        let catalog = self.hub.catalog();
        let (upstream, raw) = match reference.get_str("type").as_deref() {
            Some("ref/prompt") => {
                let name = reference
                    .get_str("name")
                    .ok_or_else(|| bad("missing \"ref.name\""))?;
                let item = resolve_named(&catalog, ListKind::Prompts, &name)?;
                (
                    item.upstream,
                    rewrite::set_ref_member(all, "name", &item.original),
                )
            }
            Some("ref/resource") => {
                let uri = reference
                    .get_str("uri")
                    .ok_or_else(|| bad("missing \"ref.uri\""))?;
                let (upstream, original) = resolve_uri(&catalog, &uri)?;
                (upstream, rewrite::set_ref_member(all, "uri", original))
            }
            _ => {
                return Err(bad(
                    "\"ref.type\" must be \"ref/prompt\" or \"ref/resource\"",
                ))
            }
        };
        let raw = raw.ok_or_else(|| bad("malformed params"))?;
        self.forward(session, id, upstream, "completion/complete", &raw, &catalog)
    }

    /// `logging/setLevel` goes to every running upstream that declared logging.
    fn set_level(
        &self,
        session: &Arc<Session>,
        id: &str,
        env: &Envelope<'_>,
    ) -> Result<(), RouteError> {
        let params = env
            .params
            .ok_or_else(|| RouteError::InvalidParams("missing \"level\"".into()))?;
        let level = RawObject::parse(params)
            .ok()
            .and_then(|p| p.get_str("level").map(|l| l.into_owned()));
        if level.is_none() {
            return Err(RouteError::InvalidParams("missing \"level\"".into()));
        }
        let catalog = self.hub.catalog();
        let targets: Vec<Arc<Connection>> = self
            .upstreams
            .iter()
            .filter(|h| {
                catalog
                    .slice(h.index())
                    .is_some_and(|s| s.has_capability("logging"))
            })
            .filter_map(UpstreamHandle::connection)
            .collect();
        let (session, id, params) = (Arc::clone(session), id.to_owned(), params.to_owned());
        self.runtime.spawn(async move {
            let calls = targets
                .iter()
                .map(|c| c.request("logging/setLevel", Some(&params)));
            for (conn, res) in targets.iter().zip(futures::future::join_all(calls).await) {
                if let Err(e) = res {
                    tracing::warn!(upstream = conn.name(), "logging/setLevel failed: {e}");
                }
            }
            reply(&session, &id, "{}");
        });
        Ok(())
    }

    /// Sends `params` to an upstream as a new request whose answer returns to this host.
    fn forward(
        &self,
        session: &Arc<Session>,
        id: &str,
        upstream: usize,
        method: &'static str,
        params: &str,
        catalog: &Catalog,
    ) -> Result<(), RouteError> {
        let handle = &self.upstreams[upstream];
        if let UpstreamState::Down { reason } = catalog.state(upstream) {
            return Err(unavailable(handle, reason));
        }
        let conn = handle
            .connection()
            .ok_or_else(|| unavailable(handle, "it is starting"))?;
        let upstream_id = conn.next_id();
        let (mapped, progress_token) = map_progress_token(params, upstream_id);
        let params = mapped.as_deref().unwrap_or(params);
        let mut line = Vec::with_capacity(params.len() + 64);
        write::request(&mut line, upstream_id, method, Some(params));
        let fwd = Forward {
            to: Arc::clone(session) as Arc<dyn Downstream>,
            host_id: id.into(),
            method,
            progress_token,
            span: tracing::debug_span!(
                "upstream.hop",
                upstream = handle.key(),
                method,
                id = upstream_id
            ),
        };
        conn.forward(upstream_id, &line, fwd)
            .map_err(RouteError::Upstream)
    }

    fn notification(&self, session: &Arc<Session>, env: &Envelope<'_>) {
        match env.method.as_deref().unwrap_or_default() {
            "notifications/cancelled" => {
                let Some(params) = env.params.and_then(|p| RawObject::parse(p).ok()) else {
                    return;
                };
                let Some(request_id) = params.get("requestId") else {
                    return;
                };
                let reason = params.get_str("reason");
                let owner = self
                    .upstreams
                    .iter()
                    .filter_map(UpstreamHandle::connection)
                    .find(|c| c.cancel_for(session.session_id(), request_id, reason.as_deref()));
                tracing::debug!(
                    request = request_id,
                    forwarded_to = owner.as_ref().map(|c| c.name()),
                    "host cancelled a request"
                );
            }
            "notifications/initialized" | "notifications/roots/list_changed" => {}
            other => tracing::debug!(method = other, "host notification ignored"),
        }
    }
}

/// Replaces a host's `_meta.progressToken` with the upstream request id, which is unique on
/// that upstream, so progress from a shared upstream maps back to the right request.
fn map_progress_token(params: &str, upstream_id: u64) -> (Option<String>, Option<Box<str>>) {
    if memchr::memmem::find(params.as_bytes(), b"progressToken").is_none() {
        return (None, None);
    }
    let Ok(mut obj) = RawObject::parse(params) else {
        return (None, None);
    };
    let Some(mut meta) = obj.get("_meta").and_then(|m| RawObject::parse(m).ok()) else {
        return (None, None);
    };
    let Some(token) = meta.get("progressToken").map(Box::from) else {
        return (None, None);
    };
    meta.set_raw("progressToken", upstream_id.to_string());
    let meta = meta.to_text();
    obj.set_raw("_meta", meta);
    (Some(obj.to_text()), Some(token))
}

/// The request's params as an object of raw members: parsed once, then read and rewritten.
fn params_object<'a>(env: &Envelope<'a>) -> Result<RawObject<'a>, RouteError> {
    let raw = env
        .params
        .ok_or_else(|| RouteError::InvalidParams("missing params".into()))?;
    RawObject::parse(raw).map_err(|_| RouteError::InvalidParams("params must be an object".into()))
}

fn missing(key: &str) -> RouteError {
    RouteError::InvalidParams(format!("missing \"{key}\""))
}

/// The tool or prompt exposed as `name`, or the error a host should see.
fn resolve_named<'c>(
    catalog: &'c Catalog,
    kind: ListKind,
    name: &str,
) -> Result<&'c Item, RouteError> {
    match catalog.resolve_name(kind, name) {
        Resolved::Found(item) => Ok(item),
        Resolved::Ambiguous(c) if kind == ListKind::Tools => Err(RouteError::ambiguous("tool", c)),
        Resolved::Ambiguous(c) => Err(RouteError::ambiguous("prompt", c)),
        Resolved::Unknown if kind == ListKind::Tools => {
            Err(RouteError::UnknownTool(name.to_owned()))
        }
        Resolved::Unknown => Err(RouteError::UnknownPrompt(name.to_owned())),
    }
}

/// The upstream and original URI behind an exposed URI or template.
fn resolve_uri<'u>(catalog: &Catalog, uri: &'u str) -> Result<(usize, &'u str), RouteError> {
    catalog
        .resolve_uri(uri)
        .ok_or_else(|| RouteError::UnknownResource(uri.to_owned()))
}

fn unavailable(handle: &UpstreamHandle, reason: &str) -> RouteError {
    RouteError::Upstream(UpstreamError::Unavailable {
        upstream: handle.key().to_owned(),
        reason: reason.to_owned(),
    })
}

/// The id of an invalid message, if it has one a host could match.
fn usable_id<'a>(env: &Envelope<'a>) -> Option<&'a str> {
    env.id
        .filter(|id| manifold_protocol::envelope::is_valid_id(id))
}

fn reply(session: &Session, id: &str, result: &str) {
    session.send_parts(&write::response_parts(id, result));
}

fn reply_error(session: &Session, id: Option<&str>, err: &RouteError) {
    let mut out = Vec::new();
    write::error_response(&mut out, id, &err.to_error_object());
    session.send_line(&out);
}
