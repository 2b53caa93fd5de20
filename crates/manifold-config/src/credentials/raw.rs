//! The TOML of `[upstreams.NAME.auth]` and `[credentials]`, checked into the types of the
//! parent module. Secrets are interpolated (`${ENV}`) and kept as [`Secret`]s.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;

use super::{
    ClientCredentialsSettings, ClientSettings, CredentialsSettings, Identity,
    IdentityAssertionSettings, OAuthSettings, SealKey, Secret, SigningKey, TokenExchangeSettings,
    TokenStoreSettings, UpstreamAuth,
};
use crate::error::child;
use crate::policy::{redis_config, redis_only_unset, RawRedis};
use crate::validate::{duration, resolve_path, Ctx};
use crate::ConfigError;

const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";

/// `[upstreams.NAME.auth]`: one table for every mode; which keys a mode takes is checked.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawAuth {
    mode: Option<String>,
    identity: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    client_metadata_url: Option<String>,
    dynamic_registration: Option<bool>,
    scopes: Option<Vec<String>>,
    authorization_server: Option<String>,
    catalog: Option<String>,
    private_key: Option<String>,
    private_key_file: Option<String>,
    algorithm: Option<String>,
    key_id: Option<String>,
    token_endpoint: Option<String>,
    audience: Option<String>,
    resource: Option<String>,
    subject_token_type: Option<String>,
    idp_token_endpoint: Option<String>,
    idp_client_id: Option<String>,
    idp_client_secret: Option<String>,
}

/// `[credentials]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawCredentials {
    public_url: Option<String>,
    callback_listen: Option<String>,
    store: Option<String>,
    file: Option<String>,
    redis_url: Option<String>,
    redis_timeout_ms: Option<u64>,
    key_prefix: Option<String>,
    key: Option<String>,
    key_file: Option<String>,
    #[serde(default)]
    previous_keys: Vec<String>,
    consent_timeout: Option<String>,
    refresh_before: Option<String>,
    timeout: Option<String>,
    login_client_id: Option<String>,
    login_client_secret: Option<String>,
}

/// The keys of `[upstreams.NAME.auth]` each mode takes (besides `mode`).
const OAUTH_KEYS: &[&str] = &[
    "identity",
    "client_id",
    "client_secret",
    "client_metadata_url",
    "dynamic_registration",
    "scopes",
    "authorization_server",
    "catalog",
];
const CLIENT_CREDENTIALS_KEYS: &[&str] = &[
    "client_id",
    "client_secret",
    "private_key",
    "private_key_file",
    "algorithm",
    "key_id",
    "scopes",
    "token_endpoint",
];
const TOKEN_EXCHANGE_KEYS: &[&str] = &[
    "token_endpoint",
    "client_id",
    "client_secret",
    "audience",
    "resource",
    "scopes",
    "subject_token_type",
];
const IDENTITY_ASSERTION_KEYS: &[&str] = &[
    "idp_token_endpoint",
    "idp_client_id",
    "idp_client_secret",
    "authorization_server",
    "client_id",
    "client_secret",
    "scopes",
    "subject_token_type",
];

impl RawAuth {
    /// The keys that were written, by name.
    fn written(&self) -> Vec<&'static str> {
        let all: [(&'static str, bool); 20] = [
            ("identity", self.identity.is_some()),
            ("client_id", self.client_id.is_some()),
            ("client_secret", self.client_secret.is_some()),
            ("client_metadata_url", self.client_metadata_url.is_some()),
            ("dynamic_registration", self.dynamic_registration.is_some()),
            ("scopes", self.scopes.is_some()),
            ("authorization_server", self.authorization_server.is_some()),
            ("catalog", self.catalog.is_some()),
            ("private_key", self.private_key.is_some()),
            ("private_key_file", self.private_key_file.is_some()),
            ("algorithm", self.algorithm.is_some()),
            ("key_id", self.key_id.is_some()),
            ("token_endpoint", self.token_endpoint.is_some()),
            ("audience", self.audience.is_some()),
            ("resource", self.resource.is_some()),
            ("subject_token_type", self.subject_token_type.is_some()),
            ("idp_token_endpoint", self.idp_token_endpoint.is_some()),
            ("idp_client_id", self.idp_client_id.is_some()),
            ("idp_client_secret", self.idp_client_secret.is_some()),
            ("mode", false),
        ];
        all.iter()
            .filter(|(_, set)| *set)
            .map(|(k, _)| *k)
            .collect()
    }
}

