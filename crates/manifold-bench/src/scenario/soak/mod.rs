//! Soak: Manifold under a steady load for minutes, to show that nothing it holds grows with
//! the requests it serves and that every request gets its one answer.
//!
//! A release `manifold serve --listen` fronts 10 stdio fixtures (`alpha0..alpha9`), each
//! with its `add` tool cached and `alpha0__whoami` limited to one call a day. Several host
//! sessions (16 by default), one keep-alive connection and thread each, send a fixed,
//! paced schedule (`load`) of a mix of requests (`mix`): calls to every upstream, the three
//! lists, calls the cache answers and calls the rate limit refuses. Each answer is judged
//! against what its request must get, and counted against the id it names. Manifold's
//! memory, descriptors, threads and children are read every second (`sample`).
//!
//! After the load, the fixtures' own counts (their `call_count` tool) must show every call
//! reaching its upstream exactly once and no hit or refusal reaching one at all, and
//! Manifold's `/metrics` must count every hit as a cache hit and every refusal as
//! `rate_limited`. The run fails (the report says why, and `manifold-load` exits non-zero
//! once the JSON is written) on any request lost, duplicated, or answered otherwise than
//! expected, descriptors or threads rising past a small tolerance, or the upstream processes
//! changing.

mod checks;
mod doc;
mod load;
mod mix;
mod sample;
pub(crate) mod table;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

use self::load::{Schedule, Seen};
use self::mix::{Mix, LISTS};
use self::sample::Sample;
use super::http_session;
use crate::mcp::RequestLine;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::target::HttpServer;

/// Upstreams behind Manifold.
pub(crate) const UPSTREAMS: usize = 10;

/// After the last request is due, how long the sessions may take to send what is left.
const GRACE: Duration = Duration::from_secs(30);

/// How long a soak runs and how hard: from `--soak-seconds`, `--soak-rate` and
/// `--soak-sessions`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub seconds: f64,
    pub warmup_s: f64,
    pub rate: f64,
    pub sessions: usize,
}

impl Shape {
    /// The warm-up is a tenth of the measured time, from 2 to 30 s: long enough for caches,
    /// connections and allocator arenas to settle before the start figures are taken.
    fn of(plan: &Plan) -> Self {
        let seconds = plan.soak_seconds.max(1) as f64;
        Self {
            seconds,
            warmup_s: (seconds / 10.0).clamp(2.0, 30.0),
            rate: plan.soak_rate.max(1) as f64,
            sessions: plan.soak_sessions.max(1),
        }
    }

    fn total(self) -> u64 {
        (self.rate * (self.warmup_s + self.seconds)).round() as u64
    }
}

/// The tables added to Manifold's config: every fixture's `add` cached for longer than any
/// run, and one tool limited to a call a day.
fn tables() -> String {
    let mut text = String::new();
    for i in 0..UPSTREAMS {
        text.push_str(&format!(
            "[upstreams.alpha{i}.tool_cache.add]\nttl = \"1h\"\n\n"
        ));
    }
    text.push_str(&format!(
        "[limits.tools.{}]\nrate = \"{}\"\n",
        mix::REFUSED_TOOL,
        mix::REFUSED_RATE
    ));
    text
}

pub fn soak(setup: &Setup, plan: &Plan) -> Result<Value> {
    let shape = Shape::of(plan);
    let tables = tables();
    let ups = Upstream::many("alpha", UPSTREAMS, 0);
    let spec = setup.manifold_http_tuned("soak", &ups, &tables)?;
    let server = HttpServer::launch(&spec, setup.limits)?;
    let (lengths, items) = prime(&mut http_session(&server, "soak-prime")?)?;
    let mix = Mix::new(UPSTREAMS, lengths);
    let mut sessions = (0..shape.sessions)
        .map(|j| http_session(&server, &format!("soak-{j}")))
        .collect::<Result<Vec<_>>>()?;
    eprintln!(
        "manifold-load: soak: {} s at {} requests/s after {} s of warm-up...",
        shape.seconds, shape.rate, shape.warmup_s
    );
    let (seen, samples, elapsed) = drive(&server, &mut sessions, &mix, shape)?;
    let mut failures = checks::answer_failures(&seen);
    // A session of its own: one left idle through a long run would have expired.
    let mut check = http_session(&server, "soak-check")?;
    let fixtures = checks::fixture_counts(&mut check, &seen, &mut failures)?;
    let metrics = checks::metrics(&server, &seen, &mut failures)?;
    let resources = sample::figures(&samples, shape.warmup_s, UPSTREAMS);
    failures.extend(resources.failures);
    let mut out = Map::new();
    out.insert("passed".into(), json!(failures.is_empty()));
    out.insert("failures".into(), json!(failures));
    out.insert("config".into(), doc::config(shape, &tables, items));
    out.insert("requests".into(), doc::requests(&seen, shape));
    out.insert("kinds".into(), doc::kinds(&seen));
    out.insert("rate".into(), doc::rate(&seen, shape, elapsed));
    out.insert("lag".into(), doc::lag(&seen));
    out.insert("resources".into(), resources.json);
    out.insert("per_minute".into(), doc::per_minute(&seen, &samples, shape));
    out.insert("fixture_counts".into(), fixtures);
    out.insert("metrics".into(), metrics);
    out.insert("series".into(), doc::series(&samples));
    Ok(Value::Object(out))
}

