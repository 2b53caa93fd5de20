//! The host-facing fan-out: which sessions hear what. Catalog changes reach each session
//! whose view changed; what an upstream says reaches only the sessions of teams that may use
//! it (a session's own connection speaks to that session alone): log messages the sessions
//! whose level admits them (the logger named after the upstream), `resources/updated` the
//! sessions subscribed to the resource, a task's status its owner. Stateless hosts hear
//! through their `subscriptions/listen` streams ([`Listen`]) what they opted in to, tagged
//! with the stream's subscription id, within their team's view as sessions do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use manifold_catalog::{Catalog, Kind};
use manifold_protocol::version::meta;
use manifold_protocol::{object::json_string, write, RawObject, LOG_LEVELS};

use crate::context::Context;
use crate::outlet::Outlet;
use crate::policy::Caller;

use crate::session::Session;
use crate::sessions::Sessions;
use crate::tasks::Tasks;

/// Who hears what.
pub struct Fanout {
    sessions: Arc<Sessions>,
    /// Each upstream's key, by index (loggers are named after it; team views admit by it);
    /// a reload adds to them.
    keys: arc_swap::ArcSwap<Vec<Arc<str>>>,
    /// Which session owns each task.
    tasks: Arc<Tasks>,
    /// The stateless hosts' `subscriptions/listen` streams.
    listens: Mutex<Vec<Arc<Listen>>>,
    /// Stateless requests in flight that asked for log messages (`_meta` logLevel).
    loggers: Arc<Mutex<Vec<Arc<Logger>>>>,
}

/// A stateless request in flight to an upstream that asked to hear its log messages at
/// `level` or above, on its own stream.
pub struct Logger {
    upstream: usize,
    level: u8,
    caller: Arc<Caller>,
    outlet: Arc<dyn Outlet>,
}

/// Keeps a [`Logger`] hearing until dropped (with the request's exchange).
pub struct Logging {
    logger: Arc<Logger>,
    loggers: std::sync::Weak<Mutex<Vec<Arc<Logger>>>>,
}

impl Drop for Logging {
    fn drop(&mut self) {
        if let Some(loggers) = self.loggers.upgrade() {
            loggers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|l| !Arc::ptr_eq(l, &self.logger));
        }
    }
}

/// What a `subscriptions/listen` stream carries.
#[derive(Debug, Default, Clone)]
pub struct Wants {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// Exposed URIs whose updates the host hears.
    pub uris: Vec<String>,
}

/// One `subscriptions/listen` stream.
pub struct Listen {
    /// The listen request's id, as JSON text: the subscription id its notifications carry.
    id: Box<str>,
    /// The session (stdio) or the number the request stands under (HTTP).
    owner: u64,
    caller: Arc<Caller>,
    outlet: Arc<dyn Outlet>,
    wants: Wants,
    /// The upstream resources subscribed for it: (upstream, URI as the upstream knows it).
    upstream_uris: Vec<(usize, String)>,
    /// The listen request, answered (with the closing result) only if Manifold ends it.
    ctx: Mutex<Option<Context>>,
    /// Whether its acknowledgement was sent: nothing is sent on it before.
    acked: std::sync::atomic::AtomicBool,
}