/// Checks `[upstreams.NAME.auth]` at `path`.
pub(crate) fn upstream_auth(
    ctx: &Ctx<'_>,
    path: &str,
    raw: &RawAuth,
) -> Result<UpstreamAuth, ConfigError> {
    let mode = raw.mode.clone().ok_or_else(|| {
        ctx.err(
            child(path, "mode"),
            "is required: \"oauth\", \"client_credentials\", \"token_exchange\" or \"identity_assertion\"",
        )
    })?;
    let allowed = match mode.as_str() {
        "oauth" => OAUTH_KEYS,
        "client_credentials" => CLIENT_CREDENTIALS_KEYS,
        "token_exchange" => TOKEN_EXCHANGE_KEYS,
        "identity_assertion" => IDENTITY_ASSERTION_KEYS,
        other => {
            return Err(ctx.err(
                child(path, "mode"),
                format!("{other:?} is not a mode; use \"oauth\", \"client_credentials\", \"token_exchange\" or \"identity_assertion\" (static headers need no auth table)"),
            ))
        }
    };
    if let Some(extra) = raw.written().into_iter().find(|k| !allowed.contains(k)) {
        return Err(ctx.err(
            child(path, extra),
            format!("is not a setting of mode = {mode:?}"),
        ));
    }
    let f = Fields { ctx, path };
    Ok(match mode.as_str() {
        "oauth" => UpstreamAuth::OAuth(oauth(&f, raw)?),
        "client_credentials" => UpstreamAuth::ClientCredentials(client_credentials(&f, raw)?),
        "token_exchange" => UpstreamAuth::TokenExchange(TokenExchangeSettings {
            token_endpoint: f
                .url("token_endpoint", raw.token_endpoint.as_deref())?
                .ok_or_else(|| {
                    f.missing("token_endpoint", "where the caller's token is exchanged")
                })?,
            client_id: f.text("client_id", raw.client_id.as_deref())?,
            client_secret: f.secret("client_secret", raw.client_secret.as_deref())?,
            audience: f.text("audience", raw.audience.as_deref())?,
            resource: f.url("resource", raw.resource.as_deref())?,
            scopes: raw.scopes.clone(),
            subject_token_type: raw
                .subject_token_type
                .clone()
                .unwrap_or_else(|| JWT_TOKEN_TYPE.to_owned()),
        }),
        _ => UpstreamAuth::IdentityAssertion(IdentityAssertionSettings {
            idp_token_endpoint: f
                .url("idp_token_endpoint", raw.idp_token_endpoint.as_deref())?
                .ok_or_else(|| {
                    f.missing(
                        "idp_token_endpoint",
                        "the identity provider's token endpoint",
                    )
                })?,
            idp_client_id: f.text("idp_client_id", raw.idp_client_id.as_deref())?,
            idp_client_secret: f.secret("idp_client_secret", raw.idp_client_secret.as_deref())?,
            authorization_server: f
                .url("authorization_server", raw.authorization_server.as_deref())?,
            client_id: f
                .text("client_id", raw.client_id.as_deref())?
                .ok_or_else(|| {
                    f.missing(
                        "client_id",
                        "Manifold's client at the upstream's authorization server",
                    )
                })?,
            client_secret: f.secret("client_secret", raw.client_secret.as_deref())?,
            scopes: raw.scopes.clone(),
            subject_token_type: raw
                .subject_token_type
                .clone()
                .unwrap_or_else(|| ID_TOKEN_TYPE.to_owned()),
        }),
    })
}

fn oauth(f: &Fields<'_, '_>, raw: &RawAuth) -> Result<OAuthSettings, ConfigError> {
    let identity = match raw.identity.as_deref() {
        None | Some("per_user") => Identity::PerUser,
        Some("shared") => Identity::Shared,
        Some(other) => {
            return Err(f.ctx.err(
                child(f.path, "identity"),
                format!("{other:?} is not an identity; use \"per_user\" or \"shared\""),
            ))
        }
    };
    let catalog_login = match raw.catalog.as_deref() {
        None | Some("caller") => false,
        Some("shared_login") => true,
        Some(other) => {
            return Err(f.ctx.err(
                child(f.path, "catalog"),
                format!("{other:?} is not a catalog source; use \"caller\" or \"shared_login\""),
            ))
        }
    };
    if catalog_login && identity == Identity::Shared {
        return Err(f.ctx.err(
            child(f.path, "catalog"),
            "applies to identity = \"per_user\" only (a shared login reads the catalog anyway)",
        ));
    }
    let client_secret = f.secret("client_secret", raw.client_secret.as_deref())?;
    let client_id = f.text("client_id", raw.client_id.as_deref())?;
    if client_secret.is_some() && client_id.is_none() {
        return Err(f.missing("client_id", "the client its client_secret belongs to"));
    }
    Ok(OAuthSettings {
        identity,
        client: ClientSettings {
            client_id,
            client_secret,
            metadata_url: f.url("client_metadata_url", raw.client_metadata_url.as_deref())?,
            dynamic_registration: raw.dynamic_registration.unwrap_or(true),
        },
        scopes: raw.scopes.clone(),
        authorization_server: f.url("authorization_server", raw.authorization_server.as_deref())?,
        catalog_login,
    })
}

