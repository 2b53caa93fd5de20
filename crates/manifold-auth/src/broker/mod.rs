//! The credential broker: what a connection to an upstream sends, for whom, and how a caller
//! who has nothing usable yet is sent to authorize.
//!
//! Its rules: a token is refreshed `refresh_before` ahead of expiry, once per (upstream,
//! owner) in this process and, with a shared store, once across replicas; a refresh the
//! authorization server refuses drops the grant and asks for consent; a 401 is answered with
//! one fresh token and no more; a step-up asks for the union of the granted and the
//! challenged scopes, and is not repeated for scopes already granted; a client registered at
//! one authorization server is never used at another.

mod consent;
mod grants;
mod inner;
mod machines;
mod rejected;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use manifold_config::{CredentialsSettings, UpstreamAuth, UpstreamConfig};

use crate::store::{Owner, TokenStore};
use inner::Inner;

/// Who a request to an upstream is made for.
#[derive(Clone)]
pub struct Caller {
    pub team: Arc<str>,
    /// The principal id: `key:NAME` (a named API key), `jwt:ISS#SUB`, `local` (stdio).
    pub principal: Arc<str>,
    pub owner: Owner,
    /// The caller's own bearer token (the JWT it authenticated with), for token exchange and
    /// identity assertion only: never sent upstream as it is, never logged.
    pub subject_token: Option<Arc<str>>,
}

impl Caller {
    pub fn new(team: Arc<str>, principal: Arc<str>, subject_token: Option<Arc<str>>) -> Self {
        let owner = Owner::caller(&team, &principal);
        Self {
            team,
            principal,
            owner,
            subject_token,
        }
    }

    /// The one identity of a shared login or of client credentials (an operator's).
    pub fn shared() -> Self {
        Self {
            team: Arc::from(""),
            principal: Arc::from("shared"),
            owner: Owner::shared(),
            subject_token: None,
        }
    }

    /// The user of a stdio Manifold: the one person at this machine.
    pub fn local(team: Arc<str>) -> Self {
        Self::new(team, Arc::from("local"), None)
    }

