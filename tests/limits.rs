//! Limits shared across Manifold processes through a real Redis.
//!
//! Every test starts a `redis-server` of its own and uses a key prefix of its own, so tests
//! running in parallel share nothing. The counts are checked three ways: what the host was
//! answered, what the fixture upstream says it ran (`call_count`), and what Redis holds.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use manifold_testkit::http::FixtureHttp;
use manifold_testkit::process::*;
use manifold_testkit::redis_server::{unique_prefix, RedisServer};

const DAY_SECS: u64 = 86_400;

/// `[limits]` for the Redis backend, followed by `rest` (teams and upstreams).
fn redis_config(
    redis: &RedisServer,
    prefix: &str,
    fail_open: bool,
    timeout_ms: u64,
    rest: &str,
) -> String {
    format!(
        "[limits]\n\
         backend = \"redis\"\n\
         redis_url = {url:?}\n\
         fail_open = {fail_open}\n\
         redis_timeout_ms = {timeout_ms}\n\
         key_prefix = {prefix:?}\n\n\
         {rest}",
        url = redis.url(),
    )
}

/// The arguments of the i-th of many calls: `a` = i, `b` = 1, and a text of its own.
fn numbered(i: usize) -> Value {
    json!({"a": i, "b": 1, "text": format!("t{i}")})
}

fn passed(answers: &[Value]) -> usize {
    answers.iter().filter(|a| a.get("result").is_some()).count()
}

/// Every answer is either a result or the refusal `code` with `kind` by `limit`; returns the
/// retryAfterMs of the refusals.
fn check_refusals(answers: &[Value], code: i64, kind: &str, limit: &str) -> Vec<u64> {
    answers
        .iter()
        .filter(|a| a.get("result").is_none())
        .map(|a| {
            assert_eq!(error_code(a), code, "{a}");
            let data = &a["error"]["data"];
            assert_eq!(data["kind"], kind, "{a}");
            assert_eq!(data["limit"], limit, "{a}");
            let retry = data["retryAfterMs"]
                .as_u64()
                .unwrap_or_else(|| panic!("no retryAfterMs: {a}"));
            assert!(retry > 0, "{a}");
            retry
        })
        .collect()
}

/// The day window index Redis's clock is in (Redis runs on this machine).
fn day_index() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / DAY_SECS
}

/// What Redis holds for the current day of the quota of limit `id` (`(nil)` if nothing).
fn quota_in_redis(redis: &RedisServer, prefix: &str, id: &str) -> String {
    let key = format!("{prefix}:quota:{id}:{DAY_SECS}:{}", day_index());
    redis.command(&["GET", &key])
}

/// The time to live, in ms, of the rate of limit `id` in Redis.
fn rate_pttl(redis: &RedisServer, prefix: &str, id: &str) -> i64 {
    let key = format!("{prefix}:rate:{id}");
    redis.command(&["PTTL", &key]).parse().unwrap()
}

/// `line` was logged, and a little later still only once; the log so far.
fn logged_once(m: &Manifold, line: &str) -> String {
    m.assert_logged(line);
    std::thread::sleep(Duration::from_millis(300));
    let stderr = m.stderr();
    assert_eq!(lines_with(&stderr, line), 1, "{stderr}");
    stderr
}

/// Two calls while Redis is up, answered and counted there.
fn two_counted_calls(m: &mut Manifold, redis: &RedisServer, prefix: &str, id: &str) {
    for i in 0..2 {
        let r = m.call("alpha__add", json!({"a": i, "b": 1}));
        assert_eq!(text_of(&r), sum_text(i), "{r}");
    }
    assert_eq!(quota_in_redis(redis, prefix, id), "2");
}

/// `manifold_limit_store_errors_total{decision}` as /metrics shows it.
fn store_errors(m: &Manifold, decision: &str) -> u64 {
    let body = m.scrape();
    let series = format!("manifold_limit_store_errors_total{{decision=\"{decision}\"}}");
    let value = manifold_testkit::metrics::series(&body, &series)
        .unwrap_or_else(|| panic!("no {series:?} in /metrics:\n{body}"));
    value as u64
}