fn client_credentials(
    f: &Fields<'_, '_>,
    raw: &RawAuth,
) -> Result<ClientCredentialsSettings, ConfigError> {
    let client_id = f
        .text("client_id", raw.client_id.as_deref())?
        .ok_or_else(|| f.missing("client_id", "the machine client's id"))?;
    let client_secret = f.secret("client_secret", raw.client_secret.as_deref())?;
    let pem = match (&raw.private_key, &raw.private_key_file) {
        (Some(_), Some(_)) => {
            return Err(f.ctx.err(
                child(f.path, "private_key_file"),
                "give the key once: private_key or private_key_file",
            ))
        }
        (Some(text), None) => Some(f.ctx.interpolate(&child(f.path, "private_key"), text)?),
        (None, Some(file)) => Some(f.file_text("private_key_file", file)?),
        (None, None) => None,
    };
    let signing_key = pem.map(|pem| SigningKey {
        pem: Secret::new(pem),
        algorithm: raw.algorithm.clone().unwrap_or_else(|| "RS256".to_owned()),
        key_id: raw.key_id.clone(),
    });
    if client_secret.is_some() == signing_key.is_some() {
        return Err(f.ctx.err(
            child(f.path, "client_secret"),
            "client credentials need exactly one of client_secret and private_key (or private_key_file)",
        ));
    }
    if raw.algorithm.is_some() && signing_key.is_none() {
        return Err(f
            .ctx
            .err(child(f.path, "algorithm"), "applies to a private key only"));
    }
    Ok(ClientCredentialsSettings {
        client_id,
        client_secret,
        signing_key,
        scopes: raw.scopes.clone(),
        token_endpoint: f.url("token_endpoint", raw.token_endpoint.as_deref())?,
    })
}

/// Reads the fields of one auth table, naming each in its errors.
struct Fields<'c, 'p> {
    ctx: &'c Ctx<'c>,
    path: &'p str,
}

impl Fields<'_, '_> {
    fn missing(&self, key: &str, what: &str) -> ConfigError {
        self.ctx
            .err(child(self.path, key), format!("is required: {what}"))
    }

    fn text(&self, key: &str, value: Option<&str>) -> Result<Option<String>, ConfigError> {
        value
            .map(|v| self.ctx.interpolate(&child(self.path, key), v))
            .transpose()
    }

    fn secret(&self, key: &str, value: Option<&str>) -> Result<Option<Secret>, ConfigError> {
        Ok(self.text(key, value)?.map(Secret::new))
    }

