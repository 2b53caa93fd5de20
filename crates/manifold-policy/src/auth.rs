//! Authentication of HTTP hosts: an API key or a JWT bearer token selects a team.
//!
//! An API key is presented as `Authorization: Bearer <key>` or `X-API-Key: <key>` and looked
//! up by its SHA-256. A JWT is presented as a bearer token; it must be signed with an
//! asymmetric algorithm by a key of the configured JWKS (inline, or fetched from `jwks_url`
//! and cached), name the configured issuer and audience, and carry a team claim that one of
//! the teams lists. Keys and tokens are never logged or echoed: errors name what was wrong,
//! not the credential.
//!
//! The signing keys of a `jwks_url` are fetched when a token needs one that is not known yet
//! (the first token, or one signed with a rotated key), at most once per `jwks_min_refresh`;
//! concurrent requests that need a fetch wait for one shared fetch, bounded by the fetch
//! timeout. Keys that were fetched stay in use until the next fetch replaces them.
//!
//! One file: API keys, JWT checks and the JWKS cache meet in `authenticate`,
//! and the refetch rules (coalesced, rate-limited, bounded) are read beside the checks they
//! serve.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use manifold_config::{redact_url, AuthConfig, JwtConfig, KeyHash, TeamConfig};
use serde_json::{Map, Value};

/// How long one JWKS fetch may take, connection included, unless set otherwise with
/// [`Authenticator::with_fetch_timeout`].
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Bearer tokens longer than this are refused without being parsed.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// A JWKS document larger than this is refused.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Who a request runs as.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The team the credential selected.
    pub team: Arc<str>,
    /// Who, finer than the team: `key:NAME` for a named API key, `key:<KeyHash::label()>` for
    /// an unnamed one, `jwt:<iss>#<sub>` for JWTs (sub missing: `jwt:<iss>#team:<team>`).
    pub id: Arc<str>,
}

/// Why a request was not authenticated.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credentials were presented.
    #[error("no credentials")]
    Missing,
    /// Credentials were presented and refused; the text says why, for logs, and never
    /// contains the key or token.
    #[error("credentials refused: {0}")]
    Invalid(String),
}

fn invalid(why: impl Into<String>) -> AuthError {
    AuthError::Invalid(why.into())
}

/// Checks the credentials of HTTP hosts against `[auth]` and the teams' API keys and claims.
/// Shared behind an `Arc`.
pub struct Authenticator {
    /// By the SHA-256 of each key: the principal it authenticates as.
    keys: HashMap<KeyHash, Principal>,
    jwt: Option<Jwt>,
    authorization_servers: Vec<String>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("api_keys", &self.keys.len())
            .field("jwt_issuer", &self.jwt.as_ref().map(|j| &j.issuer))
            .finish()
    }
}

impl Authenticator {
    pub fn new(auth: &AuthConfig, teams: &[TeamConfig]) -> Self {
        let mut keys = HashMap::new();
        let mut claims: HashMap<String, Arc<str>> = HashMap::new();
        for team in teams {
            let name: Arc<str> = Arc::from(team.name.as_str());
            for hash in &team.api_keys {
                let named = team.key_names.iter().find(|(h, _)| h == hash);
                let id = match named {
                    Some((_, holder)) => format!("key:{holder}"),
                    None => format!("key:{}", hash.label()),
                };
                keys.entry(*hash).or_insert_with(|| Principal {
                    team: name.clone(),
                    id: Arc::from(id),
                });
            }
            for claim in &team.claims {
                claims.entry(claim.clone()).or_insert_with(|| name.clone());
            }
        }
        Self {
            keys,
            jwt: auth.jwt.as_ref().map(|config| Jwt::new(config, claims)),
            authorization_servers: auth.authorization_servers.clone(),
        }
    }

    /// Sets how long one JWKS fetch may take (default [`DEFAULT_FETCH_TIMEOUT`]).
    pub fn with_fetch_timeout(mut self, timeout: Duration) -> Self {
        if let Some(fetcher) = self.jwt.as_mut().and_then(|j| j.fetcher.as_mut()) {
            fetcher.timeout = timeout;
        }
        self
    }

    /// Whether hosts must authenticate at all (some team has API keys, or JWTs are
    /// configured).
    pub fn required(&self) -> bool {
        !self.keys.is_empty() || self.jwt.is_some()
    }

