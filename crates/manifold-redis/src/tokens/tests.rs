//! The token store against a real redis-server (started by `manifold_testkit::redis_server`;
//! `bash tests/redis/install.sh` provides one). Two stores on their own connections play two
//! replicas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use manifold_auth::{Grant, Owner, TokenStore};
use manifold_config::{RedisConfig, SealKey};
use manifold_core::replicas::Stores;
use manifold_testkit::redis_server::{unique_prefix, RedisServer};

use super::RedisTokens;

fn config(server: &RedisServer, prefix: &str, timeout: Duration) -> RedisConfig {
    RedisConfig {
        url: server.url(),
        pool_size: 2,
        timeout,
        key_prefix: prefix.to_owned(),
    }
}

/// A replica's store: its own connection to `server`.
fn replica(server: &RedisServer, prefix: &str) -> RedisTokens {
    let config = config(server, prefix, Duration::from_secs(5));
    let conn = crate::Redis::default()
        .connect(&config, "credentials.redis_url")
        .unwrap();
    RedisTokens::new(conn, &config, &[SealKey([7; 32])]).unwrap()
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

fn grant(token: &str, refreshable: bool) -> Grant {
    Grant {
        access_token: token.into(),
        token_type: "Bearer".into(),
        expires_at_ms: Some(now_ms() + 3_600_000),
        refresh_token: refreshable.then(|| format!("refresh-{token}")),
        scopes: vec![],
        issuer: None,
        client_id: None,
        principal: "eng/key:alice".into(),
        obtained_at_ms: now_ms(),
    }
}

#[tokio::test]
async fn replicas_share_sealed_grants_and_remove_them() {
    let server = RedisServer::start();
    let prefix = unique_prefix("tokens");
    let (a, b) = (replica(&server, &prefix), replica(&server, &prefix));
    let (alice, bob) = (
        Owner::caller("eng", "key:alice"),
        Owner::caller("eng", "key:bob"),
    );
    let forge = grant("secret-forge", true);
    a.put("forge", &alice, &forge).await.unwrap();
    a.put("wi:ki", &alice, &grant("secret-wiki", false))
        .await
        .unwrap();
    a.put("forge", &bob, &grant("secret-bob", true))
        .await
        .unwrap();
    assert_eq!(b.get("forge", &alice).await.unwrap(), Some(forge));

    let key = format!("{prefix}:token:forge:{}", alice.hex());
    let raw = server.command(&["GET", &key]);
    assert!(!raw.is_empty() && !raw.contains("secret"), "{raw}");
    // A refreshable grant stays until removed; one that cannot be refreshed goes with its token.
    assert_eq!(server.command(&["PTTL", &key]), "-1");
    let wiki = format!("{prefix}:token:wi%3Aki:{}", alice.hex());
    let ttl: i64 = server.command(&["PTTL", &wiki]).parse().unwrap();
    assert!(ttl > 0, "{ttl}");

    let mut listed: Vec<(String, String)> = b
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|(u, o, g)| (u, format!("{o:?}/{}", g.access_token)))
        .collect();
    listed.sort();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[2].0, "wi:ki");
    assert_eq!(b.remove(None, &alice).await.unwrap(), 2);
    assert_eq!(a.get("wi:ki", &alice).await.unwrap(), None);
    assert_eq!(b.remove(Some("forge"), &bob).await.unwrap(), 1);
    assert_eq!(b.remove(Some("forge"), &bob).await.unwrap(), 0);
    a.put("forge", &bob, &grant("again", true)).await.unwrap();
    assert_eq!(b.remove_upstream("forge").await.unwrap(), 1);
    assert!(a.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_grant_moved_to_another_key_does_not_open() {
    let server = RedisServer::start();
    let prefix = unique_prefix("tokens-moved");
    let store = replica(&server, &prefix);
    let (alice, mallory) = (
        Owner::caller("eng", "key:alice"),
        Owner::caller("eng", "key:m"),
    );
    store
        .put("forge", &alice, &grant("tok-a", true))
        .await
        .unwrap();
    let from = format!("{prefix}:token:forge:{}", alice.hex());
    let to = format!("{prefix}:token:forge:{}", mallory.hex());
    assert_eq!(server.command(&["COPY", &from, &to]), "1");
    let e = store
        .get("forge", &mallory)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("does not open") && !e.contains("tok-a"), "{e}");
}

