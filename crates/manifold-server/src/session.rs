//! A downstream session: where answers and notifications for one host are written, and what
//! the handshake established.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use manifold_upstream::pipe::PipeWriter;
use manifold_upstream::Downstream;

/// Where a session's output goes.
pub enum Output {
    /// A pipe or socket: non-blocking writes, queued when the host reads slowly.
    Pipe(Arc<PipeWriter>),
    /// A terminal or file: plain blocking writes (interactive use, tests).
    Blocking(Mutex<File>),
}

const NEW: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;

/// One host's session.
pub struct Session {
    id: u64,
    output: Output,
    state: AtomicU8,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl Session {
    pub fn new(output: Output) -> Arc<Self> {
        Arc::new(Self {
            id: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            output,
            state: AtomicU8::new(NEW),
        })
    }

    /// Claims the one `initialize` of the session; false if it already happened.
    pub fn begin_initialize(&self) -> bool {
        self.state
            .compare_exchange(NEW, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Marks the handshake done, just before `initialize` is answered.
    pub fn finish_initialize(&self) {
        self.state.store(READY, Ordering::Release);
    }

    /// Whether `initialize` has been answered.
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }
}

impl Downstream for Session {
    fn send_line(&self, line: &[u8]) {
        self.send_parts(&[line]);
    }

    fn send_parts(&self, parts: &[&[u8]]) {
        let ok = match &self.output {
            Output::Pipe(w) => w.write_parts(parts).is_ok(),
            Output::Blocking(f) => {
                let mut f = f.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                parts
                    .iter()
                    .try_for_each(|p| f.write_all(p))
                    .and_then(|()| f.flush())
                    .is_ok()
            }
        };
        if !ok {
            tracing::debug!(session = self.id, "host output closed; message dropped");
        }
    }

    fn send_notification(&self, line: &[u8]) {
        // Before the handshake completes the host is not ready for notifications.
        if self.is_ready() {
            self.send_line(line);
        }
    }

    fn session_id(&self) -> u64 {
        self.id
    }
}
