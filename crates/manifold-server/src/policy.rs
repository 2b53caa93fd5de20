//! Teams as the router sees them: who a request runs as ([`Caller`]), what its team may see
//! (a [`View`] of the catalog, with list pages serialized once per view), and the limits its
//! tool calls are counted against ([`LimitLayer`]).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use manifold_catalog::{Catalog, Item, Kind, Listing};
use std::sync::atomic::{AtomicBool, Ordering};

use manifold_config::{LimitBackend, LimitsConfig, TeamConfig, Visibility, ANONYMOUS};
use manifold_policy::redis_backend::{RedisError, RedisLimiter};
use manifold_policy::{LimitDef, Limits, Refusal};

use crate::context::Context;
use crate::error::RouteError;
use crate::layer::{Check, Layer};
use crate::router::Target;

/// A configured team.
pub struct Team {
    pub name: Arc<str>,
    pub config: TeamConfig,
    /// The team's view of the latest catalog it was asked about (only for teams whose view
    /// hides something; the others see the catalog itself).
    view: ArcSwapOption<View>,
}

impl Team {
    pub fn new(config: TeamConfig) -> Arc<Self> {
        Arc::new(Self {
            name: config.name.as_str().into(),
            config,
            view: ArcSwapOption::empty(),
        })
    }

    /// Whether the team may see the item of `kind` exposed as `exposed` by upstream `key`.
    pub fn sees(&self, kind: Kind, key: &str, exposed: &str) -> bool {
        self.config.admits_upstream(key) && self.visibility(kind).admits(exposed)
    }

    /// The globs over exposed names (or URIs) of `kind`.
    pub fn visibility(&self, kind: Kind) -> &Visibility {
        let c = &self.config;
        match kind {
            Kind::Tools => &c.tools,
            Kind::Prompts => &c.prompts,
            Kind::Resources | Kind::ResourceTemplates => &c.resources,
        }
    }

    /// The team's view of `catalog`: built once per catalog generation.
    pub fn view(&self, catalog: &Catalog) -> Arc<View> {
        if let Some(view) = self.view.load_full() {
            if view.generation == catalog.generation() {
                return view;
            }
        }
        let view = Arc::new(View::of(self, catalog));
        self.view.store(Some(Arc::clone(&view)));
        view
    }

    /// Builds the view of `catalog` and says which of `kinds` differ from the view the team
    /// had before (all of them if it had none).
    pub fn changed(&self, catalog: &Catalog, kinds: &[Kind]) -> Vec<Kind> {
        let old = self.view.load_full();
        let new = self.view(catalog);
        kinds
            .iter()
            .copied()
            .filter(|&k| {
                old.as_ref()
                    .is_none_or(|o| o.listing(k).fingerprint() != new.listing(k).fingerprint())
            })
            .collect()
    }
}

/// What one team sees of one catalog generation.
pub struct View {
    generation: u64,
    listings: [Listing; 4],
    /// Which upstreams (by index) the team may know of: named in `initialize`, counted in
    /// its capabilities.
    upstreams: Vec<bool>,
}

impl View {
    fn of(team: &Team, catalog: &Catalog) -> Self {
        let defs = catalog.defs();
        let keep = |kind: Kind| {
            move |item: &Item| {
                defs.get(item.upstream)
                    .is_some_and(|d| team.sees(kind, &d.key, &item.exposed))
            }
        };
        let listings = Kind::ALL.map(|kind| catalog.listing(kind).filtered(keep(kind)));
        // An upstream the team may use is known to it when the team sees everything it
        // serves, or when at least one of its items is in the view: the existence of an
        // upstream whose every item is hidden is not told either.
        let c = &team.config;
        let unfiltered = c.tools.is_empty() && c.prompts.is_empty() && c.resources.is_empty();
        let mut upstreams: Vec<bool> = defs
            .iter()
            .map(|d| unfiltered && c.admits_upstream(&d.key))
            .collect();
        for item in listings.iter().flat_map(Listing::items) {
            if let Some(known) = upstreams.get_mut(item.upstream) {
                *known = true;
            }
        }
        Self {
            generation: catalog.generation(),
            listings,
            upstreams,
        }
    }

    pub fn listing(&self, kind: Kind) -> &Listing {
        let index = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        &self.listings[index]
    }

    /// Whether the team may know that upstream `index` exists.
    pub fn knows_upstream(&self, index: usize) -> bool {
        self.upstreams.get(index).copied().unwrap_or(false)
    }
}

