//! Signing in to the console at the `[auth.jwt]` issuer (`[server.console]`): the same
//! OpenID Connect flow as the credential pages' login (authorization code with PKCE and a
//! nonce), with the console's own client. The ID token is checked as a host's JWT is
//! (signature by the issuer's keys, issuer, expiry) with the console client as its audience,
//! and it must hold the admin claim: the check looks the claim up the way a team claim is
//! looked up, with one "team", the console's administrators, selected by the admin value.

use actix_web::{web, HttpRequest, HttpResponse};
use manifold_config::{ConsoleLogin, JwtConfig, TeamConfig};

use super::{html, login_form, open_login, Console};
use crate::credentials::login::{is_error_code, Answer, Login, LoginSettings, Purpose};

/// Where the issuer sends the browser back, on the admin address.
pub(crate) const CALLBACK: &str = "/console/login/oidc/callback";

/// How long one request to the issuer may take, and a sign-in at most.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const SIGN_IN_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// The console's login at the issuer, when `[server.console]` and `[auth.jwt]` are set.
pub(super) fn login(console: Option<&ConsoleLogin>, jwt: Option<&JwtConfig>) -> Option<Login> {
    let (console, jwt) = (console?, jwt?);
    let mut jwt = jwt.clone();
    jwt.team_claim.clone_from(&console.admin_claim);
    let administrators = TeamConfig {
        name: "console administrators".into(),
        claims: vec![console.admin_value.clone()],
        ..TeamConfig::default()
    };
    Some(Login::new(LoginSettings {
        jwt,
        teams: vec![administrators],
        client_id: console.client_id.clone(),
        client_secret: console.client_secret.clone(),
        public_url: console.public_url.clone(),
        timeout: TIMEOUT,
        ttl: SIGN_IN_TTL,
    }))
}

/// `GET /console/login/oidc`: to the issuer.
pub(super) async fn start(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    match &console.oidc {
        Some(login) => login.start(&req, Purpose::Console).await,
        None => super::not_found().await,
    }
}

/// `GET /console/login/oidc/callback`: the operator signed in (or did not). An administrator
/// gets a console login, as the admin token in the form gives one.
pub(super) async fn callback(
    answer: web::Query<Answer>,
    console: web::Data<Console>,
) -> HttpResponse {
    let Some(login) = &console.oidc else {
        return super::not_found().await;
    };
    let refused = |why: &str| html(HttpResponse::Forbidden(), login_form(Some(why), true));
    let started = answer.state.as_deref().and_then(|s| login.take(s));
    let Some(started) = started.filter(|s| matches!(s.purpose, Purpose::Console)) else {
        return refused("That sign-in is unknown or too old: sign in again.");
    };
    let Some(code) = answer.code.as_deref().filter(|_| answer.error.is_none()) else {
        let error = answer
            .error
            .as_deref()
            .filter(|e| is_error_code(e))
            .unwrap_or("no code");
        return refused(&format!("The sign-in did not complete ({error})."));
    };
    match login.signed_in(code, &started).await {
        Ok(principal) => {
            tracing::info!(principal = %principal.id, "signed in to the console");
            open_login(&console)
        }
        Err(why) => {
            tracing::info!("a console sign-in was refused: {why}");
            refused(&format!(
                "The sign-in was refused: only an ID token that makes you a console \
                 administrator opens the console ({why})."
            ))
        }
    }
}
