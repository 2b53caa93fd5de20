//! The shared tier of the result cache (`[cache] backend = "redis"`): entries kept in Redis
//! behind each process's own memory, so that every replica using the same Redis and key
//! prefix answers from what any of them stored.
//!
//! Keys (`{prefix}` is `[cache] key_prefix`; `{upstream}` the upstream's config key, each byte
//! outside `A-Za-z0-9_-` written `%XX`):
//! - `{prefix}:cache:gen:{upstream}`: the upstream's generation, part of every key of its
//!   entries. Any replica that sees the upstream change (its catalog replaced, or it went
//!   down, once it had been serving) increments it: entries stored before are never read
//!   again, by anyone, and expire with their ttl.
//! - `{prefix}:cache:gen:{upstream}:{uri}`: a resource's generation (`{uri}` the first 32 hex
//!   digits of the SHA-256 of the upstream's own URI), incremented on
//!   `notifications/resources/updated`; it expires a minute after the resource cache's ttl,
//!   when every entry stored under it has expired too.
//! - `{prefix}:cache:{upstream}:{gen}:tools:{scope}:{digest}` and
//!   `{prefix}:cache:{upstream}:{gen}.{resource gen}:resources:{scope}:{digest}`: an entry,
//!   the answer's JSON text with the entry's ttl (`PX`). `{scope}` is `team.{name}` for a
//!   team's own entry and `shared` otherwise, as in memory; `{digest}` is the SHA-256 of the
//!   tool name or URI as the upstream knows it, the canonical arguments, and the upstream's
//!   URI prefix settings (stored answers carry URIs as hosts see them).
//! - Channel `{prefix}:cache:events`: each increment is published (by the script that makes
//!   it, with the new generation), so that the other replicas drop what they hold in memory
//!   at once. Each replica also reads the upstreams' generations every five seconds, and
//!   drops everything it holds in memory when its subscription had to be opened again, so
//!   that a lost event costs at most five seconds of stale memory hits (for a resource's
//!   update: the entry's ttl).
//!
//! A lookup is one script (the generations, then `GET` and `PTTL` of the entry they name), so
//! that it never reads an entry of a generation that is over. A store is one script that
//! writes only if the generations are still those its lookup saw: an answer fetched before a
//! change, on whatever replica, is never stored after it.
//!
//! Failures never fail a request: a lookup that fails or takes longer than
//! `redis_timeout_ms` is a miss, a store that fails leaves the entry in memory only, an
//! increment that fails is tried again each second, and until it succeeds this replica does
//! not use the store for what changed. After a failure the store is left alone for a second
//! (each request meanwhile goes straight to the upstream); each failed or skipped operation
//! is counted (`manifold_cache_store_errors_total`), and an outage is logged by the URL's
//! health (once, again at most every minute), with a line when it is over.
//!
//! The upkeep (increments, the generations' poll and the events subscription) is in `upkeep`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use manifold_config::{RedisConfig, UpstreamConfig};
use manifold_core::cache::tier::{Found, SharedTier, Ticket};
use manifold_core::cache::{Cache, Family, Key};
use manifold_telemetry::{metrics, StoreOp};
use redis::aio::ConnectionManager;
use redis::{RedisResult, Script, Value};
use ring::digest::{digest, SHA256};
use tokio::runtime::Handle;

use crate::connection::Connection;
use crate::health::User;

mod upkeep;

/// How long the events subscription waits before it is opened again.
const RETRY: Duration = Duration::from_secs(1);
/// How often the events subscription is checked with a `PING`.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How often the upstreams' generations are read, in case an event was lost.
const POLL_EVERY: Duration = Duration::from_secs(5);
/// A resource's generation outlives the entries stored under it by this much.
const RESOURCE_GEN_MARGIN: Duration = Duration::from_secs(60);

/// KEYS: the upstream's generation, and for a resource its own. ARGV: what comes before the
/// generations in the entry's key, and what follows them. Returns `{gens}` when there is no
/// entry, else `{gens, answer, remaining ms}`.
const LOOKUP: &str = r"
local gens = redis.call('GET', KEYS[1]) or '0'
if KEYS[2] then gens = gens .. '.' .. (redis.call('GET', KEYS[2]) or '0') end
local key = ARGV[1] .. gens .. ARGV[2]
local answer = redis.call('GET', key)
if not answer then return {gens} end
return {gens, answer, redis.call('PTTL', key)}
";

