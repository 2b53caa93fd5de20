//! Writing whole lines to a pipe without ever blocking the caller.
//!
//! The hot path writes a request straight into the pipe from whichever thread routed it (no
//! hop through another thread or task). The pipe is non-blocking: when the reader is slow and
//! the pipe is full, the rest is queued and a drainer thread, started once per pipe, finishes
//! the job while later lines queue behind it in order. A peer that never reads is detected by
//! the queue limit instead of by a hung caller.
//!
//! Pipes start with the kernel's 64 KiB buffer. A message larger than that crosses in many
//! pipe-fulls, each a write, a wake-up and a read; so when one comes, the pipe is grown to hold
//! it (see [`grow`]). Pipes that never carry a large message stay small.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::OFlags;

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
        while st.queued + rest.len() > self.limit && st.queued > 0 {
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

    /// Waits while more than `high` bytes are queued, until at most `low` are (or the pipe
    /// closes); returns at once below `high`. The stdio transport calls it before reading
    /// more of a host's input, so that a host that reads its output slowly is paced instead
    /// of having its answers pile up.
    pub fn wait_below(&self, high: usize, low: usize) {
        if self.backlog.load(Ordering::Relaxed) <= high {
            return;
        }
        let mut st = lock(&self.state);
        if st.queued <= high {
            return;
        }
        while st.queued > low && st.file.is_some() {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Waits until everything queued has been written, the pipe closed, or `deadline`
    /// passed; returns whether everything was written.
    pub fn flush(&self, deadline: std::time::Instant) -> bool {
        let mut st = lock(&self.state);
        loop {
            if st.file.is_none() {
                return st.queue.is_empty();
            }
            if st.queue.is_empty() && !st.draining {
                return true;
            }
            let now = std::time::Instant::now();
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
            let ok = write_all_polling(&file, &chunk);
            let mut st = lock(&self.state);
            st.queued = st.queued.saturating_sub(chunk.len());
            self.backlog.store(st.queued, Ordering::Relaxed);
            // Nothing owned any more: a flush waiting for the last chunk may return.
            st.draining = !st.queue.is_empty();
            if !ok {
                st.file = None;
                st.queue.clear();
                st.queued = 0;
                self.backlog.store(0, Ordering::Relaxed);
            }
            self.changed.notify_all();
        }
    }
}

/// The largest pipe buffer Manifold asks for: the kernel's default ceiling for unprivileged
/// processes (`/proc/sys/fs/pipe-max-size`).
pub const MAX_PIPE_BYTES: usize = 1 << 20;

/// How much pipe buffer, beyond the default, all of Manifold's pipes together may grow by.
/// The kernel charges pipe buffers to the user (64 MiB by default before new pipes are cut
/// down), so Manifold takes a bounded share of that rather than 1 MiB per upstream.
pub const GROWTH_BUDGET: usize = 16 << 20;

/// Pipe buffer bytes added beyond the pipes' initial sizes, against a limit.
pub struct Budget {
    grown: AtomicUsize,
    limit: usize,
}

impl Budget {
    pub const fn new(limit: usize) -> Self {
        Self {
            grown: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `bytes` from what is left; false, taking nothing, if too few are left.
    fn take(&self, bytes: usize) -> bool {
        self.grown
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                (g + bytes <= self.limit).then_some(g + bytes)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.grown.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes currently taken.
    pub fn used(&self) -> usize {
        self.grown.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Budget({}/{})", self.used(), self.limit)
    }
}

/// The one budget every pipe of the process grows within.
static BUDGET: Budget = Budget::new(GROWTH_BUDGET);

/// The kernel buffer size of one pipe, grown on demand within a [`Budget`]. What it took from
/// the budget is given back when it is dropped, with the writer or reader that owns it.
#[derive(Debug)]
pub struct PipeSize {
    start: usize,
    now: usize,
    budget: &'static Budget,
}

impl PipeSize {
    /// The current size of pipe `fd` (0, and never grown, if it is not a pipe).
    pub fn of(fd: impl AsFd) -> Self {
        Self::within(fd, &BUDGET)
    }

    /// The same, growing within `budget` instead of the process-wide one.
    pub fn within(fd: impl AsFd, budget: &'static Budget) -> Self {
        let start = rustix::pipe::fcntl_getpipe_size(fd).unwrap_or(0);
        Self {
            start,
            now: start,
            budget,
        }
    }

    /// The pipe's buffer in bytes.
    pub fn bytes(&self) -> usize {
        self.now
    }

    /// Grows pipe `fd` so that a `len`-byte message fits (a power of two, at most
    /// [`MAX_PIPE_BYTES`]) if the budget allows; a refusal (budget spent, kernel limit) just
    /// leaves the pipe as it was.
    pub fn fit(&mut self, fd: impl AsFd, len: usize) {
        let target = len.next_power_of_two().min(MAX_PIPE_BYTES);
        if self.now == 0 || target <= self.now || !self.budget.take(target - self.now) {
            return;
        }
        match rustix::pipe::fcntl_setpipe_size(fd, target) {
            Ok(size) => {
                // The kernel rounds up to whole pages; account for what it actually gave.
                if size > target {
                    self.budget
                        .grown
                        .fetch_add(size - target, Ordering::Relaxed);
                }
                tracing::debug!(from = self.now, to = size, "pipe buffer grown");
                self.now = size;
            }
            Err(e) => {
                self.budget.give_back(target - self.now);
                tracing::debug!(
                    from = self.now,
                    wanted = target,
                    "pipe buffer not grown: {e}"
                );
            }
        }
    }
}

impl Drop for PipeSize {
    fn drop(&mut self) {
        self.budget.give_back(self.now - self.start);
    }
}

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

/// Writes all of `buf`, waiting for the pipe to become writable; false if the pipe broke.
fn write_all_polling(file: &File, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match write_some(file, buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // A bounded wait lets a closed writer be noticed even if the reader hangs.
                let timeout = rustix::event::Timespec::try_from(Duration::from_millis(200)).ok();
                let mut fds = [PollFd::new(file, PollFlags::OUT)];
                let _ = rustix::event::poll(&mut fds, timeout.as_ref());
            }
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
