//! What the router knows about a message and its sender. Transports build an [`Origin`] per
//! message (or once per session); the router makes a [`Context`] per request, which travels
//! with the request wherever it goes: into an upstream's pending table, into an async step.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use manifold_protocol::version::Era;
use manifold_protocol::write;
use manifold_telemetry::recent::{recent_calls, CallRecord, TraceId};
use manifold_telemetry::spans::{self, ServerDone, Subject};
use manifold_telemetry::trace::Carrier;
use manifold_telemetry::{metrics, HostTransport, OpLabels, Outcome};

use crate::error::{self, RouteError};
use crate::outlet::Outlet;
use crate::policy::Caller;
use crate::session::{Client, Session};
use crate::stateless::{self, Asked};

/// Who sent a message, and where what answers it goes.
#[derive(Clone)]
pub struct Origin {
    /// The session, when the transport has one (the stateless era has none).
    pub session: Option<Arc<Session>>,
    /// For Streamable HTTP, the response to the POST that carried the message; for stdio and
    /// the SSE transport, the session's stream.
    pub outlet: Arc<dyn Outlet>,
    /// The trace context of the HTTP request that carried the message, if it had one.
    pub trace: Option<Arc<Carrier>>,
    /// Who sent it, when there is no session to say so.
    pub caller: Option<Arc<Caller>>,
    /// For a request without a session (a stateless one over HTTP), a number of its own that
    /// stands for the session: what cancels it upstream when its response stream closes.
    /// 0 with a session.
    pub owner: u64,
    /// What a stateless request declared in `_meta`, when the transport read it already (to
    /// check its headers against it), so that it is not read twice.
    pub asked: Option<Arc<Asked>>,
}

impl Origin {
    pub fn new(session: Option<Arc<Session>>, outlet: Arc<dyn Outlet>) -> Self {
        Self {
            session,
            outlet,
            trace: None,
            caller: None,
            owner: 0,
            asked: None,
        }
    }

    /// The era its messages are spoken in: stateless when the transport read a stateless
    /// request's `_meta`.
    pub fn era(&self) -> Era {
        match self.asked.is_some() {
            true => Era::Stateless,
            false => Era::Session,
        }
    }

    /// Who sent the message: the session's caller, else the one given, else anonymous.
    pub fn caller(&self) -> Arc<Caller> {
        match (&self.session, &self.caller) {
            (Some(s), _) => Arc::clone(s.caller()),
            (None, Some(c)) => Arc::clone(c),
            (None, None) => Caller::anonymous(),
        }
    }
}

/// Where a request was routed.
pub struct Route {
    /// The upstream's key.
    pub upstream: Arc<str>,
    /// The method sent upstream.
    pub method: &'static str,
    /// The tool or prompt name, or the URI, as the host named it.
    pub exposed: Option<Arc<str>>,
}

impl Route {
    /// The tool's name as hosts see it, for a tool call (the `tool` label).
    pub fn tool(&self) -> Option<&Arc<str>> {
        self.exposed
            .as_ref()
            .filter(|_| self.method == "tools/call")
    }
}

/// One host request. When it is dropped (answered, or cancelled) its duration is recorded
/// with how it ended, and its span ends.
pub struct Context {
    pub session: Option<Arc<Session>>,
    pub outlet: Arc<dyn Outlet>,
    /// The host's request id, as JSON text.
    pub id: Box<str>,
    /// The protocol version the request is spoken in.
    pub version: &'static str,
    /// What a stateless-era request declared about its sender in `_meta`; `None` for a
    /// session-era request.
    pub asked: Option<Arc<Asked>>,
    /// The session's number, or the number a sessionless request stands under (0: none).
    owner: u64,
    /// Who asked.
    pub caller: Arc<Caller>,
    /// The request's server span; every step of the request is recorded under it.
    pub span: tracing::Span,
    started: Instant,
    transport: HostTransport,
    /// The method as a metric label.
    method: &'static str,
    /// Where it went; `None`: answered by Manifold itself.
    route: Option<Route>,
    /// How it ended: an [`Outcome`] as a number, 0 while unanswered (dropped unanswered means
    /// cancelled).
    outcome: AtomicU8,
    /// The JSON-RPC error code it ended with, 0 for none.
    code: AtomicI64,
    /// The trace id of the context the request was sent with (a `traceparent`), for the
    /// recent calls when its span is not exported.
    carried_trace: Option<TraceId>,
}

