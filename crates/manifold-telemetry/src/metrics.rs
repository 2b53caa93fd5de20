//! The process's metrics: request durations by label set, session lifetimes, bytes moved and
//! per-upstream counters. Recording is a relaxed atomic add after, for durations, a read-locked
//! map lookup; what can be read when scraped (sessions open, upstreams up, catalog sizes) is
//! not recorded at all, but read then (see `manifold_core::scrape`).
//!
//! Long but flat: one recording function per metric, each beside the series it writes, so
//! that a metric's name, labels and update are read together.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::exposition::Exposition;
use crate::histogram::{Family, Histogram, OPERATION_BUCKETS, SESSION_BUCKETS};
use crate::names::{self, label, Metric};

/// How a request ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// A result (for a tool call, one without `isError`).
    Ok,
    /// A tool call whose result has `isError: true`.
    ToolError,
    /// A JSON-RPC error: from the upstream, or Manifold's refusal (unknown name, bad params).
    ProtocolError,
    /// No answer in time.
    Timeout,
    /// The host cancelled it.
    Cancelled,
    /// The upstream was down, unreachable or lost while the request was in flight.
    Unavailable,
    /// Refused by a rate limit.
    RateLimited,
    /// Refused by a quota.
    QuotaExceeded,
    /// Refused by policy (not allowed for the caller).
    Denied,
}

impl Outcome {
    /// Every outcome, in declaration order (`Outcome::ALL[o as usize] == o`).
    pub const ALL: [Self; 9] = [
        Self::Ok,
        Self::ToolError,
        Self::ProtocolError,
        Self::Timeout,
        Self::Cancelled,
        Self::Unavailable,
        Self::RateLimited,
        Self::QuotaExceeded,
        Self::Denied,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::ProtocolError => "protocol_error",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "unavailable",
            Self::RateLimited => "rate_limited",
            Self::QuotaExceeded => "quota_exceeded",
            Self::Denied => "denied",
        }
    }

    pub fn is_error(self) -> bool {
        self != Self::Ok
    }
}

/// How hosts reach Manifold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostTransport {
    Stdio,
    /// Streamable HTTP.
    Http,
    /// The 2024-11-05 HTTP+SSE transport.
    Sse,
}

impl HostTransport {
    pub const ALL: [Self; 3] = [Self::Stdio, Self::Http, Self::Sse];

    pub fn label(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
            Self::Sse => "sse",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Direction {
    In,
    Out,
}

/// The labels of one request-duration series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpLabels {
    /// From [`method_label`]: a known method or `other`.
    pub method: &'static str,
    /// The tool's name as hosts see it, for a tool in the catalog.
    pub tool: Option<Arc<str>>,
    pub upstream: Option<Arc<str>>,
    pub team: Arc<str>,
    /// A [`HostTransport`] label for hosts; `stdio`, `http`, `sse` or `openapi` for upstreams.
    pub transport: &'static str,
    pub outcome: Outcome,
}

/// Tool calls sent to one upstream, those of them that failed, and how long they took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub calls: u64,
    pub errors: u64,
    /// Calls that took at most each of [`OPERATION_BUCKETS`] (cumulative), then all of
    /// them; empty before the first call.
    pub durations: Vec<u64>,
}

/// Tool calls of one team's hosts, and the refusals among them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TeamCalls {
    pub calls: u64,
    pub rate_limited: u64,
    pub quota_exceeded: u64,
    /// Refused by policy: a tool the team does not see, a held tool, a consent to give.
    pub denied: u64,
}

/// Counters of one upstream, shared by all its connections (a restart or a session's own
/// connection adds to the same ones).
pub struct UpstreamCounters {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub restarts: AtomicU64,
    /// Health pings by [`HealthCheck`].
    pub health_checks: [AtomicU64; 3],
    /// How long answered health pings took.
    pub ping: Histogram,
    /// Entries into each breaker state, by [`BreakerState`] (the shared connection's).
    pub breaker_transitions: [AtomicU64; 3],
    /// Calls refused by an open breaker.
    pub breaker_rejections: AtomicU64,
    /// Consents and refreshes of the upstream's credentials.
    pub credentials: crate::credentials::CredentialCounters,
}

