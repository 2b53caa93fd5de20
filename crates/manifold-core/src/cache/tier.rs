//! The result cache's second tier, shared by replicas ([`SharedTier`]): what `Cache` asks of
//! it, and [`MemoryTier`], a tier in this process that several caches share (as replicas share
//! one Redis), for tests of what replicas see of each other.
//!
//! A tier never fails a request: whatever it cannot do is a miss, or an answer that stays in
//! memory only.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::{Cache, Family, Key};

/// The tier shared by replicas, behind each process's own stores.
pub trait SharedTier: Send + Sync {
    /// Whether the entry of `key` may be looked up and stored now (not while a change this
    /// replica saw is not yet known to the other replicas).
    fn usable_for(&self, key: &Key) -> bool;
    /// The entry of `key`, if there is one, with the ticket a fill stores its answer with.
    /// `None`: the tier could not be asked (the request is a miss that is not shared).
    fn lookup<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Option<(Ticket, Option<Found>)>>;
    /// Keeps `result` for `ttl` where `ticket` says, unless what it was looked up under
    /// changed meanwhile. Does not wait for it to be done.
    fn store(&self, ticket: Ticket, result: Box<str>, ttl: Duration);
    /// `upstream` changed (`uri`: only that resource of it): no replica uses what it held.
    fn changed(&self, upstream: usize, uri: Option<&str>);
    /// The upkeep, once a second.
    fn tick<'a>(&'a self, cache: &'a Arc<Cache>) -> BoxFuture<'a, ()>;
    /// Tells `cache`, while it lives, of the changes other replicas make.
    fn listen(&self, cache: Weak<Cache>);
}

/// A lookup's view of the tier: where the entry is, and what it was looked up under. Opaque
/// to the cache; each tier puts in it what its store needs.
pub struct Ticket(Box<dyn Any + Send + Sync>);

impl Ticket {
    pub fn new<T: Any + Send + Sync>(inner: T) -> Self {
        Self(Box::new(inner))
    }

    /// What the tier put in, if it is a `T`.
    pub fn take<T: Any>(self) -> Option<T> {
        self.0.downcast().ok().map(|b| *b)
    }
}

/// An entry found in the tier: the answer, and how long it has left.
pub struct Found {
    pub result: Box<str>,
    pub remaining: Duration,
}

/// Returns once, pending, before it completes: what follows runs on the runtime
/// (`Router::run_here_first` moves a request that waits there), where the tier's
/// connections live, rather than on the thread that read the request.
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

/// A tier in this process, shared by every cache given a handle of it ([`MemoryTier::replica`]).
/// Entries are keyed like those of Redis: by the generations of their upstream (and resource),
/// which a change increments.
pub struct MemoryTier {
    state: Arc<Mutex<MemoryState>>,
    /// This handle's replica, so that it is not told of its own changes.
    node: u64,
}

#[derive(Default)]
struct MemoryState {
    /// By (upstream, resource URI for a resource's own).
    gens: HashMap<(usize, Option<Box<str>>), u64>,
    entries: HashMap<Place, (Box<str>, Instant)>,
    caches: Vec<(u64, Weak<Cache>)>,
}

/// Where an entry is: its generations and what its key holds but the process's epoch.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Place {
    gens: (u64, u64),
    upstream: usize,
    family: Family,
    name: Arc<str>,
    args: Arc<str>,
    team: Option<Arc<str>>,
}

static NODES: AtomicU64 = AtomicU64::new(1);

impl Default for MemoryTier {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            node: NODES.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl MemoryTier {
    /// Another replica's handle on the same tier.
    pub fn replica(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            node: NODES.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryState {
    fn place(&self, key: &Key) -> Place {
        let gen = |uri: Option<&str>| {
            let k = (key.upstream, uri.map(Into::into));
            self.gens.get(&k).copied().unwrap_or(0)
        };
        let resource = match key.family {
            Family::Tools => 0,
            Family::Resources => gen(Some(&key.name)),
        };
        Place {
            gens: (gen(None), resource),
            upstream: key.upstream,
            family: key.family,
            name: Arc::clone(&key.name),
            args: Arc::clone(&key.args),
            team: key.team.clone(),
        }
    }
}

impl SharedTier for MemoryTier {
    fn usable_for(&self, _key: &Key) -> bool {
        true
    }

    fn lookup<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Option<(Ticket, Option<Found>)>> {
        let mut state = self.lock();
        let place = state.place(key);
        let now = Instant::now();
        state.entries.retain(|_, (_, until)| *until > now);
        let found = state.entries.get(&place).map(|(result, until)| Found {
            result: result.clone(),
            remaining: until.saturating_duration_since(now),
        });
        drop(state);
        Box::pin(async move { Some((Ticket::new(place), found)) })
    }

    fn store(&self, ticket: Ticket, result: Box<str>, ttl: Duration) {
        let Some(place) = ticket.take::<Place>() else {
            return;
        };
        let mut state = self.lock();
        let current = state.place(&Key::new(
            place.upstream,
            0,
            place.family,
            Arc::clone(&place.name),
            Arc::clone(&place.args),
            place.team.clone(),
        ));
        if current == place {
            state.entries.insert(place, (result, Instant::now() + ttl));
        }
    }

    fn changed(&self, upstream: usize, uri: Option<&str>) {
        let others: Vec<Arc<Cache>> = {
            let mut state = self.lock();
            *state
                .gens
                .entry((upstream, uri.map(Into::into)))
                .or_default() += 1;
            state.caches.retain(|(_, c)| c.strong_count() > 0);
            state
                .caches
                .iter()
                .filter(|(node, _)| *node != self.node)
                .filter_map(|(_, c)| c.upgrade())
                .collect()
        };
        for cache in others {
            match uri {
                None => cache.drop_upstream(upstream),
                Some(uri) => {
                    cache.drop_resource(upstream, uri);
                }
            }
        }
    }

    fn tick<'a>(&'a self, _cache: &'a Arc<Cache>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn listen(&self, cache: Weak<Cache>) {
        self.lock().caches.push((self.node, cache));
    }
}

#[cfg(test)]
mod tests;
