//! Which connection a request to an upstream goes on: the upstream's shared one, a host
//! session's own (`isolation = "session"`), a team's own (an HTTP upstream with headers of
//! the team's), or a caller's own (an HTTP upstream whose `auth` gives each caller a token of
//! their own: one upstream session per caller, never one whose token changes per call). The
//! connections of sessions, teams and callers are started on first use and kept here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::{ArcSwap, Guard};

use crate::{Connection, Isolation, Peer, UpstreamError, UpstreamHandle};

/// Every upstream's connections.
pub struct Pool {
    /// The shared connection of each upstream, by index. Only grows (a reload adds
    /// upstreams at the end; a removed one keeps its place), so an index from any catalog is
    /// valid in it.
    shared: ArcSwap<Vec<UpstreamHandle>>,
    /// Starts the other connections; `None`: every request uses the shared one.
    isolation: Option<Isolation>,
    /// Sessions' own connections, by (upstream, session). Locked to look one up, add or
    /// remove it; never across a start or a shutdown.
    sessions: Mutex<HashMap<(usize, u64), UpstreamHandle>>,
    /// Teams' own connections, by (upstream, team); locked like `sessions`.
    teams: Mutex<HashMap<(usize, Arc<str>), UpstreamHandle>>,
    /// Callers' own connections, by (upstream, owner), with when each was last used; locked
    /// like `sessions`.
    callers: Mutex<Callers>,
}

/// Callers' own connections: (upstream, owner) to the connection and when it was last used.
type Callers = HashMap<(usize, Arc<str>), (UpstreamHandle, std::time::Instant)>;

/// A caller whose requests need a connection of their own (an upstream with per-caller
/// `auth`).
pub struct CallerFor<'a> {
    /// Who, as the credential store keys them (a hash: never a person's name).
    pub owner: &'a Arc<str>,
    /// Makes the connection's token source, when the connection is started now.
    pub credential: &'a dyn Fn() -> Arc<dyn crate::Credential>,
}

/// A team whose requests may need a connection of their own.
pub struct TeamFor<'a> {
    pub name: &'a Arc<str>,
    /// The team's own headers for the upstream, if it has any.
    pub headers: Option<&'a BTreeMap<String, String>>,
}

