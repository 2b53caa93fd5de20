//! What comes back from the upstream: answers (to their requests, or failed when too large
//! to keep), progress, and the ends of requests (deadlines, the connection closing).

use std::sync::Arc;
use std::time::Instant;

use manifold_protocol::envelope::id_of_fragments;
use manifold_protocol::{Envelope, RawObject};

use super::{preview, Connection};
use crate::error::UpstreamError;
use crate::pending::{Answer, Delivery, Entry, Finish, Reply};

impl Connection {
    pub(super) fn response(&self, env: &Envelope<'_>, line: &[u8]) {
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
    pub(super) fn unattributed_error(&self, env: &Envelope<'_>, line: &[u8]) {
        let only = {
            let mut st = self.lock();
            if st.table.len() == 1 && env.error.is_some() {
                let id = st.table.iter().next().map(|(id, _)| id);
                id.and_then(|id| st.table.remove(id))
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
        let entry = id.and_then(|id| self.lock().table.remove(id));
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

    /// Delivers an answer read from the upstream. Unknown ids (late answers to cancelled or
    /// timed-out requests) are dropped, as the spec requires.
    pub(super) fn answer(&self, id: u64, result: Option<&str>, error: Option<&str>) -> bool {
        let Some(entry) = self.lock().table.remove(id) else {
            return false;
        };
        self.deliver(entry.reply, result, error);
        true
    }

    pub(super) fn deliver(&self, reply: Reply, result: Option<&str>, error: Option<&str>) {
        match reply {
            Reply::Forward(fwd) => {
                // Whatever it answered, it answers.
                if let Some(breaker) = self.breaker.get() {
                    breaker.succeeded();
                }
                let outcome = match (result, error) {
                    (_, Some(e)) => Finish::Error(e),
                    (r, None) => Finish::Result(r.unwrap_or("null")),
                };
                Delivery::finish(fwd.delivery, outcome);
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
    pub(super) fn progress(&self, params: &str) -> bool {
        let Ok(mut obj) = RawObject::parse(params) else {
            return false;
        };
        let Some(id) = obj.get("progressToken").and_then(|t| t.parse::<u64>().ok()) else {
            return false;
        };
        let (delivery, token) = {
            let mut st = self.lock();
            let Some(entry) = st.table.get_mut(id) else {
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
            (Arc::clone(&fwd.delivery), String::from(&**token))
        };
        obj.set_raw("progressToken", token);
        // Outside the lock. Progress still cannot overtake the answer (the spec forbids
        // progress after the response): an answer that comes meanwhile is delivered once
        // this is done (see `Delivery::finish`).
        delivery.progress(&obj.to_text());
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
            st.table.drain()
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
    pub(super) fn fail(&self, reply: Reply, err: UpstreamError) {
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

    pub(super) fn fail_uncounted(&self, reply: Reply, err: UpstreamError) {
        match reply {
            Reply::Channel(tx) => {
                let _ = tx.send(Err(err));
            }
            Reply::Forward(fwd) => Delivery::finish(fwd.delivery, Finish::Failed(err)),
        }
    }
}
