//! Teams: what each may see of the catalog (a [`View`], with list pages serialized once per
//! view), by name.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption, Guard};
use manifold_catalog::{Catalog, Item, Kind, Listing};
use manifold_config::{TeamConfig, Visibility};

/// A configured team. Sessions keep the team they were created for; a reload that changes
/// the team's settings changes them in place, so that its sessions follow.
pub struct Team {
    pub name: Arc<str>,
    /// Its settings, swapped whole by a reload.
    config: ArcSwap<TeamConfig>,
    /// The team's view of the latest catalog it was asked about (only for teams whose view
    /// hides something; the others see the catalog itself).
    view: ArcSwapOption<View>,
}

impl Team {
    pub fn new(config: TeamConfig) -> Arc<Self> {
        Arc::new(Self {
            name: config.name.as_str().into(),
            config: ArcSwap::from_pointee(config),
            view: ArcSwapOption::empty(),
        })
    }

    /// Its current settings. Cheap: no lock, no copy.
    pub fn config(&self) -> Guard<Arc<TeamConfig>> {
        self.config.load()
    }

    /// Takes the settings of a reloaded configuration; its next view is built from them.
    pub fn reconfigure(&self, config: TeamConfig) {
        self.config.store(Arc::new(config));
    }

    /// Whether the team may see the item of `kind` exposed as `exposed` by upstream `key`.
    pub fn sees(&self, kind: Kind, key: &str, exposed: &str) -> bool {
        let c = self.config();
        c.admits_upstream(key) && visibility(&c, kind).admits(exposed)
    }

    /// Whether the team's globs over exposed names (or URIs) of `kind` admit `exposed`.
    pub fn admits(&self, kind: Kind, exposed: &str) -> bool {
        visibility(&self.config(), kind).admits(exposed)
    }

    /// The team's view of `catalog`: built once per catalog generation and settings.
    pub fn view(&self, catalog: &Catalog) -> Arc<View> {
        if let Some(view) = self.view.load_full() {
            let config = self.config.load();
            if view.generation == catalog.generation() && Arc::ptr_eq(&view.config, &config) {
                return view;
            }
        }
        let view = Arc::new(View::of(self, catalog));
        self.view.store(Some(Arc::clone(&view)));
        view
    }

    /// Which of `kinds` differ between the team's views of catalogs `before` and `after`.
    /// The view of `before` is the one kept when it is at hand, else built (a replica where
    /// nobody of the team listed anything yet has none, and must not say "all changed").
    pub fn changed(&self, before: &Catalog, after: &Catalog, kinds: &[Kind]) -> Vec<Kind> {
        let kept = self.view.load_full().filter(|v| {
            v.generation == before.generation() && Arc::ptr_eq(&v.config, &self.config.load())
        });
        let old = kept.unwrap_or_else(|| Arc::new(View::of(self, before)));
        let new = self.view(after);
        kinds
            .iter()
            .copied()
            .filter(|&k| old.listing(k).fingerprint() != new.listing(k).fingerprint())
            .collect()
    }
}

/// The globs of `config` over exposed names (or URIs) of `kind`.
fn visibility(config: &TeamConfig, kind: Kind) -> &Visibility {
    match kind {
        Kind::Tools => &config.tools,
        Kind::Prompts => &config.prompts,
        // A skill is seen like a resource: by its exposed URI.
        Kind::Resources | Kind::ResourceTemplates | Kind::Skills => &config.resources,
    }
}

/// What one team sees of one catalog generation.
pub struct View {
    generation: u64,
    /// The team's settings it was built from.
    config: Arc<TeamConfig>,
    listings: [Listing; manifold_catalog::KINDS],
    /// Which upstreams (by index) the team may know of: named in `initialize`, counted in
    /// its capabilities.
    upstreams: Vec<bool>,
}

impl View {
    fn of(team: &Team, catalog: &Catalog) -> Self {
        let defs = catalog.defs();
        let config = team.config.load_full();
        let c = &*config;
        let keep = |kind: Kind| {
            move |item: &Item| {
                defs.get(item.upstream).is_some_and(|d| {
                    c.admits_upstream(&d.key) && visibility(c, kind).admits(&item.exposed)
                })
            }
        };
        let listings = Kind::ALL.map(|kind| catalog.listing(kind).filtered(keep(kind)));
        // An upstream the team may use is known to it when the team sees everything it
        // serves, or when at least one of its items is in the view: the existence of an
        // upstream whose every item is hidden is not told either.
        let unfiltered = c.tools.is_empty() && c.prompts.is_empty() && c.resources.is_empty();
        let mut upstreams: Vec<bool> = defs
            .iter()
            .map(|d| unfiltered && !d.retired && c.admits_upstream(&d.key))
            .collect();
        for item in listings.iter().flat_map(Listing::items) {
            if let Some(known) = upstreams.get_mut(item.upstream) {
                *known = true;
            }
        }
        Self {
            generation: catalog.generation(),
            config: Arc::clone(&config),
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

    /// Every team.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Team>> {
        self.by_name.values()
    }

    /// The teams of a reloaded configuration. A team that stays keeps its `Team`, given the
    /// new settings, so that its sessions follow them; a removed team's sessions keep the
    /// settings they had (its credentials no longer open anything).
    pub fn reloaded(&self, configs: &[TeamConfig]) -> Teams {
        let by_name = configs
            .iter()
            .map(|c| {
                let team = match self.by_name.get(c.name.as_str()) {
                    Some(team) => {
                        if **team.config() != *c {
                            team.reconfigure(c.clone());
                        }
                        Arc::clone(team)
                    }
                    None => Team::new(c.clone()),
                };
                (c.name.as_str().into(), team)
            })
            .collect();
        Teams { by_name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two upstreams, `fx` and `other`, with the tools named; built as generation `generation`.
    fn catalog(generation: u64, fx: &[&str], other: &[&str]) -> Catalog {
        let tools = |names: &[&str]| {
            names
                .iter()
                .map(|n| serde_json::json!({"name": n, "inputSchema": {"type": "object"}}))
                .collect()
        };
        crate::testing::catalog(generation, &[("fx", tools(fx)), ("other", tools(other))])
    }

    fn team_of(upstreams: &[&str]) -> Arc<Team> {
        Team::new(TeamConfig {
            name: "b".to_owned(),
            upstreams: upstreams.iter().map(|u| (*u).to_owned()).collect(),
            ..TeamConfig::default()
        })
    }

    #[test]
    fn a_change_outside_the_view_is_none_even_before_any_view_was_built() {
        let before = catalog(1, &["echo"], &["add"]);
        let after = catalog(2, &["echo", "seen_by_a"], &["add"]);
        // Nobody of the team listed anything here yet: no view is kept.
        let team = team_of(&["other"]);
        assert!(team.changed(&before, &after, &[Kind::Tools]).is_empty());
        // With the view of `before` kept, the same.
        let team = team_of(&["other"]);
        team.view(&before);
        assert!(team.changed(&before, &after, &[Kind::Tools]).is_empty());
        // A change inside the view is told, kept view or not.
        let grown = catalog(3, &["echo", "seen_by_a"], &["add", "sub"]);
        assert_eq!(team.changed(&after, &grown, &[Kind::Tools]), [Kind::Tools]);
        let fresh = team_of(&["other"]);
        assert_eq!(fresh.changed(&after, &grown, &[Kind::Tools]), [Kind::Tools]);
    }
}
