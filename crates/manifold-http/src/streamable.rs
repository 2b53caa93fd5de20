//! Streamable HTTP at `/mcp`: POST carries one message (or a batch, for hosts on 2025-03-26)
//! and gets 202, a JSON answer, or an SSE stream ending with the answer; GET opens (or, with
//! `Last-Event-ID`, resumes) a stream; DELETE ends the session.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use manifold_protocol::{sse, version, Envelope, Kind};

use super::streams::{EventBody, First, PostOutlet, Replay, Streams};
use manifold_telemetry::{metrics, Direction, HostTransport};

use super::admission::{Unversioned, Versioned};
use super::{
    backlogged, hard_limit, new_token, read_body, refuse, sse_response, trace_context, AppState,
    SESSION_HEADER,
};
use manifold_core::context::Origin;
use manifold_core::error::RouteError;
use manifold_core::policy::Caller;
use manifold_core::replicas::{EventSink, SessionStore};
use manifold_core::router::Handled;
use manifold_core::session::{Session, Transport};

pub(super) async fn post(
    req: HttpRequest,
    admitted: Unversioned,
    payload: web::Payload,
    shared: web::Data<AppState>,
) -> HttpResponse {
    match read_body(payload, &shared).await {
        Err(refusal) => refusal,
        Ok(body) => handle_post(&req, &shared, &body, admitted.caller).await,
    }
}

async fn handle_post(
    req: &HttpRequest,
    shared: &AppState,
    body: &Bytes,
    caller: Arc<Caller>,
) -> HttpResponse {
    // Decoded once: what the transport needs of the message and the router read the same.
    let decoded = Envelope::decode_host(body);
    // The version is checked once the body is read, so that the refusal names the request.
    if let Err(requested) = super::version_of(req.headers()) {
        let refused = RouteError::UnsupportedVersion { requested };
        return super::refuse_request(&refused, decoded.as_ref().ok());
    }
    if req.headers().get(SESSION_HEADER).is_none() {
        if let Some(version) = stateless_version(req) {
            return super::stateless::post(req, shared, body, decoded, caller, version).await;
        }
    }
    let message = decoded.as_ref().ok();
    let (session, created) = match session_for_post(req, shared, message, caller).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    session.touch();
    let store = &shared.store;
    if let (true, Some(token)) = (store.is_shared(), session.token()) {
        store.touch(token);
        // A task lives where it was created: its requests are served there.
        if let Some(task) = message.and_then(task_of) {
            if let Some(replica) = store.task_elsewhere(&session, &task).await {
                let answer = store.forward(&session, &replica, body).await;
                return HttpResponse::Ok()
                    .content_type("application/json")
                    .body(answer);
            }
        }
    }
    let Some(streams) = shared.streams.get(session.id()) else {
        return not_found();
    };
    if let Some(refusal) = backlogged(shared, &*streams) {
        return refusal;
    }
    let limit = shared.settings.max_requests_per_session;
    if streams.in_progress.load(Ordering::Relaxed) >= limit {
        return refuse(&RouteError::Busy(format!(
            "this session already has {limit} requests in progress (server.max_requests_per_session)"
        )));
    }
    let (outlet, first) = PostOutlet::new(Arc::clone(&streams));
    metrics().host_bytes(HostTransport::Http, Direction::In, body.len());
    let origin = Origin {
        session: Some(Arc::clone(&session)),
        outlet: Arc::new(outlet),
        trace: trace_context(req),
        caller: None,
        owner: 0,
        asked: None,
    };
    let handled = shared.router.handle_decoded(&origin, body, decoded);
    drop(origin);
    let response = match handled {
        Handled::Notification | Handled::Response | Handled::Batch(0) => {
            return HttpResponse::Accepted().finish()
        }
        Handled::Empty => return refuse(&RouteError::Body("empty body".into())),
        Handled::Rejected => match first.await {
            Ok(First::Answer(error)) => HttpResponse::BadRequest()
                .content_type("application/json")
                .body(error),
            _ => refuse(&RouteError::BadRequest("invalid message".into())),
        },
        Handled::Request | Handled::Batch(_) => match first.await {
            Ok(First::Answer(answer)) => {
                if created && is_error(&answer) {
                    // A refused initialize leaves no session behind.
                    shared
                        .router
                        .end_session(session.id(), "initialize was refused");
                    return HttpResponse::Ok()
                        .content_type("application/json")
                        .body(answer);
                }
                if created {
                    share(shared, &session).await;
                }
                HttpResponse::Ok()
                    .content_type("application/json")
                    .body(answer)
            }
            Ok(First::Stream(id)) => {
                match streams.attach(id, Replay::All, shared.settings.keepalive) {
                    Some(events) => sse_response(events),
                    None => HttpResponse::Accepted().finish(),
                }
            }
            // Cancelled by the host: nothing to answer.
            Ok(First::Unanswered) | Err(_) => HttpResponse::Accepted().finish(),
        },
    };
    with_session_header(response, created.then_some(&session))
}

