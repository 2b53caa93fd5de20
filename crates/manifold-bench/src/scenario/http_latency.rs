//! A small `tools/call` with one request in flight, six or seven ways in interleaved rounds of
//! one run: the fixture called directly over stdio (the baseline), Manifold over stdio (its
//! added latency, as in `latency`), with `--manifold-before` an earlier Manifold build over
//! stdio too (is the stdio path as fast as before?), Manifold over Streamable HTTP on one
//! keep-alive connection as a session-era host (`initialize`, then `Mcp-Session-Id`) and as a
//! stateless host (revision 2026-07-28: no session, `_meta` and naming headers on each
//! request; a Manifold of its own, so that each has its own server CPU figures), the peer
//! gateway over Streamable HTTP in front of the same fixture (session era only: it has no
//! stateless path), and the floor server (a canned answer, no upstream: what the client and
//! loopback TCP cost). The HTTP figures are end to end: the host's POST to the answer read
//! whole.

use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::{expect_complete, http_session, http_stateless, peer_missing, PEER_SESSION_ONLY};
use crate::mcp::{RequestLine, ECHO_TEXT};
use crate::procstat::{thread_cpu, Usage};
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{self, Summary};
use crate::target::{HttpServer, ServerSpec, TargetSpec};

pub fn http_latency(setup: &Setup, plan: &Plan) -> Result<Value> {
    let ups = [Upstream::plain("alpha")];
    let (direct, through) = (RequestLine::echo("echo"), RequestLine::echo("alpha__echo"));
    let stateless = RequestLine::echo_stateless("alpha__echo");
    let mut sides = vec![
        Side::stdio(
            "direct",
            setup,
            &setup.direct("http-latency-direct", &[]),
            &direct,
        )?,
        Side::stdio(
            "stdio",
            setup,
            &setup.through("http-latency-stdio", &ups)?,
            &through,
        )?,
        Side::http(
            "http",
            setup,
            &setup.manifold_http("http-latency-http", &ups)?,
            &through,
        )?,
        Side::stateless(
            "http_stateless",
            setup,
            &setup.manifold_http("http-latency-http-stateless", &ups)?,
            &stateless,
        )?,
        Side::http(
            "floor",
            setup,
            &setup.floor("http-latency-floor")?,
            &through,
        )?,
    ];
    if let Some(spec) = setup.through_before("http-latency-stdio-before", &ups)? {
        sides.push(Side::stdio("stdio_before", setup, &spec, &through)?);
    }
    let mut peer_error = None;
    match setup.peer_http("http-latency-peer", &ups)? {
        Some(spec) => match Side::http("peer", setup, &spec, &through) {
            Ok(side) => sides.push(side),
            Err(e) => peer_error = Some(format!("{e:#}")),
        },
        None => peer_error = Some(peer_missing()),
    }
    let calls = plan.latency_calls;
    let warmup = Plan::warmup(calls);
    for side in &mut sides {
        let result = side.session.result(&side.line)?;
        super::expect_text(side.session.label(), &result, ECHO_TEXT.len())?;
        if side.stateless {
            expect_complete(side.session.label(), &result)?;
        }
        side.session
            .timed_calls(&side.line, warmup, plan.round_limit)?;
    }
    let rounds = measure(&mut sides, plan, calls, &mut peer_error)?;
    let mut out = Map::new();
    for (side, rounds) in sides.iter().zip(&rounds) {
        let mut v = stats::medians(&rounds.summaries);
        let done: usize = rounds.summaries.iter().map(|r| r.count).sum();
        v["client_cpu_us_per_call"] = json!(stats::round2(
            rounds.client_cpu.as_secs_f64() * 1e6 / done.max(1) as f64
        ));
        v["server_cpu_per_call"] = match (side.session.pid(), rounds.server_before) {
            (Some(pid), Some(before)) => Usage::of(pid)?.per_call(before, done),
            _ => Value::Null,
        };
        v["answer_bytes"] = json!(side.session.last_answer_len);
        // The whole HTTP request (head and body) of the last call; null over stdio.
        v["request_wire_bytes"] = json!(side.session.last_request_len());
        v["startup_ms"] = json!(super::latency::ms(side.startup));
        if side.stateless {
            v["startup_until"] = json!("the first tools/call answered (there is no initialize)");
        }
        out.insert(side.name.into(), v);
    }
    let summaries = |name: &str| {
        sides
            .iter()
            .position(|s| s.name == name)
            .map(|i| rounds[i].summaries.as_slice())
    };
    let mut v = Value::Object(out);
    if let (Some(d), Some(s)) = (summaries("direct"), summaries("stdio")) {
        v["stdio_vs_direct"] = stats::compare(d, s);
    }
    if let (Some(d), Some(s)) = (summaries("direct"), summaries("stdio_before")) {
        v["stdio_before_vs_direct"] = stats::compare(d, s);
    }
    if let (Some(d), Some(h)) = (summaries("direct"), summaries("http")) {
        v["http_vs_direct"] = stats::compare(d, h);
    }
    if let (Some(f), Some(h)) = (summaries("floor"), summaries("http")) {
        v["http_vs_floor"] = stats::compare(f, h);
    }
    // The stateless path against the session-era one: "direct" is the session era here.
    if let (Some(h), Some(s)) = (summaries("http"), summaries("http_stateless")) {
        v["http_stateless_vs_http"] = stats::compare(h, s);
    }
    if let (Some(d), Some(s)) = (summaries("direct"), summaries("http_stateless")) {
        v["http_stateless_vs_direct"] = stats::compare(d, s);
    }
    v["http_vs_peer"] = match (summaries("peer"), summaries("http")) {
        (Some(p), Some(h)) => stats::ratios(h, p),
        _ => json!({ "not_applicable": peer_error }),
    };
    v["rounds"] = json!(plan.rounds);
    v["calls_per_round"] = json!(calls);
    v["warmup_calls"] = json!(warmup);
    v["peer_era"] = json!(PEER_SESSION_ONLY);
    // Bodies, for id 1: `stateless` carries `_meta` besides what `through` carries.
    v["request_bytes"] = json!({
        "direct": direct.len_with(1),
        "through": through.len_with(1),
        "stateless": stateless.len_with(1),
    });
    Ok(v)
}

