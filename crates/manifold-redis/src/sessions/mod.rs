//! Streamable HTTP sessions shared by replicas through Redis (`[sessions] store = "redis"`).
//!
//! A session's record (who created it, the negotiated version, what the host declared, its
//! log level and subscriptions) is kept in Redis, so that any replica can serve any of the
//! session's requests: a replica that gets a request for a session it does not hold reads the
//! record and makes a local copy. What concerns the session as a whole has one *home*
//! replica at a time: it sends the session its notifications (list changes, log messages,
//! resource updates) and holds its upstream subscriptions. The home is the replica that
//! created the session until a host opens its GET stream elsewhere (that replica claims it),
//! or until its replica stops: each replica renews a liveness key twice a second, and the
//! others take over the sessions of one whose key expired.
//!
//! Messages for the session as a whole go to a Redis stream of its own, whichever replica
//! writes them; a GET stream reads it (blocking reads on a connection of its own), so that
//! a host that reconnects with `Last-Event-ID` to any replica gets what it missed within the
//! replay window (`server.replay_events`). A host's answer to a request another replica sent
//! it (ids `mf-{replica}-N`) is passed to that replica over pub/sub. The answers to POSTs
//! stay local: they go back on the POST's own response.
//!
//! Keys (`{p}` is `sessions.key_prefix`), each expiring after `session_idle_timeout` without
//! a request:
//! - `{p}:session:{token}`: a hash (`team`, `caller`, `version`, `capabilities`, `info`,
//!   `level`, `home`); `{p}:session:{token}:subs`: a set of exposed URIs;
//!   `{p}:session:{token}:tasks`: the exposed ids of its tasks; `{p}:session:{token}:events`:
//!   the stream.
//! - `{p}:replica:{id}`: a replica's liveness; `{p}:replicas`: the replicas known;
//!   `{p}:homes:{id}`: the sessions a replica is home to.
//!
//! Channels: `{p}:sessions` (`end`, `refresh` and `moved`, for every replica) and
//! `{p}:to:{id}` (for one replica: a host's answer to its request, a request of a task it runs,
//! and the answer to a request it had another replica serve).

//!
//! By concern: `record` (the session's record: create, copy, renew, end, and the writes made
//! in order), `home` (liveness of replicas, takeover, claims), `events` (the session's stream)
//! and `relay` (pub/sub between replicas). What the store knows of a session on this replica
//! (whether another replica is its home) is kept in its [`relay::SessionRelay`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use manifold_config::RedisConfig;
use manifold_core::outlet::Outlet;
use manifold_core::replicas::{EventSink, Locals, Relay, SessionStore};
use manifold_core::router::Router;
use manifold_core::session::{Client as HostClient, Session};
use redis::FromRedisValue;
use tokio::sync::mpsc;

use crate::connection::Connection;
use crate::health::{lock, User};

mod events;
mod home;
mod record;
mod relay;

/// How often a replica renews its liveness, and looks for replicas that stopped.
const BEAT: Duration = Duration::from_millis(500);
/// A replica whose liveness is this old is gone; its sessions are taken over.
const ALIVE_FOR: Duration = Duration::from_millis(1500);
/// How long one blocking read of a session's events waits before looking again.
const BLOCK: Duration = Duration::from_secs(5);
/// Sessions whose last renewal a replica remembers before it forgets the stale ones.
const TOUCHED_KEPT: usize = 4096;

/// The store, one per process serving HTTP.
pub(crate) struct Store {
    conn: Arc<Connection>,
    /// What an outage means for sessions, as the URL's health logs it.
    _user: Arc<User>,
    prefix: String,
    /// This replica's id: 16 hex digits, new for each process.
    replica: Arc<str>,
    /// A record expires after this long without a request.
    ttl: Duration,
    /// Events kept per session stream.
    replay: usize,
    timeout: Duration,
    router: Weak<Router>,
    /// Opens a copied session's local outlet.
    locals: Arc<dyn Locals>,
    /// The session queue limit (a GET stream stops reading Redis while its host lags past it).
    queue_limit: usize,
    writes: mpsc::UnboundedSender<Write>,
    /// When this replica last renewed each session's keys.
    touched: Mutex<HashMap<Box<str>, Instant>>,
    /// The relays of the sessions held here, by token: what the store knows of each.
    relays: Mutex<HashMap<Box<str>, Weak<relay::SessionRelay>>>,
    /// Requests this replica had another one serve, waiting for their answers.
    calls: Mutex<Calls>,
}

#[derive(Default)]
pub(super) struct Calls {
    pub(super) next: u64,
    pub(super) waiting: HashMap<u64, tokio::sync::oneshot::Sender<Bytes>>,
}

/// Writes done in order by one task, off the paths that serve requests.
pub(super) enum Write {
    /// A message for the session as a whole.
    Event { token: Box<str>, message: Vec<u8> },
    /// The session's level or subscriptions changed here.
    State {
        token: Box<str>,
        level: Option<u8>,
        subs: Vec<String>,
    },
    /// The session's found tools (tool discovery) changed here: most recently used first.
    Found {
        token: Box<str>,
        found: Vec<Box<str>>,
    },
    /// A host's answer, for the replica that sent the request.
    Answer {
        token: Box<str>,
        replica: String,
        message: Vec<u8>,
    },
    /// The session created a task (its exposed id).
    Task { token: Box<str>, task: String },
    /// A request for another replica, or the answer to one (`call` and `reply` messages).
    Call { replica: String, message: Vec<u8> },
    /// The session's keys live on (a request came).
    Touch { token: Box<str> },
}

