//! One live connection to an upstream: the pending-request table, the id counter, timeouts,
//! cancellation and progress mapping, over a [`Wire`] that carries the messages (a child's
//! pipes, or HTTP). Callers on any thread send through it directly; whatever reads the
//! upstream's messages hands them to [`Connection::receive`]. It lives as long as one child
//! process or one HTTP session: a restart makes a new one.
//!
//! The pending table, the id counter, timeouts, cancellation and `receive` share one lock and
//! one invariant (every request is answered, failed or refused exactly once). The lock is
//! held for map operations only: whatever is written to a host (progress, answers, requests
//! of the upstream's) is taken out of the table first and delivered after the lock is let go
//! (see `crate::pending::guard`). Sending is here; what comes back from the upstream is in the
//! child module `answers`, what goes to hosts (their cancellations, the upstream's requests to
//! them) in `host`, and what the stateless era adds (its per-request `_meta`, the methods it
//! dropped, the `subscriptions/listen` stream) in `stateless`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use manifold_protocol::version::Era;
use manifold_protocol::{write, Envelope, Kind};
use tokio::sync::oneshot;

mod answers;
mod host;
mod stateless;
pub(crate) use stateless::{error_code, meta_members, ListenEnd, ListenFilter};

use crate::error::UpstreamError;
use crate::health::Breaker;
use crate::outbound::{target_in, Outbound};
use crate::pending::{
    Answer, Delivery, Entry, Finish, Forward, Forwarded, Peer, Pending, Reply, TableGuard,
};
use crate::pipe::WriteError;

/// How a connection's messages reach the upstream.
pub(crate) trait Wire: Send + Sync {
    /// Sends one message (transports without newline framing drop its line's `\n`). Never
    /// blocks on the upstream. It takes the message whole: the HTTP wire moves it into the
    /// task that posts it, so nothing of it is copied.
    fn send(&self, msg: Outbound) -> Result<(), WriteError>;
    /// Stops sending, because of `reason`; what was not sent yet is dropped.
    fn close(&self, reason: &str);
    /// The connection's era is now known (told once, before the messages of that era).
    fn era_chosen(&self, _era: Era) {}
    /// Cancels request `id` by closing what carries its answer, if this transport cancels
    /// that way (HTTP in the stateless era: closing a POST's response stream is the
    /// cancellation); false: the connection sends `notifications/cancelled` instead.
    fn cancel(&self, _id: u64) -> bool {
        false
    }
}

/// How long requests to an upstream may take.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// A request without an answer (or progress) for this long fails.
    pub request: Duration,
    /// No request outlives this, whatever progress it reports.
    pub max: Duration,
}

/// What a connection reports about messages that are neither answers nor progress.
pub(crate) trait Events: Send + Sync {
    /// A notification from the upstream (other than progress, which the connection maps).
    fn notification(&self, method: &str, params: Option<&str>);
    /// A stateless-era upstream acknowledged the connection's `subscriptions/listen` stream.
    fn listen_acknowledged(&self) {}
    /// The connection's `subscriptions/listen` stream ended (see [`ListenEnd`]).
    fn listen_ended(&self, _end: ListenEnd) {}
    /// What the `subscriptions/listen` stream should ask for changed (a resource was
    /// subscribed to or unsubscribed from): it should be opened again, soon.
    fn listen_changed(&self) {}
}

