//! Serving hosts over HTTP with actix-web: Streamable HTTP at `/mcp` (2025-03-26 and later),
//! the 2024-11-05 HTTP+SSE transport at `/sse` (and the `/messages` endpoint it announces) for
//! older clients, and `/healthz`, `/readyz` and `/metrics` (on the admin address instead, when
//! one is configured).
//!
//! Everything transport-specific about a request stays here: headers, status codes, origins,
//! session tokens, SSE. The router gets an [`Origin`] like any other transport's.
//!
//! Long: the routes, the shared checks every handler meets (caller, origin, version, body
//! size) and the one refusal writer sit together; each transport's handler is its own file.

// Checks return the refusal as the response itself: it is built once per refused request,
// never on the forwarding path, so its size does not matter.
#![allow(clippy::result_large_err)]

mod admin;
mod admission;
mod console;
pub mod credentials;
pub mod drain;
mod legacy;
mod markup;
mod peer;
mod signins;
mod stateless;
mod streamable;
pub mod streams;
pub mod tls;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::Method;
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;
use futures::StreamExt;
use manifold_config::{HttpSettings, SessionStore as StoreConfig};
use manifold_protocol::version::Era;
use manifold_protocol::{version, write};

use manifold_policy::{AuthError, Authenticator, Principal};

use manifold_core::error::RouteError;
use manifold_core::policy::Caller;
use manifold_core::replicas::{SessionStore, Stores, Unshared};
use manifold_core::router::Router;
use manifold_core::session::Transport;

/// `Mcp-Session-Id`.
const SESSION_HEADER: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// What every handler shares.
struct AppState {
    router: Arc<Router>,
    settings: HttpSettings,
    /// How hosts authenticate now (a reload may change it).
    auth: AuthSlot,
    /// The streams of each Streamable HTTP session, kept here rather than on the session so
    /// that the session core knows no transport's state.
    streams: Arc<streams::Registry>,
    /// The clock stateless requests waiting for their answer look for their host on.
    peer_clock: tokio::sync::watch::Receiver<()>,
    /// The store of Streamable HTTP sessions: shared with other replicas
    /// (`[sessions] store = "redis"`) or not ([`Unshared`]).
    store: Arc<dyn SessionStore>,
}

/// Where the protected resource metadata (RFC 9728) is served.
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Authentication of HTTP hosts.
pub struct HttpAuth {
    pub authenticator: Arc<Authenticator>,
    /// This server's resource URI (`auth.resource`); without it, made from the request's host.
    pub resource: Option<String>,
}

/// How hosts authenticate, swapped whole by a configuration reload. Empty while hosts need
/// no credentials (everyone is anonymous).
#[derive(Clone, Default)]
pub struct AuthSlot(Arc<arc_swap::ArcSwapOption<HttpAuth>>);

impl AuthSlot {
    pub fn new(auth: HttpAuth) -> Self {
        let slot = Self::default();
        slot.set(auth);
        slot
    }

    /// From now on hosts authenticate with `auth` (or not at all, when it requires nothing).
    pub fn set(&self, auth: HttpAuth) {
        let auth = auth.authenticator.required().then(|| Arc::new(auth));
        self.0.store(auth);
    }

    /// How hosts authenticate now; `None`: they do not.
    pub(crate) fn get(&self) -> Option<Arc<HttpAuth>> {
        self.0.load_full()
    }
}

