//! One live connection to an upstream: the writer, the pending-request table and the id
//! counter. Callers on any thread send through it directly; the reader thread answers through
//! it. It lives as long as one child process: a restart makes a new one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use manifold_catalog::rewrite;
use manifold_protocol::{codes, write, ErrorObject, RawObject};
use tokio::sync::oneshot;

use crate::error::UpstreamError;
use crate::pending::{Answer, Entry, Forward, Pending, Reply};
use crate::pipe::{PipeWriter, WriteError};

/// A live connection to one upstream process.
pub struct Connection {
    name: Arc<str>,
    uri_prefix: Arc<str>,
    writer: Arc<PipeWriter>,
    /// Guards the table and the closed flag together, so that a request is either in the
    /// table when the connection closes (and gets failed) or refused up front. Held only for
    /// map operations, never across a write or an await.
    pending: Mutex<PendingState>,
    next_id: AtomicU64,
    timeout: Duration,
}

#[derive(Default)]
struct PendingState {
    table: Pending,
    closed: Option<String>,
}

impl Connection {
    pub(crate) fn new(
        name: Arc<str>,
        uri_prefix: Arc<str>,
        writer: Arc<PipeWriter>,
        timeout: Duration,
    ) -> Self {
        Self {
            name,
            uri_prefix,
            writer,
            pending: Mutex::new(PendingState::default()),
            next_id: AtomicU64::new(1),
            timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PendingState> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A fresh upstream request id. Ids are unique per connection, whichever host or session
    /// the request came from, so answers can never be confused.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request whose answer goes straight back to a host. `line` is the complete
    /// request line, already carrying `id`. On failure nothing is sent to the host: the
    /// caller answers with the error.
    pub fn forward(&self, id: u64, line: &[u8], fwd: Forward) -> Result<(), UpstreamError> {
        let deadline = Instant::now() + self.timeout;
        {
            let mut st = self.lock();
            if let Some(reason) = &st.closed {
                return Err(self.unavailable(reason));
            }
            st.table.entries.insert(
                id,
                Entry {
                    reply: Reply::Forward(fwd),
                    deadline,
                },
            );
        }
        match self.writer.write_line(line) {
            Ok(()) => Ok(()),
            Err(e) => match self.lock().table.entries.remove(&id) {
                Some(_) => Err(self.write_error(e)),
                // The reader already answered or failed it: nothing more to do.
                _ => Ok(()),
            },
        }
    }

    /// Sends a request and waits for its answer (handshake, list fetches, fan-outs).
    pub async fn request(
        &self,
        method: &str,
        params: Option<&str>,
    ) -> Result<Answer, UpstreamError> {
        let id = self.next_id();
        let mut line = Vec::with_capacity(64 + params.map_or(0, str::len));
        write::request(&mut line, id, method, params);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if let Some(reason) = &st.closed {
                return Err(self.unavailable(reason));
            }
            let deadline = Instant::now() + self.timeout;
            st.table.entries.insert(
                id,
                Entry {
                    reply: Reply::Channel(tx),
                    deadline,
                },
            );
        }
        if let Err(e) = self.writer.write_line(&line) {
            self.lock().table.entries.remove(&id);
            return Err(self.write_error(e));
        }
        rx.await
            .unwrap_or_else(|_| Err(self.closed_error("the connection was dropped")))
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Option<&str>) -> Result<(), UpstreamError> {
        let mut line = Vec::with_capacity(64 + params.map_or(0, str::len));
        write::notification(&mut line, method, params);
        self.writer
            .write_line(&line)
            .map_err(|e| self.write_error(e))
    }

    /// A host cancelled its request `host_id`: drop the pending entry and tell the upstream,
    /// with the upstream's id. Returns whether this connection owned the request.
    pub fn cancel_for(&self, session: u64, host_id: &str, reason: Option<&str>) -> bool {
        let found = {
            let mut st = self.lock();
            let id = st.table.entries.iter().find_map(|(id, e)| match &e.reply {
                Reply::Forward(f) if f.to.session_id() == session && &*f.host_id == host_id => {
                    Some(*id)
                }
                _ => None,
            });
            id.and_then(|id| st.table.entries.remove(&id).map(|_| id))
        };
        let Some(id) = found else { return false };
        let mut params = format!("{{\"requestId\":{id}");
        if let Some(reason) = reason {
            let mut quoted = Vec::new();
            manifold_protocol::object::write_json_str(&mut quoted, reason);
            params.push_str(",\"reason\":");
            params.push_str(&String::from_utf8_lossy(&quoted));
        }
        params.push('}');
        let _ = self.notify("notifications/cancelled", Some(&params));
        true
    }

    /// Delivers an answer read from the upstream. Unknown ids (late answers to cancelled or
    /// timed-out requests) are dropped, as the spec requires.
    pub(crate) fn answer(&self, id: u64, result: Option<&str>, error: Option<&str>) -> bool {
        let Some(entry) = self.lock().table.entries.remove(&id) else {
            return false;
        };
        match entry.reply {
            Reply::Forward(fwd) => self.deliver(fwd, result, error),
            Reply::Channel(tx) => {
                let answer = match (result, error) {
                    (_, Some(e)) => Answer::Error(e.to_owned()),
                    (Some(r), None) => Answer::Result(r.to_owned()),
                    (None, None) => Answer::Result("null".to_owned()),
                };
                let _ = tx.send(Ok(answer));
            }
        }
        true
    }

    fn deliver(&self, fwd: Forward, result: Option<&str>, error: Option<&str>) {
        let _entered = fwd.span.enter();
        match (result, error) {
            (_, Some(err)) => {
                let mut out = Vec::with_capacity(64 + err.len());
                write::raw_error_response(&mut out, &fwd.host_id, err);
                fwd.to.send_line(&out);
            }
            (result, None) => {
                let result = result.unwrap_or("null");
                let mapped = rewrite::result_uris(fwd.method, result, &self.uri_prefix);
                let result = mapped.as_deref().unwrap_or(result);
                fwd.to
                    .send_parts(&write::response_parts(&fwd.host_id, result));
            }
        }
    }

    /// Forwards an upstream's progress notification to the host whose request it belongs to,
    /// with the host's own progress token. Returns false if no request matches.
    pub(crate) fn progress(&self, params: &str) -> bool {
        let Ok(mut obj) = RawObject::parse(params) else {
            return false;
        };
        let Some(id) = obj.get("progressToken").and_then(|t| t.parse::<u64>().ok()) else {
            return false;
        };
        let target = {
            let st = self.lock();
            match st.table.entries.get(&id).map(|e| &e.reply) {
                Some(Reply::Forward(f)) => f.progress_token.clone().map(|t| (Arc::clone(&f.to), t)),
                _ => None,
            }
        };
        let Some((to, token)) = target else {
            return false;
        };
        obj.set_raw("progressToken", String::from(token));
        let mut out = Vec::new();
        write::notification(&mut out, "notifications/progress", Some(&obj.to_text()));
        to.send_line(&out);
        true
    }

    /// Fails every request whose deadline passed, and tells the upstream to stop on them.
    pub(crate) fn expire(&self, now: Instant) {
        let expired = self.lock().table.take_expired(now);
        for (id, entry) in expired {
            let err = UpstreamError::Timeout {
                upstream: self.name.to_string(),
                after: self.timeout,
            };
            self.fail(entry.reply, err);
            let params = format!("{{\"requestId\":{id},\"reason\":\"timed out in Manifold\"}}");
            let _ = self.notify("notifications/cancelled", Some(&params));
        }
    }

    /// Marks the connection closed and fails every pending request at once.
    pub(crate) fn close(&self, reason: &str) {
        let drained: Vec<Entry> = {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.closed = Some(reason.to_owned());
            }
            st.table.entries.drain().map(|(_, e)| e).collect()
        };
        self.writer.close();
        for entry in drained {
            self.fail(entry.reply, self.closed_error(reason));
        }
    }

