//! The hub: the current merged catalog and what it is built from, plus the sessions that
//! receive broadcast notifications. Upstream actors report state changes here; the hub
//! rebuilds the catalog and swaps it in for lock-free readers.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use manifold_catalog::{Catalog, Kind, UpstreamDef, UpstreamSlice, UpstreamState};
use manifold_config::NameSettings;
use manifold_protocol::write;
use tokio::sync::watch;

use crate::pending::Downstream;

/// Shared by every upstream actor and downstream session.
pub struct Hub {
    names: NameSettings,
    page_size: usize,
    catalog: ArcSwap<Catalog>,
    /// The inputs of the catalog. Locked only while recording a change and rebuilding.
    inputs: Mutex<Inputs>,
    /// How many upstreams have finished their first start attempt (up or failed).
    settled: watch::Sender<usize>,
    /// Sessions that receive broadcasts. Read on every broadcast, written on connect and
    /// disconnect only.
    sessions: RwLock<Vec<Arc<dyn Downstream>>>,
}

struct Inputs {
    states: Vec<UpstreamState>,
    slices: Vec<Option<Arc<UpstreamSlice>>>,
    settled: Vec<bool>,
    generation: u64,
}

impl Hub {
    pub fn new(defs: Arc<[UpstreamDef]>, names: NameSettings, page_size: usize) -> Arc<Self> {
        let n = defs.len();
        let catalog = Catalog::empty(defs, &names, page_size);
        Arc::new(Self {
            names,
            page_size,
            catalog: ArcSwap::from_pointee(catalog),
            inputs: Mutex::new(Inputs {
                states: vec![UpstreamState::Starting; n],
                slices: vec![None; n],
                settled: vec![false; n],
                generation: 0,
            }),
            settled: watch::channel(0).0,
            sessions: RwLock::new(Vec::new()),
        })
    }

    fn inputs(&self) -> MutexGuard<'_, Inputs> {
        self.inputs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current catalog. Cheap: no lock, no copy.
    pub fn catalog(&self) -> arc_swap::Guard<Arc<Catalog>> {
        self.catalog.load()
    }

    /// Records an upstream's new state, and its new slice when `slice` is `Some`. A down
    /// upstream keeps its last slice, so names stay stable while calls fail fast.
    pub fn update(&self, upstream: usize, state: UpstreamState, slice: Option<Arc<UpstreamSlice>>) {
        let (old, new) = {
            let mut inputs = self.inputs();
            inputs.states[upstream] = state;
            if let Some(slice) = slice {
                inputs.slices[upstream] = Some(slice);
            }
            inputs.generation += 1;
            let old = self.catalog.load_full();
            let new = Arc::new(Catalog::build(
                Arc::clone(old.defs()),
                &self.names,
                self.page_size,
                inputs.generation,
                inputs.states.clone(),
                inputs.slices.clone(),
            ));
            self.catalog.store(Arc::clone(&new));
            (old, new)
        };
        for c in new.collisions() {
            if !old.collisions().contains(c) {
                tracing::error!(name = %c.exposed, owners = ?c.owners, "name collision: none of the claimants is exposed; rename one in the config");
            }
        }
        self.announce_changes(&old, &new);
    }

    /// Marks an upstream's first start attempt as finished.
    pub fn settle(&self, upstream: usize) {
        let mut inputs = self.inputs();
        if !inputs.settled[upstream] {
            inputs.settled[upstream] = true;
            let count = inputs.settled.iter().filter(|s| **s).count();
            self.settled.send_replace(count);
        }
    }

    /// Waits until every upstream finished its first start attempt, or `timeout` passes.
    pub async fn wait_settled(&self, timeout: Duration) {
        let total = self.catalog().defs().len();
        let mut rx = self.settled.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|n| *n >= total)).await;
    }

    fn announce_changes(&self, old: &Catalog, new: &Catalog) {
        let mut sent_resources = false;
        for kind in Kind::ALL {
            if old.listing(kind).fingerprint() == new.listing(kind).fingerprint() {
                continue;
            }
            if matches!(kind, Kind::Resources | Kind::ResourceTemplates) {
                if sent_resources {
                    continue;
                }
                sent_resources = true;
            }
            let mut line = Vec::new();
            write::notification(&mut line, kind.list_changed(), None);
            self.broadcast(&line);
        }
    }

    pub fn add_session(&self, session: Arc<dyn Downstream>) {
        self.sessions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(session);
    }

    pub fn remove_session(&self, session_id: u64) {
        self.sessions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|s| s.session_id() != session_id);
    }

    /// Sends a notification line to every session.
    pub fn broadcast(&self, line: &[u8]) {
        let sessions = self
            .sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for s in sessions {
            s.send_notification(line);
        }
    }
}
