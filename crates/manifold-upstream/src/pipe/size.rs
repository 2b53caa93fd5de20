//! Pipe buffer sizes: a pipe that carries a message larger than its buffer is grown to hold
//! it, within a budget shared by every pipe of the process.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};

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
