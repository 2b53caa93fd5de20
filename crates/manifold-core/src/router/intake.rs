//! A host's message, from its bytes to what answers it: decoded, told apart (request,
//! notification, answer to Manifold's own request), refused with the right error when it is
//! none of them, and a request given its [`Context`] and sent on to a method of `methods/` or
//! to `forward.rs`.

use std::sync::Arc;

use manifold_protocol::envelope::{canonical_id, is_valid_id};
use manifold_protocol::{version, write, Envelope, Kind, MessageError, Params, Place, RawObject};
use manifold_telemetry::trace;

use super::{methods, resolve, Handled, Router};
use crate::context::{reply_error, Context, Origin};
use crate::error::RouteError;
use crate::stateless;

impl Router {
    /// Handles one message from a host.
    pub fn handle_line(self: &Arc<Self>, origin: &Origin, line: &[u8]) -> Handled {
        self.handle_decoded(origin, line, Envelope::decode_host(line))
    }

    /// [`Router::handle_line`] for a message its transport decoded already (`decoded`, what
    /// `Envelope::decode_host` made of `line`), so that it is decoded once.
    pub fn handle_decoded(
        self: &Arc<Self>,
        origin: &Origin,
        line: &[u8],
        decoded: Result<Envelope<'_>, MessageError>,
    ) -> Handled {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Handled::Empty;
        }
        match decoded {
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
            "tools/call"
            | "prompts/get"
            | "resources/read"
            | "skills/get"
            | "resources/directory/read" => return self.forward(ctx, method, env),
            _ => {}
        }
        let params = match env.routing_params() {
            Ok(p) => p,
            Err(e) => return ctx.fail(&RouteError::InvalidParams(e.to_string())),
        };
        match method {
            "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "skills/list" => self.list(ctx, method, &params),
            "completion/complete" => self.complete(ctx, env, &params),
            "logging/setLevel" => self.set_level(ctx, &params),
            "resources/subscribe" => self.subscribe(ctx, &params, true),
            "resources/unsubscribe" => self.subscribe(ctx, &params, false),
            "subscriptions/listen" if ctx.is_stateless() => self.listen(ctx, env),
            "tasks/get" | "tasks/cancel" | "tasks/update" if ctx.is_stateless() => {
                self.extension_task(ctx, method, env)
            }
            // The session era's tasks moved to an extension Manifold does not offer
            // stateless hosts: theirs are methods it does not know.
            _ if ctx.is_stateless() => self.extension_request(ctx, method, env),
            "tasks/list" => self.list_tasks(ctx),
            "tasks/get" | "tasks/result" | "tasks/cancel" => self.task(ctx, method, env),
            // Perhaps a method of an extension that passes through (`extension.rs`).
            _ => self.extension_request(ctx, method, env),
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
            // Perhaps a notification of an extension that passes through (`extension.rs`).
            _ => self.extension_notification(origin, env),
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
