//! What `/metrics` answers: everything recorded (see `manifold_telemetry::metrics`), and what
//! is read at scrape time instead of being recorded on the request path: which upstreams are
//! up, their circuit breakers, requests in flight, catalog sizes, pinning drift and open
//! sessions.

use manifold_catalog::{Catalog, Kind, UpstreamState};
use manifold_telemetry::exposition::Exposition;
use manifold_telemetry::names::{self, label};
use manifold_telemetry::{metrics, HostTransport};

use crate::router::Router;

/// The exposition text of a scrape.
pub fn render(router: &Router) -> String {
    let mut e = Exposition::new();
    metrics().render(&mut e);
    let catalog = router.hub().catalog();
    let defs = catalog.defs();
    // A removed upstream keeps its place in the catalog, not its series.
    let live = || defs.iter().enumerate().filter(|(_, d)| !d.retired);
    e.metric(&names::UPSTREAM_UP);
    for (i, def) in live() {
        let up = u64::from(*catalog.state(i) == UpstreamState::Up);
        e.sample(&names::UPSTREAM_UP, &[(label::UPSTREAM, &def.key)], up);
    }
    e.metric(&names::UPSTREAM_BREAKER_STATE);
    let handles = router.upstreams();
    for (i, def) in live() {
        let Some(handle) = handles.get(i) else {
            continue;
        };
        let state = handle.breaker().state as u64;
        e.sample(
            &names::UPSTREAM_BREAKER_STATE,
            &[(label::UPSTREAM, &def.key)],
            state,
        );
    }
    e.metric(&names::UPSTREAM_INFLIGHT);
    for (i, def) in live() {
        let n = router.in_flight(i) as u64;
        e.sample(&names::UPSTREAM_INFLIGHT, &[(label::UPSTREAM, &def.key)], n);
    }
    e.metric(&names::CATALOG_ITEMS);
    for (kind, kind_label) in [
        (Kind::Tools, "tools"),
        (Kind::Prompts, "prompts"),
        (Kind::Resources, "resources"),
        (Kind::ResourceTemplates, "resource_templates"),
        (Kind::Skills, "skills"),
    ] {
        let mut counts = vec![0u64; defs.len()];
        for item in catalog.listing(kind).items() {
            if let Some(c) = counts.get_mut(item.upstream) {
                *c += 1;
            }
        }
        for (def, n) in defs.iter().zip(counts).filter(|(d, _)| !d.retired) {
            let labels = [
                (label::UPSTREAM, def.key.as_str()),
                (label::KIND, kind_label),
            ];
            e.sample(&names::CATALOG_ITEMS, &labels, n);
        }
    }
    pinning(&mut e, &catalog);
    e.metric(&names::SESSIONS);
    let sessions = router.sessions().all();
    for t in HostTransport::ALL {
        let n = sessions
            .iter()
            .filter(|s| s.transport().metric() == t)
            .count() as u64;
        e.sample(&names::SESSIONS, &[(label::TRANSPORT, t.label())], n);
    }
    e.finish()
}

/// What each upstream with pins has held back and how many of its definitions changed, from
/// the drift the catalog build recorded. Upstreams without pins have no series.
fn pinning(e: &mut Exposition, catalog: &Catalog) {
    let pinned: Vec<(usize, &str)> = (catalog.defs().iter().enumerate())
        .filter(|(_, d)| d.pinning.is_some())
        .map(|(i, d)| (i, d.key.as_str()))
        .collect();
    if pinned.is_empty() {
        return;
    }
    let kinds = [
        (Kind::Tools, "tools"),
        (Kind::Prompts, "prompts"),
        (Kind::Skills, "skills"),
    ];
    let count = |upstream: usize, kind: Kind, pred: &dyn Fn(&manifold_catalog::Drift) -> bool| {
        let drift = catalog.drift().iter();
        drift
            .filter(|d| d.upstream == upstream && d.kind == kind && pred(d))
            .count() as u64
    };
    e.metric(&names::PINNING_HELD);
    for &(i, key) in &pinned {
        for (kind, kind_label) in kinds {
            for (reason, new) in [("changed", false), ("new", true)] {
                let n = count(i, kind, &|d| d.held && d.pinned.is_none() == new);
                let labels = [
                    (label::UPSTREAM, key),
                    (label::KIND, kind_label),
                    (label::REASON, reason),
                ];
                e.sample(&names::PINNING_HELD, &labels, n);
            }
        }
    }
    e.metric(&names::PINNING_CHANGED);
    for &(i, key) in &pinned {
        for (kind, kind_label) in kinds {
            let n = count(i, kind, &|d| d.pinned.is_some());
            e.sample(
                &names::PINNING_CHANGED,
                &[(label::UPSTREAM, key), (label::KIND, kind_label)],
                n,
            );
        }
    }
}
