//! SSE streams of one HTTP session, with resumability: every event carries an id unique in the
//! session (`{stream}-{seq}`), each stream keeps its last events, and a host that reconnects
//! with `Last-Event-ID` gets what it missed, then the rest live. Stream 0 is the session's
//! own (the GET stream); each POST answered with SSE gets a stream of its own, which ends with
//! the answer. A dropped connection is not a cancellation: events keep being buffered.
//!
//! Bytes handed to a connection and not yet written count against the session's queue limit;
//! a host that lets them pile up past it has its session ended.
//!
//! One file: the event ids, the replay buffers and the bodies that drain them agree on one
//! numbering and one queue bound, which read best side by side.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use manifold_protocol::sse;
use manifold_telemetry::{metrics, Direction, HostTransport};
use tokio::sync::{mpsc, oneshot};

use manifold_core::outlet::Ending;
use manifold_core::outlet::Outlet;

/// Finished POST streams kept for resumption, per session.
const FINISHED_KEPT: usize = 16;

/// The streams of one HTTP session.
pub struct Streams {
    session: u64,
    ending: Ending,
    /// Bytes handed to connections and not yet written, across the session's streams.
    queued: Arc<AtomicUsize>,
    limit: usize,
    replay: usize,
    /// Requests of this session whose answer has not been delivered.
    pub(super) in_progress: AtomicUsize,
    /// GET streams reading the session's events from a shared store.
    pub(super) readers: Arc<AtomicUsize>,
    /// Locked to push or attach; never across an await or a write to a socket.
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_stream: u64,
    streams: HashMap<u64, EventStream>,
    finished: VecDeque<u64>,
}

#[derive(Default)]
struct EventStream {
    next_seq: u64,
    buffer: VecDeque<(u64, Bytes)>,
    /// The connection reading the stream now, and which attach it was.
    live: Option<(u64, mpsc::UnboundedSender<Bytes>)>,
    attaches: u64,
    done: bool,
}

/// The streams of every Streamable HTTP session, by session id. A session owns its streams
/// (they are its outlet), so they live exactly as long as it does; this only finds them again
/// and never keeps them alive. The entries of sessions that are gone are dropped by
/// [`Registry::prune`].
#[derive(Default)]
pub struct Registry {
    /// Written when a session is created and when pruned; read on every request.
    map: RwLock<HashMap<u64, Weak<Streams>>>,
}

impl Registry {
    /// Records the streams of a new session.
    pub fn insert(&self, session: u64, streams: &Arc<Streams>) {
        self.write().insert(session, Arc::downgrade(streams));
    }

