//! What `/metrics` answers: everything recorded (see `manifold_telemetry::metrics`), and what
//! is read at scrape time instead of being recorded on the request path: which upstreams are
//! up, requests in flight, catalog sizes and open sessions.

use manifold_catalog::{Kind, UpstreamState};
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
    e.metric(&names::UPSTREAM_UP);
    for (i, def) in defs.iter().enumerate() {
        let up = u64::from(*catalog.state(i) == UpstreamState::Up);
        e.sample(&names::UPSTREAM_UP, &[(label::UPSTREAM, &def.key)], up);
    }
    e.metric(&names::UPSTREAM_INFLIGHT);
    for (i, def) in defs.iter().enumerate() {
        let n = router.in_flight(i) as u64;
        e.sample(&names::UPSTREAM_INFLIGHT, &[(label::UPSTREAM, &def.key)], n);
    }
    e.metric(&names::CATALOG_ITEMS);
    for (kind, kind_label) in [
        (Kind::Tools, "tools"),
        (Kind::Prompts, "prompts"),
        (Kind::Resources, "resources"),
        (Kind::ResourceTemplates, "resource_templates"),
    ] {
        let mut counts = vec![0u64; defs.len()];
        for item in catalog.listing(kind).items() {
            if let Some(c) = counts.get_mut(item.upstream) {
                *c += 1;
            }
        }
        for (def, n) in defs.iter().zip(counts) {
            let labels = [
                (label::UPSTREAM, def.key.as_str()),
                (label::KIND, kind_label),
            ];
            e.sample(&names::CATALOG_ITEMS, &labels, n);
        }
    }
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