/// Binds `addr` and returns the server, ready to be awaited (it runs on the current actix
/// system), and the address it bound (the port, when 0 was asked for). With `tls` (made by
/// [`tls::server_config`]) it serves HTTPS, HTTP/2 or HTTP/1.1 as the host's ALPN offer
/// says; without it, plain HTTP/1.1. `drain` says when readiness fails and new work is
/// refused (see [`drain`]). With `credentials`, it also serves the pages of upstream
/// consents (see [`credentials`]).
#[allow(clippy::too_many_arguments)]
pub fn serve(
    router: Arc<Router>,
    addr: SocketAddr,
    auth: AuthSlot,
    tls: Option<tls::ServerConfig>,
    drain: &Arc<drain::Drain>,
    sessions: &StoreConfig,
    stores: &dyn Stores,
    credentials: Option<Credentials>,
) -> io::Result<(actix_web::dev::Server, SocketAddr)> {
    let settings = router.settings().http.clone();
    let pages =
        credentials.map(|c| credentials::CredentialPages::new(c.consents, auth.clone(), c.login));
    let workers = settings.workers;
    let (keep_alive, client_timeout) = (settings.keep_alive, settings.client_timeout);
    let metrics = admin::MetricsAccess::on_listener(router.settings(), &auth);
    let origins = admission::Origins::new(&settings.allowed_origins);
    let gate = drain::Gate::new(drain, router.settings().max_message_bytes);
    let streams = Arc::new(streams::Registry::default());
    let store: Arc<dyn SessionStore> = match sessions {
        StoreConfig::Memory => Arc::new(Unshared),
        StoreConfig::Redis(config) => {
            let locals = streams::Locals::new(&router, Arc::clone(&streams));
            stores
                .sessions(config, &router, Arc::new(locals))
                .map_err(io::Error::other)?
        }
    };
    let shared = web::Data::new(AppState {
        router: Arc::clone(&router),
        settings,
        auth,
        streams: Arc::clone(&streams),
        peer_clock: peer::clock(router.runtime(), stateless::PEER_CHECK),
        store: Arc::clone(&store),
    });
    let store_for_sweeper = store;
    let admin = admin::data(Arc::clone(&router), false, metrics, drain);
    let server = HttpServer::new(move || {
        // Every method an MCP endpoint serves is wrapped, preflight included; what no route
        // serves gets its 405 as it is, origin or not. Inside the origin check, the drain's
        // gate (so that a browser may read its refusal).
        let options = || {
            web::method(Method::OPTIONS)
                .to(preflight)
                .wrap(origins.clone())
        };
        let mcp = |route: actix_web::Route| route.wrap(gate.clone()).wrap(origins.clone());
        App::new()
            .app_data(shared.clone())
            .app_data(admin.clone())
            .service(
                web::resource("/mcp")
                    .route(mcp(web::post().to(streamable::post)))
                    .route(mcp(web::get().to(streamable::get)))
                    .route(mcp(web::delete().to(streamable::delete)))
                    .route(options())
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/sse")
                    .route(mcp(web::get().to(legacy::open)))
                    .route(options())
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/messages")
                    .route(mcp(web::post().to(legacy::post)))
                    .route(options())
                    .default_service(web::to(method_not_allowed)),
            )
            .route(METADATA_PATH, web::get().to(resource_metadata))
            .route(
                &format!("{METADATA_PATH}/mcp"),
                web::get().to(resource_metadata),
            )
            .configure(admin::routes)
            .configure(|cfg| {
                if let Some(pages) = &pages {
                    cfg.app_data(pages.clone());
                    credentials::host_routes(cfg);
                }
            })
    })
    .workers(workers)
    .on_connect(peer::on_connect)
    // Hosts pause between calls; a connection they keep should not be closed under them, but
    // one left idle is not kept forever. A request's head must arrive within the client
    // timeout (408 otherwise), and so must its body (`read_body`).
    .keep_alive(keep_alive)
    .client_request_timeout(client_timeout)
    .disable_signals()
    .shutdown_timeout(1);
    let server = match tls {
        Some(config) => server.bind_rustls_0_23(addr, config)?,
        None => server.bind(addr)?,
    };
    let bound = server.addrs().first().copied().unwrap_or(addr);
    spawn_sweeper(&router, streams, store_for_sweeper);
    Ok((server.run(), bound))
}

pub use admin::{serve as serve_admin, ReloadHook};
pub use console::{Operations, ReloadRecord, Running};

/// What the pages of upstream consents are served with.
pub struct Credentials {
    /// The credential broker.
    pub consents: Arc<dyn credentials::Consents>,
    /// The OpenID Connect login of browser users, when `login_client_id` is configured.
    pub login: Option<credentials::LoginSettings>,
}

/// The W3C trace context an HTTP request carries in its headers, when traces are exported.
fn trace_context(req: &HttpRequest) -> Option<Arc<manifold_telemetry::trace::Carrier>> {
    if !manifold_telemetry::trace::active() {
        return None;
    }
    let mut carrier = manifold_telemetry::trace::Carrier::default();
    for key in manifold_telemetry::trace::Carrier::KEYS {
        if let Some(value) = req.headers().get(key).and_then(|v| v.to_str().ok()) {
            carrier.set(key, value.to_owned());
        }
    }
    (!carrier.is_empty()).then(|| Arc::new(carrier))
}

/// Who sent an HTTP request, given what its credentials proved (`verdict`, from the
/// authenticator hosts must satisfy): the team its API key or JWT selects, or the 401 to
/// answer (with `WWW-Authenticate` naming the protected resource metadata, so that a host can
/// find the authorization server).
fn caller_from(
    req: &HttpRequest,
    shared: &AppState,
    verdict: Result<Principal, AuthError>,
) -> Result<Arc<Caller>, HttpResponse> {
    let Some(auth) = shared.auth.get() else {
        return Ok(Caller::anonymous());
    };
    let principal = verdict.and_then(|p| {
        let team = shared.router.teams().get(&p.team).cloned();
        team.map(|t| (t, p.id))
            .ok_or_else(|| AuthError::Invalid(format!("team {:?} is not configured", p.team)))
    });
    match principal {
        // A JWT's caller keeps it, for an upstream whose `auth` exchanges it (it is never
        // forwarded as it is); only a Manifold with upstream credentials copies it.
        Ok((team, id)) if id.starts_with("jwt:") && shared.router.broker().is_some() => {
            match bearer_of(req) {
                Some(token) => Ok(Caller::with_token(team, id, token.into())),
                None => Ok(Caller::of_team(team, id)),
            }
        }
        Ok((team, id)) => Ok(Caller::of_team(team, id)),
        Err(e) => {
            tracing::info!(path = req.path(), "authentication failed: {e}");
            let metadata = format!("{}{METADATA_PATH}", base_url(req));
            let mut r = refuse(&RouteError::Unauthorized(e.to_string()));
            let challenge = auth.authenticator.challenge(&metadata, &e);
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, value);
            }
            Err(r)
        }
    }
}

