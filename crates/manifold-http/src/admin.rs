//! Health, readiness and metrics: on the HTTP listener, or on an address of their own
//! (`--admin`, `server.admin`), which is how a stdio Manifold is watched and how an HTTP one
//! keeps its metrics off the address hosts use.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::{header, StatusCode};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use manifold_catalog::UpstreamState;
use manifold_config::{KeyHash, ServerSettings};
use manifold_upstream::{BreakerState, BreakerView};

use super::drain::{Drain, Phase};
use super::AuthSlot;
use crate::credentials::{AdminConsents, Consents};
use manifold_core::router::Router;

/// What the admin handlers read.
pub(super) struct Admin {
    router: Arc<Router>,
    /// Once it has begun, `/readyz` fails whatever the upstreams.
    drain: Arc<Drain>,
    /// Whether `/readyz` names each upstream and its state: on the admin address only, so
    /// that the address hosts use tells nobody which upstreams exist.
    detail: bool,
    metrics: MetricsAccess,
    /// Loads the configuration again (`POST /reload`, on the admin address only).
    reload: Option<ReloadHook>,
}

/// What `POST /reload` calls: the report of what changed, as JSON text, or why the new
/// configuration was refused.
pub type ReloadHook =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// Who may read `/metrics` where it is served: its labels name teams, tools and upstreams.
#[derive(Clone)]
pub(super) enum MetricsAccess {
    Open,
    /// Only with `Authorization: Bearer <token>` (`server.metrics_token`, kept hashed).
    Token(KeyHash),
    /// Not served here; the text says where it is.
    Elsewhere(&'static str),
    /// On the host listener with neither an admin address nor a token: open while hosts
    /// need no credentials (a reload may change that).
    UnlessAuthenticated(AuthSlot),
}

/// Why `/metrics` is not on the host listener while hosts authenticate.
const AUTHENTICATED_ELSEWHERE: &str = "with authentication configured, /metrics is served on \
    the admin address (server.admin) or with server.metrics_token\n";

impl MetricsAccess {
    /// On the host listener: never open while hosts need credentials.
    pub(super) fn on_listener(settings: &ServerSettings, auth: &AuthSlot) -> Self {
        if settings.admin.is_some() {
            return Self::Elsewhere("/metrics is served on the admin address (server.admin)\n");
        }
        match settings.metrics_token {
            Some(token) => Self::Token(token),
            None => Self::UnlessAuthenticated(auth.clone()),
        }
    }

    /// On the admin address.
    fn on_admin(settings: &ServerSettings) -> Self {
        settings.metrics_token.map_or(Self::Open, Self::Token)
    }
}

/// Adds `/healthz`, `/readyz` and `/metrics`; the app must hold an `Admin`.
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(scrape));
}

pub(super) fn data(
    router: Arc<Router>,
    detail: bool,
    metrics: MetricsAccess,
    drain: &Arc<Drain>,
) -> web::Data<Admin> {
    web::Data::new(Admin {
        router,
        drain: Arc::clone(drain),
        detail,
        metrics,
        reload: None,
    })
}

