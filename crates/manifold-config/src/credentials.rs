//! Upstream credentials: how Manifold authenticates to an HTTP upstream as an OAuth client
//! (`[upstreams.NAME.auth]`), and where the tokens it obtains are kept (`[credentials]`).
//!
//! Static headers (`headers`, and a team's `headers.<upstream>`) stay what they are; an `auth`
//! table adds a token Manifold obtains itself. The host's own token is never forwarded to an
//! upstream (the MCP specification forbids token passthrough): `token_exchange` trades it for
//! one the upstream accepts.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::policy::RedisConfig;

mod raw;

pub(crate) use raw::{credentials, upstream_auth, RawAuth, RawCredentials};

/// A secret from the config (`${ENV}` or a file): never printed, by Debug or otherwise.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret's text, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A 32-byte AES-256-GCM key that seals tokens at rest; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey(pub [u8; 32]);

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted key>")
    }
}

/// How Manifold obtains the token it sends to one HTTP upstream (`[upstreams.NAME.auth]`).
#[derive(Clone, PartialEq, Debug)]
pub enum UpstreamAuth {
    /// `mode = "oauth"`: the authorization code grant with PKCE, as the MCP authorization
    /// specification's client.
    OAuth(OAuthSettings),
    /// `mode = "client_credentials"`: the `io.modelcontextprotocol/oauth-client-credentials`
    /// extension, for upstreams a machine uses as itself.
    ClientCredentials(ClientCredentialsSettings),
    /// `mode = "token_exchange"`: the caller's own token exchanged (RFC 8693) for one the
    /// upstream accepts.
    TokenExchange(TokenExchangeSettings),
    /// `mode = "identity_assertion"`: the enterprise-managed authorization extension: the
    /// caller's identity token exchanged at the identity provider for an identity assertion
    /// grant, redeemed with the JWT-bearer grant at the upstream's authorization server.
    IdentityAssertion(IdentityAssertionSettings),
}

impl UpstreamAuth {
    /// The mode as written in the config.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::OAuth(_) => "oauth",
            Self::ClientCredentials(_) => "client_credentials",
            Self::TokenExchange(_) => "token_exchange",
            Self::IdentityAssertion(_) => "identity_assertion",
        }
    }

    /// Whether each caller has a token of their own (per-user OAuth, token exchange, identity
    /// assertion), so that a caller needs a connection of their own to the upstream.
    pub fn per_caller(&self) -> bool {
        match self {
            Self::OAuth(o) => o.identity == Identity::PerUser,
            Self::ClientCredentials(_) => false,
            Self::TokenExchange(_) | Self::IdentityAssertion(_) => true,
        }
    }
}

/// Whose account an OAuth upstream is used as (`identity`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Identity {
    /// `"per_user"` (the default): each caller authorizes their own account; tokens are kept
    /// per (caller, upstream).
    #[default]
    PerUser,
    /// `"shared"`: one authorization for the upstream, made by an operator (`manifold login`).
    Shared,
}

/// `mode = "oauth"`.
#[derive(Clone, PartialEq, Debug)]
pub struct OAuthSettings {
    pub identity: Identity,
    pub client: ClientSettings,
    /// Scopes to ask for, overriding what discovery finds (`WWW-Authenticate`'s `scope`,
    /// else the resource's `scopes_supported`); `None`: discovered.
    pub scopes: Option<Vec<String>>,
    /// The authorization server's issuer, when the upstream's metadata must not be trusted to
    /// name it (`authorization_server`); `None`: discovered from the upstream.
    pub authorization_server: Option<String>,
    /// For a per-user upstream: how its catalog is read before any caller connected
    /// (`catalog = "shared_login"`: with an operator's shared login). `None`: its tools join
    /// a caller's view once that caller has connected.
    pub catalog_login: bool,
}

/// Who Manifold is to an authorization server. Tried in this order: a Client ID Metadata
/// Document (when the server supports them), a pre-registered client, dynamic registration.
#[derive(Clone, Default, PartialEq, Debug)]
pub struct ClientSettings {
    /// A pre-registered client (`client_id`).
    pub client_id: Option<String>,
    /// Its secret (`client_secret`, usually `${ENV}`); `None`: a public client.
    pub client_secret: Option<Secret>,
    /// The URL of a Client ID Metadata Document the operator hosts (`client_metadata_url`).
    /// `None`: Manifold's own document at `[credentials] public_url`, when that is https.
    pub metadata_url: Option<String>,
    /// Whether dynamic client registration (RFC 7591) may be used when nothing else applies
    /// (`dynamic_registration`, default true).
    pub dynamic_registration: bool,
}