    /// The streams of `session`, while it exists.
    pub fn get(&self, session: u64) -> Option<Arc<Streams>> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&session)
            .and_then(Weak::upgrade)
    }

    /// Forgets the sessions whose streams are gone (the session ended and was dropped).
    pub fn prune(&self) {
        self.write().retain(|_, streams| streams.strong_count() > 0);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Weak<Streams>>> {
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Which buffered events a new connection gets first.
#[derive(Debug, Clone, Copy)]
pub enum Replay {
    /// Every buffered event (a POST's stream, first attached).
    All,
    /// Those after this sequence number (`Last-Event-ID`).
    After(u64),
    /// None: only what comes from now on.
    Nothing,
}

impl Streams {
    pub fn new(session: u64, ending: Ending, limit: usize, replay: usize) -> Self {
        let mut inner = Inner {
            next_stream: 1,
            ..Inner::default()
        };
        inner.streams.insert(0, EventStream::default());
        Self {
            session,
            ending,
            queued: Arc::new(AtomicUsize::new(0)),
            limit,
            replay: replay.max(1),
            in_progress: AtomicUsize::new(0),
            readers: Arc::new(AtomicUsize::new(0)),
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new stream for a POST's events.
    pub fn open(&self) -> u64 {
        let mut inner = self.lock();
        let id = inner.next_stream;
        inner.next_stream += 1;
        inner.streams.insert(id, EventStream::default());
        id
    }

    /// Whether a connection is reading the session's own stream.
    pub fn listening(&self) -> bool {
        self.readers.load(Ordering::Relaxed) > 0
            || self
                .lock()
                .streams
                .get(&0)
                .is_some_and(|s| s.live.is_some())
    }

    /// Adds a message (JSON text) to a stream; `last` ends the stream after it.
    pub fn push(&self, stream: u64, message: &[u8], last: bool) {
        let mut queued = 0;
        {
            let mut inner = self.lock();
            let Some(s) = inner.streams.get_mut(&stream) else {
                return;
            };
            if s.done {
                return;
            }
            let seq = s.next_seq;
            s.next_seq += 1;
            let mut event = Vec::with_capacity(message.len() + 40);
            let id = format!("{stream}-{seq}");
            sse::write_event(&mut event, Some(&id), Some("message"), message);
            let event = Bytes::from(event);
            s.buffer.push_back((seq, event.clone()));
            if s.buffer.len() > self.replay {
                s.buffer.pop_front();
            }
            if let Some((_, tx)) = &s.live {
                // Counted before it is handed over, so the reader never subtracts first.
                let len = event.len();
                queued = self
                    .queued
                    .fetch_add(len, Ordering::Relaxed)
                    .wrapping_add(len);
                if tx.send(event).is_err() {
                    self.queued.fetch_sub(len, Ordering::Relaxed);
                    queued = 0;
                    s.live = None;
                }
            }
            if last {
                s.done = true;
                s.live = None;
                inner.finished.push_back(stream);
                if inner.finished.len() > FINISHED_KEPT {
                    if let Some(old) = inner.finished.pop_front() {
                        inner.streams.remove(&old);
                    }
                }
            }
        }
        if queued > self.limit {
            self.ending.end(
                self.session,
                format!("the host is not reading its streams ({queued} bytes waiting)"),
            );
        }
    }

    /// Ends a POST's stream without an answer (the host cancelled the request).
    pub fn finish(&self, stream: u64) {
        let mut inner = self.lock();
        if let Some(s) = inner.streams.get_mut(&stream) {
            s.done = true;
            s.live = None;
        }
    }

    /// A connection to read `stream`: the events `replay` selects, then new ones until the
    /// stream ends. `None` if there is no such stream. A new connection replaces an older one.
    pub fn attach(
        self: &Arc<Self>,
        stream: u64,
        replay: Replay,
        keepalive: Duration,
    ) -> Option<EventBody> {
        let (tx, rx) = mpsc::unbounded_channel();
        let attach = {
            let mut inner = self.lock();
            let s = inner.streams.get_mut(&stream)?;
            for (seq, event) in &s.buffer {
                let wanted = match replay {
                    Replay::All => true,
                    Replay::After(after) => *seq > after,
                    Replay::Nothing => false,
                };
                if wanted {
                    // The receiver is alive here: the body that owns it is made below.
                    self.queued.fetch_add(event.len(), Ordering::Relaxed);
                    let _ = tx.send(event.clone());
                }
            }
            s.attaches += 1;
            if !s.done {
                s.live = Some((s.attaches, tx));
            }
            s.attaches
        };
        let streams = Arc::downgrade(self);
        Some(EventBody::new(
            rx,
            Arc::clone(&self.queued),
            keepalive,
            Some(Box::new(move || {
                if let Some(streams) = streams.upgrade() {
                    streams.detach(stream, attach);
                }
            })),
        ))
    }

    /// The connection of attach `which` to `stream` is gone (unless a newer one replaced it).
    fn detach(&self, stream: u64, which: u64) {
        let mut inner = self.lock();
        if let Some(s) = inner.streams.get_mut(&stream) {
            if s.live.as_ref().is_some_and(|(n, _)| *n == which) {
                s.live = None;
            }
        }
    }

    /// Whether a stream of this session holds the event `Last-Event-ID` names.
    pub fn parse_event_id(text: &str) -> Option<(u64, u64)> {
        let (stream, seq) = text.trim().split_once('-')?;
        Some((stream.parse().ok()?, seq.parse().ok()?))
    }
}

/// The session's own messages go to stream 0.
impl Outlet for Streams {
    fn answer(&self, parts: &[&[u8]]) {
        self.push(0, &message(parts, HostTransport::Http), false);
    }

    fn backlog(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// The JSON text of a message given as parts of a line, counted as sent to a host.
pub fn message(parts: &[&[u8]], transport: HostTransport) -> Vec<u8> {
    let mut m = parts.concat();
    if m.last() == Some(&b'\n') {
        m.pop();
    }
    metrics().host_bytes(transport, Direction::Out, m.len());
    m
}

/// The body of an SSE response: events as they come, and a comment when the stream has been
/// quiet for `keepalive`, so that proxies and load balancers keep it open.
pub struct EventBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    queued: Arc<AtomicUsize>,
    keepalive: tokio::time::Interval,
    /// Run when the response is dropped (the host went away, or the stream ended).
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl EventBody {
    pub fn new(
        rx: mpsc::UnboundedReceiver<Bytes>,
        queued: Arc<AtomicUsize>,
        keepalive: Duration,
        on_drop: Option<Box<dyn FnOnce() + Send>>,
    ) -> Self {
        let mut keepalive = tokio::time::interval(keepalive);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        keepalive.reset();
        Self {
            rx,
            queued,
            keepalive,
            on_drop,
        }
    }
}

impl Stream for EventBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                self.queued.fetch_sub(event.len(), Ordering::Relaxed);
                self.keepalive.reset();
                return Poll::Ready(Some(Ok(event)));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match self.keepalive.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n")))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for EventBody {
    fn drop(&mut self) {
        // What was handed over and never written no longer waits.
        while let Ok(event) = self.rx.try_recv() {
            self.queued.fetch_sub(event.len(), Ordering::Relaxed);
        }
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

/// How the answer to one POSTed request reaches its HTTP response: as the JSON body when it
/// comes first, or, when something must go before it (progress), as an SSE stream that ends
/// with it.
pub struct PostOutlet {
    streams: Arc<Streams>,
    state: Mutex<PostState>,
}

enum PostState {
    Waiting(oneshot::Sender<First>),
    Streaming(u64),
    Done,
}

/// What the response to a POST turns out to be.
pub enum First {
    Answer(Bytes),
    Stream(u64),
    Unanswered,
}

impl PostOutlet {
    pub fn new(streams: Arc<Streams>) -> (Self, oneshot::Receiver<First>) {
        let (tx, rx) = oneshot::channel();
        streams.in_progress.fetch_add(1, Ordering::Relaxed);
        let outlet = Self {
            streams,
            state: Mutex::new(PostState::Waiting(tx)),
        };
        (outlet, rx)
    }

    fn state(&self) -> MutexGuard<'_, PostState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Outlet for PostOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let msg = message(parts, HostTransport::Http);
        let previous = std::mem::replace(&mut *self.state(), PostState::Done);
        match previous {
            PostState::Waiting(tx) => {
                // If the host went away first, the answer has nowhere to go.
                let _ = tx.send(First::Answer(Bytes::from(msg)));
            }
            PostState::Streaming(id) => self.streams.push(id, &msg, true),
            PostState::Done => {}
        }
    }

    fn notify(&self, parts: &[&[u8]]) {
        let msg = message(parts, HostTransport::Http);
        let mut state = self.state();
        match &*state {
            PostState::Streaming(id) => self.streams.push(*id, &msg, false),
            PostState::Waiting(_) => {
                let id = self.streams.open();
                self.streams.push(id, &msg, false);
                if let PostState::Waiting(tx) =
                    std::mem::replace(&mut *state, PostState::Streaming(id))
                {
                    let _ = tx.send(First::Stream(id));
                }
            }
            PostState::Done => {}
        }
    }

    fn unanswered(&self) {
        match std::mem::replace(&mut *self.state(), PostState::Done) {
            PostState::Waiting(tx) => {
                let _ = tx.send(First::Unanswered);
            }
            PostState::Streaming(id) => self.streams.finish(id),
            PostState::Done => {}
        }
    }
}

impl Drop for PostOutlet {
    fn drop(&mut self) {
        self.streams.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The stream of a 2024-11-05 HTTP+SSE session: every message goes to the one connection
/// (no ids, no resumption: the session ends with the connection).
pub struct LegacyOutlet {
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
    session: u64,
    ending: Ending,
    limit: usize,
}

impl LegacyOutlet {
    pub fn new(
        session: u64,
        ending: Ending,
        limit: usize,
    ) -> (Self, mpsc::UnboundedReceiver<Bytes>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let outlet = Self {
            tx,
            queued: Arc::clone(&queued),
            session,
            ending,
            limit,
        };
        (outlet, rx, queued)
    }

    /// Sends one event as it is (the `endpoint` event).
    pub fn raw(&self, event: Bytes) {
        let len = event.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.send(event).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
        }
    }
}

impl Outlet for LegacyOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let mut event = Vec::new();
        sse::write_event(
            &mut event,
            None,
            Some("message"),
            &message(parts, HostTransport::Sse),
        );
        let len = event.len();
        // Counted before it is handed over, so the reader never subtracts first.
        let queued = self
            .queued
            .fetch_add(len, Ordering::Relaxed)
            .wrapping_add(len);
        if self.tx.send(Bytes::from(event)).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return;
        }
        if queued > self.limit {
            self.ending.end(
                self.session,
                format!("the host is not reading its SSE stream ({queued} bytes waiting)"),
            );
        }
    }

    fn backlog(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// Opens a shared session's streams on this replica, when the store copies it here.
pub struct Locals {
    ending: Ending,
    limit: usize,
    replay: usize,
    registry: Arc<Registry>,
}

impl Locals {
    pub fn new(router: &manifold_core::router::Router, registry: Arc<Registry>) -> Self {
        Self {
            ending: router.sessions().ending(),
            limit: router.settings().session_queue_bytes.saturating_mul(2),
            replay: router.settings().http.replay_events,
            registry,
        }
    }
}

impl manifold_core::replicas::Locals for Locals {
    fn open(&self, id: u64) -> Arc<dyn Outlet> {
        let streams = Arc::new(Streams::new(
            id,
            self.ending.clone(),
            self.limit,
            self.replay,
        ));
        self.registry.insert(id, &streams);
        streams
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_finds_streams_only_while_their_session_holds_them() {
        let (sessions, _ending) = manifold_core::sessions::Sessions::new(4);
        let registry = Registry::default();
        let streams = Arc::new(Streams::new(7, sessions.ending(), 1024, 8));
        registry.insert(7, &streams);
        assert!(registry.get(7).is_some_and(|s| Arc::ptr_eq(&s, &streams)));
        assert!(registry.get(8).is_none());
        registry.prune();
        assert_eq!(registry.map.read().unwrap().len(), 1);
        drop(streams);
        assert!(registry.get(7).is_none());
        registry.prune();
        assert!(registry.map.read().unwrap().is_empty());
    }
}
