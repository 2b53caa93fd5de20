//! The users' page on the host listener, `/oauth/account`: a user proves who they are with
//! the API key their host uses (the consent pages' key form) or, with `login_client_id`, the
//! consent pages' OpenID Connect login at the `[auth.jwt]` issuer, and then sees their own
//! connections to per-user upstreams, connects one ahead of a call (the broker's consent,
//! straight to the authorization server) and revokes one. Nothing about anyone else: every
//! listing and action is made for the signed-in caller's owner alone.
//!
//! Signing in opens a session kept in this process: a random id in an HttpOnly,
//! SameSite=Strict cookie scoped to `/oauth/account`, mapped (by its hash) to the caller and
//! the CSRF token every form of the page carries.

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use manifold_auth::Owner;
use manifold_policy::Principal;

use super::{page, CredentialPages};
use crate::signins::{cookie, same_secret, SignIns, LIFETIME};

/// The cookie of a signed-in user.
const COOKIE: &str = "manifold_account";
/// Sign-ins kept at most: past this the oldest is forgotten.
const MAX_SIGNED_IN: usize = 10_000;

/// Who signed in: the caller their host is.
#[derive(Clone)]
struct Caller {
    team: String,
    principal: String,
}

/// One signed-in user.
pub(super) struct Account {
    pub(super) team: String,
    pub(super) principal: String,
    pub(super) csrf: String,
}

impl Account {
    pub(super) fn owner(&self) -> Owner {
        Owner::caller(&self.team, &self.principal)
    }
}

/// The signed-in users of this process.
#[derive(Default)]
pub(super) struct Accounts(SignIns<Caller, MAX_SIGNED_IN>);

impl Accounts {
    /// A new sign-in of `team`/`principal`: its session id, `None` without a random source.
    fn open(&self, team: &str, principal: &str) -> Option<String> {
        let caller = Caller {
            team: team.to_owned(),
            principal: principal.to_owned(),
        };
        self.0.open(caller).map(|(session, _csrf)| session)
    }

    /// The live sign-in of the request's cookie.
    fn of(&self, req: &HttpRequest) -> Option<Account> {
        let signed_in = self.0.find(&cookie(req, COOKIE)?)?;
        Some(Account {
            team: signed_in.who.team,
            principal: signed_in.who.principal,
            csrf: signed_in.csrf,
        })
    }

    fn close(&self, req: &HttpRequest) {
        if let Some(session) = cookie(req, COOKIE) {
            self.0.close(&session);
        }
    }
}

/// Adds the users' page; the app must hold [`CredentialPages`].
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/oauth/account", web::get().to(show))
        .route("/oauth/account/login", web::post().to(sign_in))
        .route("/oauth/account/signin", web::get().to(sign_in_at_issuer))
        .route("/oauth/account/logout", web::post().to(sign_out))
        .route("/oauth/account/connect", web::post().to(connect))
        .route("/oauth/account/revoke", web::post().to(revoke));
}

/// `GET /oauth/account`: the sign-in form, or the user's connections.
async fn show(req: HttpRequest, pages: web::Data<CredentialPages>) -> HttpResponse {
    if pages.auth.get().is_none() {
        return no_accounts();
    }
    let Some(account) = pages.accounts.of(&req) else {
        return page::account_sign_in(StatusCode::OK, None, pages.login.is_some());
    };
    let owner = account.owner();
    let connections: Vec<_> = match pages.consents.connections(Some(&owner)).await {
        // The broker was asked for this owner's alone; kept to them again all the same.
        Ok(list) => list
            .into_iter()
            .filter(|c| c.owner == owner.label())
            .collect(),
        Err(e) => {
            tracing::info!("a user's connections could not be read: {e}");
            return page::text(
                StatusCode::BAD_GATEWAY,
                "Connections unavailable",
                "Your connections cannot be read right now. Try again later.",
            );
        }
    };
    let upstreams = pages.consents.per_user_upstreams();
    let done = req.query_string();
    page::account(&account, &connections, &upstreams, done)
}

/// The sign-in form's answer.
#[derive(serde::Deserialize)]
struct SignIn {
    #[serde(default)]
    key: String,
}

/// `POST /oauth/account/login`: the API key the user's host uses opens a sign-in. The key
/// is checked and dropped: never echoed, never logged, never in the cookie.
async fn sign_in(pages: web::Data<CredentialPages>, form: web::Form<SignIn>) -> HttpResponse {
    let Some(auth) = pages.auth.get() else {
        return no_accounts();
    };
    let key = form.key.trim();
    let principal = match auth.authenticator.authenticate(None, Some(key)).await {
        Ok(principal) if !key.is_empty() => principal,
        _ => {
            let note = "That key was not accepted.";
            let oidc = pages.login.is_some();
            return page::account_sign_in(StatusCode::UNAUTHORIZED, Some(note), oidc);
        }
    };
    signed_in(&pages, &principal)
}

