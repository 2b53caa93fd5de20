//! Result caching: which forwarded requests may be answered from a stored answer, the keys
//! they are stored under, and the stores (`moka` caches weighted by bytes, each entry with
//! its own ttl). The router asks [`Cache::plan`] about each request after its layers, and
//! runs the fill through the upstream itself (see `router::cached`).
//!
//! What is never stored is decided where the answer arrives (`router::inflight`): tool
//! errors, JSON-RPC errors, failures, and answers during which the upstream sent progress or
//! a request of its own.
//! Entries are dropped when their upstream changes: every key carries
//! the upstream's epoch, bumped when its catalog is replaced or it goes down, and a fill that
//! started before a change is not stored.
//!
//! With `[cache] backend = "redis"`, Redis is a second tier behind the stores (see `tier`):
//! a request the stores miss is looked up there before it goes upstream, and a fill is kept in
//! both; changes reach every replica.
//!
//! Kept whole: keys, rules, stores and invalidation share the epoch
//! and change counters whose order decides whether a fill may be stored.

mod note;
pub mod tier;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use manifold_catalog::{Catalog, UpstreamSlice, UpstreamState};
use manifold_config::{
    CacheBackend, CacheRule, CacheScope, CacheSettings, UpstreamCaches, UpstreamConfig,
};
use manifold_protocol::{canonical, RawObject};
use manifold_telemetry::{metrics, CacheCounters, Eviction};
use moka::notification::RemovalCause;
use tokio::sync::mpsc;

use crate::context::Context;
use crate::error::RouteError;
use crate::target::Target;

pub use note::rule_note;
use tier::SharedTier;
pub use tier::Ticket;

/// Where the upstream subscriptions that cache entries held arrive, when the entries go:
/// (upstream, original URI).
pub type Released = tokio::sync::mpsc::UnboundedReceiver<(usize, Box<str>)>;

/// The `_meta` member a host sets to skip the cache for one request: `"bypass"` (not looked
/// up, not stored) or `"refresh"` (not looked up; the fresh answer replaces the entry).
pub const META_KEY: &str = "manifold/cache";

type Store = moka::future::Cache<Key, Arc<Entry>>;

type ToolNames = HashSet<Box<str>>;

/// Every cache of the process.
pub struct Cache {
    /// By upstream index. Shared with the cache a reload makes, for each upstream whose
    /// caches did not change (its entries stay).
    upstreams: Vec<Arc<UpstreamCache>>,
    /// What it was made from, for the next reload to compare with.
    settings: CacheSettings,
    /// The store of the rules without a budget of their own, and the bytes it holds at most.
    common: (Store, u64),
    max_argument_bytes: usize,
    /// The tier shared with other replicas, when configured.
    shared: Option<Arc<dyn SharedTier>>,
}

/// The caches of one upstream.
struct UpstreamCache {
    /// As configured.
    config: UpstreamCaches,
    tools: Option<Rule>,
    named: HashMap<String, Rule>,
    resources: Option<Rule>,
    /// Part of every key: bumped when the upstream's catalog is replaced or it goes down.
    epoch: AtomicU64,
    /// Bumped with the epoch and on every `resources/updated`: a fill that saw it change is
    /// not stored.
    changes: AtomicU64,
    /// Which tools `cache` covers by their annotations.
    hints: HintRule,
    /// The tools of the current catalog slice that `cache` applies to, worked out once per
    /// slice.
    hinted: Mutex<Option<(Arc<UpstreamSlice>, Arc<ToolNames>)>>,
    counters: [Arc<CacheCounters>; 2],
    /// Whether it has served since this process started: its changes from then on are
    /// shared with the other replicas (its first start is no change to them).
    served: AtomicBool,
    /// Its `auth` gives each caller a token of their own: an answer is that caller's alone
    /// (never shared, never a team's), whatever the rule's scope.
    per_caller: bool,
}

