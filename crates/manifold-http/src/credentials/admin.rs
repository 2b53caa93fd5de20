//! The operator's view of upstream connections, on the admin address: list them, revoke
//! them, and start the login of a shared identity. Behind `server.metrics_token` when it is
//! set, like every other admin route. A listing never holds a token.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use manifold_auth::{CredentialError, Owner};
use manifold_config::KeyHash;

use super::Consents;

/// What the admin routes of connections share.
pub struct AdminConsents {
    pub(super) consents: Arc<dyn Consents>,
    /// `server.metrics_token`: when set, every request must bear it.
    pub(super) token: Option<KeyHash>,
}

impl AdminConsents {
    pub fn new(consents: Arc<dyn Consents>, token: Option<KeyHash>) -> web::Data<Self> {
        web::Data::new(Self { consents, token })
    }

    fn refusal(&self, req: &HttpRequest) -> Option<HttpResponse> {
        let token = self.token.as_ref()?;
        crate::admin::token_refusal(req, token, req.path())
    }
}

/// Adds `GET /connections`, `POST /connections/revoke` and `POST /login/{upstream}`; the app
/// must hold [`AdminConsents`].
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/connections", web::get().to(list))
        .route("/connections/revoke", web::post().to(revoke))
        .route("/login/{upstream}", web::post().to(login));
}

/// Whose connections: both a team and a principal, a team alone, or everyone.
#[derive(serde::Deserialize)]
struct Filter {
    team: Option<String>,
    principal: Option<String>,
}

/// `GET /connections[?team=T[&principal=P]]`: `{"connections": [...]}`.
async fn list(
    req: HttpRequest,
    filter: web::Query<Filter>,
    admin: web::Data<AdminConsents>,
) -> HttpResponse {
    if let Some(refusal) = admin.refusal(&req) {
        return refusal;
    }
    let owner = match (&filter.team, &filter.principal) {
        (Some(team), Some(principal)) => Some(Owner::caller(team, principal)),
        (None, Some(_)) => return bad_request("principal needs team"),
        _ => None,
    };
    let mut connections = match admin.consents.connections(owner.as_ref()).await {
        Ok(connections) => connections,
        Err(e) => return failure(&e),
    };
    if let (Some(team), None) = (&filter.team, &filter.principal) {
        let prefix = format!("{team}/");
        connections.retain(|c| c.principal.starts_with(&prefix));
    }
    HttpResponse::Ok().json(serde_json::json!({ "connections": connections }))
}

/// What to revoke: a caller's connections (`team` and `principal`), or the shared identity's
/// (`shared`); one upstream's or all.
#[derive(serde::Deserialize)]
struct Revoke {
    team: Option<String>,
    principal: Option<String>,
    #[serde(default)]
    shared: bool,
    upstream: Option<String>,
}

/// `POST /connections/revoke`: `{"revoked": N}`.
async fn revoke(
    req: HttpRequest,
    body: web::Bytes,
    admin: web::Data<AdminConsents>,
) -> HttpResponse {
    if let Some(refusal) = admin.refusal(&req) {
        return refusal;
    }
    let Ok(what) = serde_json::from_slice::<Revoke>(&body) else {
        return bad_request(
            "the body must be JSON: {\"team\", \"principal\", \"upstream\"?} or {\"shared\": true, \"upstream\"?}",
        );
    };
    let owner = match (&what.team, &what.principal, what.shared) {
        (Some(team), Some(principal), false) => Owner::caller(team, principal),
        (None, None, true) => Owner::shared(),
        _ => return bad_request("name a caller (team and principal) or the shared identity"),
    };
    match admin
        .consents
        .revoke(what.upstream.as_deref(), &owner)
        .await
    {
        Ok(revoked) => HttpResponse::Ok().json(serde_json::json!({ "revoked": revoked })),
        Err(e) => failure(&e),
    }
}

/// `POST /login/{upstream}`: the consent link of the upstream's shared identity,
/// `{"url", "expires_at_ms"}`.
async fn login(
    req: HttpRequest,
    upstream: web::Path<String>,
    admin: web::Data<AdminConsents>,
) -> HttpResponse {
    if let Some(refusal) = admin.refusal(&req) {
        return refusal;
    }
    match admin.consents.consent(&upstream).await {
        Ok(link) => HttpResponse::Ok().json(serde_json::json!({
            "url": link.url,
            "expires_at_ms": link.expires_at_ms,
        })),
        Err(e) => failure(&e),
    }
}

fn bad_request(why: &str) -> HttpResponse {
    HttpResponse::BadRequest().json(serde_json::json!({ "error": why }))
}

/// A broker's refusal as JSON: 400 for what cannot be done, 502 when an authorization server
/// or the token store failed.
fn failure(e: &CredentialError) -> HttpResponse {
    let status = match e {
        CredentialError::Failed { .. } => StatusCode::BAD_GATEWAY,
        CredentialError::ConsentNeeded { .. } => StatusCode::CONFLICT,
        CredentialError::Refused { .. } => StatusCode::BAD_REQUEST,
    };
    HttpResponse::build(status).json(serde_json::json!({ "error": e.to_string() }))
}
