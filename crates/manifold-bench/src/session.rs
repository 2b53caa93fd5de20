//! A target after the handshake, and the ways of driving it: one request in flight (for
//! latency), many pipelined from one host (for throughput over stdio), or one at a time from
//! a pool of calls shared with other sessions on other threads (for throughput over HTTP,
//! where concurrency comes from connections). Every loop is bounded by a count and by a
//! deadline; a blocked read is bounded by the target's watchdog or socket timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::mcp::{self, Incoming, RequestLine};
use crate::target::{Limits, Target, TargetSpec};

/// Most messages skipped (notifications, server requests) while waiting for one answer.
const MAX_SKIPPED: usize = 10_000;

/// How a `tools/call` result says that the tool failed (compact JSON, as every server
/// measured here writes it).
const TOOL_ERROR: &[u8] = br#""isError":true"#;

pub struct Session {
    target: Box<dyn Target>,
    next_id: u64,
    out: Vec<u8>,
    /// From launch until the initialize answer arrived.
    pub startup: Duration,
    /// Bytes of the last answer `timed_calls` waited for.
    pub last_answer_len: usize,
    /// The `instructions` of the server's initialize result, if it gave any.
    pub instructions: Option<String>,
}

/// What `counted_calls` saw: the times of the calls answered with a good result, and the
/// calls answered with an error instead.
#[derive(Debug, Default)]
pub struct Counted {
    /// Nanoseconds per call answered with a result that is not a tool error.
    pub samples: Vec<u64>,
    /// Answers that were a JSON-RPC error (a call refused by a limit is one) or a result with
    /// `"isError":true`.
    pub errors: usize,
    /// The first of those answers, shortened.
    pub first_error: Option<String>,
}

impl Counted {
    /// Calls made: answered well or not.
    pub fn calls(&self) -> usize {
        self.samples.len() + self.errors
    }

    /// One call: its time if it was answered well, else its error answer.
    fn count(&mut self, error: Option<String>, took: Duration) {
        match error {
            None => self
                .samples
                .push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)),
            Some(answer) => {
                self.errors += 1;
                self.first_error.get_or_insert(answer);
            }
        }
    }

    /// Adds what another loop saw (another connection's, in the same round).
    pub fn absorb(&mut self, other: Counted) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// The outcome of a pipelined run.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub calls: u64,
    pub secs: f64,
}

impl Rate {
    pub fn per_sec(self) -> f64 {
        self.calls as f64 / self.secs.max(1e-9)
    }
}

impl Session {
    /// Launches the target and completes the MCP handshake.
    pub fn start(spec: &TargetSpec, limits: Limits) -> Result<Self> {
        let began = Instant::now();
        let target = spec.launch(limits)?;
        Self::handshake(target, began)
    }

    /// Completes the MCP handshake over a target already connected (an HTTP session).
    pub fn over(target: Box<dyn Target>) -> Result<Self> {
        Self::handshake(target, Instant::now())
    }

    /// A stateless host over a target already connected: no handshake, every request stands
    /// alone (its lines carry `_meta`, see `RequestLine::echo_stateless`). `startup` stays
    /// zero: there is no `initialize` to time.
    pub fn stateless(target: Box<dyn Target>) -> Self {
        Self::bare(target)
    }

    fn bare(target: Box<dyn Target>) -> Self {
        Self {
            target,
            next_id: 1,
            out: Vec::new(),
            startup: Duration::ZERO,
            last_answer_len: 0,
            instructions: None,
        }
    }

    fn handshake(target: Box<dyn Target>, began: Instant) -> Result<Self> {
        let mut session = Self::bare(target);
        session.target.send(&mcp::handshake())?;
        let instructions = session
            .await_answer_with(0, |text| {
                let answer: Value = serde_json::from_slice(text)?;
                let given = answer
                    .pointer("/result/instructions")
                    .and_then(Value::as_str);
                Ok(given.map(str::to_owned))
            })
            .context("initialize failed")?;
        session.instructions = instructions;
        session.startup = began.elapsed();
        session.target.send(mcp::INITIALIZED)?;
        Ok(session)
    }

    pub fn label(&self) -> &str {
        self.target.label()
    }

    pub fn pid(&self) -> Option<u32> {
        self.target.server_pid()
    }

    /// Bytes of the last request as the transport framed it (see `Target::last_request_len`).
    pub fn last_request_len(&self) -> Option<usize> {
        self.target.last_request_len()
    }

    /// Closes the connection under the session, if the transport has one (see `Target`).
    pub fn disconnect(&mut self) {
        self.target.disconnect();
    }

    /// Goes on with this session on a new connection to `server` (see `Target::move_to`).
    pub fn move_to(&mut self, server: &std::sync::Arc<crate::target::HttpServer>) -> Result<()> {
        self.target.move_to(server)
    }