/// `GET /oauth/account/signin`: the OpenID Connect login, which comes back to
/// [`signed_in`] through the consent pages' login callback.
async fn sign_in_at_issuer(req: HttpRequest, pages: web::Data<CredentialPages>) -> HttpResponse {
    match (&pages.login, pages.auth.get()) {
        (Some(login), Some(_)) => login.start(&req, super::login::Purpose::Account).await,
        _ => no_accounts(),
    }
}

/// `principal` proved who they are: a sign-in of their own, and on to their page.
pub(super) fn signed_in(pages: &CredentialPages, principal: &Principal) -> HttpResponse {
    let Some(session) = pages.accounts.open(&principal.team, &principal.id) else {
        return page::text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Not signed in",
            "The system's random source failed. Try again.",
        );
    };
    // HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it; the
    // path keeps it off the MCP endpoint and the consent pages.
    let cookie = format!(
        "{COOKIE}={session}; Path=/oauth/account; HttpOnly; SameSite=Strict; Max-Age={}",
        LIFETIME.as_secs()
    );
    with_cookie(
        page::redirect(StatusCode::SEE_OTHER, "/oauth/account"),
        &cookie,
    )
}

/// A form of the signed-in page: its upstream and CSRF token.
#[derive(serde::Deserialize)]
struct Action {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    upstream: String,
}

/// The sign-in behind a state-changing POST, if its form carries the sign-in's CSRF token.
fn checked(
    req: &HttpRequest,
    pages: &CredentialPages,
    csrf: &str,
) -> Result<Account, HttpResponse> {
    let Some(account) = pages.accounts.of(req) else {
        return Err(page::text(
            StatusCode::FORBIDDEN,
            "Not signed in",
            "Sign in at /oauth/account first.",
        ));
    };
    if !same_secret(csrf, &account.csrf) {
        return Err(page::text(
            StatusCode::FORBIDDEN,
            "Form expired",
            "The form's CSRF token is missing or not this sign-in's: reload the page and try again.",
        ));
    }
    Ok(account)
}

/// `POST /oauth/account/revoke`: forgets the user's own connection to one upstream.
async fn revoke(
    req: HttpRequest,
    pages: web::Data<CredentialPages>,
    form: web::Form<Action>,
) -> HttpResponse {
    let account = match checked(&req, &pages, &form.csrf) {
        Ok(account) => account,
        Err(refusal) => return refusal,
    };
    let owner = account.owner();
    match pages.consents.revoke(Some(&form.upstream), &owner).await {
        Ok(n) => page::redirect(
            StatusCode::SEE_OTHER,
            &format!("/oauth/account?revoked={n}"),
        ),
        Err(e) => page::text(
            StatusCode::BAD_GATEWAY,
            "Not revoked",
            &format!("The connection was not revoked: {e}."),
        ),
    }
}

/// `POST /oauth/account/connect`: starts the user's consent at one upstream ahead of a call,
/// and sends the browser straight to its authorization server (the user is proven already).
async fn connect(
    req: HttpRequest,
    pages: web::Data<CredentialPages>,
    form: web::Form<Action>,
) -> HttpResponse {
    let account = match checked(&req, &pages, &form.csrf) {
        Ok(account) => account,
        Err(refusal) => return refusal,
    };
    let link = pages
        .consents
        .connect(&form.upstream, &account.team, &account.principal)
        .await;
    match link {
        Ok(link) => {
            super::authorize(&pages, &link.id, &account.owner(), StatusCode::SEE_OTHER).await
        }
        Err(e) => page::text(
            StatusCode::BAD_REQUEST,
            "Not connected",
            &format!("The connection could not start: {e}."),
        ),
    }
}

/// `POST /oauth/account/logout`: ends the sign-in and clears its cookie.
async fn sign_out(
    req: HttpRequest,
    pages: web::Data<CredentialPages>,
    form: web::Form<Action>,
) -> HttpResponse {
    if let Err(refusal) = checked(&req, &pages, &form.csrf) {
        return refusal;
    }
    pages.accounts.close(&req);
    let gone = format!("{COOKIE}=; Path=/oauth/account; HttpOnly; SameSite=Strict; Max-Age=0");
    with_cookie(
        page::redirect(StatusCode::SEE_OTHER, "/oauth/account"),
        &gone,
    )
}

fn with_cookie(mut answer: HttpResponse, cookie: &str) -> HttpResponse {
    if let Ok(value) = header::HeaderValue::from_str(cookie) {
        answer.headers_mut().insert(header::SET_COOKIE, value);
    }
    answer
}

fn no_accounts() -> HttpResponse {
    page::text(
        StatusCode::NOT_FOUND,
        "No accounts here",
        "Hosts do not authenticate to this Manifold, so there is no account to sign in to.",
    )
}
