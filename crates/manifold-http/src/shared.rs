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

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use manifold_config::RedisConfig;
use manifold_protocol::{sse, version};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::mpsc;

use super::streams::{EventBody, Registry, Streams};
use manifold_core::context::Origin;
use manifold_core::error::RouteError;
use manifold_core::outlet::Outlet;
use manifold_core::policy::Caller;
use manifold_core::router::Router;
use manifold_core::session::{Client as HostClient, Relay, Session, Transport};

/// How often a replica renews its liveness, and looks for replicas that stopped.
const BEAT: Duration = Duration::from_millis(500);
/// A replica whose liveness is this old is gone; its sessions are taken over.
const ALIVE_FOR: Duration = Duration::from_millis(1500);
/// How long one blocking read of a session's events waits before looking again.
const BLOCK: Duration = Duration::from_secs(5);
/// Sessions whose last renewal a replica remembers before it forgets the stale ones.
const TOUCHED_KEPT: usize = 4096;
/// How soon a host should reconnect a GET stream that ended (SSE `retry`).
const RETRY_MS: u32 = 500;

/// The store, one per process serving HTTP.
pub struct Store {
    client: Client,
    conn: ConnectionManager,
    prefix: String,
    /// This replica's id: 16 hex digits, new for each process.
    replica: Arc<str>,
    /// A record expires after this long without a request.
    ttl: Duration,
    /// Events kept per session stream.
    replay: usize,
    timeout: Duration,
    router: Weak<Router>,
    streams: Arc<Registry>,
    /// The session queue limit (a GET stream stops reading Redis while its host lags past it).
    queue_limit: usize,
    writes: mpsc::UnboundedSender<Write>,
    /// When this replica last renewed each session's keys.
    touched: Mutex<HashMap<Box<str>, Instant>>,
    /// Failures logged at most once per interval.
    last_failure_log: Mutex<Option<Instant>>,
    /// Requests this replica had another one serve, waiting for their answers.
    calls: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    next: u64,
    waiting: HashMap<u64, tokio::sync::oneshot::Sender<Bytes>>,
}

/// Writes done in order by one task, off the paths that serve requests.
enum Write {
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
struct Record {
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
    pub fn start(
        config: &RedisConfig,
        router: &Arc<Router>,
        streams: Arc<Registry>,
    ) -> Result<Arc<Self>, String> {
        let client =
            Client::open(config.url.as_str()).map_err(|e| format!("sessions.redis_url: {e}"))?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(Some(config.timeout));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)
            .map_err(|e| format!("sessions.redis_url: {e}"))?;
        let settings = router.settings();
        let (writes, rx) = mpsc::unbounded_channel();
        let store = Arc::new(Self {
            client,
            conn,
            prefix: config.key_prefix.clone(),
            replica: replica_id().into(),
            ttl: settings.http.session_idle_timeout,
            replay: settings.http.replay_events.max(1),
            timeout: config.timeout,
            router: Arc::downgrade(router),
            streams,
            queue_limit: settings.session_queue_bytes,
            writes,
            touched: Mutex::new(HashMap::new()),
            last_failure_log: Mutex::new(None),
            calls: Mutex::new(Calls::default()),
        });
        let rt = router.runtime();
        rt.spawn(Arc::clone(&store).write_loop(rx));
        rt.spawn(Self::listen_loop(Arc::downgrade(&store)));
        rt.spawn(Self::beat_loop(Arc::downgrade(&store)));
        tracing::info!(replica = &*store.replica, "sessions kept in Redis");
        Ok(store)
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn key(&self, token: &str) -> String {
        format!("{}:session:{token}", self.prefix)
    }

    fn subs_key(&self, token: &str) -> String {
        format!("{}:session:{token}:subs", self.prefix)
    }

    fn tasks_key(&self, token: &str) -> String {
        format!("{}:session:{token}:tasks", self.prefix)
    }

    fn events_key(&self, token: &str) -> String {
        format!("{}:session:{token}:events", self.prefix)
    }

    fn homes_key(&self, replica: &str) -> String {
        format!("{}:homes:{replica}", self.prefix)
    }

    fn alive_key(&self, replica: &str) -> String {
        format!("{}:replica:{replica}", self.prefix)
    }

