//! Pub/sub between replicas: the channel every replica hears (sessions ended, changed,
//! moved) and each replica's own (a host's answer to a request it sent, a request of a task it
//! runs, the answer to a request it had another replica serve); and what a session held here
//! reports ([`SessionRelay`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use manifold_core::context::Origin;
use manifold_core::error::RouteError;
use manifold_core::outlet::Outlet;
use manifold_core::replicas::Relay;
use manifold_core::session::Session;

use super::{lock, Store, Write, BEAT};

impl Store {
    /// What a session held here reports to the store; `away` if another replica is its home.
    pub(super) fn relay(self: &Arc<Self>, token: &str, away: bool) -> Arc<SessionRelay> {
        let relay = Arc::new(SessionRelay {
            store: Arc::clone(self),
            token: token.into(),
            away: AtomicBool::new(away),
        });
        let mut relays = lock(&self.relays);
        relays.retain(|_, r| r.strong_count() > 0);
        relays.insert(token.into(), Arc::downgrade(&relay));
        relay
    }

    /// The replica that runs `task` of a shared session, when it is another one: a task
    /// lives in the upstream connection of the replica that created it, so its requests are
    /// served there. The creating replica records it a moment after answering, so a task not
    /// found is looked for once more shortly after.
    pub(super) async fn task_elsewhere(&self, session: &Session, task: &str) -> Option<String> {
        let token = session.token()?;
        let router = self.router.upgrade()?;
        for attempt in 0..2 {
            if router.owns_task(session.id(), task) {
                return None;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut cmd = redis::cmd("HGET");
            cmd.arg(self.tasks_key(token)).arg(task);
            match self.query_one("reading a session's tasks", &cmd).await {
                Some(Some::<String>(replica)) if replica != *self.replica => return Some(replica),
                Some(Some(_)) | None => return None,
                Some(None) => {}
            }
        }
        None
    }

    /// Has `replica` serve `body` (a request of `session`'s) and returns its answer: a
    /// JSON-RPC error if the replica does not answer within the request timeout (it stopped,
    /// and the task with it).
    pub(super) async fn forward(&self, session: &Session, replica: &str, body: &[u8]) -> Bytes {
        let token = session.token().unwrap_or_default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let call = {
            let mut calls = self
                .calls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            calls.next += 1;
            let call = calls.next;
            calls.waiting.insert(call, tx);
            call
        };
        let mut message = format!("call {token} {} {call}\n", self.replica).into_bytes();
        message.extend_from_slice(body);
        let _ = self.writes.send(Write::Call {
            replica: replica.to_owned(),
            message,
        });
        let timeout = self
            .router
            .upgrade()
            .map_or(Duration::from_secs(60), |r| r.settings().request_timeout);
        let answer = tokio::time::timeout(timeout, rx).await;
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .waiting
            .remove(&call);
        match answer {
            Ok(Ok(answer)) => answer,
            _ => {
                let id = manifold_protocol::Envelope::decode(body)
                    .ok()
                    .and_then(|env| env.id.map(str::to_owned))
                    .unwrap_or_else(|| "null".to_owned());
                let mut out = Vec::new();
                let error = RouteError::Internal(
                    "the replica running this task did not answer (it may have stopped, and \
                     the task with it)"
                        .into(),
                );
                let error = error.error_object(manifold_protocol::version::Era::Session);
                manifold_protocol::write::error_response(&mut out, Some(&id), &error);
                if out.last() == Some(&b'\n') {
                    out.pop();
                }
                Bytes::from(out)
            }
        }
    }

    /// Hears the other replicas: sessions ended, changed or moved, and answers for requests
    /// this replica sent. Reconnects after a failure.
    pub(super) async fn listen_loop(store: Weak<Self>) {
        loop {
            let Some(this) = store.upgrade() else { return };
            let (channel, inbox, client) = (
                this.channel(),
                this.inbox(&this.replica),
                this.conn.client().clone(),
            );
            drop(this);
            let pubsub = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                pubsub.subscribe(&inbox).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            let mut pubsub = match pubsub.await {
                Ok(p) => p,
                Err(e) => {
                    if let Some(this) = store.upgrade() {
                        tracing::debug!("session store: hearing the other replicas failed: {e}");
                        this.conn.health().failed(&e.to_string());
                    }
                    tokio::time::sleep(BEAT).await;
                    continue;
                }
            };
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let Some(this) = store.upgrade() else { return };
                let payload: Vec<u8> = msg.get_payload_bytes().to_vec();
                this.heard(&payload).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn heard(self: &Arc<Self>, payload: &[u8]) {
        let Some(router) = self.router.upgrade() else {
            return;
        };
        let (head, rest) = match memchr::memchr(b'\n', payload) {
            Some(i) => (&payload[..i], &payload[i + 1..]),
            None => (payload, &[][..]),
        };
        let head = String::from_utf8_lossy(head);
        let mut words = head.split(' ');
        let (Some(kind), Some(token)) = (words.next(), words.next()) else {
            return;
        };
        let from = words.next().unwrap_or_default();
        if kind == "reply" {
            // `reply {call}`: the answer to a request another replica served for this one.
            let call: Option<u64> = token.parse().ok();
            let waiting = call.and_then(|call| {
                self.calls
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .waiting
                    .remove(&call)
            });
            if let Some(tx) = waiting {
                let _ = tx.send(Bytes::copy_from_slice(rest));
            }
            return;
        }
        let session = match router.sessions().by_token(token) {
            Some(session) => session,
            // A request for a session this replica no longer holds a copy of.
            None if kind == "call" => match self.adopt(token).await {
                Some(session) => session,
                None => return,
            },
            None => return,
        };
        match kind {
            "end" => router.end_session(session.id(), "the host ended the session"),
            "moved" if from != &*self.replica && !session.is_away() => {
                router.release_subscriptions(&session);
                self.set_away(token, true);
                tracing::debug!(session = session.id(), "shared session moved to {from}");
            }
            "refresh" if from != &*self.replica => {
                if let Some(Some(record)) = self.load(token).await {
                    let level = record.level.unwrap_or(u8::MAX);
                    let relevel = session.log_level() != record.level;
                    session.set_log_level(level);
                    router.set_subscriptions(&session, &record.subs);
                    router.restore_discovery(&session, None, record.found);
                    if relevel && !session.is_away() {
                        // Each upstream that logs is asked for what the sessions here want.
                        router.apply_log_levels(None).await;
                    }
                }
            }
            "call" => {
                // `call {token} {from} {call}`: serve it here, answer to `from`.
                let Some(call) = words.next().and_then(|c| c.parse::<u64>().ok()) else {
                    return;
                };
                let origin = Origin {
                    session: Some(Arc::clone(&session)),
                    outlet: Arc::new(ReplyOutlet {
                        store: Arc::clone(self),
                        replica: from.to_owned(),
                        call,
                    }),
                    trace: None,
                    caller: None,
                    owner: 0,
                    asked: None,
                };
                router.handle_line(&origin, rest);
            }
            "answer" => {
                let origin = Origin {
                    session: Some(Arc::clone(&session)),
                    outlet: Arc::clone(session.stream()),
                    trace: None,
                    caller: None,
                    owner: 0,
                    asked: None,
                };
                router.handle_line(&origin, rest);
            }
            _ => {}
        }
    }
}

/// The replica a request id Manifold sent a shared session's host names: `"mf-{replica}-{n}"`
/// (JSON text).
fn replica_of(id: &str) -> Option<&str> {
    let (replica, n) = id
        .strip_prefix("\"mf-")?
        .strip_suffix('"')?
        .rsplit_once('-')?;
    n.parse::<u64>().ok()?;
    Some(replica).filter(|r| !r.is_empty())
}

/// The answer to a request another replica had this one serve: back to it.
struct ReplyOutlet {
    store: Arc<Store>,
    replica: String,
    call: u64,
}

impl Outlet for ReplyOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let mut message = format!("reply {}\n", self.call).into_bytes();
        message.extend_from_slice(&super::events::message(parts));
        let _ = self.store.writes.send(Write::Call {
            replica: self.replica.clone(),
            message,
        });
    }

    /// Progress and other messages of the request stay here: the answer is what travels.
    fn notify(&self, _parts: &[&[u8]]) {}
}

/// What a session held here reports to the store, and what the store knows of it.
pub(super) struct SessionRelay {
    store: Arc<Store>,
    token: Box<str>,
    /// Another replica is the session's home.
    away: AtomicBool,
}

impl SessionRelay {
    pub(super) fn set_away(&self, away: bool) {
        self.away.store(away, Ordering::Release);
    }
}

impl Relay for SessionRelay {
    fn changed(&self, session: &Session) {
        let _ = self.store.writes.send(Write::State {
            token: self.token.clone(),
            level: session.log_level(),
            subs: session.subscriptions(),
        });
    }

