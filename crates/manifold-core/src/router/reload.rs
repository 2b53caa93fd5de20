//! A configuration reload, as the router applies it: upstreams added, removed and restarted,
//! the catalog's definitions swapped, and the layers, teams and caches replaced, without
//! ending a session. What may be built ahead (and fail) is built by the caller; what is
//! here cannot fail.
//!
//! Order matters where requests read more than one part: a new upstream's connection joins
//! the pool before the catalog names its index, and a removed upstream's names leave the
//! catalog before its connection is stopped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_catalog::{Catalog, Kind, UpstreamDef};
use manifold_config::{TeamConfig, UpstreamConfig};
use manifold_upstream::{Timing, UpstreamHandle};

use super::{Live, Router};
use crate::cache::Cache;
use crate::layer::Layer;
use crate::policy::Team;

/// Everything a reload changes, built and checked beforehand.
pub struct Reload {
    /// Every upstream's definition by index: one more for each upstream added (at the end),
    /// a retired one in the place of each removed one.
    pub defs: Arc<[UpstreamDef]>,
    /// Every upstream's configuration by index (a removed one's last, without caches).
    pub configs: Vec<UpstreamConfig>,
    /// The shared connections of the upstreams added, in index order after the current ones.
    pub added: Vec<UpstreamHandle>,
    /// Upstreams (by index) whose connection settings changed.
    pub restarted: Vec<usize>,
    /// Upstreams (by index) removed.
    pub removed: Vec<usize>,
    /// OpenAPI upstreams (by index) kept with the same connection settings: their
    /// description is read again.
    pub reread: Vec<usize>,
    pub teams: Vec<TeamConfig>,
    /// `[discovery]`.
    pub discovery: manifold_config::DiscoverySettings,
    pub layers: Vec<Arc<dyn Layer>>,
    pub cache: Option<Arc<Cache>>,
    /// The timeouts upstream connections start with, where their own config sets none.
    pub timing: Timing,
    /// How long a replaced or removed connection may take to finish its calls in flight.
    pub drain: Duration,
}

impl Router {
    /// Applies `reload`. Sessions are kept; hosts hear `list_changed` for the lists that
    /// changed in their view. Removed and replaced connections finish their calls in the
    /// background (up to `reload.drain`) and are stopped.
    pub fn reload(self: &Arc<Self>, reload: Reload) {
        let old = self.live();
        let before = views(
            &old.teams.all().cloned().collect::<Vec<_>>(),
            &self.hub.catalog(),
        );
        for handle in reload.added {
            self.pool.push(handle);
        }
        self.fanout.set_keys(
            reload
                .configs
                .iter()
                .map(|c| Arc::from(c.key.as_str()))
                .collect(),
        );
        self.pool.set_configs(reload.configs.clone());
        let teams = Arc::new(old.teams.reloaded(&reload.teams));
        self.discovery.configure(reload.discovery, &reload.teams);
        let headers_changed = teams_with_new_headers(&before, &teams);
        self.set_live(Live {
            layers: reload.layers.into(),
            teams: Arc::clone(&teams),
            cache: reload.cache.clone(),
        });
        // Hosts hear of what the new definitions change in the catalog from the hub; of
        // what changed in their team's view alone, from here.
        self.hub.set_defs(reload.defs);
        let after = views(
            &teams.all().cloned().collect::<Vec<_>>(),
            &self.hub.catalog(),
        );
        let changed = changed_views(&before, &after);
        if !changed.is_empty() {
            self.fanout.views_changed(&changed);
        }
        let mut leaving: Vec<UpstreamHandle> = Vec::new();
        let upstreams = self.pool.upstreams();
        for &i in &reload.restarted {
            if let (Some(handle), Some(cfg)) = (upstreams.get(i), reload.configs.get(i)) {
                handle.reconfigure(cfg.clone(), reload.timing, reload.drain);
            }
            leaving.extend(self.pool.take_own(i));
        }
        for &i in &reload.reread {
            if let Some(handle) = upstreams.get(i) {
                handle.reread_description();
            }
            // The connections of sessions and teams serve the description they read when
            // they started: they make way for new ones, which read it afresh.
            leaving.extend(self.pool.take_own(i));
        }
        for name in headers_changed {
            leaving.extend(self.pool.take_team(&name));
        }
        for &i in &reload.removed {
            leaving.extend(self.pool.take_own(i));
            leaving.extend(upstreams.get(i).cloned());
        }
        let old_cache = old.cache.clone();
        let (drain, new_cache) = (reload.drain, reload.cache);
        self.runtime.spawn(async move {
            if let Some(old) = old_cache {
                old.retire(new_cache.as_deref()).await;
            }
            futures::future::join_all(leaving.iter().map(|h| finish(h, drain))).await;
        });
    }
}

/// Lets a connection that is no longer used finish its calls in flight (up to `drain`), then
/// stops it.
async fn finish(handle: &UpstreamHandle, drain: Duration) {
    let until = Instant::now() + drain;
    while handle.connection().is_some_and(|c| c.in_flight() > 0) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await;
}

/// What a team saw, to compare before and after a reload.
struct Seen {
    team: Arc<Team>,
    /// The fingerprint of each list in its view (`Kind::ALL` order).
    lists: [u64; manifold_catalog::KINDS],
    config: Arc<TeamConfig>,
}

/// What each of `teams` sees of `catalog`: its view's lists, or the catalog's own for a team
/// that sees everything.
fn views(teams: &[Arc<Team>], catalog: &Catalog) -> Vec<Seen> {
    teams
        .iter()
        .map(|team| {
            let config = Arc::clone(&team.config());
            let lists = if config.restricts() {
                let view = team.view(catalog);
                Kind::ALL.map(|k| view.listing(k).fingerprint())
            } else {
                Kind::ALL.map(|k| catalog.listing(k).fingerprint())
            };
            Seen {
                team: Arc::clone(team),
                lists,
                config,
            }
        })
        .collect()
}

/// The lists that differ, by team name, for the teams seen both before and after.
fn changed_views(before: &[Seen], after: &[Seen]) -> HashMap<Arc<str>, Vec<Kind>> {
    let mut changed = HashMap::new();
    for a in after {
        // A team whose settings stayed sees only what the catalog changed, and the hub
        // tells of that.
        let Some(b) = before
            .iter()
            .find(|b| Arc::ptr_eq(&b.team, &a.team) && !Arc::ptr_eq(&b.config, &a.config))
        else {
            continue;
        };
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .zip(b.lists.iter().zip(&a.lists))
            .filter(|(_, (x, y))| x != y)
            .map(|(k, _)| k)
            .collect();
        if !kinds.is_empty() {
            changed.insert(Arc::clone(&a.team.name), kinds);
        }
    }
    changed
}

/// Teams whose headers for upstreams changed, or that are gone: the connections they had of
/// their own are replaced.
fn teams_with_new_headers(before: &[Seen], teams: &crate::policy::Teams) -> Vec<Arc<str>> {
    before
        .iter()
        .filter(|b| {
            teams
                .get(&b.team.name)
                .is_none_or(|t| t.config().headers != b.config.headers)
        })
        .map(|b| Arc::clone(&b.team.name))
        .collect()
}
