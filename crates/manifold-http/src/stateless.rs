//! Streamable HTTP in the stateless era (2026-07-28): a POST without `Mcp-Session-Id` whose
//! `MCP-Protocol-Version` names a stateless revision carries one self-contained request. Its
//! headers must agree with its body (`MCP-Protocol-Version` with `_meta`, `Mcp-Method` with the
//! method, `Mcp-Name` with the tool or prompt name or the URI), or it is refused with 400 and
//! -32020. The answer is the response's JSON body, or an SSE stream when something precedes it
//! (progress, an acknowledged `subscriptions/listen`). Nothing is kept between requests; a
//! response stream the host closes cancels its request upstream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use manifold_protocol::version::Era;
use manifold_protocol::{sse, Envelope, Kind, MessageError, RawObject};
use manifold_telemetry::{metrics, Direction, HostTransport};
use tokio::sync::{mpsc, oneshot};

use super::peer::Peer;
use super::streams::{message, EventBody};
use super::{refuse, sse_response, trace_context, AppState};
use manifold_core::context::Origin;
use manifold_core::error::RouteError;
use manifold_core::outlet::Outlet;
use manifold_core::policy::Caller;
use manifold_core::router::{Handled, Router};
use manifold_core::session::Session;
use manifold_core::stateless::{self, Asked};

/// How often a request waiting for its answer looks whether its host is still connected.
pub(super) const PEER_CHECK: Duration = Duration::from_millis(100);

/// The headers a stateless POST must carry besides `MCP-Protocol-Version`.
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// Serves one stateless POST; `version` is its `MCP-Protocol-Version`.
pub(super) async fn post(
    req: &HttpRequest,
    shared: &AppState,
    body: &Bytes,
    decoded: Result<Envelope<'_>, MessageError>,
    caller: Arc<Caller>,
    version: &str,
) -> HttpResponse {
    metrics().host_bytes(HostTransport::Http, Direction::In, body.len());
    let env = match decoded {
        Ok(env) => env,
        // Not a message: the router says why, as it does for every transport.
        Err(_) => return answer_alone(shared, body, caller),
    };
    let asked = match agrees(req, &env, version) {
        Ok(asked) => asked,
        Err(e) => {
            let id = env
                .id
                .filter(|id| manifold_protocol::envelope::is_valid_id(id));
            return super::refusal(&e, id, Era::Stateless);
        }
    };
    // A stateless host has no initialize that waits for the upstreams' first start: its
    // requests wait (bounded) for it instead.
    let hub = shared.router.hub();
    if !hub.is_settled() {
        hub.wait_settled(shared.router.settings().startup_timeout)
            .await;
    }
    let owner = Session::next_id();
    let (outlet, first) = StatelessOutlet::new();
    let outlet = Arc::new(outlet);
    let origin = Origin {
        session: None,
        outlet: Arc::clone(&outlet) as Arc<dyn Outlet>,
        trace: trace_context(req),
        caller: Some(caller),
        owner,
        asked,
    };
    let handled = shared.router.handle_envelope(&origin, &env);
    drop(origin);
    drop(outlet);
    if !matches!(handled, Handled::Request) {
        // A notification or a response: nothing answers it. (The stateless era sends
        // neither over HTTP, but a host that does loses nothing by it.)
        return HttpResponse::Accepted().finish();
    }
    // Dropped unanswered, or the host went away while it waited: its request is cancelled.
    let mut guard = Cancel::new(&shared.router, owner);
    let peer = req.conn_data::<Peer>().cloned();
    let first = async {
        let Some(peer) = peer else {
            return first.await.ok();
        };
        tokio::select! {
            first = first => first.ok(),
            () = peer.closed(shared.peer_clock.clone()) => None,
        }
    };
    match first.await {
        Some(First::Answer(answer, status)) => {
            guard.disarm();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            HttpResponse::build(status)
                .content_type("application/json")
                .body(answer)
        }
        Some(First::Stream(events, queued)) => {
            guard.disarm();
            let cancel = Cancel::new(&shared.router, owner);
            let on_drop: Box<dyn FnOnce() + Send> = Box::new(move || drop(cancel));
            sse_response(EventBody::new(
                events,
                queued,
                shared.settings.keepalive,
                Some(on_drop),
            ))
        }
        Some(First::Unanswered) => {
            guard.disarm();
            HttpResponse::Accepted().finish()
        }
        // The host is gone (the guard cancels the request), or nothing will answer.
        None => HttpResponse::Accepted().finish(),
    }
}

/// A body that is not a message: the router's error, as a 400.
fn answer_alone(shared: &AppState, body: &Bytes, caller: Arc<Caller>) -> HttpResponse {
    let (outlet, mut first) = StatelessOutlet::new();
    let origin = Origin {
        session: None,
        outlet: Arc::new(outlet),
        trace: None,
        caller: Some(caller),
        owner: 0,
        asked: None,
    };
    let _ = shared.router.handle_line(&origin, body);
    drop(origin);
    match first.try_recv() {
        Ok(First::Answer(error, _)) => HttpResponse::BadRequest()
            .content_type("application/json")
            .body(error),
        _ => refuse(&RouteError::Body("not a JSON-RPC message".into())),
    }
}

/// The refusal of a stateless request whose `_meta` names no revision.
fn no_revision(version: &str) -> RouteError {
    let key = manifold_protocol::version::meta::PROTOCOL_VERSION;
    RouteError::InvalidParams(format!(
        "params._meta must name the protocol version ({key:?}) in revision {version}"
    ))
}