/// How a client authenticates to a token endpoint with a key (`private_key_jwt`).
#[derive(Clone, PartialEq, Debug)]
pub struct SigningKey {
    /// PEM text of the private key (RSA or EC), from `private_key` (`${ENV}`) or
    /// `private_key_file`.
    pub pem: Secret,
    /// `RS256`, `ES256`, ... (`algorithm`, default `RS256`).
    pub algorithm: String,
    /// `kid` of the JWT header (`key_id`).
    pub key_id: Option<String>,
}

/// `mode = "client_credentials"`.
#[derive(Clone, PartialEq, Debug)]
pub struct ClientCredentialsSettings {
    pub client_id: String,
    /// `client_secret` (sent as the token endpoint's metadata prefers), or a signing key
    /// (`private_key_jwt`); exactly one.
    pub client_secret: Option<Secret>,
    pub signing_key: Option<SigningKey>,
    pub scopes: Option<Vec<String>>,
    /// `None`: discovered from the upstream, as for `oauth`.
    pub token_endpoint: Option<String>,
}

/// `mode = "token_exchange"`.
#[derive(Clone, PartialEq, Debug)]
pub struct TokenExchangeSettings {
    /// Where the exchange is made (`token_endpoint`).
    pub token_endpoint: String,
    /// How Manifold authenticates there (`client_id`, `client_secret`).
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    pub audience: Option<String>,
    /// `None`: the upstream's URL.
    pub resource: Option<String>,
    pub scopes: Option<Vec<String>>,
    /// What the caller's token is (`subject_token_type`, default
    /// `urn:ietf:params:oauth:token-type:jwt`).
    pub subject_token_type: String,
}

/// `mode = "identity_assertion"`.
#[derive(Clone, PartialEq, Debug)]
pub struct IdentityAssertionSettings {
    /// The identity provider's token endpoint, where the caller's identity token becomes an
    /// identity assertion grant (`idp_token_endpoint`).
    pub idp_token_endpoint: String,
    pub idp_client_id: Option<String>,
    pub idp_client_secret: Option<Secret>,
    /// The upstream's authorization server (its issuer, `audience` of the grant); `None`:
    /// discovered from the upstream.
    pub authorization_server: Option<String>,
    /// Manifold's client at that authorization server.
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub scopes: Option<Vec<String>>,
    /// What the caller's token is (`subject_token_type`, default
    /// `urn:ietf:params:oauth:token-type:id_token`).
    pub subject_token_type: String,
}

/// `[credentials]`: where tokens are kept, and where browsers reach Manifold.
#[derive(Clone, PartialEq, Debug)]
pub struct CredentialsSettings {
    /// The URL browsers reach Manifold's host listener at (`public_url`): the consent links,
    /// the callback (`{public_url}/oauth/callback`) and Manifold's own Client ID Metadata
    /// Document (`{public_url}/oauth/client.json`) are under it. `None`: the listener's own
    /// address (loopback callbacks, for one machine).
    pub public_url: Option<String>,
    /// Where a stdio Manifold listens for callbacks (`callback_listen`, default
    /// `127.0.0.1:0`).
    pub callback_listen: Option<String>,
    pub store: TokenStoreSettings,
    /// AES-256-GCM keys tokens are sealed with at rest: the first seals, every one opens
    /// (`key`, then `previous_keys`, for rotation). 32 bytes each, from base64 text in
    /// `${ENV}` or a file (`key_file`). Empty: an in-memory store only (nothing at rest).
    pub keys: Vec<SealKey>,
    /// How long a consent link and its callback stay valid (`consent_timeout`, default 10m).
    pub consent_timeout: Duration,
    /// A token is refreshed (or exchanged again) this long before it expires
    /// (`refresh_before`, default 60s).
    pub refresh_before: Duration,
    /// How long one request to an authorization server may take (`timeout`, default 10s).
    pub timeout: Duration,
    /// The client Manifold uses to log browser users in at the `[auth.jwt]` issuer (OpenID
    /// Connect), so that the user completing a consent is known to be the caller it was made
    /// for (`login_client_id`, `login_client_secret`). `None`: browser users prove who they
    /// are with their API key.
    pub login_client_id: Option<String>,
    pub login_client_secret: Option<Secret>,
}

impl Default for CredentialsSettings {
    fn default() -> Self {
        Self {
            public_url: None,
            callback_listen: None,
            store: TokenStoreSettings::Memory,
            keys: Vec::new(),
            consent_timeout: Duration::from_secs(600),
            refresh_before: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            login_client_id: None,
            login_client_secret: None,
        }
    }
}

/// Where tokens are kept (`[credentials] store`).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TokenStoreSettings {
    /// `"memory"` (the default): this process only; a restart forgets every connection.
    #[default]
    Memory,
    /// `"file"`: an encrypted file (`file`), for one process; a restart keeps connections.
    File(PathBuf),
    /// `"redis"`: shared by replicas, sealed like the file.
    Redis(RedisConfig),
}