/// KEYS and ARGV[1..2] as [`LOOKUP`]; ARGV[3]: the generations the lookup saw, ARGV[4] the
/// answer, ARGV[5] its ttl in ms. Stores only if the generations did not change meanwhile;
/// returns 1 if stored, else 0.
const STORE: &str = r"
local gens = redis.call('GET', KEYS[1]) or '0'
if KEYS[2] then gens = gens .. '.' .. (redis.call('GET', KEYS[2]) or '0') end
if gens ~= ARGV[3] then return 0 end
redis.call('SET', ARGV[1] .. gens .. ARGV[2], ARGV[4], 'PX', ARGV[5])
return 1
";

/// KEYS[1]: a generation. ARGV: its expiry in ms (0: none), the events channel, the event up
/// to the generation, what follows it. Increments it and publishes the event with the new
/// value; returns it.
const BUMP: &str = r"
local gen = redis.call('INCR', KEYS[1])
if tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. gen .. ARGV[4])
return gen
";

/// The shared store and what this replica knows of it.
pub(crate) struct RedisTier {
    conn: Arc<Connection>,
    /// What an outage means for requests, as the URL's health logs it.
    _user: Arc<User>,
    timeout: Duration,
    prefix: String,
    channel: String,
    /// This replica's id in events, so that it ignores its own.
    node: String,
    /// By upstream index.
    upstreams: Vec<Upstream>,
    /// Upstream index by encoded name, for events.
    by_name: HashMap<String, usize>,
    /// When the generations were last read.
    polled: Mutex<Option<Instant>>,
    /// Where stores, increments and the events subscription run.
    runtime: Handle,
    lookup: Script,
    store: Script,
    bump: Script,
}

struct Upstream {
    /// The config key, encoded for keys and events.
    name: String,
    gen_key: String,
    /// What else the stored answers depend on: the settings that make the URIs hosts see.
    fingerprint: String,
    /// How long its resource entries live at most (the resource cache's ttl), if it has one.
    resource_ttl: Option<Duration>,
    /// The generation last read or heard of (`UNKNOWN` before the first).
    seen: AtomicU64,
    /// Increments not yet made in Redis.
    pending: Mutex<Pending>,
    /// Whether `pending` holds anything (read on every lookup without the lock).
    pending_any: AtomicBool,
}

const UNKNOWN: u64 = u64::MAX;

impl Upstream {
    /// Generation `gen` is known, with what this replica held before it dropped.
    fn raise_seen(&self, gen: u64) {
        let _ = self
            .seen
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s == UNKNOWN || s < gen).then_some(gen)
            });
    }
}

/// Changes this replica saw that Redis has not been told of yet. Each request is numbered;
/// one that came while an increment was under way is made again.
#[derive(Default)]
struct Pending {
    next: u64,
    /// The upstream's own generation (the number of the latest request; 0: none).
    upstream: u64,
    /// Resources' generations, by the upstream's URI.
    uris: BTreeMap<Box<str>, u64>,
    /// Whether a task is making them.
    flushing: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.upstream == 0 && self.uris.is_empty()
    }
}

/// Where an entry is in Redis, but for its generations.
pub(crate) struct Stem {
    upstream: usize,
    /// The upstream's generation key, and a resource's.
    gen_keys: Vec<String>,
    head: String,
    tail: String,
}

/// A lookup's view of the store (what its [`Ticket`] holds): where the entry is, under the
/// generations it saw. A fill stores its answer with it (if they are still current).
struct Place {
    stem: Stem,
    gens: Box<str>,
}

