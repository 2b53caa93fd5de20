//! Who the browser user is, by an OpenID Connect login at the `[auth.jwt]` issuer: the
//! authorization code grant with PKCE and a nonce, with Manifold's own login client
//! (`[credentials] login_client_id`). The ID token is checked as a host's JWT is (signature
//! by the issuer's keys, issuer, expiry, team claim) with the login client as its audience,
//! and its nonce must be the one this login sent. Its (team, subject) must be the consent's
//! owner; or, for a sign-in to the users' page, it is who is signed in.
//!
//! A login in progress is kept in this process: the issuer must send the browser back to the
//! replica that started it (sticky sessions, or one replica serving the pages).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use manifold_auth::Owner;
use manifold_config::{AuthConfig, JwtConfig, Secret, TeamConfig};
use manifold_policy::{Authenticator, Principal};
use sha2::{Digest, Sha256};

use crate::markup::url_encode;

use super::{authorize, page, CredentialPages};

/// Logins in progress are at most this many; the oldest expire first.
const MAX_STARTED: usize = 10_000;
/// A discovery document or a token answer larger than this is refused.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The OpenID Connect login of browser users.
#[derive(Clone, Debug)]
pub struct LoginSettings {
    /// `[auth.jwt]`: the issuer, its keys and the team claim.
    pub jwt: JwtConfig,
    /// The teams, whose claims the ID token's team claim is looked up in.
    pub teams: Vec<TeamConfig>,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    /// `[credentials] public_url`; `None`: the address the browser used.
    pub public_url: Option<String>,
    /// How long one request to the issuer may take.
    pub timeout: Duration,
    /// How long a login may take (`consent_timeout`).
    pub ttl: Duration,
}

pub(crate) struct Login {
    settings: LoginSettings,
    http: Option<reqwest::Client>,
    /// The issuer's endpoints and the ID token checks, once discovered.
    issuer: tokio::sync::OnceCell<Issuer>,
    /// By `state`: the logins in progress.
    started: Mutex<HashMap<String, Started>>,
}

struct Issuer {
    authorization_endpoint: String,
    token_endpoint: String,
    id_tokens: Authenticator,
}

/// What a login is for.
pub(crate) enum Purpose {
    /// Proving the browser user is the owner of this consent.
    Consent(String),
    /// Signing in to the users' page.
    Account,
    /// Signing in to the web console, on the admin address.
    Console,
}

impl Purpose {
    /// The path the issuer sends the browser back to.
    fn callback(&self) -> &'static str {
        match self {
            Self::Consent(_) | Self::Account => "/oauth/login/callback",
            Self::Console => crate::console::OIDC_CALLBACK,
        }
    }
}

/// One login in progress.
pub(crate) struct Started {
    pub(crate) purpose: Purpose,
    nonce: String,
    verifier: String,
    redirect_uri: String,
    at: Instant,
}

