//! The limit store against a real redis-server (started by `manifold_testkit::redis_server`;
//! `bash tests/redis/install.sh` provides one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use manifold_config::{QuotaConfig, RateConfig, RedisConfig};
use manifold_policy::{LimitDef, Refusal, RefusalKind, StoreError};

use super::Limiter as RedisLimiter;
use manifold_testkit::process::free_port;
use manifold_testkit::redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

fn limiter(url: &str, prefix: &str, timeout: Duration) -> RedisLimiter {
    let config = RedisConfig {
        url: url.to_owned(),
        pool_size: 4,
        timeout,
        key_prefix: prefix.to_owned(),
    };
    let conn = crate::Redis::default()
        .connect(&config, "limits.redis_url")
        .unwrap();
    RedisLimiter::new(conn, &config, false)
}

/// A generous timeout for tests that are not about timeouts (the machine may be busy).
fn relaxed(server: &RedisServer, prefix: &str) -> RedisLimiter {
    limiter(&server.url(), prefix, Duration::from_secs(5))
}

fn rate(count: u32, period: Duration, burst: u32) -> Option<RateConfig> {
    Some(RateConfig {
        count,
        period,
        burst,
    })
}

fn quota(count: u64, window: Duration) -> QuotaConfig {
    QuotaConfig { count, window }
}

fn limit(id: &str, rate: Option<RateConfig>, quotas: &[QuotaConfig]) -> Arc<LimitDef> {
    Arc::new(LimitDef {
        id: id.into(),
        rate,
        quotas: quotas.to_vec(),
    })
}

async fn admitted(limiter: &RedisLimiter, limits: &[Arc<LimitDef>]) -> bool {
    limiter.check(limits).await.unwrap().is_none()
}

async fn refusal(limiter: &RedisLimiter, limits: &[Arc<LimitDef>]) -> Refusal {
    limiter
        .check(limits)
        .await
        .unwrap()
        .expect("the call should be refused")
}

/// Time left in the current window of `window` (aligned to the Unix epoch), by this machine's
/// clock, which is also the test server's.
fn left_in_window(window: Duration) -> Duration {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let window = window.as_micros();
    Duration::from_micros((window - now.as_micros() % window) as u64)
}

/// Quota tests count within one window: avoid starting right before a window ends.
async fn clear_of_window_end(window: Duration) {
    let left = left_in_window(window);
    if left < Duration::from_secs(30) {
        tokio::time::sleep(left + Duration::from_secs(1)).await;
    }
}

/// Runs `n` checks at once, each in its own task, and returns how many were admitted; every
/// refusal must be of `kind`.
async fn concurrent(
    limiter: &RedisLimiter,
    limits: &[Arc<LimitDef>],
    n: usize,
    kind: RefusalKind,
) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let limiter = limiter.clone();
            let limits = limits.to_vec();
            tokio::spawn(async move { limiter.check(&limits).await })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(None) => admitted += 1,
            Ok(Some(refusal)) => assert_eq!(refusal.kind, kind, "{refusal:?}"),
            Err(e) => panic!("check failed: {e}"),
        }
    }
    admitted
}

