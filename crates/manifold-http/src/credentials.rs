//! The pages of upstream consents on the host listener, and the connections an operator
//! manages on the admin address.
//!
//! A caller whose upstream needs their authorization is given a link,
//! `{base}/oauth/connect/{id}`. Before the browser is sent to the authorization server, the
//! page makes sure the browser user is the caller the link was made for: with the API key
//! their host uses (a form), or with an OpenID Connect login at the `[auth.jwt]` issuer
//! (`[credentials] login_client_id`). A shared identity (an operator's login), the user of a
//! stdio Manifold, and hosts that do not authenticate at all need no such proof. The
//! authorization server redirects back to `{base}/oauth/callback`, which completes the consent
//! and tells the core.
//!
//! Everything OAuth is [`Consents`]' work (the broker, in the binary); here are HTTP, HTML
//! and who the browser user is.

mod account;
mod admin;
pub(crate) mod login;
mod page;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::future::BoxFuture;
use manifold_auth::PendingConsent;
use manifold_auth::{Completed, ConnectionInfo, ConsentLink, CredentialError, Owner};

use crate::AuthSlot;

pub use admin::{routes as admin_routes, AdminConsents};
pub use login::LoginSettings;

/// What the consent pages and the admin routes need of the credential broker.
pub trait Consents: Send + Sync {
    /// The consent behind a link the browser opened.
    fn pending<'a>(&'a self, id: &'a str)
        -> BoxFuture<'a, Result<PendingConsent, CredentialError>>;

    /// The browser user proved to be `owner`: the authorization server's URL to send them to.
    fn authorize<'a>(
        &'a self,
        id: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<String, CredentialError>>;

    /// The authorization server's redirect (`query`: the callback's query string).
    fn callback<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Completed, CredentialError>>;

    /// Manifold's own Client ID Metadata Document (JSON text), when it has one.
    fn client_metadata(&self) -> Option<String>;

    /// The kept connections, of one owner or of all.
    fn connections<'a>(
        &'a self,
        owner: Option<&'a Owner>,
    ) -> BoxFuture<'a, Result<Vec<ConnectionInfo>, CredentialError>>;

    /// Forgets the owner's connection to `upstream`, or all of them; how many there were.
    fn revoke<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, CredentialError>>;

    /// Starts the consent of the shared identity of `upstream` (an operator's login).
    fn consent<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>>;

    /// The upstreams whose callers connect accounts of their own (per-user OAuth): what
    /// the users' page offers to connect.
    fn per_user_upstreams(&self) -> Vec<String>;

    /// Starts the consent of the caller `team`/`principal` at `upstream`, ahead of a call
    /// (the users' page).
    fn connect<'a>(
        &'a self,
        upstream: &'a str,
        team: &'a str,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>>;

    /// A consent completed: the core tells the host that asked for it.
    fn completed(&self, done: Completed);
}

/// What the consent pages share.
pub struct CredentialPages {
    consents: Arc<dyn Consents>,
    /// How hosts authenticate now: the API key form checks a key with it.
    auth: AuthSlot,
    /// The OpenID Connect login, when `login_client_id` is configured.
    login: Option<login::Login>,
    /// Who is signed in to the users' page.
    accounts: account::Accounts,
}

impl CredentialPages {
    pub fn new(
        consents: Arc<dyn Consents>,
        auth: AuthSlot,
        login: Option<LoginSettings>,
    ) -> web::Data<Self> {
        web::Data::new(Self {
            consents,
            auth,
            login: login.map(login::Login::new),
            accounts: account::Accounts::default(),
        })
    }
}

/// How the browser user proves who they are before a consent goes on.
enum Proof {
    /// Nobody to check: the shared identity, the user of a stdio Manifold, or hosts that do
    /// not authenticate (every caller is the same one).
    Nothing,
    /// The OpenID Connect login at the `[auth.jwt]` issuer.
    Login,
    /// The API key (or bearer token) the caller's host uses.
    Key,
}

impl CredentialPages {
    fn proof_for(&self, pending: &PendingConsent) -> Proof {
        let team = pending.principal.split_once('/').map_or("", |(t, _)| t);
        let local = pending.owner == Owner::caller(team, "local");
        if pending.shared || local || self.auth.get().is_none() {
            return Proof::Nothing;
        }
        let jwt = pending
            .principal
            .split_once('/')
            .is_some_and(|(_, id)| id.starts_with("jwt:"));
        if jwt && self.login.is_some() {
            Proof::Login
        } else {
            Proof::Key
        }
    }
}

/// Adds the consent routes of the host listener; the app must hold [`CredentialPages`].
pub fn host_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/oauth/connect/{id}", web::get().to(connect))
        .route("/oauth/connect/{id}", web::post().to(connect_with_key))
        .route("/oauth/callback", web::get().to(callback))
        .route("/oauth/login/callback", web::get().to(login::callback))
        .route("/oauth/client.json", web::get().to(client_metadata))
        .configure(account::routes);
}