/// A host session whose requests may need a connection of their own.
pub struct SessionFor<'a> {
    pub id: u64,
    /// What the host declared in `initialize` (JSON text), passed on to its connection.
    pub capabilities: &'a str,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pool {
    pub fn new(shared: Vec<UpstreamHandle>, isolation: Option<Isolation>) -> Self {
        Self {
            shared: ArcSwap::from_pointee(shared),
            isolation,
            sessions: Mutex::new(HashMap::new()),
            teams: Mutex::new(HashMap::new()),
            callers: Mutex::new(HashMap::new()),
        }
    }

    /// Every upstream's shared connection, by index. Cheap: no lock, no copy.
    pub fn upstreams(&self) -> Guard<Arc<Vec<UpstreamHandle>>> {
        self.shared.load()
    }

    /// Adds the shared connection of an upstream a reload added, at the next index; call it
    /// before the catalog names that index.
    pub fn push(&self, handle: UpstreamHandle) {
        self.shared.rcu(|shared| {
            let mut grown = Vec::clone(shared);
            grown.push(handle.clone());
            grown
        });
    }

    /// Takes every connection of its own (sessions', teams') to `upstream`, for a reload
    /// that removed or changed it: later requests start new ones. The caller lets them
    /// finish their calls and stops them.
    pub fn take_own(&self, upstream: usize) -> Vec<UpstreamHandle> {
        let mut taken: Vec<UpstreamHandle> = Vec::new();
        lock(&self.sessions).retain(|(u, _), h| {
            let keep = *u != upstream;
            if !keep {
                taken.push(h.clone());
            }
            keep
        });
        lock(&self.teams).retain(|(u, _), h| {
            let keep = *u != upstream;
            if !keep {
                taken.push(h.clone());
            }
            keep
        });
        lock(&self.callers).retain(|(u, _), (h, _)| {
            let keep = *u != upstream;
            if !keep {
                taken.push(h.clone());
            }
            keep
        });
        taken
    }

    /// The connection of its own a caller's requests to `upstream` use, started now if this
    /// is the caller's first request there (`None`: connections of their own are not
    /// started in this process).
    pub fn caller(&self, upstream: usize, caller: CallerFor<'_>) -> Option<UpstreamHandle> {
        let isolation = self.isolation.as_ref()?;
        let mut callers = lock(&self.callers);
        let now = std::time::Instant::now();
        if let Some((handle, used)) = callers.get_mut(&(upstream, Arc::clone(caller.owner))) {
            *used = now;
            return Some(handle.clone());
        }
        let handle = isolation.start_for_caller(upstream, (caller.credential)())?;
        tracing::info!(
            upstream = self.key(upstream),
            "started a connection for a caller with a token of their own"
        );
        callers.insert((upstream, Arc::clone(caller.owner)), (handle.clone(), now));
        Some(handle)
    }

    /// Takes the callers' own connections unused for `idle` or longer (the caller stops
    /// them), and those of `owner` to `upstream` (a revoked connection) when given.
    pub fn take_callers(
        &self,
        idle: std::time::Duration,
        revoked: Option<(Option<usize>, &str)>,
    ) -> Vec<UpstreamHandle> {
        let mut taken = Vec::new();
        lock(&self.callers).retain(|(u, owner), (h, used)| {
            let gone = revoked.is_some_and(|(up, o)| &**owner == o && up.is_none_or(|up| up == *u));
            let keep = !gone && used.elapsed() < idle;
            if !keep {
                taken.push(h.clone());
            }
            keep
        });
        taken
    }

    /// Takes the connections a team has of its own (its headers changed, or it is gone).
    pub fn take_team(&self, team: &str) -> Vec<UpstreamHandle> {
        let mut taken = Vec::new();
        lock(&self.teams).retain(|(_, t), h| {
            let keep = &**t != team;
            if !keep {
                taken.push(h.clone());
            }
            keep
        });
        taken
    }

    /// Starts connections of their own with these upstream configurations from now on.
    pub fn set_configs(&self, configs: Vec<manifold_config::UpstreamConfig>) {
        if let Some(isolation) = &self.isolation {
            isolation.set_configs(configs);
        }
    }

    /// The connection of its own that a request of `team` and `session` to `upstream` must
    /// use, started now if this is its first use; `None`: the shared connection. `peer` makes
    /// where a session's own connection sends its requests to the host.
    pub fn own(
        &self,
        upstream: usize,
        team: Option<TeamFor<'_>>,
        session: Option<SessionFor<'_>>,
        peer: impl FnOnce() -> Arc<dyn Peer>,
    ) -> Result<Option<UpstreamHandle>, UpstreamError> {
        let Some(isolation) = &self.isolation else {
            return Ok(None);
        };
        if let Some(TeamFor {
            name,
            headers: Some(headers),
        }) = team
        {
            return Ok(self.team_handle(isolation, upstream, name, headers));
        }
        let (Some(limit), Some(session)) = (isolation.limit(upstream), session) else {
            return Ok(None);
        };
        let mut own = lock(&self.sessions);
        if let Some(handle) = own.get(&(upstream, session.id)) {
            return Ok(Some(handle.clone()));
        }
        let open = own.keys().filter(|(u, _)| *u == upstream).count();
        let key = self.key(upstream);
        if open >= limit {
            return Err(self.unavailable(
                upstream,
                format!("{open} sessions already have a connection of their own to {key:?} (isolation_limit); try again when one ends"),
            ));
        }
        let handle = isolation
            .start(upstream, session.id, session.capabilities, peer())
            .ok_or_else(|| self.unavailable(upstream, "it has no configuration".into()))?;
        tracing::info!(
            upstream = key,
            session = session.id,
            "started a connection for the session"
        );
        own.insert((upstream, session.id), handle.clone());
        Ok(Some(handle))
    }

    /// The connection to `upstream` that carries `team`'s own headers (started now, if this
    /// is the team's first call there). The host's own credentials are never passed on: the
    /// upstream sees the configured headers only.
    fn team_handle(
        &self,
        isolation: &Isolation,
        upstream: usize,
        team: &Arc<str>,
        headers: &BTreeMap<String, String>,
    ) -> Option<UpstreamHandle> {
        let mut teams = lock(&self.teams);
        if let Some(handle) = teams.get(&(upstream, Arc::clone(team))) {
            return Some(handle.clone());
        }
        let handle = isolation.start_for_team(upstream, headers)?;
        tracing::info!(
            upstream = self.key(upstream),
            team = &**team,
            "started a connection with the team's own headers"
        );
        teams.insert((upstream, Arc::clone(team)), handle.clone());
        Some(handle)
    }

    /// Requests in flight to `upstream`, on its shared connection and on every session's own.
    pub fn in_flight(&self, upstream: usize) -> usize {
        let shared = self
            .shared
            .load()
            .get(upstream)
            .and_then(UpstreamHandle::connection)
            .map_or(0, |c| c.in_flight());
        let own = lock(&self.sessions)
            .iter()
            .filter(|((u, _), _)| *u == upstream)
            .filter_map(|(_, h)| h.connection())
            .map(|c| c.in_flight())
            .sum::<usize>();
        let callers = lock(&self.callers)
            .iter()
            .filter(|((u, _), _)| *u == upstream)
            .filter_map(|(_, (h, _))| h.connection())
            .map(|c| c.in_flight())
            .sum::<usize>();
        shared + own + callers
    }

    /// Every live connection a session's requests may be on: the shared ones, and the
    /// session's own.
    pub fn connections_of(&self, session: u64) -> Vec<Arc<Connection>> {
        let mut conns: Vec<Arc<Connection>> = self
            .shared
            .load()
            .iter()
            .filter_map(UpstreamHandle::connection)
            .collect();
        conns.extend(
            lock(&self.sessions)
                .iter()
                .filter(|((_, s), _)| *s == session)
                .filter_map(|(_, h)| h.connection()),
        );
        conns
    }

    /// Takes the connections that served an ended session alone; the caller stops them.
    pub fn end_session(&self, session: u64) -> Vec<UpstreamHandle> {
        let mut own = lock(&self.sessions);
        let keys: Vec<(usize, u64)> = own.keys().filter(|(_, s)| *s == session).copied().collect();
        keys.iter().filter_map(|k| own.remove(k)).collect()
    }

    /// The index of the upstream whose key is `key`.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.shared.load().iter().position(|h| h.key() == key)
    }

    /// Whether requests to `upstream` need a connection per caller (an HTTP upstream whose
    /// `auth` gives each caller a token of their own).
    pub fn per_caller(&self, upstream: usize) -> bool {
        self.isolation
            .as_ref()
            .is_some_and(|isolation| isolation.per_caller(upstream))
    }

    fn key(&self, upstream: usize) -> String {
        self.shared
            .load()
            .get(upstream)
            .map_or_else(String::new, |h| h.key().to_owned())
    }

    fn unavailable(&self, upstream: usize, reason: String) -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: self.key(upstream),
            reason,
        }
    }
}
