//! Teams: what each may see of the catalog (a [`View`], with list pages serialized once per
//! view), by name.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use manifold_catalog::{Catalog, Item, Kind, Listing};
use manifold_config::{TeamConfig, Visibility};

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
