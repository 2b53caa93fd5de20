//! What the HTTP transport asks of the store its Streamable HTTP sessions are kept in, and
//! the store of one replica that shares nothing ([`Unshared`]).
//!
//! The store speaks of sessions by the token hosts present; it knows no HTTP: the events of a
//! session's stream are handed back as ids and message bytes, which the transport writes as
//! server-sent events.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::outlet::Outlet;
use crate::session::{Relay, Session};

/// Opens, on this replica, what a session the store holds needs to be served here: its
/// local outlet (the streams of its POSTs, whose backlog paces the host), registered for
/// session `id`.
pub trait Locals: Send + Sync {
    fn open(&self, id: u64) -> Arc<dyn Outlet>;
}

/// Where a session's events read from the store go: to the host's open GET stream.
pub trait EventSink: Send {
    /// Hands the host the event `id` carrying `message`; false once the host is gone.
    fn send(&mut self, id: &str, message: &[u8]) -> bool;
    /// Bytes handed over and not yet taken by the host (the store reads no more past the
    /// session queue limit).
    fn backlog(&self) -> usize;
    /// Whether the host is gone.
    fn is_closed(&self) -> bool;
}

/// The store of Streamable HTTP sessions, shared by replicas or not.
pub trait SessionStore: Send + Sync {
    /// Whether sessions are shared with other replicas at all.
    fn is_shared(&self) -> bool;
    /// The outlet of a new session `token`: what concerns the session as a whole goes to the
    /// store; `local` (its POSTs' streams) lives as long as the session and gives its backlog.
    fn outlet(&self, token: &str, local: Arc<dyn Outlet>) -> Arc<dyn Outlet>;
    /// What a new session reports to the store, if it is shared.
    fn relay(&self, token: &str) -> Option<Arc<dyn Relay>>;
    /// Records a session whose `initialize` was just answered, with this replica its home.
    fn create<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, Result<(), String>>;
    /// The session `token` names, copied here from the store, or `None` if no replica knows
    /// it (or the store cannot be reached).
    fn adopt<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Option<Arc<Session>>>;
    /// A request came for the session: its record lives on.
    fn touch(&self, token: &str);
    /// Makes this replica the session's home (a host opened its GET stream here).
    fn claim<'a>(&'a self, session: &'a Arc<Session>) -> BoxFuture<'a, ()>;
    /// The host ended the session: every replica forgets it.
    fn end<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ()>;
    /// Whether the store still holds the session (unknown counts as yes).
    fn exists<'a>(&'a self, token: &'a str) -> BoxFuture<'a, bool>;
    /// Starts handing `sink` the session's events after `after` (an id the store gave; `None`:
    /// new ones only) until the host goes or the session ends; false if the store keeps no
    /// events for it.
    fn events(&self, session: &Arc<Session>, after: Option<&str>, sink: Box<dyn EventSink>)
        -> bool;
    /// The replica that runs `task` of the session, when it is another one.
    fn task_elsewhere<'a>(
        &'a self,
        session: &'a Session,
        task: &'a str,
    ) -> BoxFuture<'a, Option<String>>;
    /// Has `replica` serve `body` (a request of `session`'s) and returns its answer.
    fn forward<'a>(
        &'a self,
        session: &'a Session,
        replica: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Bytes>;
}

/// One replica's sessions, shared with no other: nothing is recorded, nothing is found
/// elsewhere, and a session's outlet is its local one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unshared;

impl SessionStore for Unshared {
    fn is_shared(&self) -> bool {
        false
    }

    fn outlet(&self, _token: &str, local: Arc<dyn Outlet>) -> Arc<dyn Outlet> {
        local
    }

    fn relay(&self, _token: &str) -> Option<Arc<dyn Relay>> {
        None
    }

    fn create<'a>(&'a self, _: &'a Session) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn adopt<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Option<Arc<Session>>> {
        Box::pin(async { None })
    }

    fn touch(&self, _: &str) {}

    fn claim<'a>(&'a self, _: &'a Arc<Session>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn end<'a>(&'a self, _: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// A session this replica let go idle is held by no other.
    fn exists<'a>(&'a self, _: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }

    fn events(&self, _: &Arc<Session>, _: Option<&str>, _: Box<dyn EventSink>) -> bool {
        false
    }

    fn task_elsewhere<'a>(&'a self, _: &'a Session, _: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }

    fn forward<'a>(&'a self, _: &'a Session, _: &'a str, _: &'a [u8]) -> BoxFuture<'a, Bytes> {
        Box::pin(async { Bytes::new() })
    }
}
