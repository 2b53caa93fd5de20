use super::super::seal::tests::grant;
use super::*;

/// A shared store that fails while `down` is set (Redis unreachable).
#[derive(Default)]
struct Flaky {
    store: MemoryStore,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Relaxed) {
            Err(StoreError("the token store (Redis) is unreachable".into()))
        } else {
            Ok(())
        }
    }
}

impl TokenStore for Flaky {
    fn is_shared(&self) -> bool {
        true
    }
    fn get<'a>(
        &'a self,
        u: &'a str,
        o: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        async move { self.check().map(|()| self.store.get_now(u, o)) }.boxed()
    }
    fn put<'a>(
        &'a self,
        u: &'a str,
        o: &'a Owner,
        g: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        async move { self.check().map(|()| self.store.put_now(u, o, g)) }.boxed()
    }
    fn remove<'a>(
        &'a self,
        u: Option<&'a str>,
        o: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        async move { self.check().map(|()| self.store.remove_now(u, o)) }.boxed()
    }
    fn remove_upstream<'a>(&'a self, u: &'a str) -> BoxFuture<'a, Result<usize, StoreError>> {
        async move { self.check().map(|()| self.store.remove_upstream_now(u)) }.boxed()
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        async move { self.check().map(|()| self.store.list_now()) }.boxed()
    }
    fn lock<'a>(
        &'a self,
        u: &'a str,
        o: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move { self.check().map(|()| self.store.lock_now(u, o, ttl)) }.boxed()
    }
    fn unlock<'a>(&'a self, u: &'a str, o: &'a Owner) -> BoxFuture<'a, Result<(), StoreError>> {
        async move { self.check().map(|()| self.store.unlock_now(u, o)) }.boxed()
    }
    fn put_once<'a>(
        &'a self,
        k: &'a str,
        v: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        async move { self.check().map(|()| self.store.put_once_now(k, v, ttl)) }.boxed()
    }
    fn peek_once<'a>(&'a self, k: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        async move { self.check().map(|()| self.store.peek_once_now(k)) }.boxed()
    }
    fn take_once<'a>(&'a self, k: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        async move { self.check().map(|()| self.store.take_once_now(k)) }.boxed()
    }
}

fn stores() -> (Arc<Flaky>, Fallback) {
    let shared = Arc::new(Flaky::default());
    let fallback = Fallback::new(Arc::clone(&shared) as Arc<dyn TokenStore>);
    (shared, fallback)
}

fn later(token: &str, at: u64) -> Grant {
    Grant {
        obtained_at_ms: at,
        ..grant(token)
    }
}

#[tokio::test]
async fn tokens_stay_usable_while_the_shared_store_is_down() {
    let (shared, store) = stores();
    let owner = Owner::caller("eng", "key:alice");
    store.put("forge", &owner, &grant("t1")).await.unwrap();
    shared.down.store(true, Ordering::Relaxed);
    for _ in 0..5 {
        assert_eq!(store.get("forge", &owner).await.unwrap(), Some(grant("t1")));
    }
    // A refresh during the outage is single-flight on this replica and kept here.
    let ttl = Duration::from_secs(30);
    assert!(store.lock("forge", &owner, ttl).await.unwrap());
    assert!(!store.lock("forge", &owner, ttl).await.unwrap());
    store.put("forge", &owner, &later("t2", 5)).await.unwrap();
    store.unlock("forge", &owner).await.unwrap();
    assert_eq!(
        store.get("forge", &owner).await.unwrap(),
        Some(later("t2", 5))
    );
    // A consent started during the outage completes on this replica.
    store.put_once("c", b"v", ttl).await.unwrap();
    assert_eq!(store.take_once("c").await.unwrap(), Some(b"v".to_vec()));
    // The operator's calls say that they could not be done.
    assert!(store.list().await.is_err());
    assert_eq!(store.outages(), 1, "one outage is logged once");

    // Back: the grant written during the outage reaches the shared store.
    shared.down.store(false, Ordering::Relaxed);
    assert_eq!(
        store.get("forge", &owner).await.unwrap(),
        Some(later("t2", 5))
    );
    assert_eq!(shared.store.get_now("forge", &owner), Some(later("t2", 5)));
    shared.down.store(true, Ordering::Relaxed);
    assert!(store.get("forge", &owner).await.is_ok());
    assert_eq!(store.outages(), 2);
}

#[tokio::test]
async fn a_newer_grant_of_another_replica_wins_over_one_kept_here() {
    let (shared, store) = stores();
    let owner = Owner::shared();
    shared.down.store(true, Ordering::Relaxed);
    store.put("forge", &owner, &later("mine", 5)).await.unwrap();
    shared.down.store(false, Ordering::Relaxed);
    shared.store.put_now("forge", &owner, &later("theirs", 9));
    assert_eq!(
        store.get("forge", &owner).await.unwrap(),
        Some(later("theirs", 9))
    );
    assert_eq!(
        shared.store.get_now("forge", &owner),
        Some(later("theirs", 9))
    );
}

#[tokio::test]
async fn a_grant_removed_elsewhere_is_forgotten_here() {
    let (shared, store) = stores();
    let owner = Owner::shared();
    store.put("forge", &owner, &grant("t")).await.unwrap();
    shared.store.remove_now(None, &owner);
    assert_eq!(store.get("forge", &owner).await.unwrap(), None);
    shared.down.store(true, Ordering::Relaxed);
    assert_eq!(store.get("forge", &owner).await.unwrap(), None);
}