impl Login {
    pub(crate) fn new(settings: LoginSettings) -> Self {
        let http = reqwest::Client::builder()
            .user_agent(concat!("manifold/", env!("CARGO_PKG_VERSION")))
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| tracing::error!("no HTTP client for the OpenID Connect login: {e}"))
            .ok();
        Self {
            settings,
            http,
            issuer: tokio::sync::OnceCell::new(),
            started: Mutex::new(HashMap::new()),
        }
    }

    /// Sends the browser to the issuer to sign in, for `purpose`.
    pub(crate) async fn start(&self, req: &HttpRequest, purpose: Purpose) -> HttpResponse {
        let issuer = match self.issuer().await {
            Ok(issuer) => issuer,
            Err(why) => return unavailable(&why),
        };
        let (Ok(state), Ok(nonce), Ok(a), Ok(b)) = (random(), random(), random(), random()) else {
            return unavailable("no random source");
        };
        let verifier = format!("{a}{b}");
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let base = self
            .settings
            .public_url
            .clone()
            .unwrap_or_else(|| crate::base_url(req));
        let redirect_uri = format!("{}{}", base.trim_end_matches('/'), purpose.callback());
        let url = with_query(
            &issuer.authorization_endpoint,
            &[
                ("response_type", "code"),
                ("client_id", &self.settings.client_id),
                ("redirect_uri", &redirect_uri),
                ("scope", "openid"),
                ("state", &state),
                ("nonce", &nonce),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
            ],
        );
        self.keep(
            state,
            Started {
                purpose,
                nonce,
                verifier,
                redirect_uri,
                at: Instant::now(),
            },
        );
        page::redirect(StatusCode::FOUND, &url)
    }

    fn keep(&self, state: String, started: Started) {
        let ttl = self.settings.ttl;
        let Ok(mut map) = self.started.lock() else {
            return;
        };
        map.retain(|_, s| s.at.elapsed() < ttl);
        if map.len() >= MAX_STARTED {
            if let Some(oldest) = map.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| k.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(state, started);
    }

    /// The login `state` started, once: a second callback with it finds nothing.
    pub(crate) fn take(&self, state: &str) -> Option<Started> {
        let started = self.started.lock().ok()?.remove(state)?;
        (started.at.elapsed() < self.settings.ttl).then_some(started)
    }

    async fn issuer(&self) -> Result<&Issuer, String> {
        self.issuer.get_or_try_init(|| self.discover()).await
    }

    /// Reads the issuer's `/.well-known/openid-configuration`.
    async fn discover(&self) -> Result<Issuer, String> {
        let expected = self.settings.jwt.issuer.trim_end_matches('/');
        let url = format!("{expected}/.well-known/openid-configuration");
        let doc = self.get_json(self.http()?.get(&url)).await?;
        let field = |name: &str| {
            doc.get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("the issuer's OpenID configuration has no {name}"))
        };
        if field("issuer")?.trim_end_matches('/') != expected {
            return Err("the issuer's OpenID configuration names another issuer".into());
        }
        let mut jwt = self.settings.jwt.clone();
        jwt.audience.clone_from(&self.settings.client_id);
        if jwt.jwks_url.is_none() && jwt.jwks.is_none() {
            jwt.jwks_url = Some(field("jwks_uri")?);
        }
        // ID tokens only: the teams' API keys must not be accepted as one.
        let teams: Vec<TeamConfig> = self
            .settings
            .teams
            .iter()
            .map(|t| TeamConfig {
                api_keys: Vec::new(),
                ..t.clone()
            })
            .collect();
        let auth = AuthConfig {
            jwt: Some(jwt),
            ..AuthConfig::default()
        };
        Ok(Issuer {
            authorization_endpoint: field("authorization_endpoint")?,
            token_endpoint: field("token_endpoint")?,
            id_tokens: Authenticator::new(&auth, &teams).with_fetch_timeout(self.settings.timeout),
        })
    }

    fn http(&self) -> Result<&reqwest::Client, String> {
        self.http
            .as_ref()
            .ok_or_else(|| "no HTTP client".to_owned())
    }

    /// Sends `request` and reads a JSON object back, bounded in size.
    async fn get_json(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let mut response = request
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("the issuer could not be reached: {}", e.without_url()))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| e.without_url().to_string())?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err("the issuer's answer is too large".into());
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(format!("the issuer answered {status}"));
        }
        serde_json::from_slice(&body).map_err(|_| "the issuer's answer is not a JSON object".into())
    }

    /// Redeems the code for an ID token and checks it: who signed in.
    pub(crate) async fn signed_in(
        &self,
        code: &str,
        started: &Started,
    ) -> Result<Principal, String> {
        let issuer = self.issuer().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &started.redirect_uri),
            ("code_verifier", &started.verifier),
            ("client_id", &self.settings.client_id),
        ];
        if let Some(secret) = &self.settings.client_secret {
            form.push(("client_secret", secret.expose()));
        }
        let request = self.http()?.post(&issuer.token_endpoint).form(&form);
        let answer = self.get_json(request).await?;
        let id_token = answer
            .get("id_token")
            .and_then(serde_json::Value::as_str)
            .ok_or("the issuer's answer has no ID token")?;
        let principal = issuer
            .id_tokens
            .authenticate(Some(&format!("Bearer {id_token}")), None)
            .await
            .map_err(|e| format!("the ID token was refused: {e}"))?;
        if nonce_of(id_token).as_deref() != Some(started.nonce.as_str()) {
            return Err("the ID token's nonce is not this login's".into());
        }
        Ok(principal)
    }
}

