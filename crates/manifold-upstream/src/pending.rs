//! The table of requests sent to one upstream and not yet answered, and what the rest of
//! Manifold is told about each one.

use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::oneshot;

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
    /// The session the request came from (0: none), to cancel a session's requests when it
    /// ends.
    fn session(&self) -> u64;
    /// Whether this is the request with id `host_id` (canonical JSON text, see
    /// `manifold_protocol::envelope::canonical_id`) of session `session`.
    fn is(&self, session: u64, host_id: &str) -> bool;
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
}

pub(crate) struct Entry {
    pub reply: Reply,
    pub deadline: Instant,
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