    fn found_changed(&self, session: &Session) {
        let _ = self.store.writes.send(Write::Found {
            token: self.token.clone(),
            found: session.found().recent_first(),
        });
    }

    fn task_created(&self, _session: &Session, task: &str) {
        let _ = self.store.writes.send(Write::Task {
            token: self.token.clone(),
            task: task.to_owned(),
        });
    }

    fn answer_elsewhere(&self, _session: &Session, id: &str, message: Vec<u8>) -> bool {
        match replica_of(id) {
            Some(replica) if replica != &*self.store.replica => {
                let _ = self.store.writes.send(Write::Answer {
                    token: self.token.clone(),
                    replica: replica.to_owned(),
                    message,
                });
                true
            }
            _ => false,
        }
    }

    fn replica(&self) -> &str {
        &self.store.replica
    }

    fn is_away(&self) -> bool {
        self.away.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_name_the_replica_that_sent_them() {
        assert_eq!(
            replica_of("\"mf-0a1b2c3d4e5f6071-12\""),
            Some("0a1b2c3d4e5f6071")
        );
        // Ids of a session no store shares, and anything else, name none.
        assert_eq!(replica_of("\"mf-12\""), None);
        assert_eq!(replica_of("\"mf--12\""), None);
        assert_eq!(replica_of("12"), None);
        assert_eq!(replica_of("\"mf-a-b\""), None);
    }
}
