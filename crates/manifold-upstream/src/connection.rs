//! One live connection to an upstream: the pending-request table, the id counter, timeouts,
//! cancellation and progress mapping, over a [`Wire`] that carries the messages (a child's
//! pipes, or HTTP). Callers on any thread send through it directly; whatever reads the
//! upstream's messages hands them to [`Connection::receive`]. It lives as long as one child
//! process or one HTTP session: a restart makes a new one.
//!
//! One file on purpose (about 600 lines): the pending table, the id counter, timeouts,
//! cancellation and `receive` share one lock and one invariant (every request is answered,
//! failed or refused exactly once), which is easiest to check where it is all in view. What
//! the stateless era adds (its per-request `_meta`, the methods it dropped, the
//! `subscriptions/listen` stream) is in the child module `stateless`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use manifold_protocol::envelope::id_of_fragments;
use manifold_protocol::version::Era;
use manifold_protocol::{codes, write, Envelope, Kind, RawObject};
use tokio::sync::oneshot;

mod stateless;
pub(crate) use stateless::{error_code, meta_members, ListenEnd, ListenFilter};

use crate::error::UpstreamError;
use crate::health::Breaker;
use crate::outbound::{target_in, Outbound};
use crate::pending::{
    Answer, Entry, Exchange, Forward, Outcome, Peer, Pending, Reply, ServerReply, ServerRequest,
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

    fn lock(&self) -> MutexGuard<'_, PendingState> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        self.lock().table.entries.len()
    }

    /// Sends request `msg` (its id one of [`Connection::next_id`]'s) whose answer goes to
    /// `fwd.exchange`. The exchange always hears how the request ended, even when it could not
    /// be sent at all.
    ///
    /// On a stateless-era connection the request must carry the era's `_meta` (see
    /// [`Connection::with_request_meta`]) and say so with its `version`
    /// ([`Connection::revision`]); one that does not gets it added here, at the cost of
    /// reading and rewriting the line.
    pub fn forward(&self, msg: Outbound, fwd: Forward) {
        // An open breaker refuses at once; closed, this is one atomic load.
        if let Some(Err(refused)) = self.breaker.get().map(|b| b.admit()) {
            return fwd.exchange.finish(Outcome::Failed(refused));
        }
        let Some(id) = msg.id else {
            let err = self.unavailable("Manifold forwarded a message without a request id (a bug)");
            return fwd.exchange.finish(Outcome::Failed(err));
        };
        let msg = self.completed(msg);
        let timeout = fwd.timeout;
        let entry = self.entry(Reply::Forward(fwd), timeout);
        {
            let mut st = self.lock();
            if let Some(reason) = &st.closed {
                let err = self.unavailable(reason);
                drop(st);
                if let Reply::Forward(fwd) = entry.reply {
                    fwd.exchange.finish(Outcome::Failed(err));
                }
                return;
            }
            st.table.entries.insert(id, entry);
        }
        if let Err(e) = self.write(msg) {
            // If the entry is gone, the answer or a failure already reached the exchange.
            if let Some(entry) = self.lock().table.entries.remove(&id) {
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
                .entries
                .insert(id, self.entry(Reply::Channel(tx), deadline));
        }
        if let Err(e) = self.write(msg) {
            self.lock().table.entries.remove(&id);
            return Err(self.write_error(e));
        }
        let answer = match limit {
            None => rx.await,
            Some(limit) => match tokio::time::timeout(limit, rx).await {
                Ok(answer) => answer,
                Err(_) => {
                    self.lock().table.entries.remove(&id);
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

    /// A host cancelled its request `host_id` (canonical id text) of `session`: drop the
    /// pending entry and tell the upstream, with the upstream's id. Returns whether this
    /// connection owned the request. A request already answered is not found, so a cancel
    /// that races the answer is harmless.
    pub fn cancel_for(&self, session: u64, host_id: &str, reason: Option<&str>) -> bool {
        let found = {
            let mut st = self.lock();
            let id = st.table.entries.iter().find_map(|(id, e)| match &e.reply {
                Reply::Forward(f) if f.exchange.is(session, host_id) => Some(*id),
                _ => None,
            });
            id.and_then(|id| st.table.entries.remove(&id).map(|e| (id, e)))
        };
        let Some((id, entry)) = found else {
            return false;
        };
        self.send_cancelled(id, reason);
        // The host asked for this; it expects no answer (and gets none: the exchange is
        // dropped without one).
        drop(entry);
        true
    }

    /// A session ended: every request it still has here is cancelled upstream and ended.
    pub fn cancel_session(&self, session: u64, reason: &str) -> usize {
        let taken = self.lock().table.take_where(|e| match &e.reply {
            Reply::Forward(f) => f.exchange.session() == session,
            Reply::Channel(_) => false,
        });
        let count = taken.len();
        for (id, entry) in taken {
            self.send_cancelled(id, Some(reason));
            self.fail(
                entry.reply,
                UpstreamError::Cancelled {
                    upstream: self.name.to_string(),
                    reason: reason.to_owned(),
                },
            );
        }
        count
    }

    fn send_cancelled(&self, id: u64, reason: Option<&str>) {
        if self.stateless.get().is_some() && self.wire.cancel(id) {
            return;
        }
        let mut params = format!("{{\"requestId\":{id}");
        if let Some(reason) = reason {
            params.push_str(",\"reason\":");
            params.push_str(&manifold_protocol::object::json_string(reason));
        }
        params.push('}');
        let _ = self.notify("notifications/cancelled", Some(&params));
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

    /// Calls `f` with the exchange a message from the upstream belongs to: the request whose
    /// stream carried it (`via`), or else the only host session with requests in flight here
    /// (its latest one). `Err` says why none could be chosen.
    fn with_owner<R>(
        &self,
        via: Option<u64>,
        f: impl FnOnce(&dyn Exchange) -> R,
    ) -> Result<R, &'static str> {
        let st = self.lock();
        fn forwarded(e: &Entry) -> Option<&dyn Exchange> {
            match &e.reply {
                Reply::Forward(fwd) => Some(&*fwd.exchange),
                Reply::Channel(_) => None,
            }
        }
        if let Some(id) = via {
            if let Some(exchange) = st.table.entries.get(&id).and_then(forwarded) {
                return Ok(f(exchange));
            }
        }
        let mut owner: Option<(u64, &dyn Exchange)> = None;
        // A request that stands for no host at the moment (a stateless host's, parked while
        // that host is asked for input) is chosen only when no other request is in flight:
        // it must not make the other hosts' requests ambiguous.
        let mut idle: Option<(u64, &dyn Exchange)> = None;
        for (id, entry) in &st.table.entries {
            let Some(exchange) = forwarded(entry) else {
                continue;
            };
            if exchange.session() == 0 {
                if idle.is_none_or(|(latest, _)| latest < *id) {
                    idle = Some((*id, exchange));
                }
                continue;
            }
            match owner {
                Some((_, o)) if o.session() != exchange.session() => {
                    return Err("several host sessions have requests in flight to this upstream, so Manifold cannot tell which host it is for; set isolation = \"session\" on the upstream to give each host its own connection")
                }
                Some((latest, _)) if latest > *id => {}
                _ => owner = Some((*id, exchange)),
            }
        }
        match owner.or(idle) {
            Some((_, exchange)) => Ok(f(exchange)),
            None => {
                Err("no host request is in flight to this upstream, so there is no host to ask")
            }
        }
    }

    /// A request from the upstream to its client: `ping` is answered here; the rest go to the
    /// host that owns the request in flight (see [`Connection::with_owner`]).
    fn server_request(self: &Arc<Self>, env: &Envelope<'_>, via: Option<u64>) {
        let Some(id) = env.id else { return };
        let method = env.method.as_deref().unwrap_or_default();
        let reply = ServerReply {
            conn: Arc::downgrade(self),
            id: id.into(),
            upstream: self.name.clone(),
        };
        if method == "ping" {
            return reply.result("{}");
        }
        let request = ServerRequest {
            method: method.to_owned(),
            params: env.params.map(str::to_owned),
            reply,
        };
        // The request moves into the closure; on failure it comes back to be refused, or
        // to go to the one host this connection serves (on the session's own stream).
        let mut request = Some(request);
        let routed = self.with_owner(via, |exchange| {
            if let Some(r) = request.take() {
                exchange.server_request(r);
            }
        });
        let Some(request) = request else { return };
        if let Some(peer) = self.peer.get() {
            return peer.server_request(request);
        }
        if let Err(why) = routed {
            tracing::warn!(upstream = %self.name, method, "request from the upstream refused: {why}");
            request.reply.error(
                codes::INTERNAL_ERROR,
                &format!("Manifold cannot forward {method}: {why}"),
            );
        }
    }

    /// A notification that belongs with a request in flight goes to that request's host.
    fn related(&self, message: &[u8], via: Option<u64>) {
        // Passed on as it came, as a line.
        let mut line = Vec::with_capacity(message.len() + 1);
        line.extend_from_slice(message);
        line.push(b'\n');
        let line = &line[..];
        if let Err(why) = self.with_owner(via, |exchange| exchange.related(line)) {
            match self.peer.get() {
                Some(peer) => peer.related(line),
                None => tracing::debug!(upstream = %self.name, "notification dropped: {why}"),
            }
        }
    }

    fn response(&self, env: &Envelope<'_>, line: &[u8]) {
        let id = env
            .id
            .filter(|id| *id != "null")
            .and_then(|id| id.parse::<u64>().ok());
        match id {
            Some(id) => {
                if !self.answer(id, env.result, env.error) && !self.listen_answered(id, env.error) {
                    tracing::debug!(
                        upstream = %self.name,
                        id,
                        "answer to an unknown or finished request dropped"
                    );
                }
            }
            None => self.unattributed_error(env, line),
        }
    }

    /// An answer without a usable id: an upstream that could not parse a request says so
    /// with `id: null`. It belongs to the one request in flight, if there is just one;
    /// otherwise it cannot be told apart and is logged.
    fn unattributed_error(&self, env: &Envelope<'_>, line: &[u8]) {
        let only = {
            let mut st = self.lock();
            if st.table.entries.len() == 1 && env.error.is_some() {
                let id = st.table.entries.keys().next().copied();
                id.and_then(|id| st.table.entries.remove(&id))
            } else {
                None
            }
        };
        match only {
            Some(entry) => {
                tracing::warn!(
                    upstream = %self.name,
                    "answered its only request in flight with an error without id: {}",
                    preview(line)
                );
                let error = env.error.unwrap_or("null");
                self.deliver(entry.reply, env.result, Some(error));
            }
            None => tracing::warn!(
                upstream = %self.name,
                "answer without a usable id dropped (it cannot be matched to a request): {}",
                preview(line)
            ),
        }
    }

    /// An answer too large to keep was dropped unread: fail the request it answered, if its
    /// id could be read from the kept ends, and nothing else.
    pub(crate) fn oversize(&self, len: usize, max: usize, head: &[u8], tail: &[u8]) {
        let id = id_of_fragments(head, tail).and_then(|id| id.parse::<u64>().ok());
        let entry = id.and_then(|id| self.lock().table.entries.remove(&id));
        match entry {
            Some(entry) => {
                tracing::warn!(upstream = %self.name, len, max, "answer over the size limit dropped; its request failed");
                self.fail(
                    entry.reply,
                    UpstreamError::AnswerTooLarge {
                        upstream: self.name.to_string(),
                        len,
                        max,
                    },
                );
            }
            None => tracing::warn!(
                upstream = %self.name,
                len,
                max,
                "a message over the size limit was dropped; no request in flight could be matched to it"
            ),
        }
    }

    /// Whether request `id` is still waiting for its answer.
    pub(crate) fn is_pending(&self, id: u64) -> bool {
        self.lock().table.entries.contains_key(&id)
    }

    /// Fails request `id` with `err`, if it is still in flight (a transport refused it).
    pub(crate) fn fail_request(&self, id: u64, err: UpstreamError) {
        let entry = self.lock().table.entries.remove(&id);
        if let Some(entry) = entry {
            self.fail(entry.reply, err);
        }
    }

    /// Delivers an answer read from the upstream. Unknown ids (late answers to cancelled or
    /// timed-out requests) are dropped, as the spec requires.
    fn answer(&self, id: u64, result: Option<&str>, error: Option<&str>) -> bool {
        let Some(entry) = self.lock().table.entries.remove(&id) else {
            return false;
        };
        self.deliver(entry.reply, result, error);
        true
    }

    fn deliver(&self, reply: Reply, result: Option<&str>, error: Option<&str>) {
        match reply {
            Reply::Forward(fwd) => {
                // Whatever it answered, it answers.
                if let Some(breaker) = self.breaker.get() {
                    breaker.succeeded();
                }
                let outcome = match (result, error) {
                    (_, Some(e)) => Outcome::Error(e),
                    (r, None) => Outcome::Result(r.unwrap_or("null")),
                };
                fwd.exchange.finish(outcome);
            }
            Reply::Channel(tx) => {
                let answer = match (result, error) {
                    (_, Some(e)) => Answer::Error(e.to_owned()),
                    (r, None) => Answer::Result(r.unwrap_or("null").to_owned()),
                };
                let _ = tx.send(Ok(answer));
            }
        }
    }

    /// Forwards an upstream's progress notification to the request it belongs to, with the
    /// host's own progress token. Returns false if no request matches.
    fn progress(&self, params: &str) -> bool {
        let Ok(mut obj) = RawObject::parse(params) else {
            return false;
        };
        let Some(id) = obj.get("progressToken").and_then(|t| t.parse::<u64>().ok()) else {
            return false;
        };
        let mut st = self.lock();
        let Some(entry) = st.table.entries.get_mut(&id) else {
            return false;
        };
        // Progress shows the request is alive: its time starts again, up to the limit.
        entry.deadline = (Instant::now() + entry.timeout).min(entry.limit);
        let Reply::Forward(fwd) = &entry.reply else {
            return false;
        };
        let Some(token) = &fwd.progress_token else {
            return false;
        };
        obj.set_raw("progressToken", String::from(&**token));
        // Under the lock, so that progress cannot overtake the answer (which removes the
        // entry first): the spec forbids progress after the response.
        fwd.exchange.progress(&obj.to_text());
        true
    }

    /// Fails every request whose deadline passed, and tells the upstream to stop on them.
    pub(crate) fn expire(&self, now: Instant) {
        let expired = self.lock().table.take_expired(now);
        for (id, entry) in expired {
            let err = UpstreamError::Timeout {
                upstream: self.name.to_string(),
                after: entry.timeout,
            };
            self.fail(entry.reply, err);
            self.send_cancelled(id, Some("timed out in Manifold"));
        }
    }

    /// Marks the connection closed and fails every pending request at once.
    pub(crate) fn close(&self, reason: &str) {
        let drained: Vec<Entry> = {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.closed = Some(reason.to_owned());
            }
            st.table.entries.drain().map(|(_, e)| e).collect()
        };
        self.wire.close(reason);
        for entry in drained {
            // The connection's end is not counted against the breaker: the actor restarts it,
            // and a new connection starts with the breaker closed.
            self.fail_uncounted(entry.reply, self.closed_error(reason));
        }
    }

    /// Fails a request; a failure that says the upstream is not answering (a timeout, a
    /// refusal, a lost answer) counts against its breaker.
    fn fail(&self, reply: Reply, err: UpstreamError) {
        let counted = matches!(reply, Reply::Forward(_))
            && !matches!(
                err,
                UpstreamError::Cancelled { .. } | UpstreamError::AnswerTooLarge { .. }
            );
        if let (true, Some(breaker)) = (counted, self.breaker.get()) {
            if breaker.failed(&err.to_string()) {
                tracing::warn!(upstream = %self.name, "circuit breaker opened: {err}; calls to it are refused until a probe finds it answering");
            }
        }
        self.fail_uncounted(reply, err);
    }

    fn fail_uncounted(&self, reply: Reply, err: UpstreamError) {
        match reply {
            Reply::Channel(tx) => {
                let _ = tx.send(Err(err));
            }
            Reply::Forward(fwd) => fwd.exchange.finish(Outcome::Failed(err)),
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
