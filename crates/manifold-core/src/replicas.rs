//! The seams between the core and the stores that replicas share: what the HTTP transport
//! asks of a session store ([`SessionStore`]), what the result cache asks of its shared tier
//! ([`crate::cache::tier::SharedTier`]), what a shared session reports ([`Relay`]), and what
//! the binary provides to make them ([`Stores`]). The core implements each in memory, for one
//! replica; the Redis implementations live in a crate of their own, so that neither the core
//! nor the HTTP transport knows Redis.

mod sessions;

use std::sync::Arc;

use manifold_auth::TokenStore;
use manifold_config::{RedisConfig, SealKey, UpstreamConfig};
use manifold_policy::SharedCounts;

pub use crate::session::Relay;
pub use futures::future::BoxFuture;
pub use sessions::{EventSink, Locals, SessionStore, Unshared};

use crate::cache::tier::SharedTier;
use crate::router::Router;

/// What the binary provides to make the stores a configuration asks for: Redis, or nothing
/// ([`InMemory`], for a build or a command that shares nothing).
pub trait Stores: Send + Sync {
    /// The limit counts of `[limits] backend = "redis"`.
    fn limits(
        &self,
        config: &RedisConfig,
        fail_open: bool,
    ) -> Result<Arc<dyn SharedCounts>, String>;
    /// The result cache's shared tier (`[cache] backend = "redis"`) for `upstreams`.
    fn cache_tier(
        &self,
        config: &RedisConfig,
        upstreams: &[UpstreamConfig],
    ) -> Result<Arc<dyn SharedTier>, String>;
    /// The store of Streamable HTTP sessions (`[sessions] store = "redis"`), serving
    /// `router`'s sessions; `locals` opens a shared session's outlet on this replica.
    fn sessions(
        &self,
        config: &RedisConfig,
        router: &Arc<Router>,
        locals: Arc<dyn Locals>,
    ) -> Result<Arc<dyn SessionStore>, String>;
    /// The store of upstream tokens (`[credentials] store = "redis"`), sealed with `keys`
    /// (the current key first).
    fn tokens(&self, config: &RedisConfig, keys: &[SealKey])
        -> Result<Arc<dyn TokenStore>, String>;
    /// Where this replica announces itself (`card`, read again at each announcement) and
    /// reads the others' announcements, while the returned value lives.
    fn presence(
        &self,
        _config: &RedisConfig,
        _card: Arc<dyn Fn() -> ReplicaCard + Send + Sync>,
    ) -> Result<Arc<dyn Presence>, String> {
        Err(NO_SHARED.to_owned())
    }
}

/// What a replica tells the others about itself, for the web console's overview.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaCard {
    /// [`replica_id`].
    pub id: String,
    pub version: String,
    /// The admin address it serves (with the console), as bound.
    pub admin: Option<String>,
    /// When it started, in seconds since the Unix epoch.
    pub started: u64,
    pub upstreams_up: usize,
    pub upstreams: usize,
}

/// The replicas sharing a store, each announcing itself.
pub trait Presence: Send + Sync {
    /// Every replica that announced itself lately, this one included, sorted by id.
    fn replicas(&self) -> BoxFuture<'_, Result<Vec<ReplicaCard>, String>>;
}

/// This process's replica id: 64 bits from the operating system's random source, as hex,
/// drawn once. Sessions shared through Redis name their replica with it too.
pub fn replica_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// No store shared by replicas: a configuration that asks for one is refused with its key.
#[derive(Debug, Default, Clone, Copy)]
pub struct InMemory;

const NO_SHARED: &str = "this build keeps everything in memory (no store shared by replicas)";

impl Stores for InMemory {
    fn limits(&self, _: &RedisConfig, _: bool) -> Result<Arc<dyn SharedCounts>, String> {
        Err(format!("limits.redis_url: {NO_SHARED}"))
    }

    fn cache_tier(
        &self,
        _: &RedisConfig,
        _: &[UpstreamConfig],
    ) -> Result<Arc<dyn SharedTier>, String> {
        Err(format!("cache.redis_url: {NO_SHARED}"))
    }

    fn sessions(
        &self,
        _: &RedisConfig,
        _: &Arc<Router>,
        _: Arc<dyn Locals>,
    ) -> Result<Arc<dyn SessionStore>, String> {
        Err(format!("sessions.redis_url: {NO_SHARED}"))
    }

    fn tokens(&self, _: &RedisConfig, _: &[SealKey]) -> Result<Arc<dyn TokenStore>, String> {
        Err(format!("credentials.redis_url: {NO_SHARED}"))
    }
}