/// A call made while the store is down: its answer, and how long it took.
fn timed_call(m: &mut Manifold, tool: &str, i: u64) -> (Value, Duration) {
    let started = Instant::now();
    let r = m.call(tool, json!({"a": i, "b": 1}));
    (r, started.elapsed())
}

/// The sum the fixture's `add` answers for `a` = i, `b` = 1.
fn sum_text(i: usize) -> String {
    (i + 1).to_string()
}

#[test]
fn a_quota_and_a_rate_admit_exactly_their_count_of_concurrent_calls() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("limits-exact");
    let config = redis_config(
        &redis,
        &prefix,
        false,
        // Generous: 100 checks at once on a loaded machine must not time out (a timed-out
        // check is refused with -32016, which would spoil the count).
        5000,
        &format!(
            "[teams.red]\n\
             [teams.red.tool_limits.alpha__add]\n\
             quota = \"40/day\"\n\
             [teams.red.tool_limits.alpha__echo]\n\
             rate = \"40/hour\"\n\
             burst = 40\n\n\
             {}",
            named_fixture("alpha")
        ),
    );
    let mut m = Manifold::ready_args(&config, &["--team", "red"]);

    // 100 calls at once against a quota of 40.
    let answers = m.calls_at_once("alpha__add", 100, numbered);
    assert_eq!(passed(&answers), 40, "{answers:?}");
    for (i, a) in answers.iter().enumerate() {
        if a.get("result").is_some() {
            assert_eq!(text_of(a), sum_text(i), "{a}");
        }
    }
    let retries = check_refusals(
        &answers,
        -32015,
        "quota_exceeded",
        "team:red:tool:alpha__add",
    );
    assert_eq!(retries.len(), 60);
    assert!(retries.iter().all(|&r| r <= DAY_SECS * 1000), "{retries:?}");
    assert_eq!(m.call_count("alpha", "tool:add"), 40);
    assert_eq!(
        quota_in_redis(&redis, &prefix, "team:red:tool:alpha__add"),
        "40"
    );

    // 100 calls at once against a rate of 40 an hour with a burst of 40: the 41st would be
    // admitted 90 s after the first.
    let started = Instant::now();
    let answers = m.calls_at_once("alpha__echo", 100, numbered);
    let elapsed = started.elapsed().as_millis() as u64;
    assert_eq!(passed(&answers), 40, "{answers:?}");
    let retries = check_refusals(
        &answers,
        -32014,
        "rate_limited",
        "team:red:tool:alpha__echo",
    );
    assert_eq!(retries.len(), 60);
    assert!(
        retries
            .iter()
            .all(|&r| r <= 90_000 && r + elapsed + 1000 >= 90_000),
        "{retries:?} ({elapsed} ms)"
    );
    assert_eq!(m.call_count("alpha", "tool:echo"), 40);
    // The stored arrival time is 40 intervals (an hour) past the first call: 41 admitted
    // calls would have pushed it 90 s further.
    let pttl = rate_pttl(&redis, &prefix, "team:red:tool:alpha__echo");
    let elapsed = started.elapsed().as_millis() as i64;
    assert!(
        pttl <= 3_600_001 && pttl >= 3_600_000 - elapsed - 1000,
        "PTTL {pttl} ({elapsed} ms)"
    );
    // The quota was not touched by the calls of the other tool.
    assert_eq!(
        quota_in_redis(&redis, &prefix, "team:red:tool:alpha__add"),
        "40"
    );
}

