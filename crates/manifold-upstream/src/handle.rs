//! `UpstreamHandle`: what the rest of Manifold holds to reach an upstream. It hides the actor
//! framework: callers get the live connection for the hot path and async methods for the rest.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use arc_swap::ArcSwapOption;
use manifold_config::UpstreamConfig;

use crate::actor::{Shutdown, UpstreamActor};
use crate::connection::{Connection, Timing};
use crate::hub::Hub;

/// A cheap, cloneable handle to one upstream.
#[derive(Clone)]
pub struct UpstreamHandle {
    index: usize,
    key: Arc<str>,
    addr: Addr<UpstreamActor>,
    current: Arc<ArcSwapOption<Connection>>,
}

impl UpstreamHandle {
    /// Starts the upstream's actor, which spawns and supervises the process. Must be called
    /// from within a running actix system.
    /// `defaults` apply where the upstream's config sets no request timeout of its own.
    pub fn start(
        index: usize,
        cfg: UpstreamConfig,
        defaults: Timing,
        grace: Duration,
        hub: Arc<Hub>,
    ) -> Self {
        let current = Arc::new(ArcSwapOption::empty());
        let key: Arc<str> = cfg.key.as_str().into();
        let request = cfg.request_timeout.unwrap_or(defaults.request);
        let timing = Timing {
            request,
            max: defaults.max.max(request),
        };
        let actor = UpstreamActor::new(index, cfg, timing, grace, hub, Arc::clone(&current));
        Self {
            index,
            key,
            addr: actor.start(),
            current,
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The live connection, or `None` while the upstream is down or restarting.
    pub fn connection(&self) -> Option<Arc<Connection>> {
        self.current.load_full()
    }

    /// Stops the upstream; returns once its processes are gone (or the grace ran out).
    pub async fn shutdown(&self) {
        let _ = self.addr.send(Shutdown).await;
    }
}
