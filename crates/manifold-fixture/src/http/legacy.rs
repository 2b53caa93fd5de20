//! The 2024-11-05 HTTP+SSE transport, for clients that predate Streamable HTTP: GET `/sse`
//! opens a session and its one stream, whose first event (`endpoint`) names the URL to POST
//! messages to, `/messages?sessionId=ID`. A POST gets 202; every answer goes on the stream.
//! The session ends when its stream's connection does.

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use manifold_protocol::sse;
use serde_json::Value;

use super::session::{Kind, Sessions};
use super::sink::SessionSink;
use super::{authorization, check, refuse, sse, traceparent, Shared};
use crate::era::EraFlag;
use crate::exchange::traced;
use crate::methods;
use crate::rpc::{self, Incoming};

/// Ends an HTTP+SSE session when its stream's response is dropped (the client left).
pub(super) struct EndOnDrop {
    sessions: Arc<Sessions>,
    id: String,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.sessions.remove(&self.id);
    }
}

/// Not with `--era stateless`: this transport belongs to the session era.
fn gone(shared: &Shared) -> Option<HttpResponse> {
    (shared.state.args.era == EraFlag::Stateless).then(|| {
        refuse(
            StatusCode::NOT_FOUND,
            "the HTTP+SSE transport belongs to the session era; this server speaks 2026-07-28",
        )
    })
}

pub(super) async fn open(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    if let Err(refusal) = check(&req) {
        return refusal;
    }
    if let Some(refusal) = gone(&shared) {
        return refusal;
    }
    let session = shared.sessions.create(Kind::Legacy, false);
    let mut endpoint = Vec::new();
    let url = format!("/messages?sessionId={}", session.id);
    sse::write_event(&mut endpoint, None, Some("endpoint"), url.as_bytes());
    let events = session.listen(Some(Bytes::from(endpoint)));
    let guard = EndOnDrop {
        sessions: Arc::clone(&shared.sessions),
        id: session.id.clone(),
    };
    sse(events, Some(guard))
}

pub(super) async fn post(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    if let Err(refusal) = check(&req) {
        return refusal;
    }
    if let Some(refusal) = gone(&shared) {
        return refusal;
    }
    let query = web::Query::<HashMap<String, String>>::from_query(req.query_string());
    let Some(id) = query.ok().and_then(|q| q.get("sessionId").cloned()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the sessionId query parameter is required",
        );
    };
    let Some(session) = shared.sessions.get(&id, Kind::Legacy) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "session not found (its SSE stream closed): open a new one at /sse",
        );
    };
    if shared.sessions.take_garbage() {
        session.push(0, b"this is not json");
        return HttpResponse::Accepted().body("Accepted");
    }
    match Incoming::parse(&body) {
        Ok(msg) => {
            let sink = traced(
                Arc::new(SessionSink(session)),
                traceparent(&req),
                authorization(&req),
            );
            methods::dispatch(&shared.state, msg, sink);
            HttpResponse::Accepted().body("Accepted")
        }
        Err(error) => {
            // As over stdio, the error goes where answers go; the POST says it was bad.
            session.push(0, &rpc::response(&Value::Null, &Err(error)));
            refuse(
                StatusCode::BAD_REQUEST,
                "invalid message (the error was also sent on the stream)",
            )
        }
    }
}
