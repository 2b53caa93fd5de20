//! What the router knows about a message and its sender. Transports build an [`Origin`] per
//! message (or once per session); the router makes a [`Context`] per request, which travels
//! with the request wherever it goes: into an upstream's pending table, into an async step.

use std::sync::Arc;
use std::time::Instant;

use manifold_protocol::write;

use crate::error::RouteError;
use crate::outlet::Outlet;
use crate::session::{Client, Session};

/// Who sent a message, and where what answers it goes.
#[derive(Clone)]
pub struct Origin {
    /// The session, when the transport has one (the stateless era has none).
    pub session: Option<Arc<Session>>,
    /// For Streamable HTTP, the response to the POST that carried the message; for stdio and
    /// the SSE transport, the session's stream.
    pub outlet: Arc<dyn Outlet>,
}

/// One host request.
pub struct Context {
    pub session: Option<Arc<Session>>,
    pub outlet: Arc<dyn Outlet>,
    /// The host's request id, as JSON text.
    pub id: Box<str>,
    /// The protocol version the request is spoken in.
    pub version: &'static str,
    /// Who asked; "anonymous" until authentication exists.
    pub principal: Arc<str>,
    /// When the host stops waiting, if it said so.
    pub deadline: Option<Instant>,
    /// The `mcp.request` span; every step of the request is recorded under it.
    pub span: tracing::Span,
}

impl Context {
    pub fn new(origin: &Origin, id: &str, method: &str) -> Self {
        let session = origin.session.clone();
        let version = session
            .as_ref()
            .and_then(|s| s.version())
            .unwrap_or(manifold_protocol::version::LATEST);
        let principal = session
            .as_ref()
            .map_or_else(|| Arc::from("anonymous"), |s| Arc::clone(s.principal()));
        let span = tracing::debug_span!(
            "mcp.request",
            method,
            session = session.as_ref().map_or(0, |s| s.id())
        );
        Self {
            session,
            outlet: Arc::clone(&origin.outlet),
            id: id.into(),
            version,
            principal,
            deadline: None,
            span,
        }
    }

    /// The session's number (0: no session).
    pub fn session_id(&self) -> u64 {
        self.session.as_ref().map_or(0, |s| s.id())
    }

    /// What the host declared in `initialize`, if there is a session.
    pub fn client(&self) -> Option<&Client> {
        self.session.as_ref().and_then(|s| s.client())
    }

    /// Answers with `result` (JSON text).
    pub fn reply(&self, result: &str) {
        self.outlet.answer(&write::response_parts(&self.id, result));
    }

    /// Answers with the error.
    pub fn fail(&self, err: &RouteError) {
        let _entered = self.span.enter();
        tracing::debug!(error = %err, "request refused");
        reply_error(&*self.outlet, Some(&self.id), err);
    }
}

/// Sends the JSON-RPC error for `err` to `outlet`; `id` is JSON text, `None` for `null`.
pub fn reply_error(outlet: &dyn Outlet, id: Option<&str>, err: &RouteError) {
    let mut out = Vec::new();
    write::error_response(&mut out, id, &err.to_error_object());
    outlet.answer(&[&out]);
}
