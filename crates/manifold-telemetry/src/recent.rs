//! The last host requests, for the console's live calls: a bounded ring of what a request's
//! end already measures (time, team, method, name, upstream, outcome, latency, trace id), never
//! its arguments or its result.
//!
//! Recording costs one atomic load while nothing reads the ring (no console is served), and
//! otherwise one short lock and a push into room allocated once: an entry holds only shared
//! names (`Arc<str>` clones), static labels and numbers, so nothing is allocated per request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use crate::metrics::Outcome;

/// How many requests the ring keeps; past that the oldest is forgotten.
pub const RECENT_CALLS: usize = 200;

/// One host request that ended.
#[derive(Debug, Clone)]
pub struct CallRecord {
    /// Its place in the order requests ended, from 1: a reader asks for those after the last
    /// one it saw.
    pub seq: u64,
    /// When it ended.
    pub at: SystemTime,
    /// The caller's team, or "anonymous".
    pub team: Arc<str>,
    /// The method as a metric label (`other` for one Manifold does not know).
    pub method: &'static str,
    /// The tool or prompt name as the host named it, when it was routed (never a resource's
    /// URI, which may carry what the caller asked).
    pub subject: Option<Arc<str>>,
    pub upstream: Option<Arc<str>>,
    /// The host's transport label.
    pub transport: &'static str,
    pub outcome: Outcome,
    pub latency: Duration,
    /// The request's trace id, when it has one (see `Context`).
    pub trace: Option<TraceId>,
}

/// A W3C trace id (16 bytes), shown as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceId(pub [u8; 16]);

impl TraceId {
    /// The trace id of a `traceparent` value (`00-<trace id>-<span id>-<flags>`); `None` for
    /// one that is malformed or all zeros.
    pub fn of_traceparent(value: &str) -> Option<Self> {
        let hex = value.split('-').nth(1).filter(|h| h.len() == 32)?;
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2)?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        (bytes != [0; 16]).then_some(Self(bytes))
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The ring of the last [`RECENT_CALLS`] requests.
pub struct RecentCalls {
    /// Whether anything reads the ring; until then nothing is recorded.
    on: AtomicBool,
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    calls: VecDeque<CallRecord>,
    last: u64,
}

/// The process's ring.
pub fn recent_calls() -> &'static RecentCalls {
    static RECENT: OnceLock<RecentCalls> = OnceLock::new();
    RECENT.get_or_init(RecentCalls::new)
}

impl RecentCalls {
    fn new() -> Self {
        Self {
            on: AtomicBool::new(false),
            ring: Mutex::new(Ring::default()),
        }
    }

    /// Starts recording (the console is served); the ring's room is allocated once, here.
    pub fn turn_on(&self) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let room = RECENT_CALLS.saturating_sub(ring.calls.len());
        ring.calls.reserve_exact(room);
        drop(ring);
        self.on.store(true, Ordering::Relaxed);
    }

    /// Whether requests are recorded: callers skip building a record when not.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Records a request that ended (its `seq` is given here).
    pub fn record(&self, mut call: CallRecord) {
        if !self.is_on() {
            return;
        }
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.last += 1;
        call.seq = ring.last;
        if ring.calls.len() >= RECENT_CALLS {
            ring.calls.pop_front();
        }
        ring.calls.push_back(call);
    }

    /// The requests recorded after `after` (a `seq`), newest first, at most `limit`.
    pub fn since(&self, after: u64, limit: usize) -> Vec<CallRecord> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.calls
            .iter()
            .rev()
            .take_while(|c| c.seq > after)
            .take(limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(team: &str) -> CallRecord {
        CallRecord {
            seq: 0,
            at: SystemTime::now(),
            team: team.into(),
            method: "tools/call",
            subject: Some("alpha__echo".into()),
            upstream: Some("alpha".into()),
            transport: "http",
            outcome: Outcome::Ok,
            latency: Duration::from_millis(3),
            trace: None,
        }
    }

    #[test]
    fn nothing_is_kept_until_turned_on_and_then_only_the_last_calls() {
        let ring = RecentCalls::new();
        ring.record(call("early"));
        assert!(ring.since(0, usize::MAX).is_empty());
        ring.turn_on();
        for i in 0..RECENT_CALLS + 5 {
            ring.record(call(&format!("t{i}")));
        }
        let all = ring.since(0, usize::MAX);
        assert_eq!(all.len(), RECENT_CALLS);
        assert_eq!(&*all[0].team, format!("t{}", RECENT_CALLS + 4));
        assert_eq!(all[0].seq, (RECENT_CALLS + 5) as u64);
        let newer = ring.since(all[2].seq, usize::MAX);
        assert_eq!(newer.len(), 2, "only what came after the last seen");
        assert_eq!(ring.since(0, 3).len(), 3);
    }

    #[test]
    fn a_trace_id_is_read_from_a_traceparent() {
        let id = TraceId::of_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(
            id.map(|i| i.to_string()).as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        assert_eq!(TraceId::of_traceparent("00-zz-b7-01"), None);
        assert_eq!(
            TraceId::of_traceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
            None
        );
    }
}
