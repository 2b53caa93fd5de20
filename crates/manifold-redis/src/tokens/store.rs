//! [`RedisTokens`] as a [`TokenStore`].

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use manifold_auth::store::seal::once_place;
use manifold_auth::{Grant, Owner, StoreError, TokenStore};

use super::{decode, encode, RedisTokens};

/// `d` in whole milliseconds, at least one (Redis refuses a ttl of zero).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisTokens {
    async fn get(&self, upstream: &str, owner: &Owner) -> Result<Option<Grant>, StoreError> {
        let key = self.grant_key(upstream, owner);
        let sealed: Option<Vec<u8>> = self.command(redis::cmd("GET").arg(&key)).await?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        // A grant sealed with a previous key is sealed with the current one when next written.
        let (grant, _stale) = self.sealer.open_grant(upstream, owner, &sealed)?;
        Ok(Some(grant))
    }

    async fn put(&self, upstream: &str, owner: &Owner, grant: &Grant) -> Result<(), StoreError> {
        let sealed = self.sealer.seal_grant(upstream, owner, grant)?;
        let mut set = redis::cmd("SET");
        set.arg(self.grant_key(upstream, owner)).arg(sealed);
        // Without a refresh token, a grant is of no use once its access token expired.
        if let (None, Some(at)) = (&grant.refresh_token, grant.expires_at_ms) {
            set.arg("PXAT").arg(at.max(1));
        }
        let mut pipe = redis::pipe();
        pipe.atomic()
            .add_command(set)
            .ignore()
            .sadd(self.owner_set(owner), encode(upstream))
            .ignore()
            .sadd(self.upstream_set(upstream), owner.hex())
            .ignore()
            .sadd(self.upstreams_set(), encode(upstream))
            .ignore();
        self.pipeline::<()>(&pipe).await
    }

    async fn remove(&self, upstream: Option<&str>, owner: &Owner) -> Result<usize, StoreError> {
        let Some(upstream) = upstream else {
            let mut invocation = self.remove_owner.prepare_invoke();
            invocation
                .key(self.owner_set(owner))
                .arg(&self.prefix)
                .arg(owner.hex());
            return self.script(&invocation).await;
        };
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(self.grant_key(upstream, owner))
            .srem(self.owner_set(owner), encode(upstream))
            .ignore()
            .srem(self.upstream_set(upstream), owner.hex())
            .ignore();
        let (removed,): (usize,) = self.pipeline(&pipe).await?;
        Ok(removed)
    }

    async fn remove_upstream(&self, upstream: &str) -> Result<usize, StoreError> {
        let mut invocation = self.remove_upstream.prepare_invoke();
        invocation
            .key(self.upstream_set(upstream))
            .key(self.upstreams_set())
            .arg(&self.prefix)
            .arg(encode(upstream));
        self.script(&invocation).await
    }

    async fn list(&self) -> Result<Vec<(String, Owner, Grant)>, StoreError> {
        let mut invocation = self.list.prepare_invoke();
        invocation.key(self.upstreams_set()).arg(&self.prefix);
        let flat: Vec<Vec<u8>> = self.script(&invocation).await?;
        let unreadable = || StoreError("the token store (Redis) holds an unreadable key".into());
        let mut grants = Vec::with_capacity(flat.len() / 3);
        for entry in flat.chunks_exact(3) {
            let [upstream, owner, sealed] = entry else {
                continue;
            };
            let upstream = std::str::from_utf8(upstream)
                .ok()
                .and_then(decode)
                .ok_or_else(unreadable)?;
            let owner = std::str::from_utf8(owner)
                .ok()
                .and_then(Owner::from_hex)
                .ok_or_else(unreadable)?;
            let (grant, _) = self.sealer.open_grant(&upstream, &owner, sealed)?;
            grants.push((upstream, owner, grant));
        }
        Ok(grants)
    }

    async fn lock(&self, upstream: &str, owner: &Owner, ttl: Duration) -> Result<bool, StoreError> {
        let holder = self.holder()?;
        let mut set = redis::cmd("SET");
        set.arg(self.lock_key(upstream, owner))
            .arg(&holder)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        let held: Option<String> = self.command(&set).await?;
        if held.is_some() {
            self.holders().insert((upstream.to_owned(), *owner), holder);
        }
        Ok(held.is_some())
    }

    async fn unlock(&self, upstream: &str, owner: &Owner) -> Result<(), StoreError> {
        let holder = self.holders().remove(&(upstream.to_owned(), *owner));
        let Some(holder) = holder else {
            return Ok(());
        };
        let mut invocation = self.unlock.prepare_invoke();
        invocation.key(self.lock_key(upstream, owner)).arg(holder);
        self.script::<i64>(&invocation).await.map(|_| ())
    }

    async fn put_once(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), StoreError> {
        let sealed = self.sealer.seal(&once_place(key), value)?;
        let mut set = redis::cmd("SET");
        set.arg(self.once_key(key))
            .arg(sealed)
            .arg("PX")
            .arg(millis(ttl));
        self.command::<()>(&set).await
    }

    async fn once(&self, key: &str, verb: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sealed: Option<Vec<u8>> = self
            .command(redis::cmd(verb).arg(self.once_key(key)))
            .await?;
        match sealed {
            Some(sealed) => Ok(Some(self.sealer.open(&once_place(key), &sealed)?.value)),
            None => Ok(None),
        }
    }
}

impl TokenStore for RedisTokens {
    fn is_shared(&self) -> bool {
        true
    }

    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        RedisTokens::get(self, upstream, owner).boxed()
    }

    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        RedisTokens::put(self, upstream, owner, grant).boxed()
    }

    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        RedisTokens::remove(self, upstream, owner).boxed()
    }

    fn remove_upstream<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        RedisTokens::remove_upstream(self, upstream).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        RedisTokens::list(self).boxed()
    }

    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        RedisTokens::lock(self, upstream, owner, ttl).boxed()
    }

    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        RedisTokens::unlock(self, upstream, owner).boxed()
    }

    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        RedisTokens::put_once(self, key, value, ttl).boxed()
    }

    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.once(key, "GET").boxed()
    }

    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.once(key, "GETDEL").boxed()
    }
}
