//! What decides how long a listed item's answers are kept and for whom, in words: what
//! `manifold check` prints beside each item and the console shows in its catalog.

use manifold_catalog::{Catalog, Item, Kind};
use manifold_config::{CacheRule, CacheScope, UpstreamConfig};
use manifold_protocol::version::Era;

/// The config's rule, which outweighs whatever the upstream's answers say of themselves, or,
/// where no rule covers a resource of a stateless-era upstream, that upstream's own hints
/// (`ttlMs`, `cacheScope`), which Manifold keeps nothing by and passes on to hosts. `None`:
/// nothing is kept. `config` is the configuration of the item's upstream.
pub fn rule_note(
    catalog: &Catalog,
    config: Option<&UpstreamConfig>,
    kind: Kind,
    item: &Item,
) -> Option<String> {
    if let Some(rule) = config.and_then(|c| item_rule(c, kind, item)) {
        let scope = match rule.scope {
            CacheScope::Team => "per team",
            CacheScope::Shared => "shared",
        };
        return Some(format!("cached {:?}, {scope}: config", rule.ttl));
    }
    let stateless = catalog
        .slice(item.upstream)
        .and_then(|s| s.era())
        .is_some_and(|e| e == Era::Stateless);
    match kind {
        Kind::Resources | Kind::ResourceTemplates if stateless => {
            Some("upstream's cache hints".to_owned())
        }
        _ => None,
    }
}

/// The cache rule that covers a listed item, if any: a tool's is decided by its original name
/// and the annotations of its listed definition (the one the host sees, the name aside).
fn item_rule<'c>(config: &'c UpstreamConfig, kind: Kind, item: &Item) -> Option<&'c CacheRule> {
    match kind {
        Kind::Tools => super::tool_rule(config, &item.original, &item.raw),
        Kind::Resources | Kind::ResourceTemplates => config.caches.resources.as_ref(),
        Kind::Prompts | Kind::Skills => None,
    }
}
