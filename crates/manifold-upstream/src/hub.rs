//! The hub: the current merged catalog and what it is built from. Upstream actors report
//! state changes and notifications here; the hub rebuilds the catalog, swaps it in for
//! lock-free readers, and tells its [`Listener`] (the server, which knows the sessions) what
//! hosts should hear about.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use manifold_catalog::{rewrite, Catalog, Drift, Kind, UpstreamDef, UpstreamSlice, UpstreamState};
use manifold_config::NameSettings;
use tokio::sync::watch;

/// Who hears what hosts should be told. The server implements it and decides which sessions
/// each message goes to; this crate knows no sessions.
pub trait Listener: Send + Sync {
    /// The merged list of each of `kinds` changed from `before` to `after` (resources and
    /// templates share one notification, so both may be named together).
    fn lists_changed(&self, before: &Catalog, after: &Catalog, kinds: &[Kind]);
    /// A notification from upstream `upstream` for hosts (for `session` alone when it came
    /// from that session's own connection), its URIs already exposed.
    fn upstream_notification(
        &self,
        upstream: usize,
        session: Option<u64>,
        method: &str,
        params: Option<&str>,
    );
    /// Upstream `upstream` (re)connected and finished its handshake: what hosts asked of it
    /// before (log levels, subscriptions) must be asked again.
    fn upstream_ready(&self, upstream: usize);
    /// Upstream `upstream` has a new catalog (it (re)started, or its lists were fetched
    /// again after a `list_changed`), or it stopped serving: what was learnt from it before
    /// may no longer hold.
    fn upstream_changed(&self, _upstream: usize) {}
}

