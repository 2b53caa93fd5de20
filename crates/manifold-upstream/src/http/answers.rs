//! What a POST or a stream carries back, for every transport: a JSON body (one message or a
//! batch's array) and SSE events, each message handed to [`Connection::receive`] with the
//! request whose answer stream carried it.

use std::time::Duration;

use manifold_protocol::sse::{Event, Parser};

use super::{error_chain, Client};

/// How often an open answer stream checks whether its request is still waiting.
const STREAM_CHECK: Duration = Duration::from_secs(1);

impl Client {
    /// A JSON answer, read up to the size limit.
    pub(super) async fn read_json(
        &self,
        mut response: reqwest::Response,
        initialize: bool,
        via: Option<u64>,
    ) {
        let mut body = Vec::new();
        let mut len = 0usize;
        let mut tail = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    len += chunk.len();
                    if len <= self.max {
                        body.extend_from_slice(&chunk);
                    } else {
                        body.truncate(256);
                        tail.extend_from_slice(&chunk);
                        let keep = tail.len().saturating_sub(256);
                        tail.drain(..keep);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return self.fail(&format!("reading an answer failed: {}", error_chain(&e)))
                }
            }
        }
        let Some(conn) = self.conn() else { return };
        if len > self.max {
            return conn.oversize(len, self.max, &body, &tail);
        }
        if initialize {
            self.learn_version(&body);
        }
        // A JSON-RPC batch is answered with an array; each element is a message.
        let messages = match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => std::str::from_utf8(&body)
                .ok()
                .and_then(|t| manifold_protocol::scan::elements(t).ok())
                .map(|e| e.into_iter().map(str::as_bytes).collect())
                .unwrap_or_default(),
            _ => vec![&body[..]],
        };
        for message in messages {
            if let Err(problem) = conn.receive(message, via) {
                return self.fail(&problem);
            }
        }
    }

    /// An SSE stream (a POST's, or the session's GET stream): every `message` event is a
    /// message. Returns the parser, for the last event id and the retry delay.
    pub(super) async fn read_stream(
        &self,
        mut response: reqwest::Response,
        initialize: bool,
        via: Option<u64>,
    ) -> Parser {
        let mut parser = Parser::new(self.max);
        let mut closed = self.closed.subscribe();
        // A request's stream is dropped once the request is over (answered, timed out,
        // cancelled) even if the upstream keeps it open: a stalled stream holds nothing
        // longer than its request's deadline and a check.
        let mut check = tokio::time::interval(STREAM_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        check.reset();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                _ = closed.wait_for(|c| *c) => return parser,
                _ = check.tick(), if via.is_some() && !initialize => {
                    let over = match (via, self.conn()) {
                        (Some(id), Some(conn)) => !conn.is_pending(id) && !conn.is_listen(id),
                        _ => true,
                    };
                    if over {
                        tracing::debug!(upstream = %self.key, "a request's stream dropped: the request is over");
                        return parser;
                    }
                    continue;
                }
            };
            match chunk {
                Ok(Some(bytes)) => {
                    let mut broken = None;
                    parser.feed(&bytes, |event| {
                        if broken.is_none() {
                            broken = self.event(event, initialize, via).err();
                        }
                    });
                    if let Some(problem) = broken {
                        self.fail(&problem);
                        return parser;
                    }
                }
                Ok(None) => return parser,
                Err(e) => {
                    tracing::debug!(upstream = %self.key, "stream broke: {}", error_chain(&e));
                    return parser;
                }
            }
        }
    }

    pub(super) fn event(
        &self,
        event: Event,
        initialize: bool,
        via: Option<u64>,
    ) -> Result<(), String> {
        if event.kind != "message" {
            return Ok(());
        }
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        if let Some(len) = event.oversize {
            conn.oversize(len, self.max, event.data.as_bytes(), event.tail.as_bytes());
            return Ok(());
        }
        if initialize {
            self.learn_version(event.data.as_bytes());
        }
        conn.receive(event.data.as_bytes(), via)
    }
}