/// Who a request runs as.
pub struct Caller {
    /// `None`: no team (anonymous), which sees everything and is counted only against the
    /// global per-tool limits.
    pub team: Option<Arc<Team>>,
    /// Who exactly (an API key's label, a JWT's issuer and subject): a session answers only
    /// to the caller that created it.
    pub id: Arc<str>,
}

impl Caller {
    /// The caller of every request no team was given for (one, shared).
    pub fn anonymous() -> Arc<Self> {
        static ANON: std::sync::OnceLock<Arc<Caller>> = std::sync::OnceLock::new();
        Arc::clone(ANON.get_or_init(|| {
            Arc::new(Self {
                team: None,
                id: Arc::clone(anonymous_label()),
            })
        }))
    }

    pub fn of_team(team: Arc<Team>, id: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            team: Some(team),
            id,
        })
    }

    /// The team's name, or "anonymous": the `team` of metrics, spans and logs.
    pub fn label(&self) -> &Arc<str> {
        match &self.team {
            Some(team) => &team.name,
            None => anonymous_label(),
        }
    }

    /// Whether `other` is the same caller: the same credentials' owner running as the same
    /// team (a token of the same subject for another team is someone else's session).
    pub fn same_as(&self, other: &Caller) -> bool {
        self.id == other.id && self.label() == other.label()
    }

    /// The team, if its view hides anything.
    pub fn restricted(&self) -> Option<&Arc<Team>> {
        self.team.as_ref().filter(|t| t.config.restricts())
    }
}

/// "anonymous", shared rather than allocated per request.
fn anonymous_label() -> &'static Arc<str> {
    static LABEL: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    LABEL.get_or_init(|| ANONYMOUS.into())
}

/// The configured teams, by name.
#[derive(Default)]
pub struct Teams {
    by_name: HashMap<Box<str>, Arc<Team>>,
}

impl Teams {
    pub fn new(configs: &[TeamConfig]) -> Self {
        Self {
            by_name: configs
                .iter()
                .map(|c| (c.name.as_str().into(), Team::new(c.clone())))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Team>> {
        self.by_name.get(name)
    }
}

/// Counts every tool call against the limits that apply to it (see
/// [`manifold_policy::Limits::applicable`]); a refused call never reaches the upstream.
pub struct LimitLayer {
    limits: Limits,
    store: Store,
}

enum Store {
    /// Counted in this process.
    Memory,
    /// Counted in Redis, shared by every replica.
    Redis(Arc<Shared>),
}

/// The Redis store and what to do while it cannot be reached.
struct Shared {
    redis: RedisLimiter,
    fail_open: bool,
    /// Whether the store is in an episode of being unreachable (logged once per episode).
    down: AtomicBool,
}

impl Shared {
    fn unreachable(&self, e: &RedisError) {
        manifold_telemetry::metrics().limit_store_error(self.fail_open);
        if !self.down.swap(true, Ordering::Relaxed) {
            let then = if self.fail_open {
                "calls are allowed without counting (limits.fail_open)"
            } else {
                "calls are refused until it is back (limits.fail_open = false)"
            };
            tracing::error!("the limit store is unreachable: {e}; {then}");
        }
    }

    fn reachable(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::warn!("the limit store is reachable again; limits are counted");
        }
    }
}

impl LimitLayer {
    /// `None` when no limit is configured: nothing is added to the path.
    pub fn new(config: &LimitsConfig, teams: &[TeamConfig]) -> Result<Option<Arc<Self>>, String> {
        let Some(limits) = Limits::new(config, teams) else {
            return Ok(None);
        };
        let store = match &config.backend {
            LimitBackend::Memory => Store::Memory,
            LimitBackend::Redis(redis) => Store::Redis(Arc::new(Shared {
                redis: RedisLimiter::new(redis).map_err(|e| format!("limits.redis_url: {e}"))?,
                fail_open: config.fail_open,
                down: AtomicBool::new(false),
            })),
        };
        Ok(Some(Arc::new(Self { limits, store })))
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
                    match shared.redis.check(&defs).await {
                        Ok(None) => {
                            shared.reachable();
                            Ok(())
                        }
                        Ok(Some(refusal)) => {
                            shared.reachable();
                            Err(Self::refuse(&team, &tool, refusal))
                        }
                        Err(e) => {
                            shared.unreachable(&e);
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
