//! HTTP sessions and their SSE streams.
//!
//! A session has numbered streams. Stream 0 is its own: the GET stream of Streamable HTTP
//! (messages that belong to no request), or the one stream of the HTTP+SSE transport. A
//! POST whose request sends something before its answer gets a stream of its own, which
//! ends with the answer. Every event of a Streamable HTTP session carries the id
//! `STREAM-SEQ` and is kept (a bounded number) so that a client that lost a stream can
//! resume it with `Last-Event-ID`.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use manifold_protocol::sse;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::exchange::Transport;

/// Events kept per stream for resumption.
const KEPT_EVENTS: usize = 256;
/// Finished request streams kept per session for resumption; older ones are forgotten.
const KEPT_STREAMS: usize = 64;
/// The reconnection delay that priming events ask for.
const RETRY_MS: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Streamable HTTP (`/mcp`).
    Streamable,
    /// The 2024-11-05 HTTP+SSE transport (`/sse` and `/messages`).
    Legacy,
}

pub struct Session {
    pub id: String,
    pub kind: Kind,
    /// Request streams start with a priming event (an id, a retry delay, empty data), as
    /// 2025-11-25 asks; older clients might not expect an event without a message.
    priming: bool,
    streams: Mutex<Streams>,
}

struct Streams {
    next: u64,
    map: HashMap<u64, Stream>,
}

#[derive(Default)]
struct Stream {
    seq: u64,
    kept: VecDeque<(u64, Bytes)>,
    /// The response body currently carrying the stream, if any.
    listener: Option<UnboundedSender<Bytes>>,
    /// The request's answer was sent: nothing more will come.
    done: bool,
}

impl Stream {
    /// Sends to the listener, forgetting it once its response is gone.
    fn deliver(&mut self, event: Bytes) {
        if let Some(tx) = &self.listener {
            if tx.send(event).is_err() {
                self.listener = None;
            }
        }
    }

    /// A new listener, replacing any earlier one (whose response then ends), that first
    /// gets the kept events after `after`.
    fn attach(&mut self, after: Option<u64>) -> UnboundedReceiver<Bytes> {
        let (tx, rx) = unbounded_channel();
        if let Some(after) = after {
            for (_, event) in self.kept.iter().filter(|(seq, _)| *seq > after) {
                let _ = tx.send(event.clone());
            }
        }
        // A finished stream only replays: dropping the sender ends the response after it.
        self.listener = (!self.done).then_some(tx);
        rx
    }
}

