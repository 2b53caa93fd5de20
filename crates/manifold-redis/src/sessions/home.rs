//! Which replica is a shared session's home: each replica renews its liveness twice a second
//! and takes over the sessions of one that stopped; a replica where a host opens its GET
//! stream claims the session. Whether a session held here has its home elsewhere is kept in
//! its relay ([`super::relay::SessionRelay`]), found by token.

use std::sync::{Arc, Weak};

use manifold_core::session::Session;

use super::{Store, ALIVE_FOR, BEAT};

impl Store {
    /// Makes this replica the home of the session `token` (`false`) or another one (`true`).
    pub(super) fn set_away(&self, token: &str, away: bool) {
        let relay = super::lock(&self.relays).get(token).and_then(Weak::upgrade);
        if let Some(relay) = relay {
            relay.set_away(away);
        }
    }

    /// Renews this replica's liveness, and takes over the sessions of replicas gone.
    pub(super) async fn beat_loop(store: Weak<Self>) {
        let mut tick = tokio::time::interval(BEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(this) = store.upgrade() else { return };
            match this.beat().await {
                Ok(()) => this.conn.health().ok(),
                Err(e) => {
                    tracing::debug!("session store: renewing this replica's liveness failed: {e}");
                    this.conn.health().failed(&e.to_string());
                }
            }
        }
    }

    async fn beat(self: &Arc<Self>) -> Result<(), redis::RedisError> {
        let (_, mut conn) = self.conn.manager()?;
        let alive_ms = u64::try_from(ALIVE_FOR.as_millis()).unwrap_or(3000);
        let replicas: Vec<String> = redis::pipe()
            .cmd("SET")
            .arg(self.alive_key(&self.replica))
            .arg(1)
            .arg("PX")
            .arg(alive_ms)
            .ignore()
            .cmd("SADD")
            .arg(self.replicas_key())
            .arg(&*self.replica)
            .ignore()
            .cmd("SMEMBERS")
            .arg(self.replicas_key())
            .query_async::<(Vec<String>,)>(&mut conn)
            .await?
            .0;
        for other in replicas.iter().filter(|r| **r != *self.replica) {
            let alive: u64 = redis::cmd("EXISTS")
                .arg(self.alive_key(other))
                .query_async(&mut conn)
                .await?;
            if alive == 0 {
                self.take_over(other).await?;
            }
        }
        Ok(())
    }

    /// Becomes home to the sessions of `gone`, a replica that stopped renewing its liveness.
    async fn take_over(self: &Arc<Self>, gone: &str) -> Result<(), redis::RedisError> {
        let (_, mut conn) = self.conn.manager()?;
        let mut taken = 0usize;
        loop {
            let token: Option<String> = redis::cmd("SPOP")
                .arg(self.homes_key(gone))
                .query_async(&mut conn)
                .await?;
            let Some(token) = token else { break };
            // Only a record that still exists gets a home.
            let exists: u64 = redis::cmd("EXISTS")
                .arg(self.key(&token))
                .query_async(&mut conn)
                .await?;
            if exists == 0 {
                continue;
            }
            redis::pipe()
                .cmd("HSET")
                .arg(self.key(&token))
                .arg("home")
                .arg(&*self.replica)
                .ignore()
                .cmd("SADD")
                .arg(self.homes_key(&self.replica))
                .arg(&token)
                .ignore()
                .cmd("PUBLISH")
                .arg(self.channel())
                .arg(format!("moved {token} {}", self.replica))
                .ignore()
                .query_async::<()>(&mut conn)
                .await?;
            taken += 1;
            let router = self.router.upgrade();
            let local = router.as_ref().and_then(|r| r.sessions().by_token(&token));
            match local {
                Some(session) => {
                    if session.is_away() {
                        self.set_away(&token, false);
                        if let Some(router) = &router {
                            router.take_subscriptions(&session);
                        }
                    }
                }
                None => {
                    self.adopt(&token).await;
                }
            }
        }
        let _: () = redis::cmd("SREM")
            .arg(self.replicas_key())
            .arg(gone)
            .query_async(&mut conn)
            .await?;
        if taken > 0 {
            tracing::info!(
                replica = gone,
                sessions = taken,
                "took over the sessions of a replica that stopped"
            );
        }
        Ok(())
    }

    /// Makes this replica the session's home (a host opened its GET stream here).
    pub(super) async fn claim(&self, session: &Arc<Session>) {
        let Some(token) = session.token() else { return };
        if !session.is_away() {
            return;
        }
        let Some(router) = self.router.upgrade() else {
            return;
        };
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.key(token)).arg("home");
        let previous: Option<Option<String>> = self.query_one("claiming a session", &cmd).await;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(self.key(token))
            .arg("home")
            .arg(&*self.replica)
            .ignore()
            .cmd("SADD")
            .arg(self.homes_key(&self.replica))
            .arg(token)
            .ignore();
        if let Some(Some(previous)) = &previous {
            pipe.cmd("SREM")
                .arg(self.homes_key(previous))
                .arg(token)
                .ignore();
        }
        pipe.cmd("PUBLISH")
            .arg(self.channel())
            .arg(format!("moved {token} {}", self.replica))
            .ignore();
        if self
            .query::<()>("claiming a session", &pipe)
            .await
            .is_none()
        {
            return;
        }
        self.set_away(token, false);
        router.take_subscriptions(session);
        tracing::debug!(session = session.id(), "shared session is now homed here");
    }
}