/// The bearer token of a request's Authorization header.
fn bearer_of(req: &HttpRequest) -> Option<&str> {
    let value = req
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// `scheme://host` of a request, as the host addressed it.
fn base_url(req: &HttpRequest) -> String {
    let info = req.connection_info();
    format!("{}://{}", info.scheme(), info.host())
}

/// The OAuth 2.0 protected resource metadata (RFC 9728).
async fn resource_metadata(req: HttpRequest, shared: web::Data<AppState>) -> HttpResponse {
    let Some(auth) = shared.auth.get() else {
        return refuse(&RouteError::NotFound(
            "no authentication is configured".into(),
        ));
    };
    let resource = auth
        .resource
        .clone()
        .unwrap_or_else(|| format!("{}/mcp", base_url(&req)));
    HttpResponse::Ok()
        .content_type("application/json")
        .body(auth.authenticator.metadata(&resource))
}

/// Ends HTTP sessions that went idle: no request for `session_idle_timeout`, no request in
/// progress, and no stream being read. Also forgets the streams of sessions that are gone.
fn spawn_sweeper(
    router: &Arc<Router>,
    streams: Arc<streams::Registry>,
    store: Arc<dyn SessionStore>,
) {
    let idle = router.settings().http.session_idle_timeout;
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let weak = Arc::downgrade(router);
    router.runtime().spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(router) = weak.upgrade() else { return };
            for session in router.sessions().all() {
                if session.transport() != Transport::StreamableHttp || session.idle_for() < idle {
                    continue;
                }
                let busy = streams.get(session.id()).is_some_and(|s| {
                    s.listening() || s.in_progress.load(std::sync::atomic::Ordering::Relaxed) > 0
                });
                if busy {
                    continue;
                }
                let why = format!("idle for more than {}s", idle.as_secs_f64());
                if let (true, Some(token)) = (store.is_shared(), session.token()) {
                    // A shared session idle here may be busy elsewhere: this copy goes, but
                    // its home keeps it while the store does.
                    if !session.is_away() && store.exists(token).await {
                        continue;
                    }
                }
                router.end_session(session.id(), &why);
            }
            streams.prune();
        }
    });
}

async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    let allow = match req.path() {
        "/mcp" => "GET, POST, DELETE",
        "/sse" => "GET",
        _ => "POST",
    };
    let mut r = refuse(&RouteError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_owned(),
    });
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// CORS preflight for the browser origins that are allowed (the route's [`admission::Origins`]
/// refuses the others and adds the headers every answer carries).
async fn preflight() -> HttpResponse {
    let mut r = HttpResponse::NoContent().finish();
    let h = r.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "content-type, accept, authorization, x-api-key, mcp-session-id, mcp-protocol-version, last-event-id",
        ),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

/// Adds the CORS headers a browser needs to read a response to a request from `origin` (it
/// was already checked).
fn cors_headers(h: &mut HeaderMap, origin: HeaderValue) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("mcp-session-id, mcp-protocol-version, www-authenticate"),
    );
    h.insert(header::VARY, HeaderValue::from_static("origin"));
}

/// A browser may only reach Manifold from a loopback page or an allowed origin: this stops a
/// web page the user visits from driving their local upstreams (DNS rebinding). Requests
/// without `Origin` (not from a browser) pass. `allowed`: `server.allowed_origins`.
fn check_origin(req: &HttpRequest, allowed: &[String]) -> Result<(), HttpResponse> {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let text = origin.to_str().unwrap_or_default();
    let admitted = is_loopback_origin(text)
        || allowed
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(text));
    if admitted {
        Ok(())
    } else {
        tracing::warn!(
            origin = text,
            "request from an origin that is not allowed refused"
        );
        Err(refuse(&RouteError::Origin(text.to_owned())))
    }
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `MCP-Protocol-Version`, when present, must be a revision Manifold speaks; without it the
/// host is taken to speak 2025-03-26 (the spec's rule for older clients).
fn check_version(headers: &HeaderMap) -> Result<&'static str, HttpResponse> {
    version_of(headers).map_err(|requested| refuse(&RouteError::UnsupportedVersion { requested }))
}

