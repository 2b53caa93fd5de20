//! Draining before the process stops, so that a rolling update behind a load balancer loses no
//! request. When a signal arrives (`manifold serve` drives the sequence), [`Drain::begin`]
//! makes `/readyz` fail while everything is still served, so that the load balancer stops
//! sending here; after `server.drain_delay`, [`Drain::refuse_new`] makes the MCP routes refuse
//! new work ([`Gate`]); [`Drain::settled`] then waits, up to `server.drain_timeout`, until
//! nothing is in progress.
//!
//! A refused request gets 503 with `Retry-After: 1` and `Connection: close` before anything of
//! it was done, which makes it safe to send again: a load balancer sends it to another
//! instance. What belongs to work already in flight still passes: the host's answers to
//! requests Manifold sent it (sampling, elicitation, roots) and its notifications (a
//! `notifications/cancelled`), and DELETE, which ends a session.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::dev::{forward_ready, Payload, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::{ConnectionType, Method};
use actix_web::{Error, HttpMessage as _, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures::future::{ready, Either, LocalBoxFuture, Ready};
use futures::StreamExt;
use manifold_protocol::{scan, Envelope, Kind, MessageError};
use manifold_telemetry::{metrics, HostTransport};

use manifold_core::error::RouteError;

/// Where a draining server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Serving; ready when the required upstreams are up.
    Serving,
    /// `/readyz` fails; everything is still served.
    Draining,
    /// `/readyz` fails and new work is refused.
    Refusing,
}

impl Phase {
    fn from_u8(n: u8) -> Self {
        match n {
            0 => Phase::Serving,
            1 => Phase::Draining,
            _ => Phase::Refusing,
        }
    }
}

/// The drain of one process, shared by its HTTP listener, its admin address and whoever
/// drives the sequence. It only moves forward.
#[derive(Default)]
pub struct Drain {
    phase: AtomicU8,
    /// Requests to the MCP routes whose response is not made yet. Counted from before their
    /// handler runs, so that a request let in just before refusal began is waited for even
    /// while the router has not read it yet.
    exchanges: AtomicUsize,
}

/// How often [`Drain::settled`] looks whether the work in progress is done.
const POLL: Duration = Duration::from_millis(20);

impl Drain {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    fn advance(&self, to: Phase) {
        self.phase.fetch_max(to as u8, Ordering::Relaxed);
        metrics().set_draining(true);
    }

    /// `/readyz` fails from now on; everything is still served.
    pub fn begin(&self) {
        self.advance(Phase::Draining);
    }

    /// New work is refused from now on (readiness fails too).
    pub fn refuse_new(&self) {
        self.advance(Phase::Refusing);
    }

    /// What is in progress over HTTP: host requests read and not yet answered (on Streamable
    /// HTTP, stateless or not, and the HTTP+SSE transport), or requests to the MCP routes not
    /// answered yet, whichever is more. Open streams are no request of their own; requests
    /// over stdio do not count.
    pub fn pending(&self) -> usize {
        let m = metrics();
        let requests = m.host_requests_in_flight(HostTransport::Http)
            + m.host_requests_in_flight(HostTransport::Sse);
        let requests = usize::try_from(requests).unwrap_or(usize::MAX);
        requests.max(self.exchanges.load(Ordering::Relaxed))
    }

    /// Waits until nothing is in progress ([`Self::pending`]), or until `deadline`; returns
    /// what is still in progress then (0: drained).
    pub async fn settled(&self, deadline: tokio::time::Instant) -> usize {
        loop {
            let left = self.pending();
            let now = tokio::time::Instant::now();
            if left == 0 || now >= deadline {
                return left;
            }
            tokio::time::sleep(POLL.min(deadline - now)).await;
        }
    }
}

/// Counts one request to an MCP route while it is alive.
struct Admitted(Arc<Drain>);

