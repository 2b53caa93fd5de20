//! Outlets: where messages for a host go. A session's stream (a stdio pipe, an SSE stream), the
//! response to one HTTP POST, or a batch being collected are all outlets; the router and the
//! requests it forwards only ever see this trait, never a transport.
//!
//! Messages are given as parts of one line ending in `\n` (so that a large payload is never
//! copied into a line first); outlets that do not frame by newline drop it.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use manifold_upstream::pipe::{PipeWriter, WriteError};

use manifold_telemetry::{metrics, Direction, HostTransport};

use tokio::sync::mpsc;

/// Asks for a session to be ended. Cheap to clone and callable from any thread without
/// blocking: the router's reaper task does the work (cancelling the session's requests
/// upstream, closing its streams).
#[derive(Clone)]
pub struct Ending(mpsc::UnboundedSender<(u64, String)>);

impl Ending {
    /// Requests go to `tx` (the registry keeps the receiver for the reaper).
    pub(crate) fn new(tx: mpsc::UnboundedSender<(u64, String)>) -> Self {
        Self(tx)
    }

    pub fn end(&self, session: u64, reason: String) {
        let _ = self.0.send((session, reason));
    }
}

/// Checks, in debug builds, that no counted lock guard is alive on this thread while it
/// writes to a host (see `manifold_upstream::guards_held`). Called by the request paths that
/// write: answers, progress, related messages, upstreams' requests.
pub fn check_no_guard(what: &str) {
    debug_assert_eq!(
        manifold_upstream::guards_held(),
        0,
        "{what}: a lock guard is alive while a host is written to"
    );
}

/// Where messages for a host go. Sending never blocks on the host: an outlet that cannot take
/// more ends its session instead (see [`Ending`]).
pub trait Outlet: Send + Sync {
    /// The answer to a request this outlet serves (for a session's stream, any message).
    fn answer(&self, parts: &[&[u8]]);
    /// The answer to a request this outlet serves, when it is an error: `status` is the HTTP
    /// status the error's classification gives it (see `error::Classified`), which only an
    /// outlet that is an HTTP response uses.
    fn answer_error(&self, parts: &[&[u8]], status: u16) {
        let _ = status;
        self.answer(parts);
    }
    /// A message that belongs with a request but is not its answer (progress), or a message
    /// for the session as a whole.
    fn notify(&self, parts: &[&[u8]]) {
        self.answer(parts);
    }
    /// A request this outlet serves will not be answered (the host cancelled it).
    fn unanswered(&self) {}
    /// Bytes given to this outlet that the host has not taken yet.
    fn backlog(&self) -> usize {
        0
    }
}

/// A session's output to a pipe or socket (stdio): non-blocking writes, queued while the host
/// reads slowly. The stdio transport stops reading the host's input while the queue is long
/// (see `stdio::read_loop`), so every answer is owed to a request the host was let send: it
/// is queued whatever the queue holds, and what waits is bounded by what was admitted. Other
/// messages (progress, log messages, Manifold's own requests) are not owed: past the writer's
/// limit (twice `session_queue_bytes`) they are dropped, with a warning, until the host
/// catches up. A host that takes nothing at all is let go by the writer's stall timeout.
pub struct PipeOutlet {
    writer: Arc<PipeWriter>,
    session: u64,
    ending: Ending,
    /// Messages other than answers are being dropped (warned of once per episode).
    dropping: AtomicBool,
}

impl PipeOutlet {
    pub fn new(writer: Arc<PipeWriter>, session: u64, ending: Ending) -> Self {
        Self {
            writer,
            session,
            ending,
            dropping: AtomicBool::new(false),
        }
    }

    fn closed(&self) {
        self.ending
            .end(self.session, "the host closed its output".into());
    }
}

/// Counts a message written to the stdio host.
fn sent(parts: &[&[u8]]) {
    let n = parts.iter().map(|p| p.len()).sum();
    metrics().host_bytes(HostTransport::Stdio, Direction::Out, n);
}

impl Outlet for PipeOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        sent(parts);
        if self.writer.write_owed(parts).is_err() {
            self.closed();
        }
    }

    fn notify(&self, parts: &[&[u8]]) {
        match self.writer.write_parts(parts) {
            Ok(()) => {
                sent(parts);
                if self.dropping.load(Ordering::Relaxed) {
                    self.dropping.store(false, Ordering::Relaxed);
                    tracing::info!("the host caught up with its output; nothing more is dropped");
                }
            }
            Err(WriteError::Full(queued)) => {
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        queued,
                        "the host is not keeping up with its output: messages other than \
                         answers are dropped until it does (server.session_queue_bytes)"
                    );
                }
            }
            Err(WriteError::Closed) => self.closed(),
        }
    }

    fn backlog(&self) -> usize {
        self.writer.queued()
    }
}