#[derive(Clone)]
struct Rule {
    ttl: Duration,
    scope: CacheScope,
    store: Store,
}

/// What an entry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Tools,
    Resources,
}

impl Family {
    fn label(self) -> &'static str {
        match self {
            Family::Tools => "tools",
            Family::Resources => "resources",
        }
    }
}

/// What an answer is stored under. Hashed by its digest, worked out once: a store hashes
/// a key on every operation, and the arguments may be long. Cloned for every store call, so
/// its texts are shared, not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    digest: u64,
    upstream: usize,
    epoch: u64,
    family: Family,
    /// The tool name or URI as the upstream knows it.
    name: Arc<str>,
    /// The arguments in canonical form (empty for resources).
    args: Arc<str>,
    /// The team whose entry it is; `None`: shared (or no team).
    team: Option<Arc<str>>,
}

impl Key {
    /// The upstream's index.
    pub fn upstream(&self) -> usize {
        self.upstream
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// The tool name or URI as the upstream knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments in canonical form (empty for resources).
    pub fn args(&self) -> &str {
        &self.args
    }

    /// The team whose entry it is; `None`: shared (or no team).
    pub fn team(&self) -> Option<&str> {
        self.team.as_deref()
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl Key {
    fn new(
        upstream: usize,
        epoch: u64,
        family: Family,
        name: Arc<str>,
        args: Arc<str>,
        team: Option<Arc<str>>,
    ) -> Self {
        use std::hash::BuildHasher;
        let digest = DIGEST.hash_one((upstream, epoch, family, &name, &args, &team));
        Self {
            digest,
            upstream,
            epoch,
            family,
            name,
            args,
            team,
        }
    }
}

/// Keys' digests: seeded at random once per process, so that hosts cannot choose arguments
/// that collide.
static DIGEST: std::sync::LazyLock<std::collections::hash_map::RandomState> =
    std::sync::LazyLock::new(std::collections::hash_map::RandomState::new);

/// A stored answer.
pub struct Entry {
    /// The result as hosts receive it (JSON text).
    pub result: Box<str>,
    stored: Instant,
    ttl: Duration,
    weight: u32,
    counters: Arc<CacheCounters>,
    /// The upstream subscription this entry holds (a resource on an upstream that supports
    /// subscribing): released when the entry goes.
    subscription: Option<(usize, Box<str>)>,
}

/// How one request uses the cache.
pub struct Lookup {
    pub key: Key,
    store: Store,
    ttl: Duration,
    /// Not looked up: the answer replaces the entry.
    pub refresh: bool,
    changes: u64,
    pub counters: Arc<CacheCounters>,
}

/// The cache's decision on a request.
pub enum Plan {
    /// Not cacheable: forwarded as it is.
    Forward,
    /// The host asked for no caching.
    Bypass,
    Use(Box<Lookup>),
}

struct PerEntry;

impl moka::Expiry<Key, Arc<Entry>> for PerEntry {
    fn expire_after_create(&self, _: &Key, entry: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(entry.ttl)
    }

    fn expire_after_update(
        &self,
        _: &Key,
        entry: &Arc<Entry>,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(entry.ttl)
    }
}

/// A store of `capacity` bytes. Subscriptions its entries held are sent to `released` when
/// they go.
fn store(capacity: u64, released: &mpsc::UnboundedSender<(usize, Box<str>)>) -> Store {
    let released = released.clone();
    moka::future::Cache::builder()
        .max_capacity(capacity)
        .weigher(|_, entry: &Arc<Entry>| entry.weight)
        .expire_after(PerEntry)
        // Least recently used goes first: a new answer is always admitted.
        .eviction_policy(moka::policy::EvictionPolicy::lru())
        .support_invalidation_closures()
        .eviction_listener(move |_, entry: Arc<Entry>, cause| {
            let why = match cause {
                RemovalCause::Size => Eviction::Size,
                RemovalCause::Expired => Eviction::Expired,
                // Filled again once its ttl had passed, before the store removed it.
                RemovalCause::Replaced if entry.stored.elapsed() >= entry.ttl => Eviction::Expired,
                RemovalCause::Explicit | RemovalCause::Replaced => Eviction::Invalidated,
            };
            entry.counters.removed(u64::from(entry.weight), why);
            if let Some(sub) = &entry.subscription {
                let _ = released.send(sub.clone());
            }
        })
        .build()
}

impl UpstreamCache {
    /// Empty caches for upstream `u`: rules with a budget of their own get a store of their
    /// own, the others share `common`.
    fn new(
        u: &UpstreamConfig,
        common: &Store,
        released: &mpsc::UnboundedSender<(usize, Box<str>)>,
    ) -> Self {
        let rule = |r: &CacheRule| Rule {
            ttl: r.ttl,
            scope: r.scope,
            store: match r.max_bytes {
                Some(n) => store(n, released),
                None => common.clone(),
            },
        };
        UpstreamCache {
            config: u.caches.clone(),
            tools: u.caches.read_only_tools.as_ref().map(rule),
            named: u
                .caches
                .tools
                .iter()
                .map(|(name, r)| (name.clone(), rule(r)))
                .collect(),
            resources: u.caches.resources.as_ref().map(rule),
            epoch: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            hints: HintRule::of(u),
            hinted: Mutex::new(None),
            counters: [Family::Tools, Family::Resources]
                .map(|f| metrics().cache(f.label(), &u.key)),
            served: AtomicBool::new(false),
            per_caller: match &u.transport {
                manifold_config::Transport::Http(h) => h.auth.as_ref(),
                manifold_config::Transport::OpenApi(o) => o.auth.as_ref(),
                manifold_config::Transport::Stdio(_) => None,
            }
            .is_some_and(manifold_config::UpstreamAuth::per_caller),
        }
    }
}

impl Cache {
    /// The caches `upstreams` configure, or `None` when none does (then the forwarding path
    /// has nothing to ask). Subscriptions that entries no longer need are sent to `released`.
    pub fn new(
        settings: &CacheSettings,
        upstreams: &[UpstreamConfig],
        released: &mpsc::UnboundedSender<(usize, Box<str>)>,
        stores: &dyn crate::replicas::Stores,
    ) -> Option<Arc<Self>> {
        Self::reloaded(None, settings, upstreams, released, stores)
    }

    /// The caches of a reloaded configuration (`upstreams` by index, a removed upstream's
    /// without caches). With the same `[cache]` settings and budgets, an upstream whose
    /// caches did not change keeps them, entries and all; the rest start empty.
    pub fn reloaded(
        previous: Option<&Cache>,
        settings: &CacheSettings,
        upstreams: &[UpstreamConfig],
        released: &mpsc::UnboundedSender<(usize, Box<str>)>,
        stores: &dyn crate::replicas::Stores,
    ) -> Option<Arc<Self>> {
        if upstreams.iter().all(|u| u.caches.is_empty()) {
            return None;
        }
        let tier = match &settings.backend {
            CacheBackend::Memory => None,
            CacheBackend::Redis(redis) => match stores.cache_tier(redis, upstreams) {
                Ok(tier) => Some(tier),
                Err(e) => {
                    tracing::error!("the shared cache is off, each replica keeps its own: {e}");
                    None
                }
            },
        };
        Self::with_tier(previous, settings, upstreams, released, tier)
    }

    /// [`Self::reloaded`] with the shared tier given (`None`: none).
    pub fn with_tier(
        previous: Option<&Cache>,
        settings: &CacheSettings,
        upstreams: &[UpstreamConfig],
        released: &mpsc::UnboundedSender<(usize, Box<str>)>,
        shared: Option<Arc<dyn SharedTier>>,
    ) -> Option<Arc<Self>> {
        if upstreams.iter().all(|u| u.caches.is_empty()) {
            return None;
        }
        let reserved: u64 = upstreams
            .iter()
            .flat_map(|u| u.caches.rules().filter_map(|(_, r)| r.max_bytes))
            .sum();
        let capacity = settings.max_bytes.saturating_sub(reserved).max(1);
        // Entries are kept only where nothing they were stored under changed.
        let previous = previous.filter(|p| p.settings == *settings && p.common.1 == capacity);
        let common = match previous {
            Some(p) => p.common.0.clone(),
            None => store(capacity, released),
        };
        let upstreams = upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| {
                // An index always names the same upstream (a reload only adds to them).
                let kept = previous
                    .and_then(|p| p.upstreams.get(i))
                    .filter(|c| c.config == u.caches && c.hints == HintRule::of(u));
                match kept {
                    Some(kept) => Arc::clone(kept),
                    None => Arc::new(UpstreamCache::new(u, &common, released)),
                }
            })
            .collect();
        let cache = Arc::new(Self {
            upstreams,
            settings: settings.clone(),
            common: (common, capacity),
            max_argument_bytes: settings.max_argument_bytes,
            shared,
        });
        if let Some(shared) = &cache.shared {
            shared.listen(Arc::downgrade(&cache));
        }
        Some(cache)
    }

    /// After a reload replaced this cache with `new`: drops the entries of every upstream
    /// whose caches `new` did not keep, releasing the upstream subscriptions they held (a
    /// store `new` still uses keeps the entries of the upstreams it kept).
    pub async fn retire(&self, new: Option<&Cache>) {
        for (i, up) in self.upstreams.iter().enumerate() {
            let kept = new
                .and_then(|n| n.upstreams.get(i))
                .is_some_and(|n| Arc::ptr_eq(n, up));
            if !kept {
                self.drop_upstream(i);
            }
        }
        for up in &self.upstreams {
            for store in up.stores() {
                store.run_pending_tasks().await;
            }
        }
    }

    /// How `target` (a request about to be forwarded for `ctx`) uses the cache.
    pub fn plan(
        &self,
        ctx: &Context,
        target: &Target,
        catalog: &Catalog,
    ) -> Result<Plan, RouteError> {
        // Asked of any request, kept or not, so that a mistake is never silently ignored.
        let asked = match manifold_protocol::needle::CACHE_META.find(target.params.as_bytes()) {
            Some(_) => RawObject::parse(&target.params)
                .ok()
                .map(|p| directive(&p))
                .transpose()?,
            None => None,
        };
        let Some(up) = self.upstreams.get(target.upstream) else {
            return Ok(Plan::Forward);
        };
        let (family, rule) = match target.method {
            "tools/call" if !target.task => (Family::Tools, None),
            "resources/read" => match &up.resources {
                Some(rule) => (Family::Resources, Some(rule)),
                None => return Ok(Plan::Forward),
            },
            _ => return Ok(Plan::Forward),
        };
        if family == Family::Tools && up.tools.is_none() && up.named.is_empty() {
            return Ok(Plan::Forward);
        }
        let Ok(params) = RawObject::parse(&target.params) else {
            return Ok(Plan::Forward);
        };
        let member = match family {
            Family::Tools => "name",
            Family::Resources => "uri",
        };
        // The name as the upstream knows it: the target's, when the params still carry the
        // host's (see `Target::names`).
        let name = match (&target.original, target.names()) {
            (Some(original), Some(_)) => std::borrow::Cow::Borrowed(&**original),
            _ => match params.get_str(member) {
                Some(name) => name,
                None => return Ok(Plan::Forward),
            },
        };
        let rule = match rule {
            Some(rule) => rule,
            None => match up.named.get(&*name) {
                Some(rule) => rule,
                None => match &up.tools {
                    Some(rule) if up.hinted(catalog, target.upstream).contains(&*name) => rule,
                    _ => return Ok(Plan::Forward),
                },
            },
        };
        let refresh = match asked.unwrap_or(Directive::Use) {
            Directive::Use => false,
            Directive::Refresh => true,
            Directive::Bypass => return Ok(Plan::Bypass),
        };
        let args = match (family, params.get("arguments")) {
            // Far over the limit: not even read.
            (Family::Tools, Some(raw)) if raw.len() > 2 * self.max_argument_bytes => {
                return Ok(Plan::Forward)
            }
            (Family::Tools, Some(raw)) => {
                match canonical(raw).filter(|a| a.len() <= self.max_argument_bytes) {
                    Some(args) => args,
                    None => return Ok(Plan::Forward),
                }
            }
            _ => String::new(),
        };
        // A team that reaches the upstream with its own credentials never shares answers; a
        // caller with a token of their own shares them with nobody (keyed by a hash of who
        // they are, never by a token).
        let team = match up.per_caller {
            true => Some(Arc::from(
                format!("caller:{}", crate::credentials::caller_of(ctx).owner.hex()).as_str(),
            )),
            false => ctx
                .caller
                .team
                .as_ref()
                .filter(|t| {
                    rule.scope == CacheScope::Team
                        || catalog
                            .defs()
                            .get(target.upstream)
                            .is_some_and(|d| t.config().headers.contains_key(&d.key))
                })
                .map(|t| Arc::clone(&t.name)),
        };
        Ok(Plan::Use(Box::new(Lookup {
            key: Key::new(
                target.upstream,
                up.epoch.load(Ordering::Acquire),
                family,
                name.into(),
                args.into(),
                team,
            ),
            store: rule.store.clone(),
            ttl: rule.ttl,
            refresh,
            changes: up.changes.load(Ordering::Acquire),
            counters: Arc::clone(&up.counters[family as usize]),
        })))
    }

    /// The entry a fill makes of `result`, or `None` when the upstream changed since the
    /// request was planned (the answer may describe what no longer is).
    pub fn entry(
        &self,
        lookup: &Lookup,
        result: Box<str>,
        subscription: Option<(usize, Box<str>)>,
    ) -> Result<Arc<Entry>, Option<(usize, Box<str>)>> {
        match self.keepable(lookup, None) {
            Some(ttl) => self.entry_for(lookup, result, ttl, subscription),
            None => Err(subscription),
        }
    }

    /// How long an answer may be kept for `lookup` (`remaining`: at most that, for an answer
    /// found in the shared tier), or `None` when it may not be kept or served: the upstream
    /// changed since the request was planned.
    ///
    /// The rule that covers the request is the operator's decision and outweighs what the
    /// answer says of itself (the stateless era's `ttlMs` and `cacheScope`): SDKs stamp every
    /// result with their defaults (`ttlMs: 0`, `private`), which would otherwise silence
    /// every rule. Where no rule covers a request nothing is kept here, and hosts get the
    /// upstream's hints as it sent them.
    pub fn keepable(&self, lookup: &Lookup, remaining: Option<Duration>) -> Option<Duration> {
        let up = &self.upstreams[lookup.key.upstream];
        if up.changes.load(Ordering::Acquire) != lookup.changes {
            return None;
        }
        let ttl = remaining.map_or(lookup.ttl, |r| r.min(lookup.ttl));
        (!ttl.is_zero()).then_some(ttl)
    }

    /// The entry of `result`, kept for `ttl` (see [`Self::keepable`]), unless the upstream
    /// changed meanwhile.
    pub fn entry_for(
        &self,
        lookup: &Lookup,
        result: Box<str>,
        ttl: Duration,
        subscription: Option<(usize, Box<str>)>,
    ) -> Result<Arc<Entry>, Option<(usize, Box<str>)>> {
        let up = &self.upstreams[lookup.key.upstream];
        if up.changes.load(Ordering::Acquire) != lookup.changes {
            return Err(subscription);
        }
        let weight = result.len() + lookup.key.name.len() + lookup.key.args.len() + 64;
        let weight = u32::try_from(weight).unwrap_or(u32::MAX);
        lookup.counters.stored(u64::from(weight));
        Ok(Arc::new(Entry {
            result,
            stored: Instant::now(),
            ttl,
            weight,
            counters: Arc::clone(&lookup.counters),
            subscription,
        }))
    }

    /// Applies what the stores have pending (expiry, the byte budget, invalidations), so that
    /// memory and metrics hold while no request touches them.
    /// With the shared tier, also what it has pending (see `shared`).
    pub async fn maintain(self: &Arc<Self>) {
        for up in &self.upstreams {
            for store in up.stores() {
                store.run_pending_tasks().await;
            }
        }
        if let Some(shared) = &self.shared {
            shared.tick(self).await;
        }
    }

    /// The upstream's catalog was replaced (a restart, or a refetch after `list_changed`) or
    /// it went down (`catalog`: the catalog that says so): none of its entries is used again,
    /// here or, with the shared tier, by any replica. The first catalog of an upstream that had
    /// not served yet changes nothing for the other replicas, which hold what an upstream of
    /// the same configuration answered.
    pub fn upstream_changed(&self, upstream: usize, catalog: &Catalog) {
        let Some(up) = self.upstreams.get(upstream) else {
            return;
        };
        self.drop_upstream(upstream);
        let serving = *catalog.state(upstream) == UpstreamState::Up;
        let had_served = match serving {
            true => up.served.swap(true, Ordering::AcqRel),
            false => up.served.load(Ordering::Acquire),
        };
        if let (true, Some(shared)) = (had_served, &self.shared) {
            shared.changed(upstream, None);
        }
    }

    /// Whether `upstream` has any cache here.
    pub fn caches(&self, upstream: usize) -> bool {
        self.upstreams
            .get(upstream)
            .is_some_and(|up| up.stores().next().is_some())
    }

    /// Drops what this process holds of `upstream`, and stops fills under way from being
    /// stored.
    pub fn drop_upstream(&self, upstream: usize) {
        let Some(up) = self.upstreams.get(upstream) else {
            return;
        };
        let epoch = up.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        up.changes.fetch_add(1, Ordering::AcqRel);
        for store in up.stores() {
            let _ =
                store.invalidate_entries_if(move |k, _| k.upstream == upstream && k.epoch < epoch);
        }
    }

    /// Drops what this process holds of every upstream (the shared tier may have missed
    /// changes).
    pub fn drop_all(&self) {
        for upstream in 0..self.upstreams.len() {
            self.drop_upstream(upstream);
        }
    }

    /// The upstream said resource `uri` (its own URI) changed: every team's entry for it goes,
    /// here and, with the shared tier, on every replica.
    pub fn resource_updated(&self, upstream: usize, uri: &str) {
        if self.drop_resource(upstream, uri) {
            if let Some(shared) = &self.shared {
                shared.changed(upstream, Some(uri));
            }
        }
    }

    /// Drops what this process holds of resource `uri` of `upstream`; whether it has a
    /// resource cache.
    pub fn drop_resource(&self, upstream: usize, uri: &str) -> bool {
        let Some(up) = self.upstreams.get(upstream) else {
            return false;
        };
        let Some(rule) = &up.resources else {
            return false;
        };
        up.changes.fetch_add(1, Ordering::AcqRel);
        let uri: Box<str> = uri.into();
        let _ = rule.store.invalidate_entries_if(move |k, _| {
            k.upstream == upstream && k.family == Family::Resources && *k.name == *uri
        });
        true
    }

    /// What the shared tier holds for `lookup` (a request its store missed).
    pub async fn look_shared(&self, lookup: &Lookup) -> FromShared {
        let Some(shared) = &self.shared else {
            return FromShared::Unused;
        };
        if !shared.usable_for(&lookup.key) {
            return FromShared::Unused;
        }
        tier::OntoRuntime::default().await;
        match shared.lookup(&lookup.key).await {
            None => FromShared::Unused,
            Some((ticket, None)) => FromShared::Missing(ticket),
            Some((ticket, Some(found))) => FromShared::Found {
                result: found.result,
                remaining: found.remaining,
                ticket,
            },
        }
    }

    /// Keeps `entry`, a fill, in the shared tier too, where `ticket` says.
    pub fn share(&self, ticket: Ticket, entry: &Entry) {
        if let Some(shared) = &self.shared {
            shared.store(ticket, entry.result.clone(), entry.ttl);
        }
    }
}

/// What the shared tier holds for a request.
pub enum FromShared {
    /// No shared tier, or it cannot be used for this request now: a fill stays in memory.
    Unused,
    /// Nothing: a fill is stored with the ticket.
    Missing(Ticket),
    /// An answer, with how long it has left.
    Found {
        result: Box<str>,
        remaining: Duration,
        ticket: Ticket,
    },
}

impl Lookup {
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The tool name or URI, as the upstream knows it.
    pub fn key_name(&self) -> &str {
        &self.key.name
    }

    /// What the entry answers.
    pub fn family(&self) -> Family {
        self.key.family
    }

    /// The upstream's index.
    pub fn upstream(&self) -> usize {
        self.key.upstream
    }
}

impl UpstreamCache {
    /// The tools of the current slice that the upstream's `cache` applies to.
    fn hinted(&self, catalog: &Catalog, upstream: usize) -> Arc<ToolNames> {
        let Some(slice) = catalog.slice(upstream) else {
            return Arc::default();
        };
        let mut hinted = self.hinted.lock().unwrap_or_else(PoisonError::into_inner);
        match &*hinted {
            Some((seen, tools)) if Arc::ptr_eq(seen, slice) => Arc::clone(tools),
            _ => {
                let tools: Arc<ToolNames> = Arc::new(
                    slice
                        .tools
                        .iter()
                        .filter_map(|t| self.hints.covers(t.get()))
                        .collect(),
                );
                *hinted = Some((Arc::clone(slice), Arc::clone(&tools)));
                tools
            }
        }
    }

    fn stores(&self) -> impl Iterator<Item = &Store> {
        self.tools
            .iter()
            .chain(self.named.values())
            .chain(self.resources.iter())
            .map(|r| &r.store)
    }
}

/// The rule of `u`'s caches that covers its tool `name` (as the upstream names it), given the
/// tool's descriptor (only its annotations are read): its own `tool_cache` entry, else the
/// upstream's `cache` when the annotations say it may be kept (see [`HintRule`]).
/// (The choice `Cache::plan` makes per request, from the hints it works out once per catalog.)
pub fn tool_rule<'c>(u: &'c UpstreamConfig, name: &str, tool: &str) -> Option<&'c CacheRule> {
    u.caches.tools.get(name).or_else(|| {
        u.caches
            .read_only_tools
            .as_ref()
            .filter(|_| HintRule::of(u).covers(tool).is_some())
    })
}

