//! The 2024-11-05 HTTP+SSE transport, for hosts that predate Streamable HTTP: GET `/sse`
//! opens the session and its one stream, whose first event names the URL to POST messages
//! to (`/messages?sessionId=...`); every answer arrives on the stream. The session ends when
//! the stream's connection does.

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use manifold_protocol::sse;
use manifold_telemetry::{metrics, Direction, HostTransport};

use super::admission::Unversioned;
use super::streams::{EventBody, LegacyOutlet};
use super::{
    backlogged, hard_limit, new_token, read_body, refuse, sse_response, trace_context, AppState,
};
use manifold_core::context::Origin;
use manifold_core::error::RouteError;
use manifold_core::router::Handled;
use manifold_core::session::{Session, Transport};

pub(super) async fn open(admitted: Unversioned, shared: web::Data<AppState>) -> HttpResponse {
    let token = match new_token() {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let sessions = shared.router.sessions();
    let id = Session::next_id();
    let (outlet, rx, queued) = LegacyOutlet::new(id, sessions.ending(), hard_limit(&shared));
    let outlet = Arc::new(outlet);
    let session = Session::with_id(id, Transport::Sse, Arc::clone(&outlet) as _);
    session.set_caller(admitted.caller);
    if let Err(full) = sessions.add(Arc::clone(&session), Some(&token)) {
        return refuse(&RouteError::Full(format!(
            "{full} (server.max_sessions); try again later"
        )));
    }
    tracing::info!(session = id, "SSE session opened");
    let mut endpoint = Vec::new();
    let url = format!("/messages?sessionId={token}");
    sse::write_event(&mut endpoint, None, Some("endpoint"), url.as_bytes());
    outlet.raw(Bytes::from(endpoint));
    let ending = sessions.ending();
    let body = EventBody::new(
        rx,
        queued,
        shared.settings.keepalive,
        Some(Box::new(move || {
            ending.end(id, "the host closed its SSE stream".into());
        })),
    );
    sse_response(body)
}

pub(super) async fn post(
    req: HttpRequest,
    admitted: Unversioned,
    payload: web::Payload,
    shared: web::Data<AppState>,
) -> HttpResponse {
    let token =
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .ok()
            .and_then(|q| q.get("sessionId").or_else(|| q.get("session_id")).cloned());
    let Some(token) = token else {
        return refuse(&RouteError::BadRequest(
            "the sessionId query parameter is required".into(),
        ));
    };
    let session = shared
        .router
        .sessions()
        .by_token(&token)
        .filter(|s| s.transport() == Transport::Sse && s.caller().same_as(&admitted.caller));
    let Some(session) = session else {
        return refuse(&RouteError::NotFound(
            "session not found (its SSE stream closed): open a new one at /sse".into(),
        ));
    };
    let body = match read_body(payload, &shared).await {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    if let Some(refusal) = backlogged(&shared, &**session.stream()) {
        return refusal;
    }
    session.touch();
    metrics().host_bytes(HostTransport::Sse, Direction::In, body.len());
    let origin = Origin {
        outlet: Arc::clone(session.stream()),
        session: Some(session),
        trace: trace_context(&req),
        caller: None,
        owner: 0,
        asked: None,
    };
    // Answers, including errors, go on the stream; the POST only says it was taken.
    match shared.router.handle_line(&origin, &body) {
        Handled::Rejected | Handled::Empty => refuse(&RouteError::BadRequest(
            "invalid message (the error was also sent on the stream)".into(),
        )),
        _ => HttpResponse::Accepted().body("Accepted"),
    }
}