    fn replicas_key(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    fn channel(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    fn inbox(&self, replica: &str) -> String {
        format!("{}:to:{replica}", self.prefix)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn failed(&self, what: &str, e: &redis::RedisError) {
        let mut last = self
            .last_failure_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            *last = Some(Instant::now());
            tracing::warn!("session store: {what} failed: {e}");
        }
    }

    /// The session's outlet: messages for the session as a whole go to its Redis stream.
    /// It holds the session's local streams (its POSTs' own), which live as long as it does.
    pub fn outlet(self: &Arc<Self>, token: &str, streams: Arc<Streams>) -> Arc<dyn Outlet> {
        Arc::new(SharedOutlet {
            store: Arc::clone(self),
            token: token.into(),
            streams,
        })
    }

    /// What the session reports to the store.
    pub fn relay(self: &Arc<Self>, token: &str) -> Arc<dyn Relay> {
        Arc::new(SessionRelay {
            store: Arc::clone(self),
            token: token.into(),
        })
    }

    /// Records a session whose `initialize` was just answered, with this replica as its home.
    pub async fn create(&self, session: &Session) -> Result<(), redis::RedisError> {
        let Some(token) = session.token() else {
            return Ok(());
        };
        let caller = session.caller();
        let team = caller.team.as_ref().map_or("", |t| &*t.name);
        let (capabilities, info) = session
            .client()
            .map_or(("{}", None), |c| (&*c.capabilities, c.info.as_deref()));
        let key = self.key(token);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("team")
            .arg(team)
            .arg("caller")
            .arg(&*caller.id)
            .arg("version")
            .arg(session.version().unwrap_or_default())
            .arg("capabilities")
            .arg(capabilities)
            .arg("home")
            .arg(&*self.replica)
            .ignore();
        if let Some(info) = info {
            pipe.cmd("HSET").arg(&key).arg("info").arg(info).ignore();
        }
        if let Some(asked) = session.found().asked() {
            pipe.cmd("HSET")
                .arg(&key)
                .arg("discovery")
                .arg(asked)
                .ignore();
        }
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(self.ttl_ms())
            .ignore()
            .cmd("SADD")
            .arg(self.homes_key(&self.replica))
            .arg(token)
            .ignore();
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await
    }

    /// The session `token` names, from the store: a local copy made now, or `None` if no
    /// replica knows it (or Redis cannot be reached).
    pub async fn adopt(self: &Arc<Self>, token: &str) -> Option<Arc<Session>> {
        let record = match self.load(token).await {
            Ok(record) => record?,
            Err(e) => {
                self.failed("reading a session", &e);
                return None;
            }
        };
        let router = self.router.upgrade()?;
        let sessions = router.sessions();
        // Another request for it may have made the copy meanwhile.
        if let Some(found) = sessions.by_token(token) {
            return Some(found);
        }
        let caller = if record.team.is_empty() {
            if *Caller::anonymous().id == record.caller {
                Caller::anonymous()
            } else {
                Arc::new(Caller {
                    team: None,
                    id: record.caller.into(),
                })
            }
        } else {
            let team = router.teams().get(&record.team).cloned()?;
            Caller::of_team(team, record.caller.into())
        };
        let id = Session::next_id();
        let streams = Arc::new(Streams::new(
            id,
            sessions.ending(),
            router.settings().session_queue_bytes.saturating_mul(2),
            self.replay,
        ));
        let outlet = self.outlet(token, Arc::clone(&streams));
        let session = Session::with_id(id, Transport::StreamableHttp, outlet);
        session.set_caller(caller);
        session.begin_initialize();
        session.finish_initialize(record.version, record.client);
        if let Some(level) = record.level {
            session.set_log_level(level);
        }
        let home = record.home == *self.replica;
        session.share(self.relay(token), true);
        for uri in &record.subs {
            session.subscribe(uri);
        }
        router.restore_discovery(&session, record.discovery.as_deref(), record.found);
        self.streams.insert(id, &streams);
        if let Err(full) = sessions.add(Arc::clone(&session), Some(token)) {
            tracing::warn!("cannot take a shared session: {full}");
            return None;
        }
        if home {
            session.set_away(false);
            router.take_subscriptions(&session);
        }
        tracing::debug!(session = id, home, "shared session copied from the store");
        Some(session)
    }

    async fn load(&self, token: &str) -> Result<Option<Record>, redis::RedisError> {
        let mut conn = self.conn.clone();
        let (fields, subs): (HashMap<String, String>, Vec<String>) = redis::pipe()
            .cmd("HGETALL")
            .arg(self.key(token))
            .cmd("SMEMBERS")
            .arg(self.subs_key(token))
            .query_async(&mut conn)
            .await?;
        let Some(version) = fields.get("version").and_then(|v| version::known(v)) else {
            return Ok(None);
        };
        let get = |name: &str| fields.get(name).cloned().unwrap_or_default();
        Ok(Some(Record {
            team: get("team"),
            caller: get("caller"),
            version,
            client: HostClient {
                capabilities: fields
                    .get("capabilities")
                    .map_or_else(|| "{}".into(), |c| c.as_str().into()),
                info: fields.get("info").map(|i| i.as_str().into()),
            },
            level: fields.get("level").and_then(|l| l.parse().ok()),
            home: get("home"),
            subs,
            discovery: fields.get("discovery").cloned(),
            found: fields
                .get("found")
                .and_then(|f| serde_json::from_str(f).ok())
                .unwrap_or_default(),
        }))
    }

    /// A request came for the session: its keys live on (renewed at most every quarter of
    /// their lifetime by each replica).
    pub fn touch(&self, token: &str) {
        let due = {
            let mut touched = self
                .touched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            let every = self.ttl / 4;
            match touched.get(token) {
                Some(t) if now.duration_since(*t) < every => false,
                _ => {
                    if touched.len() >= TOUCHED_KEPT {
                        // Sessions gone or quiet are forgotten: their next request renews.
                        touched.retain(|_, t| now.duration_since(*t) < every);
                    }
                    touched.insert(token.into(), now);
                    true
                }
            }
        };
        if due {
            let _ = self.writes.send(Write::Touch {
                token: token.into(),
            });
        }
    }

    /// The replica that runs `task` of a shared session, when it is another one: a task
    /// lives in the upstream connection of the replica that created it, so its requests are
    /// served there. The creating replica records it a moment after answering, so a task not
    /// found is looked for once more shortly after.
    pub async fn task_elsewhere(&self, session: &Session, task: &str) -> Option<String> {
        let token = session.token()?;
        let router = self.router.upgrade()?;
        for attempt in 0..2 {
            if router.owns_task(session.id(), task) {
                return None;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut conn = self.conn.clone();
            let replica: Result<Option<String>, _> = redis::cmd("HGET")
                .arg(self.tasks_key(token))
                .arg(task)
                .query_async(&mut conn)
                .await;
            match replica {
                Ok(Some(replica)) if replica != *self.replica => return Some(replica),
                Ok(Some(_)) => return None,
                Ok(None) => {}
                Err(e) => {
                    self.failed("reading a session's tasks", &e);
                    return None;
                }
            }
        }
        None
    }

    /// Has `replica` serve `body` (a request of `session`'s) and returns its answer: a
    /// JSON-RPC error if the replica does not answer within the request timeout (it stopped,
    /// and the task with it).
    pub async fn forward(&self, session: &Session, replica: &str, body: &[u8]) -> Bytes {
        let token = session.token().unwrap_or_default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let call = {
            let mut calls = self
                .calls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            calls.next += 1;
            let call = calls.next;
            calls.waiting.insert(call, tx);
            call
        };
        let mut message = format!("call {token} {} {call}\n", self.replica).into_bytes();
        message.extend_from_slice(body);
        let _ = self.writes.send(Write::Call {
            replica: replica.to_owned(),
            message,
        });
        let timeout = self
            .router
            .upgrade()
            .map_or(Duration::from_secs(60), |r| r.settings().request_timeout);
        let answer = tokio::time::timeout(timeout, rx).await;
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .waiting
            .remove(&call);
        match answer {
            Ok(Ok(answer)) => answer,
            _ => {
                let id = manifold_protocol::Envelope::decode(body)
                    .ok()
                    .and_then(|env| env.id.map(str::to_owned))
                    .unwrap_or_else(|| "null".to_owned());
                let mut out = Vec::new();
                let error = RouteError::Internal(
                    "the replica running this task did not answer (it may have stopped, and \
                     the task with it)"
                        .into(),
                );
                let error = error.error_object(manifold_protocol::version::Era::Session);
                manifold_protocol::write::error_response(&mut out, Some(&id), &error);
                if out.last() == Some(&b'\n') {
                    out.pop();
                }
                Bytes::from(out)
            }
        }
    }

    /// Whether the store still holds the session (its keys have not expired).
    pub async fn exists(&self, token: &str) -> bool {
        let mut conn = self.conn.clone();
        let found: Result<u64, _> = redis::cmd("EXISTS")
            .arg(self.key(token))
            .query_async(&mut conn)
            .await;
        // Unknown (Redis unreachable) counts as alive: a session is never ended for that.
        found.map_or(true, |n| n > 0)
    }

    /// The host ended the session: every replica forgets it.
    pub async fn end(&self, token: &str) {
        let home: Option<String> = {
            let mut conn = self.conn.clone();
            redis::cmd("HGET")
                .arg(self.key(token))
                .arg("home")
                .query_async(&mut conn)
                .await
                .unwrap_or(None)
        };
        let mut pipe = redis::pipe();
        pipe.cmd("DEL")
            .arg(self.key(token))
            .arg(self.subs_key(token))
            .arg(self.tasks_key(token))
            .arg(self.events_key(token))
            .ignore()
            .cmd("PUBLISH")
            .arg(self.channel())
            .arg(format!("end {token}"))
            .ignore();
        if let Some(home) = home {
            pipe.cmd("SREM")
                .arg(self.homes_key(&home))
                .arg(token)
                .ignore();
        }
        let mut conn = self.conn.clone();
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            self.failed("ending a session", &e);
        }
    }

    /// Makes this replica the session's home (a host opened its GET stream here).
    pub async fn claim(&self, session: &Arc<Session>) {
        let Some(token) = session.token() else { return };
        if !session.is_away() {
            return;
        }
        let Some(router) = self.router.upgrade() else {
            return;
        };
        let previous: Result<Option<String>, _> = {
            let mut conn = self.conn.clone();
            redis::cmd("HGET")
                .arg(self.key(token))
                .arg("home")
                .query_async(&mut conn)
                .await
        };
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(self.key(token))
            .arg("home")
            .arg(&*self.replica)
            .ignore()
            .cmd("SADD")
            .arg(self.homes_key(&self.replica))
            .arg(token)
            .ignore();
        if let Ok(Some(previous)) = &previous {
            pipe.cmd("SREM")
                .arg(self.homes_key(previous))
                .arg(token)
                .ignore();
        }
        pipe.cmd("PUBLISH")
            .arg(self.channel())
            .arg(format!("moved {token} {}", self.replica))
            .ignore();
        let mut conn = self.conn.clone();
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            self.failed("claiming a session", &e);
            return;
        }
        session.set_away(false);
        router.take_subscriptions(session);
        tracing::debug!(session = session.id(), "shared session is now homed here");
    }

    /// The body of a GET stream: the session's events after `after` (a Redis stream id; `$`
    /// for new ones only), read from Redis as they come, until the host goes or the session
    /// ends.
    pub fn events(
        self: &Arc<Self>,
        session: &Arc<Session>,
        after: Option<&str>,
        keepalive: Duration,
        streams: &Streams,
    ) -> Option<EventBody> {
        let token = session.token()?.to_owned();
        let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
        let queued = Arc::new(AtomicUsize::new(0));
        let retry = format!("retry: {RETRY_MS}\n\n");
        queued.fetch_add(retry.len(), Ordering::Relaxed);
        let _ = tx.send(Bytes::from(retry));
        let store = Arc::clone(self);
        let after = after.unwrap_or("$").to_owned();
        let weak = Arc::downgrade(session);
        let reader_queued = Arc::clone(&queued);
        self.router.upgrade()?.runtime().spawn(async move {
            store
                .read_events(&token, after, tx, reader_queued, weak)
                .await;
        });
        let readers = Arc::clone(&streams.readers);
        readers.fetch_add(1, Ordering::Relaxed);
        let gone = Box::new(move || {
            readers.fetch_sub(1, Ordering::Relaxed);
        });
        Some(EventBody::new(rx, queued, keepalive, Some(gone)))
    }

    async fn read_events(
        &self,
        token: &str,
        mut after: String,
        tx: mpsc::UnboundedSender<Bytes>,
        queued: Arc<AtomicUsize>,
        session: Weak<Session>,
    ) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(BLOCK + self.timeout + Duration::from_secs(1)));
        let mut conn: Option<MultiplexedConnection> = None;
        let key = self.events_key(token);
        loop {
            if tx.is_closed() {
                return;
            }
            match session.upgrade() {
                Some(s) if s.end_reason().is_none() => {}
                _ => return,
            }
            if queued.load(Ordering::Relaxed) > self.queue_limit {
                // The host is not reading: Redis keeps the events meanwhile.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let c = match &mut conn {
                Some(c) => c,
                None => match self
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Ok(c) => conn.insert(c),
                    Err(e) => {
                        self.failed("reading a session's events", &e);
                        tokio::time::sleep(BEAT).await;
                        continue;
                    }
                },
            };
            let read: Result<Value, _> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(256)
                .arg("BLOCK")
                .arg(u64::try_from(BLOCK.as_millis()).unwrap_or(5000))
                .arg("STREAMS")
                .arg(&key)
                .arg(&after)
                .query_async(c)
                .await;
            match read {
                Ok(value) => {
                    for (id, message) in stream_entries(value) {
                        let mut event = Vec::with_capacity(message.len() + 48);
                        sse::write_event(
                            &mut event,
                            Some(&format!("r{id}")),
                            Some("message"),
                            &message,
                        );
                        queued.fetch_add(event.len(), Ordering::Relaxed);
                        if tx.send(Bytes::from(event)).is_err() {
                            return;
                        }
                        after = id;
                    }
                }
                Err(e) => {
                    self.failed("reading a session's events", &e);
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Writes in order, one at a time.
    async fn write_loop(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Write>) {
        while let Some(write) = rx.recv().await {
            let mut pipe = redis::pipe();
            match write {
                Write::Event { token, message } => {
                    let key = self.events_key(&token);
                    pipe.cmd("XADD")
                        .arg(&key)
                        .arg("MAXLEN")
                        .arg("~")
                        .arg(self.replay)
                        .arg("*")
                        .arg("m")
                        .arg(message)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&key)
                        .arg(self.ttl_ms())
                        .ignore();
                }
                Write::State { token, level, subs } => {
                    let key = self.key(&token);
                    let subs_key = self.subs_key(&token);
                    pipe.atomic();
                    match level {
                        Some(level) => pipe.cmd("HSET").arg(&key).arg("level").arg(level),
                        None => pipe.cmd("HDEL").arg(&key).arg("level"),
                    }
                    .ignore();
                    pipe.cmd("DEL").arg(&subs_key).ignore();
                    if !subs.is_empty() {
                        pipe.cmd("SADD").arg(&subs_key).arg(&subs).ignore();
                        pipe.cmd("PEXPIRE")
                            .arg(&subs_key)
                            .arg(self.ttl_ms())
                            .ignore();
                    }
                    pipe.cmd("PUBLISH")
                        .arg(self.channel())
                        .arg(format!("refresh {token} {}", self.replica))
                        .ignore();
                }
                Write::Found { token, found } => {
                    let key = self.key(&token);
                    pipe.atomic();
                    if found.is_empty() {
                        pipe.cmd("HDEL").arg(&key).arg("found").ignore();
                    } else {
                        let list = serde_json::to_string(&found).unwrap_or_default();
                        pipe.cmd("HSET").arg(&key).arg("found").arg(list).ignore();
                    }
                    pipe.cmd("PUBLISH")
                        .arg(self.channel())
                        .arg(format!("refresh {token} {}", self.replica))
                        .ignore();
                }
                Write::Answer {
                    token,
                    replica,
                    message,
                } => {
                    let mut text = format!("answer {token}\n").into_bytes();
                    text.extend_from_slice(&message);
                    pipe.cmd("PUBLISH")
                        .arg(self.inbox(&replica))
                        .arg(text)
                        .ignore();
                }
                Write::Task { token, task } => {
                    let key = self.tasks_key(&token);
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg(task)
                        .arg(&*self.replica)
                        .ignore();
                    pipe.cmd("PEXPIRE").arg(&key).arg(self.ttl_ms()).ignore();
                }
                Write::Call { replica, message } => {
                    pipe.cmd("PUBLISH")
                        .arg(self.inbox(&replica))
                        .arg(message)
                        .ignore();
                }
                Write::Touch { token } => {
                    for key in [
                        self.key(&token),
                        self.subs_key(&token),
                        self.tasks_key(&token),
                        self.events_key(&token),
                    ] {
                        pipe.cmd("PEXPIRE").arg(key).arg(self.ttl_ms()).ignore();
                    }
                }
            }
            let mut conn = self.conn.clone();
            if let Err(e) = pipe.query_async::<()>(&mut conn).await {
                self.failed("writing a session's state", &e);
            }
        }
    }

    /// Hears the other replicas: sessions ended, changed or moved, and answers for requests
    /// this replica sent. Reconnects after a failure.
    async fn listen_loop(store: Weak<Self>) {
        loop {
            let Some(this) = store.upgrade() else { return };
            let (channel, inbox, client) = (
                this.channel(),
                this.inbox(&this.replica),
                this.client.clone(),
            );
            drop(this);
            let pubsub = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                pubsub.subscribe(&inbox).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let mut pubsub = match pubsub.await {
                Ok(p) => p,
                Err(e) => {
                    if let Some(this) = store.upgrade() {
                        this.failed("hearing the other replicas", &e);
                    }
                    tokio::time::sleep(BEAT).await;
                    continue;
                }
            };
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let Some(this) = store.upgrade() else { return };
                let payload: Vec<u8> = msg.get_payload_bytes().to_vec();
                this.heard(&payload).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn heard(self: &Arc<Self>, payload: &[u8]) {
        let Some(router) = self.router.upgrade() else {
            return;
        };
        let (head, rest) = match memchr::memchr(b'\n', payload) {
            Some(i) => (&payload[..i], &payload[i + 1..]),
            None => (payload, &[][..]),
        };
        let head = String::from_utf8_lossy(head);
        let mut words = head.split(' ');
        let (Some(kind), Some(token)) = (words.next(), words.next()) else {
            return;
        };
        let from = words.next().unwrap_or_default();
        if kind == "reply" {
            // `reply {call}`: the answer to a request another replica served for this one.
            let call: Option<u64> = token.parse().ok();
            let waiting = call.and_then(|call| {
                self.calls
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .waiting
                    .remove(&call)
            });
            if let Some(tx) = waiting {
                let _ = tx.send(Bytes::copy_from_slice(rest));
            }
            return;
        }
        let session = match router.sessions().by_token(token) {
            Some(session) => session,
            // A request for a session this replica no longer holds a copy of.
            None if kind == "call" => match self.adopt(token).await {
                Some(session) => session,
                None => return,
            },
            None => return,
        };
        match kind {
            "end" => router.end_session(session.id(), "the host ended the session"),
            "moved" if from != &*self.replica && !session.is_away() => {
                router.release_subscriptions(&session);
                session.set_away(true);
                tracing::debug!(session = session.id(), "shared session moved to {from}");
            }
            "refresh" if from != &*self.replica => match self.load(token).await {
                Ok(Some(record)) => {
                    let level = record.level.unwrap_or(u8::MAX);
                    let relevel = session.log_level() != record.level;
                    session.set_log_level(level);
                    router.set_subscriptions(&session, &record.subs);
                    router.restore_discovery(&session, None, record.found);
                    if relevel && !session.is_away() {
                        // Each upstream that logs is asked for what the sessions here want.
                        router.apply_log_levels(None).await;
                    }
                }
                Ok(None) => {}
                Err(e) => self.failed("reading a session", &e),
            },
            "call" => {
                // `call {token} {from} {call}`: serve it here, answer to `from`.
                let Some(call) = words.next().and_then(|c| c.parse::<u64>().ok()) else {
                    return;
                };
                let origin = Origin {
                    session: Some(Arc::clone(&session)),
                    outlet: Arc::new(ReplyOutlet {
                        store: Arc::clone(self),
                        replica: from.to_owned(),
                        call,
                    }),
                    trace: None,
                    caller: None,
                    owner: 0,
                    asked: None,
                };
                router.handle_line(&origin, rest);
            }
            "answer" => {
                let origin = Origin {
                    session: Some(Arc::clone(&session)),
                    outlet: Arc::clone(session.stream()),
                    trace: None,
                    caller: None,
                    owner: 0,
                    asked: None,
                };
                router.handle_line(&origin, rest);
            }
            _ => {}
        }
    }

    /// Renews this replica's liveness, and takes over the sessions of replicas gone.
    async fn beat_loop(store: Weak<Self>) {
        let mut tick = tokio::time::interval(BEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(this) = store.upgrade() else { return };
            if let Err(e) = this.beat().await {
                this.failed("renewing this replica's liveness", &e);
            }
        }
    }

    async fn beat(self: &Arc<Self>) -> Result<(), redis::RedisError> {
        let mut conn = self.conn.clone();
        let alive_ms = u64::try_from(ALIVE_FOR.as_millis()).unwrap_or(3000);
        let replicas: Vec<String> = redis::pipe()
            .cmd("SET")
            .arg(self.alive_key(&self.replica))
            .arg(1)
            .arg("PX")
            .arg(alive_ms)
            .ignore()
            .cmd("SADD")
            .arg(self.replicas_key())
            .arg(&*self.replica)
            .ignore()
            .cmd("SMEMBERS")
            .arg(self.replicas_key())
            .query_async::<(Vec<String>,)>(&mut conn)
            .await?
            .0;
        for other in replicas.iter().filter(|r| **r != *self.replica) {
            let alive: u64 = redis::cmd("EXISTS")
                .arg(self.alive_key(other))
                .query_async(&mut conn)
                .await?;
            if alive == 0 {
                self.take_over(other).await?;
            }
        }
        Ok(())
    }

    /// Becomes home to the sessions of `gone`, a replica that stopped renewing its liveness.
    async fn take_over(self: &Arc<Self>, gone: &str) -> Result<(), redis::RedisError> {
        let mut conn = self.conn.clone();
        let mut taken = 0usize;
        loop {
            let token: Option<String> = redis::cmd("SPOP")
                .arg(self.homes_key(gone))
                .query_async(&mut conn)
                .await?;
            let Some(token) = token else { break };
            // Only a record that still exists gets a home.
            let exists: u64 = redis::cmd("EXISTS")
                .arg(self.key(&token))
                .query_async(&mut conn)
                .await?;
            if exists == 0 {
                continue;
            }
            redis::pipe()
                .cmd("HSET")
                .arg(self.key(&token))
                .arg("home")
                .arg(&*self.replica)
                .ignore()
                .cmd("SADD")
                .arg(self.homes_key(&self.replica))
                .arg(&token)
                .ignore()
                .cmd("PUBLISH")
                .arg(self.channel())
                .arg(format!("moved {token} {}", self.replica))
                .ignore()
                .query_async::<()>(&mut conn)
                .await?;
            taken += 1;
            let router = self.router.upgrade();
            let local = router.as_ref().and_then(|r| r.sessions().by_token(&token));
            match local {
                Some(session) => {
                    if session.is_away() {
                        session.set_away(false);
                        if let Some(router) = &router {
                            router.take_subscriptions(&session);
                        }
                    }
                }
                None => {
                    self.adopt(&token).await;
                }
            }
        }
        let _: () = redis::cmd("SREM")
            .arg(self.replicas_key())
            .arg(gone)
            .query_async(&mut conn)
            .await?;
        if taken > 0 {
            tracing::info!(
                replica = gone,
                sessions = taken,
                "took over the sessions of a replica that stopped"
            );
        }
        Ok(())
    }
}

/// `(id, message)` of each entry of an `XREAD` reply for one stream.
fn stream_entries(value: Value) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let streams = match value {
        Value::Array(streams) => streams,
        // RESP3 answers with a map of stream -> entries.
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| Value::Array(vec![k, v]))
            .collect(),
        _ => return out,
    };
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            continue;
        };
        let Some(Value::Array(entries)) = parts.pop() else {
            continue;
        };
        for entry in entries {
            let Value::Array(mut entry) = entry else {
                continue;
            };
            if entry.len() != 2 {
                continue;
            }
            let fields = entry.pop();
            let id = entry.pop();
            let (Some(id), Some(Value::Array(fields))) = (id.and_then(text), fields) else {
                continue;
            };
            // Fields come as name, value: the one Manifold writes is `m`.
            let message = fields.into_iter().nth(1).and_then(|v| match v {
                Value::BulkString(b) => Some(b),
                _ => None,
            });
            if let Some(message) = message {
                out.push((id, message));
            }
        }
    }
    out
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// A replica id: 64 bits from the operating system's random source, as hex.
fn replica_id() -> String {
    let mut bytes = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The replica a request id Manifold sent a shared session's host names: `"mf-{replica}-{n}"`
/// (JSON text).
fn replica_of(id: &str) -> Option<&str> {
    let (replica, n) = id
        .strip_prefix("\"mf-")?
        .strip_suffix('"')?
        .rsplit_once('-')?;
    n.parse::<u64>().ok()?;
    Some(replica).filter(|r| !r.is_empty())
}

/// Messages for a shared session as a whole: to its Redis stream.
struct SharedOutlet {
    store: Arc<Store>,
    token: Box<str>,
    streams: Arc<Streams>,
}

impl Outlet for SharedOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let message = super::streams::message(parts, manifold_telemetry::HostTransport::Http);
        let _ = self.store.writes.send(Write::Event {
            token: self.token.clone(),
            message,
        });
    }