/// The revision `MCP-Protocol-Version` names (2025-03-26 without it), or the text of one
/// Manifold does not speak.
fn version_of(headers: &HeaderMap) -> Result<&'static str, String> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok("2025-03-26");
    };
    let text = value.to_str().unwrap_or_default();
    version::known(text).ok_or_else(|| text.to_owned())
}

/// [`refuse`], naming the request the refusal answers when it is one whose id is usable.
fn refuse_request(
    e: &RouteError,
    message: Option<&manifold_protocol::Envelope<'_>>,
) -> HttpResponse {
    let id = message
        .and_then(|env| env.id)
        .filter(|id| manifold_protocol::envelope::is_valid_id(id));
    refusal(e, id, Era::Session)
}

/// What a session's streams may hold unread before the session is ended: twice
/// `session_queue_bytes`, past which new requests are already refused (see [`backlogged`]).
fn hard_limit(shared: &AppState) -> usize {
    shared
        .router
        .settings()
        .session_queue_bytes
        .saturating_mul(2)
}

/// A host that has left more than `session_queue_bytes` of its session's output unread gets
/// 429 for new requests until it reads: it slows down instead of losing its session. Only if
/// what it already asked for, or notifications, pass twice that is the session ended.
fn backlogged(
    shared: &AppState,
    outlet: &dyn manifold_core::outlet::Outlet,
) -> Option<HttpResponse> {
    let limit = shared.router.settings().session_queue_bytes;
    let waiting = outlet.backlog();
    if waiting <= limit {
        return None;
    }
    let r = refuse(&RouteError::Busy(format!(
        "this session's host has {waiting} bytes of output it has not read \
         (server.session_queue_bytes is {limit}); read the session's streams, then retry"
    )));
    Some(r)
}

/// Reads a request body of at most `shared`'s `max_message_bytes`, within
/// `server.client_timeout`: a host that trickles its body gets 408 and its connection closed
/// (actix-web bounds the head the same way).
async fn read_body(payload: web::Payload, shared: &AppState) -> Result<Bytes, HttpResponse> {
    let max = shared.router.settings().max_message_bytes;
    let within = shared.settings.client_timeout;
    match tokio::time::timeout(within, read_body_of(payload, max)).await {
        Ok(read) => read,
        Err(_) => {
            let mut r = refuse(&RouteError::SlowBody(within));
            r.head_mut()
                .set_connection_type(actix_web::http::ConnectionType::Close);
            Err(r)
        }
    }
}

async fn read_body_of(mut payload: web::Payload, max: usize) -> Result<Bytes, HttpResponse> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| refuse(&RouteError::Body(format!("reading the body failed: {e}"))))?;
        if body.len() + chunk.len() > max {
            return Err(refuse(&RouteError::BodyTooLarge(max)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The HTTP answer refusing a request: the status and `Retry-After` the error says, and a
/// body that is its JSON-RPC error without id, as the spec suggests.
fn refuse(e: &RouteError) -> HttpResponse {
    refusal(e, None, Era::Session)
}

/// [`refuse`] with the id of the request refused, if known, in the era it was spoken in.
fn refusal(e: &RouteError, id: Option<&str>, era: Era) -> HttpResponse {
    let classified = e.classify(era);
    let mut body = Vec::new();
    write::error_response(&mut body, id, &e.error_object(era));
    if body.last() == Some(&b'\n') {
        body.pop();
    }
    let status = StatusCode::from_u16(classified.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = HttpResponse::build(status);
    if let Some(secs) = classified.retry_after_secs {
        r.insert_header((header::RETRY_AFTER, secs.to_string()));
    }
    r.content_type("application/json").body(body)
}

/// An SSE response around `body`.
fn sse_response(body: streams::EventBody) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body)
}

/// A fresh session token: 128 bits from the operating system's cryptographic random source,
/// as hex. `Err` if that source fails (a token from anything weaker would be guessable).
fn new_token() -> Result<String, HttpResponse> {
    let Some(bytes) = random_bytes::<16>() else {
        return Err(refuse(&RouteError::Internal(
            "no random source for a session id".into(),
        )));
    };
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `N` bytes from the operating system's cryptographic random source; `None` (logged) if it
/// fails.
pub(crate) fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    let mut filled = 0;
    while filled < N {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                tracing::error!("no random source: {e}");
                return None;
            }
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins() {
        for ok in [
            "http://localhost",
            "http://localhost:6274",
            "https://127.0.0.1:8080",
            "http://[::1]:3000",
            "http://LOCALHOST:1",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example:80",
            "null",
            "file://",
            "http://10.0.0.1",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_are_128_bit_hex_and_differ() {
        let (Ok(a), Ok(b)) = (new_token(), new_token()) else {
            panic!("no random source");
        };
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
