//! Streamable HTTP at `/mcp`. POST carries one message: a request is answered with JSON, or
//! with an SSE stream when it sends something before its answer; notifications and
//! responses get 202. An `initialize` without `Mcp-Session-Id` opens a session, whose id
//! comes back in that header and is required afterwards (missing: 400, unknown: 404). GET
//! opens the session's own stream, or resumes a stream with `Last-Event-ID`; DELETE ends
//! the session.

use std::sync::Arc;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;

use super::session::{parse_event_id, Kind, Session};
use super::sink::{First, PostSink, SessionSink};
use super::{
    authorization, check, check_origin, check_version, refuse, rpc_error, sse, stateless,
    traceparent, without_session, Shared,
};
use crate::era::EraFlag;
use crate::exchange::traced;
use crate::methods::{self, LATEST_VERSION};
use crate::rpc::Incoming;

const SESSION_HEADER: &str = "mcp-session-id";

pub(super) async fn post(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    if let Some(faulty) = super::fault::answer(&shared, &body) {
        return faulty;
    }
    if let Some(refusal) = super::mocks::version_refusal(&shared, &req, &body) {
        return refusal;
    }
    let era = shared.state.args.era;
    // The session era checks the version header first, as it always did; the others only
    // once they know the era of the POST.
    let checked = match era {
        EraFlag::Session => check(&req),
        _ => check_origin(&req),
    };
    if let Err(refusal) = checked {
        return refusal;
    }
    if shared.sessions.take_garbage() {
        return HttpResponse::Ok()
            .content_type("application/json")
            .body("this is not json");
    }
    let msg = match Incoming::parse(&body) {
        Ok(msg) => msg,
        Err(error) => return rpc_error(StatusCode::BAD_REQUEST, error),
    };
    if stateless::applies(era, &req, &msg) {
        return stateless::post(req, msg, shared).await;
    }
    if era != EraFlag::Session {
        if let Err(refusal) = check_version(req.headers()) {
            return refusal;
        }
    }
    let (session, created) = match session_for(&req, &shared, &msg) {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    if msg.method.is_none() || msg.id.is_none() {
        // A notification or a response: nothing will be sent back on this POST.
        methods::dispatch(&shared.state, msg, Arc::new(SessionSink(session)));
        return HttpResponse::Accepted().finish();
    }
    let (sink, first) = PostSink::new(Arc::clone(&session));
    let sink = traced(Arc::new(sink), traceparent(&req), authorization(&req));
    methods::dispatch(&shared.state, msg, sink);
    let mut response = match first.await {
        Ok(First::Answer(answer)) => HttpResponse::Ok()
            .content_type("application/json")
            .body(answer),
        Ok(First::Stream(events)) => sse(events, None),
        // No answer will come (the call was cancelled).
        Err(_) => HttpResponse::Accepted().finish(),
    };
    if created {
        if let Ok(value) = HeaderValue::from_str(&session.id) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(SESSION_HEADER), value);
        }
    }
    response
}

/// The session a POST belongs to, and whether it is new: the one `Mcp-Session-Id` names,
/// or a new one for an `initialize` request without it.
fn session_for(
    req: &HttpRequest,
    shared: &Shared,
    msg: &Incoming,
) -> Result<(Arc<Session>, bool), HttpResponse> {
    if let Some(hidden) = super::mocks::hidden_session(shared, msg) {
        return Ok((hidden, false));
    }
    if req.headers().contains_key(SESSION_HEADER) {
        return session_from_header(req, shared).map(|s| (s, false));
    }
    if msg.method.as_deref() != Some("initialize") || msg.id.is_none() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the Mcp-Session-Id header is required (send initialize first to get one)",
        ));
    }
    let requested = msg.params.get("protocolVersion").and_then(Value::as_str);
    let forced = shared.state.args.protocol_version.as_deref();
    let version = methods::negotiate(forced, requested);
    // Dates compare as text: priming events are for 2025-11-25 and later.
    let priming = version.as_str() >= LATEST_VERSION;
    Ok((shared.sessions.create(Kind::Streamable, priming), true))
}

fn session_from_header(req: &HttpRequest, shared: &Shared) -> Result<Arc<Session>, HttpResponse> {
    let Some(id) = req.headers().get(SESSION_HEADER) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the Mcp-Session-Id header is required",
        ));
    };
    let id = id.to_str().unwrap_or_default();
    shared.sessions.get(id, Kind::Streamable).ok_or_else(|| {
        refuse(
            StatusCode::NOT_FOUND,
            "session not found: initialize a new one",
        )
    })
}

pub(super) async fn get(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    if let Err(refusal) = check_origin(&req) {
        return refusal;
    }
    if let Some(refusal) = super::mocks::no_stream(&shared, "GET") {
        return refusal;
    }
    if let Some(refusal) = without_session(&req, shared.state.args.era) {
        return refusal;
    }
    if let Err(refusal) = check_version(req.headers()) {
        return refusal;
    }
    let session = match session_from_header(&req, &shared) {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let resumed = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_event_id)
        .and_then(|(stream, after)| session.resume(stream, after));
    // Without a stream to resume (none named, or one forgotten), the session's own.
    let events = resumed.unwrap_or_else(|| session.listen(None));
    sse(events, None)
}

pub(super) async fn delete(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    if let Err(refusal) = check_origin(&req) {
        return refusal;
    }
    if let Some(refusal) = super::mocks::no_stream(&shared, "DELETE") {
        return refusal;
    }
    if let Some(refusal) = without_session(&req, shared.state.args.era) {
        return refusal;
    }
    if let Err(refusal) = check_version(req.headers()) {
        return refusal;
    }
    match session_from_header(&req, &shared) {
        Ok(session) => {
            shared.sessions.remove(&session.id);
            // Tests check that a client ends its session on shutdown.
            eprintln!("manifold-fixture session {} deleted", session.id);
            HttpResponse::Ok().finish()
        }
        Err(refusal) => refusal,
    }
}