    /// Checks the credentials of a request. `authorization`: the Authorization header's
    /// value; `api_key`: X-API-Key's. A bearer token takes precedence over X-API-Key. A bearer
    /// value that has the shape of a JWT (three base64url parts) is validated as a JWT when
    /// JWTs are configured, otherwise it is looked up as an API key.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        api_key: Option<&str>,
    ) -> Result<Principal, AuthError> {
        match self.credential(authorization, api_key)? {
            Credential::ApiKey(key) => self.api_key(key),
            Credential::Jwt(jwt, token) => jwt.verify(token).await,
        }
    }

    /// The fast path without I/O: `Some(result)` when no key fetch is needed (API keys; JWTs
    /// whose key is cached, or that are refused before a key is needed), `None` when
    /// [`authenticate`](Self::authenticate) must be awaited.
    pub fn authenticate_now(
        &self,
        authorization: Option<&str>,
        api_key: Option<&str>,
    ) -> Option<Result<Principal, AuthError>> {
        match self.credential(authorization, api_key) {
            Err(e) => Some(Err(e)),
            Ok(Credential::ApiKey(key)) => Some(self.api_key(key)),
            Ok(Credential::Jwt(jwt, token)) => jwt.verify_now(token),
        }
    }

    /// Fetches the signing keys of `jwks_url` if none were fetched yet (or the last fetch is
    /// older than `jwks_min_refresh`), so that the first requests need not wait for them.
    /// Failures are logged; requests fetch again when they need a key.
    pub async fn prefetch(&self) {
        if let Some(jwt) = &self.jwt {
            jwt.refresh().await;
        }
    }

    /// The value of WWW-Authenticate for a 401: `Bearer resource_metadata="<metadata_url>"`,
    /// plus `error="invalid_token"` and an `error_description` (without secrets) when a
    /// credential was given but refused.
    pub fn challenge(&self, metadata_url: &str, error: &AuthError) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", quoted_text(metadata_url));
        if let AuthError::Invalid(why) = error {
            value.push_str(", error=\"invalid_token\", error_description=\"");
            value.push_str(&quoted_text(why));
            value.push('"');
        }
        value
    }

    /// The RFC 9728 protected resource metadata document (JSON text).
    pub fn metadata(&self, resource: &str) -> String {
        serde_json::json!({
            "resource": resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "Manifold",
        })
        .to_string()
    }

    fn credential<'a>(
        &'a self,
        authorization: Option<&'a str>,
        api_key: Option<&'a str>,
    ) -> Result<Credential<'a>, AuthError> {
        let api_key = api_key.map(str::trim).filter(|k| !k.is_empty());
        let bearer = match authorization.map(str::trim).filter(|a| !a.is_empty()) {
            None => None,
            Some(value) => match bearer_token(value) {
                Some(token) if !token.is_empty() => Some(token),
                Some(_) if api_key.is_none() => return Err(invalid("the bearer token is empty")),
                None if api_key.is_none() => {
                    return Err(invalid(
                        "the Authorization header is not a Bearer credential",
                    ))
                }
                _ => None,
            },
        };
        match (bearer, api_key) {
            (Some(token), _) => match &self.jwt {
                Some(jwt) if looks_like_jwt(token) => Ok(Credential::Jwt(jwt, token)),
                _ => Ok(Credential::ApiKey(token)),
            },
            (None, Some(key)) => Ok(Credential::ApiKey(key)),
            (None, None) => Err(AuthError::Missing),
        }
    }

    fn api_key(&self, key: &str) -> Result<Principal, AuthError> {
        self.keys
            .get(&KeyHash::of(key))
            .cloned()
            .ok_or_else(|| invalid("the API key is not known"))
    }
}

enum Credential<'a> {
    ApiKey(&'a str),
    Jwt(&'a Jwt, &'a str),
}

/// The token of a `Bearer` credential (scheme matched without regard to case).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// Three parts of base64url text separated by dots, the first two not empty (an unsigned
/// token has an empty third part; it is taken as a JWT so that it is refused as one).
fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let base64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(h), Some(p), Some(s), None) => {
            !h.is_empty() && !p.is_empty() && base64url(h) && base64url(p) && base64url(s)
        }
        _ => false,
    }
}

/// Text that may stand inside a quoted-string of WWW-Authenticate, as RFC 6750 allows for
/// `error_description`: printable ASCII without `"` and `\`, at most 200 characters.
fn quoted_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            ' '..='~' if c != '\\' => c,
            _ => '?',
        })
        .take(200)
        .collect()
}

/// JWT validation: the rules of `[auth.jwt]`, the known signing keys, and their fetching.
struct Jwt {
    issuer: String,
    audience: String,
    team_claim: String,
    /// Seconds.
    leeway: u64,
    /// Team by claim value.
    claims: HashMap<String, Arc<str>>,
    /// The keys of the inline `jwks`.
    inline: Vec<Arc<Key>>,
    /// The keys in use: the inline ones, then the last fetched ones.
    keys: parking_lot::RwLock<Arc<[Arc<Key>]>>,
    fetcher: Option<Fetcher>,
}

