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
//! is counted (`manifold_cache_store_errors_total`), and an outage is logged once (again at
//! most every minute), with a line when it is over.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::StreamExt;
use manifold_config::{redact_url, RedisConfig, UpstreamConfig};
use manifold_telemetry::{metrics, StoreOp};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ErrorKind, RedisResult, Script, Value};
use ring::digest::{digest, SHA256};
use tokio::runtime::Handle;

use super::{Cache, Family, Key};

/// How long the store is left alone after a failure.
const RETRY: Duration = Duration::from_secs(1);
/// An outage is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);
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
pub(super) struct Shared {
    client: Client,
    manager_config: ConnectionManagerConfig,
    conn: Mutex<Conn>,
    timeout: Duration,
    prefix: String,
    channel: String,
    /// This replica's id in events, so that it ignores its own.
    node: String,
    /// The URL without its password, for logs.
    url: String,
    /// By upstream index.
    upstreams: Vec<Upstream>,
    /// Upstream index by encoded name, for events.
    by_name: HashMap<String, usize>,
    health: Health,
    /// When the generations were last read.
    polled: Mutex<Option<Instant>>,
    /// Where stores, increments and the events subscription run.
    runtime: Handle,
    lookup: Script,
    store: Script,
    bump: Script,
}

/// The connection, opened on first use and replaced when it stops answering.
#[derive(Default)]
struct Conn {
    /// Counts replacements, so that callers that failed on the same connection replace it once.
    generation: u64,
    manager: Option<ConnectionManager>,
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
pub(super) struct Stem {
    upstream: usize,
    /// The upstream's generation key, and a resource's.
    gen_keys: Vec<String>,
    head: String,
    tail: String,
}

/// A lookup's view of the store: where the entry is, under the generations it saw. A fill
/// stores its answer with it (if they are still current).
pub struct Ticket {
    stem: Stem,
    gens: Box<str>,
}

/// An entry found in the store: the answer, and how long it has left.
pub(super) struct Found {
    pub(super) result: Box<str>,
    pub(super) remaining: Duration,
}

impl Shared {
    /// The shared tier for the caches of `upstreams`. Does not connect yet.
    pub(super) fn new(config: &RedisConfig, upstreams: &[UpstreamConfig]) -> Result<Self, String> {
        let url = redact_url(&config.url);
        let client = Client::open(config.url.as_str())
            .map_err(|e| format!("cache.redis_url {url:?} cannot be used: {e}"))?;
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
        // No retries inside the manager: a failed attempt fails the operation at once, and the
        // next one starts a new attempt.
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(Some(config.timeout))
            .set_number_of_retries(0);
        Ok(Self {
            client,
            manager_config,
            conn: Mutex::default(),
            timeout: config.timeout,
            channel: format!("{prefix}:cache:events"),
            prefix: prefix.clone(),
            node: node_id(),
            url,
            upstreams,
            by_name,
            health: Health::default(),
            polled: Mutex::new(None),
            runtime,
            lookup: Script::new(LOOKUP),
            store: Script::new(STORE),
            bump: Script::new(BUMP),
        })
    }

    /// Whether the entry of `key` may be looked up and stored now: not while a change this
    /// replica saw is not yet known to Redis (the store would still hold what it replaced).
    pub(super) fn usable_for(&self, key: &Key) -> bool {
        let Some(up) = self.upstreams.get(key.upstream) else {
            return false;
        };
        if !up.pending_any.load(Ordering::Acquire) {
            return true;
        }
        let pending = lock(&up.pending);
        pending.upstream == 0
            && !(key.family == Family::Resources && pending.uris.contains_key(&*key.name))
    }

    /// Where the entry of `key` is in Redis.
    pub(super) fn stem(&self, key: &Key) -> Stem {
        let up = &self.upstreams[key.upstream];
        let mut material =
            Vec::with_capacity(up.fingerprint.len() + key.name.len() + key.args.len() + 24);
        for part in [
            up.fingerprint.as_bytes(),
            key.name.as_bytes(),
            key.args.as_bytes(),
        ] {
            material.extend_from_slice(&(part.len() as u64).to_le_bytes());
            material.extend_from_slice(part);
        }
        let digest = hex(digest(&SHA256, &material).as_ref());
        let scope = match &key.team {
            Some(team) => format!("team.{team}"),
            None => "shared".to_owned(),
        };
        let mut gen_keys = vec![up.gen_key.clone()];
        let family = match key.family {
            Family::Tools => "tools",
            Family::Resources => {
                gen_keys.push(self.resource_gen_key(up, &key.name));
                "resources"
            }
        };
        Stem {
            upstream: key.upstream,
            gen_keys,
            head: format!("{}:cache:{}:", self.prefix, up.name),
            tail: format!(":{family}:{scope}:{digest}"),
        }
    }