    /// One request; the answer's `result`, parsed (for checks, never timed).
    pub fn result(&mut self, line: &RequestLine) -> Result<Value> {
        let id = self.take_id();
        self.out.clear();
        line.write(id, &mut self.out);
        self.target.send_request(&self.out, &line.headers)?;
        let parsed = self
            .await_answer_with(id, |text| Ok(serde_json::from_slice::<Value>(text)?))
            .with_context(|| self.target.label().to_owned())?;
        Ok(parsed.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Up to `count` calls one at a time, stopping early at `limit`; nanoseconds each.
    pub fn timed_calls(
        &mut self,
        line: &RequestLine,
        count: usize,
        limit: Duration,
    ) -> Result<Vec<u64>> {
        let mut samples = Vec::with_capacity(count);
        self.target.ready()?;
        let deadline = Instant::now() + limit;
        for _ in 0..count {
            let id = self.take_id();
            self.out.clear();
            line.write(id, &mut self.out);
            let sent = Instant::now();
            self.target.send_request(&self.out, &line.headers)?;
            self.last_answer_len = self
                .await_answer(id, line.min_answer)
                .with_context(|| self.target.label().to_owned())?;
            let done = Instant::now();
            samples.push(u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX));
            if done >= deadline {
                break;
            }
        }
        Ok(samples)
    }

    /// Like `timed_calls`, but an error answer to a call does not end the loop: it is counted
    /// (its time is left out of the samples), so a run that must see none can say how many it
    /// saw. Any other unexpected message still ends it with an error.
    pub fn counted_calls(
        &mut self,
        line: &RequestLine,
        count: usize,
        limit: Duration,
    ) -> Result<Counted> {
        let mut counted = Counted {
            samples: Vec::with_capacity(count),
            ..Counted::default()
        };
        // Built once: the same few bytes are looked for in every answer, of every target.
        let tool_error = memchr::memmem::Finder::new(TOOL_ERROR);
        self.target.ready()?;
        let deadline = Instant::now() + limit;
        for _ in 0..count {
            let id = self.take_id();
            self.out.clear();
            line.write(id, &mut self.out);
            let sent = Instant::now();
            self.target.send_request(&self.out, &line.headers)?;
            let error = self
                .await_outcome(id, line.min_answer, &tool_error)
                .with_context(|| self.target.label().to_owned())?;
            let done = Instant::now();
            counted.count(error, done - sent);
            if done >= deadline {
                break;
            }
        }
        Ok(counted)
    }

    /// `total` calls cycling through `lines`, keeping up to `window` in flight; stops sending
    /// at `limit`, then drains. `tick` runs every 1,024 answers (RSS sampling).
    pub fn pipelined(
        &mut self,
        lines: &[RequestLine],
        total: u64,
        window: u64,
        limit: Duration,
        tick: &mut dyn FnMut(),
    ) -> Result<Rate> {
        // Requests go out in batches of a quarter window, one write each, as a busy host's
        // buffered writer would send them; a full window of small answers fits a pipe buffer.
        let batch = (window / 4).max(1);
        let (first, began) = (self.next_id, Instant::now());
        let (mut sent, mut done, mut stop_at) = (0u64, 0u64, total);
        while done < stop_at {
            if sent < stop_at && sent - done + batch <= window {
                self.out.clear();
                let n = batch.min(stop_at - sent);
                for k in sent..sent + n {
                    lines[(k % lines.len() as u64) as usize].write(first + k, &mut self.out);
                }
                self.target.send(&self.out)?;
                sent += n;
            }
            self.await_any(first, first + sent)
                .with_context(|| self.target.label().to_owned())?;
            done += 1;
            if done % 1024 == 0 {
                tick();
                if began.elapsed() >= limit {
                    stop_at = sent;
                }
            }
        }
        self.next_id = first + sent;
        Ok(Rate {
            calls: done,
            secs: began.elapsed().as_secs_f64(),
        })
    }

    /// Housekeeping before a timed loop that is not `timed_calls` (see `Target::ready`).
    pub fn ready(&mut self) -> Result<()> {
        self.target.ready()
    }

    /// One call at a time, cycling through `lines` from `offset`, while `pool` has calls left
    /// and until `deadline`; every answer counted as in `counted_calls`. Sessions on other
    /// threads draw from the same pool, so all of them stay busy until the round's calls are
    /// done. Call `ready` first.
    pub fn pooled_calls(
        &mut self,
        lines: &[RequestLine],
        offset: usize,
        pool: &AtomicU64,
        deadline: Instant,
    ) -> Result<Counted> {
        let mut counted = Counted::default();
        let tool_error = memchr::memmem::Finder::new(TOOL_ERROR);
        let mut k = offset;
        // Bounded by the pool, which only shrinks.
        while pool
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            let line = &lines[k % lines.len()];
            k += 1;
            let id = self.take_id();
            self.out.clear();
            line.write(id, &mut self.out);
            let sent = Instant::now();
            self.target.send_request(&self.out, &line.headers)?;
            let error = self
                .await_outcome(id, line.min_answer, &tool_error)
                .with_context(|| self.target.label().to_owned())?;
            let done = Instant::now();
            counted.count(error, done - sent);
            if done >= deadline {
                break;
            }
        }
        Ok(counted)
    }