#[test]
fn a_team_rate_admits_exactly_its_count_of_concurrent_calls() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("limits-team-rate");
    // One fixture over HTTP, reached by red's Manifold and by one without a team, which is
    // not counted against red's limits and so can ask the fixture what it ran.
    let fixture = FixtureHttp::start(0, &["--name", "beta"]);
    let config = redis_config(
        &redis,
        &prefix,
        false,
        5000,
        &format!(
            "[teams.red]\n\
             [teams.red.limits]\n\
             rate = \"40/hour\"\n\
             burst = 40\n\n\
             [upstreams.beta]\n\
             url = {:?}\n\
             transport = \"streamable-http\"\n",
            fixture.url("/mcp")
        ),
    );
    let mut red = Manifold::ready_args(&config, &["--team", "red"]);
    let mut observer = Manifold::ready(&config);

    let started = Instant::now();
    let answers = red.calls_at_once("beta__add", 100, numbered);
    assert_eq!(passed(&answers), 40, "{answers:?}");
    let retries = check_refusals(&answers, -32014, "rate_limited", "team:red");
    assert_eq!(retries.len(), 60);
    assert!(retries.iter().all(|&r| r <= 90_000), "{retries:?}");
    // The team's rate covers every tool it calls.
    let other = red.call("beta__call_count", json!({"what": "tool:add"}));
    assert_eq!(error_code(&other), -32014, "{other}");
    assert_eq!(other["error"]["data"]["limit"], "team:red", "{other}");
    // Only the admitted calls reached the upstream.
    assert_eq!(observer.call_count("beta", "tool:add"), 40);
    let pttl = rate_pttl(&redis, &prefix, "team:red");
    let elapsed = started.elapsed().as_millis() as i64;
    assert!(
        pttl <= 3_600_001 && pttl >= 3_600_000 - elapsed - 1000,
        "PTTL {pttl} ({elapsed} ms)"
    );
}

#[test]
fn three_processes_share_one_quota_exactly() {
    const PROCESSES: usize = 3;
    const CALLS: usize = 200;
    const BATCH: usize = 40;
    const QUOTA: usize = 300;

    let redis = RedisServer::start();
    let prefix = unique_prefix("limits-shared");
    let config = redis_config(
        &redis,
        &prefix,
        false,
        5000,
        &format!(
            "[teams.red]\n\
             [teams.red.tool_limits.alpha__add]\n\
             quota = \"{QUOTA}/day\"\n\n\
             {}",
            named_fixture("alpha")
        ),
    );
    // Each process has its own fixture: what one admits only its own fixture runs.
    let processes: Vec<Manifold> = (0..PROCESSES)
        .map(|_| Manifold::ready_args(&config, &["--team", "red"]))
        .collect();
    let start = Arc::new(Barrier::new(PROCESSES));
    let threads: Vec<_> = processes
        .into_iter()
        .map(|mut m| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                let mut answers = Vec::with_capacity(CALLS);
                for _ in 0..CALLS / BATCH {
                    answers.extend(m.calls_at_once("alpha__add", BATCH, numbered));
                }
                (m, answers)
            })
        })
        .collect();
    let mut admitted_by = Vec::new();
    let mut ran_by = Vec::new();
    for thread in threads {
        let (mut m, answers) = thread.join().unwrap();
        assert_eq!(answers.len(), CALLS);
        check_refusals(
            &answers,
            -32015,
            "quota_exceeded",
            "team:red:tool:alpha__add",
        );
        admitted_by.push(passed(&answers));
        ran_by.push(m.call_count("alpha", "tool:add") as usize);
    }
    let admitted: usize = admitted_by.iter().sum();
    let ran: usize = ran_by.iter().sum();
    eprintln!(
        "{PROCESSES} processes x {CALLS} calls against a quota of {QUOTA}: {admitted} admitted \
         (by process: {admitted_by:?}); the fixtures ran {ran} (by process: {ran_by:?})"
    );
    assert!((297..=303).contains(&admitted), "{admitted} admitted");
    assert_eq!(admitted, QUOTA, "admitted by process: {admitted_by:?}");
    assert_eq!(ran, admitted, "ran by process: {ran_by:?}");
    assert_eq!(ran_by, admitted_by);
    assert_eq!(
        quota_in_redis(&redis, &prefix, "team:red:tool:alpha__add"),
        QUOTA.to_string()
    );
}

const UNREACHABLE: &str = "the limit store is unreachable";
const REACHABLE_AGAIN: &str = "the limit store is reachable again";

