//! The session registry: every live host session, by id and (for HTTP) by the token hosts
//! present, and where a session is asked to end from anywhere (an outlet that overflowed, a
//! transport that saw its host go).

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::mpsc;

use crate::outlet::Ending;
use crate::session::Session;

/// Why a session could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many sessions ({0} open)")]
pub struct Full(pub usize);

/// Every live session.
pub struct Sessions {
    /// Written on connect and disconnect only; read on every broadcast.
    map: RwLock<Map>,
    limit: usize,
    ending: Ending,
}

#[derive(Default)]
struct Map {
    by_id: HashMap<u64, Arc<Session>>,
    by_token: HashMap<Box<str>, u64>,
}

impl Sessions {
    /// A registry that admits at most `limit` sessions at once; the receiver gets every
    /// request to end one (see [`Ending`]).
    pub fn new(limit: usize) -> (Arc<Self>, mpsc::UnboundedReceiver<(u64, String)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sessions = Arc::new(Self {
            map: RwLock::new(Map::default()),
            limit,
            ending: Ending::new(tx),
        });
        (sessions, rx)
    }

    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn ending(&self) -> Ending {
        self.ending.clone()
    }

    /// Registers a session, with the token its host will present (HTTP), if any.
    pub fn add(&self, session: Arc<Session>, token: Option<&str>) -> Result<(), Full> {
        let mut map = self.write();
        if map.by_id.len() >= self.limit {
            return Err(Full(map.by_id.len()));
        }
        if let Some(token) = token {
            session.set_token(token);
            map.by_token.insert(token.into(), session.id());
        }
        map.by_id.insert(session.id(), session);
        Ok(())
    }

    /// Removes a session; `None` if it was not (or no longer) registered.
    pub(crate) fn remove(&self, id: u64) -> Option<Arc<Session>> {
        let mut map = self.write();
        let session = map.by_id.remove(&id)?;
        map.by_token.retain(|_, v| *v != id);
        Some(session)
    }

    pub fn get(&self, id: u64) -> Option<Arc<Session>> {
        self.read().by_id.get(&id).cloned()
    }

    /// The session a host's token names.
    pub fn by_token(&self, token: &str) -> Option<Arc<Session>> {
        let map = self.read();
        map.by_token
            .get(token)
            .and_then(|id| map.by_id.get(id))
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.read().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of every session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.read().by_id.values().cloned().collect()
    }

    /// A snapshot of every initialized session that hears notifications from this process
    /// (not those whose home is another replica).
    pub fn ready(&self) -> Vec<Arc<Session>> {
        self.read()
            .by_id
            .values()
            .filter(|s| s.is_ready() && !s.is_away())
            .cloned()
            .collect()
    }
}
