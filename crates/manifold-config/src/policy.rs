//! Who may use Manifold and how much: `[auth]`, `[teams.NAME]` and `[limits]`, their TOML
//! schema, validation and runtime types.
//!
//! A team is what a request runs as: it selects a view of the catalog (which upstreams,
//! tools, prompts and resources it may see) and the limits its tool calls are counted
//! against. HTTP hosts are mapped to a team by an API key or a JWT claim; a stdio host runs as
//! the team given by `server.team` or `--team`.
//!
//! Long but flat: one short function per key of `[auth]`,
//! `[teams.*]` and `[limits]`, each naming its key in its errors.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::child;
use crate::glob::glob_match;
use crate::validate::Ctx;
use crate::{ConfigError, Transport, UpstreamConfig};

/// The principal of requests that no team was given for (stdio without a team, HTTP without
/// authentication). Not allowed as a team name.
pub const ANONYMOUS: &str = "anonymous";

/// Authentication of HTTP hosts (`[auth]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthConfig {
    /// This server's resource URI (RFC 9728 / RFC 8707): the `resource` of the protected
    /// resource metadata and the default JWT audience.
    pub resource: Option<String>,
    /// Authorization servers named in the protected resource metadata.
    pub authorization_servers: Vec<String>,
    pub jwt: Option<JwtConfig>,
}

/// JWT bearer tokens (`[auth.jwt]`).
#[derive(Clone, Debug, PartialEq)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud` (one of, when the token lists several).
    pub audience: String,
    /// Where signing keys are fetched from (a JWKS document), cached and fetched again when
    /// a token names a key id that is not known.
    pub jwks_url: Option<String>,
    /// A JWKS document given inline (used instead of, or before, `jwks_url`).
    pub jwks: Option<String>,
    /// The claim whose value (a string, or an array of strings) selects the team.
    pub team_claim: String,
    /// Clock skew allowed for `exp` and `nbf`.
    pub leeway: Duration,
    /// The JWKS is fetched again for an unknown key id at most this often.
    pub jwks_min_refresh: Duration,
}

/// A team (`[teams.NAME]`). The default sees everything and has no keys or limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TeamConfig {
    pub name: String,
    /// SHA-256 of each API key that selects this team (keys are never kept in clear).
    pub api_keys: Vec<KeyHash>,
    /// The names of named keys (`{ name = "alice", key = "..." }`): a named key is a person's,
    /// and its principal is `key:NAME` (an unnamed key's is `key:<hash label>`).
    pub key_names: Vec<(KeyHash, String)>,
    /// Values of `auth.jwt.team_claim` that select this team (default: the team's name).
    pub claims: Vec<String>,
    /// Globs over upstream keys the team may use; empty: all.
    pub upstreams: Vec<String>,
    /// Globs over exposed names (tools, prompts) and exposed URIs (resources, templates).
    pub tools: Visibility,
    pub prompts: Visibility,
    pub resources: Visibility,
    /// Headers sent to an HTTP upstream on this team's behalf, by upstream key; they replace
    /// the upstream's own headers of the same name.
    pub headers: BTreeMap<String, BTreeMap<String, String>>,
    /// Counted over every tool call of the team.
    pub limits: Option<LimitConfig>,
    /// Per (team, tool), by exposed tool name.
    pub tool_limits: BTreeMap<String, LimitConfig>,
    /// Per (team, upstream), by upstream key.
    pub upstream_limits: BTreeMap<String, LimitConfig>,
    /// `[teams.NAME.discovery]` over `[discovery]`.
    pub discovery: crate::DiscoverySettings,
}

impl TeamConfig {
    /// Whether the team's view hides anything at all.
    pub fn restricts(&self) -> bool {
        !self.upstreams.is_empty()
            || !self.tools.is_empty()
            || !self.prompts.is_empty()
            || !self.resources.is_empty()
    }

    /// Whether the team may use upstream `key`.
    pub fn admits_upstream(&self, key: &str) -> bool {
        self.upstreams.is_empty() || self.upstreams.iter().any(|p| glob_match(p, key))
    }
}

