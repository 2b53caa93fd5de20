//! Resident memory of an HTTP server with 20 upstreams (50 tools each) and 1,000 idle
//! Streamable HTTP sessions, against the same server with one session. Two ways: each
//! session's connection closed once it is initialized (idle hosts: servers close idle
//! keep-alive connections anyway), and every connection kept open. Manifold and the peer
//! gateway alike; each round starts a fresh server per case, the cases interleaved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use super::{http_session, peer_missing};
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::status_mb;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{round, Across};
use crate::target::HttpServer;

const UPSTREAMS: usize = 20;
const TOOLS_EACH: usize = 50;
/// Lets startup work finish, and closed connections be torn down, before reading RSS.
const SETTLE: Duration = Duration::from_millis(300);
const FIGURES: [&str; 6] = [
    "startup_ms",
    "one_session_mb",
    "sessions_mb",
    "added_mb",
    "hwm_mb",
    "sessions_per_s",
];

/// One case: whose server, and whether the sessions keep their connections.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    peer: bool,
    open: bool,
}

const CASES: [Case; 4] = [
    Case {
        name: "manifold_closed",
        peer: false,
        open: false,
    },
    Case {
        name: "manifold_open",
        peer: false,
        open: true,
    },
    Case {
        name: "peer_closed",
        peer: true,
        open: false,
    },
    Case {
        name: "peer_open",
        peer: true,
        open: true,
    },
];

pub fn http_rss(setup: &Setup, plan: &Plan) -> Result<Value> {
    // Our end of every kept connection is a descriptor too.
    raise_fd_limit(plan.idle_sessions as u64 * 2 + 256)?;
    let mut cases: Vec<Case> = CASES.to_vec();
    let mut not_applicable = Map::new();
    if setup.peer.is_none() {
        cases.retain(|c| !c.peer);
        not_applicable.insert("peer".into(), json!(peer_missing()));
    }
    let mut rounds: Vec<Vec<[f64; 6]>> = vec![Vec::new(); cases.len()];
    for round in 0..plan.rss_rounds {
        let mut k = 0;
        // Bounded by the number of cases, which only shrinks.
        while k < cases.len() {
            let i = (round + k) % cases.len();
            match one(setup, plan, cases[i]) {
                Ok(figures) => rounds[i].push(figures),
                Err(e) if cases[i].peer => {
                    let why = format!("failed in round {round}: {e:#}");
                    not_applicable.insert(cases[i].name.into(), json!(why));
                    cases.remove(i);
                    rounds.remove(i);
                    continue;
                }
                Err(e) => return Err(e),
            }
            k += 1;
        }
    }
    let mut out = Map::new();
    for (case, rounds) in cases.iter().zip(&rounds) {
        let mut entry = Map::new();
        for (f, name) in FIGURES.iter().enumerate() {
            let a = Across::of(rounds.iter().map(|r| r[f]));
            entry.insert((*name).into(), a.to_json());
        }
        let per = Across::of(
            rounds
                .iter()
                .map(|r| r[3] * 1024.0 / plan.idle_sessions as f64),
        );
        entry.insert("per_session_kb".into(), per.to_json());
        out.insert(case.name.into(), Value::Object(entry));
    }
    out.insert("not_applicable".into(), Value::Object(not_applicable));
    out.insert("upstreams".into(), json!(UPSTREAMS));
    out.insert("tools".into(), json!(UPSTREAMS * TOOLS_EACH));
    out.insert("sessions".into(), json!(plan.idle_sessions));
    out.insert("rounds".into(), json!(plan.rss_rounds));
    Ok(Value::Object(out))
}

/// One fresh server; the figures in `FIGURES` order.
fn one(setup: &Setup, plan: &Plan, case: Case) -> Result<[f64; 6]> {
    let ups = Upstream::many("u", UPSTREAMS, TOOLS_EACH);
    let label = format!("http-rss-{}", case.name);
    let spec = if case.peer {
        setup.peer_http(&label, &ups)?.context("no peer")?
    } else {
        setup.manifold_http(&label, &ups)?
    };
    let began = Instant::now();
    let server = HttpServer::launch(&spec, setup.limits)?;
    // Manifold answers `initialize` once every upstream is up; the peer listens only then.
    let mut first = http_session(&server, &format!("{label}-0"))?;
    let startup = super::latency::ms(began.elapsed());
    let line = RequestLine::echo("u0__tool_0");
    let result = first.result(&line)?;
    super::expect_text(first.label(), &result, ECHO_TEXT.len())?;
    first.disconnect();
    std::thread::sleep(SETTLE);
    let pid = server.pid();
    let one_session = status_mb(pid, "VmRSS:")?;
    let (sessions, per_s) = open_sessions(&server, &label, plan.idle_sessions - 1, case.open)?;
    std::thread::sleep(SETTLE);
    let with_sessions = status_mb(pid, "VmRSS:")?;
    let hwm = status_mb(pid, "VmHWM:")?;
    // Every session is still there: the first and the last answer a call.
    first.result(&line)?;
    drop(first);
    if let Some(mut last) = sessions.into_iter().last() {
        last.result(&line)?;
    }
    Ok([
        startup,
        one_session,
        with_sessions,
        round(with_sessions - one_session),
        hwm,
        per_s.round(),
    ])
}

/// Opens `n` sessions, one connection each, kept open or closed once the session is
/// initialized; returns them and how many were opened per second.
fn open_sessions(
    server: &Arc<HttpServer>,
    label: &str,
    n: usize,
    open: bool,
) -> Result<(Vec<Session>, f64)> {
    let began = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    for j in 1..=n {
        let mut session = http_session(server, &format!("{label}-{j}"))
            .with_context(|| format!("opening session {j} of {n}"))?;
        if !open {
            session.disconnect();
        }
        sessions.push(session);
    }
    let per_s = n as f64 / began.elapsed().as_secs_f64().max(1e-9);
    Ok((sessions, per_s))
}

/// Raises this process's soft limit on open descriptors to `need` (within the hard limit);
/// the servers it starts inherit it.
fn raise_fd_limit(need: u64) -> Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|c| c >= need) {
        return Ok(());
    }
    let want = limit.maximum.map_or(need, |m| m.min(need));
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        },
    )
    .context("cannot raise the open-file limit")?;
    if want < need {
        anyhow::bail!("the open-file limit is {want}, {need} are needed (ulimit -n)");
    }
    Ok(())
}