impl Default for UpstreamCounters {
    fn default() -> Self {
        Self {
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            health_checks: Default::default(),
            ping: Histogram::new(OPERATION_BUCKETS),
            breaker_transitions: Default::default(),
            breaker_rejections: AtomicU64::new(0),
            credentials: Default::default(),
        }
    }
}

/// How a health ping ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthCheck {
    /// Answered (with a result or an error: either way the upstream answers).
    Ok,
    /// Could not be sent, or failed before its time ran out.
    Error,
    /// Not answered within `health_timeout`.
    Timeout,
}

impl HealthCheck {
    pub const ALL: [Self; 3] = [Self::Ok, Self::Error, Self::Timeout];

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Timeout => "timeout",
        }
    }
}

/// A circuit breaker's state, as `manifold_upstream_breaker_state` gives it (the value is
/// the gauge's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    HalfOpen = 1,
    Open = 2,
}

impl BreakerState {
    pub const ALL: [Self; 3] = [Self::Closed, Self::HalfOpen, Self::Open];

    pub fn label(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::HalfOpen => "half_open",
            Self::Open => "open",
        }
    }
}

impl UpstreamCounters {
    pub fn received(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn sent(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Counters of one cache of one upstream (see `Metrics::cache`).
#[derive(Default)]
pub struct CacheCounters {
    /// By [`Tier`]: where the answer was found.
    pub hits: [AtomicU64; 2],
    pub misses: AtomicU64,
    /// By [`Eviction`].
    pub evictions: [AtomicU64; 3],
    /// Held now (weights of the entries: answer and key bytes).
    pub bytes: AtomicU64,
    pub entries: AtomicU64,
}

/// Why a cache entry went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Pushed out by the byte budget.
    Size,
    /// Its ttl passed.
    Expired,
    /// The upstream changed (restart, list_changed, resources/updated) or it was replaced.
    Invalidated,
}

impl Eviction {
    pub const ALL: [Eviction; 3] = [Eviction::Size, Eviction::Expired, Eviction::Invalidated];

    pub fn label(self) -> &'static str {
        match self {
            Eviction::Size => "size",
            Eviction::Expired => "expired",
            Eviction::Invalidated => "invalidated",
        }
    }
}

/// Where a cache hit was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// This process's own memory.
    Memory,
    /// The store shared by every replica (`[cache] backend = "redis"`).
    Redis,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Memory, Tier::Redis];

    pub fn label(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Redis => "redis",
        }
    }
}

/// What the cache asked of its shared store (Redis) when it could not be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// A lookup (the request went upstream, as a miss).
    Lookup,
    /// Keeping a fresh answer there (it stayed in this process's memory only).
    Store,
    /// Telling the other replicas that an upstream or a resource changed (tried again each
    /// second; meanwhile this replica does not use the store for what changed).
    Invalidate,
}

impl StoreOp {
    pub const ALL: [StoreOp; 3] = [StoreOp::Lookup, StoreOp::Store, StoreOp::Invalidate];

    pub fn label(self) -> &'static str {
        match self {
            StoreOp::Lookup => "lookup",
            StoreOp::Store => "store",
            StoreOp::Invalidate => "invalidate",
        }
    }
}

