//! The web console on the admin address, under `/console/`: server-rendered pages from
//! templates compiled into the binary, usable without JavaScript.
//!
//! Logging in takes the admin token (`server.metrics_token`): as a bearer token on each
//! request, or once in the login form, which sets a cookie holding a random session id (never
//! the token). Every state-changing form carries the login's CSRF token; every answer under
//! `/console` carries headers that keep it out of frames, caches and other origins' scripts.
//! Without `server.metrics_token` the console is not served: the token is what makes it
//! authenticated.

mod connections;
mod logins;
mod overview;
mod page;
mod teams;

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::http::header;
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, HttpRequest, HttpResponse};
use manifold_config::KeyHash;
use manifold_core::router::Router;

use crate::admin::ReloadHook;
use crate::credentials::Consents;
pub(crate) use logins::{cookie, same_secret};
use logins::{Logins, COOKIE};
use page::{escape, html, nav, page, see_other};

/// What every answer under `/console` carries: no script or style from anywhere but the
/// admin address itself (and none inline), never in a frame, never cached, no referrer.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// How often the overview reloads itself while scripts run.
const OVERVIEW_REFRESH_SECONDS: u32 = 5;

/// What the console's handlers read.
pub(crate) struct Console {
    router: Arc<Router>,
    /// `server.metrics_token`; `None`: the console is not served.
    token: Option<KeyHash>,
    logins: Logins,
    /// Loads the configuration again, as `POST /reload` does.
    #[allow(dead_code)] // The configuration page's reload button calls it.
    reload: Option<ReloadHook>,
    /// The connections to per-user upstreams, with the credential broker.
    consents: Option<Arc<dyn Consents>>,
}

impl Console {
    pub(crate) fn data(
        router: Arc<Router>,
        reload: Option<ReloadHook>,
        consents: Option<Arc<dyn Consents>>,
    ) -> web::Data<Console> {
        let token = router.settings().metrics_token;
        web::Data::new(Console {
            router,
            token,
            logins: Logins::default(),
            reload,
            consents,
        })
    }
}

