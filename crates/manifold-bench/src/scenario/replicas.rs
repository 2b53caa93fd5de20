//! Manifold as replicas behind HAProxy, as `deploy/haproxy/haproxy.cfg` ships them: what the
//! load balancer's hop, more replicas and the Redis session store cost a session-era host.
//! One run starts a `redis-server`, one fixture upstream over Streamable HTTP, seven Manifold
//! replicas in three clusters (one replica with the in-memory session store, three with it,
//! three with `[sessions] store = "redis"`) and four HAProxies in front of them, and measures,
//! in interleaved rounds, 16 session-era hosts on keep-alive connections making the fixture's
//! `echo` call from a shared pool (as `http-throughput`), then one of them alone:
//!
//! - the fixture called directly (no Manifold), and one replica called directly (no HAProxy):
//!   the references;
//! - (a) HAProxy in front of that one replica (the shipped config less replicas 2 and 3);
//! - (b) HAProxy in front of three replicas with the in-memory store (the shipped config: its
//!   stick table keeps each session on the replica that answered its `initialize`);
//! - (c) the same in front of three replicas with the Redis store;
//! - (d) the same replicas behind HAProxy without its `stick` lines: every request goes to the
//!   next replica in turn, so each replica serves every session, from the copy it read from
//!   Redis at the session's first request there.
//!
//! Then, with no load balancer, what a replica's first request of a session it does not hold
//! costs (adoption: it reads the session's record from Redis) against a request of a session
//! it holds, each on a new connection, and against the next request on the adopting replica.
//!
//! Every answer is counted (an error answer makes the run invalid), each case's replicas must
//! have counted every call made in its rounds (their own `/metrics`), and Redis's command
//! counts say what the store did per call and per adoption. The CPU time of every process
//! involved is read per round, so that each case's cost per call is split between the load
//! generator, HAProxy, Manifold, the fixture and Redis.
//!
//! HAProxy is `$MANIFOLD_HAPROXY`, else `haproxy` on `PATH`, else the one that `bash
//! tests/replicas/install.sh` unpacks under `tests/.cache/haproxy`; redis-server is found as
//! the Redis tests find it. Without either the scenario fails and says how to get it. Every
//! process is ended by its own pid when the scenario ends, whatever the outcome.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

use super::http_throughput::{rates_ratio, Kind, Side};
use crate::mcp::RequestLine;
use crate::procstat::Usage;
use crate::setup::{Plan, Setup};
use crate::stats::{self, round2, Across, Summary};
use crate::target::{HttpReader, HttpServer};
use manifold_testkit::redis_server::RedisServer;

/// The HAProxy configuration the project ships, as this build was made from it.
const SHIPPED: &str = include_str!("../../../../deploy/haproxy/haproxy.cfg");

/// The key prefix of the Redis session store.
const PREFIX: &str = "manifold-load-replicas";

/// Replicas in the clusters of three (the shipped config names three).
const THREE: usize = 3;

/// How long HAProxy needs after it first forwards a request before every replica has passed
/// its first health checks (`rise 2`, `inter 500ms`), with a margin.
const CHECKS_SETTLE: Duration = Duration::from_millis(1200);

/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(20);

/// The cases, in the order of the JSON document and the table.
pub(crate) const CASES: [(&str, &str); 6] = [
    ("fixture", "fixture direct (no Manifold)"),
    ("direct", "1 replica direct (no HAProxy)"),
    ("lb1_memory", "(a) HAProxy, 1 replica, memory"),
    ("lb3_memory", "(b) HAProxy, 3 replicas, memory"),
    ("lb3_redis", "(c) HAProxy, 3 replicas, Redis"),
    ("lb3_redis_rr", "(d) as (c), no affinity"),
];

/// The comparisons reported: (key, base case, case, what it shows).
pub(crate) const PAIRS: [(&str, usize, usize, &str); 5] = [
    (
        "manifold_vs_fixture",
        0,
        1,
        "Manifold's hop: 1 replica over the fixture",
    ),
    ("haproxy_vs_direct", 1, 2, "HAProxy's hop: (a) over direct"),
    ("three_vs_one", 2, 3, "3 replicas over 1: (b) over (a)"),
    ("redis_vs_memory", 3, 4, "Redis store: (c) over (b)"),
    ("round_robin_vs_affinity", 4, 5, "no affinity: (d) over (c)"),
];

