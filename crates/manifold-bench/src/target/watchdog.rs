//! Bounds every blocking send and receive in time without a syscall on the hot path: the I/O
//! thread publishes "blocked in call number N" in an atomic, and a watchdog thread that sees
//! the same N for longer than the stall limit kills the server, which ends the blocked call.

use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watchdog looks; also the precision of the limits.
const TICK: Duration = Duration::from_millis(100);

/// Held by the I/O thread: marks the start and end of each call that may block.
pub struct Marker {
    shared: Arc<AtomicU64>,
    calls: u64,
}

impl Marker {
    /// A marker nobody watches (unit tests of the framing code).
    #[cfg(test)]
    pub fn detached() -> Self {
        Self {
            shared: Arc::new(AtomicU64::new(0)),
            calls: 0,
        }
    }

    pub fn blocking<T>(&mut self, f: impl FnOnce() -> T) -> T {
        // A fresh number per call lets the watchdog tell one long wait from many short ones.
        self.calls += 1;
        self.shared.store(self.calls, Ordering::Relaxed);
        let out = f();
        self.shared.store(0, Ordering::Relaxed);
        out
    }
}

pub struct Watchdog {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl Watchdog {
    /// Watches `child`; returns the watchdog and the marker the I/O thread must use.
    pub fn spawn(
        child: Arc<Mutex<Child>>,
        stall: Duration,
        lifetime: Duration,
    ) -> std::io::Result<(Self, Marker)> {
        let shared = Arc::new(AtomicU64::new(0));
        let fired = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let (watched, flag) = (Arc::clone(&shared), Arc::clone(&fired));
        let thread = std::thread::Builder::new()
            .name("load-watchdog".into())
            .spawn(move || {
                if must_kill(&watched, &stopped, stall, lifetime) {
                    flag.store(true, Ordering::SeqCst);
                    let _ = child.lock().unwrap_or_else(PoisonError::into_inner).kill();
                }
            })?;
        let dog = Self {
            stop: Some(stop),
            thread: Some(thread),
            fired,
        };
        Ok((dog, Marker { shared, calls: 0 }))
    }

    /// Whether the watchdog killed the server.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Stops watching and waits for the thread (at most one tick).
    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// True when the server must be killed: one call blocked past `stall`, or `lifetime` over.
fn must_kill(
    shared: &AtomicU64,
    stopped: &Receiver<()>,
    stall: Duration,
    lifetime: Duration,
) -> bool {
    let born = Instant::now();
    let (mut seen, mut since) = (0, Instant::now());
    let ticks = lifetime.as_millis() / TICK.as_millis() + 1;
    for _ in 0..ticks {
        match stopped.recv_timeout(TICK) {
            Err(RecvTimeoutError::Timeout) => {}
            // Asked to stop, or the owner is gone.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return false,
        }
        let now = shared.load(Ordering::Relaxed);
        if now == 0 || now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() >= stall {
            return true;
        }
        if born.elapsed() >= lifetime {
            return true;
        }
    }
    true
}