impl Listen {
    pub fn new(ctx: Context, wants: Wants, upstream_uris: Vec<(usize, String)>) -> Self {
        Self {
            id: manifold_protocol::envelope::canonical_id(&ctx.id).into(),
            owner: ctx.session_id(),
            caller: Arc::clone(&ctx.caller),
            outlet: Arc::clone(&ctx.outlet),
            wants,
            upstream_uris,
            ctx: Mutex::new(Some(ctx)),
            acked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Its acknowledgement was sent: it hears what it asked for from now on.
    pub fn acknowledged(&self) {
        self.acked.store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_acknowledged(&self) -> bool {
        self.acked.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn upstream_uris(&self) -> &[(usize, String)] {
        &self.upstream_uris
    }

    /// Sends `method` with `params` (an object's members, without braces, or empty), tagged
    /// with the subscription id.
    fn send(&self, method: &str, members: &str) {
        let sep = if members.is_empty() { "" } else { "," };
        let params = format!(
            "{{{members}{sep}\"_meta\":{{{}:{}}}}}",
            json_string(meta::SUBSCRIPTION_ID),
            self.id
        );
        let mut line = Vec::new();
        write::notification(&mut line, method, Some(&params));
        self.outlet.notify(&[&line]);
    }

    /// Tells the stream of the lists among `changed` it asked to hear of.
    fn lists_changed(&self, changed: &[Kind]) {
        let mut sent: Vec<&str> = Vec::new();
        for kind in changed {
            let wanted = match kind {
                Kind::Tools => self.wants.tools,
                Kind::Prompts => self.wants.prompts,
                Kind::Resources | Kind::ResourceTemplates | Kind::Skills => self.wants.resources,
            };
            let method = kind.list_changed();
            if wanted && !sent.contains(&method) {
                sent.push(method);
                self.send(method, "");
            }
        }
    }

    /// Ends the stream with its closing result (Manifold is shutting down).
    fn close(&self) {
        let ctx = self
            .ctx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(ctx) = ctx {
            let result = format!(
                "{{\"_meta\":{{{}:{}}}}}",
                json_string(meta::SUBSCRIPTION_ID),
                ctx.id
            );
            ctx.reply(&result);
        }
    }
}

impl Fanout {
    pub fn new(sessions: Arc<Sessions>, keys: Vec<Arc<str>>, tasks: Arc<Tasks>) -> Self {
        Self {
            sessions,
            keys: arc_swap::ArcSwap::from_pointee(keys),
            tasks,
            listens: Mutex::new(Vec::new()),
            loggers: Arc::default(),
        }
    }

    /// Each upstream's key, by index, after a reload added upstreams.
    pub fn set_keys(&self, keys: Vec<Arc<str>>) {
        self.keys.store(Arc::new(keys));
    }

    fn key(&self, upstream: usize) -> Arc<str> {
        self.keys
            .load()
            .get(upstream)
            .map_or_else(|| Arc::from(""), Arc::clone)
    }

    fn loggers(&self) -> MutexGuard<'_, Vec<Arc<Logger>>> {
        self.loggers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `ctx`'s request hears upstream `upstream`'s log messages at `level` or above, on its
    /// own stream, while the returned guard lives.
    pub fn log_for(&self, ctx: &Context, upstream: usize, level: u8) -> Logging {
        let logger = Arc::new(Logger {
            upstream,
            level,
            caller: Arc::clone(&ctx.caller),
            outlet: Arc::clone(&ctx.outlet),
        });
        self.loggers().push(Arc::clone(&logger));
        Logging {
            logger,
            loggers: Arc::downgrade(&self.loggers),
        }
    }

    /// The most verbose level a request in flight asked of `upstream`.
    pub fn logger_level(&self, upstream: usize) -> Option<u8> {
        self.loggers()
            .iter()
            .filter(|l| l.upstream == upstream)
            .map(|l| l.level)
            .min()
    }

    fn listens(&self) -> MutexGuard<'_, Vec<Arc<Listen>>> {
        self.listens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A stateless host listens.
    pub fn listen(&self, listen: Arc<Listen>) {
        self.listens().push(listen);
    }

    /// The listen streams of `owner` (only the one with request id `id`, if given) stop;
    /// returns them.
    pub fn stop_listening(&self, owner: u64, id: Option<&str>) -> Vec<Arc<Listen>> {
        let mut listens = self.listens();
        let (gone, kept): (Vec<_>, Vec<_>) = listens
            .drain(..)
            .partition(|l| l.owner == owner && id.is_none_or(|id| *l.id == *id));
        *listens = kept;
        gone
    }

    /// Ends every listen stream with its closing result (shutdown).
    pub fn close_listens(&self) -> Vec<Arc<Listen>> {
        let gone: Vec<_> = self.listens().drain(..).collect();
        for l in &gone {
            l.close();
        }
        gone
    }

    /// The listen streams whose acknowledgement was sent (the others hear nothing yet).
    fn acknowledged(&self) -> Vec<Arc<Listen>> {
        self.listens()
            .iter()
            .filter(|l| l.is_acknowledged())
            .cloned()
            .collect()
    }

    /// Tells each listen stream that asked of the lists among `kinds` that changed in its
    /// caller's view.
    fn lists_changed_to_listens(&self, before: &Catalog, after: &Catalog, kinds: &[Kind]) {
        let listens = self.acknowledged();
        let mut by_team: HashMap<Arc<str>, Vec<Kind>> = HashMap::new();
        for listen in listens {
            let changed = match listen.caller.restricted() {
                None => kinds.to_vec(),
                Some(team) => by_team
                    .entry(Arc::clone(&team.name))
                    .or_insert_with(|| team.changed(before, after, kinds))
                    .clone(),
            };
            listen.lists_changed(&changed);
        }
    }

    /// `notifications/resources/updated` for the exposed `uri`, to the listen streams that
    /// asked for it and whose team may use `upstream`.
    fn resource_updated_to_listens(&self, key: &str, uri: &str, params: &str) {
        let listens = self.acknowledged();
        let members = RawObject::parse(params).ok().map(|mut o| {
            o.remove("_meta");
            let text = o.to_text();
            text.trim()
                .strip_prefix('{')
                .and_then(|t| t.strip_suffix('}'))
                .unwrap_or("")
                .to_owned()
        });
        let Some(members) = members else { return };
        for listen in listens {
            let admitted = listen
                .caller
                .restricted()
                .is_none_or(|t| t.config().admits_upstream(key));
            if admitted && listen.wants.uris.iter().any(|u| u == uri) {
                listen.send("notifications/resources/updated", &members);
            }
        }
    }

    /// Tells each session of the lists among `kinds` that changed in its view from catalog
    /// `before` to `after`.
    pub fn lists_changed(&self, before: &Catalog, after: &Catalog, kinds: &[Kind]) {
        self.lists_changed_to_listens(before, after, kinds);
        // A team whose view hides something hears only of changes to its view; the others
        // see the whole catalog. Each team's view is compared once.
        let mut by_team: HashMap<Arc<str>, Vec<Kind>> = HashMap::new();
        let mut hearing: Vec<(Arc<Session>, Vec<Kind>)> = Vec::new();
        for session in self.sessions.ready() {
            let changed = match session.caller().restricted() {
                None => kinds.to_vec(),
                Some(team) => by_team
                    .entry(Arc::clone(&team.name))
                    .or_insert_with(|| team.changed(before, after, kinds))
                    .clone(),
            };
            hearing.push((session, changed));
        }
        tell_sessions(&hearing);
    }

    /// After a reload changed what teams may see: tells the sessions and listen streams of
    /// each team in `changed` of the lists that differ in its view (by team name).
    pub fn views_changed(&self, changed: &HashMap<Arc<str>, Vec<Kind>>) {
        let of = |caller: &Caller| caller.team.as_ref().and_then(|t| changed.get(&t.name));
        let listens = self.acknowledged();
        for listen in listens {
            if let Some(kinds) = of(&listen.caller) {
                listen.lists_changed(kinds);
            }
        }
        let hearing: Vec<(Arc<Session>, Vec<Kind>)> = self
            .sessions
            .ready()
            .into_iter()
            .filter_map(|s| of(s.caller()).map(|k| (Arc::clone(&s), k.clone())))
            .collect();
        tell_sessions(&hearing);
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
        let key = self.key(upstream);
        let key = &*key;
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
                        .is_none_or(|t| t.config().admits_upstream(key))
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
                if session.is_none() {
                    self.resource_updated_to_listens(key, &uri, p);
                }
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
        let key = self.key(upstream);
        let key = &*key;
        let logger = match obj.get_str("logger") {
            Some(l) if !l.is_empty() => format!("{key}/{l}"),
            _ => key.to_owned(),
        };
        obj.set_str("logger", &logger);
        let mut line = Vec::new();
        write::notification(&mut line, "notifications/message", Some(&obj.to_text()));
        // A stateless host hears log messages only for requests that ask for them.
        let hearing: Vec<Arc<Session>> = recipients
            .into_iter()
            .filter(|s| !s.is_stateless() && s.hears(level))
            .collect();
        send_to(&hearing, &line);
        // And the stateless requests in flight to it that asked for this level.
        let loggers: Vec<Arc<Logger>> = self
            .loggers()
            .iter()
            .filter(|l| l.upstream == upstream && level >= l.level)
            .filter(|l| {
                l.caller
                    .restricted()
                    .is_none_or(|t| t.config().admits_upstream(key))
            })
            .cloned()
            .collect();
        for l in loggers {
            l.outlet.notify(&[&line]);
        }
    }
}

/// Sends each session one `list_changed` notification for each of its changed lists
/// (templates and skills share the resources notification).
fn tell_sessions(hearing: &[(Arc<Session>, Vec<Kind>)]) {
    for kind in Kind::ALL {
        let method = kind.list_changed();
        if matches!(kind, Kind::ResourceTemplates | Kind::Skills) {
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

fn send_to(sessions: &[Arc<Session>], line: &[u8]) {
    for s in sessions {
        s.stream().notify(&[line]);
    }
}