/// What the rounds gave one side.
#[derive(Default)]
struct Rounds {
    summaries: Vec<Summary>,
    /// The load generator's own CPU time in this side's timed loops.
    client_cpu: Duration,
    server_before: Option<Usage>,
}

/// Interleaved rounds over every side, the order rotating each round. A peer that fails
/// is dropped (its error kept for the report); any other failure ends the scenario.
fn measure(
    sides: &mut Vec<Side>,
    plan: &Plan,
    calls: usize,
    peer_error: &mut Option<String>,
) -> Result<Vec<Rounds>> {
    let mut rounds: Vec<Rounds> = Vec::new();
    for side in sides.iter() {
        let before = side.session.pid().map(Usage::of).transpose()?;
        rounds.push(Rounds {
            server_before: before,
            ..Rounds::default()
        });
    }
    for round in 0..plan.rounds {
        for k in 0..sides.len() {
            let i = (round + k) % sides.len();
            let side = &mut sides[i];
            let cpu = thread_cpu();
            match side
                .session
                .timed_calls(&side.line, calls, plan.round_limit)
            {
                Ok(mut samples) => {
                    rounds[i].client_cpu += thread_cpu().saturating_sub(cpu);
                    rounds[i].summaries.push(Summary::of(&mut samples));
                }
                Err(e) if side.name == "peer" => {
                    *peer_error = Some(format!("failed in round {round}: {e:#}"));
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

/// One way of making the call: a session, the request it sends, and the HTTP server behind
/// it, if any (kept so that its figures can be read until the end).
struct Side {
    name: &'static str,
    session: Session,
    line: RequestLine,
    /// From launch to the first `initialize` answered (for a stateless host, which has none:
    /// to its first call answered).
    startup: Duration,
    /// A stateless host (its answers are checked to be stateless results).
    stateless: bool,
    _server: Option<std::sync::Arc<HttpServer>>,
}

impl Side {
    fn stdio(
        name: &'static str,
        setup: &Setup,
        spec: &TargetSpec,
        line: &RequestLine,
    ) -> Result<Self> {
        let session = Session::start(spec, setup.limits)?;
        Ok(Self {
            name,
            startup: session.startup,
            session,
            line: line.clone(),
            stateless: false,
            _server: None,
        })
    }

    fn http(
        name: &'static str,
        setup: &Setup,
        spec: &ServerSpec,
        line: &RequestLine,
    ) -> Result<Self> {
        let began = std::time::Instant::now();
        let server = HttpServer::launch(spec, setup.limits)?;
        let session = http_session(&server, name)?;
        Ok(Self {
            name,
            startup: began.elapsed(),
            session,
            line: line.clone(),
            stateless: false,
            _server: Some(server),
        })
    }

    /// A stateless host of Manifold over HTTP; `line` must be a stateless one.
    fn stateless(
        name: &'static str,
        setup: &Setup,
        spec: &ServerSpec,
        line: &RequestLine,
    ) -> Result<Self> {
        let began = std::time::Instant::now();
        let server = HttpServer::launch(spec, setup.limits)?;
        let mut session = http_stateless(&server, name)?;
        // Manifold holds a stateless request until its upstreams first started, as it holds
        // initialize: the first answer is the comparable moment.
        session.result(line)?;
        Ok(Self {
            name,
            startup: began.elapsed(),
            session,
            line: line.clone(),
            stateless: true,
            _server: Some(server),
        })
    }
}