/// Which tools an upstream's `cache` covers, by their annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintRule {
    /// Tools that change nothing (`readOnlyHint: true`) and reach no open world
    /// (`openWorldHint: false`; the protocol's default is true): an MCP server's answer to
    /// such a call depends on its arguments alone.
    ReadOnlyClosedWorld,
    /// Every read-only tool: an OpenAPI upstream's GET and HEAD operations. Each of its
    /// tools calls a service out there, so all are marked open-world; yet what a GET
    /// answers is what HTTP lets caches keep, and the operator's `ttl` bounds it.
    ReadOnly,
}

impl HintRule {
    /// The rule for upstream `u`.
    pub fn of(u: &UpstreamConfig) -> Self {
        match u.transport {
            manifold_config::Transport::OpenApi(_) => HintRule::ReadOnly,
            _ => HintRule::ReadOnlyClosedWorld,
        }
    }

    /// The name of `tool` when this rule covers it.
    fn covers(self, tool: &str) -> Option<Box<str>> {
        let tool = RawObject::parse(tool).ok()?;
        let hints = RawObject::parse(tool.get("annotations")?).ok()?;
        let flag = |k: &str| hints.get(k).map(str::trim);
        let world = match self {
            HintRule::ReadOnlyClosedWorld => flag("openWorldHint") == Some("false"),
            HintRule::ReadOnly => true,
        };
        (flag("readOnlyHint") == Some("true") && world)
            .then(|| tool.get_str("name").map(|n| n.into()))
            .flatten()
    }
}