/// One Manifold as team red with a quota of `quota` a day on alpha__add, the store reached
/// with a 250 ms timeout, and an admin listener for /metrics.
fn outage_setup(
    redis: &RedisServer,
    test: &str,
    fail_open: bool,
    quota: u64,
) -> (Manifold, String) {
    let prefix = unique_prefix(&format!("limits-{test}"));
    let config = redis_config(
        redis,
        &prefix,
        fail_open,
        250,
        &format!(
            "[teams.red]\n\
             [teams.red.tool_limits.alpha__add]\n\
             quota = \"{quota}/day\"\n\n\
             {}",
            named_fixture("alpha")
        ),
    );
    let m = Manifold::ready_args(&config, &["--team", "red", "--admin", "127.0.0.1:0"]);
    (m, prefix)
}

#[test]
fn fail_closed_refuses_calls_while_redis_is_down_and_counts_again_once_it_is_back() {
    let mut redis = RedisServer::start();
    let (mut m, prefix) = outage_setup(&redis, "closed", false, 5);
    let id = "team:red:tool:alpha__add";

    // Counted in Redis while it is up.
    two_counted_calls(&mut m, &redis, &prefix, id);

    redis.stop();
    const DOWN_CALLS: u64 = 6;
    for i in 0..DOWN_CALLS {
        let (r, took) = timed_call(&mut m, "alpha__add", i);
        assert_eq!(error_code(&r), -32016, "{r}");
        let retry = r["error"]["data"]["retryAfterMs"]
            .as_u64()
            .unwrap_or_else(|| panic!("no retryAfterMs: {r}"));
        assert!(retry > 0, "{r}");
        assert!(
            took < Duration::from_secs(2),
            "answered after {took:?}: {r}"
        );
    }
    // None of them reached the upstream (call_count has no limit: it needs no store).
    assert_eq!(m.call_count("alpha", "tool:add"), 2);
    // One outage, logged once, however many calls it refused.
    let stderr = logged_once(&m, UNREACHABLE);
    assert!(
        stderr.contains("calls are refused until it is back"),
        "{stderr}"
    );
    assert!(!stderr.contains(REACHABLE_AGAIN), "{stderr}");
    assert_eq!(store_errors(&m, "refused"), DOWN_CALLS);
    assert_eq!(store_errors(&m, "allowed"), 0);

    // Back, empty (nothing is persisted): the same Manifold counts again from zero, and the
    // quota is enforced again.
    redis.restart();
    let answers = m.calls_at_once("alpha__add", 8, numbered);
    assert_eq!(passed(&answers), 5, "{answers:?}");
    check_refusals(&answers, -32015, "quota_exceeded", id);
    assert_eq!(quota_in_redis(&redis, &prefix, id), "5");
    assert_eq!(m.call_count("alpha", "tool:add"), 2 + 5);
    let stderr = logged_once(&m, REACHABLE_AGAIN);
    assert_eq!(lines_with(&stderr, UNREACHABLE), 1, "{stderr}");
    assert_eq!(store_errors(&m, "refused"), DOWN_CALLS);
}

#[test]
fn fail_open_passes_calls_uncounted_while_redis_is_down_and_counts_again_once_it_is_back() {
    let mut redis = RedisServer::start();
    let (mut m, prefix) = outage_setup(&redis, "open", true, 3);
    let id = "team:red:tool:alpha__add";

    two_counted_calls(&mut m, &redis, &prefix, id);

    // Down: more calls than the quota allows all pass, and reach the upstream.
    redis.stop();
    const DOWN_CALLS: u64 = 6;
    for i in 0..DOWN_CALLS {
        let (r, took) = timed_call(&mut m, "alpha__add", i);
        assert_eq!(text_of(&r), sum_text(i as usize), "{r}");
        assert!(
            took < Duration::from_secs(2),
            "answered after {took:?}: {r}"
        );
    }
    assert_eq!(m.call_count("alpha", "tool:add"), 2 + DOWN_CALLS);
    let stderr = logged_once(&m, UNREACHABLE);
    assert!(
        stderr.contains("calls are allowed without counting"),
        "{stderr}"
    );
    assert_eq!(store_errors(&m, "allowed"), DOWN_CALLS);
    assert_eq!(store_errors(&m, "refused"), 0);

    // Back, empty: counting resumes from zero and the quota holds again.
    redis.restart();
    let answers = m.calls_at_once("alpha__add", 6, numbered);
    assert_eq!(passed(&answers), 3, "{answers:?}");
    check_refusals(&answers, -32015, "quota_exceeded", id);
    assert_eq!(quota_in_redis(&redis, &prefix, id), "3");
    assert_eq!(m.call_count("alpha", "tool:add"), 2 + DOWN_CALLS + 3);
    logged_once(&m, REACHABLE_AGAIN);
    assert_eq!(store_errors(&m, "allowed"), DOWN_CALLS);
}

