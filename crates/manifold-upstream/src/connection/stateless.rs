//! The stateless era (2026-07-28) on a connection: the `_meta` every request carries, the
//! session-era methods that revision dropped (served here instead of being sent), and the
//! `subscriptions/listen` stream that replaced `resources/subscribe` and the HTTP GET stream.
//!
//! A connection learns its era once, from the probe (see `handshake`); until then, and for
//! ever on a session-era connection, nothing here changes what is sent.
//!
//! One file: the era's `_meta`, its dropped methods and its listen stream share the
//! connection's stateless state, and each reads best beside the others.

use std::borrow::Cow;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::MutexGuard;
use std::time::Duration;

use manifold_protocol::object::{json_string, with_meta, without_meta_member, Edits};
use manifold_protocol::version::{meta, Era};
use manifold_protocol::{codes, needle, write, Envelope, RawObject, LOG_LEVELS};

use super::Connection;
use crate::error::UpstreamError;
use crate::outbound::Outbound;
use crate::pending::Answer;

/// What every request to a stateless-era upstream carries in `_meta`.
pub(super) struct Meta {
    /// The revision the upstream speaks.
    version: &'static str,
    /// The `_meta` members naming the revision, the client's capabilities and Manifold (JSON
    /// object members, without the braces).
    members: Box<str>,
    /// The same members one by one: key, and value as JSON text.
    pairs: [(&'static str, Box<str>); 3],
    /// The level `logging/setLevel` last asked for, as its place in [`LOG_LEVELS`] plus one;
    /// 0: none (the upstream then sends no log messages, as that revision says).
    level: AtomicU8,
}

/// The `_meta` members of a stateless-era request: revision `version`, the client's
/// `capabilities` (JSON text) and Manifold's name and version, as `initialize` names them.
pub(crate) fn meta_members(version: &str, capabilities: &str) -> String {
    format!(
        "{}:{},{}:{},{}:{{\"name\":\"manifold\",\"version\":{}}}",
        json_string(meta::PROTOCOL_VERSION),
        json_string(version),
        json_string(meta::CLIENT_CAPABILITIES),
        capabilities,
        json_string(meta::CLIENT_INFO),
        json_string(env!("CARGO_PKG_VERSION")),
    )
}

/// Which list changes a `subscriptions/listen` stream asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ListenFilter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

/// The connection's `subscriptions/listen` stream.
#[derive(Default)]
pub(super) struct Listen {
    /// Set once the actor starts listening, after the handshake; before that, subscriptions
    /// are only noted.
    started: bool,
    /// The upstream refused the method as unknown: it is not asked again.
    unsupported: bool,
    filter: ListenFilter,
    /// The resource URIs Manifold wants `notifications/resources/updated` for.
    uris: BTreeSet<String>,
    /// The id of the open stream's request.
    current: Option<u64>,
    /// Ids of earlier streams' requests, whose late answers are expected and dropped.
    earlier: VecDeque<u64>,
}

impl Listen {
    fn retire(&mut self, id: u64) {
        if self.earlier.len() >= 16 {
            self.earlier.pop_front();
        }
        self.earlier.push_back(id);
    }

    /// The params of a `subscriptions/listen` request for what is wanted now (without its
    /// `_meta`); `None` when nothing is.
    fn params(&self) -> Option<String> {
        let mut notifications = RawObject::default();
        let ListenFilter {
            tools,
            prompts,
            resources,
        } = self.filter;
        for (wanted, key) in [
            (tools, "toolsListChanged"),
            (prompts, "promptsListChanged"),
            (resources, "resourcesListChanged"),
        ] {
            if wanted {
                notifications.set_raw(key, "true");
            }
        }
        if !self.uris.is_empty() {
            let uris: Vec<String> = self.uris.iter().map(|u| json_string(u)).collect();
            notifications.set_raw("resourceSubscriptions", format!("[{}]", uris.join(",")));
        }
        if !(tools || prompts || resources || !self.uris.is_empty()) {
            return None;
        }
        let mut params = RawObject::default();
        params.set_raw("notifications", notifications.to_text());
        Some(params.to_text())
    }
}

/// How a `subscriptions/listen` stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListenEnd {
    /// The upstream ended it with a result: a graceful close (e.g. while shutting down).
    Closed,
    /// The upstream answered it with this error (JSON text of the error object).
    Refused(String),
    /// Its stream broke, could not be sent, or the upstream cancelled it.
    Lost(String),
}

impl std::fmt::Display for ListenEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenEnd::Closed => f.write_str("the upstream closed it"),
            ListenEnd::Refused(error) => write!(f, "refused: {error}"),
            ListenEnd::Lost(reason) => f.write_str(reason),
        }
    }
}

