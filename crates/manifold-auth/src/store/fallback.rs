//! [`Fallback`]: a shared store (Redis) with this replica's memory behind it, so that an
//! outage of the shared store does not take the tokens away from the callers of this replica.
//!
//! Every grant read from or written to the shared store is kept in memory too. While the
//! shared store fails, grants are read from memory, new ones are kept there (and written to
//! the shared store once it answers again, unless another replica wrote a newer one), refresh
//! locks and once-values are this replica's own. Removals and listings are the operator's:
//! they fail while the shared store does, so that a revocation never seems done when it is
//! not. The outage is logged once when it starts and once when it ends, not per call.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::memory::MemoryStore;
use super::{Grant, Owner, StoreError, TokenStore};

/// A shared store, and this replica's memory while it fails.
pub struct Fallback {
    shared: Arc<dyn TokenStore>,
    local: MemoryStore,
    /// Whether the shared store failed last time it was asked.
    down: AtomicBool,
    /// Outages logged so far.
    outages: AtomicU64,
    /// Grants kept in memory only, because the shared store failed when they were written.
    unsynced: Mutex<HashSet<(String, Owner)>>,
}

impl Fallback {
    pub fn new(shared: Arc<dyn TokenStore>) -> Self {
        Self {
            shared,
            local: MemoryStore::new(),
            down: AtomicBool::new(false),
            outages: AtomicU64::new(0),
            unsynced: Mutex::new(HashSet::new()),
        }
    }

    /// How many outages of the shared store were logged.
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    fn failed(&self, e: &StoreError) {
        if !self.down.swap(true, Ordering::AcqRel) {
            self.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "the shared token store failed ({e}): this replica serves the tokens it holds, \
                 and keeps new ones in memory, until it answers again"
            );
        }
    }

    fn answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!("the shared token store answers again");
        }
    }

    fn unsynced(&self) -> std::sync::MutexGuard<'_, HashSet<(String, Owner)>> {
        self.unsynced.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_unsynced(&self, upstream: &str, owner: &Owner) -> bool {
        self.unsynced().contains(&(upstream.to_owned(), *owner))
    }

    fn synced(&self, upstream: &str, owner: &Owner) {
        self.unsynced().remove(&(upstream.to_owned(), *owner));
    }

    async fn get(&self, upstream: &str, owner: &Owner) -> Result<Option<Grant>, StoreError> {
        let found = match self.shared.get(upstream, owner).await {
            Ok(found) => found,
            Err(e) => {
                self.failed(&e);
                return Ok(self.local.get_now(upstream, owner));
            }
        };
        self.answered();
        if self.is_unsynced(upstream, owner) {
            return self.sync(upstream, owner, found).await;
        }
        match &found {
            Some(grant) => self.local.put_now(upstream, owner, grant),
            None => {
                self.local.remove_now(Some(upstream), owner);
            }
        }
        Ok(found)
    }

    /// The shared store answers again and holds `shared` for a grant written here during
    /// the outage: the newer of the two wins, and is kept in both.
    async fn sync(
        &self,
        upstream: &str,
        owner: &Owner,
        shared: Option<Grant>,
    ) -> Result<Option<Grant>, StoreError> {
        let Some(local) = self.local.get_now(upstream, owner) else {
            self.synced(upstream, owner);
            return Ok(shared);
        };
        if let Some(shared) = shared.filter(|s| s.obtained_at_ms >= local.obtained_at_ms) {
            self.synced(upstream, owner);
            self.local.put_now(upstream, owner, &shared);
            return Ok(Some(shared));
        }
        match self.shared.put(upstream, owner, &local).await {
            Ok(()) => self.synced(upstream, owner),
            Err(e) => self.failed(&e),
        }
        Ok(Some(local))
    }

    async fn put(&self, upstream: &str, owner: &Owner, grant: &Grant) -> Result<(), StoreError> {
        self.local.put_now(upstream, owner, grant);
        match self.shared.put(upstream, owner, grant).await {
            Ok(()) => {
                self.answered();
                self.synced(upstream, owner);
            }
            Err(e) => {
                self.failed(&e);
                self.unsynced().insert((upstream.to_owned(), *owner));
            }
        }
        Ok(())
    }

    async fn remove(&self, upstream: Option<&str>, owner: &Owner) -> Result<usize, StoreError> {
        let here = self.local.remove_now(upstream, owner);
        self.unsynced()
            .retain(|(u, o)| !(o == owner && upstream.is_none_or(|up| up == u)));
        let shared = self.shared.remove(upstream, owner).await;
        self.outcome(shared).map(|n| n.max(here))
    }

    async fn remove_upstream(&self, upstream: &str) -> Result<usize, StoreError> {
        let here = self.local.remove_upstream_now(upstream);
        self.unsynced().retain(|(u, _)| u != upstream);
        let shared = self.shared.remove_upstream(upstream).await;
        self.outcome(shared).map(|n| n.max(here))
    }

    /// Notes whether the shared store answered, passing its answer on.
    fn outcome<T>(&self, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        match &answer {
            Ok(_) => self.answered(),
            Err(e) => self.failed(e),
        }
        answer
    }

    async fn lock(&self, upstream: &str, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        match self.shared.lock(upstream, owner, ttl).await {
            Ok(held) => {
                self.answered();
                Ok(held)
            }
            // Single flight on this replica only, while the replicas cannot agree.
            Err(e) => {
                self.failed(&e);
                Ok(self.local.lock_now(upstream, owner, ttl))
            }
        }
    }

    async fn unlock(&self, upstream: &str, owner: &Owner) -> Result<(), StoreError> {
        self.local.unlock_now(upstream, owner);
        // A shared lock that cannot be released now runs out with its ttl.
        let _ = self.outcome(self.shared.unlock(upstream, owner).await);
        Ok(())
    }

    async fn put_once(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), StoreError> {
        if let Err(e) = self.shared.put_once(key, value, ttl).await {
            self.failed(&e);
            self.local.put_once_now(key, value, ttl);
        } else {
            self.answered();
        }
        Ok(())
    }

    async fn once(&self, key: &str, take: bool) -> Result<Option<Vec<u8>>, StoreError> {
        let shared = if take {
            self.shared.take_once(key).await
        } else {
            self.shared.peek_once(key).await
        };
        // A value kept here during an outage is looked for whenever the shared store has none.
        match self.outcome(shared) {
            Ok(Some(value)) => Ok(Some(value)),
            Ok(None) | Err(_) if take => Ok(self.local.take_once_now(key)),
            Ok(None) | Err(_) => Ok(self.local.peek_once_now(key)),
        }
    }
}

impl TokenStore for Fallback {
    fn is_shared(&self) -> bool {
        self.shared.is_shared()
    }

    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        Fallback::get(self, upstream, owner).boxed()
    }

    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Fallback::put(self, upstream, owner, grant).boxed()
    }

    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Fallback::remove(self, upstream, owner).boxed()
    }

    fn remove_upstream<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Fallback::remove_upstream(self, upstream).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        async move { self.outcome(self.shared.list().await) }.boxed()
    }

    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Fallback::lock(self, upstream, owner, ttl).boxed()
    }

    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Fallback::unlock(self, upstream, owner).boxed()
    }

    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Fallback::put_once(self, key, value, ttl).boxed()
    }

    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.once(key, false).boxed()
    }

    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.once(key, true).boxed()
    }
}

#[cfg(test)]
mod tests;