impl Context {
    /// A request that arrived from `origin`; `parent` is the trace context it carried.
    pub fn new(origin: &Origin, id: &str, method: &str, parent: Option<&Carrier>) -> Self {
        let session = origin.session.clone();
        if let Some(session) = &session {
            session.request_started();
        }
        let version = session
            .as_ref()
            .and_then(|s| s.version())
            .unwrap_or(manifold_protocol::version::LATEST);
        let caller = origin.caller();
        let transport = session
            .as_ref()
            .map_or(HostTransport::Http, |s| s.transport().metric());
        metrics().host_request_started(transport);
        let carrier = parent.or(origin.trace.as_deref());
        let span = spans::server(carrier);
        let carried_trace = carrier
            .filter(|_| recent_calls().is_on())
            .and_then(|c| c.iter().find(|(k, _)| *k == "traceparent"))
            .and_then(|(_, v)| TraceId::of_traceparent(v));
        if !span.is_disabled() {
            // On every line logged while the request is handled, not only on the span's end.
            span.record("manifold.team", &**caller.label());
        }
        let owner = session.as_ref().map_or(origin.owner, |s| s.id());
        Self {
            session,
            outlet: Arc::clone(&origin.outlet),
            id: id.into(),
            version,
            asked: origin.asked.clone(),
            owner,
            caller,
            span,
            started: Instant::now(),
            transport,
            method: metrics::method_label(method),
            route: None,
            outcome: AtomicU8::new(0),
            code: AtomicI64::new(0),
            carried_trace,
        }
    }

    /// Notes where the request is going, for its metrics and span.
    pub fn routed(&mut self, route: Route) {
        self.route = Some(route);
    }