    fn resource_gen_key(&self, up: &Upstream, uri: &str) -> String {
        let hash = hex(&digest(&SHA256, uri.as_bytes()).as_ref()[..16]);
        format!("{}:{hash}", up.gen_key)
    }

    /// The entry at `stem`, if there is one, with the ticket a fill stores its answer with.
    /// `None`: the store could not be asked (the request is a miss that is not shared).
    pub(super) async fn lookup(&self, stem: Stem) -> Option<(Ticket, Option<Found>)> {
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
        Some((Ticket { stem, gens }, found))
    }

    /// Stores `result` for `ttl` where `ticket` says, unless its generations are over. Runs
    /// on its own: the fill does not wait for it.
    pub(super) fn store(self: &Arc<Self>, ticket: Ticket, result: Box<str>, ttl: Duration) {
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            let Ticket { stem, gens } = ticket;
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

    /// Upstream `upstream` changed (`uri`: only that resource): Redis is told, and through it
    /// the other replicas. Until it is, this replica does not use the store for it.
    pub(super) fn changed(self: &Arc<Self>, upstream: usize, uri: Option<&str>) {
        let Some(up) = self.upstreams.get(upstream) else {
            return;
        };
        let mut pending = lock(&up.pending);
        pending.next += 1;
        let n = pending.next;
        match uri {
            None => pending.upstream = n,
            Some(uri) => {
                pending.uris.insert(uri.into(), n);
            }
        }
        up.pending_any.store(true, Ordering::Release);
        if !pending.flushing {
            pending.flushing = true;
            let shared = Arc::clone(self);
            self.runtime
                .spawn(async move { shared.flush(upstream).await });
        }
    }

    /// Makes the increments `upstream` has pending, until none is left or one fails (the
    /// upkeep tries again).
    async fn flush(&self, upstream: usize) {
        let up = &self.upstreams[upstream];
        loop {
            let (upto, whole, uris) = {
                let mut pending = lock(&up.pending);
                if pending.is_empty() {
                    pending.flushing = false;
                    up.pending_any.store(false, Ordering::Release);
                    return;
                }
                let uris: Vec<Box<str>> = pending.uris.keys().cloned().collect();
                (pending.next, pending.upstream != 0, uris)
            };
            let mut ok = true;
            if whole {
                match self.increment(up, None).await {
                    // Its own change: what it held was dropped when it saw it.
                    Some(gen) => up.raise_seen(gen),
                    None => ok = false,
                }
            }
            for uri in &uris {
                if ok {
                    ok = self.increment(up, Some(uri)).await.is_some();
                }
            }
            let mut pending = lock(&up.pending);
            if !ok {
                pending.flushing = false;
                return;
            }
            if pending.upstream <= upto {
                pending.upstream = 0;
            }
            pending.uris.retain(|_, n| *n > upto);
        }
    }

    /// One increment and its event; the new generation.
    async fn increment(&self, up: &Upstream, uri: Option<&str>) -> Option<u64> {
        let mut invocation = self.bump.prepare_invoke();
        match uri {
            None => {
                invocation
                    .key(&up.gen_key)
                    .arg(0)
                    .arg(&self.channel)
                    .arg(format!("u {} {}", self.node, up.name))
                    .arg("");
            }
            Some(uri) => {
                let keep = up.resource_ttl.unwrap_or_default() + RESOURCE_GEN_MARGIN;
                invocation
                    .key(self.resource_gen_key(up, uri))
                    .arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX))
                    .arg(&self.channel)
                    .arg(format!("r {} {}", self.node, up.name))
                    .arg(format!(" {uri}"));
            }
        }
        let invocation = &invocation;
        self.run(StoreOp::Invalidate, move |mut conn| async move {
            invocation.invoke_async::<u64>(&mut conn).await
        })
        .await
    }

