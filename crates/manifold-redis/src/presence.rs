//! Replicas announcing themselves through Redis, for the web console's overview: each writes
//! its [`ReplicaCard`] as JSON under `{prefix}replica:{id}` every [`ANNOUNCE_EVERY`], expiring
//! after [`FORGET_AFTER`], so a replica that stopped drops out of the list by itself. Reading
//! the list scans for those keys; nothing here is on a request's path.

use std::sync::{Arc, Weak};
use std::time::Duration;

use manifold_config::RedisConfig;
use manifold_core::replicas::{BoxFuture, Presence, ReplicaCard};

use crate::connection::Connection;

/// How often a replica writes its card again.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);
/// How long a card outlives its last announcement.
pub const FORGET_AFTER: Duration = Duration::from_secs(30);
/// The most cards one read returns (a bound on a misconfigured shared prefix).
const MAX_REPLICAS: usize = 256;

pub(crate) struct RedisPresence {
    conn: Arc<Connection>,
    prefix: String,
    timeout: Duration,
    card: Arc<dyn Fn() -> ReplicaCard + Send + Sync>,
}

impl RedisPresence {
    /// Starts announcing `card` on the current runtime until the returned value is dropped.
    pub(crate) fn start(
        conn: Arc<Connection>,
        config: &RedisConfig,
        card: Arc<dyn Fn() -> ReplicaCard + Send + Sync>,
    ) -> Result<Arc<Self>, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "replicas announce themselves from a runtime".to_owned())?;
        let presence = Arc::new(Self {
            conn,
            prefix: config.key_prefix.clone(),
            timeout: config.timeout,
            card,
        });
        runtime.spawn(announce(Arc::downgrade(&presence)));
        Ok(presence)
    }

    fn key(&self, id: &str) -> String {
        format!("{}replica:{id}", self.prefix)
    }

    async fn write(&self) {
        let card = (self.card)();
        let Ok(json) = serde_json::to_string(&card) else {
            return;
        };
        let key = self.key(&card.id);
        let ttl = u64::try_from(FORGET_AFTER.as_millis()).unwrap_or(u64::MAX);
        // A failure is the connection's to report (its health logs Redis down and back).
        let _ = self
            .conn
            .run(self.timeout, |mut c| {
                let (key, json) = (key.clone(), json.clone());
                async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(json)
                        .arg("PX")
                        .arg(ttl)
                        .query_async::<()>(&mut c)
                        .await
                }
            })
            .await;
    }

    async fn read(&self) -> Result<Vec<ReplicaCard>, String> {
        let pattern = self.key("*");
        let keys: Vec<String> = self
            .conn
            .run(self.timeout, |mut c| {
                let pattern = pattern.clone();
                async move {
                    let mut keys = Vec::new();
                    let mut cursor = 0u64;
                    loop {
                        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(&pattern)
                            .arg("COUNT")
                            .arg(100)
                            .query_async(&mut c)
                            .await?;
                        keys.extend(batch);
                        cursor = next;
                        if cursor == 0 || keys.len() >= MAX_REPLICAS {
                            return Ok(keys);
                        }
                    }
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Option<String>> = self
            .conn
            .run(self.timeout, |mut c| {
                let keys = keys.clone();
                async move { redis::cmd("MGET").arg(keys).query_async(&mut c).await }
            })
            .await
            .map_err(|e| e.to_string())?;
        // A card that expired between the scan and the read is simply gone; one that is not
        // a card (another program's key under the prefix) is skipped.
        let mut cards: Vec<ReplicaCard> = values
            .into_iter()
            .flatten()
            .filter_map(|v| serde_json::from_str(&v).ok())
            .collect();
        cards.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(cards)
    }
}

impl Presence for RedisPresence {
    fn replicas(&self) -> BoxFuture<'_, Result<Vec<ReplicaCard>, String>> {
        Box::pin(self.read())
    }
}

/// Writes the card now and then every [`ANNOUNCE_EVERY`] while the presence lives.
async fn announce(presence: Weak<RedisPresence>) {
    let mut every = tokio::time::interval(ANNOUNCE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(presence) = presence.upgrade() else {
            return;
        };
        presence.write().await;
    }
}
