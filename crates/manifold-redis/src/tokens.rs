//! The tokens of upstream credentials in Redis (`[credentials] store = "redis"`), shared by
//! every replica using the same Redis and key prefix, sealed with the `[credentials]` keys.
//!
//! Keys (`{p}` is the store's `key_prefix`; `{upstream}` the upstream's config key, each byte
//! outside `A-Za-z0-9_-` written `%XX`; `{owner}` the owner's 64 hex digits):
//! - `{p}:token:{upstream}:{owner}`: the grant, sealed (AES-256-GCM, bound to this key). A
//!   grant that can be refreshed never expires here (revoking removes it); one that cannot
//!   expires with its access token, when it is of no more use.
//! - `{p}:tokens:owner:{owner}` (the owner's upstreams), `{p}:tokens:upstream:{upstream}`
//!   (the upstream's owners) and `{p}:tokens:upstreams`: the sets that removals and listings
//!   walk. A member whose grant expired is dropped when a listing finds it gone.
//! - `{p}:token-lock:{upstream}:{owner}`: the refresh lock, `SET NX PX` with a random value
//!   of the holder, released by a script that deletes it only if it still holds that value:
//!   two replicas never spend one refresh token twice, and a holder whose ttl ran out never
//!   releases the next one's lock.
//! - `{p}:once:{key}`: a once-value (a consent in progress), sealed, with its ttl; taken with
//!   `GETDEL`, so that exactly one replica gets it.
//!
//! Every exchange is bounded by `redis_timeout_ms`; after a failure Redis is left alone for a
//! second (the error is immediate meanwhile). An outage is logged by the URL's health.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use manifold_auth::store::Sealer;
use manifold_auth::{Owner, StoreError};
use manifold_config::{RedisConfig, SealKey};
use redis::{Cmd, FromRedisValue, Pipeline, Script, ScriptInvocation};
use ring::rand::{SecureRandom, SystemRandom};

use crate::connection::{Connection, Failure};
use crate::health::User;

/// KEYS[1]: the owner's set. ARGV: the prefix, the owner. Removes each grant the set names
/// and the owner from each upstream's set; returns how many grants there were.
const REMOVE_OWNER: &str = r"
local n = 0
for _, up in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  n = n + redis.call('DEL', ARGV[1] .. ':token:' .. up .. ':' .. ARGV[2])
  redis.call('SREM', ARGV[1] .. ':tokens:upstream:' .. up, ARGV[2])
end
redis.call('DEL', KEYS[1])
return n
";

/// KEYS[1]: the upstream's set, KEYS[2]: the set of upstreams. ARGV: the prefix, the
/// upstream. Removes each grant of the upstream; returns how many there were.
const REMOVE_UPSTREAM: &str = r"
local n = 0
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  n = n + redis.call('DEL', ARGV[1] .. ':token:' .. ARGV[2] .. ':' .. owner)
  redis.call('SREM', ARGV[1] .. ':tokens:owner:' .. owner, ARGV[2])
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return n
";