/// One signing key, with the validation of tokens it signs.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
    validation: Validation,
}

impl Key {
    fn accepts(&self, alg: Algorithm) -> bool {
        self.validation.algorithms.contains(&alg)
    }
}

/// What a JWT's header says, before its signature is checked.
struct TokenHeader {
    alg: Algorithm,
    kid: Option<String>,
}

impl Jwt {
    fn new(config: &JwtConfig, claims: HashMap<String, Arc<str>>) -> Self {
        // The pure-Rust provider, whatever features other crates turn on for jsonwebtoken;
        // an error means a provider was installed already, which is as good.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let mut jwt = Self {
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            team_claim: config.team_claim.clone(),
            leeway: config.leeway.as_secs() + u64::from(config.leeway.subsec_nanos() > 0),
            claims,
            inline: Vec::new(),
            keys: parking_lot::RwLock::new(Arc::from(Vec::new())),
            fetcher: config
                .jwks_url
                .as_ref()
                .map(|url| Fetcher::new(url, config.jwks_min_refresh)),
        };
        if let Some(text) = &config.jwks {
            match jwt.parse_jwks(text) {
                Ok(keys) => jwt.inline = keys,
                Err(e) => tracing::error!(error = %e, "auth.jwt.jwks is not a usable JWKS"),
            }
            if jwt.inline.is_empty() {
                tracing::warn!("auth.jwt.jwks has no key that can verify tokens");
            }
        }
        *jwt.keys.get_mut() = Arc::from(jwt.inline.clone());
        jwt
    }

    /// `Some` when the token is decided without fetching keys.
    fn verify_now(&self, token: &str) -> Option<Result<Principal, AuthError>> {
        let header = match self.header(token) {
            Ok(header) => header,
            Err(e) => return Some(Err(e)),
        };
        match self.find_key(&header) {
            Ok(Some(key)) => Some(self.check(token, &key)),
            Ok(None) if self.fetcher.as_ref().is_some_and(Fetcher::due) => None,
            Ok(None) => Some(Err(unknown_key(&header))),
            Err(e) => Some(Err(e)),
        }
    }

    async fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        if let Some(result) = self.verify_now(token) {
            return result;
        }
        self.refresh().await;
        let header = self.header(token)?;
        match self.find_key(&header)? {
            Some(key) => self.check(token, &key),
            None => Err(unknown_key(&header)),
        }
    }

    fn header(&self, token: &str) -> Result<TokenHeader, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("the token is too long"));
        }
        let part = token.split('.').next().unwrap_or_default();
        let header: Value = URL_SAFE_NO_PAD
            .decode(part)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| invalid("the token's header is not base64url JSON"))?;
        let alg = match header.get("alg").and_then(Value::as_str) {
            None => return Err(invalid("the token's header has no alg")),
            Some(alg) => alg,
        };
        let alg = match alg {
            "RS256" => Algorithm::RS256,
            "RS384" => Algorithm::RS384,
            "RS512" => Algorithm::RS512,
            "PS256" => Algorithm::PS256,
            "PS384" => Algorithm::PS384,
            "PS512" => Algorithm::PS512,
            "ES256" => Algorithm::ES256,
            "ES384" => Algorithm::ES384,
            "EdDSA" => Algorithm::EdDSA,
            "none" => return Err(invalid("unsigned tokens (alg none) are not accepted")),
            "HS256" | "HS384" | "HS512" => {
                return Err(invalid(
                    "tokens signed with a shared secret (HMAC) are not accepted",
                ))
            }
            _ => return Err(invalid("the token's signing algorithm is not accepted")),
        };
        let kid = match header.get("kid") {
            None | Some(Value::Null) => None,
            Some(Value::String(kid)) => Some(kid.clone()),
            Some(_) => return Err(invalid("the token's kid is not a string")),
        };
        Ok(TokenHeader { alg, kid })
    }

    /// The key that verifies the token: `Ok(None)` when no known key fits (a fetch may find
    /// one).
    fn find_key(&self, header: &TokenHeader) -> Result<Option<Arc<Key>>, AuthError> {
        let keys = self.keys.read().clone();
        match &header.kid {
            Some(kid) => match keys.iter().find(|k| k.kid.as_deref() == Some(kid.as_str())) {
                Some(key) if key.accepts(header.alg) => Ok(Some(key.clone())),
                Some(_) => Err(invalid(
                    "the token's algorithm is not one its signing key is for",
                )),
                None => Ok(None),
            },
            None => {
                let mut fitting = keys.iter().filter(|k| k.accepts(header.alg));
                match (fitting.next(), fitting.next()) {
                    (Some(key), None) => Ok(Some(key.clone())),
                    (Some(_), Some(_)) => Err(invalid(
                        "the token names no key id (kid) and several signing keys could fit",
                    )),
                    (None, _) => Ok(None),
                }
            }
        }
    }

    /// Signature, issuer, audience, times, and the team.
    fn check(&self, token: &str, key: &Key) -> Result<Principal, AuthError> {
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &key.validation)
            .map_err(|e| invalid(refusal(e.kind())))?
            .claims;
        let team = self.team(&claims)?;
        let id = match claims.get("sub").and_then(Value::as_str) {
            Some(sub) => format!("jwt:{}#{sub}", self.issuer),
            None => format!("jwt:{}#team:{team}", self.issuer),
        };
        Ok(Principal {
            team,
            id: Arc::from(id),
        })
    }

    fn team(&self, claims: &Map<String, Value>) -> Result<Arc<str>, AuthError> {
        let no_team = || {
            invalid(format!(
                "the token's {:?} claim names no team",
                self.team_claim
            ))
        };
        match claims.get(&self.team_claim) {
            None | Some(Value::Null) => Err(invalid(format!(
                "the token has no {:?} claim",
                self.team_claim
            ))),
            Some(Value::String(value)) => self.claims.get(value).cloned().ok_or_else(no_team),
            Some(Value::Array(values)) => values
                .iter()
                .filter_map(Value::as_str)
                .find_map(|value| self.claims.get(value).cloned())
                .ok_or_else(no_team),
            Some(_) => Err(invalid(format!(
                "the token's {:?} claim is not a string or an array of strings",
                self.team_claim
            ))),
        }
    }

    /// Fetches the JWKS once if a fetch is due, sharing one fetch among concurrent callers.
    async fn refresh(&self) {
        let Some(fetcher) = &self.fetcher else {
            return;
        };
        let seen = fetcher.generation.load(Ordering::Acquire);
        let _turn = fetcher.turn.lock().await;
        if fetcher.generation.load(Ordering::Acquire) != seen || !fetcher.due() {
            // Another request fetched while this one waited, or one did recently.
            return;
        }
        let result = fetcher.fetch().await;
        match result.and_then(|text| self.parse_jwks(&text)) {
            Ok(fetched) => {
                tracing::debug!(
                    url = %redact_url(&fetcher.url),
                    keys = fetched.len(),
                    "fetched the JWT signing keys"
                );
                let mut keys = self.inline.clone();
                keys.extend(fetched);
                *self.keys.write() = Arc::from(keys);
            }
            Err(e) => tracing::warn!(
                url = %redact_url(&fetcher.url),
                error = %e,
                "could not fetch the JWT signing keys; the keys known before stay in use"
            ),
        }
        // Only now is no fetch due: a request that finds no key before the new keys are
        // stored must wait for this fetch (on `turn`), not be refused at once.
        *fetcher.last_attempt.lock() = Some(Instant::now());
        fetcher.generation.fetch_add(1, Ordering::Release);
    }

    /// The usable signing keys of a JWKS document; keys that cannot verify tokens (encryption
    /// keys, symmetric keys, unsupported curves) are skipped.
    fn parse_jwks(&self, text: &str) -> Result<Vec<Arc<Key>>, String> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON: {e}"))?;
        let entries = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("the JWKS has no \"keys\" array")?;
        let mut keys = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let parsed = serde_json::from_value::<Jwk>(entry.clone())
                .map_err(|_| "not a JWK")
                .and_then(|jwk| self.key(&jwk));
            match parsed {
                Ok(key) => keys.push(Arc::new(key)),
                Err(why) => tracing::debug!(index = i, why, "skipped a key of the JWKS"),
            }
        }
        Ok(keys)
    }

    fn key(&self, jwk: &Jwk) -> Result<Key, &'static str> {
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != PublicKeyUse::Signature)
        {
            return Err("not a signing key (use)");
        }
        if jwk
            .common
            .key_operations
            .as_ref()
            .is_some_and(|ops| !ops.contains(&KeyOperations::Verify))
        {
            return Err("not a verification key (key_ops)");
        }
        let family: &[Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => &[
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ],
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => &[Algorithm::ES256],
                EllipticCurve::P384 => &[Algorithm::ES384],
                _ => return Err("an unsupported elliptic curve"),
            },
            AlgorithmParameters::OctetKeyPair(p) => match p.curve {
                EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
                _ => return Err("an unsupported curve"),
            },
            AlgorithmParameters::OctetKey(_) => return Err("a symmetric key"),
            _ => return Err("an unsupported key type"),
        };
        let algorithms = match jwk.common.key_algorithm {
            None => family.to_vec(),
            Some(declared) => match Algorithm::try_from(declared) {
                Ok(alg) if family.contains(&alg) => vec![alg],
                _ => return Err("its alg is not a signing algorithm for its key type"),
            },
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|_| "a malformed key")?;
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.leeway = self.leeway;
        Ok(Key {
            kid: jwk.common.key_id.clone(),
            key,
            validation,
        })
    }
}