    fn backlog(&self) -> usize {
        self.streams.backlog()
    }
}

/// The answer to a request another replica had this one serve: back to it.
struct ReplyOutlet {
    store: Arc<Store>,
    replica: String,
    call: u64,
}

impl Outlet for ReplyOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let mut message = format!("reply {}\n", self.call).into_bytes();
        message.extend_from_slice(&super::streams::message(
            parts,
            manifold_telemetry::HostTransport::Http,
        ));
        let _ = self.store.writes.send(Write::Call {
            replica: self.replica.clone(),
            message,
        });
    }

    /// Progress and other messages of the request stay here: the answer is what travels.
    fn notify(&self, _parts: &[&[u8]]) {}
}

struct SessionRelay {
    store: Arc<Store>,
    token: Box<str>,
}

impl Relay for SessionRelay {
    fn changed(&self, session: &Session) {
        let _ = self.store.writes.send(Write::State {
            token: self.token.clone(),
            level: session.log_level(),
            subs: session.subscriptions(),
        });
    }

    fn found_changed(&self, session: &Session) {
        let _ = self.store.writes.send(Write::Found {
            token: self.token.clone(),
            found: session.found().recent_first(),
        });
    }

    fn task_created(&self, _session: &Session, task: &str) {
        let _ = self.store.writes.send(Write::Task {
            token: self.token.clone(),
            task: task.to_owned(),
        });
    }