    /// Writes an already framed line (used to answer the upstream's own requests).
    pub(crate) fn write_raw(&self, line: &[u8]) {
        let _ = self.writer.write_line(line);
    }

    fn fail(&self, reply: Reply, err: UpstreamError) {
        match reply {
            Reply::Channel(tx) => {
                let _ = tx.send(Err(err));
            }
            Reply::Forward(fwd) => {
                let _entered = fwd.span.enter();
                let mut out = Vec::new();
                write::error_response(&mut out, Some(&fwd.host_id), &error_object(&err));
                fwd.to.send_line(&out);
            }
        }
    }

    fn unavailable(&self, reason: &str) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.name.to_string(),
            reason: reason.to_owned(),
        }
    }

    fn closed_error(&self, reason: &str) -> UpstreamError {
        UpstreamError::Closed {
            upstream: self.name.to_string(),
            reason: reason.to_owned(),
        }
    }

    fn write_error(&self, e: WriteError) -> UpstreamError {
        match e {
            WriteError::Closed => self.unavailable("its input is closed"),
            WriteError::Full(queued) => UpstreamError::Overloaded {
                upstream: self.name.to_string(),
                queued,
            },
        }
    }
}

/// The JSON-RPC error a host receives for an upstream failure.
pub fn error_object(err: &UpstreamError) -> ErrorObject {
    let code = match err {
        UpstreamError::Timeout { .. } => codes::UPSTREAM_TIMEOUT,
        UpstreamError::Unavailable { .. }
        | UpstreamError::Closed { .. }
        | UpstreamError::Overloaded { .. } => codes::UPSTREAM_UNAVAILABLE,
    };
    let upstream = match err {
        UpstreamError::Unavailable { upstream, .. }
        | UpstreamError::Closed { upstream, .. }
        | UpstreamError::Timeout { upstream, .. }
        | UpstreamError::Overloaded { upstream, .. } => upstream,
    };
    ErrorObject::new(code, err.to_string())
        .with_data(&serde_json::json!({ "upstream": upstream, "retryable": err.retryable() }))
}