enum Directive {
    Use,
    Refresh,
    Bypass,
}

/// What the host asked of the cache in `_meta`.
fn directive(params: &RawObject<'_>) -> Result<Directive, RouteError> {
    let Some(meta) = params.get("_meta").and_then(|m| RawObject::parse(m).ok()) else {
        return Ok(Directive::Use);
    };
    let value = match meta.get(META_KEY) {
        None => return Ok(Directive::Use),
        Some(_) => meta.get_str(META_KEY),
    };
    match value.as_deref() {
        Some("bypass") => Ok(Directive::Bypass),
        Some("refresh") => Ok(Directive::Refresh),
        _ => Err(RouteError::InvalidParams(format!(
            "_meta[\"{META_KEY}\"] must be \"bypass\" or \"refresh\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_closed_world_tools_are_hinted() {
        let tool = |hints: &str| format!(r#"{{"name":"t","annotations":{hints}}}"#);
        let yes = tool(r#"{"readOnlyHint":true,"openWorldHint":false}"#);
        let rule = HintRule::ReadOnlyClosedWorld;
        assert_eq!(rule.covers(&yes).as_deref(), Some("t"));
        for no in [
            r#"{"readOnlyHint":true}"#,
            r#"{"readOnlyHint":true,"openWorldHint":true}"#,
            r#"{"readOnlyHint":false,"openWorldHint":false}"#,
            r#"{}"#,
        ] {
            assert_eq!(rule.covers(&tool(no)), None, "{no}");
        }
        assert_eq!(rule.covers(r#"{"name":"t"}"#), None);
    }

    #[test]
    fn an_openapi_upstreams_read_only_tools_are_hinted_whatever_their_world() {
        let tool = |hints: &str| format!(r#"{{"name":"t","annotations":{hints}}}"#);
        let rule = HintRule::ReadOnly;
        for yes in [
            r#"{"readOnlyHint":true,"openWorldHint":true}"#,
            r#"{"readOnlyHint":true}"#,
        ] {
            assert_eq!(rule.covers(&tool(yes)).as_deref(), Some("t"), "{yes}");
        }
        let post = tool(r#"{"readOnlyHint":false,"openWorldHint":true}"#);
        assert_eq!(rule.covers(&post), None);
        assert_eq!(rule.covers(&tool("{}")), None);
    }

    #[test]
    fn directives_are_read_from_meta() {
        let d = |params: &str| directive(&RawObject::parse(params).unwrap());
        assert!(matches!(d(r#"{"name":"x"}"#), Ok(Directive::Use)));
        assert!(matches!(
            d(r#"{"_meta":{"progressToken":1}}"#),
            Ok(Directive::Use)
        ));
        assert!(matches!(
            d(r#"{"_meta":{"manifold/cache":"bypass"}}"#),
            Ok(Directive::Bypass)
        ));
        assert!(matches!(
            d(r#"{"_meta":{"manifold/cache":"refresh"}}"#),
            Ok(Directive::Refresh)
        ));
        assert!(d(r#"{"_meta":{"manifold/cache":"never"}}"#).is_err());
        assert!(d(r#"{"_meta":{"manifold/cache":1}}"#).is_err());
    }
}
