//! Writing whole lines to a pipe without ever blocking the caller.
//!
//! The hot path writes a request straight into the pipe from whichever thread routed it (no
//! hop through another thread or task). The pipe is non-blocking: when the reader is slow and
//! the pipe is full, the rest is queued and a drainer thread, started once per pipe, finishes
//! the job while later lines queue behind it in order. A peer that never reads is detected by
//! the queue limit instead of by a hung caller.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
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
        Ok(Arc::new(Self {
            state: Mutex::new(State {
                file: Some(Arc::new(File::from(fd))),
                queue: VecDeque::new(),
                queued: 0,
                draining: false,
                drainer_started: false,
            }),
            changed: Condvar::new(),
            limit,
            when_full,
        }))
    }

    /// Writes one complete line (the caller includes the `\n`).
    pub fn write_line(self: &Arc<Self>, line: &[u8]) -> Result<(), WriteError> {
        let mut st = lock(&self.state);
        let Some(file) = st.file.clone() else {
            return Err(WriteError::Closed);
        };
        let mut rest = line;
        if st.queue.is_empty() && !st.draining {
            match write_some(&file, rest) {
                Ok(n) if n == rest.len() => return Ok(()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    st.file = None;
                    self.changed.notify_all();
                    return Err(WriteError::Closed);
                }
            }
        }
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
        st.queue.push_back(rest.to_vec());
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
        self.changed.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).file.is_none()
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        lock(&self.state).queued
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
            if !ok {
                st.file = None;
                st.queue.clear();
                st.queued = 0;
            }
            self.changed.notify_all();
        }
    }
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