/// A live connection to one upstream.
pub struct Connection {
    name: Box<str>,
    wire: Box<dyn Wire>,
    events: Box<dyn Events>,
    /// Guards the table and the closed flag together, so that a request is either in the
    /// table when the connection closes (and gets failed) or refused up front. Held only for
    /// map operations, never across a write or an await.
    pending: Mutex<PendingState>,
    next_id: AtomicU64,
    timing: Timing,
    /// The one host this connection serves, when it serves one alone.
    peer: OnceLock<Arc<dyn Peer>>,
    /// The upstream's byte counters (shared with its other connections).
    counters: Arc<manifold_telemetry::UpstreamCounters>,
    /// Set once the upstream is found to speak the stateless era: what each request to it
    /// carries in `_meta`. Unset: the session era (or not known yet). Never changes after.
    stateless: OnceLock<stateless::Meta>,
    /// Set while `server/discover` probes the upstream; still set if the connection ended
    /// before the probe was answered (a child that exits on an unknown first request).
    probing: AtomicBool,
    /// The `subscriptions/listen` stream of a stateless-era upstream: what it asks for and
    /// which request it is.
    listen: Mutex<stateless::Listen>,
    /// The upstream's circuit breaker (kept by the actor across connections): checked before
    /// each call is sent, told how each ended.
    breaker: OnceLock<Arc<Breaker>>,
}

#[derive(Default)]
struct PendingState {
    table: Pending,
    closed: Option<String>,
}

impl Connection {
    pub(crate) fn new(
        name: &str,
        wire: Box<dyn Wire>,
        events: Box<dyn Events>,
        timing: Timing,
    ) -> Self {
        Self {
            name: name.into(),
            wire,
            events,
            pending: Mutex::new(PendingState::default()),
            next_id: AtomicU64::new(1),
            timing,
            peer: OnceLock::new(),
            counters: manifold_telemetry::metrics().upstream(name),
            stateless: OnceLock::new(),
            probing: AtomicBool::new(false),
            listen: Mutex::new(stateless::Listen::default()),
            breaker: OnceLock::new(),
        }
    }

    /// Puts the connection's calls behind `breaker` (set once, before it is published).
    pub(crate) fn set_breaker(&self, breaker: Arc<Breaker>) {
        let _ = self.breaker.set(breaker);
    }

    /// Sends one message (see [`Wire::send`]), counting its bytes.
    fn write(&self, msg: Outbound) -> Result<(), WriteError> {
        self.counters.sent(msg.line.len());
        self.wire.send(msg)
    }

    /// Ties the connection to one host: what the upstream asks of a client goes there.
    pub(crate) fn set_peer(&self, peer: Arc<dyn Peer>) {
        let _ = self.peer.set(peer);
    }

    /// A pending entry for `reply`, due after `timeout` (the usual time when `None`).
    fn entry(&self, reply: Reply, timeout: Option<Duration>) -> Entry {
        let now = Instant::now();
        let timeout = timeout.unwrap_or(self.timing.request);
        let limit = now + self.timing.max.max(timeout);
        Entry {
            reply,
            deadline: now + timeout,
            timeout,
            limit,
        }
    }

