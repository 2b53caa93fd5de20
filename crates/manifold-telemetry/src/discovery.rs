//! The counters of tool discovery (`[discovery] mode = "search"`), by team: searches, tools
//! returned, tools added to and evicted from sessions' lists, and the bytes of `tools/list`
//! served beside what the team's whole view would have been (the saving; a token is about four
//! bytes of JSON).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::exposition::Exposition;
use crate::names::{self, label};

/// One team's counters (see [`Discoveries::team`]).
#[derive(Debug, Default)]
pub struct DiscoveryCounters {
    pub searches: AtomicU64,
    pub results: AtomicU64,
    pub added: AtomicU64,
    pub evicted: AtomicU64,
    /// Bytes of `tools/list` answers served in search mode.
    pub listed_bytes: AtomicU64,
    /// Bytes the same answers would have had listing the whole view.
    pub full_bytes: AtomicU64,
}

impl DiscoveryCounters {
    pub fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Every team's counters; a team's are made on its first search or list.
#[derive(Debug, Default)]
pub struct Discoveries {
    /// By team label. Locked to find or make a team's, and when scraped.
    teams: Mutex<BTreeMap<Arc<str>, Arc<DiscoveryCounters>>>,
}

impl Discoveries {
    pub fn team(&self, team: &Arc<str>) -> Arc<DiscoveryCounters> {
        let mut teams = self
            .teams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(teams.entry(Arc::clone(team)).or_default())
    }

    pub(crate) fn render(&self, e: &mut Exposition) {
        let teams: Vec<(Arc<str>, Arc<DiscoveryCounters>)> = self
            .teams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, c)| (Arc::clone(k), Arc::clone(c)))
            .collect();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        type Field = fn(&DiscoveryCounters) -> &AtomicU64;
        let fields: [(&names::Metric, Field); 4] = [
            (&names::DISCOVERY_SEARCHES, |c| &c.searches),
            (&names::DISCOVERY_RESULTS, |c| &c.results),
            (&names::DISCOVERY_ADDED, |c| &c.added),
            (&names::DISCOVERY_EVICTED, |c| &c.evicted),
        ];
        for (metric, field) in fields {
            e.metric(metric);
            for (team, c) in &teams {
                e.sample(metric, &[(label::TEAM, team)], load(field(c)));
            }
        }
        e.metric(&names::DISCOVERY_LIST_BYTES);
        for (team, c) in &teams {
            for (listing, n) in [("served", &c.listed_bytes), ("full", &c.full_bytes)] {
                let labels = [(label::TEAM, &**team), (label::LISTING, listing)];
                e.sample(&names::DISCOVERY_LIST_BYTES, &labels, load(n));
            }
        }
    }
}
