//! `[sessions]`: where the state of session-era Streamable HTTP sessions lives. In this
//! process only (the default: a session belongs to the replica that created it, and a load
//! balancer must keep its requests there), or in Redis, so that every replica sharing the
//! Redis and key prefix can serve any session's requests and take over its event stream.

use serde::Deserialize;

use crate::policy::{redis_config, redis_only_unset, RawRedis, RedisConfig};
use crate::validate::Ctx;
use crate::ConfigError;

/// Where sessions are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SessionStore {
    /// In this process.
    #[default]
    Memory,
    /// In Redis, shared by the replicas that use the same server and key prefix.
    Redis(RedisConfig),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawSessions {
    store: Option<String>,
    redis_url: Option<String>,
    redis_timeout_ms: Option<u64>,
    key_prefix: Option<String>,
}

pub(crate) fn store(ctx: &Ctx<'_>, raw: RawSessions) -> Result<SessionStore, ConfigError> {
    match raw.store.as_deref() {
        None | Some("memory") => {
            redis_only_unset(
                ctx,
                "sessions",
                "store",
                &[
                    ("redis_url", raw.redis_url.is_some()),
                    ("redis_timeout_ms", raw.redis_timeout_ms.is_some()),
                    ("key_prefix", raw.key_prefix.is_some()),
                ],
            )?;
            Ok(SessionStore::Memory)
        }
        Some("redis") => Ok(SessionStore::Redis(redis_config(
            ctx,
            "sessions",
            RawRedis {
                url: raw.redis_url.as_deref(),
                pool_size: None,
                timeout_ms: raw.redis_timeout_ms,
                key_prefix: raw.key_prefix,
            },
        )?)),
        Some(other) => Err(ctx.err(
            "sessions.store",
            format!("{other:?} is not a store; use \"memory\" or \"redis\""),
        )),
    }
}