    fn lock(&self) -> TableGuard<'_, PendingState> {
        let guard = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        TableGuard::new(guard)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A fresh upstream request id. Ids are unique per connection, whichever host or session
    /// the request came from, so answers can never be confused.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().table.len()
    }

    /// Sends request `msg` (its id one of [`Connection::next_id`]'s) whose answer goes to
    /// `fwd.exchange`. The exchange always hears how the request ended, even when it could not
    /// be sent at all.
    ///
    /// On a stateless-era connection the request must carry the era's `_meta` (see
    /// [`Connection::request_meta`]) and say so with its `version`
    /// ([`Connection::revision`]); one that does not gets it added here, at the cost of
    /// reading and rewriting the line.
    pub fn forward(&self, msg: Outbound, fwd: Forward) {
        // An open breaker refuses at once; closed, this is one atomic load.
        if let Some(Err(refused)) = self.breaker.get().map(|b| b.admit()) {
            return Delivery::finish_now(fwd.exchange, Finish::Failed(refused));
        }
        let Some(id) = msg.id else {
            let err = self.unavailable("Manifold forwarded a message without a request id (a bug)");
            return Delivery::finish_now(fwd.exchange, Finish::Failed(err));
        };
        let msg = self.completed(msg);
        let timeout = fwd.timeout;
        let entry = self.entry(Reply::Forward(Forwarded::new(fwd)), timeout);
        {
            let mut st = self.lock();
            if let Some(reason) = &st.closed {
                let err = self.unavailable(reason);
                drop(st);
                if let Reply::Forward(fwd) = entry.reply {
                    Delivery::finish(fwd.delivery, Finish::Failed(err));
                }
                return;
            }
            st.table.insert(id, entry);
        }
        if let Err(e) = self.write(msg) {
            // If the entry is gone, the answer or a failure already reached the exchange.
            let taken = self.lock().table.remove(id);
            if let Some(entry) = taken {
                // An upstream that does not read its input counts against its breaker; a
                // closed input is its end, which the restart deals with.
                let counted = matches!(e, WriteError::Full(_));
                let err = self.write_error(e);
                match counted {
                    true => self.fail(entry.reply, err),
                    false => self.fail_uncounted(entry.reply, err),
                }
            }
        }
    }

    /// A health ping: `ping`, or in the stateless era `server/discover` (which that revision
    /// answers in its place), waiting at most `limit` (`Ok(None)`: no answer in time; the
    /// request is forgotten). It passes no breaker: it is how an open one is probed.
    pub(crate) async fn ping(&self, limit: Duration) -> Result<Option<Answer>, UpstreamError> {
        match self.stateless.get() {
            None => self.send_request("ping", None, Some(limit), None).await,
            Some(_) => {
                let params = self.with_request_meta("{}");
                let revision = self.revision();
                self.send_request("server/discover", Some(&params), Some(limit), revision)
                    .await
            }
        }
    }

    /// Whether the connection was closed (its end is the restart's to deal with).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Sends a request and waits for its answer (handshake, list fetches, fan-outs).
    ///
    /// To a stateless-era upstream the request carries that era's `_meta`, and the session
    /// era's methods that revision dropped are served here instead: `ping` becomes
    /// `server/discover`, `logging/setLevel` sets the level later requests ask for, and
    /// `resources/subscribe` / `resources/unsubscribe` change the URIs of the connection's
    /// `subscriptions/listen` stream (all answered `{}` once done).
    pub async fn request(
        &self,
        method: &str,
        params: Option<&str>,
    ) -> Result<Answer, UpstreamError> {
        if self.stateless.get().is_none() {
            let answer = self.send_request(method, params, None, None).await?;
            return answer.ok_or_else(|| self.closed_error("no answer"));
        }
        let (method, params, empty) = match self.stateless_local(method, params) {
            stateless::Local::Answered(answer) => return Ok(answer),
            stateless::Local::Send => (method, params, false),
            // Its result stands for the dropped method's empty one.
            stateless::Local::Instead(other) => (other, None, true),
        };
        let params = self.with_request_meta(params.unwrap_or("{}"));
        let answer = self
            .send_request(method, Some(&params), None, self.revision())
            .await?;
        match answer.ok_or_else(|| self.closed_error("no answer"))? {
            Answer::Result(_) if empty => Ok(Answer::Result("{}".into())),
            answer => Ok(answer),
        }
    }

    /// Sends a request as given (its params naming stateless-era revision `revision` in their
    /// `_meta`, if any) and waits for its answer, for at most `limit` when given (`Ok(None)`:
    /// no answer in time; the request is forgotten, and the upstream is not told, which suits
    /// a probe).
    async fn send_request(
        &self,
        method: &str,
        params: Option<&str>,
        limit: Option<Duration>,
        revision: Option<&'static str>,
    ) -> Result<Option<Answer>, UpstreamError> {
        let id = self.next_id();
        let mut line = Vec::with_capacity(64 + params.map_or(0, str::len));
        write::request(&mut line, id, method, params);
        let msg = Outbound::request(id, method.to_owned(), line)
            .named(target_in(method, params))
            .in_revision(revision);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if let Some(reason) = &st.closed {
                return Err(self.unavailable(reason));
            }
            // A request with a limit of its own is forgotten at the limit, by the wait below:
            // the sweep of deadlines (which would tell the upstream) comes only later.
            let deadline = limit.map(|l| l.saturating_mul(2));
            st.table
                .insert(id, self.entry(Reply::Channel(tx), deadline));
        }
        if let Err(e) = self.write(msg) {
            self.lock().table.remove(id);
            return Err(self.write_error(e));
        }
        let answer = match limit {
            None => rx.await,
            Some(limit) => match tokio::time::timeout(limit, rx).await {
                Ok(answer) => answer,
                Err(_) => {
                    self.lock().table.remove(id);
                    return Ok(None);
                }
            },
        };
        answer
            .unwrap_or_else(|_| Err(self.closed_error("the connection was dropped")))
            .map(Some)
    }

    /// Sends a notification. A stateless-era upstream is not sent the notifications that
    /// revision dropped (`notifications/initialized`, `notifications/roots/list_changed`).
    pub fn notify(&self, method: &str, params: Option<&str>) -> Result<(), UpstreamError> {
        if self.stateless.get().is_some()
            && matches!(
                method,
                "notifications/initialized" | "notifications/roots/list_changed"
            )
        {
            return Ok(());
        }
        let mut line = Vec::with_capacity(64 + params.map_or(0, str::len));
        write::notification(&mut line, method, params);
        let msg = Outbound::notification(method.to_owned(), line);
        self.write(msg).map_err(|e| self.write_error(e))
    }

    /// Handles one message read from the upstream. `via` is the upstream id of the request
    /// whose answer stream carried it, when the transport knows (HTTP). An error means the
    /// upstream broke the protocol (the text says how); the caller ends the connection.
    pub(crate) fn receive(self: &Arc<Self>, line: &[u8], via: Option<u64>) -> Result<(), String> {
        self.counters.received(line.len());
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let env = Envelope::decode(line).map_err(|e| garbage(line, &e.to_string()))?;
        match env.kind().map_err(|e| garbage(line, &e.to_string()))? {
            Kind::Response => self.response(&env, line),
            Kind::Request => self.server_request(&env, via),
            Kind::Notification => {
                let method = env.method.as_deref().unwrap_or_default();
                match method {
                    "notifications/progress" => {
                        if let Some(params) = env.params {
                            self.progress(params);
                        }
                    }
                    "notifications/elicitation/complete" => self.related(line, via),
                    _ => self.stateless_notification(method, env.params),
                }
            }
        }
        Ok(())
    }

    /// Writes `line`, an answer to one of the upstream's own requests, to the upstream.
    pub(crate) fn send_answer(&self, line: Vec<u8>) {
        if let Err(e) = self.write(Outbound::answer(line)) {
            tracing::debug!(upstream = %self.name, "answer to the upstream not sent: {e}");
        }
    }

    /// Whether request `id` is still waiting for its answer.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.lock().table.contains(id)
    }

    /// Fails request `id` with `err`, if it is still in flight (a transport refused it).
    pub(crate) fn fail_request(&self, id: u64, err: UpstreamError) {
        let entry = self.lock().table.remove(id);
        if let Some(entry) = entry {
            self.fail(entry.reply, err);
        }
    }

    fn unavailable(&self, reason: &str) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.name.to_string(),
            reason: reason.to_owned(),
        }
    }

    fn closed_error(&self, reason: &str) -> UpstreamError {
        UpstreamError::Closed {
            upstream: self.name.to_string(),
            reason: reason.to_owned(),
        }
    }

    fn write_error(&self, e: WriteError) -> UpstreamError {
        match e {
            WriteError::Closed => self.unavailable("its input is closed"),
            WriteError::Full(queued) => UpstreamError::Overloaded {
                upstream: self.name.to_string(),
                queued,
            },
        }
    }
}

fn garbage(line: &[u8], problem: &str) -> String {
    format!(
        "it sent something that is not JSON-RPC ({problem}): {}",
        preview(line)
    )
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(120)]);
    if line.len() > 120 {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}