    /// Where it was routed, for the metrics of its hops.
    pub fn route(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    /// Records how the request ended (the last word counts).
    pub fn ended(&self, outcome: Outcome, code: Option<i64>) {
        self.outcome.store(outcome as u8 + 1, Ordering::Relaxed);
        self.code.store(code.unwrap_or(0), Ordering::Relaxed);
    }

    /// The caller's team name, or "anonymous" (the `team` of metrics, spans and logs).
    pub fn principal(&self) -> &Arc<str> {
        self.caller.label()
    }

    /// The session's number, or the one a sessionless request stands under (0: none).
    pub fn session_id(&self) -> u64 {
        self.owner
    }

    /// Who owns the tasks this request creates: its session, or for a sessionless (stateless)
    /// request its caller (a number of the caller's id, with the top bit set so that it is no
    /// session's number).
    pub fn task_owner(&self) -> u64 {
        if self.session.is_some() || self.asked.is_none() {
            return self.owner;
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.caller.id.hash(&mut h);
        h.finish() | (1 << 63)
    }

    /// Whether the request is a stateless-era one.
    pub fn is_stateless(&self) -> bool {
        self.asked.is_some()
    }

    /// The era the request is spoken in.
    pub fn era(&self) -> Era {
        match self.is_stateless() {
            true => Era::Stateless,
            false => Era::Session,
        }
    }

    /// What the host declared about itself: with this request (stateless era), or in
    /// `initialize` (session era).
    pub fn client(&self) -> Option<&Client> {
        match &self.asked {
            Some(asked) => Some(&asked.client),
            None => self.session.as_ref().and_then(|s| s.client()),
        }
    }

    /// Answers with `result` (JSON text); a stateless host gets it with `resultType` and
    /// Manifold's server info.
    pub fn reply(&self, result: &str) {
        self.reply_with(result, &[]);
    }

    /// Answers with `result`, to which a stateless host's answer adds the `extra` members
    /// (raw JSON values) it does not have (a session-era host gets `result` as it is).
    pub fn reply_with(&self, result: &str, extra: &[(&str, &str)]) {
        crate::outlet::check_no_guard("an answer");
        self.ended(Outcome::Ok, None);
        if self.is_stateless() {
            let result = stateless::complete(result, extra);
            self.outlet
                .answer(&write::response_parts(&self.id, &result));
        } else {
            self.outlet.answer(&write::response_parts(&self.id, result));
        }
    }

    /// Answers with the error, as its classification in the request's era says.
    pub fn fail(&self, err: &RouteError) {
        crate::outlet::check_no_guard("an error answer");
        let era = self.era();
        let classified = err.classify(era);
        let _entered = self.span.enter();
        tracing::debug!(
            error = %err,
            fault = classified.fault.label(),
            retryable = classified.retryable,
            "request refused"
        );
        self.ended(classified.outcome, Some(classified.code));
        let mut out = Vec::new();
        write::error_response(&mut out, Some(&self.id), &err.error_object(era));
        self.outlet.answer_error(&[&out], classified.answer_status);
    }

    /// Answers with the error object an upstream refused the request with (JSON text, its
    /// names already mapped), renumbered for the request's era; returns its code.
    pub fn fail_upstream(&self, error: &str) -> Option<i64> {
        crate::outlet::check_no_guard("an upstream's refusal");
        let era = self.era();
        let (code, renumbered) = error::upstream_refusal(era, error);
        let error = renumbered.as_deref().unwrap_or(error);
        tracing::debug!(error, "upstream refused the request");
        let mut out = Vec::with_capacity(64 + error.len());
        write::raw_error_response(&mut out, &self.id, error);
        let status = code.map_or(200, |code| error::answer_status(era, code));
        self.ended(Outcome::ProtocolError, code);
        self.outlet.answer_error(&[&out], status);
        code
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Some(session) = &self.session {
            session.request_done();
        }
        metrics().host_request_done(self.transport);
        let outcome = match self.outcome.load(Ordering::Relaxed) {
            0 => Outcome::Cancelled,
            n => Outcome::ALL[usize::from(n - 1)],
        };
        let code = Some(self.code.load(Ordering::Relaxed)).filter(|c| *c != 0);
        let route = self.route.take();
        spans::server_done(
            &self.span,
            &ServerDone {
                method: self.method,
                subject: route.as_ref().map_or(Subject::None, |r| {
                    Subject::of(r.method, r.exposed.as_deref())
                }),
                session: self.session_id(),
                id: &self.id,
                version: self.version,
                transport: self.transport,
                team: self.principal(),
                upstream: route.as_ref().map(|r| &*r.upstream),
                outcome,
                code,
            },
        );
        self.record_recent(route.as_ref(), outcome);
        let tool = route.as_ref().and_then(Route::tool).cloned();
        let labels = OpLabels {
            method: self.method,
            tool,
            upstream: route.map(|r| r.upstream),
            team: Arc::clone(self.principal()),
            transport: self.transport.label(),
            outcome,
        };
        metrics().server_op(labels, self.started.elapsed());
    }
}

impl Context {
    /// Adds the request to the recent calls the console shows (when one is served): only
    /// shared names and numbers, never its arguments or its answer.
    fn record_recent(&self, route: Option<&Route>, outcome: Outcome) {
        let recent = recent_calls();
        if !recent.is_on() {
            return;
        }
        recent.record(CallRecord {
            seq: 0,
            at: SystemTime::now(),
            team: Arc::clone(self.principal()),
            method: self.method,
            // A tool's or prompt's name; never a URI, which may carry what the caller asked.
            subject: route
                .filter(|r| matches!(r.method, "tools/call" | "prompts/get"))
                .and_then(|r| r.exposed.clone()),
            upstream: route.map(|r| Arc::clone(&r.upstream)),
            transport: self.transport.label(),
            outcome,
            latency: self.started.elapsed(),
            trace: spans::trace_id(&self.span).or(self.carried_trace),
        });
    }
}

/// Sends the JSON-RPC error for `err` to `outlet`, for a message of `era` that no request
/// context stands for; `id` is JSON text, `None` for `null`.
pub fn reply_error(outlet: &dyn Outlet, id: Option<&str>, era: Era, err: &RouteError) {
    let mut out = Vec::new();
    write::error_response(&mut out, id, &err.error_object(era));
    outlet.answer_error(&[&out], err.classify(era).answer_status);
}