/// The adoption measurement's requests, in the order of the JSON document and the table.
pub(crate) const ADOPTION: [(&str, &str); 6] = [
    (
        "initialize_memory",
        "initialize, memory store, new connection",
    ),
    (
        "initialize_redis",
        "initialize, Redis store (record written), new connection",
    ),
    ("held", "a replica that holds the session, new connection"),
    (
        "adopting",
        "a replica that does not (adoption), new connection",
    ),
    ("adopted", "the next request there, same connection"),
    ("redis_ping", "for scale: PING to Redis from the load tool"),
];

/// The processes a case's cost per call is split between.
const ROLES: [&str; 4] = ["haproxy", "manifold", "fixture", "redis"];

pub fn replicas(setup: &Setup, plan: &Plan) -> Result<Value> {
    let haproxy = Haproxy::find().map_err(|e| anyhow!(e))?;
    // Started first, so that it is dropped last: after every replica that talks to it.
    let redis = RedisServer::try_start().map_err(|e| anyhow!(e))?;
    let redis_pid = redis
        .pid()
        .ok_or_else(|| anyhow!("redis-server is not running"))?;
    let fixture = HttpServer::launch(&setup.fixture_http("replicas-fixture"), setup.limits)?;
    let url = format!("http://{}{}", fixture.addr(), fixture.path());
    let store = format!(
        "[sessions]\nstore = \"redis\"\nredis_url = \"{}\"\nkey_prefix = \"{PREFIX}\"\n",
        redis.url()
    );
    let one = cluster(setup, "replicas-m1", 1, &url, "")?;
    let memory = cluster(setup, "replicas-m3", THREE, &url, "")?;
    let shared = cluster(setup, "replicas-r3", THREE, &url, &store)?;
    let lb = |label: &str, replicas: &[Arc<HttpServer>], affinity: bool| {
        haproxy.start(setup, label, replicas, affinity)
    };
    let lbs = [
        lb("replicas-lb1-memory", &one, true)?,
        lb("replicas-lb3-memory", &memory, true)?,
        lb("replicas-lb3-redis", &shared, true)?,
        lb("replicas-lb3-redis-rr", &shared, false)?,
    ];

    let (direct_line, line) = (RequestLine::echo("echo"), RequestLine::echo("alpha__echo"));
    let fixture_pid = [("fixture", fixture.pid())];
    let mut cases = vec![
        Case::new(0, &fixture, &direct_line, &[], &fixture_pid, plan)?,
        Case::new(1, &one[0], &line, &one, &fixture_pid, plan)?,
    ];
    let clusters = [(&one, None), (&memory, None), (&shared, Some(redis_pid))];
    let picks = [0, 1, 2, 2];
    for (i, (lb, pick)) in lbs.iter().zip(picks).enumerate() {
        let (replicas, redis) = clusters[pick];
        let mut pids = vec![("haproxy", lb.pid()), ("fixture", fixture.pid())];
        pids.extend(redis.map(|pid| ("redis", pid)));
        cases.push(Case::new(i + 2, lb, &line, replicas, &pids, plan)?);
    }
    for case in &mut cases {
        // A tenth of a round: connections, sessions (and in (d) every replica's copy of
        // every session) and upstream routes are hot before the first timed round.
        let warm = case
            .side
            .round(plan.replica_calls / 10 + 1, plan.round_limit);
        warm.map_err(|e| case.explained(e))?;
    }
    let n = cases.len();
    for round in 0..plan.rounds {
        for k in 0..n {
            let case = &mut cases[(round + k) % n];
            let done = case.round(plan, &redis);
            done.map_err(|e| case.explained(e))?;
        }
    }
    let adoption = adoption(&shared, &memory, &line, plan, &redis)?;

    let mut v = Map::new();
    let mut invalid = Vec::new();
    for (case, (key, _)) in cases.iter().zip(CASES) {
        v.insert(key.into(), case.to_json());
        invalid.extend(case.side.seen.invalid(key));
        invalid.extend(case.mismatch.iter().map(|m| format!("{key}: {m}")));
    }
    let rr = &cases[5];
    if rr.served.len() == THREE && rr.served.contains(&0) {
        invalid.push(format!(
            "lb3_redis_rr: a replica served no call without affinity: {:?}",
            rr.served
        ));
    }
    for &(key, base, case, _) in &PAIRS {
        v.insert(key.into(), compare(&cases[base], &cases[case]));
    }
    let errors: usize = cases.iter().map(|c| c.side.seen.errors).sum();
    let calls: usize = cases.iter().map(|c| c.side.seen.calls).sum();
    drop(cases);
    drop(lbs);
    v.insert("adoption".into(), adoption);
    v.insert(
        "haproxy".into(),
        json!({ "binary": haproxy.binary, "version": haproxy.version() }),
    );
    v.insert("redis_server".into(), json!({ "binary": redis.binary() }));
    v.insert("calls".into(), json!(calls));
    v.insert("errors".into(), json!(errors));
    v.insert("valid".into(), json!(invalid.is_empty()));
    v.insert("invalid_because".into(), json!(invalid));
    v.insert("rounds".into(), json!(plan.rounds));
    v.insert("connections".into(), json!(plan.connections));
    v.insert("calls_per_round".into(), json!(plan.replica_calls));
    v.insert(
        "single_calls_per_round".into(),
        json!(plan.replica_single_calls),
    );
    v.insert("sessions_store".into(), json!(store));
    v.insert(
        "unit".into(),
        json!("calls/s (one request and its answer per call); latency in us, end to end"),
    );
    Ok(Value::Object(v))
}

