//! A host session: its identity, what the handshake established, and where messages for the
//! session as a whole go. The transport that carries it is only a label here.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use manifold_upstream::ServerReply;
use tokio::sync::watch;

use crate::outlet::Outlet;
use crate::policy::Caller;

/// How a session's host reaches Manifold (a label for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    StreamableHttp,
    /// The 2024-11-05 HTTP+SSE transport.
    Sse,
}

impl Transport {
    /// The transport as metrics label it.
    pub fn metric(self) -> manifold_telemetry::HostTransport {
        match self {
            Transport::Stdio => manifold_telemetry::HostTransport::Stdio,
            Transport::StreamableHttp => manifold_telemetry::HostTransport::Http,
            Transport::Sse => manifold_telemetry::HostTransport::Sse,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
        }
    }
}

/// What the host said about itself in `initialize`.
#[derive(Debug, Default)]
pub struct Client {
    /// The `capabilities` object, as JSON text (`{}` when absent).
    pub capabilities: Box<str>,
    /// The `clientInfo` object, as JSON text, if given.
    pub info: Option<Box<str>>,
}

impl Client {
    /// Whether the host declared capability `name` (`sampling`, `elicitation`, `roots`).
    pub fn declares(&self, name: &str) -> bool {
        manifold_protocol::RawObject::parse(&self.capabilities)
            .ok()
            .and_then(|c| c.get(name).map(|v| v != "null"))
            .unwrap_or(false)
    }
}

const NEW: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
/// The host speaks the stateless era: no handshake, every request carries its own `_meta`.
const STATELESS: u8 = 3;

/// One host's session.
pub struct Session {
    id: u64,
    transport: Transport,
    /// Where messages for the session as a whole go (notifications, answers on stdio and SSE).
    stream: Arc<dyn Outlet>,
    /// Who the host is (set once, when the session is created); anonymous if never set.
    caller: OnceLock<Arc<Caller>>,
    state: AtomicU8,
    version: OnceLock<&'static str>,
    client: OnceLock<Client>,
    /// Milliseconds since `created` when the host was last heard from.
    last_seen_ms: AtomicU64,
    created: Instant,
    /// Becomes `Some(reason)` when the session ends.
    ended: watch::Sender<Option<Arc<str>>>,
    /// The token hosts present to name the session (HTTP), once registered.
    token: OnceLock<Box<str>>,
    /// Requests Manifold sent this session's host on an upstream's behalf, by the id the host
    /// saw. Locked to add or take one.
    outbound: Mutex<Outbound>,
    /// The log level the host asked for (an index into the RFC 5424 levels), or `UNSET`.
    log_level: AtomicU8,
    /// The exposed URIs the host subscribed to. Locked to add, remove or look one up.
    subscriptions: Mutex<HashSet<String>>,
    /// Requests read from the host that are neither answered nor cancelled by it (a
    /// a request `Context` is alive for each): what a host that closed its input is
    /// still owed.
    unanswered: AtomicUsize,
    /// Where a session shared between replicas reports what changed, once it is shared. The
    /// store keeps what it knows of the session (its token, its home) behind it.
    relay: OnceLock<Arc<dyn Relay>>,
    /// The tools it found with `find_tools`, and the discovery settings its host chose.
    found: crate::discovery::Found,
}

/// What a session kept in a store shared by replicas reports to it.
pub trait Relay: Send + Sync {
    /// The session's log level or subscriptions changed on this replica.
    fn changed(&self, session: &Session);
    /// The tools the session found (tool discovery) changed on this replica.
    fn found_changed(&self, session: &Session);
    /// A task the session created on this replica (its exposed id).
    fn task_created(&self, session: &Session, task: &str);
    /// The host answered, here, a request another replica sent it: passes `message` (the
    /// whole answer) on to that replica; false if `id` names no other replica.
    fn answer_elsewhere(&self, session: &Session, id: &str, message: Vec<u8>) -> bool;
    /// The text Manifold's own request ids to this session start with (`mf-{it}-N`): names
    /// the replica that sent them.
    fn replica(&self) -> &str;
    /// Whether another replica is the session's home: what concerns the session as a whole
    /// (notifications, upstream subscriptions) is that replica's to send or hold.
    fn is_away(&self) -> bool;
}

/// No `logging/setLevel` yet.
const UNSET: u8 = u8::MAX;

/// The level a host that never set one hears from (`info`: debug chatter only on request).
pub const DEFAULT_LOG_LEVEL: u8 = 1;

/// Requests sent to the host and not yet answered.
#[derive(Default)]
struct Outbound {
    next: u64,
    waiting: HashMap<String, Awaited>,
}

/// Where the host's answer to a request Manifold sent it goes.
pub enum Awaited {
    /// Back to the upstream that asked.
    Upstream(ServerReply),
    /// To Manifold itself (a stateless upstream's `input_required`, asked of a session-era
    /// host): the result, or the error object, as JSON text.
    Local(Collect),
}