impl Admitted {
    fn new(drain: &Arc<Drain>) -> Self {
        drain.exchanges.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(drain))
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.exchanges.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Around each MCP route (inside [`super::admission::Origins`], so that a browser may read
/// the refusal): counts requests in progress, and refuses new work once the drain says so.
#[derive(Clone)]
pub(super) struct Gate {
    drain: Arc<Drain>,
    /// `server.max_message_bytes`: the most of a body read to tell what it is.
    max: usize,
}

impl Gate {
    pub(super) fn new(drain: &Arc<Drain>, max: usize) -> Self {
        Self {
            drain: Arc::clone(drain),
            max,
        }
    }
}

impl<S> Transform<S, ServiceRequest> for Gate
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = Error> + 'static,
    S::Future: Unpin + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Transform = GateService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(GateService {
            service: Rc::new(service),
            drain: Arc::clone(&self.drain),
            max: self.max,
        }))
    }
}

/// [`Gate`] around one route's service.
pub(super) struct GateService<S> {
    service: Rc<S>,
    drain: Arc<Drain>,
    max: usize,
}

impl<S> Service<ServiceRequest> for GateService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = Error> + 'static,
    S::Future: Unpin + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    // Serving, a request costs a count and nothing else; only while refusing is a body read
    // here (in a boxed future) to tell what it carries.
    type Future =
        Either<Counted<S::Future>, LocalBoxFuture<'static, Result<ServiceResponse, Error>>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let exchange = Admitted::new(&self.drain);
        if self.drain.phase() != Phase::Refusing {
            return Either::Left(Counted {
                inner: self.service.call(req),
                _exchange: exchange,
            });
        }
        let service = Rc::clone(&self.service);
        let max = self.max;
        Either::Right(Box::pin(async move {
            let answer = while_refusing(&*service, req, max).await;
            drop(exchange);
            answer
        }))
    }
}

/// A route's answer, counted as in progress until it is made.
pub(super) struct Counted<F> {
    inner: F,
    _exchange: Admitted,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        Pin::new(&mut self.inner).poll(cx)
    }
}

/// A request to an MCP route while new work is refused: a GET (a stream, or a new HTTP+SSE
/// session) is refused, unless it resumes a stream with `Last-Event-ID` (the rest of an answer
/// in progress); a POST is refused if it carries a request (read here, then handed on
/// unchanged when it does not); anything else (DELETE) passes.
async fn while_refusing<S>(
    service: &S,
    mut req: ServiceRequest,
    max: usize,
) -> Result<ServiceResponse, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = Error>,
{
    match *req.method() {
        Method::POST => {}
        Method::GET if !req.headers().contains_key("last-event-id") => {
            return Ok(req.into_response(refusal(None)));
        }
        _ => return service.call(req).await,
    }
    let Some(body) = read(req.take_payload(), max).await else {
        // Unreadable or over the limit: it would be refused anyway.
        return Ok(req.into_response(refusal(None)));
    };
    if starts_work(&body) {
        return Ok(req.into_response(refusal(Some(&body))));
    }
    req.set_payload(Payload::from(body));
    service.call(req).await
}

/// The whole body, unless it is over `max` bytes or cannot be read.
async fn read(mut payload: Payload, max: usize) -> Option<Bytes> {
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.ok()?;
        if body.len() + chunk.len() > max {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body.freeze())
}

/// Whether a POSTed body asks for new work: it is a request, or a batch holding one. Answers
/// and notifications belong to work in flight; what is no message at all is left to the
/// handler to refuse.
fn starts_work(body: &[u8]) -> bool {
    let is_request =
        |text: &[u8]| Envelope::decode_host(text).is_ok_and(|env| env.kind() == Ok(Kind::Request));
    match Envelope::decode_host(body) {
        Ok(env) => env.kind() == Ok(Kind::Request),
        Err(MessageError::Batch) => std::str::from_utf8(body)
            .ok()
            .and_then(|text| scan::elements(text).ok())
            .is_some_and(|elements| elements.iter().any(|e| is_request(e.as_bytes()))),
        Err(_) => false,
    }
}