/// One case: its hosts, where their calls go, and what its rounds gave.
struct Case {
    index: usize,
    side: Side,
    /// What its hosts reach: HAProxy, a replica, or the fixture.
    server: Arc<HttpServer>,
    line: RequestLine,
    /// The replicas behind it (their `/metrics` count its calls); none for the fixture.
    replicas: Vec<Arc<HttpServer>>,
    /// The processes its calls cost, besides the load generator, by role.
    pids: Vec<(&'static str, u32)>,
    rates: Vec<f64>,
    load: Vec<Summary>,
    single: Vec<Summary>,
    /// Calls in the loaded part of the rounds (the CPU figures are per such call).
    calls: u64,
    /// Every call made in the rounds, on one connection too.
    made: u64,
    client_cpu: Duration,
    /// CPU seconds per role in the loaded part of the rounds.
    cpu: BTreeMap<&'static str, f64>,
    /// Redis commands run during its rounds, by name.
    redis_commands: BTreeMap<String, u64>,
    /// Calls each replica counted in the rounds.
    served: Vec<u64>,
    mismatch: Option<String>,
}

impl Case {
    fn new(
        index: usize,
        server: &Arc<HttpServer>,
        line: &RequestLine,
        replicas: &[Arc<HttpServer>],
        pids: &[(&'static str, u32)],
        plan: &Plan,
    ) -> Result<Self> {
        let name = CASES[index].0.to_owned();
        let side = Side::on(
            name,
            Arc::clone(server),
            plan,
            std::slice::from_ref(line),
            Kind::Manifold,
        )?;
        let mut pids = pids.to_vec();
        pids.extend(replicas.iter().map(|r| ("manifold", r.pid())));
        Ok(Self {
            index,
            side,
            server: Arc::clone(server),
            line: line.clone(),
            replicas: replicas.to_vec(),
            pids,
            rates: Vec::new(),
            load: Vec::new(),
            single: Vec::new(),
            calls: 0,
            made: 0,
            client_cpu: Duration::ZERO,
            cpu: BTreeMap::new(),
            redis_commands: BTreeMap::new(),
            served: vec![0; replicas.len()],
            mismatch: None,
        })
    }

    /// `e`, with the end of the stderr of what the hosts reach (HAProxy logs why it had no
    /// replica to send a request to).
    fn explained(&self, e: anyhow::Error) -> anyhow::Error {
        let tail = self.server.failed("was what its hosts reached");
        anyhow!("{e:#}\n{tail:#}")
    }

    fn uses_redis(&self) -> bool {
        self.pids.iter().any(|(role, _)| *role == "redis")
    }

    /// The loaded part (every connection at once), then one connection alone. The CPU of
    /// every process involved is read around the loaded part, the replicas' call counts and
    /// Redis's command counts around both.
    fn round(&mut self, plan: &Plan, redis: &RedisServer) -> Result<()> {
        let served_before = served(&self.replicas)?;
        let commands_before = if self.uses_redis() {
            Some(super::policy::command_calls(redis)?)
        } else {
            None
        };
        let made_before = self.side.seen.calls;
        let before = usages(&self.pids)?;
        let done = self.side.round(plan.replica_calls, plan.round_limit)?;
        let after = usages(&self.pids)?;
        for ((role, _), (b, a)) in self.pids.iter().zip(before.iter().zip(&after)) {
            *self.cpu.entry(role).or_default() += cpu_s(*a) - cpu_s(*b);
        }
        self.rates.push(done.calls as f64 / done.secs.max(1e-9));
        self.load.push(done.latency);
        self.calls += done.calls;
        self.client_cpu += done.client_cpu;
        let mut samples = self.side.sessions[0].timed_calls(
            &self.line,
            plan.replica_single_calls,
            plan.round_limit,
        )?;
        let made = self.side.seen.calls - made_before + samples.len();
        self.made += made as u64;
        self.single.push(Summary::of(&mut samples));
        if let Some(before) = commands_before {
            let after = super::policy::command_calls(redis)?;
            for (name, n) in after {
                let was = before.get(&name).copied().unwrap_or(0);
                // The scenario's own INFO, which reads these counts, is not the store's.
                if n > was && name != "info" {
                    *self.redis_commands.entry(name).or_default() += n - was;
                }
            }
        }
        if !self.replicas.is_empty() {
            let now = served_at_least(&self.replicas, &served_before, made as u64)?;
            let counted: u64 = now.iter().zip(&served_before).map(|(a, b)| a - b).sum();
            for (slot, (a, b)) in self.served.iter_mut().zip(now.iter().zip(&served_before)) {
                *slot += a - b;
            }
            if counted != made as u64 && self.mismatch.is_none() {
                self.mismatch = Some(format!(
                    "the replicas counted {counted} tools/call in a round of {made} calls"
                ));
            }
        }
        Ok(())
    }

    fn to_json(&self) -> Value {
        let per_call = |s: f64| {
            // /proc counts in clock ticks: too few make the figure rounding error.
            let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
            (s * hz >= 20.0).then(|| stats::round(s * 1e6 / self.calls.max(1) as f64))
        };
        let mut cpu = Map::new();
        cpu.insert(
            "client".into(),
            json!(round2(
                self.client_cpu.as_secs_f64() * 1e6 / self.calls.max(1) as f64
            )),
        );
        for role in ROLES {
            cpu.insert(
                role.into(),
                json!(self.cpu.get(role).and_then(|s| per_call(*s))),
            );
        }
        let redis_per_call = (!self.redis_commands.is_empty()).then(|| {
            let total: u64 = self.redis_commands.values().sum();
            json!({
                "commands_per_call": round2(total as f64 / self.made.max(1) as f64),
                "commands": self.redis_commands,
            })
        });
        let (replicas, store, affinity, via) = match self.index {
            0 => (0, None, None, "direct"),
            1 => (1, Some("memory"), None, "direct"),
            2 => (1, Some("memory"), Some(true), "haproxy"),
            3 => (THREE, Some("memory"), Some(true), "haproxy"),
            4 => (THREE, Some("redis"), Some(true), "haproxy"),
            _ => (THREE, Some("redis"), Some(false), "haproxy"),
        };
        json!({
            "what": CASES[self.index].1,
            "replicas": replicas,
            "store": store,
            "affinity": affinity,
            "via": via,
            "calls_per_s": Across::of(self.rates.iter().copied()).to_json(),
            "per_round": self.rates.iter().map(|x| x.round()).collect::<Vec<_>>(),
            "latency": stats::medians(&self.load),
            "one_connection": stats::medians(&self.single),
            "calls": self.side.seen.calls,
            "errors": self.side.seen.errors,
            "first_error": self.side.seen.first_error,
            "cpu_us_per_call": cpu,
            "served_per_replica": self.served,
            "redis": redis_per_call,
            "replicas_marked_down": (self.index >= 2).then(|| marked_down(self.server.log())),
        })
    }
}

/// How many times HAProxy marked a replica down (a health check failed), by its own log: a
/// replica out of the rotation shifts its share of the calls to the others.
fn marked_down(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("[WARNING]") && l.contains(" is DOWN,"))
        .count()
}

/// `case` over `base`: calls/s (ratio of the medians, spread of the per-round ratios), the
/// latency under load and on one connection (added, with the per-round spread).
fn compare(base: &Case, case: &Case) -> Value {
    json!({
        "rate_ratio": rates_ratio(&case.rates, &base.rates),
        "latency": stats::compare(&base.load, &case.load),
        "one_connection": stats::compare(&base.single, &case.single),
    })
}

/// `count` replicas, each on a free port of 127.0.0.1, started one after the other and then
/// waited for until each answers `/readyz` with 200 (its upstream is up).
fn cluster(
    setup: &Setup,
    label: &str,
    count: usize,
    url: &str,
    tables: &str,
) -> Result<Vec<Arc<HttpServer>>> {
    let mut replicas = Vec::with_capacity(count);
    for i in 1..=count {
        let spec = setup.replica(&format!("{label}-{i}"), url, tables)?;
        replicas.push(HttpServer::launch(&spec, setup.limits)?);
    }
    for replica in &replicas {
        let stall = replica.limits().stall;
        until_ok(replica.addr(), "/readyz", stall)
            .map_err(|e| replica.failed(&format!("was not ready: {e:#}")))?;
    }
    Ok(replicas)
}

/// Polls `GET path` on `addr` until it answers 200, for at most `limit`.
fn until_ok(addr: SocketAddr, path: &str, limit: Duration) -> Result<()> {
    let began = Instant::now();
    let polls = limit.as_millis() / POLL.as_millis() + 1;
    let mut last = String::from("no answer");
    for _ in 0..polls {
        match get(addr, path) {
            Ok((200, _)) => return Ok(()),
            Ok((status, _)) => last = format!("HTTP {status}"),
            Err(e) => last = format!("{e:#}"),
        }
        if began.elapsed() >= limit {
            break;
        }
        std::thread::sleep(POLL);
    }
    bail!("GET {path} on {addr}: {last} after {limit:?}")
}

/// One `GET`, on a connection of its own: the status and the body.
pub(crate) fn get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>)> {
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = Vec::new();
    let head = HttpReader::new(stream).read(&mut body)?;
    Ok((head.status, body))
}

/// The `tools/call` requests each replica has answered so far, by its own `/metrics`.
fn served(replicas: &[Arc<HttpServer>]) -> Result<Vec<u64>> {
    replicas
        .iter()
        .map(|r| {
            let (status, body) = get(r.addr(), "/metrics")?;
            if status != 200 {
                bail!("GET /metrics on {}: HTTP {status}", r.addr());
            }
            Ok(tools_calls(&String::from_utf8_lossy(&body)))
        })
        .collect()
}

/// `served`, read again for a moment while the replicas have counted fewer than `made`
/// calls since `before`: a replica records a request's duration as it finishes, which can
/// be just after the host read its answer.
fn served_at_least(replicas: &[Arc<HttpServer>], before: &[u64], made: u64) -> Result<Vec<u64>> {
    let mut now = served(replicas)?;
    for _ in 0..50 {
        let counted: u64 = now.iter().zip(before).map(|(a, b)| a - b).sum();
        if counted >= made {
            break;
        }
        std::thread::sleep(POLL);
        now = served(replicas)?;
    }
    Ok(now)
}

/// The sum of the `tools/call` counts of `mcp_server_operation_duration_seconds` in a
/// Prometheus exposition.
fn tools_calls(exposition: &str) -> u64 {
    exposition
        .lines()
        .filter(|l| l.starts_with("mcp_server_operation_duration_seconds_count{"))
        .filter(|l| l.contains("\"tools/call\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .map(|n| n as u64)
        .sum()
}

fn usages(pids: &[(&str, u32)]) -> Result<Vec<Usage>> {
    pids.iter().map(|(_, pid)| Usage::of(*pid)).collect()
}

fn cpu_s(u: Usage) -> f64 {
    u.user_s + u.sys_s
}

/// With no load balancer, on the replicas that share sessions through Redis: `rounds` rounds
/// of `adopt_sessions` sessions, each opened on one replica (`initialize` and one call), then
/// one call on a new connection to that replica (it holds the session), one on a new
/// connection to the next replica (which reads the session from Redis: adoption), and one more
/// there on the same connection (it now holds a copy). Beside each, a session opened on a
/// replica with the in-memory store, for what writing the record adds to `initialize`. One
/// request in flight; the times of each kind of request per round, and Redis's commands per
/// session over the whole run.
fn adoption(
    replicas: &[Arc<HttpServer>],
    memory: &[Arc<HttpServer>],
    line: &RequestLine,
    plan: &Plan,
    redis: &RedisServer,
) -> Result<Value> {
    let limit = plan.round_limit;
    let mut rounds: [Vec<Summary>; 6] = Default::default();
    let mut ping = Ping::connect(redis.port())?;
    let before = super::policy::command_calls(redis)?;
    let mut sessions = 0;
    for round in 0..plan.rounds {
        let mut samples: [Vec<u64>; 6] = Default::default();
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        for k in 0..plan.adopt_sessions {
            let n = replicas.len();
            let (home, other) = (&replicas[k % n], &replicas[(k + 1) % n]);
            let label = format!("adoption-{round}-{k}");
            let alone = super::http_session(&memory[k % memory.len()], &label)?;
            samples[0].push(nanos(alone.startup));
            let mut session = super::http_session(home, &label)?;
            samples[1].push(nanos(session.startup));
            let first = session.result(line)?;
            super::expect_text(&label, &first, crate::mcp::ECHO_TEXT.len())?;
            session.move_to(home)?;
            samples[2].extend(session.timed_calls(line, 1, limit)?);
            session.move_to(other)?;
            samples[3].extend(session.timed_calls(line, 1, limit)?);
            samples[4].extend(session.timed_calls(line, 1, limit)?);
            sessions += 1;
            samples[5].push(ping.once()?);
        }
        for (kind, s) in rounds.iter_mut().zip(samples.iter_mut()) {
            kind.push(Summary::of(s));
        }
    }
    let after = super::policy::command_calls(redis)?;
    let per_session: BTreeMap<&String, f64> = after
        .iter()
        .map(|(k, n)| {
            let was = before.get(k).copied().unwrap_or(0);
            (
                k,
                round2(n.saturating_sub(was) as f64 / f64::from(sessions.max(1))),
            )
        })
        // INFO and PING are this scenario's own.
        .filter(|(k, n)| *n > 0.0 && !["info", "ping"].contains(&k.as_str()))
        .collect();
    let mut v = Map::new();
    for ((key, what), r) in ADOPTION.iter().zip(&rounds) {
        let mut side = stats::medians(r);
        side["what"] = json!(what);
        v.insert((*key).into(), side);
    }
    v.insert(
        "initialize_redis_vs_memory".into(),
        stats::compare(&rounds[0], &rounds[1]),
    );
    v.insert(
        "adopting_vs_held".into(),
        stats::compare(&rounds[2], &rounds[3]),
    );
    v.insert(
        "adopting_vs_adopted".into(),
        stats::compare(&rounds[4], &rounds[3]),
    );
    v.insert("sessions".into(), json!(sessions));
    v.insert("sessions_per_round".into(), json!(plan.adopt_sessions));
    v.insert("redis_commands_per_session".into(), json!(per_session));
    v.insert(
        "per_session".into(),
        json!(
            "initialize on replica k of the memory cluster; initialize and one call on \
               replica k of the Redis cluster, one call on a new connection to k, one on a new \
               connection to k+1 (adoption), one more there"
        ),
    );
    Ok(Value::Object(v))
}

/// One kept connection to redis-server, timing a `PING` at a time: what one round trip to
/// Redis costs on this machine at this moment, beside what adopting a session costs.
struct Ping {
    stream: TcpStream,
}

impl Ping {
    fn connect(port: u16) -> Result<Self> {
        let timeout = Duration::from_secs(5);
        let stream =
            TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self { stream })
    }

    /// Nanoseconds from the `PING` written to the `+PONG` read.
    fn once(&mut self) -> Result<u64> {
        use std::io::Read as _;
        let mut reply = [0u8; 7];
        let began = Instant::now();
        self.stream.write_all(b"PING\r\n")?;
        self.stream.read_exact(&mut reply)?;
        let took = began.elapsed();
        if &reply != b"+PONG\r\n" {
            bail!(
                "redis-server answered PING with {:?}",
                String::from_utf8_lossy(&reply)
            );
        }
        Ok(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Where HAProxy is, and the libraries it needs when it is the unpacked one.
struct Haproxy {
    binary: PathBuf,
    library_path: Option<PathBuf>,
}

impl Haproxy {
    fn find() -> std::result::Result<Self, String> {
        if let Some(path) = std::env::var_os("MANIFOLD_HAPROXY") {
            let binary = PathBuf::from(path);
            if !binary.is_file() {
                return Err(format!(
                    "MANIFOLD_HAPROXY is {}, which is not a file",
                    binary.display()
                ));
            }
            return Ok(Self {
                binary,
                library_path: None,
            });
        }
        let on_path = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|dir| dir.join("haproxy"))
            .find(|c| c.is_file());
        if let Some(binary) = on_path {
            return Ok(Self {
                binary,
                library_path: None,
            });
        }
        let missing = "haproxy not found: run `bash tests/replicas/install.sh` from the \
                       repository root (or set MANIFOLD_HAPROXY to a haproxy binary)";
        let root = workspace_root().ok_or(missing)?;
        let unpacked = root.join("tests/.cache/haproxy");
        let binary = unpacked.join("usr/sbin/haproxy");
        if !binary.exists() {
            return Err(missing.to_owned());
        }
        // usr/lib/<arch>-linux-gnu, whatever the architecture.
        let library_path = std::fs::read_dir(unpacked.join("usr/lib"))
            .ok()
            .and_then(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.is_dir() && p.to_string_lossy().ends_with("-linux-gnu"))
            });
        Ok(Self {
            binary,
            library_path,
        })
    }

    /// The first line of `haproxy -v`.
    fn version(&self) -> Option<String> {
        let mut command = std::process::Command::new(&self.binary);
        command.arg("-v");
        if let Some(lib) = &self.library_path {
            command.env("LD_LIBRARY_PATH", lib);
        }
        let out = command.output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().next().map(str::to_owned)
    }

    /// HAProxy in front of `replicas` (one or three) on a free port of 127.0.0.1, with the
    /// shipped configuration (see `config`), once it forwards requests and has checked every
    /// replica. A port taken between its choice and HAProxy's bind is tried again.
    fn start(
        &self,
        setup: &Setup,
        label: &str,
        replicas: &[Arc<HttpServer>],
        affinity: bool,
    ) -> Result<Arc<HttpServer>> {
        let text = config(SHIPPED, replicas.len(), affinity);
        let mut last = None;
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let mut env = vec![("MANIFOLD_LB_BIND".to_owned(), format!("127.0.0.1:{port}"))];
            for (i, r) in replicas.iter().enumerate() {
                env.push((format!("MANIFOLD_REPLICA_{}", i + 1), r.addr().to_string()));
            }
            let spec = setup.haproxy(
                label,
                &self.binary,
                self.library_path.as_deref(),
                &text,
                env,
            )?;
            match HttpServer::launch(&spec, setup.limits) {
                Ok(lb) => {
                    until_ok(lb.addr(), "/readyz", lb.limits().stall)
                        .map_err(|e| lb.failed(&format!("forwarded nothing: {e:#}")))?;
                    std::thread::sleep(CHECKS_SETTLE);
                    return Ok(lb);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("{label} did not start")))
            .with_context(|| format!("{label} (HAProxy {})", self.binary.display()))
    }
}

/// The shipped configuration for `replicas` replicas (the `server` lines past it removed),
/// with or without session affinity (without: its `stick` lines removed, so that every
/// request is balanced round robin). Three replicas with affinity is the shipped text itself.
fn config(shipped: &str, replicas: usize, affinity: bool) -> String {
    let mut text: String = shipped
        .lines()
        .filter(|line| {
            let t = line.trim_start();
            let beyond =
                (replicas + 1..=THREE).any(|k| t.starts_with(&format!("server replica{k} ")));
            !beyond && (affinity || !t.starts_with("stick"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    text
}

/// The repository holding `tests/replicas/install.sh`: above the working directory, else
/// above this crate (the build's own checkout).
fn workspace_root() -> Option<PathBuf> {
    let marker = |dir: &Path| dir.join("tests/replicas/install.sh").is_file();
    let here = std::env::current_dir().ok();
    here.iter()
        .flat_map(|d| d.ancestors())
        .find(|d| marker(d))
        .or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .find(|d| marker(d))
        })
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_replicas_haproxy_marked_down() {
        let log = std::env::temp_dir().join(format!("replicas-down-{}.log", std::process::id()));
        std::fs::write(
            &log,
            "[WARNING]  (7) : Server manifold/replica3 is DOWN, reason: Layer7 timeout, check duration: 499ms. 2 active and 0 backup servers left.\n\
             Server manifold/replica3 is DOWN, reason: Layer7 timeout, check duration: 499ms. 2 active and 0 backup servers left.\n\
             [WARNING]  (7) : Server manifold/replica3 is UP, reason: Layer7 check passed, code: 200.\n",
        )
        .unwrap();
        assert_eq!(marked_down(&log), 1);
        let _ = std::fs::remove_file(&log);
        assert_eq!(marked_down(&log), 0);
    }

    #[test]
    fn the_shipped_config_has_what_the_variants_remove() {
        assert!(SHIPPED.contains("\n    server replica1 \"${MANIFOLD_REPLICA_1}\"\n"));
        assert!(SHIPPED.contains("\n    stick on req.hdr(mcp-session-id)\n"));
        assert!(SHIPPED.contains("bind \"${MANIFOLD_LB_BIND}\""));
        assert_eq!(config(SHIPPED, THREE, true), SHIPPED);
    }

    #[test]
    fn variants_drop_replicas_or_affinity_only() {
        let count = |text: &str, start: &str| {
            text.lines()
                .filter(|l| l.trim_start().starts_with(start))
                .count()
        };
        let one = config(SHIPPED, 1, true);
        assert_eq!(count(&one, "server "), 1, "{one}");
        assert!(one.contains("server replica1 "));
        assert_eq!(count(&one, "stick"), count(SHIPPED, "stick"));
        let rr = config(SHIPPED, THREE, false);
        assert_eq!(count(&rr, "stick"), 0, "{rr}");
        assert_eq!(count(&rr, "server "), THREE);
        assert!(rr.contains("balance roundrobin"));
        // Nothing else changes: every removed line is a server or stick line.
        assert_eq!(
            SHIPPED.lines().count() - rr.lines().count(),
            count(SHIPPED, "stick")
        );
        assert_eq!(SHIPPED.lines().count() - one.lines().count(), 2);
    }

    #[test]
    fn counts_tools_calls_in_an_exposition() {
        let text = "# HELP x\n\
            mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",outcome=\"ok\"} 12\n\
            mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",outcome=\"error\"} 3\n\
            mcp_server_operation_duration_seconds_count{mcp_method_name=\"initialize\"} 16\n\
            mcp_server_operation_duration_seconds_sum{mcp_method_name=\"tools/call\"} 0.5\n";
        assert_eq!(tools_calls(text), 15);
    }
}