/// Include/exclude globs over exposed names: an empty include list admits everything, and an
/// exclude match wins.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Visibility {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Visibility {
    pub fn admits(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| glob_match(p, name)))
            && !self.exclude.iter().any(|p| glob_match(p, name))
    }

    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }
}

/// The SHA-256 of an API key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    pub fn of(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    /// A short, non-secret name for the key, for logs and session ownership.
    pub fn label(&self) -> String {
        // 64 bits: a session is owned by the key that made it, so labels must not collide.
        self.0[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}…", self.label())
    }
}

/// One set of limits: a rate with burst, and quotas over fixed windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitConfig {
    pub rate: Option<RateConfig>,
    pub quotas: Vec<QuotaConfig>,
}

/// `count` calls per `period`, up to `burst` at once (GCRA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateConfig {
    pub count: u32,
    pub period: Duration,
    pub burst: u32,
}

impl RateConfig {
    /// The time one call's worth of capacity takes to come back.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count
    }
}

/// At most `count` calls in each window of `window`, windows aligned to the Unix epoch (so a
/// day is a UTC day), counted exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaConfig {
    pub count: u64,
    pub window: Duration,
}

/// `[limits]`: where counts are kept, and the global per-tool limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitsConfig {
    pub backend: LimitBackend,
    /// With the Redis backend: what a call gets while Redis cannot be reached (true: allowed,
    /// false: refused).
    pub fail_open: bool,
    /// Per tool for every caller together, by exposed tool name.
    pub tools: BTreeMap<String, LimitConfig>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum LimitBackend {
    /// Counted in this process only.
    #[default]
    Memory,
    Redis(RedisConfig),
}

#[derive(Clone, PartialEq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Connections kept open.
    pub pool_size: usize,
    /// How long a check may wait on Redis before it counts as unreachable.
    pub timeout: Duration,
    /// Prefix of every key Manifold writes.
    pub key_prefix: String,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// A URL with any password replaced.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}<redacted>{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

// ---- schema ----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawAuth {
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
    jwt: Option<RawJwt>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawJwt {
    issuer: Option<String>,
    audience: Option<String>,
    jwks_url: Option<String>,
    jwks: Option<String>,
    team_claim: Option<String>,
    leeway_ms: Option<u64>,
    jwks_min_refresh_ms: Option<u64>,
}