fn unknown_key(header: &TokenHeader) -> AuthError {
    match &header.kid {
        Some(kid)
            if kid.len() <= 64
                && kid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) =>
        {
            invalid(format!("no known signing key has the token's kid {kid:?}"))
        }
        Some(_) => invalid("no known signing key has the token's kid"),
        None => invalid("no known signing key fits the token"),
    }
}

/// Why `jsonwebtoken` refused a token, in words that contain nothing of the token.
fn refusal(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the token's audience (aud) is not this server".into(),
        ErrorKind::InvalidIssuer => "the token's issuer (iss) is not accepted".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::InvalidAlgorithm => {
            "the token's algorithm is not one its signing key is for".into()
        }
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "exp" | "iss" | "aud" | "nbf" | "sub" => format!("the token has no {claim} claim"),
            _ => "the token lacks a required claim".into(),
        },
        ErrorKind::InvalidClaimFormat(_) => "a claim of the token is malformed".into(),
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => "the token is malformed".into(),
        ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => "the signing key cannot verify this token".into(),
        _ => "the token could not be verified".into(),
    }
}

/// Fetches a JWKS document over HTTP.
struct Fetcher {
    url: String,
    client: Option<reqwest::Client>,
    timeout: Duration,
    min_refresh: Duration,
    /// When the last fetch ended (whether it succeeded or not).
    last_attempt: parking_lot::Mutex<Option<Instant>>,
    /// Counts fetches, so that a caller that waited for another's fetch does not fetch again.
    generation: AtomicU64,
    /// Held while fetching: one fetch at a time.
    turn: tokio::sync::Mutex<()>,
}