/// Before the load: each list read and checked in full (every upstream alike; its length
/// kept for judging later answers), each cached call made once (the miss that fills the
/// cache), and the limited tool called twice: its one call passes, the next is refused.
fn prime(probe: &mut Session) -> Result<([usize; 3], [usize; 3])> {
    let (mut lengths, mut items) = ([0; 3], [0; 3]);
    for (i, method) in LISTS.iter().enumerate() {
        let id = probe.next_id();
        probe.send(&RequestLine::new(method, &json!({})))?;
        let text = probe.next_answer(|got, ok, text| (got == id && ok).then(|| text.to_vec()))?;
        let text = text.ok_or_else(|| anyhow!("{method} was not answered with a result"))?;
        let answer: Value = serde_json::from_slice(&text).context("a list answer")?;
        items[i] = mix::check_list(method, &answer["result"], UPSTREAMS)?;
        lengths[i] = mix::list_length(id, &text);
    }
    for i in 0..UPSTREAMS {
        let result = probe.result(&mix::hit_line(i))?;
        if result.get("isError") == Some(&Value::Bool(true)) {
            bail!("alpha{i}__add failed: {result}");
        }
    }
    let refused = RequestLine::tools_call(mix::REFUSED_TOOL, &json!({}));
    probe.result(&refused)?;
    let limit = Duration::from_secs(30);
    let second = probe.counted_calls(&refused, 1, limit)?;
    let code = mix::RATE_LIMITED.to_string();
    if !second
        .first_error
        .as_deref()
        .is_some_and(|e| e.contains(&code))
    {
        bail!(
            "{}'s second call was not refused with {code}: {second:?}",
            mix::REFUSED_TOOL
        );
    }
    Ok((lengths, items))
}

/// Runs the schedule on every session, each on a thread of its own, while another samples
/// Manifold every second: what the sessions saw, the samples, and how long it all took.
fn drive(
    server: &Arc<HttpServer>,
    sessions: &mut [Session],
    mix: &Mix,
    shape: Shape,
) -> Result<(Seen, Vec<Sample>, Duration)> {
    for session in sessions.iter_mut() {
        session.ready()?;
    }
    // A moment ahead, so that every thread is waiting when the first request is due.
    let start = Instant::now() + Duration::from_millis(100);
    let length = Duration::from_secs_f64(shape.warmup_s + shape.seconds);
    let schedule = Schedule {
        start,
        rate: shape.rate,
        total: shape.total(),
        sessions: sessions.len(),
        warmup_s: shape.warmup_s,
        deadline: start + length + GRACE,
    };
    let stop = AtomicBool::new(false);
    let (pid, bound) = (server.pid(), length + GRACE * 2);
    let (schedule, stop) = (&schedule, &stop);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(move || sample::every_second(pid, start, stop, bound));
        let workers: Vec<_> = (sessions.iter_mut().enumerate())
            .map(|(j, s)| scope.spawn(move || load::run(s, j, mix, schedule, UPSTREAMS)))
            .collect();
        let mut seen = Seen::default();
        let mut panicked = false;
        for worker in workers {
            match worker.join() {
                Ok(one) => seen.absorb(one),
                Err(_) => panicked = true,
            }
        }
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let samples = sampler
            .join()
            .map_err(|_| anyhow!("the sampler panicked"))??;
        if panicked {
            bail!("a soak session's thread panicked");
        }
        Ok((seen, samples, elapsed))
    })
}