/// An API key: its text (or `sha256:<hex>`), or a table naming its holder.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a key (text) or a table { name = \"...\", key = \"...\" }"
)]
pub(crate) enum RawApiKey {
    Plain(String),
    Named(RawNamedKey),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNamedKey {
    name: String,
    key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawTeam {
    #[serde(default)]
    api_keys: Vec<RawApiKey>,
    claims: Option<Vec<String>>,
    #[serde(default)]
    upstreams: Vec<String>,
    #[serde(default)]
    tools: RawVisibility,
    #[serde(default)]
    prompts: RawVisibility,
    #[serde(default)]
    resources: RawVisibility,
    #[serde(default)]
    headers: BTreeMap<String, BTreeMap<String, String>>,
    limits: Option<RawLimit>,
    #[serde(default)]
    tool_limits: BTreeMap<String, RawLimit>,
    #[serde(default)]
    upstream_limits: BTreeMap<String, RawLimit>,
    discovery: Option<crate::discovery::RawDiscovery>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawVisibility {
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawLimit {
    rate: Option<String>,
    burst: Option<u64>,
    #[serde(default)]
    quota: OneOrMany,
}

#[derive(Debug, Default, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawLimits {
    backend: Option<String>,
    redis_url: Option<String>,
    redis_pool_size: Option<u64>,
    redis_timeout_ms: Option<u64>,
    key_prefix: Option<String>,
    fail_open: Option<bool>,
    #[serde(default)]
    tools: BTreeMap<String, RawLimit>,
}

// ---- validation ----

pub(crate) const DEFAULT_TEAM_CLAIM: &str = "team";
pub(crate) const DEFAULT_LEEWAY_MS: u64 = 60_000;
pub(crate) const DEFAULT_JWKS_MIN_REFRESH_MS: u64 = 10_000;
pub(crate) const DEFAULT_REDIS_POOL: u64 = 4;
pub(crate) const DEFAULT_REDIS_TIMEOUT_MS: u64 = 250;
pub(crate) const DEFAULT_KEY_PREFIX: &str = "manifold";
/// Plain API keys shorter than this are refused: they could be guessed.
pub(crate) const MIN_API_KEY_CHARS: usize = 16;

pub(crate) fn auth(ctx: &Ctx<'_>, raw: RawAuth) -> Result<AuthConfig, ConfigError> {
    if let Some(resource) = &raw.resource {
        check_url(ctx, "auth.resource", resource)?;
    }
    for (i, s) in raw.authorization_servers.iter().enumerate() {
        check_url(ctx, &format!("auth.authorization_servers[{i}]"), s)?;
    }
    let jwt = match raw.jwt {
        None => None,
        Some(j) => {
            let issuer = j
                .issuer
                .ok_or_else(|| ctx.err("auth.jwt.issuer", "is required"))?;
            let audience = j.audience.or_else(|| raw.resource.clone()).ok_or_else(|| {
                ctx.err(
                    "auth.jwt.audience",
                    "is required (or set auth.resource, which is the default audience)",
                )
            })?;
            if j.jwks_url.is_none() && j.jwks.is_none() {
                return Err(ctx.err(
                    "auth.jwt",
                    "needs jwks_url (where signing keys are published) or jwks (the keys inline)",
                ));
            }
            if let Some(url) = &j.jwks_url {
                let url = ctx.interpolate("auth.jwt.jwks_url", url)?;
                check_url(ctx, "auth.jwt.jwks_url", &url)?;
            }
            let jwks = match &j.jwks {
                None => None,
                Some(text) => {
                    let text = ctx.interpolate("auth.jwt.jwks", text)?;
                    let parsed: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                        ctx.err("auth.jwt.jwks", format!("is not a JWKS document: {e}"))
                    })?;
                    if !parsed.get("keys").is_some_and(serde_json::Value::is_array) {
                        return Err(ctx.err("auth.jwt.jwks", "has no \"keys\" array"));
                    }
                    Some(text)
                }
            };
            Some(JwtConfig {
                issuer,
                audience,
                jwks_url: j
                    .jwks_url
                    .map(|u| ctx.interpolate("auth.jwt.jwks_url", &u))
                    .transpose()?,
                jwks,
                team_claim: j
                    .team_claim
                    .unwrap_or_else(|| DEFAULT_TEAM_CLAIM.to_owned()),
                leeway: Duration::from_millis(j.leeway_ms.unwrap_or(DEFAULT_LEEWAY_MS)),
                jwks_min_refresh: Duration::from_millis(
                    j.jwks_min_refresh_ms.unwrap_or(DEFAULT_JWKS_MIN_REFRESH_MS),
                ),
            })
        }
    };
    Ok(AuthConfig {
        resource: raw.resource,
        authorization_servers: raw.authorization_servers,
        jwt,
    })
}

fn check_url(ctx: &Ctx<'_>, key: &str, url: &str) -> Result<(), ConfigError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(ctx.err(key, format!("{url:?} is not an http:// or https:// URL")))
    }
}

pub(crate) fn teams(
    ctx: &Ctx<'_>,
    raw: BTreeMap<String, toml::Value>,
    upstreams: &[UpstreamConfig],
    discovery: &crate::DiscoverySettings,
) -> Result<Vec<TeamConfig>, ConfigError> {
    let mut teams = Vec::new();
    let mut owners: BTreeMap<KeyHash, String> = BTreeMap::new();
    for (name, value) in raw {
        let path = child("teams", &name);
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(ctx.err(
                &path,
                "a team name may use only A-Z, a-z, 0-9, '_' and '-' (it is a metric label)",
            ));
        }
        if name == ANONYMOUS {
            return Err(ctx.err(
                &path,
                "\"anonymous\" names requests without a team; choose another name",
            ));
        }
        let team: RawTeam = RawTeam::deserialize(value)
            .map_err(|e| crate::toml_format::value_error(ctx, &path, &e))?;
        let team = self::team(ctx, &path, name, team, upstreams, discovery)?;
        for key in &team.api_keys {
            if let Some(other) = owners.insert(*key, team.name.clone()) {
                return Err(ctx.err(
                    child(&path, "api_keys"),
                    format!("a key of this team is also a key of team {other:?}"),
                ));
            }
        }
        teams.push(team);
    }
    Ok(teams)
}