/// Whether the headers agree with the body; what the request declared in `_meta` when they
/// do (read once, here, for the router too).
fn agrees(
    req: &HttpRequest,
    env: &Envelope<'_>,
    version: &str,
) -> Result<Option<Arc<Asked>>, RouteError> {
    // A header given twice agrees with nothing.
    let header = |name: &str| {
        let mut values = req.headers().get_all(name);
        let first = values.next().and_then(|v| v.to_str().ok());
        match values.next() {
            Some(_) => Some("(given more than once)"),
            None => first,
        }
    };
    let mismatch = |what: String| Err(RouteError::HeaderMismatch(what));
    if env.kind() != Ok(Kind::Request) {
        return Ok(None);
    }
    let params = match env.params.map(RawObject::parse) {
        Some(Ok(obj)) => Some(obj),
        Some(Err(_)) => return Err(RouteError::InvalidParams("params must be an object".into())),
        None => None,
    };
    let asked = match params.as_ref().map(stateless::read_object) {
        Some(Ok(Some(asked))) if asked.version == version => Some(asked),
        Some(Ok(Some(asked))) => {
            return mismatch(format!(
                "MCP-Protocol-Version is {version:?} but the body's _meta names {:?}",
                asked.version
            ))
        }
        Some(Err(RouteError::UnsupportedVersion { requested })) => {
            return mismatch(format!(
                "MCP-Protocol-Version is {version:?} but the body's _meta names {requested:?}"
            ))
        }
        // Malformed `_meta` (capabilities missing, a log level that is none): invalid params,
        // refused with 400 like the header checks.
        Some(Err(e)) => return Err(e),
        Some(Ok(None)) | None => return Err(no_revision(version)),
    };
    let method = env.method.as_deref().unwrap_or_default();
    match header(METHOD_HEADER) {
        Some(m) if m == method => {}
        Some(m) => {
            return mismatch(format!(
                "Mcp-Method is {m:?} but the body's method is {method:?}"
            ))
        }
        None => return mismatch("the Mcp-Method header is missing".into()),
    }
    let member = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return Ok(asked.map(Arc::new)),
    };
    let value = params.as_ref().and_then(|p| p.get_str(member));
    match (header(NAME_HEADER), value) {
        (Some(h), Some(v)) if h == v => Ok(asked.map(Arc::new)),
        (Some(h), Some(v)) => mismatch(format!(
            "Mcp-Name is {h:?} but the body's {member} is {v:?}"
        )),
        (None, _) => mismatch(format!(
            "the Mcp-Name header is missing (it carries the {member})"
        )),
        // No name in the body: the router says so.
        (Some(_), None) => Ok(asked.map(Arc::new)),
    }
}

/// Cancels, when dropped armed, whatever the request standing under `owner` has in flight.
struct Cancel {
    router: std::sync::Weak<Router>,
    owner: u64,
    armed: bool,
}

impl Cancel {
    fn new(router: &Arc<Router>, owner: u64) -> Self {
        Self {
            router: Arc::downgrade(router),
            owner,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(router) = self.router.upgrade() {
            let reason = "the host closed the response stream";
            router.end_listen(self.owner, None);
            router.cancel_in_flight(self.owner, reason);
        }
    }
}

/// What the response to a stateless POST turns out to be.
enum First {
    /// The answer, with its HTTP status (see `error::Classified::answer_status`).
    Answer(Bytes, u16),
    Stream(mpsc::UnboundedReceiver<Bytes>, Arc<AtomicUsize>),
    Unanswered,
}

/// Where the answer to one stateless POST goes: the JSON body when it comes first, else an SSE
/// stream of everything before it, ending with it.
struct StatelessOutlet {
    state: Mutex<State>,
    queued: Arc<AtomicUsize>,
}

enum State {
    Waiting(oneshot::Sender<First>),
    Streaming(mpsc::UnboundedSender<Bytes>),
    Done,
}

impl StatelessOutlet {
    fn new() -> (Self, oneshot::Receiver<First>) {
        let (tx, rx) = oneshot::channel();
        let outlet = Self {
            state: Mutex::new(State::Waiting(tx)),
            queued: Arc::default(),
        };
        (outlet, rx)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn event(&self, msg: &[u8]) -> Bytes {
        let mut event = Vec::with_capacity(msg.len() + 24);
        sse::write_event(&mut event, None, Some("message"), msg);
        let event = Bytes::from(event);
        self.queued.fetch_add(event.len(), Ordering::Relaxed);
        event
    }
}

impl Outlet for StatelessOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        self.answer_error(parts, 200);
    }

    fn answer_error(&self, parts: &[&[u8]], status: u16) {
        let msg = message(parts, HostTransport::Http);
        match std::mem::replace(&mut *self.state(), State::Done) {
            State::Waiting(tx) => {
                let _ = tx.send(First::Answer(Bytes::from(msg), status));
            }
            State::Streaming(tx) => {
                let _ = tx.send(self.event(&msg));
            }
            State::Done => {}
        }
    }

    fn notify(&self, parts: &[&[u8]]) {
        let msg = message(parts, HostTransport::Http);
        let mut state = self.state();
        match &*state {
            State::Streaming(tx) => {
                let _ = tx.send(self.event(&msg));
            }
            State::Waiting(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let _ = tx.send(self.event(&msg));
                if let State::Waiting(first) = std::mem::replace(&mut *state, State::Streaming(tx))
                {
                    let _ = first.send(First::Stream(rx, Arc::clone(&self.queued)));
                }
            }
            State::Done => {}
        }
    }

    fn unanswered(&self) {
        if let State::Waiting(tx) = std::mem::replace(&mut *self.state(), State::Done) {
            let _ = tx.send(First::Unanswered);
        }
    }

    fn backlog(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}