/// Serves the admin endpoints alone on `addr` (one worker: scrapes and probes are rare);
/// `/readyz` fails once `drain` has begun; `POST /reload` calls `reload`. With `consents`,
/// also the connections an operator manages (see [`crate::credentials`]); and the web
/// console under `/console/` (see [`crate::console`]), whose operators may sign in at `jwt`'s
/// issuer (`[server.console]`) and whose catalog and configuration pages read `operations`.
pub fn serve(
    router: Arc<Router>,
    addr: SocketAddr,
    drain: &Arc<Drain>,
    reload: Option<ReloadHook>,
    consents: Option<Arc<dyn Consents>>,
    jwt: Option<manifold_config::JwtConfig>,
    operations: Option<Arc<dyn crate::console::Operations>>,
) -> io::Result<(actix_web::dev::Server, SocketAddr)> {
    let metrics = MetricsAccess::on_admin(router.settings());
    let token = router.settings().metrics_token;
    let console = crate::console::Console::data(
        Arc::clone(&router),
        reload.clone(),
        consents.clone(),
        jwt.as_ref(),
        operations,
    );
    let connections = consents.map(|c| AdminConsents::new(c, token));
    let admin = web::Data::new(Admin {
        router,
        drain: Arc::clone(drain),
        detail: true,
        metrics,
        reload,
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(admin.clone())
            .app_data(console.clone())
            .configure(routes)
            .configure(crate::console::routes)
            .route("/reload", web::post().to(reload_config))
            .configure(|cfg| {
                if let Some(connections) = &connections {
                    cfg.app_data(connections.clone());
                    crate::credentials::admin_routes(cfg);
                }
            })
    })
    .workers(1)
    .keep_alive(Duration::from_secs(75))
    .disable_signals()
    .shutdown_timeout(1)
    .bind(addr)?;
    let bound = server.addrs().first().copied().unwrap_or(addr);
    Ok((server.run(), bound))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// 200 when every upstream marked `required` is up with its circuit breaker closed, else
/// 503; 503 in any case once the process drains (`"draining": true`). The body counts
/// upstreams; on the admin address it also lists each one with its state and its breaker.
async fn readyz(admin: web::Data<Admin>) -> HttpResponse {
    let catalog = admin.router.hub().catalog();
    let handles = admin.router.upstreams();
    let (mut required_up, mut required_total, mut up) = (0, 0, 0);
    let (mut broken, mut required_broken) = (0, 0);
    let mut upstreams = serde_json::Map::new();
    for (i, def) in catalog.defs().iter().enumerate() {
        if def.retired {
            continue;
        }
        let state = catalog.state(i);
        let required = def.required;
        let is_up = *state == UpstreamState::Up;
        let breaker = handles.get(i).map(|h| h.breaker());
        // Open or half-open: calls to it are refused.
        let refusing = breaker
            .as_ref()
            .is_some_and(|b| b.state != BreakerState::Closed);
        up += usize::from(is_up);
        required_total += usize::from(required);
        required_up += usize::from(required && is_up);
        broken += usize::from(refusing);
        required_broken += usize::from(required && refusing);
        if admin.detail {
            let state = match state {
                UpstreamState::Up => "up".to_owned(),
                UpstreamState::Starting => "starting".to_owned(),
                UpstreamState::Down { reason } => format!("down: {reason}"),
            };
            let mut entry = serde_json::json!({ "state": state, "required": required });
            if let Some(b) = breaker {
                entry["breaker"] = breaker_detail(&b);
            }
            upstreams.insert(def.key.clone(), entry);
        }
    }
    let draining = admin.drain.phase() != Phase::Serving;
    let ready = required_up == required_total && required_broken == 0 && !draining;
    let mut body = serde_json::json!({
        "ready": ready,
        "draining": draining,
        "up": up,
        "total": catalog.defs().iter().filter(|d| !d.retired).count(),
        "required": { "up": required_up, "total": required_total },
        // Open or half-open breakers: of every upstream, of the required ones.
        "breakers_open": { "all": broken, "required": required_broken },
    });
    if admin.detail {
        body["upstreams"] = serde_json::Value::Object(upstreams);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    HttpResponse::build(status).json(body)
}

/// A breaker as `/readyz` on the admin address shows it.
fn breaker_detail(b: &BreakerView) -> serde_json::Value {
    let ms = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut detail = serde_json::json!({ "state": b.state.label(), "failures": b.failures });
    if let Some(reason) = &b.reason {
        detail["reason"] = reason.as_str().into();
    }
    if let Some(open) = ms(b.open_for) {
        detail["open_ms"] = open.into();
    }
    if let Some(retry) = ms(b.retry_in) {
        detail["retry_in_ms"] = retry.into();
    }
    detail
}

/// `POST /reload`: 200 with the report of what changed, or 422 with why the configuration
/// was refused (the running one stays). Behind `server.metrics_token` when it is set.
async fn reload_config(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    if let MetricsAccess::Token(token) = &admin.metrics {
        if let Some(refusal) = token_refusal(&req, token, "/reload") {
            return refusal;
        }
    }
    let Some(hook) = &admin.reload else {
        return HttpResponse::NotFound()
            .content_type("text/plain")
            .body("reloading is not served here\n");
    };
    match hook().await {
        Ok(report) => HttpResponse::Ok()
            .content_type("application/json")
            .body(report),
        Err(why) => HttpResponse::UnprocessableEntity()
            .json(serde_json::json!({ "reloaded": false, "error": why })),
    }
}

/// The 401 for a request without `server.metrics_token` as its bearer token.
pub(crate) fn token_refusal(
    req: &HttpRequest,
    token: &KeyHash,
    path: &str,
) -> Option<HttpResponse> {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| KeyHash::of(t.trim()));
    (presented.as_ref() != Some(token)).then(|| {
        HttpResponse::Unauthorized()
            .insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\""))
            .content_type("text/plain")
            .body(format!(
                "{path} needs the bearer token of server.metrics_token\n"
            ))
    })
}

async fn scrape(req: HttpRequest, admin: web::Data<Admin>) -> HttpResponse {
    match &admin.metrics {
        MetricsAccess::Open => {}
        MetricsAccess::UnlessAuthenticated(auth) => {
            if auth.get().is_some() {
                return HttpResponse::NotFound()
                    .content_type("text/plain")
                    .body(AUTHENTICATED_ELSEWHERE);
            }
        }
        MetricsAccess::Token(token) => {
            if let Some(refusal) = token_refusal(&req, token, "/metrics") {
                return refusal;
            }
        }
        MetricsAccess::Elsewhere(why) => {
            return HttpResponse::NotFound()
                .content_type("text/plain")
                .body(*why);
        }
    }
    let text = manifold_core::scrape::render(&admin.router);
    HttpResponse::Ok()
        .content_type(manifold_telemetry::exposition::CONTENT_TYPE)
        .body(text)
}
