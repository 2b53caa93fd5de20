//! Writing whole lines to a pipe without ever blocking the caller.
//!
//! The hot path writes a request straight into the pipe from whichever thread routed it (no
//! hop through another thread or task). The pipe is non-blocking: when the reader is slow and
//! the pipe is full, the rest is queued and a drainer thread, started once per pipe, finishes
//! the job while later lines queue behind it in order. A peer that never reads is detected by
//! the queue limit instead of by a hung caller, or, for lines that must not be refused, by the
//! time it has taken nothing (see [`Stall`]).
//!
//! Pipes start with the kernel's 64 KiB buffer. A message larger than that crosses in many
//! pipe-fulls, each a write, a wake-up and a read; so when one comes, the pipe is grown to hold
//! it (see [`grow`]). Pipes that never carry a large message stay small.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::OFlags;

mod size;
pub use size::{Budget, PipeSize, GROWTH_BUDGET, MAX_PIPE_BYTES};

/// What to do when the queue is at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Refuse the line: for upstreams, whose requests then fail with a clear error.
    Fail,
    /// Wait for room: for the host, whose own reading paces Manifold.
    Wait,
}

/// Why a line was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("the pipe is closed")]
    Closed,
    #[error("the reader is not keeping up ({0} bytes queued)")]
    Full(usize),
}

/// What a writer does about a reader that takes nothing while bytes wait for it: after
/// `after`, the drainer gives up, closes the pipe (dropping what waits) and calls `then` once,
/// with the number of bytes that were waiting.
pub struct Stall {
    pub after: Duration,
    pub then: Box<dyn Fn(usize) + Send + Sync>,
}

impl std::fmt::Debug for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stall({:?})", self.after)
    }
}

/// How the drainer's writing of one chunk ended.
enum Written {
    All,
    /// The pipe broke (the reader closed it).
    Broken,
    /// The reader took nothing for the [`Stall`] time.
    Stalled,
}

/// A line writer over a non-blocking pipe. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct PipeWriter {
    state: Mutex<State>,
    /// Signals the drainer that bytes were queued, and waiting writers that room was made.
    changed: Condvar,
    limit: usize,
    when_full: WhenFull,
    /// `State::queued`, readable without the lock (set under it), for a reader that checks
    /// it before every message it takes in.
    backlog: AtomicUsize,
    stall: Option<Stall>,
    /// When the reader last took bytes, or bytes began to wait for it (since `born`, in ms):
    /// written by the drainer and by a write that starts a queue, never on the direct path.
    progress_ms: AtomicU64,
    born: Instant,
}

#[derive(Debug)]
struct State {
    /// `None` once closed: writes fail and the drainer exits.
    file: Option<Arc<File>>,
    /// Bytes not yet written, in order. Non-empty means new lines must queue behind them.
    queue: VecDeque<Vec<u8>>,
    queued: usize,
    /// The drainer owns bytes it has taken from the queue and not finished writing.
    draining: bool,
    drainer_started: bool,
    /// The pipe's kernel buffer, grown for large lines.
    size: PipeSize,
}