/// Hears the host's answer to a request Manifold asked for itself: the result, or the error
/// object, as JSON text.
pub type Collect = Box<dyn FnOnce(Result<&str, &str>) + Send>;

impl Awaited {
    pub fn result(self, result: &str) {
        match self {
            Awaited::Upstream(reply) => reply.result(result),
            Awaited::Local(f) => f(Ok(result)),
        }
    }

    pub fn raw_error(self, error: &str) {
        match self {
            Awaited::Upstream(reply) => reply.raw_error(error),
            Awaited::Local(f) => f(Err(error)),
        }
    }

    /// Answers with `err`, on the host's behalf.
    pub fn refuse(self, err: &crate::error::RouteError) {
        self.raw_error(&err.error_text());
    }
}

impl From<ServerReply> for Awaited {
    fn from(reply: ServerReply) -> Self {
        Awaited::Upstream(reply)
    }
}

/// Requests to one host waiting for its answer, at most; past it the oldest is refused.
const OUTBOUND_LIMIT: usize = 1024;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl Session {
    /// A new session with a process-unique id. `stream` gets the session's own messages.
    pub fn new(transport: Transport, stream: Arc<dyn Outlet>) -> Arc<Self> {
        Self::with_id(Self::next_id(), transport, stream)
    }

    /// A session id, reserved before the session exists (an outlet may need to know it).
    pub fn next_id() -> u64 {
        NEXT_SESSION.fetch_add(1, Ordering::Relaxed)
    }

    pub fn with_id(id: u64, transport: Transport, stream: Arc<dyn Outlet>) -> Arc<Self> {
        Arc::new(Self {
            id,
            transport,
            stream,
            caller: OnceLock::new(),
            state: AtomicU8::new(NEW),
            version: OnceLock::new(),
            client: OnceLock::new(),
            last_seen_ms: AtomicU64::new(0),
            created: Instant::now(),
            ended: watch::channel(None).0,
            token: OnceLock::new(),
            outbound: Mutex::new(Outbound::default()),
            log_level: AtomicU8::new(UNSET),
            subscriptions: Mutex::new(HashSet::new()),
            unanswered: AtomicUsize::new(0),
            relay: OnceLock::new(),
            found: Default::default(),
        })
    }

    /// Makes the session one kept in a shared store.
    pub fn share(&self, relay: Arc<dyn Relay>) {
        let _ = self.relay.set(relay);
    }

    /// The shared store's relay, if the session is kept in one.
    pub fn relay(&self) -> Option<&Arc<dyn Relay>> {
        self.relay.get()
    }

    /// Whether another replica is this shared session's home.
    pub fn is_away(&self) -> bool {
        self.relay.get().is_some_and(|r| r.is_away())
    }

    /// The exposed URIs the host is subscribed to.
    pub fn subscriptions(&self) -> Vec<String> {
        let mut subs: Vec<String> = self.subs().iter().cloned().collect();
        subs.sort();
        subs
    }

    /// A request of the host's was read (its context made).
    pub(crate) fn request_started(&self) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
    }

    /// A request of the host's was answered, or cancelled (its context dropped).
    pub(crate) fn request_done(&self) {
        self.unanswered.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests read and not yet answered.
    pub fn unanswered(&self) -> usize {
        self.unanswered.load(Ordering::Relaxed)
    }

    /// Waits (polling: this happens once, at the end of a session) until every request read
    /// has been answered, or until `deadline`; returns how many are still unanswered.
    pub fn wait_answered(&self, deadline: Instant) -> usize {
        loop {
            let left = self.unanswered();
            if left == 0 || Instant::now() >= deadline {
                return left;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The log level the host asked for, if it did (an index into the RFC 5424 levels).
    pub fn log_level(&self) -> Option<u8> {
        Some(self.log_level.load(Ordering::Relaxed)).filter(|l| *l != UNSET)
    }

    pub fn set_log_level(&self, level: u8) {
        self.log_level.store(level, Ordering::Relaxed);
    }

    /// Whether the host hears a message of `level`.
    pub fn hears(&self, level: u8) -> bool {
        level >= self.log_level().unwrap_or(DEFAULT_LOG_LEVEL)
    }

    fn subs(&self) -> MutexGuard<'_, HashSet<String>> {
        self.subscriptions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a subscription; false if the host already had it.
    pub fn subscribe(&self, uri: &str) -> bool {
        self.subs().insert(uri.to_owned())
    }

    /// Drops a subscription; false if the host did not have it.
    pub fn unsubscribe(&self, uri: &str) -> bool {
        self.subs().remove(uri)
    }

    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.subs().contains(uri)
    }

    /// Takes every subscription (the session is ending).
    pub fn take_subscriptions(&self) -> Vec<String> {
        self.subs().drain().collect()
    }

    fn outbound(&self) -> MutexGuard<'_, Outbound> {
        self.outbound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `reply` until the host answers; returns the id (JSON text) to send the request
    /// under. Ids are Manifold's own (`"mf-N"`), so they never clash with the host's.
    pub fn expect_answer(&self, reply: impl Into<Awaited>) -> String {
        let reply = reply.into();
        let mut out = self.outbound();
        out.next += 1;
        let id = match self.relay() {
            Some(relay) => format!("\"mf-{}-{}\"", relay.replica(), out.next),
            None => format!("\"mf-{}\"", out.next),
        };
        if out.waiting.len() >= OUTBOUND_LIMIT {
            let oldest = out
                .waiting
                .keys()
                .min_by_key(|k| (k.len(), (*k).clone()))
                .cloned();
            if let Some(reply) = oldest.and_then(|k| out.waiting.remove(&k)) {
                let why = "the host has too many requests to answer; this one was given up";
                reply.refuse(&crate::error::RouteError::Abandoned(why.into()));
            }
        }
        out.waiting.insert(id.clone(), reply);
        id
    }

    /// The request the host answered with `id` (canonical JSON text), if it is one.
    pub fn answered(&self, id: &str) -> Option<Awaited> {
        self.outbound().waiting.remove(id)
    }

    /// Refuses every request still waiting for the host (the session is ending).
    pub(crate) fn abandon_outbound(&self, reason: &str) {
        let waiting: Vec<Awaited> = self.outbound().waiting.drain().map(|(_, r)| r).collect();
        for reply in waiting {
            reply.refuse(&crate::error::RouteError::Abandoned(reason.into()));
        }
    }

    /// The token hosts present to name this session (HTTP).
    pub fn token(&self) -> Option<&str> {
        self.token.get().map(|t| &**t)
    }

    pub(crate) fn set_token(&self, token: &str) {
        let _ = self.token.set(token.into());
    }

    /// What it found with `find_tools` (tool discovery).
    pub fn found(&self) -> &crate::discovery::Found {
        &self.found
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn stream(&self) -> &Arc<dyn Outlet> {
        &self.stream
    }

    /// The team's name, or "anonymous".
    pub fn principal(&self) -> &Arc<str> {
        self.caller().label()
    }

    /// Who the host is.
    pub fn caller(&self) -> &Arc<Caller> {
        self.caller.get_or_init(Caller::anonymous)
    }

    /// Sets who the host is; only before anything asked (later calls change nothing).
    pub fn set_caller(&self, caller: Arc<Caller>) {
        let _ = self.caller.set(caller);
    }

    /// Claims the one `initialize` of the session; false if it already happened.
    pub fn begin_initialize(&self) -> bool {
        self.state
            .compare_exchange(NEW, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Records what the handshake established and marks the session ready, just before
    /// `initialize` is answered.
    pub fn finish_initialize(&self, version: &'static str, client: Client) {
        let _ = self.version.set(version);
        let _ = self.client.set(client);
        self.state.store(READY, Ordering::Release);
    }

    /// Settles the session in the stateless era, if nothing settled it yet (its first request
    /// named a stateless revision in `_meta`); false if it opened with `initialize`.
    pub fn begin_stateless(&self) -> bool {
        match self
            .state
            .compare_exchange(NEW, STATELESS, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == STATELESS,
        }
    }

    /// Whether the host speaks the stateless era on this session.
    pub fn is_stateless(&self) -> bool {
        self.state.load(Ordering::Acquire) == STATELESS
    }

    /// Whether nothing settled the session's era yet: no `initialize` begun, no request of
    /// the stateless era served.
    pub fn is_new(&self) -> bool {
        self.state.load(Ordering::Acquire) == NEW
    }

    /// Whether `initialize` has been answered.
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// The negotiated protocol version, once initialized.
    pub fn version(&self) -> Option<&'static str> {
        self.version.get().copied()
    }

    /// What the host declared in `initialize`, once initialized.
    pub fn client(&self) -> Option<&Client> {
        self.client.get()
    }

    /// Notes that the host was heard from (idle expiry counts from here).
    pub fn touch(&self) {
        let ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_seen_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the session began.
    pub fn age(&self) -> std::time::Duration {
        self.created.elapsed()
    }

    /// How long since the host was last heard from.
    pub fn idle_for(&self) -> std::time::Duration {
        let seen = std::time::Duration::from_millis(self.last_seen_ms.load(Ordering::Relaxed));
        self.created.elapsed().saturating_sub(seen)
    }

    /// Marks the session ended; returns false if it already was.
    pub(crate) fn mark_ended(&self, reason: &str) -> bool {
        self.ended.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(Arc::from(reason));
            true
        })
    }

    /// Why the session ended, if it did.
    pub fn end_reason(&self) -> Option<Arc<str>> {
        self.ended.borrow().clone()
    }

    /// Resolves when the session ends, with the reason.
    pub async fn ended(&self) -> Arc<str> {
        let mut rx = self.ended.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(r) => r.clone(),
            Err(_) => None,
        };
        reason.unwrap_or_else(|| Arc::from("ended"))
    }
}