fn team(
    ctx: &Ctx<'_>,
    path: &str,
    name: String,
    raw: RawTeam,
    upstreams: &[UpstreamConfig],
    discovery: &crate::DiscoverySettings,
) -> Result<TeamConfig, ConfigError> {
    let discovery = crate::discovery::settings(
        ctx,
        &child(path, "discovery"),
        raw.discovery.as_ref(),
        discovery,
    )?;
    let mut api_keys = Vec::new();
    let mut key_names = Vec::new();
    for (i, key) in raw.api_keys.iter().enumerate() {
        let key_path = format!("{}[{i}]", child(path, "api_keys"));
        match key {
            RawApiKey::Plain(text) => api_keys.push(api_key(ctx, &key_path, text)?),
            RawApiKey::Named(named) => {
                let hash = api_key(ctx, &child(&key_path, "key"), &named.key)?;
                key_name(ctx, &child(&key_path, "name"), &named.name, &key_names)?;
                api_keys.push(hash);
                key_names.push((hash, named.name.clone()));
            }
        }
    }
    let mut headers = BTreeMap::new();
    for (upstream, values) in raw.headers {
        let up_path = child(&child(path, "headers"), &upstream);
        match upstreams.iter().find(|u| u.key == upstream) {
            Some(u) if matches!(u.transport, Transport::Http(_) | Transport::OpenApi(_)) => {}
            Some(_) => {
                return Err(ctx.err(
                    up_path,
                    "is not an HTTP or OpenAPI upstream; per-team headers are sent to those",
                ))
            }
            None => return Err(ctx.err(up_path, "names no upstream")),
        }
        let mut resolved = BTreeMap::new();
        for (header, value) in values {
            let value = ctx.interpolate(&child(&up_path, &header), &value)?;
            resolved.insert(header, value);
        }
        headers.insert(upstream, resolved);
    }
    let mut upstream_limits = BTreeMap::new();
    for (upstream, raw_limit) in raw.upstream_limits {
        let key = child(&child(path, "upstream_limits"), &upstream);
        if !upstreams.iter().any(|u| u.key == upstream) {
            return Err(ctx.err(key, "names no upstream"));
        }
        upstream_limits.insert(upstream, limit(ctx, &key, raw_limit)?);
    }
    let mut tool_limits = BTreeMap::new();
    for (tool, raw_limit) in raw.tool_limits {
        let key = child(&child(path, "tool_limits"), &tool);
        tool_limits.insert(tool, limit(ctx, &key, raw_limit)?);
    }
    let limits = raw
        .limits
        .map(|l| limit(ctx, &child(path, "limits"), l))
        .transpose()?;
    Ok(TeamConfig {
        claims: raw.claims.unwrap_or_else(|| vec![name.clone()]),
        name,
        api_keys,
        key_names,
        upstreams: raw.upstreams,
        tools: visibility(raw.tools),
        prompts: visibility(raw.prompts),
        resources: visibility(raw.resources),
        headers,
        limits,
        tool_limits,
        upstream_limits,
        discovery,
    })
}

fn visibility(raw: RawVisibility) -> Visibility {
    Visibility {
        include: raw.include,
        exclude: raw.exclude,
    }
}

/// A bearer secret other than a team's key (`server.metrics_token`), read like one.
pub(crate) fn secret_token(ctx: &Ctx<'_>, key: &str, text: &str) -> Result<KeyHash, ConfigError> {
    api_key(ctx, key, text)
}

/// `sha256:<64 hex digits>`, or the key itself (usually `${ENV}`), hashed here.
/// A key's name: the principal `key:NAME`, so it must be printable and unique in its team.
fn key_name(
    ctx: &Ctx<'_>,
    key: &str,
    name: &str,
    taken: &[(KeyHash, String)],
) -> Result<(), ConfigError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    if !valid {
        return Err(ctx.err(
            key,
            "a key's name must be 1-64 letters, digits, '-', '_', '.' or '@'",
        ));
    }
    if taken.iter().any(|(_, n)| n == name) {
        return Err(ctx.err(key, format!("another key of the team is named {name:?}")));
    }
    Ok(())
}

