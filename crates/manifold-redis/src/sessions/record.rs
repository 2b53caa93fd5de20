//! A shared session's record: made once `initialize` is answered, copied by the replicas
//! that get its requests, renewed while requests come, deleted when the host ends it; and the
//! writes a replica makes of it, in order, by one task.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use manifold_core::policy::Caller;
use manifold_core::session::{Session, Transport};
use manifold_protocol::version;
use tokio::sync::mpsc;

use super::{HostClient, Record, Store, Write, TOUCHED_KEPT};

impl Store {
    /// Records a session whose `initialize` was just answered, with this replica as its home.
    pub(super) async fn create(&self, session: &Session) -> Result<(), String> {
        let Some(token) = session.token() else {
            return Ok(());
        };
        let caller = session.caller();
        let team = caller.team.as_ref().map_or("", |t| &*t.name);
        let (capabilities, info) = session
            .client()
            .map_or(("{}", None), |c| (&*c.capabilities, c.info.as_deref()));
        let key = self.key(token);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(&key)
            .arg("team")
            .arg(team)
            .arg("caller")
            .arg(&*caller.id)
            .arg("version")
            .arg(session.version().unwrap_or_default())
            .arg("capabilities")
            .arg(capabilities)
            .arg("home")
            .arg(&*self.replica)
            .ignore();
        if let Some(info) = info {
            pipe.cmd("HSET").arg(&key).arg("info").arg(info).ignore();
        }
        if let Some(asked) = session.found().asked() {
            pipe.cmd("HSET")
                .arg(&key)
                .arg("discovery")
                .arg(asked)
                .ignore();
        }
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(self.ttl_ms())
            .ignore()
            .cmd("SADD")
            .arg(self.homes_key(&self.replica))
            .arg(token)
            .ignore();
        let pipe = &pipe;
        self.conn
            .run(self.timeout, |mut c| async move {
                pipe.query_async::<()>(&mut c).await
            })
            .await
            .map_err(|e| e.to_string())
    }

    /// The session `token` names, from the store: a local copy made now, or `None` if no
    /// replica knows it (or Redis cannot be reached).
    pub(super) async fn adopt(self: &Arc<Self>, token: &str) -> Option<Arc<Session>> {
        let record = self.load(token).await??;
        let router = self.router.upgrade()?;
        let sessions = router.sessions();
        // Another request for it may have made the copy meanwhile.
        if let Some(found) = sessions.by_token(token) {
            return Some(found);
        }
        let caller = if record.team.is_empty() {
            if *Caller::anonymous().id == record.caller {
                Caller::anonymous()
            } else {
                // The token a caller authenticated with is not kept with its session.
                Arc::new(Caller {
                    team: None,
                    id: record.caller.into(),
                    token: None,
                })
            }
        } else {
            let team = router.teams().get(&record.team).cloned()?;
            Caller::of_team(team, record.caller.into())
        };
        let id = Session::next_id();
        let outlet = self.outlet(token, self.locals.open(id));
        let session = Session::with_id(id, Transport::StreamableHttp, outlet);
        session.set_caller(caller);
        session.begin_initialize();
        session.finish_initialize(record.version, record.client);
        if let Some(level) = record.level {
            session.set_log_level(level);
        }
        let home = record.home == *self.replica;
        session.share(self.relay(token, true));
        for uri in &record.subs {
            session.subscribe(uri);
        }
        router.restore_discovery(&session, record.discovery.as_deref(), record.found);
        if let Err(full) = sessions.add(Arc::clone(&session), Some(token)) {
            tracing::warn!("cannot take a shared session: {full}");
            return None;
        }
        if home {
            self.set_away(token, false);
            router.take_subscriptions(&session);
        }
        tracing::debug!(session = id, home, "shared session copied from the store");
        Some(session)
    }

