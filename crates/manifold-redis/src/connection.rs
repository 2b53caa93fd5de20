//! One Redis, as every store using its URL reaches it: one client, one connection manager
//! (opened on first use, replaced when it stops answering) and one [`Health`]. Pub/sub and
//! blocking reads need connections of their own, which stores open from [`Connection::client`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ErrorKind, RedisError, RedisResult};

use crate::health::{lock, Health};

/// A Redis and the state of its shared connection.
pub struct Connection {
    client: Client,
    /// The longest timeout any store using it configured, in ms: the manager's own bounds
    /// (each store bounds its exchanges by its own timeout on top).
    timeout_ms: AtomicU64,
    conn: Mutex<Slot>,
    health: Health,
}

/// The connection, opened on first use and replaced when it stops answering.
#[derive(Default)]
struct Slot {
    /// Counts replacements, so that callers that failed on the same connection replace it once.
    generation: u64,
    manager: Option<ConnectionManager>,
}

/// Why an exchange failed: Redis's error, or no answer within the time given.
#[derive(Debug)]
pub enum Failure {
    Redis(RedisError),
    Timeout(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Redis(e) => e.fmt(f),
            Failure::Timeout(t) => write!(f, "no answer within {} ms", t.as_millis()),
        }
    }
}

impl Connection {
    /// Does not connect yet.
    pub fn new(client: Client, url: String, timeout: Duration) -> Self {
        Self {
            client,
            timeout_ms: AtomicU64::new(millis(timeout)),
            conn: Mutex::default(),
            health: Health::new(url),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Another store uses this Redis with `timeout`.
    pub(crate) fn allow(&self, timeout: Duration) {
        self.timeout_ms.fetch_max(millis(timeout), Ordering::AcqRel);
    }

    /// The shared connection, with its generation (for [`Self::replace`]).
    pub fn manager(&self) -> RedisResult<(u64, ConnectionManager)> {
        let mut slot = lock(&self.conn);
        if let Some(manager) = &slot.manager {
            return Ok((slot.generation, manager.clone()));
        }
        // No retries inside the manager: a failed attempt fails the operation at once, and
        // the next one starts a new attempt.
        let timeout = Duration::from_millis(self.timeout_ms.load(Ordering::Acquire));
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(0);
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
        slot.manager = Some(manager.clone());
        Ok((slot.generation, manager))
    }

    /// Drops the connection unless someone already replaced it.
    pub fn replace(&self, generation: u64) {
        let mut slot = lock(&self.conn);
        if slot.generation == generation {
            slot.generation += 1;
            slot.manager = None;
        }
    }

    /// `f` on the shared connection within `timeout`, the health told how it went. A
    /// connection that was refused or had been dropped (almost always while idle, before the
    /// command was written) is opened again and `f` run once more, within the same time.
    pub async fn run<T, F, Fut>(&self, timeout: Duration, f: F) -> Result<T, Failure>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let outcome = self.attempt(timeout, f).await;
        match &outcome {
            Ok(_) => self.health.ok(),
            Err(e) => self.health.failed(&e.to_string()),
        }
        outcome
    }

    async fn attempt<T, F, Fut>(&self, timeout: Duration, f: F) -> Result<T, Failure>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut resent = false;
        loop {
            let (generation, manager) = self.manager().map_err(Failure::Redis)?;
            match tokio::time::timeout_at(deadline, f(manager)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e))
                    if !resent && (e.is_connection_dropped() || e.is_connection_refusal()) =>
                {
                    self.replace(generation);
                    resent = true;
                }
                Ok(Err(e)) => {
                    if needs_new_connection(&e) {
                        self.replace(generation);
                    }
                    return Err(Failure::Redis(e));
                }
                Err(_) => {
                    // A connection that does not answer may be half-open and never recover
                    // by itself: open a new one next time.
                    self.replace(generation);
                    return Err(Failure::Timeout(timeout));
                }
            }
        }
    }
}

/// Whether the connection behind an error should be replaced rather than left to the manager,
/// which reconnects by itself only after I/O errors that close the connection.
fn needs_new_connection(e: &RedisError) -> bool {
    match e.kind() {
        ErrorKind::Io => e.is_timeout(),
        ErrorKind::Server(_) => false,
        // Authentication failures, unparsable replies, client-side errors: a fresh connection
        // starts over (e.g. once a password is fixed on the server).
        _ => true,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