fn api_key(ctx: &Ctx<'_>, key: &str, text: &str) -> Result<KeyHash, ConfigError> {
    if let Some(hex) = text.strip_prefix("sha256:") {
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        return match bytes.and_then(|b| <[u8; 32]>::try_from(b).ok()) {
            Some(hash) if hex.len() == 64 => Ok(KeyHash(hash)),
            _ => Err(ctx.err(key, "a sha256: key hash must be 64 hex digits")),
        };
    }
    let plain = ctx.interpolate(key, text)?;
    if plain.chars().count() < MIN_API_KEY_CHARS {
        return Err(ctx.err(
            key,
            format!(
                "a key must have at least {MIN_API_KEY_CHARS} characters (or be given as \
                 sha256:<hex> of the key)"
            ),
        ));
    }
    Ok(KeyHash::of(&plain))
}

/// The Redis settings of a section (`limits`, `sessions`, `cache`) as written.
pub(crate) struct RawRedis<'a> {
    pub(crate) url: Option<&'a str>,
    pub(crate) pool_size: Option<u64>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) key_prefix: Option<String>,
}

/// Checks the Redis settings of `section`, whose backend is Redis: the URL is required (with
/// `${ENV}` interpolation) and never shown with its password.
pub(crate) fn redis_config(
    ctx: &Ctx<'_>,
    section: &str,
    raw: RawRedis<'_>,
) -> Result<RedisConfig, ConfigError> {
    let key = |name: &str| format!("{section}.{name}");
    let url = raw.url.ok_or_else(|| {
        ctx.err(
            key("redis_url"),
            "is required with Redis as the backend (e.g. \"redis://127.0.0.1:6379\")",
        )
    })?;
    let url = ctx.interpolate(&key("redis_url"), url)?;
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(ctx.err(
            key("redis_url"),
            format!("{:?} is not a redis:// URL", redact_url(&url)),
        ));
    }
    let pool = raw.pool_size.unwrap_or(DEFAULT_REDIS_POOL);
    if !(1..=256).contains(&pool) {
        return Err(ctx.err(key("redis_pool_size"), "must be between 1 and 256"));
    }
    let timeout = raw.timeout_ms.unwrap_or(DEFAULT_REDIS_TIMEOUT_MS);
    if timeout == 0 {
        return Err(ctx.err(key("redis_timeout_ms"), "must be greater than 0"));
    }
    let key_prefix = raw
        .key_prefix
        .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
    if key_prefix.is_empty()
        || key_prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ctx.err(
            key("key_prefix"),
            format!("{key_prefix:?} is not a prefix: use a non-empty text without spaces"),
        ));
    }
    Ok(RedisConfig {
        url,
        pool_size: usize::try_from(pool).unwrap_or(4),
        timeout: Duration::from_millis(timeout),
        key_prefix,
    })
}

/// Refuses, in a section whose backend is not Redis, a key only the Redis backend reads
/// (`set` pairs each key name with whether it was given).
pub(crate) fn redis_only_unset(
    ctx: &Ctx<'_>,
    section: &str,
    backend: &str,
    set: &[(&str, bool)],
) -> Result<(), ConfigError> {
    match set.iter().find(|(_, given)| *given) {
        Some((name, _)) => Err(ctx.err(
            format!("{section}.{name}"),
            format!("is set but {section}.{backend} is not \"redis\""),
        )),
        None => Ok(()),
    }
}