impl RedisTier {
    /// The shared tier for the caches of `upstreams`. Does not connect yet.
    fn new(
        conn: Arc<Connection>,
        config: &RedisConfig,
        upstreams: &[UpstreamConfig],
    ) -> Result<Self, String> {
        let runtime = Handle::try_current()
            .map_err(|_| "the shared cache needs the async runtime".to_owned())?;
        let prefix = &config.key_prefix;
        let upstreams: Vec<Upstream> = upstreams
            .iter()
            .map(|u| {
                let name = encode(&u.key);
                Upstream {
                    gen_key: format!("{prefix}:cache:gen:{name}"),
                    fingerprint: format!("{:?}\n{}", u.uri_prefix, u.prefix),
                    resource_ttl: u.caches.resources.as_ref().map(|r| r.ttl),
                    seen: AtomicU64::new(UNKNOWN),
                    pending: Mutex::default(),
                    pending_any: AtomicBool::new(false),
                    name,
                }
            })
            .collect();
        let by_name = upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| (u.name.clone(), i))
            .collect();
        let user = conn.health().user(User {
            name: "the cache store",
            down: "cached requests go to the upstreams (and answers stay in each replica's memory) until it is back".into(),
            back: "entries are shared".into(),
        });
        Ok(Self {
            conn,
            _user: user,
            timeout: config.timeout,
            channel: format!("{prefix}:cache:events"),
            prefix: prefix.clone(),
            node: node_id(),
            upstreams,
            by_name,
            polled: Mutex::new(None),
            runtime,
            lookup: Script::new(LOOKUP),
            store: Script::new(STORE),
            bump: Script::new(BUMP),
        })
    }

    /// Whether the entry of `key` may be looked up and stored now: not while a change this
    /// replica saw is not yet known to Redis (the store would still hold what it replaced).
    fn usable_for(&self, key: &Key) -> bool {
        let Some(up) = self.upstreams.get(key.upstream()) else {
            return false;
        };
        if !up.pending_any.load(Ordering::Acquire) {
            return true;
        }
        let pending = lock(&up.pending);
        pending.upstream == 0
            && !(key.family() == Family::Resources && pending.uris.contains_key(key.name()))
    }

    /// Where the entry of `key` is in Redis.
    fn stem(&self, key: &Key) -> Option<Stem> {
        let up = self.upstreams.get(key.upstream())?;
        let (name, args) = (key.name(), key.args());
        let mut material = Vec::with_capacity(up.fingerprint.len() + name.len() + args.len() + 24);
        for part in [up.fingerprint.as_bytes(), name.as_bytes(), args.as_bytes()] {
            material.extend_from_slice(&(part.len() as u64).to_le_bytes());
            material.extend_from_slice(part);
        }
        let digest = hex(digest(&SHA256, &material).as_ref());
        let scope = match key.team() {
            Some(team) => format!("team.{team}"),
            None => "shared".to_owned(),
        };
        let mut gen_keys = vec![up.gen_key.clone()];
        let family = match key.family() {
            Family::Tools => "tools",
            Family::Resources => {
                gen_keys.push(self.resource_gen_key(up, name));
                "resources"
            }
        };
        Some(Stem {
            upstream: key.upstream(),
            gen_keys,
            head: format!("{}:cache:{}:", self.prefix, up.name),
            tail: format!(":{family}:{scope}:{digest}"),
        })
    }

    fn resource_gen_key(&self, up: &Upstream, uri: &str) -> String {
        let hash = hex(&digest(&SHA256, uri.as_bytes()).as_ref()[..16]);
        format!("{}:{hash}", up.gen_key)
    }

    /// The entry at `stem`, if there is one, with the ticket a fill stores its answer with.
    /// `None`: the store could not be asked (the request is a miss that is not shared).
    async fn lookup(&self, stem: Stem) -> Option<(Ticket, Option<Found>)> {
        let mut invocation = self.lookup.prepare_invoke();
        for key in &stem.gen_keys {
            invocation.key(key);
        }
        invocation.arg(&stem.head).arg(&stem.tail);
        let invocation = &invocation;
        let value: Value = self
            .run(StoreOp::Lookup, move |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        let mut items = match value {
            Value::Array(items) if !items.is_empty() => items.into_iter(),
            other => return self.unexpected(StoreOp::Lookup, &other),
        };
        let gens = match items.next() {
            Some(Value::BulkString(g)) => String::from_utf8_lossy(&g).into(),
            Some(Value::SimpleString(g)) => g.into(),
            other => return self.unexpected(StoreOp::Lookup, &other),
        };
        let found = match (items.next(), items.next()) {
            (Some(Value::BulkString(answer)), Some(Value::Int(ms))) if ms > 0 => {
                String::from_utf8(answer).ok().map(|result| Found {
                    result: result.into(),
                    remaining: Duration::from_millis(ms.unsigned_abs()),
                })
            }
            _ => None,
        };
        Some((Ticket::new(Place { stem, gens }), found))
    }

    /// Stores `result` for `ttl` where `ticket` says, unless its generations are over. Runs
    /// on its own: the fill does not wait for it.
    fn store(self: &Arc<Self>, ticket: Ticket, result: Box<str>, ttl: Duration) {
        let Some(Place { stem, gens }) = ticket.take::<Place>() else {
            return;
        };
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            let mut invocation = shared.store.prepare_invoke();
            for key in &stem.gen_keys {
                invocation.key(key);
            }
            invocation
                .arg(&stem.head)
                .arg(&stem.tail)
                .arg(&*gens)
                .arg(&*result)
                .arg(ms);
            let invocation = &invocation;
            let stored: Option<i64> = shared
                .run(StoreOp::Store, move |mut conn| async move {
                    invocation.invoke_async(&mut conn).await
                })
                .await;
            if stored == Some(0) {
                tracing::debug!(
                    upstream = %shared.upstreams[stem.upstream].name,
                    "not shared: the upstream or resource changed while it was fetched"
                );
            }
        });
    }

    /// Runs `f` on the connection within the timeout, or counts and logs why not: `None`.
    async fn run<T, F, Fut>(&self, op: StoreOp, f: F) -> Option<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let outcome = self.attempt(f).await;
        if outcome.is_none() {
            metrics().cache_store_error(op);
        }
        outcome
    }

    /// [`Self::run`] for the upkeep's own reads, which answer no request: not counted.
    async fn run_quietly<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.attempt(f).await
    }

    /// `f`, within the timeout, on the URL's shared connection: `None` when it failed, or
    /// while Redis is being left alone after a failure.
    async fn attempt<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if !self.conn.health().usable() {
            return None;
        }
        self.conn.run(self.timeout, f).await.ok()
    }

    /// An answer of the wrong shape: counted as a failure of `op`.
    fn unexpected<T>(&self, op: StoreOp, value: &dyn std::fmt::Debug) -> Option<T> {
        metrics().cache_store_error(op);
        self.conn
            .health()
            .failed(&format!("unexpected answer {value:?}"));
        None
    }
}