    /// `team/principal`, as listed to an operator.
    pub fn display(&self) -> String {
        format!("{}/{}", self.team, self.principal)
    }
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller")
            .field("team", &self.team)
            .field("principal", &self.principal)
            .field(
                "subject_token",
                &self.subject_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What an upstream answered a token with: 401, or 403 (with `error="insufficient_scope"`
/// in its challenge, a step-up).
#[derive(Clone, Debug)]
pub struct Rejection {
    pub status: u16,
    /// The `WWW-Authenticate` header's value, if any.
    pub www_authenticate: Option<String>,
}

/// Why no token can be sent. Texts name the upstream and what failed, never a secret.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CredentialError {
    /// The caller must authorize in a browser: nothing kept yet, a refresh refused, a revoked
    /// connection, or more scopes needed (`scopes`).
    #[error("{upstream:?} needs the caller's authorization: {reason}")]
    ConsentNeeded {
        upstream: String,
        reason: String,
        scopes: Option<Vec<String>>,
    },
    /// An authorization server failed or refused (down, slow, an error answer, a lie in its
    /// metadata, a retry limit reached).
    #[error("authorization for {upstream:?} failed: {reason}")]
    Failed { upstream: String, reason: String },
    /// What was asked cannot be done here (token exchange for a caller without a token of
    /// its own, an unknown or expired consent, a callback with a wrong state or issuer).
    #[error("{reason}")]
    Refused { reason: String },
}

/// A consent a caller completes in a browser.
#[derive(Clone, Debug)]
pub struct ConsentLink {
    /// Random, unguessable; also the URL elicitation's `elicitationId`.
    pub id: String,
    /// `{base}/oauth/connect/{id}`: Manifold's own page, which checks who the browser user is
    /// before sending them to the authorization server.
    pub url: String,
    pub expires_at_ms: u64,
}

/// A consent the browser opened: for whom it was made.
#[derive(Clone, Debug)]
pub struct PendingConsent {
    pub upstream: String,
    pub owner: Owner,
    /// `team/principal`.
    pub principal: String,
    /// The shared identity (an operator's login): no caller to check.
    pub shared: bool,
}

/// A consent completed by its callback.
#[derive(Clone, Debug)]
pub struct Completed {
    pub upstream: String,
    pub owner: Owner,
    pub principal: String,
    /// The consent's id (the elicitation to report complete).
    pub id: String,
    /// What the starter of the consent attached (where to report it complete).
    pub binding: Option<String>,
}

/// One kept connection, as an operator sees it: never the token.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnectionInfo {
    pub upstream: String,
    pub owner: String,
    pub principal: String,
    pub scopes: Vec<String>,
    pub expires_at_ms: Option<u64>,
    pub obtained_at_ms: u64,
    pub refreshable: bool,
}

/// What the broker reports, for metrics (per upstream).
pub trait Observe: Send + Sync {
    fn consent_asked(&self, upstream: &str);
    fn consent_completed(&self, upstream: &str);
    fn consent_expired(&self, upstream: &str);
    fn refreshed(&self, upstream: &str, ok: bool);
}

/// Every upstream credential, shared behind an `Arc`.
pub struct Broker {
    inner: Arc<Inner>,
}

impl Broker {
    pub fn new(
        settings: CredentialsSettings,
        upstreams: &[UpstreamConfig],
        store: Arc<dyn TokenStore>,
        observe: Arc<dyn Observe>,
    ) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::new(Inner::new(settings, upstreams, store, observe)),
        })
    }

    /// A reload: the upstreams' auth from now on; the tokens of upstreams that are gone (or
    /// no longer have an `auth`) are dropped. Returns the keys whose tokens were dropped.
    pub async fn set_upstreams(&self, upstreams: &[UpstreamConfig]) -> Vec<String> {
        self.inner.set_upstreams(upstreams).await
    }

    /// Where browsers reach Manifold, when `public_url` is not configured: the listener's
    /// address once it is bound (`http://127.0.0.1:PORT`).
    pub fn set_base_url(&self, url: &str) {
        self.inner.set_base_url(url);
    }

    /// The upstreams whose callers each connect an account of their own (per-user OAuth).
    pub fn per_user_upstreams(&self) -> Vec<String> {
        self.inner.per_user()
    }

    pub fn auth_of(&self, upstream: &str) -> Option<UpstreamAuth> {
        self.inner.upstream(upstream).ok().map(|u| u.auth)
    }

    /// The access token to send to `upstream` for `caller` (the shared one for a shared
    /// identity or client credentials): kept, refreshed or exchanged as needed.
    pub async fn token(&self, upstream: &str, caller: &Caller) -> Result<String, CredentialError> {
        self.inner.token(upstream, caller).await
    }

    /// Whether a usable token (or the means to get one without a browser) is there.
    pub async fn ready(&self, upstream: &str, caller: &Caller) -> bool {
        self.inner.ready(upstream, caller).await
    }

    /// The upstream refused `sent`: a fresh token to try once more, or why there is none.
    pub async fn rejected(
        &self,
        upstream: &str,
        caller: &Caller,
        sent: &str,
        rejection: &Rejection,
    ) -> Result<String, CredentialError> {
        self.inner.rejected(upstream, caller, sent, rejection).await
    }

    /// Starts a consent for `caller` at `upstream`; `binding` is returned with its
    /// completion.
    pub async fn consent(
        &self,
        upstream: &str,
        caller: &Caller,
        binding: Option<String>,
    ) -> Result<ConsentLink, CredentialError> {
        self.inner.consent(upstream, caller, binding).await
    }

    /// The consent behind a link the browser opened.
    pub async fn pending(&self, id: &str) -> Result<PendingConsent, CredentialError> {
        self.inner.pending(id).await
    }

    /// The browser user proved to be `owner`: where to send them (the authorization
    /// server's authorization endpoint, with PKCE, state, resource and scopes).
    pub async fn authorize(&self, id: &str, owner: &Owner) -> Result<String, CredentialError> {
        self.inner.authorize(id, owner).await
    }

    /// The authorization server's redirect (`query`: the callback's query string): checks
    /// state (single use, unexpired) and `iss`, redeems the code, keeps the grant.
    pub async fn callback(&self, query: &str) -> Result<Completed, CredentialError> {
        self.inner.callback(query).await
    }

    pub async fn connections(
        &self,
        owner: Option<&Owner>,
    ) -> Result<Vec<ConnectionInfo>, CredentialError> {
        self.inner.connections(owner).await
    }

    pub async fn revoke(
        &self,
        upstream: Option<&str>,
        owner: &Owner,
    ) -> Result<usize, CredentialError> {
        self.inner.revoke(upstream, owner).await
    }

    /// Manifold's own Client ID Metadata Document (JSON text), served at
    /// `{public_url}/oauth/client.json` when `public_url` is https.
    pub fn client_metadata(&self) -> Option<String> {
        self.inner.client_metadata()
    }
}
