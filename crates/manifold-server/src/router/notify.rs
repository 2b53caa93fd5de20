//! What hosts hear from upstreams, session by session: catalog changes reach every session,
//! log messages only the sessions whose level admits them (named after their upstream),
//! `resources/updated` only the sessions subscribed to that resource. And what upstreams are
//! asked on the hosts' behalf: the most verbose log level any session wants, and one
//! subscription per resource however many sessions want it (counted), asked again when an
//! upstream restarts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use manifold_catalog::Kind;
use manifold_protocol::{write, RawObject};
use manifold_upstream::{Listener, UpstreamHandle};

use super::{Router, LOG_LEVELS};
use crate::session::Session;

/// What upstreams were asked on the hosts' behalf.
#[derive(Default)]
pub(super) struct Interest {
    /// The log level last asked of each upstream (by index), if one was. Locked only to read
    /// or record a level, never across the request.
    levels: Mutex<HashMap<usize, u8>>,
    /// How many sessions subscribe to each (upstream, original URI). Locked to count.
    subscriptions: Mutex<HashMap<(usize, String), usize>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Interest {
    /// Counts one more session on `(upstream, uri)`; true if it is the first.
    pub(super) fn subscribe(&self, upstream: usize, uri: &str) -> bool {
        let mut subs = lock(&self.subscriptions);
        let n = subs.entry((upstream, uri.to_owned())).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// Counts one session fewer on `(upstream, uri)`; true if it was the last.
    pub(super) fn unsubscribe(&self, upstream: usize, uri: &str) -> bool {
        let mut subs = lock(&self.subscriptions);
        let key = (upstream, uri.to_owned());
        match subs.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                subs.remove(&key);
                true
            }
            None => false,
        }
    }

    fn subscribed_on(&self, upstream: usize) -> Vec<String> {
        lock(&self.subscriptions)
            .keys()
            .filter(|(u, _)| *u == upstream)
            .map(|(_, uri)| uri.clone())
            .collect()
    }
}

impl Router {
    /// Asks each upstream that logs (or only `only`) for the most verbose level any session
    /// wants, when that differs from what it was last asked. Nothing is asked while no
    /// session has set a level: upstreams keep their own default.
    pub(super) async fn apply_log_levels(self: &Arc<Self>, only: Option<usize>) {
        let Some(wanted) = self
            .sessions
            .all()
            .iter()
            .filter_map(|s| s.log_level())
            .min()
        else {
            return;
        };
        let catalog = self.hub.catalog();
        let targets: Vec<&UpstreamHandle> = self
            .upstreams
            .iter()
            .filter(|h| only.is_none_or(|i| i == h.index()))
            .filter(|h| {
                catalog
                    .slice(h.index())
                    .is_some_and(|s| s.has_capability("logging"))
            })
            .filter(|h| {
                only.is_some() || lock(&self.interest.levels).get(&h.index()) != Some(&wanted)
            })
            .collect();
        let params = format!("{{\"level\":\"{}\"}}", LOG_LEVELS[usize::from(wanted)]);
        for handle in targets {
            let Some(conn) = handle.connection() else {
                continue;
            };
            match conn.request("logging/setLevel", Some(&params)).await {
                Ok(_) => {
                    lock(&self.interest.levels).insert(handle.index(), wanted);
                }
                Err(e) => tracing::warn!(upstream = handle.key(), "logging/setLevel failed: {e}"),
            }
        }
    }

    /// Asks an upstream to (un)subscribe, without waiting for its answer.
    pub(super) fn tell_subscription(&self, upstream: usize, uri: &str, subscribe: bool) {
        let Some(conn) = self
            .upstreams
            .get(upstream)
            .and_then(UpstreamHandle::connection)
        else {
            return;
        };
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let params = format!(
            "{{\"uri\":{}}}",
            manifold_protocol::object::json_string(uri)
        );
        let key = self.upstreams[upstream].key().to_owned();
        self.runtime.spawn(async move {
            if let Err(e) = conn.request(method, Some(&params)).await {
                tracing::warn!(upstream = key, "{method} failed: {e}");
            }
        });
    }

    /// Undoes what a session asked of upstreams (it is ending).
    pub(super) fn forget_session(self: &Arc<Self>, session: &Session) {
        let catalog = self.hub.catalog();
        for exposed in session.take_subscriptions() {
            if let Some((upstream, original)) = catalog.resolve_uri(&exposed) {
                if self.interest.unsubscribe(upstream, original) {
                    self.tell_subscription(upstream, original, false);
                }
            }
        }
        if session.log_level().is_some() {
            let router = Arc::clone(self);
            self.runtime
                .spawn(async move { router.apply_log_levels(None).await });
        }
    }

    fn send_to(sessions: &[Arc<Session>], line: &[u8]) {
        for s in sessions {
            s.stream().notify(&[line]);
        }
    }

