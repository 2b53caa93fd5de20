//! Two caches sharing one [`MemoryTier`], as two replicas share one Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use futures::executor::block_on;
use manifold_config::UpstreamConfig;

use super::*;
use crate::cache::{FromShared, Lookup};

fn upstreams() -> (manifold_config::CacheSettings, Vec<UpstreamConfig>) {
    let toml = "[upstreams.fx]\ncommand = \"fx\"\ncache = { ttl = \"60s\" }\n";
    let config =
        manifold_config::parse_str(Path::new("/m/manifold.toml"), toml, &|_| None).unwrap();
    (config.cache, config.upstreams)
}

/// A replica's cache, its tier a handle of `tier`.
fn replica(tier: MemoryTier) -> Arc<Cache> {
    let (settings, upstreams) = upstreams();
    let (released, _) = tokio::sync::mpsc::unbounded_channel();
    Cache::with_tier(None, &settings, &upstreams, &released, Some(Arc::new(tier))).unwrap()
}

/// The lookup of a call of `tool` with no arguments, as `Cache::plan` makes it.
fn lookup(cache: &Cache, tool: &str) -> Lookup {
    let up = &cache.upstreams[0];
    let rule = up.tools.as_ref().unwrap();
    Lookup {
        key: Key::new(
            0,
            up.epoch.load(Ordering::Acquire),
            Family::Tools,
            tool.into(),
            "{}".into(),
            None,
        ),
        store: rule.store.clone(),
        ttl: rule.ttl,
        refresh: false,
        changes: up.changes.load(Ordering::Acquire),
        counters: Arc::clone(&up.counters[0]),
    }
}

#[test]
fn replicas_share_an_entry_and_its_invalidation_through_the_tier() {
    let tier = MemoryTier::default();
    let (a, b) = (replica(tier.replica()), replica(tier.replica()));

    // A misses, fills and shares the answer.
    let on_a = lookup(&a, "t");
    let FromShared::Missing(ticket) = block_on(a.look_shared(&on_a)) else {
        panic!("A found an entry no one stored");
    };
    let entry = a.entry(&on_a, "{\"answer\":1}".into(), None).ok().unwrap();
    a.share(ticket, &entry);

    // B finds it in the tier, and keeps it in its own memory.
    let on_b = lookup(&b, "t");
    let FromShared::Found { result, .. } = block_on(b.look_shared(&on_b)) else {
        panic!("B did not find what A stored");
    };
    assert_eq!(&*result, "{\"answer\":1}");
    let epoch = b.upstreams[0].epoch.load(Ordering::Acquire);

    // A sees the upstream change: B drops what it holds, and the tier's entry is not read
    // again by anyone.
    a.shared.as_ref().unwrap().changed(0, None);
    assert!(
        b.upstreams[0].epoch.load(Ordering::Acquire) > epoch,
        "B kept its entry"
    );
    assert!(matches!(
        block_on(b.look_shared(&lookup(&b, "t"))),
        FromShared::Missing(_)
    ));
    assert!(matches!(
        block_on(a.look_shared(&lookup(&a, "t"))),
        FromShared::Missing(_)
    ));
}

#[test]
fn a_fill_that_overlapped_a_change_is_not_shared() {
    let tier = MemoryTier::default();
    let (a, b) = (replica(tier.replica()), replica(tier.replica()));
    let on_a = lookup(&a, "t");
    let FromShared::Missing(ticket) = block_on(a.look_shared(&on_a)) else {
        panic!("A found an entry no one stored");
    };
    // B sees a change while A's fill is under way.
    b.shared.as_ref().unwrap().changed(0, None);
    a.shared
        .as_ref()
        .unwrap()
        .store(ticket, "{\"stale\":1}".into(), Duration::from_secs(60));
    assert!(matches!(
        block_on(b.look_shared(&lookup(&b, "t"))),
        FromShared::Missing(_)
    ));
}