    fn url(&self, key: &str, value: Option<&str>) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.text(key, value)? else {
            return Ok(None);
        };
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(self.ctx.err(
                child(self.path, key),
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
        Ok(Some(url))
    }

    fn file_text(&self, key: &str, file: &str) -> Result<String, ConfigError> {
        let key = child(self.path, key);
        let path = resolve_path(self.ctx.file, &self.ctx.interpolate(&key, file)?);
        std::fs::read_to_string(&path).map_err(|e| {
            self.ctx
                .err(key, format!("cannot read {}: {e}", path.display()))
        })
    }
}

/// Checks `[credentials]`.
pub(crate) fn credentials(
    ctx: &Ctx<'_>,
    raw: RawCredentials,
) -> Result<CredentialsSettings, ConfigError> {
    let defaults = CredentialsSettings::default();
    let key = |name: &str| format!("credentials.{name}");
    let public_url = raw
        .public_url
        .as_deref()
        .map(|u| ctx.interpolate(&key("public_url"), u))
        .transpose()?
        .map(|u| u.trim_end_matches('/').to_owned());
    if let Some(url) = &public_url {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(ctx.err(
                key("public_url"),
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
    }
    let keys = seal_keys(ctx, &raw)?;
    let store = token_store(ctx, &raw)?;
    if !matches!(store, TokenStoreSettings::Memory) && keys.is_empty() {
        return Err(ctx.err(
            key("key"),
            "is required with a store that keeps tokens at rest (file, redis): tokens are sealed with it (base64 of 32 random bytes, e.g. from `openssl rand -base64 32`)",
        ));
    }
    let time = |name: &str, text: &Option<String>, default: Duration| {
        duration(ctx, &key(name), text.as_deref()).map(|d| d.unwrap_or(default))
    };
    Ok(CredentialsSettings {
        public_url,
        callback_listen: raw.callback_listen.clone(),
        store,
        keys,
        consent_timeout: time(
            "consent_timeout",
            &raw.consent_timeout,
            defaults.consent_timeout,
        )?,
        refresh_before: time(
            "refresh_before",
            &raw.refresh_before,
            defaults.refresh_before,
        )?,
        timeout: time("timeout", &raw.timeout, defaults.timeout)?,
        login_client_id: raw
            .login_client_id
            .as_deref()
            .map(|v| ctx.interpolate(&key("login_client_id"), v))
            .transpose()?,
        login_client_secret: raw
            .login_client_secret
            .as_deref()
            .map(|v| {
                ctx.interpolate(&key("login_client_secret"), v)
                    .map(Secret::new)
            })
            .transpose()?,
    })
}

fn token_store(ctx: &Ctx<'_>, raw: &RawCredentials) -> Result<TokenStoreSettings, ConfigError> {
    let redis_keys = [
        ("redis_url", raw.redis_url.is_some()),
        ("redis_timeout_ms", raw.redis_timeout_ms.is_some()),
        ("key_prefix", raw.key_prefix.is_some()),
    ];
    let file_store = raw.store.as_deref() == Some("file");
    if raw.file.is_some() && !file_store {
        return Err(ctx.err("credentials.file", "applies to store = \"file\" only"));
    }
    if file_store && raw.file.is_none() {
        return Err(ctx.err("credentials.file", "is required with store = \"file\""));
    }
    match raw.store.as_deref() {
        None | Some("memory") => {
            redis_only_unset(ctx, "credentials", "store", &redis_keys)?;
            Ok(TokenStoreSettings::Memory)
        }
        Some("file") => {
            redis_only_unset(ctx, "credentials", "store", &redis_keys)?;
            let file = raw.file.as_deref().unwrap_or_default();
            let file = ctx.interpolate("credentials.file", file)?;
            Ok(TokenStoreSettings::File(resolve_path(ctx.file, &file)))
        }
        Some("redis") => Ok(TokenStoreSettings::Redis(redis_config(
            ctx,
            "credentials",
            RawRedis {
                url: raw.redis_url.as_deref(),
                pool_size: None,
                timeout_ms: raw.redis_timeout_ms,
                key_prefix: raw.key_prefix.clone(),
            },
        )?)),
        Some(other) => Err(ctx.err(
            "credentials.store",
            format!("{other:?} is not a store; use \"memory\", \"file\" or \"redis\""),
        )),
    }
}

/// The sealing keys: `key` (or `key_file`) first, then `previous_keys`.
fn seal_keys(ctx: &Ctx<'_>, raw: &RawCredentials) -> Result<Vec<SealKey>, ConfigError> {
    let mut keys = Vec::new();
    match (&raw.key, &raw.key_file) {
        (Some(_), Some(_)) => {
            return Err(ctx.err("credentials.key_file", "give the key once: key or key_file"))
        }
        (Some(text), None) => keys.push(seal_key(
            ctx,
            "credentials.key",
            &ctx.interpolate("credentials.key", text)?,
        )?),
        (None, Some(file)) => {
            let path = resolve_path(ctx.file, &ctx.interpolate("credentials.key_file", file)?);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ctx.err(
                    "credentials.key_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            keys.push(seal_key(ctx, "credentials.key_file", &text)?);
        }
        (None, None) if !raw.previous_keys.is_empty() => {
            return Err(ctx.err(
                "credentials.key",
                "is required when previous_keys are given",
            ))
        }
        (None, None) => {}
    }
    for (i, text) in raw.previous_keys.iter().enumerate() {
        let name = format!("credentials.previous_keys[{i}]");
        keys.push(seal_key(ctx, &name, &ctx.interpolate(&name, text)?)?);
    }
    Ok(keys)
}

fn seal_key(ctx: &Ctx<'_>, key: &str, text: &str) -> Result<SealKey, ConfigError> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|_| ctx.err(key, "is not base64 (use base64 of 32 random bytes)"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(SealKey)
        .map_err(|_| ctx.err(key, format!("must be 32 bytes, not {}", bytes.len())))
}
