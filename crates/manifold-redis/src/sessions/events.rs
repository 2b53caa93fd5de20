//! A shared session's stream: messages for the session as a whole go to a Redis stream of
//! its own (through its outlet, written in order by the store's writer), which a GET stream
//! on any replica reads with blocking reads on a connection of its own.

use std::sync::{Arc, Weak};
use std::time::Duration;

use manifold_core::outlet::Outlet;
use manifold_core::replicas::EventSink;
use manifold_core::session::Session;
use manifold_telemetry::{metrics, Direction, HostTransport};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use super::{Store, Write, BEAT, BLOCK};

impl Store {
    /// The session's outlet: messages for the session as a whole go to its Redis stream.
    /// It holds the session's local streams (its POSTs' own), which live as long as it does.
    pub(super) fn outlet(self: &Arc<Self>, token: &str, local: Arc<dyn Outlet>) -> Arc<dyn Outlet> {
        Arc::new(SharedOutlet {
            store: Arc::clone(self),
            token: token.into(),
            local,
        })
    }

    /// Hands `sink` (a host's GET stream) the session's events after `after` (a Redis stream
    /// id; `$` for new ones only), read from Redis as they come, until the host goes or the
    /// session ends.
    pub(super) fn events(
        self: &Arc<Self>,
        session: &Arc<Session>,
        after: Option<&str>,
        sink: Box<dyn EventSink>,
    ) -> bool {
        let Some(token) = session.token().map(str::to_owned) else {
            return false;
        };
        let Some(router) = self.router.upgrade() else {
            return false;
        };
        let store = Arc::clone(self);
        let after = after.unwrap_or("$").to_owned();
        let weak = Arc::downgrade(session);
        router.runtime().spawn(async move {
            store.read_events(&token, after, sink, weak).await;
        });
        true
    }

    fn events_failed(&self, e: &redis::RedisError) {
        tracing::debug!("session store: reading a session's events failed: {e}");
        self.conn.health().failed(&e.to_string());
    }

    async fn read_events(
        &self,
        token: &str,
        mut after: String,
        mut sink: Box<dyn EventSink>,
        session: Weak<Session>,
    ) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(BLOCK + self.timeout + Duration::from_secs(1)));
        let mut conn: Option<MultiplexedConnection> = None;
        let key = self.events_key(token);
        loop {
            if sink.is_closed() {
                return;
            }
            match session.upgrade() {
                Some(s) if s.end_reason().is_none() => {}
                _ => return,
            }
            if sink.backlog() > self.queue_limit {
                // The host is not reading: Redis keeps the events meanwhile.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let c = match &mut conn {
                Some(c) => c,
                None => match self
                    .conn
                    .client()
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Ok(c) => conn.insert(c),
                    Err(e) => {
                        self.events_failed(&e);
                        tokio::time::sleep(BEAT).await;
                        continue;
                    }
                },
            };
            let read: Result<Value, _> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(256)
                .arg("BLOCK")
                .arg(u64::try_from(BLOCK.as_millis()).unwrap_or(5000))
                .arg("STREAMS")
                .arg(&key)
                .arg(&after)
                .query_async(c)
                .await;
            match read {
                Ok(value) => {
                    self.conn.health().ok();
                    for (id, message) in stream_entries(value) {
                        if !sink.send(&id, &message) {
                            return;
                        }
                        after = id;
                    }
                }
                Err(e) => {
                    self.events_failed(&e);
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// `(id, message)` of each entry of an `XREAD` reply for one stream.
fn stream_entries(value: Value) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let streams = match value {
        Value::Array(streams) => streams,
        // RESP3 answers with a map of stream -> entries.
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| Value::Array(vec![k, v]))
            .collect(),
        _ => return out,
    };
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            continue;
        };
        let Some(Value::Array(entries)) = parts.pop() else {
            continue;
        };
        for entry in entries {
            let Value::Array(mut entry) = entry else {
                continue;
            };
            if entry.len() != 2 {
                continue;
            }
            let fields = entry.pop();
            let id = entry.pop();
            let (Some(id), Some(Value::Array(fields))) = (id.and_then(text), fields) else {
                continue;
            };
            // Fields come as name, value: the one Manifold writes is `m`.
            let message = fields.into_iter().nth(1).and_then(|v| match v {
                Value::BulkString(b) => Some(b),
                _ => None,
            });
            if let Some(message) = message {
                out.push((id, message));
            }
        }
    }
    out
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// Messages for a shared session as a whole: to its Redis stream.
struct SharedOutlet {
    store: Arc<Store>,
    token: Box<str>,
    /// The session's local outlet (its POSTs' streams).
    local: Arc<dyn Outlet>,
}

impl Outlet for SharedOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let message = message(parts);
        let _ = self.store.writes.send(Write::Event {
            token: self.token.clone(),
            message,
        });
    }

    fn backlog(&self) -> usize {
        self.local.backlog()
    }
}

/// The JSON text of a message given as parts of a line, counted as sent to a host.
pub(super) fn message(parts: &[&[u8]]) -> Vec<u8> {
    let mut m = parts.concat();
    if m.last() == Some(&b'\n') {
        m.pop();
    }
    metrics().host_bytes(HostTransport::Http, Direction::Out, m.len());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_entries_are_read_from_an_xread_reply() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"k".to_vec()),
            Value::Array(vec![
                Value::Array(vec![
                    Value::BulkString(b"1-0".to_vec()),
                    Value::Array(vec![
                        Value::BulkString(b"m".to_vec()),
                        Value::BulkString(b"{\"a\":1}".to_vec()),
                    ]),
                ]),
                Value::Array(vec![
                    Value::BulkString(b"1-1".to_vec()),
                    Value::Array(vec![
                        Value::BulkString(b"m".to_vec()),
                        Value::BulkString(b"{}".to_vec()),
                    ]),
                ]),
            ]),
        ])]);
        let entries = stream_entries(reply);
        assert_eq!(
            entries,
            vec![
                ("1-0".to_owned(), b"{\"a\":1}".to_vec()),
                ("1-1".to_owned(), b"{}".to_vec())
            ]
        );
        assert!(stream_entries(Value::Nil).is_empty());
    }
}
