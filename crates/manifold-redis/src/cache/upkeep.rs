//! The shared tier's upkeep: telling Redis of the changes this replica saw (increments tried
//! again each second until they are made), reading the generations in case an event was lost,
//! and the events subscription through which the other replicas' changes arrive.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use futures::StreamExt;
use manifold_core::cache::Cache;
use manifold_telemetry::StoreOp;
use redis::{RedisResult, Value};

use super::{
    lock, RedisTier, Upstream, PING_EVERY, POLL_EVERY, RESOURCE_GEN_MARGIN, RETRY, UNKNOWN,
};

impl RedisTier {
    /// Upstream `upstream` changed (`uri`: only that resource): Redis is told, and through it
    /// the other replicas. Until it is, this replica does not use the store for it.
    pub(super) fn changed(self: &Arc<Self>, upstream: usize, uri: Option<&str>) {
        let Some(up) = self.upstreams.get(upstream) else {
            return;
        };
        let mut pending = lock(&up.pending);
        pending.next += 1;
        let n = pending.next;
        match uri {
            None => pending.upstream = n,
            Some(uri) => {
                pending.uris.insert(uri.into(), n);
            }
        }
        up.pending_any.store(true, Ordering::Release);
        if !pending.flushing {
            pending.flushing = true;
            let shared = Arc::clone(self);
            self.runtime
                .spawn(async move { shared.flush(upstream).await });
        }
    }

    /// Makes the increments `upstream` has pending, until none is left or one fails (the
    /// upkeep tries again).
    async fn flush(&self, upstream: usize) {
        let up = &self.upstreams[upstream];
        loop {
            let (upto, whole, uris) = {
                let mut pending = lock(&up.pending);
                if pending.is_empty() {
                    pending.flushing = false;
                    up.pending_any.store(false, Ordering::Release);
                    return;
                }
                let uris: Vec<Box<str>> = pending.uris.keys().cloned().collect();
                (pending.next, pending.upstream != 0, uris)
            };
            let mut ok = true;
            if whole {
                match self.increment(up, None).await {
                    // Its own change: what it held was dropped when it saw it.
                    Some(gen) => up.raise_seen(gen),
                    None => ok = false,
                }
            }
            for uri in &uris {
                if ok {
                    ok = self.increment(up, Some(uri)).await.is_some();
                }
            }
            let mut pending = lock(&up.pending);
            if !ok {
                pending.flushing = false;
                return;
            }
            if pending.upstream <= upto {
                pending.upstream = 0;
            }
            pending.uris.retain(|_, n| *n > upto);
        }
    }

