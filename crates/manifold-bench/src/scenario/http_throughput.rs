//! Calls per second from many HTTP hosts at once: 16 keep-alive connections, one session
//! each, each thread making one call at a time, all drawing from one pool of calls per round
//! so that every connection stays busy until the round's last calls. Manifold in front of one
//! fixture and in front of ten (the calls spread round-robin over all of them, each connection
//! starting at another), the peer gateway the same two ways, and the floor server (canned
//! answers, no upstream: what the client and loopback TCP allow), in interleaved rounds.
//! Beside Manifold in front of one fixture, the same with stateless hosts (revision
//! 2026-07-28: no session, each request self-contained): 16 connections drawing from the same
//! pool. The peer has no stateless path, so it has no such case.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde_json::{json, Map, Value};

use super::counted::Tally;
use super::{expect_complete, http_session, http_stateless, peer_missing, PEER_SESSION_ONLY};
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::{thread_cpu, Usage};
use crate::session::{Counted, Session};
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{self, round2, Across, Summary};
use crate::target::{HttpServer, ServerSpec};

const SPREAD: usize = 10;

/// What is under load, and how its hosts speak to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Manifold (or the floor) with session-era hosts.
    Manifold,
    /// Manifold with stateless hosts (2026-07-28); the lines must be stateless ones.
    Stateless,
    /// The peer gateway (session era): a failing peer is dropped, not fatal.
    Peer,
}

/// One server under load and its connections.
pub struct Side {
    pub name: String,
    server: Arc<HttpServer>,
    pub sessions: Vec<Session>,
    lines: Vec<RequestLine>,
    kind: Kind,
    /// Every call made, the checked first calls and the warm-up included.
    pub seen: Tally,
}

/// What the rounds gave one side.
#[derive(Default)]
pub struct Rounds {
    rates: Vec<f64>,
    latency: Vec<Summary>,
    calls: u64,
    client_cpu: Duration,
    server_before: Usage,
}

pub fn http_throughput(setup: &Setup, plan: &Plan) -> Result<Value> {
    let shapes: [(&str, Vec<Upstream>); 2] = [
        ("1", vec![Upstream::plain("alpha")]),
        ("10", Upstream::many("alpha", SPREAD, 0)),
    ];
    let mut sides = Vec::new();
    let mut not_applicable = Map::new();
    for (n, ups) in &shapes {
        let lines: Vec<RequestLine> = if ups.len() == 1 {
            vec![RequestLine::echo("alpha__echo")]
        } else {
            (0..ups.len())
                .map(|i| RequestLine::echo(&format!("alpha{i}__echo")))
                .collect()
        };
        let spec = setup.manifold_http(&format!("http-throughput-{n}"), ups)?;
        sides.push(Side::open(
            format!("manifold_{n}"),
            &spec,
            setup,
            plan,
            &lines,
            Kind::Manifold,
        )?);
        if ups.len() == 1 {
            let spec = setup.manifold_http(&format!("http-throughput-{n}-stateless"), ups)?;
            sides.push(Side::open(
                format!("manifold_{n}_stateless"),
                &spec,
                setup,
                plan,
                &[RequestLine::echo_stateless("alpha__echo")],
                Kind::Stateless,
            )?);
        }
        let peer = format!("peer_{n}");
        match setup.peer_http(&format!("http-throughput-peer-{n}"), ups)? {
            Some(spec) => match Side::open(peer.clone(), &spec, setup, plan, &lines, Kind::Peer) {
                Ok(side) => sides.push(side),
                Err(e) => {
                    not_applicable.insert(peer, json!(format!("{e:#}")));
                }
            },
            None => {
                not_applicable.insert(peer, json!(peer_missing()));
            }
        }
    }
    let floor = setup.floor("http-throughput-floor")?;
    let line = [RequestLine::echo("alpha__echo")];
    sides.push(Side::open(
        "floor".into(),
        &floor,
        setup,
        plan,
        &line,
        Kind::Manifold,
    )?);
    for side in &mut sides {
        side.warm_up(plan)?;
    }
    let mut rounds = measure(&mut sides, plan, &mut not_applicable)?;
    // An error answer fails a peer (its rows say why) and the scenario for anything else.
    let mut i = 0;
    while i < sides.len() {
        match sides[i].seen.invalid(&sides[i].name) {
            Some(why) if sides[i].kind == Kind::Peer => {
                not_applicable.insert(sides[i].name.clone(), json!(why));
                sides.remove(i);
                rounds.remove(i);
            }
            Some(why) => return Err(anyhow!(why)),
            None => i += 1,
        }
    }
    let mut out = Map::new();
    for (side, r) in sides.iter().zip(&rounds) {
        out.insert(side.name.clone(), side.to_json(r)?);
    }
    for n in ["1", "10"] {
        let m = sides.iter().position(|s| s.name == format!("manifold_{n}"));
        let p = sides.iter().position(|s| s.name == format!("peer_{n}"));
        if let (Some(m), Some(p)) = (m, p) {
            out.insert(format!("ratio_{n}"), rate_ratio(&rounds[m], &rounds[p]));
        }
    }
    let m = sides.iter().position(|s| s.name == "manifold_1");
    let s = sides.iter().position(|s| s.name == "manifold_1_stateless");
    if let (Some(m), Some(s)) = (m, s) {
        out.insert(
            "stateless_1_vs_manifold_1".into(),
            rate_ratio(&rounds[s], &rounds[m]),
        );
    }
    out.insert("peer_era".into(), json!(PEER_SESSION_ONLY));
    out.insert("not_applicable".into(), Value::Object(not_applicable));
    out.insert(
        "unit".into(),
        json!("calls/s (one request and its answer per call)"),
    );
    out.insert("rounds".into(), json!(plan.rounds));
    out.insert("connections".into(), json!(plan.connections));
    out.insert("calls_per_round".into(), json!(plan.http_calls));
    Ok(Value::Object(out))
}