// The state's invariants hold between every statement that can panic, so a poisoned lock is
// still consistent; recover it rather than take the whole process down.
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PipeWriter {
    /// Wraps `fd` (made non-blocking) with a queue of at most `limit` bytes.
    pub fn new(fd: OwnedFd, limit: usize, when_full: WhenFull) -> io::Result<Arc<Self>> {
        Self::build(fd, limit, when_full, None)
    }

    /// The same, giving up on a reader that takes nothing for `stall.after` while bytes wait.
    pub fn with_stall(
        fd: OwnedFd,
        limit: usize,
        when_full: WhenFull,
        stall: Stall,
    ) -> io::Result<Arc<Self>> {
        Self::build(fd, limit, when_full, Some(stall))
    }

    fn build(
        fd: OwnedFd,
        limit: usize,
        when_full: WhenFull,
        stall: Option<Stall>,
    ) -> io::Result<Arc<Self>> {
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
        let size = PipeSize::of(&fd);
        Ok(Arc::new(Self {
            state: Mutex::new(State {
                file: Some(Arc::new(File::from(fd))),
                queue: VecDeque::new(),
                queued: 0,
                draining: false,
                drainer_started: false,
                size,
            }),
            changed: Condvar::new(),
            limit,
            when_full,
            backlog: AtomicUsize::new(0),
            stall,
            progress_ms: AtomicU64::new(0),
            born: Instant::now(),
        }))
    }

    /// Writes one complete line (the caller includes the `\n`).
    pub fn write_line(self: &Arc<Self>, line: &[u8]) -> Result<(), WriteError> {
        self.write_parts(&[line])
    }

    /// Writes one complete line given as consecutive parts, with one vectored write when the
    /// pipe has room: a large payload goes from where it lies straight to the pipe, and only
    /// what does not fit is copied into the queue.
    pub fn write_parts(self: &Arc<Self>, parts: &[&[u8]]) -> Result<(), WriteError> {
        self.write(parts, true)
    }

    /// Writes a line the reader is owed whatever it costs (an answer to a request it was let
    /// send): queued past the limit rather than refused, so only a closed pipe fails it. The
    /// caller bounds how much of it there can be.
    pub fn write_owed(self: &Arc<Self>, parts: &[&[u8]]) -> Result<(), WriteError> {
        self.write(parts, false)
    }

    fn write(self: &Arc<Self>, parts: &[&[u8]], bounded: bool) -> Result<(), WriteError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut st = lock(&self.state);
        let Some(file) = st.file.clone() else {
            return Err(WriteError::Closed);
        };
        st.size.fit(&*file, len);
        let mut written = 0;
        if st.queue.is_empty() && !st.draining {
            match write_vectored_some(&file, parts) {
                Ok(n) if n == len => return Ok(()),
                Ok(n) => written = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    st.file = None;
                    self.changed.notify_all();
                    return Err(WriteError::Closed);
                }
            }
        }
        let rest = remainder(parts, written);
        while bounded && st.queued + rest.len() > self.limit && st.queued > 0 {
            if self.when_full == WhenFull::Fail {
                return Err(WriteError::Full(st.queued));
            }
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if st.file.is_none() {
                return Err(WriteError::Closed);
            }
        }
        if st.queue.is_empty() && !st.draining {
            // Bytes begin to wait: a stall is counted from here.
            self.mark_progress();
        }
        st.queued += rest.len();
        self.backlog.store(st.queued, Ordering::Relaxed);
        st.queue.push_back(rest);
        if !st.drainer_started {
            st.drainer_started = true;
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("manifold-pipe-drain".into())
                .spawn(move || me.drain());
            if spawned.is_err() {
                st.file = None;
                return Err(WriteError::Closed);
            }
        }
        self.changed.notify_all();
        Ok(())
    }

    /// Closes the pipe: the reader sees end of input once queued bytes are dropped.
    pub fn close(&self) {
        let mut st = lock(&self.state);
        st.file = None;
        st.queue.clear();
        st.queued = 0;
        self.backlog.store(0, Ordering::Relaxed);
        self.changed.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).file.is_none()
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

    /// How long the reader has taken nothing while bytes wait for it; zero when none wait.
    pub fn unread_for(&self) -> Duration {
        if self.backlog.load(Ordering::Relaxed) == 0 {
            return Duration::ZERO;
        }
        let since = Duration::from_millis(self.progress_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(since)
    }

    fn mark_progress(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.progress_ms.store(ms, Ordering::Relaxed);
    }

    /// Waits while more than `high` bytes are queued, until at most `low` are (or the pipe
    /// closes), for at most `timeout`; returns at once below `high`, and whether it got there
    /// (false: the time ran out first). The stdio transport calls it before reading more of a
    /// host's input, so that a host that reads its output slowly is paced instead of having
    /// its answers pile up.
    pub fn wait_below(&self, high: usize, low: usize, timeout: Duration) -> bool {
        if self.backlog.load(Ordering::Relaxed) <= high {
            return true;
        }
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        if st.queued <= high {
            return true;
        }
        while st.queued > low && st.file.is_some() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Waits until everything queued has been written, the pipe closed, or `deadline`
    /// passed; returns whether everything was written.
    pub fn flush(&self, deadline: Instant) -> bool {
        let mut st = lock(&self.state);
        loop {
            if st.file.is_none() {
                return st.queue.is_empty();
            }
            if st.queue.is_empty() && !st.draining {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    fn drain(self: Arc<Self>) {
        loop {
            let (file, chunk) = {
                let mut st = lock(&self.state);
                while st.queue.is_empty() && st.file.is_some() {
                    st.draining = false;
                    st = self
                        .changed
                        .wait(st)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                let Some(file) = st.file.clone() else { return };
                let chunk = st.queue.pop_front().unwrap_or_default();
                st.draining = true;
                (file, chunk)
            };
            let written = self.write_out(&file, &chunk);
            let mut st = lock(&self.state);
            let waiting = st.queued;
            st.queued = st.queued.saturating_sub(chunk.len());
            self.backlog.store(st.queued, Ordering::Relaxed);
            // Nothing owned any more: a flush waiting for the last chunk may return.
            st.draining = !st.queue.is_empty();
            if !matches!(written, Written::All) {
                st.file = None;
                st.queue.clear();
                st.queued = 0;
                st.draining = false;
                self.backlog.store(0, Ordering::Relaxed);
            }
            self.changed.notify_all();
            drop(st);
            if let (Written::Stalled, Some(stall)) = (written, &self.stall) {
                (stall.then)(waiting);
                return;
            }
        }
    }

    /// Writes all of `buf`, waiting for the pipe to become writable, unless the pipe breaks or
    /// the reader stalls.
    fn write_out(&self, file: &File, mut buf: &[u8]) -> Written {
        while !buf.is_empty() {
            match write_some(file, buf) {
                Ok(0) => return Written::Broken,
                Ok(n) => {
                    buf = &buf[n..];
                    self.mark_progress();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self
                        .stall
                        .as_ref()
                        .is_some_and(|s| self.unread_for() >= s.after)
                    {
                        return Written::Stalled;
                    }
                    // A bounded wait lets a closed writer or a stall be noticed even if the
                    // reader hangs.
                    let timeout = rustix::event::Timespec::try_from(POLL_SLICE).ok();
                    let mut fds = [PollFd::new(file, PollFlags::OUT)];
                    let _ = rustix::event::poll(&mut fds, timeout.as_ref());
                }
                Err(_) => return Written::Broken,
            }
        }
        Written::All
    }
}

/// How long the drainer waits for a full pipe at a time.
const POLL_SLICE: Duration = Duration::from_millis(200);

fn write_vectored_some(file: &File, parts: &[&[u8]]) -> io::Result<usize> {
    // An answer is five parts; no allocation for up to eight.
    let mut slices = [io::IoSlice::new(&[]); 8];
    if parts.len() > slices.len() {
        return write_some(file, &parts.concat());
    }
    for (slice, part) in slices.iter_mut().zip(parts) {
        *slice = io::IoSlice::new(part);
    }
    loop {
        match (&*file).write_vectored(&slices[..parts.len()]) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The bytes of `parts` after the first `skip`, in one buffer.
fn remainder(parts: &[&[u8]], mut skip: usize) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() - skip;
    let mut out = Vec::with_capacity(len);
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
        } else {
            out.extend_from_slice(&part[skip..]);
            skip = 0;
        }
    }
    out
}

fn write_some(file: &File, buf: &[u8]) -> io::Result<usize> {
    loop {
        match (&*file).write(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests;