    /// The record of `token`: `None` if Redis could not be asked, `Some(None)` if it holds
    /// none.
    pub(super) async fn load(&self, token: &str) -> Option<Option<Record>> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(self.key(token))
            .cmd("SMEMBERS")
            .arg(self.subs_key(token));
        let (fields, subs): (HashMap<String, String>, Vec<String>) =
            self.query("reading a session", &pipe).await?;
        let Some(version) = fields.get("version").and_then(|v| version::known(v)) else {
            return Some(None);
        };
        let get = |name: &str| fields.get(name).cloned().unwrap_or_default();
        Some(Some(Record {
            team: get("team"),
            caller: get("caller"),
            version,
            client: HostClient {
                capabilities: fields
                    .get("capabilities")
                    .map_or_else(|| "{}".into(), |c| c.as_str().into()),
                info: fields.get("info").map(|i| i.as_str().into()),
            },
            level: fields.get("level").and_then(|l| l.parse().ok()),
            home: get("home"),
            subs,
            discovery: fields.get("discovery").cloned(),
            found: fields
                .get("found")
                .and_then(|f| serde_json::from_str(f).ok())
                .unwrap_or_default(),
        }))
    }

    /// A request came for the session: its keys live on (renewed at most every quarter of
    /// their lifetime by each replica).
    pub(super) fn touch(&self, token: &str) {
        let due = {
            let mut touched = self
                .touched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            let every = self.ttl / 4;
            match touched.get(token) {
                Some(t) if now.duration_since(*t) < every => false,
                _ => {
                    if touched.len() >= TOUCHED_KEPT {
                        // Sessions gone or quiet are forgotten: their next request renews.
                        touched.retain(|_, t| now.duration_since(*t) < every);
                    }
                    touched.insert(token.into(), now);
                    true
                }
            }
        };
        if due {
            let _ = self.writes.send(Write::Touch {
                token: token.into(),
            });
        }
    }

    /// Whether the store still holds the session (its keys have not expired).
    pub(super) async fn exists(&self, token: &str) -> bool {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.key(token));
        let found: Option<u64> = self.query_one("looking a session up", &cmd).await;
        // Unknown (Redis unreachable) counts as alive: a session is never ended for that.
        found.is_none_or(|n| n > 0)
    }

    /// The host ended the session: every replica forgets it.
    pub(super) async fn end(&self, token: &str) {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.key(token)).arg("home");
        let home: Option<String> = self.query_one("ending a session", &cmd).await.flatten();
        let mut pipe = redis::pipe();
        pipe.cmd("DEL")
            .arg(self.key(token))
            .arg(self.subs_key(token))
            .arg(self.tasks_key(token))
            .arg(self.events_key(token))
            .ignore()
            .cmd("PUBLISH")
            .arg(self.channel())
            .arg(format!("end {token}"))
            .ignore();
        if let Some(home) = home {
            pipe.cmd("SREM")
                .arg(self.homes_key(&home))
                .arg(token)
                .ignore();
        }
        self.query::<()>("ending a session", &pipe).await;
    }

    /// Writes in order, one at a time.
    pub(super) async fn write_loop(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Write>) {
        while let Some(write) = rx.recv().await {
            let mut pipe = redis::pipe();
            match write {
                Write::Event { token, message } => {
                    let key = self.events_key(&token);
                    pipe.cmd("XADD")
                        .arg(&key)
                        .arg("MAXLEN")
                        .arg("~")
                        .arg(self.replay)
                        .arg("*")
                        .arg("m")
                        .arg(message)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&key)
                        .arg(self.ttl_ms())
                        .ignore();
                }
                Write::State { token, level, subs } => {
                    let key = self.key(&token);
                    let subs_key = self.subs_key(&token);
                    pipe.atomic();
                    match level {
                        Some(level) => pipe.cmd("HSET").arg(&key).arg("level").arg(level),
                        None => pipe.cmd("HDEL").arg(&key).arg("level"),
                    }
                    .ignore();
                    pipe.cmd("DEL").arg(&subs_key).ignore();
                    if !subs.is_empty() {
                        pipe.cmd("SADD").arg(&subs_key).arg(&subs).ignore();
                        pipe.cmd("PEXPIRE")
                            .arg(&subs_key)
                            .arg(self.ttl_ms())
                            .ignore();
                    }
                    pipe.cmd("PUBLISH")
                        .arg(self.channel())
                        .arg(format!("refresh {token} {}", self.replica))
                        .ignore();
                }
                Write::Found { token, found } => {
                    let key = self.key(&token);
                    pipe.atomic();
                    if found.is_empty() {
                        pipe.cmd("HDEL").arg(&key).arg("found").ignore();
                    } else {
                        let list = serde_json::to_string(&found).unwrap_or_default();
                        pipe.cmd("HSET").arg(&key).arg("found").arg(list).ignore();
                    }
                    pipe.cmd("PUBLISH")
                        .arg(self.channel())
                        .arg(format!("refresh {token} {}", self.replica))
                        .ignore();
                }
                Write::Answer {
                    token,
                    replica,
                    message,
                } => {
                    let mut text = format!("answer {token}\n").into_bytes();
                    text.extend_from_slice(&message);
                    pipe.cmd("PUBLISH")
                        .arg(self.inbox(&replica))
                        .arg(text)
                        .ignore();
                }
                Write::Task { token, task } => {
                    let key = self.tasks_key(&token);
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg(task)
                        .arg(&*self.replica)
                        .ignore();
                    pipe.cmd("PEXPIRE").arg(&key).arg(self.ttl_ms()).ignore();
                }
                Write::Call { replica, message } => {
                    pipe.cmd("PUBLISH")
                        .arg(self.inbox(&replica))
                        .arg(message)
                        .ignore();
                }
                Write::Touch { token } => {
                    for key in [
                        self.key(&token),
                        self.subs_key(&token),
                        self.tasks_key(&token),
                        self.events_key(&token),
                    ] {
                        pipe.cmd("PEXPIRE").arg(key).arg(self.ttl_ms()).ignore();
                    }
                }
            }
            self.query::<()>("writing a session's state", &pipe).await;
        }
    }
}