/// Calls/s of `a` over `b`: the ratio of the medians, and its spread from the per-round
/// ratios (rounds paired by index).
pub fn rate_ratio(a: &Rounds, b: &Rounds) -> Value {
    rates_ratio(&a.rates, &b.rates)
}

/// The same from each side's calls/s per round.
pub fn rates_ratio(a: &[f64], b: &[f64]) -> Value {
    let paired = Across::of(a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)));
    let medians =
        Across::of(a.iter().copied()).median / Across::of(b.iter().copied()).median.max(1e-9);
    json!({ "median": round2(medians), "spread": [round2(paired.min), round2(paired.max)] })
}

/// Interleaved rounds, the order rotating each round. A peer side that fails is dropped,
/// its error kept for the report; any other failure ends the scenario. Error answers are
/// counted (in each side's `seen`), not failures.
pub fn measure(
    sides: &mut Vec<Side>,
    plan: &Plan,
    not_applicable: &mut Map<String, Value>,
) -> Result<Vec<Rounds>> {
    let mut rounds = Vec::new();
    for side in sides.iter() {
        rounds.push(Rounds {
            server_before: Usage::of(side.server.pid())?,
            ..Rounds::default()
        });
    }
    for round in 0..plan.rounds {
        for k in 0..sides.len() {
            let i = (round + k) % sides.len();
            match sides[i].round(plan.http_calls, plan.round_limit) {
                Ok(done) => {
                    let r = &mut rounds[i];
                    r.rates.push(done.calls as f64 / done.secs.max(1e-9));
                    r.latency.push(done.latency);
                    r.calls += done.calls;
                    r.client_cpu += done.client_cpu;
                }
                Err(e) if sides[i].kind == Kind::Peer => {
                    let why = format!("failed in round {round}: {e:#}");
                    not_applicable.insert(sides[i].name.clone(), json!(why));
                    sides.remove(i);
                    rounds.remove(i);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(rounds)
}

/// One round's outcome on one side.
pub struct Done {
    pub calls: u64,
    pub secs: f64,
    pub latency: Summary,
    pub client_cpu: Duration,
}

impl Side {
    pub fn open(
        name: String,
        spec: &ServerSpec,
        setup: &Setup,
        plan: &Plan,
        lines: &[RequestLine],
        kind: Kind,
    ) -> Result<Self> {
        let server = HttpServer::launch(spec, setup.limits)?;
        Self::on(name, server, plan, lines, kind)
    }

    /// The same on a server already running (a load balancer in front of replicas).
    pub fn on(
        name: String,
        server: Arc<HttpServer>,
        plan: &Plan,
        lines: &[RequestLine],
        kind: Kind,
    ) -> Result<Self> {
        let mut sessions = Vec::with_capacity(plan.connections);
        for j in 0..plan.connections {
            let label = format!("{name}-{j}");
            let mut session = match kind {
                Kind::Stateless => http_stateless(&server, &label)?,
                Kind::Manifold | Kind::Peer => http_session(&server, &label)?,
            };
            // Each connection's first call is checked in full.
            let line = &lines[j % lines.len()];
            let result = session.result(line)?;
            super::expect_text(session.label(), &result, ECHO_TEXT.len())?;
            if kind == Kind::Stateless {
                expect_complete(session.label(), &result)?;
            }
            sessions.push(session);
        }
        Ok(Self {
            name,
            server,
            sessions,
            lines: lines.to_vec(),
            kind,
            seen: Tally {
                calls: plan.connections,
                ..Tally::default()
            },
        })
    }

    /// A tenth of a round, so that connections, sessions and upstream routes are hot before
    /// the first timed round.
    pub fn warm_up(&mut self, plan: &Plan) -> Result<()> {
        self.round(plan.http_calls / 10 + 1, plan.round_limit)
            .map(drop)
    }

    /// Calls/s (median and spread over rounds), latency under the load, calls and error
    /// answers, and the client's and the server's CPU per call.
    pub fn to_json(&self, r: &Rounds) -> Result<Value> {
        Ok(json!({
            "calls_per_s": Across::of(r.rates.iter().copied()).to_json(),
            "per_round": r.rates.iter().map(|x| x.round()).collect::<Vec<_>>(),
            "latency": stats::medians(&r.latency),
            "calls": r.calls,
            "errors": self.seen.errors,
            "first_error": self.seen.first_error,
            "client_cpu_us_per_call":
                round2(r.client_cpu.as_secs_f64() * 1e6 / r.calls.max(1) as f64),
            "server_cpu_per_call": Usage::of(self.server.pid())?
                .per_call(r.server_before, usize::try_from(r.calls).unwrap_or(usize::MAX)),
        }))
    }

    /// `calls` calls from every connection at once, each on its own thread.
    pub fn round(&mut self, calls: u64, limit: Duration) -> Result<Done> {
        let pool = AtomicU64::new(calls);
        let start = Barrier::new(self.sessions.len() + 1);
        let (lines, pool, start) = (&self.lines, &pool, &start);
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .sessions
                .iter_mut()
                .enumerate()
                .map(|(j, session)| {
                    scope.spawn(move || {
                        // Outside the timed part; every thread must reach the barrier, even
                        // one whose connection failed, or the others would wait forever.
                        let ready = session.ready();
                        start.wait();
                        let deadline = Instant::now() + limit;
                        let cpu = thread_cpu();
                        let samples =
                            ready.and_then(|()| session.pooled_calls(lines, j, pool, deadline));
                        (samples, thread_cpu().saturating_sub(cpu))
                    })
                })
                .collect();
            start.wait();
            let began = Instant::now();
            let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            (joined, began.elapsed())
        });
        let (joined, elapsed) = results;
        let (mut all, mut client_cpu) = (Counted::default(), Duration::ZERO);
        for joined in joined {
            let (got, cpu) =
                joined.map_err(|_| anyhow!("{}: a load thread panicked", self.name))?;
            all.absorb(got?);
            client_cpu += cpu;
        }
        self.seen.add(&all);
        Ok(Done {
            calls: all.samples.len() as u64,
            secs: elapsed.as_secs_f64(),
            latency: Summary::of(&mut all.samples),
            client_cpu,
        })
    }
}
