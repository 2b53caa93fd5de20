//! The web console on the admin address, under `/console/`: server-rendered pages from
//! templates compiled into the binary, usable without JavaScript.
//!
//! Logging in takes the admin token (`server.metrics_token`): as a bearer token on each
//! request, or once in the login form, which sets a cookie holding a random session id (never
//! the token). Every state-changing form carries the login's CSRF token; every answer under
//! `/console` carries headers that keep it out of frames, caches and other origins' scripts.
//! Without `server.metrics_token` the console is not served: the token is what makes it
//! authenticated.

mod calls;
mod catalog;
mod config;
mod connections;
mod latency;
mod logins;
mod oidc;
mod operations;
mod overview;
mod page;
mod teams;
mod try_call;
mod try_form;
mod try_tool;

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::http::header;
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, HttpRequest, HttpResponse};
use manifold_config::{JwtConfig, KeyHash};
use manifold_core::router::Router;

use crate::admin::ReloadHook;
use crate::credentials::Consents;
use crate::signins::same_secret;
use logins::{Logins, COOKIE};
use page::{escape, html, nav, page, see_other};

pub(crate) use oidc::CALLBACK as OIDC_CALLBACK;
pub use operations::{Operations, ReloadRecord, Running};

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
    /// Signing in at the `[auth.jwt]` issuer, with `[server.console]`.
    oidc: Option<crate::credentials::login::Login>,
    /// Recent samples of each upstream's call durations, for the overview's latency.
    latency: latency::History,
    /// Loads the configuration again, as `POST /reload` does.
    reload: Option<ReloadHook>,
    /// The configuration in force, the last reload, the lock file.
    operations: Option<Arc<dyn Operations>>,
    /// The connections to per-user upstreams, with the credential broker.
    consents: Option<Arc<dyn Consents>>,
    /// The outcomes of calls made from the try page.
    tries: try_tool::Tries,
}

impl Console {
    pub(crate) fn data(
        router: Arc<Router>,
        reload: Option<ReloadHook>,
        consents: Option<Arc<dyn Consents>>,
        jwt: Option<&JwtConfig>,
        operations: Option<Arc<dyn Operations>>,
    ) -> web::Data<Console> {
        let token = router.settings().metrics_token;
        let oidc = oidc::login(router.settings().console.as_ref(), jwt);
        if token.is_some() || oidc.is_some() {
            // The live calls page reads the recent calls: only a served console records them.
            manifold_telemetry::recent::recent_calls().turn_on();
        }
        let console = web::Data::new(Console {
            router,
            token,
            logins: Logins::default(),
            oidc,
            latency: latency::History::default(),
            reload,
            consents,
            operations,
            tries: try_tool::Tries::default(),
        });
        overview::sample(&console.latency);
        if console.served() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(sample_latency(Arc::downgrade(
                    &console.clone().into_inner(),
                )));
            }
        }
        console
    }
}

impl Console {
    /// Whether there is a way in: the admin token, or the issuer's sign-in.
    fn served(&self) -> bool {
        self.token.is_some() || self.oidc.is_some()
    }
}

