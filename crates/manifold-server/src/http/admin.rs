//! Health, readiness and metrics: on the HTTP listener, or on an address of their own
//! (`--admin`, `server.admin`), which is how a stdio Manifold is watched and how an HTTP one
//! keeps its metrics off the address hosts use.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpResponse, HttpServer};
use manifold_catalog::UpstreamState;

use crate::router::Router;

/// What the admin handlers read.
pub(super) struct Admin {
    router: Arc<Router>,
    /// Which upstreams `/readyz` waits for (by index).
    required: Vec<bool>,
}

/// Adds `/healthz`, `/readyz` and, when `metrics`, `/metrics`; the app must hold an `Admin`.
pub(super) fn routes(cfg: &mut web::ServiceConfig, metrics: bool) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
    if metrics {
        cfg.route("/metrics", web::get().to(scrape));
    }
}

pub(super) fn data(router: Arc<Router>, required: Vec<bool>) -> web::Data<Admin> {
    web::Data::new(Admin { router, required })
}

/// Serves the admin endpoints alone on `addr` (one worker: scrapes and probes are rare).
pub fn serve(
    router: Arc<Router>,
    addr: SocketAddr,
    required: Vec<bool>,
) -> io::Result<(actix_web::dev::Server, SocketAddr)> {
    let admin = data(router, required);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(admin.clone())
            .configure(|cfg| routes(cfg, true))
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

/// 200 when every upstream marked `required` is up, else 503; the body lists every upstream.
async fn readyz(admin: web::Data<Admin>) -> HttpResponse {
    let catalog = admin.router.hub().catalog();
    let mut ready = true;
    let mut upstreams = serde_json::Map::new();
    for (i, def) in catalog.defs().iter().enumerate() {
        let state = match catalog.state(i) {
            UpstreamState::Up => "up".to_owned(),
            UpstreamState::Starting => "starting".to_owned(),
            UpstreamState::Down { reason } => format!("down: {reason}"),
        };
        let required = admin.required.get(i).copied().unwrap_or(false);
        if required && *catalog.state(i) != UpstreamState::Up {
            ready = false;
        }
        upstreams.insert(
            def.key.clone(),
            serde_json::json!({ "state": state, "required": required }),
        );
    }
    let body = serde_json::json!({ "ready": ready, "upstreams": upstreams });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    HttpResponse::build(status).json(body)
}

async fn scrape(admin: web::Data<Admin>) -> HttpResponse {
    let text = crate::scrape::render(&admin.router);
    HttpResponse::Ok()
        .content_type(manifold_telemetry::exposition::CONTENT_TYPE)
        .body(text)
}