/// Serves the consent pages alone on `addr`, for a consent made outside a running Manifold
/// (`manifold login` in its own process: the operator's browser comes back to this address).
/// Nobody authenticates here: only a shared identity's consent is expected.
pub fn serve_pages(
    consents: Arc<dyn Consents>,
    addr: std::net::SocketAddr,
) -> std::io::Result<(actix_web::dev::Server, std::net::SocketAddr)> {
    let pages = CredentialPages::new(consents, AuthSlot::default(), None);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(pages.clone())
            .configure(host_routes)
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(addr)?;
    let bound = server.addrs().first().copied().unwrap_or(addr);
    Ok((server.run(), bound))
}

/// `GET /oauth/connect/{id}`: the link a host was given.
async fn connect(
    req: HttpRequest,
    id: web::Path<String>,
    pages: web::Data<CredentialPages>,
) -> HttpResponse {
    let Ok(pending) = pages.consents.pending(&id).await else {
        return page::unusable();
    };
    match pages.proof_for(&pending) {
        Proof::Nothing => authorize(&pages, &id, &pending.owner, StatusCode::FOUND).await,
        Proof::Login => match &pages.login {
            Some(login) => {
                login
                    .start(&req, login::Purpose::Consent(id.as_str().to_owned()))
                    .await
            }
            None => page::unusable(),
        },
        Proof::Key => page::key_form(StatusCode::OK, &pending.upstream, None),
    }
}

/// The key form's answer.
#[derive(serde::Deserialize)]
struct KeyForm {
    #[serde(default)]
    key: String,
}

/// `POST /oauth/connect/{id}`: the API key the browser user entered. The key is checked
/// and dropped: never echoed into the page, never logged.
async fn connect_with_key(
    id: web::Path<String>,
    form: web::Form<KeyForm>,
    pages: web::Data<CredentialPages>,
) -> HttpResponse {
    let Ok(pending) = pages.consents.pending(&id).await else {
        return page::unusable();
    };
    let auth = match (pages.proof_for(&pending), pages.auth.get()) {
        (Proof::Key, Some(auth)) => auth,
        (Proof::Login, _) => {
            return page::text(
                StatusCode::BAD_REQUEST,
                "Sign in instead",
                "This link is completed by signing in; open it again.",
            )
        }
        _ => return authorize(&pages, &id, &pending.owner, StatusCode::SEE_OTHER).await,
    };
    let key = form.key.trim();
    if key.is_empty() {
        return page::key_form(StatusCode::OK, &pending.upstream, None);
    }
    let Ok(principal) = auth.authenticator.authenticate(None, Some(key)).await else {
        let note = "That key was not accepted.";
        return page::key_form(StatusCode::UNAUTHORIZED, &pending.upstream, Some(note));
    };
    if Owner::caller(&principal.team, &principal.id) != pending.owner {
        tracing::info!(
            upstream = %pending.upstream,
            "a consent link was opened with the key of another caller"
        );
        return page::someone_else();
    }
    authorize(&pages, &id, &pending.owner, StatusCode::SEE_OTHER).await
}

/// Sends the browser to the authorization server for the consent `id`, made for `owner`.
async fn authorize(
    pages: &CredentialPages,
    id: &str,
    owner: &Owner,
    status: StatusCode,
) -> HttpResponse {
    match pages.consents.authorize(id, owner).await {
        Ok(url) => page::redirect(status, &url),
        Err(CredentialError::Failed { upstream, reason }) => page::text(
            StatusCode::BAD_GATEWAY,
            "Authorization server unavailable",
            &format!("Authorization for {upstream} could not start: {reason}. Try again later."),
        ),
        Err(_) => page::unusable(),
    }
}

/// `GET /oauth/callback`: where the authorization server sends the browser back.
async fn callback(req: HttpRequest, pages: web::Data<CredentialPages>) -> HttpResponse {
    match pages.consents.callback(req.query_string()).await {
        Ok(done) => {
            let upstream = done.upstream.clone();
            pages.consents.completed(done);
            page::text(
                StatusCode::OK,
                "Connected",
                &format!(
                    "{upstream} is connected. You can close this page and return to your host."
                ),
            )
        }
        Err(e) => {
            tracing::info!("a consent's callback failed: {e}");
            page::text(
                StatusCode::BAD_REQUEST,
                "Not connected",
                &format!("The connection was not made: {e}."),
            )
        }
    }
}

/// `GET /oauth/client.json`: Manifold's Client ID Metadata Document.
async fn client_metadata(pages: web::Data<CredentialPages>) -> HttpResponse {
    match pages.consents.client_metadata() {
        Some(document) => page::secure(HttpResponse::Ok())
            .content_type("application/json")
            .body(document),
        None => page::text(
            StatusCode::NOT_FOUND,
            "Not found",
            "Manifold has no client metadata document here.",
        ),
    }
}