    /// One increment and its event; the new generation.
    async fn increment(&self, up: &Upstream, uri: Option<&str>) -> Option<u64> {
        let mut invocation = self.bump.prepare_invoke();
        match uri {
            None => {
                invocation
                    .key(&up.gen_key)
                    .arg(0)
                    .arg(&self.channel)
                    .arg(format!("u {} {}", self.node, up.name))
                    .arg("");
            }
            Some(uri) => {
                let keep = up.resource_ttl.unwrap_or_default() + RESOURCE_GEN_MARGIN;
                invocation
                    .key(self.resource_gen_key(up, uri))
                    .arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX))
                    .arg(&self.channel)
                    .arg(format!("r {} {}", self.node, up.name))
                    .arg(format!(" {uri}"));
            }
        }
        let invocation = &invocation;
        self.run(StoreOp::Invalidate, move |mut conn| async move {
            invocation.invoke_async::<u64>(&mut conn).await
        })
        .await
    }

    /// The upkeep, once a second: increments that failed are tried again, and every
    /// [`POLL_EVERY`] the upstreams' generations are read, so that a change whose event was
    /// lost still reaches this replica's memory.
    pub(super) async fn tick(self: &Arc<Self>, cache: &Arc<Cache>) {
        let weak = Arc::downgrade(cache);
        for (i, up) in self.upstreams.iter().enumerate() {
            let mut pending = lock(&up.pending);
            if !pending.is_empty() && !pending.flushing && self.conn.health().usable() {
                pending.flushing = true;
                let shared = Arc::clone(self);
                self.runtime.spawn(async move { shared.flush(i).await });
            }
        }
        let cached: Vec<usize> = (0..self.upstreams.len())
            .filter(|&i| cache.caches(i))
            .collect();
        if cached.is_empty() || !self.conn.health().usable() {
            return;
        }
        {
            let mut polled = lock(&self.polled);
            if polled.is_some_and(|at: Instant| at.elapsed() < POLL_EVERY) {
                return;
            }
            *polled = Some(Instant::now());
        }
        let mut cmd = redis::cmd("MGET");
        for &i in &cached {
            cmd.arg(&self.upstreams[i].gen_key);
        }
        let cmd = &cmd;
        let Some(gens) = self
            .run_quietly(move |mut conn| async move {
                cmd.query_async::<Vec<Option<u64>>>(&mut conn).await
            })
            .await
        else {
            return;
        };
        for (&i, gen) in cached.iter().zip(gens) {
            self.heard(&weak, i, gen.unwrap_or(0));
        }
    }

    /// Generation `gen` of `upstream` was read or heard of: if this replica knew another one,
    /// what it holds in memory for the upstream is dropped.
    fn heard(&self, cache: &Weak<Cache>, upstream: usize, gen: u64) {
        let seen = self.upstreams[upstream].seen.swap(gen, Ordering::AcqRel);
        if seen != UNKNOWN && seen != gen {
            if let Some(cache) = cache.upgrade() {
                cache.drop_upstream(upstream);
            }
        }
    }

    /// Listens to the other replicas' events for as long as `cache` lives: a change of an
    /// upstream drops what this replica holds of it in memory, a resource's update that
    /// resource's entries. The subscription is opened again after any failure; everything in
    /// memory is dropped then, since events may have been missed.
    pub(super) fn listen(self: &Arc<Self>, cache: Weak<Cache>) {
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            let mut first = true;
            while cache.strong_count() > 0 {
                match shared.subscribe().await {
                    Ok(pubsub) => {
                        if !first {
                            if let Some(cache) = cache.upgrade() {
                                cache.drop_all();
                            }
                        }
                        first = false;
                        let why = shared.events(pubsub, &cache).await;
                        tracing::debug!("cache events subscription ended: {why}");
                    }
                    Err(e) => {
                        tracing::debug!("cannot subscribe to cache events: {e}");
                    }
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }

    async fn subscribe(&self) -> Result<redis::aio::PubSub, String> {
        let subscribe = async {
            let mut pubsub = self.conn.client().get_async_pubsub().await?;
            pubsub.subscribe(&self.channel).await?;
            RedisResult::Ok(pubsub)
        };
        match tokio::time::timeout(self.timeout, subscribe).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    /// Handles events until the subscription fails or the cache is gone; why it ended.
    async fn events(&self, pubsub: redis::aio::PubSub, cache: &Weak<Cache>) -> String {
        let (mut sink, mut stream) = pubsub.split();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else {
                        return "the connection closed".into();
                    };
                    let Some(cache) = cache.upgrade() else {
                        return "the cache is gone".into();
                    };
                    if let Ok(text) = message.get_payload::<String>() {
                        self.event(&cache, &text);
                    }
                }
                _ = ping.tick() => {
                    if cache.strong_count() == 0 {
                        return "the cache is gone".into();
                    }
                    match tokio::time::timeout(self.timeout, sink.ping::<Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "no answer to PING".into(),
                    }
                }
            }
        }
    }

    /// One event: `u NODE UPSTREAM GEN` or `r NODE UPSTREAM GEN URI`.
    fn event(&self, cache: &Arc<Cache>, text: &str) {
        let mut parts = text.splitn(5, ' ');
        let (Some(kind), Some(node), Some(name), Some(gen)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Some(&upstream) = self.by_name.get(name) else {
            return;
        };
        if node == self.node {
            return;
        }
        match (kind, parts.next()) {
            ("u", None) => {
                if let Ok(gen) = gen.parse::<u64>() {
                    // Dropped below; a later read of this generation drops nothing more.
                    self.upstreams[upstream].raise_seen(gen);
                }
                cache.drop_upstream(upstream);
            }
            ("r", Some(uri)) => {
                cache.drop_resource(upstream, uri);
            }
            _ => {}
        }
    }
}