/// Waits (bounded) until 8 checks in a row are admitted: the limiter uses Redis again by
/// itself; a few checks may still fail while its pooled connections are reopened.
async fn admitted_again(limiter: &RedisLimiter, limits: &[Arc<LimitDef>], failure: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut admitted_in_a_row = 0;
    while admitted_in_a_row < 8 {
        assert!(Instant::now() < deadline, "{failure}");
        match limiter.check(limits).await {
            Ok(None) => admitted_in_a_row += 1,
            Ok(Some(refusal)) => panic!("{refusal:?}"),
            Err(_) => {
                admitted_in_a_row = 0;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_quotas_use_is_read_without_counting() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "u");
    clear_of_window_end(HOUR).await;
    let limits = [limit("team:a", None, &[quota(10, DAY), quota(3, HOUR)])];
    for _ in 0..2 {
        assert!(admitted(&limiter, &limits).await);
    }
    let usage = limiter.usage(&limits).await.unwrap();
    let read: Vec<(&str, u64, u64)> = usage.iter().map(|u| (&*u.limit, u.used, u.count)).collect();
    assert_eq!(read, [("team:a", 2, 10), ("team:a", 2, 3)]);
    assert!(usage[1].resets_in <= HOUR, "{usage:?}");
    // Reading counted nothing: one call is left of the hour's quota.
    assert!(admitted(&limiter, &limits).await);
    assert_eq!(
        refusal(&limiter, &limits).await.kind,
        RefusalKind::QuotaExceeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quota_is_exact_under_concurrency() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    clear_of_window_end(DAY).await;
    let limits = [limit("team:a", None, &[quota(50, DAY)])];
    let admitted = concurrent(&limiter, &limits, 200, RefusalKind::QuotaExceeded).await;
    assert_eq!(admitted, 50);
    // The counter in Redis agrees, under the documented key, and expires with the window.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let key = format!("t:quota:team:a:86400:{}", now / 86_400);
    assert_eq!(server.command(&["GET", &key]), "50");
    let ttl: u64 = server.command(&["PTTL", &key]).parse().unwrap();
    let expected = left_in_window(DAY).as_millis() as u64 + 60_000;
    assert!(
        ttl.abs_diff(expected) < 5_000,
        "ttl {ttl} ms, expected about {expected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_is_exact_under_concurrency() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    // 50/hour: one call's worth comes back every 72 s, longer than this test takes.
    let limits = [limit("team:a", rate(50, HOUR, 50), &[])];
    let admitted = concurrent(&limiter, &limits, 200, RefusalKind::RateLimited).await;
    assert_eq!(admitted, 50);
    // The stored arrival time expires once it is reached: at most the tolerance (burst × T).
    let ttl: u64 = server.command(&["PTTL", "t:rate:team:a"]).parse().unwrap();
    assert!(ttl > 3_500_000 && ttl <= 3_600_001, "ttl {ttl} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_by_a_quota_consumes_no_rate() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    clear_of_window_end(DAY).await;
    let a_rate = limit("rate", rate(2, HOUR, 2), &[]);
    let a_quota = limit("quota", None, &[quota(1, DAY)]);
    let both = [a_rate.clone(), a_quota.clone()];
    assert!(admitted(&limiter, &both).await);
    let refused = refusal(&limiter, &both).await;
    assert_eq!(refused.kind, RefusalKind::QuotaExceeded);
    assert_eq!(&*refused.limit, "quota");
    // The refused call took nothing from the rate: one more call's worth is left, exactly.
    assert!(admitted(&limiter, std::slice::from_ref(&a_rate)).await);
    assert_eq!(
        refusal(&limiter, &[a_rate]).await.kind,
        RefusalKind::RateLimited
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_by_a_rate_consumes_no_quota() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    // (A day ends with an hour.)
    clear_of_window_end(HOUR).await;
    let a_rate = limit("rate", rate(1, HOUR, 1), &[]);
    let a_quota = limit("quota", None, &[quota(2, DAY), quota(10, HOUR)]);
    let both = [a_rate.clone(), a_quota.clone()];
    assert!(admitted(&limiter, &both).await);
    for _ in 0..3 {
        let refused = refusal(&limiter, &both).await;
        assert_eq!(refused.kind, RefusalKind::RateLimited);
        assert_eq!(&*refused.limit, "rate");
    }
    // Neither quota counted the refused calls: one more call is left of 2/day, exactly.
    assert!(admitted(&limiter, std::slice::from_ref(&a_quota)).await);
    let refused = refusal(&limiter, &[a_quota]).await;
    assert_eq!(refused.kind, RefusalKind::QuotaExceeded);
    let hour_counter = format!(
        "t:quota:quota:3600:{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 3600
    );
    assert_eq!(server.command(&["GET", &hour_counter]), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_limit_with_a_rate_and_a_quota_is_all_or_nothing() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    clear_of_window_end(DAY).await;
    let both = [limit("team:a", rate(3, HOUR, 3), &[quota(2, DAY)])];
    assert!(admitted(&limiter, &both).await);
    assert!(admitted(&limiter, &both).await);
    assert_eq!(
        refusal(&limiter, &both).await.kind,
        RefusalKind::QuotaExceeded
    );
    // The rate kept its third call's worth.
    assert!(admitted(&limiter, &[limit("team:a", rate(3, HOUR, 3), &[])]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_says_when_a_call_would_be_admitted() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");

    // A rate: 6/min with a burst of 1, so one call every 10 s.
    let slow = [limit("slow", rate(6, Duration::from_secs(60), 1), &[])];
    assert!(admitted(&limiter, &slow).await);
    let refused = refusal(&limiter, &slow).await;
    assert_eq!(refused.kind, RefusalKind::RateLimited);
    assert!(
        refused.retry_after > Duration::from_secs(5)
            && refused.retry_after <= Duration::from_secs(10),
        "{refused:?}"
    );

    // With a burst of 3 at 60/min, the 4th call waits about a second.
    let bursty = [limit("bursty", rate(60, Duration::from_secs(60), 3), &[])];
    for _ in 0..3 {
        assert!(admitted(&limiter, &bursty).await);
    }
    let refused = refusal(&limiter, &bursty).await;
    assert!(
        refused.retry_after > Duration::from_millis(500)
            && refused.retry_after <= Duration::from_secs(1),
        "{refused:?}"
    );

    // Waiting that long is enough: 20/s, burst 1.
    let fast = [limit("fast", rate(20, Duration::from_secs(1), 1), &[])];
    assert!(admitted(&limiter, &fast).await);
    let refused = refusal(&limiter, &fast).await;
    assert!(
        refused.retry_after <= Duration::from_millis(50),
        "{refused:?}"
    );
    tokio::time::sleep(refused.retry_after + Duration::from_millis(5)).await;
    assert!(admitted(&limiter, &fast).await);

    // A quota: until the window ends.
    clear_of_window_end(HOUR).await;
    let hourly = [limit("hourly", None, &[quota(1, HOUR)])];
    assert!(admitted(&limiter, &hourly).await);
    let refused = refusal(&limiter, &hourly).await;
    assert_eq!(refused.kind, RefusalKind::QuotaExceeded);
    let expected = left_in_window(HOUR);
    let diff = refused.retry_after.abs_diff(expected);
    assert!(
        diff < Duration::from_secs(5),
        "{refused:?}, expected about {expected:?}"
    );

    // Several refuse: the longest wait is reported (the hour's end, not the rate's 10 s).
    let refused = refusal(&limiter, &[slow[0].clone(), hourly[0].clone()]).await;
    assert_eq!(refused.kind, RefusalKind::QuotaExceeded);
    assert_eq!(&*refused.limit, "hourly");
    assert!(refused.retry_after > Duration::from_secs(20), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_counts() {
    let server = RedisServer::start();
    let one = relaxed(&server, "shared");
    let two = relaxed(&server, "shared");
    clear_of_window_end(DAY).await;
    let limits = [limit("team:a", rate(100, HOUR, 100), &[quota(10, DAY)])];
    for _ in 0..5 {
        assert!(admitted(&one, &limits).await);
        assert!(admitted(&two, &limits).await);
    }
    assert_eq!(
        refusal(&one, &limits).await.kind,
        RefusalKind::QuotaExceeded
    );
    assert_eq!(
        refusal(&two, &limits).await.kind,
        RefusalKind::QuotaExceeded
    );

    // Rates too: a burst of 4 spent across both.
    let rated = [limit("team:b", rate(4, HOUR, 4), &[])];
    assert!(admitted(&one, &rated).await);
    assert!(admitted(&two, &rated).await);
    assert!(admitted(&one, &rated).await);
    assert!(admitted(&two, &rated).await);
    assert_eq!(refusal(&one, &rated).await.kind, RefusalKind::RateLimited);

    // Another key prefix counts apart.
    let other = relaxed(&server, "other");
    assert!(admitted(&other, &limits).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flushed_from_redis_is_sent_again() {
    let server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    let limits = [limit("team:a", rate(3, HOUR, 3), &[])];
    assert!(admitted(&limiter, &limits).await);
    assert_eq!(server.command(&["SCRIPT", "FLUSH"]), "OK");
    assert!(admitted(&limiter, &limits).await);
    assert!(admitted(&limiter, &limits).await);
    assert!(refusal(&limiter, &limits).await.kind == RefusalKind::RateLimited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_limits_need_no_redis() {
    let limiter = limiter("redis://127.0.0.1:1/", "t", Duration::from_millis(100));
    assert_eq!(limiter.check(&[]).await.unwrap(), None);
}

/// Checks and asserts they fail as unreachable within `bound`.
async fn unreachable_within(limiter: &RedisLimiter, limits: &[Arc<LimitDef>], bound: Duration) {
    let started = Instant::now();
    let result = limiter.check(limits).await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(StoreError::Unreachable(_))),
        "{result:?}"
    );
    assert!(took < bound, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_and_coming_back() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server.url(), "t", Duration::from_millis(250));
    let limits = [limit("team:a", rate(1000, HOUR, 1000), &[quota(1000, DAY)])];
    // Every pooled connection in use.
    for _ in 0..8 {
        assert!(admitted(&limiter, &limits).await);
    }

    server.stop();
    for _ in 0..8 {
        unreachable_within(&limiter, &limits, Duration::from_secs(2)).await;
    }

    server.restart();
    // The same limiter recovers by itself; a few checks may still fail while the pooled
    // connections are reopened.
    admitted_again(
        &limiter,
        &limits,
        "Redis was not used again after restarting",
    )
    .await;
    // And counts again.
    assert_eq!(server.command(&["EXISTS", "t:rate:team:a"]), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_while_idle_goes_unnoticed() {
    let mut server = RedisServer::start();
    let limiter = relaxed(&server, "t");
    let limits = [limit("team:a", rate(1000, HOUR, 1000), &[])];
    // Open every pooled connection.
    for _ in 0..8 {
        assert!(admitted(&limiter, &limits).await);
    }
    server.stop();
    server.restart();
    // Each pooled connection is found closed, and the call is sent again on a new one.
    for _ in 0..8 {
        assert!(admitted(&limiter, &limits).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_timed_out_and_used_again_when_it_thaws() {
    let server = RedisServer::start();
    let limiter = limiter(&server.url(), "t", Duration::from_millis(250));
    let limits = [limit("team:a", rate(1000, HOUR, 1000), &[])];
    for _ in 0..8 {
        assert!(admitted(&limiter, &limits).await);
    }
    // Connections stay open, but nothing answers.
    server.pause();
    for _ in 0..8 {
        unreachable_within(&limiter, &limits, Duration::from_secs(2)).await;
    }
    server.resume();
    admitted_again(
        &limiter,
        &limits,
        "Redis was not used again after it thawed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_fails_fast() {
    let port = free_port();
    let limiter = limiter(
        &format!("redis://127.0.0.1:{port}/"),
        "t",
        Duration::from_millis(250),
    );
    let limits = [limit("team:a", None, &[quota(1, DAY)])];
    for _ in 0..3 {
        unreachable_within(&limiter, &limits, Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_timed_out() {
    // Connections are accepted (by the kernel's backlog) but nothing is ever read or written.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let limiter = limiter(
        &format!("redis://127.0.0.1:{port}/"),
        "t",
        Duration::from_millis(250),
    );
    let limits = [limit("team:a", rate(10, HOUR, 10), &[])];
    for _ in 0..6 {
        unreachable_within(&limiter, &limits, Duration::from_secs(2)).await;
    }
    // Concurrent checks are bounded too.
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let limiter = limiter.clone();
            let limits = limits.to_vec();
            tokio::spawn(async move { limiter.check(&limits).await })
        })
        .collect();
    for task in tasks {
        assert!(matches!(
            task.await.unwrap(),
            Err(StoreError::Unreachable(_))
        ));
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(silent);
}