/// Adds `/console` and everything under it; the app must hold a `web::Data<Console>`.
pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/console",
        web::get().to(|| async { see_other("/console/") }),
    )
    .service(
        web::scope("/console")
            .wrap(
                DefaultHeaders::new()
                    .add((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
                    .add((header::X_FRAME_OPTIONS, "DENY"))
                    .add((header::CACHE_CONTROL, "no-store"))
                    .add((header::REFERRER_POLICY, "no-referrer"))
                    .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff")),
            )
            .route("/", web::get().to(overview_page))
            .route("/login", web::get().to(login_page))
            .route("/login", web::post().to(log_in))
            .route("/logout", web::post().to(log_out))
            // Teams and limits; connections to per-user upstreams.
            .route("/teams", web::get().to(teams_page))
            .route("/connections", web::get().to(connections_page))
            .route("/connections/revoke", web::post().to(revoke_connection))
            .route("/assets/console.css", web::get().to(stylesheet))
            .route("/assets/refresh.js", web::get().to(script))
            .default_service(web::to(not_found)),
    );
}

/// How a request is logged in.
enum Access {
    /// With the admin token as its bearer token: no browser sends that on its own, so no
    /// CSRF token is asked for.
    Bearer,
    /// With the cookie of a live login, whose forms carry `csrf`.
    Session { session: String, csrf: String },
}

/// Why a request may not see the console.
enum Refusal {
    /// No `server.metrics_token`: the console is not served at all.
    NoToken,
    /// Not logged in (or the login expired).
    LoggedOut,
}

fn access(req: &HttpRequest, console: &Console) -> Result<Access, Refusal> {
    let Some(token) = &console.token else {
        return Err(Refusal::NoToken);
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(bearer) = bearer {
        // A wrong bearer token is not rescued by a cookie: the caller said who it is.
        return if KeyHash::of(bearer.trim()) == *token {
            Ok(Access::Bearer)
        } else {
            Err(Refusal::LoggedOut)
        };
    }
    let session = logins::session_cookie(req);
    let login = session
        .as_deref()
        .and_then(|s| console.logins.find(s).map(|l| (s.to_owned(), l)));
    match login {
        Some((session, login)) => Ok(Access::Session {
            session,
            csrf: login.csrf,
        }),
        None => Err(Refusal::LoggedOut),
    }
}

/// The answer to a GET without access: to the login page, or why there is no console.
fn refused_page(refusal: Refusal) -> HttpResponse {
    match refusal {
        Refusal::NoToken => no_console(),
        Refusal::LoggedOut => see_other("/console/login"),
    }
}

fn no_console() -> HttpResponse {
    HttpResponse::NotFound()
        .content_type("text/plain; charset=utf-8")
        .body("the console is served only with server.metrics_token set: it is the admin token the console asks for\n")
}

fn forbidden(why: &str) -> HttpResponse {
    HttpResponse::Forbidden()
        .content_type("text/plain; charset=utf-8")
        .body(format!("{why}\n"))
}

/// Checks a state-changing POST: logged in, and with the login's CSRF token in its form
/// (field `csrf`). The refusal is a 403 (or the 404 of a console not served).
fn check_post(
    req: &HttpRequest,
    console: &Console,
    form: &HashMap<String, String>,
) -> Result<Access, HttpResponse> {
    let access = access(req, console).map_err(|refusal| match refusal {
        Refusal::NoToken => no_console(),
        Refusal::LoggedOut => forbidden("log in to the console first (/console/login)"),
    })?;
    if let Access::Session { csrf, .. } = &access {
        let presented = form.get("csrf").map(String::as_str).unwrap_or("");
        if !same_secret(presented, csrf) {
            return Err(forbidden(
                "the form's CSRF token is missing or not this login's: reload the page and try again",
            ));
        }
    }
    Ok(access)
}

fn csrf_of(access: &Access) -> Option<&str> {
    match access {
        Access::Bearer => None,
        Access::Session { csrf, .. } => Some(csrf),
    }
}

/// A page for a logged-in request (else the login page): `body` gets the login's CSRF token
/// (`None` for a bearer token) for the page's forms. `refresh`: seconds between reloads by
/// the embedded script, 0 for none.
fn logged_in_page(
    req: &HttpRequest,
    console: &Console,
    title: &str,
    refresh: u32,
    body: impl FnOnce(Option<&str>) -> String,
) -> HttpResponse {
    let access = match access(req, console) {
        Ok(access) => access,
        Err(refusal) => return refused_page(refusal),
    };
    let csrf = csrf_of(&access);
    let text = page(title, &nav(csrf), &body(csrf), refresh);
    html(HttpResponse::Ok(), text)
}

async fn overview_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    logged_in_page(&req, &console, "Overview", OVERVIEW_REFRESH_SECONDS, |_| {
        overview::body(&console.router)
    })
}

async fn teams_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    if let Err(refusal) = access(&req, &console) {
        return refused_page(refusal);
    }
    let body = teams::body(&console.router).await;
    logged_in_page(&req, &console, "Teams", 0, |_| body)
}

/// The outcome of a revoke, carried by the 303 back to the connections page.
#[derive(serde::Deserialize)]
struct Revoked {
    revoked: Option<usize>,
    upstream: Option<String>,
}

async fn connections_page(
    req: HttpRequest,
    console: web::Data<Console>,
    outcome: web::Query<Revoked>,
) -> HttpResponse {
    let access = match access(&req, &console) {
        Ok(access) => access,
        Err(refusal) => return refused_page(refusal),
    };
    let done = match (&outcome.revoked, &outcome.upstream) {
        (Some(n), Some(upstream)) => Some(format!("Revoked {n} connection(s) to {upstream}.")),
        _ => None,
    };
    let consents = console.consents.as_deref();
    let body = connections::body(consents, csrf_of(&access), done.as_deref()).await;
    logged_in_page(&req, &console, "Connections", 0, |_| body)
}