/// Records a new session in the store shared by replicas, if there is one, once its
/// `initialize` was answered. Should Redis fail, the session stays this replica's alone.
async fn share(shared: &AppState, session: &Arc<Session>) {
    if !shared.store.is_shared() {
        return;
    }
    if let Err(e) = shared.store.create(session).await {
        tracing::warn!(
            session = session.id(),
            "the session could not be recorded in Redis; only this replica serves it: {e}"
        );
    }
}

/// The session a POST belongs to: the one its `Mcp-Session-Id` names, or a new one for an
/// `initialize` without it. Returns whether the session is new.
async fn session_for_post(
    req: &HttpRequest,
    shared: &AppState,
    message: Option<&Envelope<'_>>,
    caller: Arc<Caller>,
) -> Result<(Arc<Session>, bool), HttpResponse> {
    if let Some(token) = req.headers().get(SESSION_HEADER) {
        let token = token.to_str().unwrap_or_default();
        return find(shared, token, &caller)
            .await
            .map(|s| (s, false))
            .ok_or_else(not_found);
    }
    if !message.is_some_and(is_initialize) {
        return Err(refuse(&RouteError::BadRequest(
            "the Mcp-Session-Id header is required (send initialize first to get one)".into(),
        )));
    }
    let token = new_token()?;
    let sessions = shared.router.sessions();
    let id = Session::next_id();
    let streams = Arc::new(Streams::new(
        id,
        sessions.ending(),
        hard_limit(shared),
        shared.settings.replay_events,
    ));
    let outlet = shared.store.outlet(&token, Arc::clone(&streams) as _);
    let session = Session::with_id(id, Transport::StreamableHttp, outlet);
    if let Some(relay) = shared.store.relay(&token) {
        session.share(relay);
    }
    session.set_caller(caller);
    // Findable before the session is, so that no request ever finds the one without the other.
    shared.streams.insert(id, &streams);
    match sessions.add(Arc::clone(&session), Some(&token)) {
        Ok(()) => {
            tracing::info!(
                session = id,
                team = &**session.principal(),
                "HTTP session opened"
            );
            Ok((session, true))
        }
        Err(full) => Err(refuse(&RouteError::Full(format!(
            "{full} (server.max_sessions); try again later"
        )))),
    }
}

pub(super) async fn get(
    req: HttpRequest,
    admitted: Versioned,
    shared: web::Data<AppState>,
) -> HttpResponse {
    let accepts = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"));
    if !accepts {
        return refuse(&RouteError::NotAcceptable(
            "GET opens an event stream: Accept must include text/event-stream".into(),
        ));
    }
    if req.headers().get(SESSION_HEADER).is_none() && stateless_version(&req).is_some() {
        // The stateless era has no standing stream: subscriptions/listen replaced it.
        let mut r = refuse(&RouteError::MethodNotAllowed {
            method: "GET".into(),
            path: "/mcp (protocol revision 2026-07-28: POST only)".into(),
        });
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let session = match session_from_header(&req, &shared, &admitted.caller).await {
        Ok(s) => s,
        Err(refusal) => return refusal,
    };
    session.touch();
    let Some(streams) = shared.streams.get(session.id()) else {
        return not_found();
    };
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok());
    let keepalive = shared.settings.keepalive;
    let store = &shared.store;
    if let (true, Some(token)) = (store.is_shared(), session.token()) {
        if session.relay().is_some() {
            // The session's own stream is in the store: this replica becomes its home.
            store.touch(token);
            store.claim(&session).await;
            let after = last.and_then(|l| l.trim().strip_prefix('r'));
            if after.is_some() || last.and_then(Streams::parse_event_id).is_none() {
                return match stored_events(&**store, &session, after, keepalive, &streams) {
                    Some(events) => sse_response(events),
                    None => not_found(),
                };
            }
        }
    }
    let resume = last.and_then(Streams::parse_event_id);
    let events = match resume {
        Some((stream, seq)) => streams
            .attach(stream, Replay::After(seq), keepalive)
            // A stream too old to be kept: start afresh on the session's own.
            .or_else(|| streams.attach(0, Replay::Nothing, keepalive)),
        None => streams.attach(0, Replay::Nothing, keepalive),
    };
    match events {
        Some(events) => sse_response(events),
        None => not_found(),
    }
}