/// The refusal of new work, naming the request when `body` holds one whose id can be read.
fn refusal(body: Option<&[u8]>) -> HttpResponse {
    let mut r = match body {
        Some(body) => {
            let message = manifold_protocol::Envelope::decode_host(body);
            super::refuse_request(&RouteError::ShuttingDown, message.as_ref().ok())
        }
        None => super::refuse(&RouteError::ShuttingDown),
    };
    // The load balancer (or the host) opens a new connection for its retry, which no longer
    // leads here.
    r.head_mut().set_connection_type(ConnectionType::Close);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_new_work_and_answers_and_notifications_are_not() {
        for new in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}"#,
            r#"[{"jsonrpc":"2.0","method":"notifications/progress"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
        ] {
            assert!(starts_work(new.as_bytes()), "{new}");
        }
        for in_flight in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            r#"[{"jsonrpc":"2.0","id":3,"result":{}},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
            "not json",
            "",
        ] {
            assert!(!starts_work(in_flight.as_bytes()), "{in_flight}");
        }
    }

    #[test]
    fn the_gate_refuses_new_work_only_and_hands_the_rest_on_unchanged() {
        use actix_web::test::{call_service, init_service, read_body, TestRequest};
        use actix_web::{web, App};

        actix_web::rt::System::new().block_on(async {
            let drain = Drain::new();
            let gate = Gate::new(&drain, 1 << 20);
            let ok = || async { HttpResponse::Ok().finish() };
            let app = init_service(
                App::new().service(
                    web::resource("/mcp")
                        .route(
                            web::post()
                                .to(|body: Bytes| async move { HttpResponse::Ok().body(body) })
                                .wrap(gate.clone()),
                        )
                        .route(web::get().to(ok).wrap(gate.clone()))
                        .route(web::delete().to(ok).wrap(gate.clone())),
                ),
            )
            .await;
            let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
            let answer = r#"{"jsonrpc":"2.0","id":"mf-1","result":{}}"#;
            let post = |body: &'static str| {
                TestRequest::post()
                    .uri("/mcp")
                    .set_payload(body)
                    .to_request()
            };
            let get = || TestRequest::get().uri("/mcp");
            for phase in [Drain::begin, Drain::refuse_new] {
                let r = call_service(&app, post(call)).await;
                assert_eq!(r.status(), 200, "not refusing yet");
                phase(&drain);
            }
            let r = call_service(&app, post(call)).await;
            assert_eq!(r.status(), 503);
            assert!(String::from_utf8_lossy(&read_body(r).await).contains(r#""id":7"#));
            let r = call_service(&app, get().to_request()).await;
            assert_eq!(r.status(), 503);
            // Work in flight: handed on with its body as it came.
            let r = call_service(&app, post(answer)).await;
            assert_eq!(r.status(), 200);
            assert_eq!(read_body(r).await, answer.as_bytes());
            let resume = get().insert_header(("last-event-id", "1-2")).to_request();
            assert_eq!(call_service(&app, resume).await.status(), 200);
            let delete = TestRequest::delete().uri("/mcp").to_request();
            assert_eq!(call_service(&app, delete).await.status(), 200);
            assert_eq!(
                drain.exchanges.load(Ordering::Relaxed),
                0,
                "each counted while alive"
            );
        });
    }

    #[test]
    fn the_phase_only_moves_forward() {
        let drain = Drain::new();
        assert_eq!(drain.phase(), Phase::Serving);
        drain.refuse_new();
        drain.begin();
        assert_eq!(drain.phase(), Phase::Refusing);
    }

    #[test]
    fn refusals_say_when_to_retry_and_close_the_connection() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
        let r = refusal(Some(body));
        assert_eq!(r.status(), 503);
        let retry = r.headers().get(actix_web::http::header::RETRY_AFTER);
        assert_eq!(retry.and_then(|v| v.to_str().ok()), Some("1"));
        assert_eq!(r.head().connection_type(), ConnectionType::Close);
        let body = actix_web::body::MessageBody::try_into_bytes(r.into_body());
        let text = body.map_or_else(
            |_| String::new(),
            |b| String::from_utf8_lossy(&b).into_owned(),
        );
        assert!(
            text.contains(r#""id":7"#) && text.contains("shutting down"),
            "{text}"
        );
    }
}