/// A session's output to a terminal or file: plain blocking writes (interactive use), so that
/// a shared terminal is not switched to non-blocking mode.
pub struct BlockingOutlet {
    file: Mutex<File>,
}

impl BlockingOutlet {
    pub fn new(file: File) -> Self {
        Self {
            file: Mutex::new(file),
        }
    }
}

impl Outlet for BlockingOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        sent(parts);
        let mut f = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let written = parts
            .iter()
            .try_for_each(|p| f.write_all(p))
            .and_then(|()| f.flush());
        if let Err(e) = written {
            tracing::debug!("host output closed; message dropped: {e}");
        }
    }
}

/// Collects the answers to a JSON-RPC batch and sends them as one array once the last one is
/// in. Everything else (progress) goes straight to the outlet the batch came from.
pub struct BatchOutlet {
    to: Arc<dyn Outlet>,
    /// Answers gathered, and how many are still to come. Locked per answer only.
    state: Mutex<(Vec<Vec<u8>>, usize)>,
}

impl BatchOutlet {
    pub fn new(to: Arc<dyn Outlet>, expected: usize) -> Self {
        Self {
            to,
            state: Mutex::new((Vec::with_capacity(expected), expected)),
        }
    }

    fn settle(&self, answer: Option<Vec<u8>>) {
        let done = {
            let mut st = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(a) = answer {
                st.0.push(a);
            }
            st.1 = st.1.saturating_sub(1);
            (st.1 == 0).then(|| std::mem::take(&mut st.0))
        };
        let Some(answers) = done else { return };
        if answers.is_empty() {
            return;
        }
        let mut line = Vec::with_capacity(answers.iter().map(|a| a.len() + 1).sum::<usize>() + 2);
        line.push(b'[');
        for (i, a) in answers.iter().enumerate() {
            if i > 0 {
                line.push(b',');
            }
            line.extend_from_slice(a);
        }
        line.extend_from_slice(b"]\n");
        self.to.answer(&[&line]);
    }
}

impl Outlet for BatchOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let mut message = parts.concat();
        if message.last() == Some(&b'\n') {
            message.pop();
        }
        self.settle(Some(message));
    }

    fn notify(&self, parts: &[&[u8]]) {
        self.to.notify(parts);
    }

    fn unanswered(&self) {
        self.settle(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Sink(Mutex<Vec<String>>);

    impl Outlet for Sink {
        fn answer(&self, parts: &[&[u8]]) {
            let text = String::from_utf8(parts.concat()).unwrap_or_default();
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(text);
        }
    }

    fn lines(sink: &Sink) -> Vec<String> {
        sink.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    #[test]
    fn a_batch_answers_once_with_every_answer() {
        let sink = Arc::new(Sink::default());
        let batch = BatchOutlet::new(sink.clone(), 3);
        batch.answer(&[b"{\"id\":1}\n"]);
        batch.notify(&[b"{\"method\":\"p\"}\n"]);
        assert_eq!(lines(&sink), ["{\"method\":\"p\"}\n"]);
        batch.unanswered();
        batch.answer(&[b"{\"id\":", b"2}\n"]);
        assert_eq!(
            lines(&sink),
            ["{\"method\":\"p\"}\n", "[{\"id\":1},{\"id\":2}]\n"]
        );
    }

    #[test]
    fn a_batch_whose_requests_were_all_cancelled_sends_nothing() {
        let sink = Arc::new(Sink::default());
        let batch = BatchOutlet::new(sink.clone(), 2);
        batch.unanswered();
        batch.unanswered();
        assert!(lines(&sink).is_empty());
    }

    /// The invariant "no lock guard alive across a write to a host" is checked, not narrated:
    /// a write path that runs under a counted guard fails in debug builds (every test build).
    #[test]
    #[should_panic(expected = "a lock guard is alive while a host is written to")]
    fn writing_to_a_host_under_a_counted_guard_fails_the_check() {
        check_no_guard("nothing held");
        let lock = Mutex::new(());
        let _held = manifold_upstream::CountedGuard::new(lock.lock().unwrap());
        check_no_guard("a test");
    }
}