    /// The upkeep, once a second: increments that failed are tried again, and every
    /// [`POLL_EVERY`] the upstreams' generations are read, so that a change whose event was
    /// lost still reaches this replica's memory.
    pub(super) async fn tick(self: &Arc<Self>, cache: &Arc<Cache>) {
        let weak = Arc::downgrade(cache);
        for (i, up) in self.upstreams.iter().enumerate() {
            let mut pending = lock(&up.pending);
            if !pending.is_empty() && !pending.flushing && self.health.usable() {
                pending.flushing = true;
                let shared = Arc::clone(self);
                self.runtime.spawn(async move { shared.flush(i).await });
            }
        }
        let cached: Vec<usize> = (0..self.upstreams.len())
            .filter(|&i| cache.upstreams[i].stores().next().is_some())
            .collect();
        if cached.is_empty() || !self.health.usable() {
            return;
        }
        {
            let mut polled = lock(&self.polled);
            if polled.is_some_and(|at: Instant| at.elapsed() < POLL_EVERY) {
                return;
            }
            *polled = Some(Instant::now());
        }
        let mut cmd = redis::cmd("MGET");
        for &i in &cached {
            cmd.arg(&self.upstreams[i].gen_key);
        }
        let cmd = &cmd;
        let Some(gens) = self
            .run_quietly(move |mut conn| async move {
                cmd.query_async::<Vec<Option<u64>>>(&mut conn).await
            })
            .await
        else {
            return;
        };
        for (&i, gen) in cached.iter().zip(gens) {
            self.heard(&weak, i, gen.unwrap_or(0));
        }
    }

    /// Generation `gen` of `upstream` was read or heard of: if this replica knew another one,
    /// what it holds in memory for the upstream is dropped.
    fn heard(&self, cache: &Weak<Cache>, upstream: usize, gen: u64) {
        let seen = self.upstreams[upstream].seen.swap(gen, Ordering::AcqRel);
        if seen != UNKNOWN && seen != gen {
            if let Some(cache) = cache.upgrade() {
                cache.drop_upstream(upstream);
            }
        }
    }

    /// Listens to the other replicas' events for as long as `cache` lives: a change of an
    /// upstream drops what this replica holds of it in memory, a resource's update that
    /// resource's entries. The subscription is opened again after any failure; everything in
    /// memory is dropped then, since events may have been missed.
    pub(super) fn listen(self: &Arc<Self>, cache: Weak<Cache>) {
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            let mut first = true;
            while cache.strong_count() > 0 {
                match shared.subscribe().await {
                    Ok(pubsub) => {
                        if !first {
                            if let Some(cache) = cache.upgrade() {
                                cache.drop_all();
                            }
                        }
                        first = false;
                        let why = shared.events(pubsub, &cache).await;
                        tracing::debug!(url = %shared.url, "cache events subscription ended: {why}");
                    }
                    Err(e) => {
                        tracing::debug!(url = %shared.url, "cannot subscribe to cache events: {e}");
                    }
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }

    async fn subscribe(&self) -> Result<redis::aio::PubSub, String> {
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&self.channel).await?;
            RedisResult::Ok(pubsub)
        };
        match tokio::time::timeout(self.timeout, subscribe).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    /// Handles events until the subscription fails or the cache is gone; why it ended.
    async fn events(&self, pubsub: redis::aio::PubSub, cache: &Weak<Cache>) -> String {
        let (mut sink, mut stream) = pubsub.split();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else {
                        return "the connection closed".into();
                    };
                    let Some(cache) = cache.upgrade() else {
                        return "the cache is gone".into();
                    };
                    if let Ok(text) = message.get_payload::<String>() {
                        self.event(&cache, &text);
                    }
                }
                _ = ping.tick() => {
                    if cache.strong_count() == 0 {
                        return "the cache is gone".into();
                    }
                    match tokio::time::timeout(self.timeout, sink.ping::<Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "no answer to PING".into(),
                    }
                }
            }
        }
    }

    /// One event: `u NODE UPSTREAM GEN` or `r NODE UPSTREAM GEN URI`.
    fn event(&self, cache: &Arc<Cache>, text: &str) {
        let mut parts = text.splitn(5, ' ');
        let (Some(kind), Some(node), Some(name), Some(gen)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Some(&upstream) = self.by_name.get(name) else {
            return;
        };
        if node == self.node {
            return;
        }
        match (kind, parts.next()) {
            ("u", None) => {
                if let Ok(gen) = gen.parse::<u64>() {
                    // Dropped below; a later read of this generation drops nothing more.
                    self.upstreams[upstream].raise_seen(gen);
                }
                cache.drop_upstream(upstream);
            }
            ("r", Some(uri)) => {
                cache.drop_resource(upstream, uri);
            }
            _ => {}
        }
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

    /// `f`, within the timeout. A connection that was refused or had been dropped (almost
    /// always while idle, before the command was written) is opened again and `f` run once
    /// more, within the same time.
    async fn attempt<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if !self.health.usable() {
            return None;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut resent = false;
        loop {
            let (generation, manager) = match self.manager() {
                Ok(m) => m,
                Err(e) => {
                    self.health.failed(&self.url, &e.to_string());
                    return None;
                }
            };
            match tokio::time::timeout_at(deadline, f(manager)).await {
                Ok(Ok(value)) => {
                    self.health.ok(&self.url);
                    return Some(value);
                }
                Ok(Err(e))
                    if !resent && (e.is_connection_dropped() || e.is_connection_refusal()) =>
                {
                    self.replace(generation);
                    resent = true;
                }
                Ok(Err(e)) => {
                    if needs_new_connection(&e) {
                        self.replace(generation);
                    }
                    self.health.failed(&self.url, &e.to_string());
                    return None;
                }
                Err(_) => {
                    // A connection that does not answer may be half-open and never recover
                    // by itself: open a new one next time.
                    self.replace(generation);
                    let why = format!("no answer within {} ms", self.timeout.as_millis());
                    self.health.failed(&self.url, &why);
                    return None;
                }
            }
        }
    }

    /// An answer of the wrong shape: counted as a failure of `op`.
    fn unexpected<T>(&self, op: StoreOp, value: &dyn std::fmt::Debug) -> Option<T> {
        metrics().cache_store_error(op);
        self.health
            .failed(&self.url, &format!("unexpected answer {value:?}"));
        None
    }

    fn manager(&self) -> RedisResult<(u64, ConnectionManager)> {
        let mut conn = lock(&self.conn);
        if let Some(manager) = &conn.manager {
            return Ok((conn.generation, manager.clone()));
        }
        let manager = ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.manager_config.clone(),
        )?;
        conn.manager = Some(manager.clone());
        Ok((conn.generation, manager))
    }

    /// Drops the connection unless someone already replaced it.
    fn replace(&self, generation: u64) {
        let mut conn = lock(&self.conn);
        if conn.generation == generation {
            conn.generation += 1;
            conn.manager = None;
        }
    }
}