/// What a record holds.
pub(super) struct Record {
    team: String,
    caller: String,
    version: &'static str,
    client: HostClient,
    level: Option<u8>,
    home: String,
    subs: Vec<String>,
    /// The discovery settings its host chose (a `_meta` object's JSON text).
    discovery: Option<String>,
    /// Its found tools, most recently used first.
    found: Vec<Box<str>>,
}

impl Store {
    /// Connects (lazily: a Redis that is down now is retried on use) and starts the tasks
    /// that keep the replica alive, hear the other replicas, and write in order.
    pub(crate) fn start(
        conn: Arc<Connection>,
        config: &RedisConfig,
        router: &Arc<Router>,
        locals: Arc<dyn Locals>,
    ) -> Arc<dyn SessionStore> {
        let user = conn.health().user(User {
            name: "the session store",
            down: "each replica serves the sessions it holds until it is back".into(),
            back: "sessions are shared".into(),
        });
        let settings = router.settings();
        let (writes, rx) = mpsc::unbounded_channel();
        let store = Arc::new(Self {
            conn,
            _user: user,
            prefix: config.key_prefix.clone(),
            replica: manifold_core::replicas::replica_id().into(),
            ttl: settings.http.session_idle_timeout,
            replay: settings.http.replay_events.max(1),
            timeout: config.timeout,
            router: Arc::downgrade(router),
            locals,
            queue_limit: settings.session_queue_bytes,
            writes,
            touched: Mutex::new(HashMap::new()),
            relays: Mutex::new(HashMap::new()),
            calls: Mutex::new(Calls::default()),
        });
        let rt = router.runtime();
        rt.spawn(Arc::clone(&store).write_loop(rx));
        rt.spawn(Self::listen_loop(Arc::downgrade(&store)));
        rt.spawn(Self::beat_loop(Arc::downgrade(&store)));
        tracing::info!(replica = &*store.replica, "sessions kept in Redis");
        Arc::new(Sessions(store))
    }

    pub(super) fn key(&self, token: &str) -> String {
        format!("{}:session:{token}", self.prefix)
    }

    pub(super) fn subs_key(&self, token: &str) -> String {
        format!("{}:session:{token}:subs", self.prefix)
    }

    pub(super) fn tasks_key(&self, token: &str) -> String {
        format!("{}:session:{token}:tasks", self.prefix)
    }

    pub(super) fn events_key(&self, token: &str) -> String {
        format!("{}:session:{token}:events", self.prefix)
    }

    pub(super) fn homes_key(&self, replica: &str) -> String {
        format!("{}:homes:{replica}", self.prefix)
    }

    pub(super) fn alive_key(&self, replica: &str) -> String {
        format!("{}:replica:{replica}", self.prefix)
    }

    pub(super) fn replicas_key(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    pub(super) fn channel(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    pub(super) fn inbox(&self, replica: &str) -> String {
        format!("{}:to:{replica}", self.prefix)
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// `pipe` on the shared connection (within the timeout): `None` if it failed, which the
    /// URL's health is told of (and logs once per outage).
    pub(super) async fn query<T: FromRedisValue + Send>(
        &self,
        what: &str,
        pipe: &redis::Pipeline,
    ) -> Option<T> {
        let outcome = self
            .conn
            .run(self.timeout, |mut c| async move {
                pipe.query_async::<T>(&mut c).await
            })
            .await;
        outcome
            .map_err(|e| tracing::debug!("session store: {what} failed: {e}"))
            .ok()
    }

    /// [`Self::query`] of one command.
    pub(super) async fn query_one<T: FromRedisValue + Send>(
        &self,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Option<T> {
        let outcome = self
            .conn
            .run(self.timeout, |mut c| async move {
                cmd.query_async::<T>(&mut c).await
            })
            .await;
        outcome
            .map_err(|e| tracing::debug!("session store: {what} failed: {e}"))
            .ok()
    }
}

/// The store as the HTTP transport holds it.
struct Sessions(Arc<Store>);

impl SessionStore for Sessions {
    fn is_shared(&self) -> bool {
        true
    }

    fn outlet(&self, token: &str, local: Arc<dyn Outlet>) -> Arc<dyn Outlet> {
        self.0.outlet(token, local)
    }

    fn relay(&self, token: &str) -> Option<Arc<dyn Relay>> {
        Some(self.0.relay(token, false))
    }

    fn create<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.0.create(session))
    }

    fn adopt<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Option<Arc<Session>>> {
        Box::pin(self.0.adopt(token))
    }

    fn touch(&self, token: &str) {
        self.0.touch(token);
    }

    fn claim<'a>(&'a self, session: &'a Arc<Session>) -> BoxFuture<'a, ()> {
        Box::pin(self.0.claim(session))
    }

    fn end<'a>(&'a self, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.0.end(token))
    }

    fn exists<'a>(&'a self, token: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(self.0.exists(token))
    }

    fn events(
        &self,
        session: &Arc<Session>,
        after: Option<&str>,
        sink: Box<dyn EventSink>,
    ) -> bool {
        self.0.events(session, after, sink)
    }

    fn task_elsewhere<'a>(
        &'a self,
        session: &'a Session,
        task: &'a str,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(self.0.task_elsewhere(session, task))
    }

    fn forward<'a>(
        &'a self,
        session: &'a Session,
        replica: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Bytes> {
        Box::pin(self.0.forward(session, replica, body))
    }
}