impl Fetcher {
    fn new(url: &str, min_refresh: Duration) -> Self {
        let client = match reqwest::Client::builder()
            .user_agent(concat!("manifold/", env!("CARGO_PKG_VERSION")))
            .build()
        {
            Ok(client) => Some(client),
            Err(e) => {
                tracing::error!(error = %e, "no HTTP client for fetching the JWT signing keys");
                None
            }
        };
        Self {
            url: url.to_owned(),
            client,
            timeout: DEFAULT_FETCH_TIMEOUT,
            min_refresh,
            last_attempt: parking_lot::Mutex::new(None),
            generation: AtomicU64::new(0),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether a fetch may happen now: none yet, or the last one ended `min_refresh` ago.
    fn due(&self) -> bool {
        self.last_attempt
            .lock()
            .is_none_or(|at| at.elapsed() >= self.min_refresh)
    }

    async fn fetch(&self) -> Result<String, String> {
        let client = self.client.as_ref().ok_or("no HTTP client")?;
        let fetch = async {
            let mut response = client
                .get(&self.url)
                .header(reqwest::header::ACCEPT, "application/json")
                .timeout(self.timeout)
                .send()
                .await
                .map_err(|e| format!("request failed: {}", e.without_url()))?;
            if !response.status().is_success() {
                return Err(format!("the server answered {}", response.status()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| format!("reading the body failed: {}", e.without_url()))?
            {
                if body.len() + chunk.len() > MAX_JWKS_BYTES {
                    return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            String::from_utf8(body).map_err(|_| "the JWKS is not UTF-8".to_owned())
        };
        tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn authenticator_is_send_and_sync() {
        assert_send_sync::<Authenticator>();
    }

    #[test]
    fn jwt_shapes() {
        assert!(looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(looks_like_jwt("eyJh.eyJz."));
        assert!(!looks_like_jwt("eyJh.eyJz"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt(".eyJz.c2ln"));
        assert!(!looks_like_jwt("a+b.c.d"));
        assert!(!looks_like_jwt("a-plain-api-key-0123456789"));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("BEARER"), Some(""));
        assert_eq!(bearer_token("Basic abc"), None);
    }

    #[test]
    fn descriptions_are_safe_in_a_quoted_string() {
        assert_eq!(quoted_text("a \"b\" \\c\nd"), "a 'b' ?c?d");
        assert_eq!(quoted_text(&"x".repeat(500)).len(), 200);
    }
}