    fn answer_elsewhere(&self, _session: &Session, id: &str, message: Vec<u8>) -> bool {
        match replica_of(id) {
            Some(replica) if replica != &*self.store.replica => {
                let _ = self.store.writes.send(Write::Answer {
                    token: self.token.clone(),
                    replica: replica.to_owned(),
                    message,
                });
                true
            }
            _ => false,
        }
    }

    fn replica(&self) -> &str {
        &self.store.replica
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_name_the_replica_that_sent_them() {
        assert_eq!(
            replica_of("\"mf-0a1b2c3d4e5f6071-12\""),
            Some("0a1b2c3d4e5f6071")
        );
        // Ids of a session no store shares, and anything else, name none.
        assert_eq!(replica_of("\"mf-12\""), None);
        assert_eq!(replica_of("\"mf--12\""), None);
        assert_eq!(replica_of("12"), None);
        assert_eq!(replica_of("\"mf-a-b\""), None);
    }

    #[test]
    fn stream_entries_are_read_from_an_xread_reply() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"k".to_vec()),
            Value::Array(vec![
                Value::Array(vec![
                    Value::BulkString(b"1-0".to_vec()),
                    Value::Array(vec![
                        Value::BulkString(b"m".to_vec()),
                        Value::BulkString(b"{\"a\":1}".to_vec()),
                    ]),
                ]),
                Value::Array(vec![
                    Value::BulkString(b"1-1".to_vec()),
                    Value::Array(vec![
                        Value::BulkString(b"m".to_vec()),
                        Value::BulkString(b"{}".to_vec()),
                    ]),
                ]),
            ]),
        ])]);
        let entries = stream_entries(reply);
        assert_eq!(
            entries,
            vec![
                ("1-0".to_owned(), b"{\"a\":1}".to_vec()),
                ("1-1".to_owned(), b"{}".to_vec())
            ]
        );
        assert!(stream_entries(Value::Nil).is_empty());
    }
}