/// KEYS[1]: the set of upstreams. ARGV: the prefix. Returns upstream, owner and sealed grant,
/// flattened, for every grant; drops the members whose grant expired.
const LIST: &str = r"
local out = {}
for _, up in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local owners = ARGV[1] .. ':tokens:upstream:' .. up
  for _, owner in ipairs(redis.call('SMEMBERS', owners)) do
    local v = redis.call('GET', ARGV[1] .. ':token:' .. up .. ':' .. owner)
    if v then
      out[#out + 1] = up
      out[#out + 1] = owner
      out[#out + 1] = v
    else
      redis.call('SREM', owners, owner)
      redis.call('SREM', ARGV[1] .. ':tokens:owner:' .. owner, up)
    end
  end
end
return out
";

/// KEYS[1]: a lock. ARGV[1]: its holder's value. Deletes it only if that holder holds it.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Grants, refresh locks and once-values in Redis.
pub struct RedisTokens {
    conn: Arc<Connection>,
    timeout: Duration,
    prefix: String,
    sealer: Sealer,
    random: SystemRandom,
    /// The value this store set on each lock it holds, to release only its own.
    holders: Mutex<HashMap<(String, Owner), String>>,
    remove_owner: Script,
    remove_upstream: Script,
    list: Script,
    unlock: Script,
    _user: Arc<User>,
}

impl RedisTokens {
    /// Does not connect yet. No key (`keys` empty) is an error: Redis holds tokens at rest.
    pub fn new(
        conn: Arc<Connection>,
        config: &RedisConfig,
        keys: &[SealKey],
    ) -> Result<Self, StoreError> {
        let sealer = Sealer::new(keys)?;
        let user = conn.health().user(User {
            name: "the token store",
            down: "each replica serves the tokens it holds in memory".into(),
            back: "tokens are shared again".into(),
        });
        Ok(Self {
            conn,
            timeout: config.timeout,
            prefix: config.key_prefix.clone(),
            sealer,
            random: SystemRandom::new(),
            holders: Mutex::new(HashMap::new()),
            remove_owner: Script::new(REMOVE_OWNER),
            remove_upstream: Script::new(REMOVE_UPSTREAM),
            list: Script::new(LIST),
            unlock: Script::new(UNLOCK),
            _user: user,
        })
    }

    fn grant_key(&self, upstream: &str, owner: &Owner) -> String {
        format!("{}:token:{}:{}", self.prefix, encode(upstream), owner.hex())
    }

    fn lock_key(&self, upstream: &str, owner: &Owner) -> String {
        format!(
            "{}:token-lock:{}:{}",
            self.prefix,
            encode(upstream),
            owner.hex()
        )
    }

    fn owner_set(&self, owner: &Owner) -> String {
        format!("{}:tokens:owner:{}", self.prefix, owner.hex())
    }

    fn upstream_set(&self, upstream: &str) -> String {
        format!("{}:tokens:upstream:{}", self.prefix, encode(upstream))
    }

    fn upstreams_set(&self) -> String {
        format!("{}:tokens:upstreams", self.prefix)
    }

    fn once_key(&self, key: &str) -> String {
        format!("{}:once:{}", self.prefix, encode(key))
    }

    /// Fails at once while Redis is being left alone after a failure.
    fn usable(&self) -> Result<(), StoreError> {
        if self.conn.health().usable() {
            Ok(())
        } else {
            Err(StoreError(
                "the token store (Redis) is unreachable; tried again shortly".into(),
            ))
        }
    }

    fn failure(e: &Failure) -> StoreError {
        StoreError(format!("the token store (Redis) failed: {e}"))
    }

    async fn command<T: FromRedisValue + Send>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.usable()?;
        self.conn
            .run(self.timeout, |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await
            .map_err(|e| Self::failure(&e))
    }

    async fn pipeline<T: FromRedisValue + Send>(&self, pipe: &Pipeline) -> Result<T, StoreError> {
        self.usable()?;
        self.conn
            .run(self.timeout, |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await
            .map_err(|e| Self::failure(&e))
    }

    async fn script<T: FromRedisValue + Send>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.usable()?;
        self.conn
            .run(self.timeout, |mut c| async move {
                invocation.invoke_async(&mut c).await
            })
            .await
            .map_err(|e| Self::failure(&e))
    }

    fn holder(&self) -> Result<String, StoreError> {
        let mut bytes = [0u8; 16];
        self.random
            .fill(&mut bytes)
            .map_err(|_| StoreError("no randomness for a lock".into()))?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    fn holders(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Owner), String>> {
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

mod store;

/// `text` with each byte outside `A-Za-z0-9_-` written `%XX`, so that it cannot run into
/// the key's other parts.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What [`encode`] wrote; `None` if it is not such a text.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