impl CacheCounters {
    /// A request answered from `tier`.
    pub fn hit(&self, tier: Tier) {
        self.hits[tier as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// An entry of `weight` bytes was stored.
    pub fn stored(&self, weight: u64) {
        self.bytes.fetch_add(weight, Ordering::Relaxed);
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    /// An entry of `weight` bytes went.
    pub fn removed(&self, weight: u64, why: Eviction) {
        // Never below zero, whatever the order of concurrent updates.
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(weight))
            });
        let _ = self
            .entries
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
        self.evictions[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// A cache (`tools` or `resources`) of an upstream (its key).
type CacheId = (&'static str, Arc<str>);

/// Every recorded metric of the process.
pub struct Metrics {
    enabled: AtomicBool,
    server_ops: Family<OpLabels>,
    client_ops: Family<OpLabels>,
    sessions: [Histogram; 3],
    host_bytes: [[AtomicU64; 2]; 3],
    /// Host requests read and not yet answered, by transport.
    host_inflight: [AtomicU64; 3],
    /// Whether the process is draining (see `set_draining`).
    draining: AtomicBool,
    /// Calls whose limits the store could not check: [allowed, refused].
    limit_store_errors: [AtomicU64; 2],
    /// What the cache could not do in its shared store, by [`StoreOp`].
    cache_store_errors: [AtomicU64; 3],
    /// By upstream key; locked only when a connection is made and when scraped.
    upstreams: Mutex<BTreeMap<Arc<str>, Arc<UpstreamCounters>>>,
    /// By (cache, upstream key); made when the cache is set up, locked then and when scraped.
    caches: Mutex<BTreeMap<CacheId, Arc<CacheCounters>>>,
    /// Tool discovery, by team.
    pub discovery: crate::discovery::Discoveries,
    /// Seconds since the Unix epoch when the metrics were first used (at start).
    started: u64,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    enabled: AtomicBool::new(true),
    server_ops: Family::new(OPERATION_BUCKETS),
    client_ops: Family::new(OPERATION_BUCKETS),
    sessions: std::array::from_fn(|_| Histogram::new(SESSION_BUCKETS)),
    host_bytes: Default::default(),
    host_inflight: Default::default(),
    draining: AtomicBool::new(false),
    limit_store_errors: Default::default(),
    cache_store_errors: Default::default(),
    upstreams: Mutex::new(BTreeMap::new()),
    caches: Mutex::new(BTreeMap::new()),
    discovery: Default::default(),
    started: std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()),
});

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The label for a method a host sent: itself when it is one Manifold knows, else `other`
/// (a host may send any string; labels must stay bounded).
pub fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 22] = [
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "logging/setLevel",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "sampling/createMessage",
        "elicitation/create",
        // The skills extension, which Manifold merges.
        "skills/list",
        "skills/get",
        "resources/directory/read",
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

impl Metrics {
    /// Turns recording on or off (`telemetry.metrics`); scrapes then show what was recorded.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Tool calls sent to each upstream, how many of them failed (any outcome but `ok`) and
    /// their durations, by upstream key, over the process's life: what the console's
    /// overview shows.
    pub fn upstream_calls(&self) -> BTreeMap<Arc<str>, CallCounts> {
        let mut by_upstream: BTreeMap<Arc<str>, CallCounts> = BTreeMap::new();
        for (labels, histogram) in self.client_ops.series() {
            let Some(upstream) = labels.upstream else {
                continue;
            };
            if labels.method != "tools/call" {
                continue;
            }
            let snapshot = histogram.snapshot();
            let n = snapshot.cumulative.last().copied().unwrap_or(0);
            let counts = by_upstream.entry(upstream).or_default();
            counts.calls += n;
            if labels.outcome.is_error() {
                counts.errors += n;
            }
            if counts.durations.len() < snapshot.cumulative.len() {
                counts.durations.resize(snapshot.cumulative.len(), 0);
            }
            for (sum, n) in counts.durations.iter_mut().zip(&snapshot.cumulative) {
                *sum += n;
            }
        }
        by_upstream
    }

    /// Tool calls hosts made and the refusals among them, by team (`anonymous` for callers
    /// without one), over the process's life: what the console's teams page shows.
    pub fn team_calls(&self) -> BTreeMap<Arc<str>, TeamCalls> {
        let mut by_team: BTreeMap<Arc<str>, TeamCalls> = BTreeMap::new();
        for (labels, histogram) in self.server_ops.series() {
            if labels.method != "tools/call" {
                continue;
            }
            let n = histogram.snapshot().cumulative.last().copied().unwrap_or(0);
            let counts = by_team.entry(labels.team).or_default();
            counts.calls += n;
            match labels.outcome {
                Outcome::RateLimited => counts.rate_limited += n,
                Outcome::QuotaExceeded => counts.quota_exceeded += n,
                Outcome::Denied => counts.denied += n,
                _ => {}
            }
        }
        by_team
    }

    /// Failed refreshes (or exchanges) of upstream `key`'s tokens; 0 for one never seen.
    pub fn credential_refresh_failures(&self, key: &str) -> u64 {
        let all = self
            .upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let failed = crate::credentials::RefreshOutcome::Failed as usize;
        all.get(key).map_or(0, |c| {
            c.credentials.refreshes[failed].load(Ordering::Relaxed)
        })
    }

    /// Times upstream `key` was started again; 0 for one never seen (no series is made).
    pub fn upstream_restarts(&self, key: &str) -> u64 {
        let all = self
            .upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(key)
            .map_or(0, |c| c.restarts.load(Ordering::Relaxed))
    }

    /// A host request was answered (or cancelled).
    pub fn server_op(&self, labels: OpLabels, elapsed: Duration) {
        if self.enabled() {
            self.server_ops.observe(labels, elapsed);
        }
    }

    /// An upstream hop ended.
    pub fn client_op(&self, labels: OpLabels, elapsed: Duration) {
        if self.enabled() {
            self.client_ops.observe(labels, elapsed);
        }
    }

    pub fn session_ended(&self, transport: HostTransport, lived: Duration) {
        if self.enabled() {
            self.sessions[transport as usize].observe(lived);
        }
    }

    pub fn host_bytes(&self, transport: HostTransport, direction: Direction, n: usize) {
        if self.enabled() {
            self.host_bytes[transport as usize][direction as usize]
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// A host request was read (its context made). Counted whether or not recording is on:
    /// an HTTP server that drains waits for the count to fall to zero.
    pub fn host_request_started(&self, transport: HostTransport) {
        self.host_inflight[transport as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A host request counted by [`Self::host_request_started`] was answered or cancelled.
    pub fn host_request_done(&self, transport: HostTransport) {
        self.host_inflight[transport as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// Host requests over `transport` read and not yet answered or cancelled.
    pub fn host_requests_in_flight(&self, transport: HostTransport) -> u64 {
        self.host_inflight[transport as usize].load(Ordering::Relaxed)
    }

    /// The process started draining (a signal arrived while serving HTTP); it stays so until
    /// it exits.
    pub fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::Relaxed);
    }

    /// A call's limits could not be checked (the shared store is unreachable); `allowed`:
    /// it went on anyway (fail open).
    pub fn limit_store_error(&self, allowed: bool) {
        self.limit_store_errors[usize::from(!allowed)].fetch_add(1, Ordering::Relaxed);
    }

    /// The result cache could not do `op` in its shared store (Redis): it failed, did not
    /// answer in time, or was being left alone after a failure.
    pub fn cache_store_error(&self, op: StoreOp) {
        self.cache_store_errors[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters of the upstream `key`, made on first use.
    pub fn upstream(&self, key: &str) -> Arc<UpstreamCounters> {
        let mut all = self
            .upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = all.get(key) {
            return Arc::clone(c);
        }
        let c = Arc::new(UpstreamCounters::default());
        all.insert(key.into(), Arc::clone(&c));
        c
    }

    /// The counters of cache `cache` (`tools` or `resources`) of upstream `key`, made on
    /// first use.
    pub fn cache(&self, cache: &'static str, key: &str) -> Arc<CacheCounters> {
        let mut all = self
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(all.entry((cache, key.into())).or_default())
    }

    fn render_caches(&self, e: &mut Exposition) {
        let caches: Vec<(CacheId, Arc<CacheCounters>)> = self
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, c)| (k.clone(), Arc::clone(c)))
            .collect();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        e.metric(&names::CACHE_HITS);
        for ((cache, upstream), c) in &caches {
            for tier in Tier::ALL {
                let labels = [
                    (label::CACHE, *cache),
                    (label::UPSTREAM, &**upstream),
                    (label::TIER, tier.label()),
                ];
                e.sample(&names::CACHE_HITS, &labels, load(&c.hits[tier as usize]));
            }
        }
        for (metric, value) in [
            (
                &names::CACHE_MISSES,
                (|c: &CacheCounters| &c.misses) as fn(&CacheCounters) -> &AtomicU64,
            ),
            (&names::CACHE_BYTES, |c| &c.bytes),
            (&names::CACHE_ENTRIES, |c| &c.entries),
        ] {
            e.metric(metric);
            for ((cache, upstream), c) in &caches {
                let labels = [(label::CACHE, *cache), (label::UPSTREAM, &**upstream)];
                e.sample(metric, &labels, load(value(c)));
            }
        }
        e.metric(&names::CACHE_EVICTIONS);
        for ((cache, upstream), c) in &caches {
            for why in Eviction::ALL {
                let labels = [
                    (label::CACHE, *cache),
                    (label::UPSTREAM, &**upstream),
                    (label::CAUSE, why.label()),
                ];
                e.sample(
                    &names::CACHE_EVICTIONS,
                    &labels,
                    load(&c.evictions[why as usize]),
                );
            }
        }
    }

    /// Writes everything recorded here.
    pub fn render(&self, e: &mut Exposition) {
        e.metric(&names::BUILD_INFO);
        e.sample(
            &names::BUILD_INFO,
            &[(label::VERSION, env!("CARGO_PKG_VERSION"))],
            1,
        );
        e.metric(&names::PROCESS_START);
        e.sample(&names::PROCESS_START, &[], self.started);
        render_operations(e, &names::SERVER_OPERATION_DURATION, &self.server_ops);
        render_operations(e, &names::CLIENT_OPERATION_DURATION, &self.client_ops);
        e.metric(&names::SERVER_SESSION_DURATION);
        for t in HostTransport::ALL {
            let h = self.sessions[t as usize].snapshot();
            e.histogram(
                &names::SERVER_SESSION_DURATION,
                &[(label::TRANSPORT, t.label())],
                &h,
            );
        }
        e.metric(&names::HOST_BYTES);
        for t in HostTransport::ALL {
            for (d, name) in [(Direction::In, "in"), (Direction::Out, "out")] {
                let n = self.host_bytes[t as usize][d as usize].load(Ordering::Relaxed);
                let labels = [(label::TRANSPORT, t.label()), (label::DIRECTION, name)];
                e.sample(&names::HOST_BYTES, &labels, n);
            }
        }
        e.metric(&names::HOST_INFLIGHT);
        for t in HostTransport::ALL {
            let n = self.host_requests_in_flight(t);
            e.sample(&names::HOST_INFLIGHT, &[(label::TRANSPORT, t.label())], n);
        }
        e.metric(&names::DRAINING);
        let draining = u64::from(self.draining.load(Ordering::Relaxed));
        e.sample(&names::DRAINING, &[], draining);
        e.metric(&names::LIMIT_STORE_ERRORS);
        for (i, decision) in ["allowed", "refused"].into_iter().enumerate() {
            let n = self.limit_store_errors[i].load(Ordering::Relaxed);
            e.sample(
                &names::LIMIT_STORE_ERRORS,
                &[(label::DECISION, decision)],
                n,
            );
        }
        e.metric(&names::CACHE_STORE_ERRORS);
        for op in StoreOp::ALL {
            let n = self.cache_store_errors[op as usize].load(Ordering::Relaxed);
            e.sample(
                &names::CACHE_STORE_ERRORS,
                &[(label::OPERATION, op.label())],
                n,
            );
        }
        self.render_caches(e);
        self.discovery.render(e);
        let upstreams: Vec<(Arc<str>, Arc<UpstreamCounters>)> = self
            .upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, c)| (Arc::clone(k), Arc::clone(c)))
            .collect();
        e.metric(&names::UPSTREAM_BYTES);
        for (key, c) in &upstreams {
            for (counter, name) in [(&c.bytes_in, "in"), (&c.bytes_out, "out")] {
                let labels = [(label::UPSTREAM, &**key), (label::DIRECTION, name)];
                e.sample(
                    &names::UPSTREAM_BYTES,
                    &labels,
                    counter.load(Ordering::Relaxed),
                );
            }
        }
        e.metric(&names::UPSTREAM_RESTARTS);
        for (key, c) in &upstreams {
            let n = c.restarts.load(Ordering::Relaxed);
            e.sample(&names::UPSTREAM_RESTARTS, &[(label::UPSTREAM, key)], n);
        }
        e.metric(&names::UPSTREAM_HEALTH_CHECKS);
        for (key, c) in &upstreams {
            for check in HealthCheck::ALL {
                let n = c.health_checks[check as usize].load(Ordering::Relaxed);
                let labels = [(label::UPSTREAM, &**key), (label::OUTCOME, check.label())];
                e.sample(&names::UPSTREAM_HEALTH_CHECKS, &labels, n);
            }
        }
        e.metric(&names::UPSTREAM_PING_DURATION);
        for (key, c) in &upstreams {
            let labels = [(label::UPSTREAM, &**key)];
            e.histogram(&names::UPSTREAM_PING_DURATION, &labels, &c.ping.snapshot());
        }
        e.metric(&names::UPSTREAM_BREAKER_TRANSITIONS);
        for (key, c) in &upstreams {
            for state in BreakerState::ALL {
                let n = c.breaker_transitions[state as usize].load(Ordering::Relaxed);
                let labels = [(label::UPSTREAM, &**key), (label::STATE, state.label())];
                e.sample(&names::UPSTREAM_BREAKER_TRANSITIONS, &labels, n);
            }
        }
        e.metric(&names::UPSTREAM_BREAKER_REJECTIONS);
        for (key, c) in &upstreams {
            let n = c.breaker_rejections.load(Ordering::Relaxed);
            e.sample(
                &names::UPSTREAM_BREAKER_REJECTIONS,
                &[(label::UPSTREAM, key)],
                n,
            );
        }
        crate::credentials::render(e, &upstreams);
    }
}

/// Writes one operation-duration histogram family, a series per label set.
pub fn render_operations(e: &mut Exposition, metric: &Metric, family: &Family<OpLabels>) {
    e.metric(metric);
    for (l, h) in family.series() {
        let labels = [
            (label::METHOD, l.method),
            (label::TOOL, l.tool.as_deref().unwrap_or("")),
            (label::UPSTREAM, l.upstream.as_deref().unwrap_or("")),
            (label::TEAM, &l.team),
            (label::TRANSPORT, l.transport),
            (label::OUTCOME, l.outcome.label()),
        ];
        e.histogram(metric, &labels, &h.snapshot());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_listed_in_declaration_order() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
    }

    #[test]
    fn methods_outside_the_protocol_share_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("skills/get"), "skills/get");
        assert_eq!(method_label("tools/call2"), "other");
        // A method of an extension passed through is one no host-chosen name can multiply.
        assert_eq!(method_label("widgets/echo"), "other");
        assert_eq!(method_label("x".repeat(1000).as_str()), "other");
    }
}