#[test]
fn a_frozen_redis_is_answered_within_the_timeout_and_counting_resumes_when_it_thaws() {
    let redis = RedisServer::start();
    let (mut m, prefix) = outage_setup(&redis, "frozen", false, 1000);
    let id = "team:red:tool:alpha__add";
    let r = m.call("alpha__add", json!({"a": 0, "b": 1}));
    assert_eq!(text_of(&r), "1", "{r}");

    // Connections stay open but nothing is answered: each check gives up after 250 ms.
    redis.pause();
    for i in 0..3 {
        let (r, took) = timed_call(&mut m, "alpha__add", i);
        assert_eq!(error_code(&r), -32016, "{r}");
        assert!(
            r["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 0,
            "{r}"
        );
        assert!(
            took < Duration::from_secs(2),
            "answered after {took:?}: {r}"
        );
    }
    let started = Instant::now();
    let answers = m.calls_at_once("alpha__add", 20, numbered);
    let took = started.elapsed();
    assert!(
        answers.iter().all(|a| error_code(a) == -32016),
        "{answers:?}"
    );
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_eq!(m.call_count("alpha", "tool:add"), 1);
    m.assert_logged(UNREACHABLE);
    assert_eq!(store_errors(&m, "refused"), 23);

    redis.resume();
    let r = m.call("alpha__add", json!({"a": 1, "b": 1}));
    assert_eq!(text_of(&r), "2", "{r}");
    assert_eq!(m.call_count("alpha", "tool:add"), 2);
    m.assert_logged(REACHABLE_AGAIN);
    // Counted again: one more call adds exactly one.
    let before: u64 = quota_in_redis(&redis, &prefix, id).parse().unwrap();
    let r = m.call("alpha__add", json!({"a": 2, "b": 1}));
    assert_eq!(text_of(&r), "3", "{r}");
    assert_eq!(
        quota_in_redis(&redis, &prefix, id),
        (before + 1).to_string()
    );
    std::thread::sleep(Duration::from_millis(300));
    let stderr = m.stderr();
    assert_eq!(lines_with(&stderr, UNREACHABLE), 1, "{stderr}");
    assert_eq!(lines_with(&stderr, REACHABLE_AGAIN), 1, "{stderr}");
}

/// A check that timed out after it was written to a frozen Redis may still be counted when
/// Redis thaws: Manifold errs towards counting a call it refused, never towards letting a call
/// through uncounted. None of the refused calls reaches the upstream, and the quota holds.
#[test]
fn calls_refused_while_redis_is_frozen_never_reach_the_upstream_and_the_quota_holds() {
    let redis = RedisServer::start();
    let (mut m, prefix) = outage_setup(&redis, "thaw", false, 5);
    let id = "team:red:tool:alpha__add";
    let r = m.call("alpha__add", json!({"a": 0, "b": 1}));
    assert_eq!(text_of(&r), "1", "{r}");

    redis.pause();
    let answers = m.calls_at_once("alpha__add", 10, numbered);
    assert!(
        answers.iter().all(|a| error_code(a) == -32016),
        "{answers:?}"
    );
    redis.resume();
    // Give Redis time to run whatever it had been sent.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(m.call_count("alpha", "tool:add"), 1);
    let counted: u64 = quota_in_redis(&redis, &prefix, id).parse().unwrap();
    assert!((1..=5).contains(&counted), "counted {counted}");
    // However many refused checks were counted, the quota is never exceeded.
    let answers = m.calls_at_once("alpha__add", 10, numbered);
    let admitted = passed(&answers) as u64;
    assert_eq!(admitted, 5 - counted, "{answers:?}");
    assert_eq!(m.call_count("alpha", "tool:add"), 1 + admitted);
}