/// Samples call durations every step while the console is served (its data lives): the
/// overview's latency covers the minutes before anyone opened it.
async fn sample_latency(console: std::sync::Weak<Console>) {
    let mut every = tokio::time::interval(latency::STEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(console) = console.upgrade() else {
            return;
        };
        overview::sample(&console.latency);
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
            .route("/login/oidc", web::get().to(oidc::start))
            .route(
                oidc::CALLBACK.trim_start_matches("/console"),
                web::get().to(oidc::callback),
            )
            .route("/logout", web::post().to(log_out))
            // The catalog (with re-pin) and the configuration (with reload).
            .route("/catalog", web::get().to(catalog::catalog_page))
            .route("/catalog/item", web::get().to(catalog::item_page))
            .route("/catalog/repin", web::post().to(catalog::repin))
            .route("/config", web::get().to(config::config_page))
            .route("/config/reload", web::post().to(config::reload))
            // Teams and limits; connections to per-user upstreams.
            .route("/teams", web::get().to(teams::teams_page))
            .route("/connections", web::get().to(connections::connections_page))
            .route(
                "/connections/revoke",
                web::post().to(connections::revoke_connection),
            )
            .route("/assets/console.css", web::get().to(stylesheet))
            .route("/assets/refresh.js", web::get().to(script))
            // Try a tool, and live calls.
            .route("/try", web::get().to(try_tool::try_page))
            .route("/try", web::post().to(try_tool::try_call))
            .route("/calls", web::get().to(calls::calls_page))
            .route("/calls.json", web::get().to(calls::calls_json))
            .route("/assets/calls.js", web::get().to(calls::calls_script))
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
    if !console.served() {
        return Err(Refusal::NoToken);
    }
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(bearer) = bearer {
        // A wrong bearer token is not rescued by a cookie: the caller said who it is.
        return match &console.token {
            Some(token) if KeyHash::of(bearer.trim()) == *token => Ok(Access::Bearer),
            _ => Err(Refusal::LoggedOut),
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
        .body("the console is served only with server.metrics_token (the admin token it asks for) or [server.console] (a sign-in at the [auth.jwt] issuer) set\n")
}

fn forbidden(why: &str) -> HttpResponse {
    HttpResponse::Forbidden()
        .content_type("text/plain; charset=utf-8")
        .body(format!("{why}\n"))
}

/// A POST's form; a body that is no form counts as an empty one (refused for its missing
/// CSRF token, like any other).
type PostedForm = Option<web::Form<HashMap<String, String>>>;

/// Checks a state-changing POST: logged in, and with the login's CSRF token in its form
/// (field `csrf`); how it is logged in, and the form's fields. The refusal is a 403 (or the
/// 404 of a console not served).
fn check_post(
    req: &HttpRequest,
    console: &Console,
    form: PostedForm,
) -> Result<(Access, HashMap<String, String>), HttpResponse> {
    let form = form.map(web::Form::into_inner).unwrap_or_default();
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
    Ok((access, form))
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
    // The other replicas are read only for a request that may see them.
    let replicas = match (access(&req, &console), console.router.presence()) {
        (Ok(_), Some(presence)) => Some(presence.replicas().await),
        _ => None,
    };
    logged_in_page(&req, &console, "Overview", OVERVIEW_REFRESH_SECONDS, |_| {
        overview::body(&console.router, &console.latency, replicas)
    })
}

/// The login page; `oidc`: with the link that signs in at the issuer.
fn login_form(notice: Option<&str>, oidc: bool) -> String {
    let notice = notice.map_or_else(String::new, |n| {
        format!("<p class=\"notice\">{}</p>", escape(n))
    });
    let oidc = if oidc {
        "<p class=\"oidc\"><a id=\"oidc-login\" href=\"/console/login/oidc\">Sign in with your \
         identity provider</a></p>"
    } else {
        ""
    };
    let body = page::fill(page::LOGIN, &[("notice", &notice), ("oidc", oidc)]);
    page("Log in", "", &body, 0)
}

async fn login_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    match access(&req, &console) {
        Ok(_) => see_other("/console/"),
        Err(Refusal::NoToken) => no_console(),
        Err(Refusal::LoggedOut) => {
            html(HttpResponse::Ok(), login_form(None, console.oidc.is_some()))
        }
    }
}

/// `POST /console/login`: the admin token from the form opens a login. It needs no CSRF
/// token: whoever can post the admin token may log in anyway.
async fn log_in(
    console: web::Data<Console>,
    form: Option<web::Form<HashMap<String, String>>>,
) -> HttpResponse {
    let form = form.map(web::Form::into_inner).unwrap_or_default();
    if !console.served() {
        return no_console();
    }
    let Some(token) = &console.token else {
        let text = login_form(
            Some("No admin token is configured: sign in with your identity provider."),
            true,
        );
        return html(HttpResponse::Unauthorized(), text);
    };
    let presented = form.get("token").map(|t| t.trim()).unwrap_or("");
    if KeyHash::of(presented) != *token {
        let text = login_form(Some("That is not the admin token."), console.oidc.is_some());
        return html(HttpResponse::Unauthorized(), text);
    }
    open_login(&console)
}

/// Opens a login (the admin token or the issuer said who it is): its cookie, and on to the
/// overview.
fn open_login(console: &Console) -> HttpResponse {
    let Some((session, _csrf)) = console.logins.open(()) else {
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
async fn log_out(req: HttpRequest, console: web::Data<Console>, form: PostedForm) -> HttpResponse {
    let access = match check_post(&req, &console, form) {
        Ok((access, _)) => access,
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
