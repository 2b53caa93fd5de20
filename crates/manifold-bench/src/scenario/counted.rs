//! Sides called one request at a time in interleaved rounds of one run, every answer counted:
//! an error answer (a JSON-RPC error, or a result with `isError`) is counted instead of timed,
//! so a scenario that must see none can say how many it saw, and which came first.

use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Map, Value};

use crate::mcp::RequestLine;
use crate::procstat::Usage;
use crate::session::{Counted, Session};
use crate::setup::{Plan, Setup};
use crate::stats::{self, Summary};
use crate::target::{Limits, TargetSpec};

/// Every call made to one side, and the answers that were errors.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub calls: usize,
    pub errors: usize,
    pub first_error: Option<String>,
}

impl Tally {
    pub fn add(&mut self, got: &Counted) {
        self.calls += got.calls();
        self.errors += got.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&got.first_error);
        }
    }

    /// Why a run is invalid because of what `name` saw, if it saw an error answer.
    pub fn invalid(&self, name: &str) -> Option<String> {
        (self.errors > 0).then(|| {
            format!(
                "{name}: {} error answers in {} calls, the first: {}",
                self.errors,
                self.calls,
                self.first_error.as_deref().unwrap_or("?")
            )
        })
    }
}

/// One target, the call it is measured with, and what it saw.
pub struct Side<'a> {
    pub session: Session,
    pub line: &'a RequestLine,
    /// Every call made, warm-up included.
    pub seen: Tally,
    /// Each measured round's percentiles.
    pub rounds: Vec<Summary>,
    /// Calls made in the measured rounds, answered well or not.
    pub measured: usize,
    /// The server's CPU counters before the first measured round.
    before: Usage,
}

impl<'a> Side<'a> {
    /// Launches the target and completes the handshake.
    pub fn start(spec: &TargetSpec, line: &'a RequestLine, limits: Limits) -> Result<Self> {
        Ok(Self {
            session: Session::start(spec, limits)?,
            line,
            seen: Tally::default(),
            rounds: Vec::new(),
            measured: 0,
            before: Usage::default(),
        })
    }

    /// `count` calls, every answer counted.
    pub fn calls(&mut self, count: usize, limit: Duration) -> Result<Counted> {
        let got = self.session.counted_calls(self.line, count, limit)?;
        self.seen.add(&got);
        Ok(got)
    }

    /// One call; if it was answered well, another with its answer parsed and checked to be
    /// one text of `text_len` bytes; then `warmup` calls.
    pub fn warm_up(&mut self, warmup: usize, text_len: usize, limit: Duration) -> Result<()> {
        if self.calls(1, limit)?.errors == 0 {
            let result = self.session.result(self.line)?;
            super::expect_text(self.session.label(), &result, text_len)?;
            self.seen.calls += 1;
        }
        self.calls(warmup, limit)?;
        Ok(())
    }

    /// Medians over rounds, the server's CPU time and switches per measured call, the last
    /// answer's size, the startup time, and every call and error answer seen.
    pub fn to_json(&self) -> Result<Value> {
        let mut side = stats::medians(&self.rounds);
        side["server_cpu_per_call"] = usage(&self.session)?.per_call(self.before, self.measured);
        side["answer_bytes"] = json!(self.session.last_answer_len);
        side["startup_ms"] = json!(super::latency::ms(self.session.startup));
        side["calls"] = json!(self.seen.calls);
        side["errors"] = json!(self.seen.errors);
        side["first_error"] = json!(self.seen.first_error);
        Ok(side)
    }
}

/// A side for each (target, call), started and warmed up with `Plan::warmup` calls of the
/// plan's latency count (each answer a text of `text_len` bytes).
pub fn start_all<'a>(
    specs: &[(TargetSpec, &'a RequestLine)],
    setup: &Setup,
    plan: &Plan,
    text_len: usize,
) -> Result<Vec<Side<'a>>> {
    let mut sides = Vec::with_capacity(specs.len());
    for (spec, line) in specs {
        sides.push(Side::start(spec, line, setup.limits)?);
    }
    for side in &mut sides {
        side.warm_up(Plan::warmup(plan.latency_calls), text_len, plan.round_limit)?;
    }
    Ok(sides)
}

/// Into `v`: each side's figures under its name in `names` (a name without a side gets
/// `missing`), and each comparison `(key, base, side)` of `pairs` whose sides both ran; into
/// `invalid`, why the run is invalid for each side that saw an error answer.
pub fn report(
    sides: &[Side],
    names: &[(&str, &str)],
    pairs: &[(&str, usize, usize, &str)],
    missing: &Value,
    v: &mut Map<String, Value>,
    invalid: &mut Vec<String>,
) -> Result<()> {
    for (i, (name, _)) in names.iter().enumerate() {
        match sides.get(i) {
            Some(side) => {
                v.insert((*name).into(), side.to_json()?);
                invalid.extend(side.seen.invalid(name));
            }
            None => {
                v.insert((*name).into(), missing.clone());
            }
        }
    }
    for &(key, base, side, _) in pairs {
        if let (Some(b), Some(s)) = (sides.get(base), sides.get(side)) {
            v.insert(key.into(), stats::compare(&b.rounds, &s.rounds));
        }
    }
    Ok(())
}

/// `plan.rounds` rounds of `calls` calls on every side: each side once per round, the order
/// rotating, so that no side always follows another.
pub fn rounds(sides: &mut [Side], plan: &Plan, calls: usize) -> Result<()> {
    for side in sides.iter_mut() {
        side.before = usage(&side.session)?;
    }
    for round in 0..plan.rounds {
        for k in 0..sides.len() {
            let side = &mut sides[(round + k) % sides.len()];
            let mut got = side.calls(calls, plan.round_limit)?;
            side.measured += got.calls();
            side.rounds.push(Summary::of(&mut got.samples));
        }
    }
    Ok(())
}

fn usage(session: &Session) -> Result<Usage> {
    session.pid().map_or(Ok(Usage::default()), Usage::of)
}