/// Shared by every upstream actor and the server.
pub struct Hub {
    names: NameSettings,
    page_size: usize,
    catalog: ArcSwap<Catalog>,
    /// The inputs of the catalog. Locked only while recording a change and rebuilding.
    inputs: Mutex<Inputs>,
    /// How many upstreams have finished their first start attempt (up or failed).
    settled: watch::Sender<usize>,
    /// Set once, by the server; until then (start-up, before any host) nothing is heard.
    listener: OnceLock<Weak<dyn Listener>>,
    /// Set once, by the server, when some upstream has `auth`.
    credentials: OnceLock<Arc<dyn crate::Credentials>>,
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
            listener: OnceLock::new(),
            credentials: OnceLock::new(),
        })
    }

    /// Who hears what hosts should be told (set once; later calls are ignored).
    pub fn set_listener(&self, listener: Weak<dyn Listener>) {
        let _ = self.listener.set(listener);
    }

    /// How exposed names are made (prefix separator, length).
    pub fn names(&self) -> &NameSettings {
        &self.names
    }

    /// Where the shared connections of upstreams with `auth` get their tokens.
    pub fn set_credentials(&self, credentials: Arc<dyn crate::Credentials>) {
        let _ = self.credentials.set(credentials);
    }

    /// The shared connection's credential for `upstream`, if it sends one.
    pub(crate) fn shared_credential(&self, upstream: &str) -> Option<Arc<dyn crate::Credential>> {
        self.credentials.get()?.shared(upstream)
    }

    fn listener(&self) -> Option<Arc<dyn Listener>> {
        self.listener.get().and_then(Weak::upgrade)
    }

    /// Upstream `upstream` is ready after a (re)start.
    pub fn ready(&self, upstream: usize) {
        if let Some(l) = self.listener() {
            l.upstream_ready(upstream);
        }
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
        let changed = slice.is_some() || state != UpstreamState::Up;
        let (old, new) = {
            let mut inputs = self.inputs();
            // An upstream is given its place before it starts (see `set_defs`).
            if upstream >= inputs.states.len() {
                return;
            }
            inputs.states[upstream] = state;
            if let Some(slice) = slice {
                inputs.slices[upstream] = Some(slice);
            }
            let defs = Arc::clone(self.catalog.load().defs());
            self.rebuild(&mut inputs, defs)
        };
        self.report(&old, &new);
        if let (true, Some(l)) = (changed, self.listener()) {
            l.upstream_changed(upstream);
        }
        self.announce_changes(&old, &new);
    }

    /// Swaps in the upstreams' definitions of a reloaded configuration: one more for each
    /// upstream added, a retired one in the place of each removed one. Indexes never move, so
    /// `defs` holds at least as many as the catalog has. Hosts hear of the lists that changed.
    pub fn set_defs(&self, defs: Arc<[UpstreamDef]>) {
        let (old, new) = {
            let mut inputs = self.inputs();
            let n = defs.len();
            inputs.states.resize(n, UpstreamState::Starting);
            inputs.slices.resize(n, None);
            inputs.settled.resize(n, false);
            for (i, def) in defs.iter().enumerate() {
                // A removed upstream is not waited for: it will never start.
                if def.retired {
                    inputs.settled[i] = true;
                }
            }
            let count = inputs.settled.iter().filter(|s| **s).count();
            self.settled.send_replace(count);
            self.rebuild(&mut inputs, defs)
        };
        self.report(&old, &new);
        if let Some(l) = self.listener() {
            let now_retired = new
                .defs()
                .iter()
                .enumerate()
                .filter(|(i, d)| d.retired && old.defs().get(*i).is_some_and(|o| !o.retired));
            for (i, _) in now_retired {
                l.upstream_changed(i);
            }
        }
        self.announce_changes(&old, &new);
    }

    /// Builds the catalog of `inputs` over `defs` and swaps it in; returns the old and new.
    fn rebuild(
        &self,
        inputs: &mut Inputs,
        defs: Arc<[UpstreamDef]>,
    ) -> (Arc<Catalog>, Arc<Catalog>) {
        inputs.generation += 1;
        let old = self.catalog.load_full();
        let new = Arc::new(Catalog::build(
            defs,
            &self.names,
            self.page_size,
            inputs.generation,
            inputs.states.clone(),
            inputs.slices.clone(),
        ));
        self.catalog.store(Arc::clone(&new));
        (old, new)
    }

    /// Logs the collisions and pinning drift a build found that the one before did not.
    fn report(&self, old: &Catalog, new: &Catalog) {
        for c in new.collisions() {
            if !old.collisions().contains(c) {
                tracing::error!(name = %c.exposed, owners = ?c.owners, "name collision: none of the claimants is exposed; rename one in the config");
            }
        }
        // Every catalog build checks pins (at start, on restart, after list_changed); a
        // change is logged when it first appears, not at every build that still sees it.
        for d in new.drift() {
            if !old.drift().iter().any(|o| o.same_change(d)) {
                log_drift(new, d);
            }
        }
    }

    /// Swaps in an upstream's new slice that offers the same lists as the one it replaces (a
    /// refresh that found nothing changed, with only when it was fetched new): the catalog is
    /// rebuilt, but nobody is told of a change.
    pub(crate) fn replace_slice(&self, upstream: usize, slice: Arc<UpstreamSlice>) {
        let mut inputs = self.inputs();
        let Some(place) = inputs.slices.get_mut(upstream) else {
            return;
        };
        *place = Some(slice);
        let defs = Arc::clone(self.catalog.load().defs());
        self.rebuild(&mut inputs, defs);
    }

    /// Marks an upstream's first start attempt as finished.
    pub fn settle(&self, upstream: usize) {
        let mut inputs = self.inputs();
        if inputs.settled.get(upstream) == Some(&false) {
            inputs.settled[upstream] = true;
            let count = inputs.settled.iter().filter(|s| **s).count();
            self.settled.send_replace(count);
        }
    }

    /// Whether every upstream finished its first start attempt.
    pub fn is_settled(&self) -> bool {
        *self.settled.borrow() >= self.catalog().defs().len()
    }

    /// Waits until every upstream finished its first start attempt, or `timeout` passes.
    pub async fn wait_settled(&self, timeout: Duration) {
        let total = self.catalog().defs().len();
        let mut rx = self.settled.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|n| *n >= total)).await;
    }

    fn announce_changes(&self, old: &Catalog, new: &Catalog) {
        let changed: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|&k| old.listing(k).fingerprint() != new.listing(k).fingerprint())
            .collect();
        if let (false, Some(l)) = (changed.is_empty(), self.listener()) {
            l.lists_changed(old, new, &changed);
        }
    }

    /// Passes a notification from upstream `upstream` on to hosts, with the URIs it names
    /// exposed.
    pub fn relay(&self, upstream: usize, session: Option<u64>, method: &str, params: Option<&str>) {
        let member = match method {
            "notifications/resources/updated" => Some("uri"),
            "notifications/tasks/status" => Some("taskId"),
            _ => None,
        };
        let exposed = member.zip(params).and_then(|(member, p)| {
            let catalog = self.catalog();
            rewrite::expose_member(p, member, &catalog.defs()[upstream].uri_prefix)
        });
        if let Some(l) = self.listener() {
            l.upstream_notification(upstream, session, method, exposed.as_deref().or(params));
        }
    }
}

/// One log line for a tool or prompt that does not match its pin, with what changed (a new
/// one's whole definition is left to `manifold check`).
fn log_drift(catalog: &Catalog, d: &Drift) {
    let upstream = catalog
        .defs()
        .get(d.upstream)
        .map_or("", |def| def.key.as_str());
    let what = if d.kind == Kind::Tools {
        "tool"
    } else {
        "prompt"
    };
    let item = format!(
        "{what} {:?} of upstream {upstream:?} ({})",
        d.original, d.exposed
    );
    let reason = d.reason();
    match (d.held, d.pinned.is_some()) {
        (true, true) => tracing::warn!(
            "pinning: {item} is held: {reason}; review it and run manifold pin\n{}",
            d.diff().trim_end()
        ),
        (true, false) => {
            tracing::warn!("pinning: {item} is held: {reason}; review it and run manifold pin")
        }
        (false, true) => tracing::warn!(
            "pinning: {item} is served although {reason} (pinning.on_change = \"warn\")\n{}",
            d.diff().trim_end()
        ),
        (false, false) => {
            tracing::info!("pinning: {item} is served unpinned (pinning.on_new = \"allow\")")
        }
    }
}