/// `POST /console/connections/revoke`: forgets one caller's (or the shared identity's)
/// connection to one upstream, then back to the page, which says how many went.
async fn revoke_connection(
    req: HttpRequest,
    console: web::Data<Console>,
    form: Option<web::Form<HashMap<String, String>>>,
) -> HttpResponse {
    let form = form.map(web::Form::into_inner).unwrap_or_default();
    if let Err(refusal) = check_post(&req, &console, &form) {
        return refusal;
    }
    let Some(consents) = &console.consents else {
        return see_other("/console/connections");
    };
    let what = match connections::Revoke::of_form(&form) {
        Ok(what) => what,
        Err(why) => return bad_form(why),
    };
    match consents.revoke(Some(&what.upstream), &what.owner).await {
        Ok(n) => see_other(&format!(
            "/console/connections?revoked={n}&upstream={}",
            connections::query_value(&what.upstream)
        )),
        Err(e) => HttpResponse::BadGateway()
            .content_type("text/plain; charset=utf-8")
            .body(format!("the connection was not revoked: {e}\n")),
    }
}

fn bad_form(why: &str) -> HttpResponse {
    HttpResponse::BadRequest()
        .content_type("text/plain; charset=utf-8")
        .body(format!("{why}\n"))
}

fn login_form(notice: Option<&str>) -> String {
    let notice = notice.map_or_else(String::new, |n| {
        format!("<p class=\"notice\">{}</p>", escape(n))
    });
    let body = page::fill(page::LOGIN, &[("notice", &notice)]);
    page("Log in", "", &body, 0)
}

async fn login_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    match access(&req, &console) {
        Ok(_) => see_other("/console/"),
        Err(Refusal::NoToken) => no_console(),
        Err(Refusal::LoggedOut) => html(HttpResponse::Ok(), login_form(None)),
    }
}

/// `POST /console/login`: the admin token from the form opens a login. It needs no CSRF
/// token: whoever can post the admin token may log in anyway.
async fn log_in(
    console: web::Data<Console>,
    form: Option<web::Form<HashMap<String, String>>>,
) -> HttpResponse {
    let form = form.map(web::Form::into_inner).unwrap_or_default();
    let Some(token) = &console.token else {
        return no_console();
    };
    let presented = form.get("token").map(|t| t.trim()).unwrap_or("");
    if KeyHash::of(presented) != *token {
        let text = login_form(Some("That is not the admin token."));
        return html(HttpResponse::Unauthorized(), text);
    }
    let Some((session, _csrf)) = console.logins.open() else {
        return HttpResponse::InternalServerError()
            .content_type("text/plain; charset=utf-8")
            .body("the system's random source failed; no login was opened\n");
    };
    // HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it; the
    // path keeps it off the admin address's other endpoints.
    let cookie = format!(
        "{COOKIE}={session}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        logins::LIFETIME.as_secs()
    );
    let mut answer = see_other("/console/");
    if let Ok(value) = header::HeaderValue::from_str(&cookie) {
        answer.headers_mut().insert(header::SET_COOKIE, value);
    }
    answer
}

/// `POST /console/logout`: ends the login and clears its cookie. A body that is no form
/// counts as an empty one (refused for its missing CSRF token, like any other).
async fn log_out(
    req: HttpRequest,
    console: web::Data<Console>,
    form: Option<web::Form<HashMap<String, String>>>,
) -> HttpResponse {
    let form = form.map(web::Form::into_inner).unwrap_or_default();
    let access = match check_post(&req, &console, &form) {
        Ok(access) => access,
        Err(refusal) => return refusal,
    };
    if let Access::Session { session, .. } = &access {
        console.logins.close(session);
    }
    let mut answer = see_other("/console/login");
    let gone = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = header::HeaderValue::from_str(&gone) {
        answer.headers_mut().insert(header::SET_COOKIE, value);
    }
    answer
}

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .body(page::STYLESHEET)
}

async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(page::REFRESH_SCRIPT)
}

async fn not_found() -> HttpResponse {
    HttpResponse::NotFound()
        .content_type("text/plain; charset=utf-8")
        .body("no such console page\n")
}
