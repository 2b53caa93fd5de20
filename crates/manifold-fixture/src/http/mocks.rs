//! Two ways the official conformance suite's client-mode mock servers behave, each behind a
//! flag of its own, so that a client's handling of them can be tested against this fixture:
//!
//! - `--no-get-stream`: a session-era server that keeps no session and has no GET stream (the
//!   suite's `tools_call` and `json-schema-2020-12-preservation` mocks). It never issues
//!   `Mcp-Session-Id`; every POST is served without one (all of them share one hidden
//!   session, which no client can name); GET and DELETE are answered 404. Each `initialize`
//!   and each refused GET is written to stderr, so that tests can count them.
//! - `--refuse-first-version`: the first POST carrying a request, whatever it asks, is refused
//!   with 400 and the JSON-RPC error -32022 (unsupported protocol version), whose
//!   `data.supported` lists the revisions the fixture speaks, so the one the client asked for
//!   too (the suite's `request-metadata` mock). The request that follows is written to stderr
//!   with the revision its `MCP-Protocol-Version` header and its `_meta` named, so that tests
//!   can see whether the client retried at a revision both speak.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use serde_json::Value;

use super::session::{Kind, Session};
use super::Shared;
use crate::era;
use crate::rpc::{self, Incoming};

/// With `--no-get-stream`: the one session every POST is served in, made on first use.
static HIDDEN_SESSION: OnceLock<Arc<Session>> = OnceLock::new();

/// With `--refuse-first-version`: no request seen yet, the first refused and the next awaited,
/// or the next seen.
const NONE_SEEN: u8 = 0;
const REFUSED: u8 = 1;
const RETRY_SEEN: u8 = 2;
static VERSION_REFUSAL: AtomicU8 = AtomicU8::new(NONE_SEEN);

/// `--no-get-stream`: the session a POST is served in, whatever `Mcp-Session-Id` it carries
/// (none is ever issued). `None` without the flag.
pub(super) fn hidden_session(shared: &Shared, msg: &Incoming) -> Option<Arc<Session>> {
    if !shared.state.args.no_get_stream {
        return None;
    }
    if msg.method.as_deref() == Some("initialize") {
        eprintln!("manifold-fixture: initialize served without a session");
    }
    let session = HIDDEN_SESSION.get_or_init(|| shared.sessions.create(Kind::Streamable, false));
    Some(Arc::clone(session))
}

/// `--no-get-stream`: the 404 a GET or DELETE gets (there is neither a stream nor a session to
/// end). `None` without the flag.
pub(super) fn no_stream(shared: &Shared, method: &str) -> Option<HttpResponse> {
    if !shared.state.args.no_get_stream {
        return None;
    }
    eprintln!("manifold-fixture: {method} answered 404 (no stream, no session)");
    Some(
        HttpResponse::NotFound()
            .content_type("text/plain")
            .body(format!("Cannot {method} /mcp\n")),
    )
}

/// `--refuse-first-version`: the refusal of the first request, and the note of the one after
/// it (see the module doc). `None`: serve the POST as usual.
pub(super) fn version_refusal(
    shared: &Shared,
    req: &HttpRequest,
    body: &[u8],
) -> Option<HttpResponse> {
    if !shared.state.args.refuse_first_version {
        return None;
    }
    let msg: Value = serde_json::from_slice(body).ok()?;
    let (Some(method), Some(id)) = (msg.get("method").and_then(Value::as_str), msg.get("id"))
    else {
        return None;
    };
    let header = req
        .headers()
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    let meta = msg.get("params").and_then(era::revision_of);
    let seen = VERSION_REFUSAL.load(Ordering::Relaxed);
    if seen == REFUSED && advance(REFUSED, RETRY_SEEN) {
        eprintln!(
            "manifold-fixture: after the version refusal: {method} with MCP-Protocol-Version {} and _meta {}",
            header.unwrap_or("(none)"),
            meta.unwrap_or("(none)")
        );
    }
    if seen != NONE_SEEN || !advance(NONE_SEEN, REFUSED) {
        return None;
    }
    let requested = header.or(meta).unwrap_or_default();
    eprintln!("manifold-fixture: {method} refused: unsupported protocol version {requested:?}");
    // The refusal answers this request: it carries the request's id.
    let answer = rpc::response(id, &Err(era::unsupported_version(&shared.state, requested)));
    Some(
        HttpResponse::build(StatusCode::BAD_REQUEST)
            .content_type("application/json")
            .body(answer),
    )
}

/// Moves the refusal's state from `from` to `to`; false if another POST did first.
fn advance(from: u8, to: u8) -> bool {
    VERSION_REFUSAL
        .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}