impl Session {
    fn new(id: String, kind: Kind, priming: bool) -> Self {
        let mut map = HashMap::new();
        map.insert(0, Stream::default());
        Self {
            id,
            kind,
            priming: priming && kind == Kind::Streamable,
            streams: Mutex::new(Streams { next: 1, map }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a request stream; its events arrive on the receiver.
    pub fn open(&self) -> (u64, UnboundedReceiver<Bytes>) {
        let mut streams = self.lock();
        let id = streams.next;
        streams.next += 1;
        let (tx, rx) = unbounded_channel();
        if self.priming {
            let priming = format!("id: {id}-0\nretry: {RETRY_MS}\ndata: \n\n");
            let _ = tx.send(Bytes::from(priming));
        }
        let stream = Stream {
            listener: Some(tx),
            ..Stream::default()
        };
        streams.map.insert(id, stream);
        (id, rx)
    }

    /// Sends one message as an event of `stream` (of stream 0 if that stream was forgotten).
    pub fn push(&self, stream: u64, message: &[u8]) {
        let mut streams = self.lock();
        let stream_id = if streams.map.contains_key(&stream) {
            stream
        } else {
            0
        };
        let Some(target) = streams.map.get_mut(&stream_id) else {
            return;
        };
        target.seq += 1;
        let mut event = Vec::with_capacity(message.len() + 32);
        if self.kind == Kind::Legacy {
            sse::write_event(&mut event, None, None, message);
        } else {
            let id = format!("{stream_id}-{}", target.seq);
            sse::write_event(&mut event, Some(&id), None, message);
        }
        let event = Bytes::from(event);
        if self.kind == Kind::Streamable {
            if target.kept.len() == KEPT_EVENTS {
                target.kept.pop_front();
            }
            target.kept.push_back((target.seq, event.clone()));
        }
        target.deliver(event);
    }

    /// Ends a request stream: its answer was sent (or will never be).
    pub fn finish(&self, stream: u64) {
        let mut streams = self.lock();
        if let Some(s) = streams.map.get_mut(&stream) {
            s.done = true;
            s.listener = None;
        }
        if streams.map.len() > KEPT_STREAMS + 1 {
            let oldest = streams
                .map
                .iter()
                .filter(|(id, s)| **id != 0 && s.done)
                .map(|(id, _)| *id)
                .min();
            if let Some(oldest) = oldest {
                streams.map.remove(&oldest);
            }
        }
    }

    /// Ends a stream's response but not the stream: later events are kept for resumption.
    pub fn detach(&self, stream: u64) {
        if let Some(s) = self.lock().map.get_mut(&stream) {
            s.listener = None;
        }
    }

    /// A new listener on stream 0 (replacing any earlier one), which gets `first` first.
    pub fn listen(&self, first: Option<Bytes>) -> UnboundedReceiver<Bytes> {
        let mut streams = self.lock();
        let own = streams.map.entry(0).or_default();
        let rx = own.attach(None);
        if let Some(first) = first {
            own.deliver(first);
        }
        rx
    }

    /// Resumes stream `stream` after event `after`: the kept events that follow, then (if
    /// it has not finished) whatever comes. None if the stream is unknown or forgotten.
    pub fn resume(&self, stream: u64, after: u64) -> Option<UnboundedReceiver<Bytes>> {
        self.lock()
            .map
            .get_mut(&stream)
            .map(|s| s.attach(Some(after)))
    }

    /// Ends every stream's response.
    fn close(&self) {
        for stream in self.lock().map.values_mut() {
            stream.done = true;
            stream.listener = None;
        }
    }
}

/// `STREAM-SEQ` of a `Last-Event-ID`.
pub fn parse_event_id(text: &str) -> Option<(u64, u64)> {
    let (stream, seq) = text.trim().split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// Every live session, by id.
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// --garbage-on-start: the first POST is answered with bytes that are not JSON.
    garbage: AtomicBool,
    ids: AtomicU64,
}

impl Sessions {
    pub fn new(garbage_on_start: bool) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            garbage: AtomicBool::new(garbage_on_start),
            ids: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn create(&self, kind: Kind, priming: bool) -> Arc<Session> {
        let session = Arc::new(Session::new(self.new_id(), kind, priming));
        self.lock().insert(session.id.clone(), Arc::clone(&session));
        session
    }

    /// A fresh session id: unique in this process and not guessable by accident (a test
    /// that sends a made-up or stale id must get 404). Secrecy does not matter here.
    fn new_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let hasher = RandomState::new();
        let (a, b) = (hasher.hash_one(n), hasher.hash_one(!n));
        format!("{a:016x}{b:016x}")
    }

    /// The live session `id` of transport `kind`.
    pub fn get(&self, id: &str, kind: Kind) -> Option<Arc<Session>> {
        self.lock().get(id).filter(|s| s.kind == kind).cloned()
    }

    /// Ends session `id`: its streams' responses end. False if there was none.
    pub fn remove(&self, id: &str) -> bool {
        let removed = self.lock().remove(id);
        removed.map(|s| s.close()).is_some()
    }

    /// True once: for the first POST when --garbage-on-start was given.
    pub fn take_garbage(&self) -> bool {
        self.garbage.swap(false, Ordering::Relaxed)
    }
}

impl Transport for Sessions {
    fn broadcast(&self, line: &[u8]) {
        let sessions: Vec<Arc<Session>> = self.lock().values().cloned().collect();
        for session in sessions {
            session.push(0, line);
        }
    }

    fn send_to(&self, client: &str, line: &[u8]) -> bool {
        let session = self.lock().get(client).cloned();
        session.map(|s| s.push(0, line)).is_some()
    }

    fn exit(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &mut UnboundedReceiver<Bytes>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(b) = rx.try_recv() {
            out.push(String::from_utf8(b.to_vec()).unwrap());
        }
        out
    }

    #[test]
    fn request_streams_prime_number_and_end() {
        let sessions = Sessions::new(false);
        let s = sessions.create(Kind::Streamable, true);
        let (id, mut rx) = s.open();
        assert_eq!(id, 1);
        s.push(id, b"{\"a\":1}");
        s.finish(id);
        let events = drain(&mut rx);
        assert_eq!(events[0], "id: 1-0\nretry: 1000\ndata: \n\n");
        assert_eq!(events[1], "id: 1-1\ndata: {\"a\":1}\n\n");
        assert!(rx.is_closed() || rx.try_recv().is_err());
    }

    #[test]
    fn a_detached_stream_resumes_with_what_it_missed() {
        let s = Sessions::new(false).create(Kind::Streamable, false);
        let (id, mut first) = s.open();
        s.push(id, b"1");
        s.detach(id);
        s.push(id, b"2");
        assert_eq!(drain(&mut first).len(), 1);
        let mut resumed = s.resume(id, 1).unwrap();
        s.push(id, b"3");
        s.finish(id);
        let events = drain(&mut resumed);
        assert_eq!(events, ["id: 1-2\ndata: 2\n\n", "id: 1-3\ndata: 3\n\n"]);
        assert!(s.resume(99, 0).is_none());
        // A finished stream replays and ends.
        let mut again = s.resume(id, 2).unwrap();
        assert_eq!(drain(&mut again).len(), 1);
    }

    #[test]
    fn broadcasts_reach_every_own_stream_and_legacy_events_have_no_id() {
        let sessions = Sessions::new(false);
        let a = sessions.create(Kind::Streamable, true);
        let b = sessions.create(Kind::Legacy, true);
        let mut ra = a.listen(None);
        let mut rb = b.listen(Some(Bytes::from_static(b"event: endpoint\ndata: /x\n\n")));
        sessions.broadcast(b"{}");
        assert_eq!(drain(&mut ra), ["id: 0-1\ndata: {}\n\n"]);
        assert_eq!(
            drain(&mut rb),
            ["event: endpoint\ndata: /x\n\n", "data: {}\n\n"]
        );
        assert!(sessions.send_to(&b.id, b"[]"));
        assert_eq!(drain(&mut rb), ["data: []\n\n"]);
        assert!(drain(&mut ra).is_empty(), "only the named session");
        assert!(sessions.get(&a.id, Kind::Legacy).is_none());
        assert!(sessions.remove(&b.id));
        assert!(
            !sessions.send_to(&b.id, b"[]"),
            "a removed session is nobody"
        );
        assert!(!sessions.remove(&b.id));
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn event_ids_parse() {
        assert_eq!(parse_event_id("3-14"), Some((3, 14)));
        assert_eq!(parse_event_id("x-1"), None);
        assert_eq!(parse_event_id("7"), None);
    }
}
