//! The table of requests sent to one upstream and not yet answered, and what the rest of
//! Manifold is told about each one.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::connection::Connection;
use crate::error::UpstreamError;

/// The host side of a request forwarded for a host: told of its progress and, exactly once,
/// of how it ended. The server implements it; this crate knows nothing of sessions or of the
/// transports hosts use.
pub trait Exchange: Send + Sync {
    /// A progress notification for this request; `params` is JSON text carrying the host's
    /// own progress token.
    fn progress(&self, params: &str);
    /// The upstream's answer, or the failure that ended the request. Called once, from
    /// whichever thread learnt of it (for stdio upstreams: the reader thread).
    fn finish(self: Box<Self>, outcome: Outcome<'_>);
    /// The session the request came from (0: none, or no host stands for it at the moment),
    /// to cancel a session's requests when it ends.
    fn session(&self) -> u64;
    /// Whether this is the request with id `host_id` (canonical JSON text, see
    /// `manifold_protocol::envelope::canonical_id`) of session `session`.
    fn is(&self, session: u64, host_id: &str) -> bool;
    /// A request from the upstream to its client (sampling, elicitation, roots, ping) made
    /// while this request was in flight, and found to belong to it. The exchange forwards it
    /// to its host, or refuses it through `request.reply`.
    fn server_request(&self, request: ServerRequest);
    /// A notification from the upstream that belongs with this request (e.g.
    /// `notifications/elicitation/complete`), as a complete line.
    fn related(&self, line: &[u8]);
}

/// The host behind a connection that serves one session alone (an isolated upstream): what
/// the upstream asks of a client, or tells it, goes there even with no request in flight.
pub trait Peer: Send + Sync {
    fn server_request(&self, request: ServerRequest);
    fn related(&self, line: &[u8]);
}

/// A request an upstream sent to its client.
#[derive(Debug)]
pub struct ServerRequest {
    pub method: String,
    /// JSON text of the params, if any.
    pub params: Option<String>,
    pub reply: ServerReply,
}

/// The way back to the upstream for one of its requests: its id and its connection. Dropping
/// it unanswered tells the upstream nothing (the upstream's own timeout then applies).
#[derive(Debug)]
pub struct ServerReply {
    pub(crate) conn: Weak<Connection>,
    /// The upstream's id of its request, as JSON text.
    pub(crate) id: Box<str>,
    pub(crate) upstream: Box<str>,
}

impl ServerReply {
    /// The upstream this request came from.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The upstream's id of its request, as JSON text.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Answers with a result (JSON text).
    pub fn result(self, result: &str) {
        let mut line = Vec::with_capacity(result.len() + 48);
        manifold_protocol::write::response(&mut line, &self.id, result);
        self.send(line);
    }

    /// Answers with an error object (JSON text, as a host sent it).
    pub fn raw_error(self, error: &str) {
        let mut line = Vec::with_capacity(error.len() + 48);
        manifold_protocol::write::raw_error_response(&mut line, &self.id, error);
        self.send(line);
    }

    /// Answers with an error.
    pub fn error(self, code: i64, message: &str) {
        let mut line = Vec::new();
        let err = manifold_protocol::ErrorObject::new(code, message);
        manifold_protocol::write::error_response(&mut line, Some(&self.id), &err);
        self.send(line);
    }

    fn send(self, line: Vec<u8>) {
        if let Some(conn) = self.conn.upgrade() {
            conn.send_answer(line);
        }
    }
}

/// How a forwarded request ended.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// The `result` member of the upstream's answer, as JSON text.
    Result(&'a str),
    /// The `error` member of the upstream's answer, as JSON text.
    Error(&'a str),
    /// No answer will come (timeout, upstream gone, input refused, cancelled by Manifold).
    Failed(UpstreamError),
}

/// An upstream's answer to one of Manifold's own requests, payload kept as its JSON text.
#[derive(Debug)]
pub enum Answer {
    Result(String),
    /// The error object, as the upstream wrote it.
    Error(String),
}

/// What to do with the answer.
pub(crate) enum Reply {
    /// Hand it to the host side (the hot path: done on the thread that read it, without
    /// waking any task).
    Forward(Forward),
    /// Hand it to a waiting task (handshake, list fetches, fan-outs).
    Channel(oneshot::Sender<Result<Answer, UpstreamError>>),
}

/// A request being forwarded for a host.
pub struct Forward {
    pub exchange: Box<dyn Exchange>,
    /// The host's progress token (JSON text), when Manifold replaced it with the upstream id.
    pub progress_token: Option<Box<str>>,
    /// How long this request may go without an answer, if not the upstream's usual time.
    pub timeout: Option<std::time::Duration>,
}

pub(crate) struct Entry {
    pub reply: Reply,
    pub deadline: Instant,
    /// How much time progress buys: the deadline moves to now + this on each notification.
    pub timeout: std::time::Duration,
    /// The latest the deadline may move to.
    pub limit: Instant,
}

/// Pending requests by upstream id.
#[derive(Default)]
pub(crate) struct Pending {
    pub entries: HashMap<u64, Entry>,
}

impl Pending {
    /// Removes and returns every entry whose deadline has passed.
    pub fn take_expired(&mut self, now: Instant) -> Vec<(u64, Entry)> {
        self.take_where(|e| e.deadline <= now)
    }

    /// Removes and returns every entry `pick` selects.
    pub fn take_where(&mut self, pick: impl Fn(&Entry) -> bool) -> Vec<(u64, Entry)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| pick(e))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.entries.remove(&id).map(|e| (id, e)))
            .collect()
    }
}
