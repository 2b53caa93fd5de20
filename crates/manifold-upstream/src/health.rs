//! An upstream connection's circuit breaker. Calls pass while it is closed; after
//! `breaker_failures` failures in a row (calls that timed out or were refused, health pings
//! that failed) it opens, and calls are refused at once (-32017, naming the upstream and when
//! it will be tried again) instead of waiting for their deadline; after `breaker_cooldown`
//! the actor turns it half-open and sends one probe (a ping) whose outcome closes it or opens
//! it again. A new connection whose handshake succeeded closes it too (after a restart).
//!
//! The request path only reads one atomic ([`Breaker::admit`]) and, for each answer, one
//! more ([`Breaker::succeeded`]); everything else happens on failures, under a lock.
//!
//! The periodic pings, the probe and the restart of an upstream whose breaker stays open are
//! the actor's (`actor/health.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use manifold_config::HealthPolicy;
use manifold_telemetry::{BreakerState, UpstreamCounters};

use crate::error::UpstreamError;
use crate::handle::clock_ms;

const CLOSED: u8 = BreakerState::Closed as u8;
const HALF_OPEN: u8 = BreakerState::HalfOpen as u8;
const OPEN: u8 = BreakerState::Open as u8;

/// One connection's circuit breaker (kept across its restarts by the actor).
pub(crate) struct Breaker {
    upstream: Box<str>,
    /// Failures in a row that open it; 0: it never opens. Set again when a reload changes
    /// the upstream's health settings.
    threshold: AtomicU32,
    /// How long it stays open before a probe, in milliseconds; set again like `threshold`.
    cooldown_ms: AtomicU64,
    state: AtomicU8,
    /// Failures in a row while closed.
    failures: AtomicU32,
    /// While open: when it turns half-open (on [`clock_ms`]).
    retry_at: AtomicU64,
    /// Transitions, and what they record; held only while changing state.
    inner: Mutex<Inner>,
    counters: Arc<UpstreamCounters>,
    /// Whether its transitions are the upstream's in metrics (the shared connection's).
    exported: bool,
}

#[derive(Default)]
struct Inner {
    /// Why it opened (the last failure, with the count).
    reason: String,
    /// When it last opened from closed (kept while it goes half-open and open again).
    opened: Option<Instant>,
}

