//! What goes between a connection and hosts: a host's cancellations (found by the pending
//! table's index, not by a scan) and the upstream's requests and related notifications, which
//! go to the host whose request is in flight.

use std::sync::Arc;

use manifold_protocol::{codes, Envelope};

use super::Connection;
use crate::error::UpstreamError;
use crate::pending::{Delivery, Entry, Reply, ServerReply, ServerRequest};

impl Connection {
    /// A host cancelled its request `host_id` (canonical id text) of `session`: drop the
    /// pending entry and tell the upstream, with the upstream's id. Returns whether this
    /// connection owned the request. A request already answered is not found, so a cancel
    /// that races the answer is harmless.
    pub fn cancel_for(&self, session: u64, host_id: &str, reason: Option<&str>) -> bool {
        let found = {
            let mut st = self.lock();
            let id = st.table.find_host(session, host_id);
            id.and_then(|id| st.table.remove(id).map(|e| (id, e)))
        };
        let Some((id, entry)) = found else {
            return false;
        };
        self.send_cancelled(id, reason);
        // The host asked for this; it expects no answer (and gets none: the exchange is
        // dropped without one).
        drop(entry);
        true
    }

    /// A session ended: every request it still has here is cancelled upstream and ended.
    pub fn cancel_session(&self, session: u64, reason: &str) -> usize {
        let taken = self.lock().table.take_session(session);
        let count = taken.len();
        for (id, entry) in taken {
            self.send_cancelled(id, Some(reason));
            self.fail(
                entry.reply,
                UpstreamError::Cancelled {
                    upstream: self.name.to_string(),
                    reason: reason.to_owned(),
                },
            );
        }
        count
    }

    pub(super) fn send_cancelled(&self, id: u64, reason: Option<&str>) {
        if self.stateless.get().is_some() && self.wire.cancel(id) {
            return;
        }
        let mut params = format!("{{\"requestId\":{id}");
        if let Some(reason) = reason {
            params.push_str(",\"reason\":");
            params.push_str(&manifold_protocol::object::json_string(reason));
        }
        params.push('}');
        let _ = self.notify("notifications/cancelled", Some(&params));
    }

    /// The exchange a message from the upstream belongs to: the request whose stream carried
    /// it (`via`), or else the only host session with requests in flight here (its latest
    /// one). `Err` says why none could be chosen. It is handed out of the table's lock, to be
    /// written to without it.
    pub(super) fn owner(&self, via: Option<u64>) -> Result<Arc<Delivery>, &'static str> {
        let st = self.lock();
        fn forwarded(e: &Entry) -> Option<&Arc<Delivery>> {
            match &e.reply {
                Reply::Forward(fwd) => Some(&fwd.delivery),
                Reply::Channel(_) => None,
            }
        }
        if let Some(delivery) = via.and_then(|id| st.table.get(id)).and_then(forwarded) {
            return Ok(Arc::clone(delivery));
        }
        let mut owner: Option<(u64, &Arc<Delivery>)> = None;
        // A request that stands for no host at the moment (a stateless host's, parked while
        // that host is asked for input) is chosen only when no other request is in flight:
        // it must not make the other hosts' requests ambiguous.
        let mut idle: Option<(u64, &Arc<Delivery>)> = None;
        for (id, entry) in st.table.iter() {
            let Some(delivery) = forwarded(entry) else {
                continue;
            };
            if delivery.session() == 0 {
                if idle.is_none_or(|(latest, _)| latest < id) {
                    idle = Some((id, delivery));
                }
                continue;
            }
            match owner {
                Some((_, o)) if o.session() != delivery.session() => {
                    return Err("several host sessions have requests in flight to this upstream, so Manifold cannot tell which host it is for; set isolation = \"session\" on the upstream to give each host its own connection")
                }
                Some((latest, _)) if latest > id => {}
                _ => owner = Some((id, delivery)),
            }
        }
        match owner.or(idle) {
            Some((_, delivery)) => Ok(Arc::clone(delivery)),
            None => {
                Err("no host request is in flight to this upstream, so there is no host to ask")
            }
        }
    }

    /// A request from the upstream to its client: `ping` is answered here; the rest go to the
    /// host that owns the request in flight (see [`Connection::owner`]).
    pub(super) fn server_request(self: &Arc<Self>, env: &Envelope<'_>, via: Option<u64>) {
        let Some(id) = env.id else { return };
        let method = env.method.as_deref().unwrap_or_default();
        let reply = ServerReply {
            conn: Arc::downgrade(self),
            id: id.into(),
            upstream: self.name.clone(),
        };
        if method == "ping" {
            return reply.result("{}");
        }
        let request = ServerRequest {
            method: method.to_owned(),
            params: env.params.map(str::to_owned),
            reply,
        };
        // Without an owner it goes to the one host this connection serves (on the session's
        // own stream), or is refused.
        let why = match self.owner(via) {
            Ok(delivery) => return delivery.server_request(request),
            Err(why) => why,
        };
        if let Some(peer) = self.peer.get() {
            return peer.server_request(request);
        }
        tracing::warn!(upstream = %self.name, method, "request from the upstream refused: {why}");
        request.reply.error(
            codes::INTERNAL_ERROR,
            &format!("Manifold cannot forward {method}: {why}"),
        );
    }

    /// A notification that belongs with a request in flight goes to that request's host.
    pub(super) fn related(&self, message: &[u8], via: Option<u64>) {
        // Passed on as it came, as a line.
        let mut line = Vec::with_capacity(message.len() + 1);
        line.extend_from_slice(message);
        line.push(b'\n');
        let line = &line[..];
        match (self.owner(via), self.peer.get()) {
            (Ok(delivery), _) => delivery.related(line),
            (Err(_), Some(peer)) => peer.related(line),
            (Err(why), None) => {
                tracing::debug!(upstream = %self.name, "notification dropped: {why}");
            }
        }
    }
}