impl ListenEnd {
    /// Whether listening again cannot help: the upstream does not know the method.
    pub(crate) fn unsupported(&self) -> bool {
        matches!(self, ListenEnd::Refused(e) if error_code(e) == Some(codes::METHOD_NOT_FOUND))
    }
}

/// The `code` of an error object (JSON text).
pub(crate) fn error_code(error: &str) -> Option<i64> {
    RawObject::parse(error)
        .ok()?
        .get("code")?
        .trim()
        .parse()
        .ok()
}

/// What [`Connection::request`] does with a request to a stateless-era upstream.
pub(super) enum Local {
    /// Nothing is sent: this is the answer.
    Answered(Answer),
    /// Sent as asked (with the era's `_meta`).
    Send,
    /// This method is sent instead (no params but `_meta`), its result standing for `{}`.
    Instead(&'static str),
}

impl Connection {
    /// The protocol era the connection speaks: [`Era::Session`] until the upstream is found
    /// to speak the stateless era (and for good on a session-era connection).
    pub fn era(&self) -> Era {
        if self.stateless.get().is_some() {
            Era::Stateless
        } else {
            Era::Session
        }
    }

    /// On a stateless-era connection, the members every request must carry in
    /// `params._meta` (`io.modelcontextprotocol/protocolVersion`, `.../clientCapabilities`
    /// and `.../clientInfo`), as JSON object members without the braces, ready for
    /// [`manifold_protocol::object::with_meta`]; `None` on a session-era connection.
    /// [`Connection::with_request_meta`] is the one call that applies them.
    pub fn stateless_meta(&self) -> Option<&str> {
        self.stateless.get().map(|m| &*m.members)
    }

    /// On a stateless-era connection, the revision every request names in its `_meta` (what
    /// [`Connection::with_request_meta`] writes), for the [`Outbound`] that carries it;
    /// `None` on a session-era connection.
    pub fn revision(&self) -> Option<&'static str> {
        self.stateless.get().map(|m| m.version)
    }

