//! The limit layer: every tool call counted against the limits that apply to it, in memory
//! or in a store shared by replicas (which logs its own outages).

use std::sync::Arc;

use manifold_config::{LimitBackend, LimitsConfig, TeamConfig};
use manifold_policy::{LimitDef, Limits, Refusal, SharedCounts, WindowUse};

use crate::context::Context;
use crate::error::RouteError;
use crate::layer::{Check, Layer};
use crate::replicas::Stores;
use crate::target::Target;

/// Counts every tool call against the limits that apply to it (see
/// [`manifold_policy::Limits::applicable`]); a refused call never reaches the upstream.
pub struct LimitLayer {
    limits: Limits,
    store: Store,
    /// As configured, for a reload to compare with.
    backend: LimitBackend,
}

enum Store {
    /// Counted in this process.
    Memory,
    /// Counted in a store shared by every replica.
    Redis(Arc<SharedStore>),
}

/// The shared store and what to do while it cannot be reached.
struct SharedStore {
    counts: Arc<dyn SharedCounts>,
    fail_open: bool,
}

impl LimitLayer {
    /// `None` when no limit is configured: nothing is added to the path.
    pub fn new(
        config: &LimitsConfig,
        teams: &[TeamConfig],
        stores: &dyn Stores,
    ) -> Result<Option<Arc<Self>>, String> {
        Self::reloaded(None, config, teams, stores)
    }

    /// The layer of a reloaded configuration. In memory, a limit that did not change keeps
    /// what it counted (see [`Limits::carry_over`]); in Redis, counts live under the limits'
    /// ids and stay anyway. The shared store is kept when the backend did not change.
    pub fn reloaded(
        previous: Option<&LimitLayer>,
        config: &LimitsConfig,
        teams: &[TeamConfig],
        stores: &dyn Stores,
    ) -> Result<Option<Arc<Self>>, String> {
        let Some(mut limits) = Limits::new(config, teams) else {
            return Ok(None);
        };
        let store = match (&config.backend, previous.map(|p| (&p.store, &p.backend))) {
            (LimitBackend::Memory, Some((Store::Memory, _))) => {
                if let Some(p) = previous {
                    limits.carry_over(&p.limits);
                }
                Store::Memory
            }
            (LimitBackend::Memory, _) => Store::Memory,
            (backend, Some((Store::Redis(shared), old)))
                if backend == old && shared.fail_open == config.fail_open =>
            {
                Store::Redis(Arc::clone(shared))
            }
            (LimitBackend::Redis(redis), _) => Store::Redis(Arc::new(SharedStore {
                counts: stores.limits(redis, config.fail_open)?,
                fail_open: config.fail_open,
            })),
        };
        Ok(Some(Arc::new(Self {
            limits,
            store,
            backend: config.backend.clone(),
        })))
    }

    /// How much of each quota's current window is used: `team`'s limits, or (`None`) the
    /// per-tool limits that count every caller together. Read without counting anything;
    /// in Redis, what every replica counted.
    pub async fn usage(&self, team: Option<&str>) -> Result<Vec<WindowUse>, String> {
        let counters = match team {
            Some(team) => self.limits.of_team(team),
            None => self.limits.of_tools(),
        };
        match &self.store {
            Store::Memory => Ok(counters.iter().flat_map(|c| c.usage()).collect()),
            Store::Redis(shared) => {
                let defs: Vec<Arc<LimitDef>> =
                    counters.iter().map(|c| Arc::clone(&c.def)).collect();
                shared.counts.usage(&defs).await.map_err(|e| e.to_string())
            }
        }
    }

    fn refuse(team: &str, tool: &str, refusal: Refusal) -> RouteError {
        tracing::info!(
            team,
            tool,
            limit = &*refusal.limit,
            kind = refusal.kind.label(),
            retry_after_ms = refusal.retry_after.as_millis() as u64,
            "tool call refused by a limit"
        );
        RouteError::Limited {
            tool: tool.to_owned(),
            refusal,
        }
    }
}

impl Layer for LimitLayer {
    fn limit_layer(self: Arc<Self>) -> Option<Arc<LimitLayer>> {
        Some(self)
    }

    fn check(&self, ctx: &Context, target: &Target) -> Check {
        if target.method != "tools/call" {
            return Check::Pass;
        }
        let (Some(tool), Some(route)) = (&target.exposed, ctx.route()) else {
            return Check::Pass;
        };
        let team = ctx.caller.team.as_ref().map(|t| &*t.name);
        let counters = self.limits.applicable(team, &route.upstream, tool);
        if counters.is_empty() {
            return Check::Pass;
        }
        match &self.store {
            Store::Memory => match manifold_policy::memory::check(&counters) {
                None => Check::Pass,
                Some(refusal) => Check::Refuse(Self::refuse(ctx.principal(), tool, refusal)),
            },
            Store::Redis(shared) => {
                let defs: Vec<Arc<LimitDef>> =
                    counters.iter().map(|c| Arc::clone(&c.def)).collect();
                let (shared, team, tool) = (
                    Arc::clone(shared),
                    Arc::clone(ctx.principal()),
                    Arc::clone(tool),
                );
                Check::Wait(Box::pin(async move {
                    match shared.counts.check(&defs).await {
                        Ok(None) => Ok(()),
                        Ok(Some(refusal)) => Err(Self::refuse(&team, &tool, refusal)),
                        Err(e) => {
                            tracing::debug!("a limit could not be checked: {e}");
                            manifold_telemetry::metrics().limit_store_error(shared.fail_open);
                            if shared.fail_open {
                                Ok(())
                            } else {
                                Err(RouteError::LimitStore)
                            }
                        }
                    }
                }))
            }
        }
    }
}