#[tokio::test]
async fn one_replica_at_a_time_holds_a_refresh_lock() {
    let server = RedisServer::start();
    let prefix = unique_prefix("tokens-lock");
    let (a, b) = (replica(&server, &prefix), replica(&server, &prefix));
    let owner = Owner::shared();
    let long = Duration::from_secs(60);
    let (got_a, got_b) = tokio::join!(a.lock("forge", &owner, long), b.lock("forge", &owner, long));
    let (a_holds, b_holds) = (got_a.unwrap(), got_b.unwrap());
    assert!(a_holds != b_holds, "exactly one replica holds it");
    let (holder, other) = if a_holds { (&a, &b) } else { (&b, &a) };
    assert!(!holder.lock("forge", &owner, long).await.unwrap());
    assert!(!other.lock("forge", &owner, long).await.unwrap());
    // Releasing a lock one does not hold releases nothing.
    other.unlock("forge", &owner).await.unwrap();
    assert!(!other.lock("forge", &owner, long).await.unwrap());
    holder.unlock("forge", &owner).await.unwrap();
    assert!(other.lock("forge", &owner, long).await.unwrap());
    other.unlock("forge", &owner).await.unwrap();

    // A holder whose ttl ran out does not release the next holder's lock.
    assert!(a
        .lock("wiki", &owner, Duration::from_millis(50))
        .await
        .unwrap());
    let mut taken = false;
    for _ in 0..200 {
        if b.lock("wiki", &owner, long).await.unwrap() {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(taken, "the lock ran out with its ttl");
    a.unlock("wiki", &owner).await.unwrap();
    assert!(!a.lock("wiki", &owner, long).await.unwrap());
}

#[tokio::test]
async fn a_once_value_goes_to_exactly_one_replica() {
    let server = RedisServer::start();
    let prefix = unique_prefix("tokens-once");
    let (a, b) = (replica(&server, &prefix), replica(&server, &prefix));
    let ttl = Duration::from_secs(60);
    for round in 0..10 {
        let key = format!("consent-{round}");
        a.put_once(&key, b"verifier", ttl).await.unwrap();
        assert_eq!(b.peek_once(&key).await.unwrap(), Some(b"verifier".to_vec()));
        let raw = server.command(&["GET", &format!("{prefix}:once:consent-{round}")]);
        assert!(!raw.contains("verifier"), "{raw}");
        let (x, y) = tokio::join!(a.take_once(&key), b.take_once(&key));
        let taken = [x.unwrap(), y.unwrap()];
        assert_eq!(taken.iter().flatten().count(), 1, "{taken:?}");
    }
    a.put_once("short", b"v", Duration::from_millis(30))
        .await
        .unwrap();
    let mut gone = false;
    for _ in 0..200 {
        if b.peek_once("short").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "a once-value expires with its ttl");
}

#[tokio::test]
async fn the_stores_seam_makes_a_store_that_keeps_serving_through_an_outage() {
    let mut server = RedisServer::start();
    let prefix = unique_prefix("tokens-stores");
    let config = config(&server, &prefix, Duration::from_millis(500));
    let redis = crate::Redis::default();
    let e = redis.tokens(&config, &[]).err().unwrap();
    assert!(e.contains("credentials") && e.contains("key"), "{e}");
    let store: Arc<dyn TokenStore> = redis.tokens(&config, &[SealKey([1; 32])]).unwrap();
    assert!(store.is_shared());
    let owner = Owner::caller("eng", "key:alice");
    let forge = grant("t1", true);
    store.put("forge", &owner, &forge).await.unwrap();
    server.stop();
    for _ in 0..3 {
        assert_eq!(
            store.get("forge", &owner).await.unwrap(),
            Some(forge.clone())
        );
    }
    assert!(store
        .lock("forge", &owner, Duration::from_secs(5))
        .await
        .unwrap());
}
