//! The host-facing fan-out: which sessions hear what. Catalog changes reach each session
//! whose view changed; what an upstream says reaches only the sessions of teams that may use
//! it (a session's own connection speaks to that session alone): log messages the sessions
//! whose level admits them (the logger named after the upstream), `resources/updated` the
//! sessions subscribed to the resource, a task's status its owner.

use std::collections::HashMap;
use std::sync::Arc;

use manifold_catalog::{Catalog, Kind};
use manifold_protocol::{write, RawObject, LOG_LEVELS};

use crate::session::Session;
use crate::sessions::Sessions;
use crate::tasks::Tasks;

/// Who hears what.
pub struct Fanout {
    sessions: Arc<Sessions>,
    /// Each upstream's key, by index (loggers are named after it; team views admit by it).
    keys: Vec<Arc<str>>,
    /// Which session owns each task.
    tasks: Arc<Tasks>,
}

impl Fanout {
    pub fn new(sessions: Arc<Sessions>, keys: Vec<Arc<str>>, tasks: Arc<Tasks>) -> Self {
        Self {
            sessions,
            keys,
            tasks,
        }
    }

    /// Tells each session of the lists among `kinds` that changed in its view of `catalog`.
    pub fn lists_changed(&self, catalog: &Catalog, kinds: &[Kind]) {
        // A team whose view hides something hears only of changes to its view; the others
        // see the whole catalog. Each team's view is compared once.
        let mut by_team: HashMap<Arc<str>, Vec<Kind>> = HashMap::new();
        let mut hearing: Vec<(Arc<Session>, Vec<Kind>)> = Vec::new();
        for session in self.sessions.ready() {
            let changed = match session.caller().restricted() {
                None => kinds.to_vec(),
                Some(team) => by_team
                    .entry(Arc::clone(&team.name))
                    .or_insert_with(|| team.changed(catalog, kinds))
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
            send_to(&recipients, &line);
        }
    }

    /// What upstream `upstream` said (`session`: on a session's own connection), to the
    /// sessions that hear it.
    pub fn upstream_said(
        &self,
        upstream: usize,
        session: Option<u64>,
        method: &str,
        params: Option<&str>,
    ) {
        // A session's own connection speaks to that session alone; a team that may not use
        // the upstream hears nothing from it.
        let key = self.keys.get(upstream).map_or("", |k| &**k);
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
                let subscribed: Vec<Arc<Session>> = recipients()
                    .into_iter()
                    .filter(|s| s.is_subscribed(&uri))
                    .collect();
                let mut line = Vec::new();
                write::notification(&mut line, method, Some(p));
                send_to(&subscribed, &line);
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
                send_to(&[session], &line);
            }
            _ => {
                let mut line = Vec::new();
                write::notification(&mut line, method, params);
                send_to(&recipients(), &line);
            }
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
        let key = self.keys.get(upstream).map_or("", |k| &**k);
        let logger = match obj.get_str("logger") {
            Some(l) if !l.is_empty() => format!("{key}/{l}"),
            _ => key.to_owned(),
        };
        obj.set_str("logger", &logger);
        let mut line = Vec::new();
        write::notification(&mut line, "notifications/message", Some(&obj.to_text()));
        let hearing: Vec<Arc<Session>> =
            recipients.into_iter().filter(|s| s.hears(level)).collect();
        send_to(&hearing, &line);
    }
}

fn send_to(sessions: &[Arc<Session>], line: &[u8]) {
    for s in sessions {
        s.stream().notify(&[line]);
    }
}