    /// The params of a request to send on this connection (JSON text of the params
    /// object; `"{}"` for a request without any): on a stateless-era connection, `params`
    /// with the era's `_meta` members merged in (the revision, the client's capabilities,
    /// Manifold's name and version, and the log level hosts asked for, if any), replacing
    /// those keys and keeping every other member (a progress token, a trace context); on a
    /// session-era one, `params` unchanged and not copied.
    ///
    /// For the connection's own requests (pings, `tasks/*`, the listen stream). A forwarded
    /// request gets the same members through [`Connection::request_meta`], in the one pass
    /// that writes its line.
    pub fn with_request_meta<'a>(&self, params: &'a str) -> Cow<'a, str> {
        let Some(meta) = self.stateless.get() else {
            return Cow::Borrowed(params);
        };
        let level = usize::from(meta.level.load(Ordering::Relaxed));
        let members = match level.checked_sub(1).and_then(|i| LOG_LEVELS.get(i)) {
            None => Cow::Borrowed(&*meta.members),
            Some(level) => Cow::Owned(format!(
                "{},{}:{}",
                meta.members,
                json_string(meta::LOG_LEVEL),
                json_string(level)
            )),
        };
        Cow::Owned(with_meta(Some(params), &members))
    }

    /// On a stateless-era connection, the `_meta` members every request to it carries (as
    /// [`Connection::with_request_meta`] merges them) put into `edits`, for a request written
    /// in one pass (`write::request_edited`); false, and `edits` unchanged, on a session-era
    /// one.
    pub fn request_meta<'e>(&'e self, edits: &mut Edits<'e>) -> bool {
        let Some(meta) = self.stateless.get() else {
            return false;
        };
        for (key, value) in &meta.pairs {
            edits.meta_set_raw(key, value);
        }
        let level = usize::from(meta.level.load(Ordering::Relaxed));
        if let Some(level) = level.checked_sub(1).and_then(|i| LOG_LEVELS.get(i)) {
            edits.meta_set_str(meta::LOG_LEVEL, level);
        }
        true
    }

    /// The upstream speaks the stateless era: from now on every request carries revision
    /// `version` and `capabilities` (JSON text) in `_meta`.
    pub(crate) fn set_stateless(&self, version: &'static str, capabilities: &str) {
        let info = format!(
            "{{\"name\":\"manifold\",\"version\":{}}}",
            json_string(env!("CARGO_PKG_VERSION"))
        );
        let meta = Meta {
            version,
            members: meta_members(version, capabilities).into(),
            pairs: [
                (meta::PROTOCOL_VERSION, json_string(version).into()),
                (meta::CLIENT_CAPABILITIES, capabilities.into()),
                (meta::CLIENT_INFO, info.into()),
            ],
            level: AtomicU8::new(0),
        };
        if self.stateless.set(meta).is_ok() {
            self.wire.era_chosen(Era::Stateless);
        }
    }

    /// The connection will be probed: from now until the probe is answered (or times out),
    /// its end counts as the upstream's refusal of the probe (see
    /// [`Connection::died_probing`]). Set when the connection starts, so that a child that
    /// exits before the probe is even written counts too.
    pub(crate) fn will_probe(&self) {
        self.probing.store(true, Ordering::Relaxed);
    }

    /// The upstream speaks the session era: what is sent from now on is of that era, whatever
    /// `_meta` it carries.
    pub(crate) fn set_session(&self) {
        if self.stateless.get().is_none() {
            self.wire.era_chosen(Era::Session);
        }
    }

    /// Sends the `server/discover` probe (`params` carry its `_meta`) and waits at most
    /// `limit` for the answer (`Ok(None)`: none came).
    pub(crate) async fn probe(
        &self,
        version: &'static str,
        params: &str,
        limit: Duration,
    ) -> Result<Option<Answer>, UpstreamError> {
        self.probing.store(true, Ordering::Relaxed);
        let answer = self
            .send_request("server/discover", Some(params), Some(limit), Some(version))
            .await;
        if answer.is_ok() {
            self.probing.store(false, Ordering::Relaxed);
        }
        answer
    }

    /// Whether the connection ended while its probe was unanswered (or not yet sent).
    pub(crate) fn died_probing(&self) -> bool {
        self.probing.load(Ordering::Relaxed)
    }

    /// Request `msg` as this connection must send it: on a stateless-era connection, a
    /// request that does not say it names the revision gets the era's `_meta` added to its
    /// line (unless the line has it already), and says so. Anything else is sent as it is.
    pub(super) fn completed(&self, mut msg: Outbound) -> Outbound {
        let Some(meta) = self.stateless.get() else {
            return msg;
        };
        if msg.version.is_some() {
            return msg;
        }
        if needle::PROTOCOL_VERSION_META.find(&msg.line).is_none() {
            let line = &msg.line[..];
            let Some(env) = Envelope::decode(line.trim_ascii_end()).ok() else {
                return msg;
            };
            let (Some(id), Some(method)) = (env.id, env.method.as_deref()) else {
                return msg;
            };
            let params = self.with_request_meta(env.params.unwrap_or("{}"));
            let mut out = Vec::with_capacity(line.len() + meta.members.len() + 32);
            write::request_with_id(&mut out, id, method, Some(&params));
            msg.line = out.into();
        }
        msg.in_revision(Some(meta.version))
    }

    /// Serves what the stateless era dropped (see [`Connection::request`]).
    pub(super) fn stateless_local(&self, method: &str, params: Option<&str>) -> Local {
        let obj = params.and_then(|p| RawObject::parse(p).ok());
        let member = |key: &str| {
            obj.as_ref()
                .and_then(|o| o.get_str(key))
                .map(Cow::into_owned)
        };
        match method {
            "ping" => Local::Instead("server/discover"),
            "logging/setLevel" => {
                let level = member("level");
                let Some(i) = LOG_LEVELS.iter().position(|l| Some(*l) == level.as_deref()) else {
                    return Local::Answered(invalid_params("unknown or missing \"level\""));
                };
                if let Some(meta) = self.stateless.get() {
                    meta.level
                        .store(u8::try_from(i + 1).unwrap_or(0), Ordering::Relaxed);
                }
                Local::Answered(Answer::Result("{}".into()))
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = member("uri") else {
                    return Local::Answered(invalid_params("missing \"uri\""));
                };
                let changed = {
                    let mut listen = self.listen();
                    let changed = if method == "resources/subscribe" {
                        listen.uris.insert(uri)
                    } else {
                        listen.uris.remove(&uri)
                    };
                    changed && listen.started && !listen.unsupported
                };
                if changed {
                    self.events.listen_changed();
                }
                Local::Answered(Answer::Result("{}".into()))
            }
            _ => Local::Send,
        }
    }

    fn listen(&self) -> MutexGuard<'_, Listen> {
        self.listen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `id` is the request of the open `subscriptions/listen` stream (which stays open
    /// past its acknowledgement, with no entry among the requests waiting for an answer).
    pub(crate) fn is_listen(&self, id: u64) -> bool {
        self.listen().current == Some(id)
    }

    /// Starts the `subscriptions/listen` stream, asking for `filter` and the resources
    /// subscribed to so far (no stream while nothing is wanted).
    pub(crate) fn start_listening(&self, filter: ListenFilter) {
        {
            let mut listen = self.listen();
            listen.started = true;
            listen.filter = filter;
        }
        self.listen_again();
    }

    /// Whether a `subscriptions/listen` stream is open (or being opened).
    pub(crate) fn is_listening(&self) -> bool {
        self.listen().current.is_some()
    }

    /// (Re)opens the `subscriptions/listen` stream for what is wanted now; the stream it
    /// replaces, if any, is cancelled once the new one is sent, so no change falls between.
    pub(crate) fn listen_again(&self) {
        let Some(meta) = self.stateless.get() else {
            return;
        };
        if self.lock().closed.is_some() {
            return;
        }
        let (opened, old) = {
            let mut listen = self.listen();
            if !listen.started || listen.unsupported {
                return;
            }
            let old = listen.current.take();
            if let Some(old) = old {
                listen.retire(old);
            }
            let opened = listen.params().map(|params| {
                let id = self.next_id();
                listen.current = Some(id);
                let mut line = Vec::with_capacity(params.len() + meta.members.len() + 96);
                let params = with_meta(Some(&params), &meta.members);
                write::request(&mut line, id, "subscriptions/listen", Some(&params));
                let msg = Outbound::request(id, "subscriptions/listen", line)
                    .in_revision(Some(meta.version));
                (id, msg)
            });
            (opened, old)
        };
        if let Some((id, msg)) = opened {
            tracing::debug!(upstream = %self.name, id, "listening for changes (subscriptions/listen)");
            if let Err(e) = self.write(msg) {
                self.lost(id, self.write_error(e));
            }
        }
        if let Some(old) = old {
            self.send_cancelled(old, Some("replaced by a new subscriptions/listen"));
        }
    }

    /// Request `id` will get no answer: its response stream ended first, or its transport
    /// refused it. A request in flight fails with `err`; the listen stream is reported
    /// ended.
    pub(crate) fn lost(&self, id: u64, err: UpstreamError) {
        if self.is_pending(id) {
            return self.fail_request(id, err);
        }
        let current = {
            let mut listen = self.listen();
            let current = listen.current == Some(id);
            if current {
                listen.current = None;
                listen.retire(id);
            }
            current
        };
        // A stream that ends with its connection is not opened again on it.
        if current && self.lock().closed.is_none() {
            self.events.listen_ended(ListenEnd::Lost(err.to_string()));
        }
    }

    /// Request `id` was answered with `error` (JSON text of the error object) outside the
    /// message stream (an HTTP error status with a JSON-RPC body).
    pub(crate) fn answer_error(&self, id: u64, error: &str) {
        if !self.answer(id, None, Some(error)) {
            self.listen_answered(id, Some(error));
        }
    }

    /// An answer whose id is not in the pending table: the end of a listen stream (then
    /// true), or else unknown (false).
    pub(super) fn listen_answered(&self, id: u64, error: Option<&str>) -> bool {
        let end = match error {
            Some(e) => ListenEnd::Refused(e.to_owned()),
            None => ListenEnd::Closed,
        };
        {
            let mut listen = self.listen();
            if listen.current != Some(id) {
                return listen.earlier.contains(&id);
            }
            listen.current = None;
            listen.retire(id);
            if end.unsupported() {
                listen.unsupported = true;
            }
        }
        self.events.listen_ended(end);
        true
    }

    /// A notification from the upstream, with what the stateless era adds to notifications
    /// handled here: the listen stream's acknowledgment and cancellation, and the
    /// subscription id that tags what the stream carries (removed before hosts see it).
    pub(super) fn stateless_notification(&self, method: &str, params: Option<&str>) {
        if self.stateless.get().is_none() {
            return self.events.notification(method, params);
        }
        match method {
            "notifications/subscriptions/acknowledged" => {
                tracing::debug!(upstream = %self.name, params = params.unwrap_or(""), "subscriptions/listen acknowledged");
                self.events.listen_acknowledged();
            }
            "notifications/cancelled" => {
                let id = params
                    .and_then(|p| RawObject::parse(p).ok())
                    .and_then(|p| p.get("requestId").and_then(|id| id.trim().parse().ok()));
                let current = id.is_some() && self.listen().current == id;
                match id {
                    Some(id) if current => self.lost(
                        id,
                        self.closed_error("the upstream cancelled its subscriptions/listen stream"),
                    ),
                    _ => self.events.notification(method, params),
                }
            }
            _ => {
                let untagged = params
                    .filter(|p| needle::SUBSCRIPTION_ID_META.find(p.as_bytes()).is_some())
                    .and_then(|p| without_meta_member(p, meta::SUBSCRIPTION_ID));
                self.events
                    .notification(method, untagged.as_deref().or(params));
            }
        }
    }
}

fn invalid_params(message: &str) -> Answer {
    Answer::Error(format!(
        "{{\"code\":{},\"message\":{}}}",
        codes::INVALID_PARAMS,
        json_string(message)
    ))
}
