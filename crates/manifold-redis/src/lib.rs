//! The stores replicas share, in Redis, behind the traits the core defines: Streamable HTTP
//! sessions ([`manifold_core::replicas::SessionStore`], `sessions`), the result cache's second
//! tier ([`manifold_core::cache::tier::SharedTier`], `cache`), limit counts
//! ([`manifold_policy::SharedCounts`], `limits`), the tokens of upstream credentials
//! ([`manifold_auth::TokenStore`], `tokens`) and the replicas' announcements of themselves
//! ([`manifold_core::replicas::Presence`], `presence`).
//!
//! Every store configured with the same URL uses one [`Connection`]: one client, one
//! connection manager and one [`health::Health`], which logs that Redis is unreachable, and
//! back, once for all of them.
#![forbid(unsafe_code)]

mod cache;
pub mod connection;
pub mod health;
pub mod limits;
pub mod presence;
mod sessions;
pub mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use manifold_auth::store::Fallback;
use manifold_auth::TokenStore;
use manifold_config::{redact_url, RedisConfig, SealKey, UpstreamConfig};
use manifold_core::cache::tier::SharedTier;
use manifold_core::replicas::{Locals, Presence, ReplicaCard, SessionStore, Stores};
use manifold_core::Router;
use manifold_policy::SharedCounts;

pub use connection::Connection;
pub use tokens::RedisTokens;

/// The Redis servers in use, one [`Connection`] per distinct URL, for the process's lifetime
/// (reloads included: a store made again for the same URL shares what the old one used).
#[derive(Default)]
pub struct Redis {
    connections: Mutex<HashMap<String, Arc<Connection>>>,
}

impl Redis {
    /// The connection of `config.url` (`key`: the setting it comes from, for errors). Does not
    /// connect yet.
    pub fn connect(&self, config: &RedisConfig, key: &str) -> Result<Arc<Connection>, String> {
        let mut connections = health::lock(&self.connections);
        if let Some(conn) = connections.get(&config.url) {
            conn.allow(config.timeout);
            return Ok(Arc::clone(conn));
        }
        let url = redact_url(&config.url);
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| format!("{key}: unusable Redis URL {url:?}: {e}"))?;
        let conn = Arc::new(Connection::new(client, url, config.timeout));
        connections.insert(config.url.clone(), Arc::clone(&conn));
        Ok(conn)
    }

    /// Whether every Redis in use answered its last exchange.
    pub fn is_up(&self) -> bool {
        health::lock(&self.connections)
            .values()
            .all(|c| c.health().is_up())
    }
}

impl Stores for Redis {
    fn presence(
        &self,
        config: &RedisConfig,
        card: Arc<dyn Fn() -> ReplicaCard + Send + Sync>,
    ) -> Result<Arc<dyn Presence>, String> {
        let conn = self.connect(config, "the replicas' presence")?;
        Ok(presence::RedisPresence::start(conn, config, card)?)
    }

    fn limits(
        &self,
        config: &RedisConfig,
        fail_open: bool,
    ) -> Result<Arc<dyn SharedCounts>, String> {
        let conn = self.connect(config, "limits.redis_url")?;
        Ok(Arc::new(limits::Limiter::new(conn, config, fail_open)))
    }

    fn cache_tier(
        &self,
        config: &RedisConfig,
        upstreams: &[UpstreamConfig],
    ) -> Result<Arc<dyn SharedTier>, String> {
        let conn = self.connect(config, "cache.redis_url")?;
        Ok(Arc::new(cache::Tier::new(conn, config, upstreams)?))
    }

    fn sessions(
        &self,
        config: &RedisConfig,
        router: &Arc<Router>,
        locals: Arc<dyn Locals>,
    ) -> Result<Arc<dyn SessionStore>, String> {
        let conn = self.connect(config, "sessions.redis_url")?;
        Ok(sessions::Store::start(conn, config, router, locals))
    }

    /// Redis behind this replica's memory ([`Fallback`]): while Redis fails, the tokens this
    /// replica holds stay usable.
    fn tokens(
        &self,
        config: &RedisConfig,
        keys: &[SealKey],
    ) -> Result<Arc<dyn TokenStore>, String> {
        let conn = self.connect(config, "credentials.redis_url")?;
        let store =
            RedisTokens::new(conn, config, keys).map_err(|e| format!("credentials: {e}"))?;
        Ok(Arc::new(Fallback::new(Arc::new(store))))
    }
}