pub(crate) fn limits(ctx: &Ctx<'_>, raw: RawLimits) -> Result<LimitsConfig, ConfigError> {
    let backend = match raw.backend.as_deref() {
        None | Some("memory") => {
            redis_only_unset(
                ctx,
                "limits",
                "backend",
                &[
                    ("redis_url", raw.redis_url.is_some()),
                    ("redis_pool_size", raw.redis_pool_size.is_some()),
                    ("redis_timeout_ms", raw.redis_timeout_ms.is_some()),
                ],
            )?;
            LimitBackend::Memory
        }
        Some("redis") => LimitBackend::Redis(redis_config(
            ctx,
            "limits",
            RawRedis {
                url: raw.redis_url.as_deref(),
                pool_size: raw.redis_pool_size,
                timeout_ms: raw.redis_timeout_ms,
                key_prefix: raw.key_prefix,
            },
        )?),
        Some(other) => {
            return Err(ctx.err(
                "limits.backend",
                format!("{other:?} is not a backend; use \"memory\" or \"redis\""),
            ))
        }
    };
    let mut tools = BTreeMap::new();
    for (tool, raw_limit) in raw.tools {
        let key = child("limits.tools", &tool);
        tools.insert(tool, limit(ctx, &key, raw_limit)?);
    }
    Ok(LimitsConfig {
        backend,
        fail_open: raw.fail_open.unwrap_or(false),
        tools,
    })
}

fn limit(ctx: &Ctx<'_>, key: &str, raw: RawLimit) -> Result<LimitConfig, ConfigError> {
    let rate = match &raw.rate {
        None => {
            if raw.burst.is_some() {
                return Err(ctx.err(child(key, "burst"), "needs a rate"));
            }
            None
        }
        Some(text) => {
            let (count, period) = parse_per(text).ok_or_else(|| {
                ctx.err(
                    child(key, "rate"),
                    format!("{text:?} is not a rate; write it as COUNT/UNIT, e.g. \"20/s\" (units: s, min, hour, day)"),
                )
            })?;
            let count = u32::try_from(count)
                .ok()
                .filter(|c| *c > 0)
                .ok_or_else(|| ctx.err(child(key, "rate"), "the count must be 1 or more"))?;
            let burst = match raw.burst {
                None => count,
                Some(b) => u32::try_from(b)
                    .ok()
                    .filter(|b| *b > 0)
                    .ok_or_else(|| ctx.err(child(key, "burst"), "must be 1 or more"))?,
            };
            Some(RateConfig {
                count,
                period,
                burst,
            })
        }
    };
    let mut quotas = Vec::new();
    for (i, text) in raw.quota.into_vec().iter().enumerate() {
        let (count, window) = parse_per(text).ok_or_else(|| {
            ctx.err(
                format!("{}[{i}]", child(key, "quota")),
                format!("{text:?} is not a quota; write it as COUNT/UNIT, e.g. \"5000/day\" (units: s, min, hour, day)"),
            )
        })?;
        quotas.push(QuotaConfig { count, window });
    }
    if rate.is_none() && quotas.is_empty() {
        return Err(ctx.err(key, "sets no rate and no quota"));
    }
    Ok(LimitConfig { rate, quotas })
}

/// `COUNT/UNIT` with units s, min, hour, day (also spelled second, minute, h, d); `COUNT/N UNIT`
/// is not supported, to keep windows aligned.
pub fn parse_per(text: &str) -> Option<(u64, Duration)> {
    let (count, unit) = text.split_once('/')?;
    let count: u64 = count.trim().replace('_', "").parse().ok()?;
    let secs = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        _ => return None,
    };
    Some((count, Duration::from_secs(secs)))
}

/// Whether HTTP hosts must authenticate: some team has API keys, or JWTs are accepted.
pub fn auth_required(auth: &AuthConfig, teams: &[TeamConfig]) -> bool {
    auth.jwt.is_some() || teams.iter().any(|t| !t.api_keys.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_quotas_parse() {
        assert_eq!(parse_per("20/s"), Some((20, Duration::from_secs(1))));
        assert_eq!(
            parse_per("5_000/day"),
            Some((5000, Duration::from_secs(86_400)))
        );
        assert_eq!(
            parse_per("200/hour"),
            Some((200, Duration::from_secs(3600)))
        );
        assert_eq!(parse_per("10/min"), Some((10, Duration::from_secs(60))));
        for bad in ["", "20", "/s", "x/s", "20/week", "-1/s", "20/2s"] {
            assert_eq!(parse_per(bad), None, "{bad}");
        }
    }

    #[test]
    fn key_hashes_and_redaction() {
        let h = KeyHash::of("a-long-enough-secret");
        assert_eq!(format!("{h:?}").len(), "sha256:".len() + 16 + "…".len());
        assert!(!format!("{h:?}").contains("secret"));
        assert_eq!(
            redact_url("redis://:hunter2@127.0.0.1:6379/0"),
            "redis://<redacted>@127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://127.0.0.1:1"), "redis://127.0.0.1:1");
    }
}