pub(super) async fn delete(
    req: HttpRequest,
    admitted: Unversioned,
    shared: web::Data<AppState>,
) -> HttpResponse {
    match session_from_header(&req, &shared, &admitted.caller).await {
        Ok(session) => {
            shared
                .router
                .end_session(session.id(), "the host ended the session (DELETE)");
            if let (true, Some(token)) = (shared.store.is_shared(), session.token()) {
                shared.store.end(token).await;
            }
            HttpResponse::Ok().finish()
        }
        Err(refusal) => refusal,
    }
}

async fn session_from_header(
    req: &HttpRequest,
    shared: &AppState,
    caller: &Caller,
) -> Result<Arc<Session>, HttpResponse> {
    let Some(token) = req.headers().get(SESSION_HEADER) else {
        return Err(refuse(&RouteError::BadRequest(
            "the Mcp-Session-Id header is required".into(),
        )));
    };
    find(shared, token.to_str().unwrap_or_default(), caller)
        .await
        .ok_or_else(not_found)
}

/// A live Streamable HTTP session by token, if `caller` created it (presented by anyone else,
/// it is as unknown as a token that never existed). With sessions shared by replicas, one
/// this replica does not hold is looked up in the store.
async fn find(shared: &AppState, token: &str, caller: &Caller) -> Option<Arc<Session>> {
    let sessions = shared.router.sessions();
    let found = match sessions.by_token(token) {
        Some(s) => Some(s),
        None if shared.store.is_shared() && !token.is_empty() => shared.store.adopt(token).await,
        None => None,
    };
    found.filter(|s| s.transport() == Transport::StreamableHttp && s.caller().same_as(caller))
}

/// How soon a host should reconnect a GET stream that ended (SSE `retry`).
const RETRY_MS: u32 = 500;

/// The body of a GET stream of a session whose stream the store keeps: its events after
/// `after` (an id the store gave), as the store reads them, until the host goes or the
/// session ends.
fn stored_events(
    store: &dyn SessionStore,
    session: &Arc<Session>,
    after: Option<&str>,
    keepalive: std::time::Duration,
    streams: &Streams,
) -> Option<EventBody> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let queued = Arc::new(AtomicUsize::new(0));
    let retry = format!("retry: {RETRY_MS}\n\n");
    queued.fetch_add(retry.len(), Ordering::Relaxed);
    let _ = tx.send(Bytes::from(retry));
    let sink = SseSink {
        tx,
        queued: Arc::clone(&queued),
    };
    if !store.events(session, after, Box::new(sink)) {
        return None;
    }
    let readers = Arc::clone(&streams.readers);
    readers.fetch_add(1, Ordering::Relaxed);
    let gone = Box::new(move || {
        readers.fetch_sub(1, Ordering::Relaxed);
    });
    Some(EventBody::new(rx, queued, keepalive, Some(gone)))
}

/// A GET stream fed by the store: each event written as SSE, its id `r{the store's id}`.
struct SseSink {
    tx: tokio::sync::mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
}

impl EventSink for SseSink {
    fn send(&mut self, id: &str, message: &[u8]) -> bool {
        let mut event = Vec::with_capacity(message.len() + 48);
        sse::write_event(
            &mut event,
            Some(&format!("r{id}")),
            Some("message"),
            message,
        );
        self.queued.fetch_add(event.len(), Ordering::Relaxed);
        self.tx.send(Bytes::from(event)).is_ok()
    }

    fn backlog(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

fn not_found() -> HttpResponse {
    refuse(&RouteError::NotFound(
        "session not found (it ended or expired): initialize a new one".into(),
    ))
}

fn with_session_header(mut response: HttpResponse, session: Option<&Arc<Session>>) -> HttpResponse {
    let token = session.and_then(|s| s.token());
    if let Some(value) = token.and_then(|t| HeaderValue::from_str(t).ok()) {
        response
            .headers_mut()
            .insert(header::HeaderName::from_static(SESSION_HEADER), value);
    }
    response
}

/// The `MCP-Protocol-Version` of a request, when it names a stateless revision.
fn stateless_version(req: &HttpRequest) -> Option<&'static str> {
    let text = req.headers().get(super::VERSION_HEADER)?.to_str().ok()?;
    version::known(text).filter(|v| version::era_of(v) == Some(version::Era::Stateless))
}

/// The task a `tasks/get`, `tasks/result` or `tasks/cancel` request names, if it is one.
fn task_of(env: &Envelope<'_>) -> Option<String> {
    if !env.method.as_deref()?.starts_with("tasks/") {
        return None;
    }
    let params = manifold_protocol::RawObject::parse(env.params?).ok()?;
    params.get_str("taskId").map(|t| t.into_owned())
}

fn is_initialize(env: &Envelope<'_>) -> bool {
    env.method.as_deref() == Some("initialize") && env.kind() == Ok(Kind::Request)
}

fn is_error(answer: &[u8]) -> bool {
    Envelope::decode(answer).is_ok_and(|env| env.error.is_some())
}
