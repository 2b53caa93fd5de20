//! The table of requests sent to one upstream and not yet answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::error::UpstreamError;

/// Where a host's messages go. Implemented by each downstream session.
pub trait Downstream: Send + Sync {
    /// Writes one complete message line (ending in `\n`) to the host.
    fn send_line(&self, line: &[u8]);
    /// Writes one complete message line given as consecutive parts, so a large payload need
    /// not be copied into a line first.
    fn send_parts(&self, parts: &[&[u8]]) {
        self.send_line(&parts.concat());
    }
    /// Writes one notification line; a session that is not initialized yet drops it.
    fn send_notification(&self, line: &[u8]) {
        self.send_line(line);
    }
    /// A number unique to this session within the process.
    fn session_id(&self) -> u64;
}

/// An upstream's answer, payload kept as its JSON text.
#[derive(Debug)]
pub enum Answer {
    Result(String),
    /// The error object, as the upstream wrote it.
    Error(String),
}

/// What to do with the answer.
pub enum Reply {
    /// Write it straight to a host, with the host's id restored: the hot path, done on the
    /// upstream's reader thread without waking any task.
    Forward(Forward),
    /// Hand it to a waiting task (handshake, list fetches, fan-outs).
    Channel(oneshot::Sender<Result<Answer, UpstreamError>>),
}

/// A request being forwarded for a host.
pub struct Forward {
    pub to: Arc<dyn Downstream>,
    /// The host's id, as JSON text.
    pub host_id: Box<str>,
    /// The method, for rewriting URIs in the result.
    pub method: &'static str,
    /// The host's progress token, when Manifold replaced it with the upstream id.
    pub progress_token: Option<Box<str>>,
    /// The span of this upstream hop; it ends when the entry is dropped.
    pub span: tracing::Span,
}

pub(crate) struct Entry {
    pub reply: Reply,
    pub deadline: Instant,
}

/// Pending requests by upstream id.
#[derive(Default)]
pub(crate) struct Pending {
    pub entries: HashMap<u64, Entry>,
}

impl Pending {
    /// Removes and returns every entry whose deadline has passed.
    pub fn take_expired(&mut self, now: Instant) -> Vec<(u64, Entry)> {
        let expired: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        expired
            .into_iter()
            .filter_map(|id| self.entries.remove(&id).map(|e| (id, e)))
            .collect()
    }
}