/// The tier as the cache holds it.
pub(crate) struct Tier(Arc<RedisTier>);

impl Tier {
    /// The shared tier for the caches of `upstreams`, over `conn`. Does not connect yet.
    pub(crate) fn new(
        conn: Arc<Connection>,
        config: &RedisConfig,
        upstreams: &[UpstreamConfig],
    ) -> Result<Self, String> {
        RedisTier::new(conn, config, upstreams).map(|s| Self(Arc::new(s)))
    }
}

impl SharedTier for Tier {
    fn usable_for(&self, key: &Key) -> bool {
        self.0.usable_for(key)
    }

    fn lookup<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Option<(Ticket, Option<Found>)>> {
        Box::pin(async move { self.0.lookup(self.0.stem(key)?).await })
    }

    fn store(&self, ticket: Ticket, result: Box<str>, ttl: Duration) {
        self.0.store(ticket, result, ttl);
    }

    fn changed(&self, upstream: usize, uri: Option<&str>) {
        self.0.changed(upstream, uri);
    }

    fn tick<'a>(&'a self, cache: &'a Arc<Cache>) -> BoxFuture<'a, ()> {
        Box::pin(self.0.tick(cache))
    }

    fn listen(&self, cache: Weak<Cache>) {
        self.0.listen(cache);
    }
}

/// `text` with every byte outside `A-Za-z0-9_-` written `%XX`: a key part with no `:`.
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

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// 64 random bits, in hex.
fn node_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // Unique enough among replicas: the process id and the time.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (u64::from(std::process::id()) ^ nanos as u64).to_le_bytes();
    }
    hex(&bytes)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_keys_cannot_be_confused() {
        assert_eq!(encode("docs-2_x"), "docs-2_x");
        assert_eq!(encode("a:b c%"), "a%3Ab%20c%25");
        assert_eq!(encode("é"), "%C3%A9");
        assert_ne!(encode("a:b"), encode("a%3Ab"));
    }
}
