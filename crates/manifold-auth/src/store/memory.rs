//! [`MemoryStore`]: grants kept by this process only (`store = "memory"`), and the locks and
//! once-values of the stores that are not shared.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Grant, Owner, StoreError, TokenStore};

/// Grants, refresh locks and once-values in this process's memory; a restart forgets them.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// By (upstream, owner); ordered, so that listings come in a stable order.
    grants: BTreeMap<(String, Owner), Grant>,
    /// Held refresh locks and when each runs out.
    locks: HashMap<(String, Owner), Instant>,
    /// Once-values and when each expires.
    once: HashMap<String, (Vec<u8>, Instant)>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every grant, for a store that writes them elsewhere too (the file).
    pub(crate) fn snapshot(&self) -> BTreeMap<(String, Owner), Grant> {
        self.state().grants.clone()
    }

    /// Replaces every grant (a store that read them from elsewhere).
    pub(crate) fn replace(&self, grants: BTreeMap<(String, Owner), Grant>) {
        self.state().grants = grants;
    }

    pub(crate) fn get_now(&self, upstream: &str, owner: &Owner) -> Option<Grant> {
        self.state()
            .grants
            .get(&(upstream.to_owned(), *owner))
            .cloned()
    }

    pub(crate) fn put_now(&self, upstream: &str, owner: &Owner, grant: &Grant) {
        self.state()
            .grants
            .insert((upstream.to_owned(), *owner), grant.clone());
    }

    pub(crate) fn remove_now(&self, upstream: Option<&str>, owner: &Owner) -> usize {
        let mut state = self.state();
        let before = state.grants.len();
        state
            .grants
            .retain(|(u, o), _| !(o == owner && upstream.is_none_or(|up| up == u)));
        before - state.grants.len()
    }

    pub(crate) fn remove_upstream_now(&self, upstream: &str) -> usize {
        let mut state = self.state();
        let before = state.grants.len();
        state.grants.retain(|(u, _), _| u != upstream);
        before - state.grants.len()
    }

    pub(crate) fn list_now(&self) -> Vec<(String, Owner, Grant)> {
        self.state()
            .grants
            .iter()
            .map(|((u, o), g)| (u.clone(), *o, g.clone()))
            .collect()
    }

    pub(crate) fn lock_now(&self, upstream: &str, owner: &Owner, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        state.locks.retain(|_, until| *until > now);
        let key = (upstream.to_owned(), *owner);
        if state.locks.contains_key(&key) {
            return false;
        }
        state.locks.insert(key, now + ttl);
        true
    }

    pub(crate) fn unlock_now(&self, upstream: &str, owner: &Owner) {
        self.state().locks.remove(&(upstream.to_owned(), *owner));
    }

    pub(crate) fn put_once_now(&self, key: &str, value: &[u8], ttl: Duration) {
        let now = Instant::now();
        let mut state = self.state();
        // Expired values go whenever another is kept, so that abandoned consents do not pile up.
        state.once.retain(|_, (_, until)| *until > now);
        state
            .once
            .insert(key.to_owned(), (value.to_vec(), now + ttl));
    }

    pub(crate) fn peek_once_now(&self, key: &str) -> Option<Vec<u8>> {
        let state = self.state();
        let (value, until) = state.once.get(key)?;
        (*until > Instant::now()).then(|| value.clone())
    }

    pub(crate) fn take_once_now(&self, key: &str) -> Option<Vec<u8>> {
        let (value, until) = self.state().once.remove(key)?;
        (until > Instant::now()).then_some(value)
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, Result<T, StoreError>> {
    futures::future::ready(Ok(value)).boxed()
}

impl TokenStore for MemoryStore {
    fn is_shared(&self) -> bool {
        false
    }

    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        ready(self.get_now(upstream, owner))
    }

    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.put_now(upstream, owner, grant);
        ready(())
    }

    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        ready(self.remove_now(upstream, owner))
    }

    fn remove_upstream<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        ready(self.remove_upstream_now(upstream))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        ready(self.list_now())
    }

    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(self.lock_now(upstream, owner, ttl))
    }

    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.unlock_now(upstream, owner);
        ready(())
    }

    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.put_once_now(key, value, ttl);
        ready(())
    }

    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        ready(self.peek_once_now(key))
    }

    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        ready(self.take_once_now(key))
    }
}

#[cfg(test)]
mod tests {
    use super::super::seal::tests::grant;
    use super::*;

    #[tokio::test]
    async fn grants_are_kept_per_upstream_and_owner_and_removed() {
        let store = MemoryStore::new();
        let (alice, bob) = (Owner::caller("eng", "a"), Owner::caller("eng", "b"));
        store.put("forge", &alice, &grant("a1")).await.unwrap();
        store.put("wiki", &alice, &grant("a2")).await.unwrap();
        store.put("forge", &bob, &grant("b1")).await.unwrap();
        assert_eq!(store.get("forge", &bob).await.unwrap(), Some(grant("b1")));
        assert_eq!(store.list().await.unwrap().len(), 3);
        assert_eq!(store.remove(None, &alice).await.unwrap(), 2);
        assert_eq!(store.get("wiki", &alice).await.unwrap(), None);
        assert_eq!(store.remove_upstream("forge").await.unwrap(), 1);
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_lock_is_held_once_until_unlocked_or_its_ttl_runs_out() {
        let store = MemoryStore::new();
        let owner = Owner::shared();
        let long = Duration::from_secs(60);
        assert!(store.lock("forge", &owner, long).await.unwrap());
        assert!(!store.lock("forge", &owner, long).await.unwrap());
        assert!(store.lock("wiki", &owner, long).await.unwrap());
        store.unlock("forge", &owner).await.unwrap();
        assert!(store
            .lock("forge", &owner, Duration::from_millis(20))
            .await
            .unwrap());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(store.lock("forge", &owner, long).await.unwrap());
    }

    #[tokio::test]
    async fn a_once_value_is_taken_once_and_expires() {
        let store = MemoryStore::new();
        store
            .put_once("c1", b"v", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(store.peek_once("c1").await.unwrap(), Some(b"v".to_vec()));
        assert_eq!(store.take_once("c1").await.unwrap(), Some(b"v".to_vec()));
        assert_eq!(store.take_once("c1").await.unwrap(), None);
        store
            .put_once("c2", b"w", Duration::from_millis(20))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(store.peek_once("c2").await.unwrap(), None);
        assert_eq!(store.take_once("c2").await.unwrap(), None);
    }
}
