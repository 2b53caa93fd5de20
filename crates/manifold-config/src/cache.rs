//! Result caching: `[cache]` (the global byte budget, and where entries are shared: this
//! process only, or every replica through Redis) and, on an upstream, `cache` (its read-only
//! tools), `tool_cache.TOOL` (one tool, whatever its hints) and `resource_cache` (its
//! resource reads).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::error::child;
use crate::policy::{redis_config, redis_only_unset, RawRedis};
use crate::validate::Ctx;
use crate::{ConfigError, Isolation, RedisConfig, UpstreamConfig};

pub(crate) const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
pub(crate) const DEFAULT_MAX_ARGUMENT_BYTES: u64 = 16 * 1024;
/// A cache lookup waits no longer than this on Redis before the call goes upstream.
pub(crate) const DEFAULT_REDIS_TIMEOUT_MS: u64 = 100;

/// `[cache]`: what every cache shares.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheSettings {
    /// The budget of every cache together, in bytes of stored answers.
    pub max_bytes: u64,
    /// Calls whose arguments (in canonical form) are longer are never cached.
    pub max_argument_bytes: usize,
    /// Where entries live besides this process's memory.
    pub backend: CacheBackend,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES as usize,
            backend: CacheBackend::Memory,
        }
    }
}

/// `[cache] backend`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CacheBackend {
    /// Entries are this process's own.
    #[default]
    Memory,
    /// Entries are also kept in Redis, behind the memory of each process, and shared by every
    /// replica using the same Redis and key prefix.
    Redis(RedisConfig),
}

/// The caches of one upstream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpstreamCaches {
    /// `cache`: the tools the upstream annotates `readOnlyHint: true` and
    /// `openWorldHint: false`.
    pub read_only_tools: Option<CacheRule>,
    /// `tool_cache.TOOL`, by the upstream's own tool name.
    pub tools: BTreeMap<String, CacheRule>,
    /// `resource_cache`: `resources/read`.
    pub resources: Option<CacheRule>,
}

impl UpstreamCaches {
    pub fn is_empty(&self) -> bool {
        self.read_only_tools.is_none() && self.tools.is_empty() && self.resources.is_none()
    }

    /// Every rule, with the key it was configured under (for messages).
    pub fn rules(&self) -> impl Iterator<Item = (String, &CacheRule)> {
        let tools = self
            .tools
            .iter()
            .map(|(name, rule)| (child("tool_cache", name), rule));
        self.read_only_tools
            .iter()
            .map(|r| ("cache".to_owned(), r))
            .chain(
                self.resources
                    .iter()
                    .map(|r| ("resource_cache".to_owned(), r)),
            )
            .chain(tools)
    }
}

/// How the answers of one cache are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheRule {
    pub ttl: Duration,
    /// A budget of its own, taken out of the global one; `None`: it shares what is left.
    pub max_bytes: Option<u64>,
    pub scope: CacheScope,
}

/// Who may be answered from an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheScope {
    /// Only callers of the team whose call filled it.
    #[default]
    Team,
    /// Every caller that may see the tool or resource.
    Shared,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawCacheSettings {
    max_bytes: Option<RawBytes>,
    max_argument_bytes: Option<RawBytes>,
    backend: Option<String>,
    redis_url: Option<String>,
    redis_timeout_ms: Option<u64>,
    key_prefix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with ttl (and optionally max_bytes, scope)"
)]
pub(crate) struct RawCacheRule {
    ttl: Option<String>,
    max_bytes: Option<RawBytes>,
    scope: Option<String>,
}

/// A size: bytes, or a string with a unit (`"64MiB"`).
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a number of bytes, or a string such as \"64MiB\""
)]
enum RawBytes {
    Count(u64),
    Text(String),
}

/// The raw cache keys of one upstream.
#[derive(Debug)]
pub(crate) struct RawUpstreamCaches<'a> {
    pub(crate) cache: Option<&'a RawCacheRule>,
    pub(crate) tool_cache: &'a BTreeMap<String, RawCacheRule>,
    pub(crate) resource_cache: Option<&'a RawCacheRule>,
}

pub(crate) fn settings(ctx: &Ctx<'_>, raw: RawCacheSettings) -> Result<CacheSettings, ConfigError> {
    let max_bytes = match &raw.max_bytes {
        Some(b) => bytes(ctx, "cache.max_bytes", b)?,
        None => DEFAULT_MAX_BYTES,
    };
    let max_argument_bytes = match &raw.max_argument_bytes {
        Some(b) => bytes(ctx, "cache.max_argument_bytes", b)?,
        None => DEFAULT_MAX_ARGUMENT_BYTES,
    };
    Ok(CacheSettings {
        max_bytes,
        max_argument_bytes: usize::try_from(max_argument_bytes)
            .map_err(|_| ctx.err("cache.max_argument_bytes", "is too large"))?,
        backend: backend(ctx, &raw)?,
    })
}

/// `backend` and the keys that only the Redis backend reads.
fn backend(ctx: &Ctx<'_>, raw: &RawCacheSettings) -> Result<CacheBackend, ConfigError> {
    match raw.backend.as_deref() {
        None | Some("memory") => {
            redis_only_unset(
                ctx,
                "cache",
                "backend",
                &[
                    ("redis_url", raw.redis_url.is_some()),
                    ("redis_timeout_ms", raw.redis_timeout_ms.is_some()),
                    ("key_prefix", raw.key_prefix.is_some()),
                ],
            )?;
            Ok(CacheBackend::Memory)
        }
        Some("redis") => Ok(CacheBackend::Redis(redis_config(
            ctx,
            "cache",
            RawRedis {
                url: raw.redis_url.as_deref(),
                pool_size: None,
                // A lookup that waits longer than a call would take is no help.
                timeout_ms: Some(raw.redis_timeout_ms.unwrap_or(DEFAULT_REDIS_TIMEOUT_MS)),
                key_prefix: raw.key_prefix.clone(),
            },
        )?)),
        Some(other) => Err(ctx.err(
            "cache.backend",
            format!("{other:?} is not a backend; use \"memory\" or \"redis\""),
        )),
    }
}