    /// `notifications/message` with its logger named after the upstream, to the sessions
    /// whose level admits it.
    fn log_message(&self, upstream: usize, params: &str, recipients: Vec<Arc<Session>>) {
        let Ok(mut obj) = RawObject::parse(params) else {
            return;
        };
        let level = obj
            .get_str("level")
            .and_then(|l| LOG_LEVELS.iter().position(|x| *x == l))
            .and_then(|i| u8::try_from(i).ok())
            .unwrap_or(0);
        let key = self.upstreams.get(upstream).map_or("", UpstreamHandle::key);
        let logger = match obj.get_str("logger") {
            Some(l) if !l.is_empty() => format!("{key}/{l}"),
            _ => key.to_owned(),
        };
        obj.set_str("logger", &logger);
        let mut line = Vec::new();
        write::notification(&mut line, "notifications/message", Some(&obj.to_text()));
        let hearing: Vec<Arc<Session>> =
            recipients.into_iter().filter(|s| s.hears(level)).collect();
        Self::send_to(&hearing, &line);
    }
}

impl Listener for Router {
    fn lists_changed(&self, kinds: &[Kind]) {
        // A team whose view hides something hears only of changes to its view; the others
        // see the whole catalog. Each team's view is compared once.
        let catalog = self.hub.catalog();
        let mut by_team: HashMap<Arc<str>, Vec<Kind>> = HashMap::new();
        let mut hearing: Vec<(Arc<Session>, Vec<Kind>)> = Vec::new();
        for session in self.sessions.ready() {
            let changed = match session.caller().restricted() {
                None => kinds.to_vec(),
                Some(team) => by_team
                    .entry(Arc::clone(&team.name))
                    .or_insert_with(|| team.changed(&catalog, kinds))
                    .clone(),
            };
            hearing.push((session, changed));
        }
        for kind in kinds {
            let method = kind.list_changed();
            // Templates share the resources notification.
            if kinds
                .iter()
                .take_while(|k| *k != kind)
                .any(|k| k.list_changed() == method)
            {
                continue;
            }
            let mut line = Vec::new();
            write::notification(&mut line, method, None);
            let recipients: Vec<Arc<Session>> = hearing
                .iter()
                .filter(|(_, changed)| changed.iter().any(|k| k.list_changed() == method))
                .map(|(s, _)| Arc::clone(s))
                .collect();
            Self::send_to(&recipients, &line);
        }
    }

    fn upstream_notification(
        &self,
        upstream: usize,
        session: Option<u64>,
        method: &str,
        params: Option<&str>,
    ) {
        // A session's own connection speaks to that session alone; a team that may not use
        // the upstream hears nothing from it.
        let key = self.upstreams.get(upstream).map_or("", UpstreamHandle::key);
        let recipients = || -> Vec<Arc<Session>> {
            let all = match session {
                Some(id) => self
                    .sessions
                    .get(id)
                    .into_iter()
                    .filter(|s| s.is_ready())
                    .collect(),
                None => self.sessions.ready(),
            };
            all.into_iter()
                .filter(|s| {
                    s.caller()
                        .restricted()
                        .is_none_or(|t| t.config.admits_upstream(key))
                })
                .collect()
        };
        match (method, params) {
            ("notifications/message", Some(p)) => self.log_message(upstream, p, recipients()),
            ("notifications/resources/updated", Some(p)) => {
                let uri = RawObject::parse(p)
                    .ok()
                    .and_then(|o| o.get_str("uri").map(|u| u.into_owned()));
                let Some(uri) = uri else { return };
                if let Some(cache) = self.cache.get() {
                    let catalog = self.hub.catalog();
                    match catalog.resolve_uri(&uri) {
                        Some((owner, original)) if owner == upstream => {
                            cache.resource_updated(upstream, original);
                        }
                        _ => {}
                    }
                }
                let subscribed: Vec<Arc<Session>> = recipients()
                    .into_iter()
                    .filter(|s| s.is_subscribed(&uri))
                    .collect();
                let mut line = Vec::new();
                write::notification(&mut line, method, Some(p));
                Self::send_to(&subscribed, &line);
            }
            ("notifications/tasks/status", Some(p)) => {
                let task = RawObject::parse(p)
                    .ok()
                    .and_then(|o| o.get_str("taskId").map(|t| t.into_owned()));
                let owner = task.and_then(|t| self.tasks.owner(&t));
                let Some(session) = owner.and_then(|id| self.sessions.get(id)) else {
                    return;
                };
                let mut line = Vec::new();
                write::notification(&mut line, method, Some(p));
                Self::send_to(&[session], &line);
            }
            _ => {
                let mut line = Vec::new();
                write::notification(&mut line, method, params);
                Self::send_to(&recipients(), &line);
            }
        }
    }

    fn upstream_changed(&self, upstream: usize) {
        if let Some(cache) = self.cache.get() {
            cache.upstream_changed(upstream);
        }
    }

    fn upstream_ready(&self, upstream: usize) {
        for uri in self.interest.subscribed_on(upstream) {
            self.tell_subscription(upstream, &uri, true);
        }
        // A restarted upstream logs at its own default again.
        lock(&self.interest.levels).remove(&upstream);
        if let Some(router) = self.this.upgrade() {
            self.runtime
                .spawn(async move { router.apply_log_levels(Some(upstream)).await });
        }
    }
}