#[cfg(test)]
mod config_tests {
    use std::path::Path;

    use super::*;

    const UPSTREAM: &str = "[upstreams.web]\nurl = \"http://127.0.0.1:1/mcp\"\n";

    fn parse(text: &str) -> Result<crate::Config, ConfigError> {
        let env = |name: &str| (name == "KEY").then(|| "a-key-of-enough-length".to_owned());
        crate::parse_str(Path::new("m.toml"), &format!("{text}\n{UPSTREAM}"), &env)
    }

    fn problem(text: &str) -> String {
        let e = parse(text).unwrap_err();
        format!("{}: {}", e.key, e.problem)
    }

    #[test]
    fn teams_limits_and_auth_parse() {
        let c = parse(
            r#"
[server]
listen = "0.0.0.0:8080"
team = "red"
[teams.red]
api_keys = ["${KEY}"]
tools = { include = ["web__*"], exclude = ["web__rm*"] }
headers.web = { Authorization = "Bearer ${KEY}" }
limits = { rate = "20/s", burst = 40, quota = ["5000/day", "200/hour"] }
tool_limits.web__get = { quota = "10/min" }
upstream_limits.web = { rate = "5/s" }
[limits]
backend = "redis"
redis_url = "redis://:secret@127.0.0.1:6379"
tools.web__get = { rate = "1/s" }
"#,
        )
        .unwrap();
        let red = &c.teams[0];
        assert_eq!(red.api_keys, [KeyHash::of("a-key-of-enough-length")]);
        assert_eq!(red.claims, ["red"]);
        assert!(red.tools.admits("web__get") && !red.tools.admits("web__rm_all"));
        assert_eq!(
            red.headers["web"]["Authorization"],
            "Bearer a-key-of-enough-length"
        );
        let limits = red.limits.as_ref().unwrap();
        assert_eq!(limits.rate.unwrap().burst, 40);
        assert_eq!(limits.quotas.len(), 2);
        assert!(matches!(c.limits.backend, LimitBackend::Redis(_)));
        assert!(!format!("{:?}", c.limits).contains("secret"));
        assert!(auth_required(&c.auth, &c.teams));
    }

    #[test]
    fn mistakes_are_named() {
        for (text, expected) in [
            ("[teams.anonymous]", "teams.anonymous"),
            ("[teams.\"a b\"]", "only A-Z"),
            ("[teams.red]\napi_keys = [\"short\"]", "at least 16"),
            ("[teams.red]\napi_keys = [\"sha256:abc\"]", "64 hex"),
            (
                "[teams.red]\napi_keys = [\"${KEY}\"]\n[teams.blue]\napi_keys = [\"${KEY}\"]",
                "also a key of team \"blue\"",
            ),
            (
                "[teams.red]\nlimits = { rate = \"20/week\" }",
                "teams.red.limits.rate",
            ),
            ("[teams.red]\nlimits = { burst = 3 }", "needs a rate"),
            ("[teams.red]\nlimits = {}", "sets no rate and no quota"),
            (
                "[teams.red]\nupstream_limits.nope = { rate = \"1/s\" }",
                "names no upstream",
            ),
            (
                "[teams.red]\nheaders.nope = { A = \"b\" }",
                "names no upstream",
            ),
            ("[teams.red]\ncolor = 1", "color"),
            ("[server]\nteam = \"green\"", "server.team"),
            (
                "[server]\nlisten = \"0.0.0.0:1\"",
                "no authentication is configured",
            ),
            ("[limits]\nbackend = \"redis\"", "limits.redis_url"),
            ("[limits]\nbackend = \"etcd\"", "not a backend"),
            ("[auth.jwt]\nissuer = \"https://i\"", "auth.jwt.audience"),
            (
                "[auth]\nresource = \"https://r\"\n[auth.jwt]\nissuer = \"https://i\"",
                "jwks_url",
            ),
        ] {
            let got = problem(text);
            assert!(got.contains(expected), "{text:?}: {got}");
        }
    }
}