pub(crate) fn upstream(
    ctx: &Ctx<'_>,
    path: &str,
    raw: RawUpstreamCaches<'_>,
) -> Result<UpstreamCaches, ConfigError> {
    let rule_at = |key: String, raw: &RawCacheRule| rule(ctx, &key, raw);
    let mut tools = BTreeMap::new();
    for (name, raw_rule) in raw.tool_cache {
        let key = child(&child(path, "tool_cache"), name);
        tools.insert(name.clone(), rule_at(key, raw_rule)?);
    }
    Ok(UpstreamCaches {
        read_only_tools: raw
            .cache
            .map(|r| rule_at(child(path, "cache"), r))
            .transpose()?,
        tools,
        resources: raw
            .resource_cache
            .map(|r| rule_at(child(path, "resource_cache"), r))
            .transpose()?,
    })
}

fn rule(ctx: &Ctx<'_>, key: &str, raw: &RawCacheRule) -> Result<CacheRule, ConfigError> {
    let ttl_key = format!("{key}.ttl");
    let ttl = raw.ttl.as_deref().ok_or_else(|| {
        ctx.err(
            &ttl_key,
            "is required (how long an answer may be reused, e.g. \"30s\")",
        )
    })?;
    let ttl = parse_duration(ttl).ok_or_else(|| {
        ctx.err(
            &ttl_key,
            format!("{ttl:?} is not a duration: use a number and ms, s, m, h or d (\"30s\")"),
        )
    })?;
    if ttl.is_zero() {
        return Err(ctx.err(ttl_key, "must be greater than 0"));
    }
    let max_bytes = raw
        .max_bytes
        .as_ref()
        .map(|b| bytes(ctx, &format!("{key}.max_bytes"), b))
        .transpose()?;
    let scope = match raw.scope.as_deref() {
        None | Some("team") => CacheScope::Team,
        Some("shared") => CacheScope::Shared,
        Some(other) => {
            return Err(ctx.err(
                format!("{key}.scope"),
                format!("{other:?} is not a scope; use \"team\" or \"shared\""),
            ))
        }
    };
    Ok(CacheRule {
        ttl,
        max_bytes,
        scope,
    })
}

fn bytes(ctx: &Ctx<'_>, key: &str, raw: &RawBytes) -> Result<u64, ConfigError> {
    let n = match raw {
        RawBytes::Count(n) => Some(*n),
        RawBytes::Text(text) => parse_bytes(text),
    };
    match n {
        Some(0) => Err(ctx.err(key, "must be greater than 0")),
        Some(n) => Ok(n),
        None => Err(ctx.err(
            key,
            "is not a size: use a number of bytes, or a number and B, KiB, MiB or GiB (\"64MiB\")",
        )),
    }
}

/// The budgets add up: caches with their own budget fit in the global one, and leave room
/// for those without. Also refuses caches on upstreams whose sessions each have their own
/// connection (their answers are the session's, not to be shared).
pub(crate) fn check(
    ctx: &Ctx<'_>,
    settings: &CacheSettings,
    upstreams: &[UpstreamConfig],
) -> Result<(), ConfigError> {
    let mut reserved = 0u64;
    let mut shares = false;
    for u in upstreams {
        let path = child("upstreams", &u.key);
        if let (Isolation::Session { .. }, Some((key, _))) = (u.isolation, u.caches.rules().next())
        {
            return Err(ctx.err(
                format!("{path}.{key}"),
                "an upstream with isolation = \"session\" cannot be cached: its answers belong to one session",
            ));
        }
        for (key, rule) in u.caches.rules() {
            match rule.max_bytes {
                Some(n) => {
                    reserved = reserved.saturating_add(n);
                    if reserved > settings.max_bytes {
                        return Err(ctx.err(
                            format!("{path}.{key}.max_bytes"),
                            format!(
                                "the caches' own budgets add up to more than cache.max_bytes ({} bytes)",
                                settings.max_bytes
                            ),
                        ));
                    }
                }
                None => shares = true,
            }
        }
    }
    if shares && reserved >= settings.max_bytes {
        return Err(ctx.err(
            "cache.max_bytes",
            "the caches' own budgets take all of it, leaving nothing for the caches without max_bytes",
        ));
    }
    Ok(())
}

/// `500ms`, `30s`, `5m`, `1h`, `1d`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (count, unit) = text.split_at(split);
    let count: u64 = count.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    count.checked_mul(ms).map(Duration::from_millis)
}

/// `4096`, `512B`, `64KiB`, `64MiB`, `1GiB` (also KB, MB, GB, as powers of 1024).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(split);
    let count: u64 = count.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        _ => return None,
    };
    count.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_parse() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration(" 5m "), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("1.5s"), None);
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("512"), Some(512));
        assert_eq!(parse_bytes("2 KiB"), Some(2048));
        assert_eq!(parse_bytes("1TB"), None);
        assert_eq!(parse_bytes("-1"), None);
    }
}