    /// The id the next request will carry: ids run on from one request to the next.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Sends `line` as the next request (id `next_id`) without waiting for its answer. The
    /// soak reads answers itself (`next_answer`) so that an answer lost, duplicated or given to
    /// another id is counted instead of ending the run.
    pub fn send(&mut self, line: &RequestLine) -> Result<()> {
        let id = self.take_id();
        self.out.clear();
        line.write(id, &mut self.out);
        self.target.send_request(&self.out, &line.headers)
    }

    /// The next answer the server sent, whatever its id: `check` gets its id, whether it is a
    /// result (not a JSON-RPC error) and its text. Notifications are skipped and the server's
    /// requests answered on the way; a response that holds no further answer is an error.
    pub fn next_answer<R>(&mut self, check: impl FnOnce(u64, bool, &[u8]) -> R) -> Result<R> {
        for _ in 0..MAX_SKIPPED {
            let line = self.target.recv()?;
            match mcp::classify(line)? {
                Incoming::Answer { id, ok } => return Ok(check(id, ok, line)),
                Incoming::Notification => {}
                Incoming::ServerRequest { id, method } => self.answer_server(&id, &method)?,
            }
        }
        bail!(
            "{}: no answer among {MAX_SKIPPED} messages",
            self.target.label()
        )
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// Waits for the answer to `id`; returns its length.
    fn await_answer(&mut self, id: u64, min_len: usize) -> Result<usize> {
        self.await_answer_with(id, |text| {
            if text.len() < min_len {
                bail!(
                    "answer of {} bytes, expected at least {min_len}",
                    text.len()
                );
            }
            Ok(text.len())
        })
    }

    /// Waits for the answer to `id`: `None` for a result of at least `min_len` bytes that is
    /// not a tool error, else the answer (shortened) for an error or a tool error.
    fn await_outcome(
        &mut self,
        id: u64,
        min_len: usize,
        tool_error: &memchr::memmem::Finder<'_>,
    ) -> Result<Option<String>> {
        for _ in 0..MAX_SKIPPED {
            let line = self.target.recv()?;
            match mcp::classify(line)? {
                Incoming::Answer { id: got, ok } if got == id => {
                    self.last_answer_len = line.len();
                    if !ok || tool_error.find(line).is_some() {
                        return Ok(Some(mcp::excerpt(line)));
                    }
                    if line.len() < min_len {
                        bail!(
                            "answer of {} bytes, expected at least {min_len}",
                            line.len()
                        );
                    }
                    return Ok(None);
                }
                Incoming::Answer { .. } => {
                    bail!("unexpected answer to {id}: {}", mcp::excerpt(line))
                }
                Incoming::Notification => {}
                Incoming::ServerRequest { id, method } => self.answer_server(&id, &method)?,
            }
        }
        bail!(
            "{}: no answer to {id} among {MAX_SKIPPED} messages",
            self.target.label()
        )
    }

    /// Waits for the answer to `id`, which must be a result, and hands its text to `check`.
    fn await_answer_with<R>(
        &mut self,
        id: u64,
        check: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        for _ in 0..MAX_SKIPPED {
            let line = self.target.recv()?;
            match mcp::classify(line)? {
                Incoming::Answer { id: got, ok: true } if got == id => return check(line),
                Incoming::Answer { .. } => {
                    bail!("unexpected answer to {id}: {}", mcp::excerpt(line))
                }
                Incoming::Notification => {}
                Incoming::ServerRequest { id, method } => self.answer_server(&id, &method)?,
            }
        }
        bail!(
            "{}: no answer to {id} among {MAX_SKIPPED} messages",
            self.target.label()
        )
    }

    /// Waits for any successful answer with an id in `from..to`.
    fn await_any(&mut self, from: u64, to: u64) -> Result<()> {
        for _ in 0..MAX_SKIPPED {
            let line = self.target.recv()?;
            match mcp::classify(line)? {
                Incoming::Answer { id, ok: true } if (from..to).contains(&id) => return Ok(()),
                Incoming::Answer { .. } => bail!("unexpected answer: {}", mcp::excerpt(line)),
                Incoming::Notification => {}
                Incoming::ServerRequest { id, method } => self.answer_server(&id, &method)?,
            }
        }
        bail!(
            "{}: no answer among {MAX_SKIPPED} messages",
            self.target.label()
        )
    }

    /// A host answers the server's requests: `ping` with `{}`, anything else with -32601.
    fn answer_server(&mut self, id: &str, method: &str) -> Result<()> {
        let body = if method == "ping" {
            r#""result":{}"#.to_owned()
        } else {
            r#""error":{"code":-32601,"message":"not supported by manifold-load"}"#.to_owned()
        };
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{body}}}\n");
        self.target.send(line.as_bytes())
    }
}