impl Breaker {
    pub(crate) fn new(
        upstream: &str,
        policy: &HealthPolicy,
        counters: Arc<UpstreamCounters>,
        exported: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream: upstream.into(),
            threshold: AtomicU32::new(policy.breaker_failures.unwrap_or(0)),
            cooldown_ms: AtomicU64::new(millis(policy.breaker_cooldown)),
            state: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            retry_at: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
            counters,
            exported,
        })
    }

    /// Takes the settings of a reloaded configuration, and closes: the connection that
    /// follows a change of them is a new one.
    pub(crate) fn configure(&self, policy: &HealthPolicy) {
        let threshold = policy.breaker_failures.unwrap_or(0);
        self.threshold.store(threshold, Ordering::Relaxed);
        let cooldown = millis(policy.breaker_cooldown);
        self.cooldown_ms.store(cooldown, Ordering::Relaxed);
        self.reset();
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.state.load(Ordering::Relaxed) {
            CLOSED => BreakerState::Closed,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::Open,
        }
    }

    /// Whether a call may be sent: `Ok` while closed (one relaxed load), else the error to
    /// answer it with at once.
    #[inline]
    pub(crate) fn admit(&self) -> Result<(), UpstreamError> {
        if self.state.load(Ordering::Relaxed) == CLOSED {
            return Ok(());
        }
        Err(self.refusal())
    }

    #[cold]
    fn refusal(&self) -> UpstreamError {
        self.counters
            .breaker_rejections
            .fetch_add(1, Ordering::Relaxed);
        let retry_in = match self.state.load(Ordering::Relaxed) {
            HALF_OPEN => None,
            _ => {
                let at = self.retry_at.load(Ordering::Relaxed);
                let now = clock_ms(Instant::now());
                // Rounded up to 10 ms (the actor looks every 100 ms anyway).
                Some(Duration::from_millis(
                    at.saturating_sub(now).div_ceil(10) * 10,
                ))
            }
        };
        UpstreamError::CircuitOpen {
            upstream: self.upstream.to_string(),
            reason: self.inner().reason.clone(),
            retry_in,
        }
    }

    /// The upstream answered a call: the failures in a row end. One relaxed load when there
    /// were none.
    #[inline]
    pub(crate) fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A call or a ping failed (`why`): counted while closed; the breaker opens at its
    /// threshold. Returns whether it opened now.
    pub(crate) fn failed(&self, why: &str) -> bool {
        let threshold = self.threshold.load(Ordering::Relaxed);
        if threshold == 0 {
            return false;
        }
        let mut inner = self.inner();
        if self.state.load(Ordering::Relaxed) != CLOSED {
            return false;
        }
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < threshold {
            return false;
        }
        inner.reason = match n {
            1 => why.to_owned(),
            n => format!("{n} failures in a row, the last: {why}"),
        };
        inner.opened = Some(Instant::now());
        self.open(&inner);
        true
    }

    /// Opens (again), for a cooldown from now (called with the lock held).
    fn open(&self, _held: &Inner) {
        let cooldown = Duration::from_millis(self.cooldown_ms.load(Ordering::Relaxed));
        let at = clock_ms(Instant::now() + cooldown);
        self.retry_at.store(at, Ordering::Relaxed);
        self.enter(OPEN);
    }

    fn enter(&self, state: u8) {
        self.state.store(state, Ordering::Relaxed);
        if self.exported {
            self.counters.breaker_transitions[usize::from(state)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The actor's check: an open breaker whose cooldown ended turns half-open; true when it
    /// did (the caller sends the probe).
    pub(crate) fn try_half_open(&self, now: Instant) -> bool {
        if self.state.load(Ordering::Relaxed) != OPEN
            || clock_ms(now) < self.retry_at.load(Ordering::Relaxed)
        {
            return false;
        }
        let _inner = self.inner();
        if self.state.load(Ordering::Relaxed) != OPEN {
            return false;
        }
        self.enter(HALF_OPEN);
        true
    }

    /// The half-open probe's outcome: answered closes the breaker, failed (`Err(why)`)
    /// opens it for another cooldown.
    pub(crate) fn probed(&self, outcome: Result<(), &str>) {
        let mut inner = self.inner();
        if self.state.load(Ordering::Relaxed) != HALF_OPEN {
            return;
        }
        match outcome {
            Ok(()) => {
                self.failures.store(0, Ordering::Relaxed);
                inner.opened = None;
                self.enter(CLOSED);
            }
            Err(why) => {
                inner.reason = format!("still not answering after a cooldown: {why}");
                self.open(&inner);
            }
        }
    }

    /// A new connection finished its handshake: it answers, so the breaker closes.
    pub(crate) fn reset(&self) {
        let mut inner = self.inner();
        self.failures.store(0, Ordering::Relaxed);
        inner.opened = None;
        if self.state.load(Ordering::Relaxed) != CLOSED {
            self.enter(CLOSED);
        }
    }

    /// How long it has been open (or half-open) since it last opened from closed.
    pub(crate) fn open_for(&self, now: Instant) -> Option<Duration> {
        if self.state.load(Ordering::Relaxed) == CLOSED {
            return None;
        }
        self.inner()
            .opened
            .map(|t| now.saturating_duration_since(t))
    }

    /// What `/readyz` shows: the state, and why it is not closed.
    pub(crate) fn view(&self) -> BreakerView {
        let state = self.state();
        let (reason, open_for) = match state {
            BreakerState::Closed => (None, None),
            _ => {
                let inner = self.inner();
                (
                    Some(inner.reason.clone()),
                    inner.opened.map(|t| t.elapsed()),
                )
            }
        };
        let retry_in = (state == BreakerState::Open).then(|| {
            let at = self.retry_at.load(Ordering::Relaxed);
            Duration::from_millis(at.saturating_sub(clock_ms(Instant::now())))
        });
        BreakerView {
            state,
            failures: self.failures.load(Ordering::Relaxed),
            reason,
            open_for,
            retry_in,
        }
    }
}

/// A breaker's state as the admin address shows it.
#[derive(Debug, Clone)]
pub struct BreakerView {
    pub state: BreakerState,
    /// Failures in a row so far (while closed).
    pub failures: u32,
    /// Why it opened, while it is not closed.
    pub reason: Option<String>,
    /// How long since it opened, while it is not closed.
    pub open_for: Option<Duration>,
    /// While open: when the probe will be sent.
    pub retry_in: Option<Duration>,
}

/// A duration in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: Option<u32>, cooldown_ms: u64) -> Arc<Breaker> {
        let policy = HealthPolicy {
            breaker_failures: failures,
            breaker_cooldown: Duration::from_millis(cooldown_ms),
            ..HealthPolicy::default()
        };
        Breaker::new("up", &policy, Arc::default(), true)
    }

    #[test]
    fn opens_after_failures_in_a_row_and_refuses_at_once() {
        let b = breaker(Some(3), 60_000);
        assert!(!b.failed("t1"));
        assert!(!b.failed("t2"));
        // An answer in between starts the count again.
        b.succeeded();
        assert!(!b.failed("t3"));
        assert!(!b.failed("t4"));
        assert!(b.admit().is_ok());
        assert!(b.failed("timed out"));
        assert_eq!(b.state(), BreakerState::Open);
        let err = b.admit().unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"up\"") && text.contains("3 failures in a row, the last: timed out"),
            "{text}"
        );
        assert!(text.contains("tried again in"), "{text}");
        assert!(err.retryable());
        // Failures while open change nothing.
        assert!(!b.failed("more"));
        assert_eq!(b.counters.breaker_rejections.load(Ordering::Relaxed), 1);
        assert_eq!(
            b.counters.breaker_transitions[BreakerState::Open as usize].load(Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn half_open_after_the_cooldown_and_the_probe_decides() {
        let b = breaker(Some(1), 30);
        assert!(b.failed("gone"));
        assert!(!b.try_half_open(Instant::now()), "not before the cooldown");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.try_half_open(Instant::now()));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let text = b.admit().unwrap_err().to_string();
        assert!(text.contains("probe now under way"), "{text}");
        b.probed(Err("no answer"));
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.open_for(Instant::now()).is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.try_half_open(Instant::now()));
        b.probed(Ok(()));
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.admit().is_ok());
        let entered =
            |s: BreakerState| b.counters.breaker_transitions[s as usize].load(Ordering::Relaxed);
        assert_eq!(
            (
                entered(BreakerState::Open),
                entered(BreakerState::HalfOpen),
                entered(BreakerState::Closed)
            ),
            (2, 2, 1)
        );
    }

    #[test]
    fn a_new_connection_closes_it_and_zero_failures_never_opens_it() {
        let b = breaker(Some(1), 60_000);
        assert!(b.failed("gone"));
        b.reset();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.open_for(Instant::now()).is_none());
        let never = breaker(None, 10);
        for _ in 0..100 {
            assert!(!never.failed("x"));
        }
        assert!(never.admit().is_ok());
    }
}