/// What the issuer sends the browser back with.
#[derive(serde::Deserialize)]
pub(crate) struct Answer {
    pub(crate) state: Option<String>,
    pub(crate) code: Option<String>,
    pub(crate) error: Option<String>,
}

/// `GET /oauth/login/callback`: the browser user signed in (or did not); on to the
/// authorization server when they are the consent's owner.
pub(super) async fn callback(
    answer: web::Query<Answer>,
    pages: web::Data<CredentialPages>,
) -> HttpResponse {
    let Some(login) = &pages.login else {
        return page::unusable();
    };
    let Some(started) = answer.state.as_deref().and_then(|s| login.take(s)) else {
        return page::unusable();
    };
    let code = match (&answer.code, &answer.error) {
        (Some(code), None) => code,
        (_, error) => {
            let error = error
                .as_deref()
                .filter(|e| is_error_code(e))
                .unwrap_or("no code");
            return page::text(
                StatusCode::BAD_REQUEST,
                "Not signed in",
                &format!("The sign-in did not complete ({error})."),
            );
        }
    };
    let signed_in = login.signed_in(code, &started).await;
    let principal = match signed_in {
        Ok(principal) => principal,
        Err(why) => {
            tracing::info!("an OpenID Connect login failed: {why}");
            return page::text(
                StatusCode::BAD_REQUEST,
                "Not signed in",
                &format!("The sign-in did not complete: {why}."),
            );
        }
    };
    let consent = match &started.purpose {
        Purpose::Consent(consent) => consent,
        Purpose::Account => return super::account::signed_in(&pages, &principal),
        // The console's sign-ins come back to the admin address, never here.
        Purpose::Console => return page::unusable(),
    };
    let Ok(pending) = pages.consents.pending(consent).await else {
        return page::unusable();
    };
    let owner = Owner::caller(&principal.team, &principal.id);
    if owner != pending.owner {
        return page::someone_else();
    }
    authorize(&pages, consent, &owner, StatusCode::FOUND).await
}

/// An OAuth error code is printable ASCII without quotes or backslashes (RFC 6749): anything
/// else is not repeated on a page.
pub(crate) fn is_error_code(text: &str) -> bool {
    text.len() <= 64 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The `nonce` claim of a token whose signature was already verified.
fn nonce_of(token: &str) -> Option<String> {
    let payload = URL_SAFE_NO_PAD.decode(token.split('.').nth(1)?).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    claims.get("nonce")?.as_str().map(str::to_owned)
}

fn unavailable(why: &str) -> HttpResponse {
    tracing::warn!("the OpenID Connect login cannot start: {why}");
    page::text(
        StatusCode::BAD_GATEWAY,
        "Sign-in unavailable",
        "Signing in is not possible right now. Try again later.",
    )
}

/// 128 random bits as hex.
fn random() -> Result<String, HttpResponse> {
    crate::new_token()
}

/// `url` with `params` added to its query, percent-encoded.
fn with_query(url: &str, params: &[(&str, &str)]) -> String {
    let mut out = url.to_owned();
    let mut sep = if url.contains('?') { '&' } else { '?' };
    for (name, value) in params {
        out.push(sep);
        out.push_str(&url_encode(name));
        out.push('=');
        out.push_str(&url_encode(value));
        sep = '&';
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded() {
        let url = super::with_query(
            "https://idp/authorize?x=1",
            &[("redirect_uri", "http://a/b c")],
        );
        assert_eq!(
            url,
            "https://idp/authorize?x=1&redirect_uri=http%3A%2F%2Fa%2Fb%20c"
        );
    }
}