/// Whether the store is being left alone after a failure, and the outage's log lines.
struct Health {
    down: AtomicBool,
    /// While down: when the store may be tried again, in ms after `base`.
    retry_at: AtomicU64,
    base: Instant,
    /// When an outage was last logged, and whether the current one was.
    logged: Mutex<(Option<Instant>, bool)>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            down: AtomicBool::new(false),
            retry_at: AtomicU64::new(0),
            base: Instant::now(),
            logged: Mutex::new((None, false)),
        }
    }
}

impl Health {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn usable(&self) -> bool {
        !self.down.load(Ordering::Acquire) || self.now_ms() >= self.retry_at.load(Ordering::Acquire)
    }

    fn failed(&self, url: &str, why: &str) {
        let retry = u64::try_from(RETRY.as_millis()).unwrap_or(1000);
        self.retry_at
            .store(self.now_ms() + retry, Ordering::Release);
        if self.down.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut logged = lock(&self.logged);
        let due = logged.0.is_none_or(|at: Instant| at.elapsed() >= LOG_EVERY);
        logged.1 = due;
        if due {
            logged.0 = Some(Instant::now());
            tracing::error!(
                "the cache store is unreachable: {url}: {why}; cached requests go to the upstreams (and answers stay in each replica's memory) until it is back"
            );
        }
    }

    fn ok(&self, url: &str) {
        if self.down.swap(false, Ordering::AcqRel) && lock(&self.logged).1 {
            tracing::warn!("the cache store is reachable again: {url}; entries are shared");
        }
    }
}

/// Whether the connection behind an error should be replaced rather than left to the manager,
/// which reconnects by itself only after I/O errors that close the connection.
fn needs_new_connection(e: &redis::RedisError) -> bool {
    match e.kind() {
        ErrorKind::Io => e.is_timeout(),
        ErrorKind::Server(_) => false,
        _ => true,
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

/// Returns once, pending, before it completes: what follows runs on the runtime
/// (`Router::run_here_first` moves a request that waits there), where the connection to Redis
/// lives, rather than on the thread that read the request.
#[derive(Default)]
pub(super) struct OntoRuntime(bool);

impl Future for OntoRuntime {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
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
