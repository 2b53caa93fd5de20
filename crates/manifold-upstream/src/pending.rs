//! The table of requests sent to one upstream and not yet answered, and what the rest of
//! Manifold is told about each one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::sync::oneshot;

use crate::connection::Connection;
use crate::error::UpstreamError;

mod delivery;
mod guard;

pub(crate) use delivery::Delivery;
pub use guard::{guards_held, TableGuard};

/// The host side of a request forwarded for a host: told of its progress and, exactly once,
/// of how it ended. The server implements it; this crate knows nothing of sessions or of the
/// transports hosts use.
pub trait Exchange: Send + Sync {
    /// A progress notification for this request; `params` is JSON text carrying the host's
    /// own progress token.
    fn progress(&self, params: &str);
    /// The upstream's answer, or the failure that ended the request. Called once, from
    /// whichever thread learnt of it (for stdio upstreams: the reader thread).
    fn finish(self: Box<Self>, outcome: Finish<'_>);
    /// The session the request came from (0: none, or no host stands for it at the moment),
    /// to cancel a session's requests when it ends.
    fn session(&self) -> u64;
    /// Whether this is the request with id `host_id` (canonical JSON text, see
    /// `manifold_protocol::envelope::canonical_id`) of session `session`.
    fn is(&self, session: u64, host_id: &str) -> bool;
    /// The host request this one stands for, if that stays the same for as long as it is in
    /// flight (`is` and `session` then answer by it): the connection finds it by this key
    /// when a host cancels, without asking every request in flight. `None` (the default): it
    /// may change (a request parked while its host is asked for input, and taken up by the
    /// host's retry); such a request is asked `is` and `session` instead.
    fn key(&self) -> Option<RequestKey> {
        None
    }
    /// A request from the upstream to its client (sampling, elicitation, roots, ping) made
    /// while this request was in flight, and found to belong to it. The exchange forwards it
    /// to its host, or refuses it through `request.reply`.
    fn server_request(&self, request: ServerRequest);
    /// A notification from the upstream that belongs with this request (e.g.
    /// `notifications/elicitation/complete`), as a complete line.
    fn related(&self, line: &[u8]);
}

/// A host request as the pending table indexes it: its session and (a hash of) its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestKey {
    session: u64,
    id: u64,
}

impl RequestKey {
    /// The key of request `host_id` (canonical JSON text) of session `session`. Two requests
    /// may share a key (the id is hashed): the table still asks [`Exchange::is`].
    pub fn new(session: u64, host_id: &str) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        host_id.hash(&mut hasher);
        Self {
            session,
            id: hasher.finish(),
        }
    }
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
pub enum Finish<'a> {
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
    Forward(Forwarded),
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

/// A forwarded request as the table keeps it.
pub(crate) struct Forwarded {
    pub delivery: Arc<Delivery>,
    pub progress_token: Option<Box<str>>,
    /// The host request it stands for, when that never changes (see [`Exchange::key`]).
    key: Option<RequestKey>,
}

impl Forwarded {
    pub fn new(fwd: Forward) -> Self {
        Self {
            key: fwd.exchange.key(),
            delivery: Delivery::new(fwd.exchange),
            progress_token: fwd.progress_token,
        }
    }
}

pub(crate) struct Entry {
    pub reply: Reply,
    pub deadline: Instant,
    /// How much time progress buys: the deadline moves to now + this on each notification.
    pub timeout: std::time::Duration,
    /// The latest the deadline may move to.
    pub limit: Instant,
}

impl Entry {
    fn forwarded(&self) -> Option<&Forwarded> {
        match &self.reply {
            Reply::Forward(f) => Some(f),
            Reply::Channel(_) => None,
        }
    }
}

/// Pending requests by upstream id, and the forwarded ones by the host request they stand
/// for, so that a host's cancellation is a lookup, not a scan.
#[derive(Default)]
pub(crate) struct Pending {
    entries: HashMap<u64, Entry>,
    /// Forwarded requests with a key: (session, hashed host id, upstream id).
    by_host: BTreeSet<(u64, u64, u64)>,
    /// Forwarded requests without one (their host request may change): asked one by one.
    unkeyed: HashSet<u64>,
}

impl Pending {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.entries.contains_key(&id)
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        self.entries.get_mut(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.entries.iter().map(|(id, e)| (*id, e))
    }

    pub fn insert(&mut self, id: u64, entry: Entry) {
        match entry.forwarded().map(|f| f.key) {
            Some(Some(key)) => {
                self.by_host.insert((key.session, key.id, id));
            }
            Some(None) => {
                self.unkeyed.insert(id);
            }
            None => {}
        }
        if let Some(old) = self.entries.insert(id, entry) {
            // Ids are never reused; should one be, the index must not keep the old entry.
            self.unindex(id, &old);
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        self.unindex(id, &entry);
        Some(entry)
    }

    fn unindex(&mut self, id: u64, entry: &Entry) {
        match entry.forwarded().map(|f| f.key) {
            Some(Some(key)) => {
                self.by_host.remove(&(key.session, key.id, id));
            }
            Some(None) => {
                self.unkeyed.remove(&id);
            }
            None => {}
        }
    }

    /// Removes every entry (the connection closed).
    pub fn drain(&mut self) -> Vec<Entry> {
        self.by_host.clear();
        self.unkeyed.clear();
        self.entries.drain().map(|(_, e)| e).collect()
    }

    /// The forwarded request that is request `host_id` of `session`: looked up by its key,
    /// or asked among those without one.
    pub fn find_host(&self, session: u64, host_id: &str) -> Option<u64> {
        let key = RequestKey::new(session, host_id);
        let keyed = self
            .by_host
            .range((key.session, key.id, 0)..=(key.session, key.id, u64::MAX))
            .map(|(_, _, id)| *id);
        keyed
            .chain(self.unkeyed.iter().copied())
            .find(|id| self.delivery(*id).is_some_and(|d| d.is(session, host_id)))
    }

    /// Removes and returns every forwarded request of `session`.
    pub fn take_session(&mut self, session: u64) -> Vec<(u64, Entry)> {
        let keyed = self
            .by_host
            .range((session, 0, 0)..=(session, u64::MAX, u64::MAX))
            .map(|(_, _, id)| *id);
        let ids: Vec<u64> = keyed
            .chain(self.unkeyed.iter().copied())
            .filter(|id| self.delivery(*id).is_some_and(|d| d.session() == session))
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|e| (id, e)))
            .collect()
    }

    fn delivery(&self, id: u64) -> Option<&Delivery> {
        self.entries.get(&id)?.forwarded().map(|f| &*f.delivery)
    }

    /// Removes and returns every entry whose deadline has passed.
    pub fn take_expired(&mut self, now: Instant) -> Vec<(u64, Entry)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|e| (id, e)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
