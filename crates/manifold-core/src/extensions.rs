//! The extension rule: what becomes of each extension (`capabilities.extensions`) an upstream
//! declares. One Manifold knows how to merge (MCP Apps, tasks, skills) is merged. One it does
//! not know, declared by exactly one upstream of a caller's view, passes through with that
//! upstream's settings, and requests of methods Manifold does not know go to that upstream.
//! One declared by several upstreams of the view is not advertised: Manifold could not tell
//! which of them a method of it belongs to, and it never advertises a capability whose
//! requests it would answer with -32601.

use std::collections::BTreeMap;
use std::sync::Mutex;

use manifold_catalog::{Catalog, UpstreamSlice};
use serde_json::Value;

/// MCP Apps (`ui://` resources): merged with the settings of the first upstream that
/// declares it.
pub const APPS: &str = "io.modelcontextprotocol/ui";
/// Skills: merged over every upstream that declares it.
pub const SKILLS: &str = "io.modelcontextprotocol/skills";

/// Whether Manifold knows how to merge the extension `name`.
pub fn is_known(name: &str) -> bool {
    matches!(name, APPS | SKILLS) || name == crate::tasks::EXTENSION
}

/// The extensions `slice`'s upstream declares: name and settings, in name order.
pub fn declared_by(slice: &UpstreamSlice) -> Vec<(String, Value)> {
    let declared = slice
        .capabilities
        .as_deref()
        .and_then(|c| serde_json::from_str::<Value>(c.get()).ok())
        .and_then(|mut c| c.get_mut("extensions").map(Value::take));
    match declared {
        Some(Value::Object(declared)) => declared.into_iter().collect(),
        _ => Vec::new(),
    }
}

/// What becomes of one extension in a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Known to Manifold: merged.
    Merged,
    /// Unknown, declared by this upstream (by index) alone: advertised with its settings,
    /// its methods forwarded to it.
    PassedThrough(usize),
    /// Unknown, declared by these upstreams (by index): not advertised.
    NotAdvertised(Vec<usize>),
}

/// Every extension the upstreams for which `known` holds declare, with its fate, by name.
pub fn fates(catalog: &Catalog, known: impl Fn(usize) -> bool) -> BTreeMap<String, Fate> {
    let mut declarers: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, slice) in catalog.slices().iter().enumerate() {
        let Some(slice) = slice.as_ref().filter(|_| known(i)) else {
            continue;
        };
        for (name, _) in declared_by(slice) {
            declarers.entry(name).or_default().push(i);
        }
    }
    declarers
        .into_iter()
        .map(|(name, by)| {
            let fate = match by.as_slice() {
                _ if is_known(&name) => Fate::Merged,
                [one] => Fate::PassedThrough(*one),
                _ => Fate::NotAdvertised(by),
            };
            (name, fate)
        })
        .collect()
}

/// The upstreams (by index, in configuration order) an unknown extension passes through
/// from in the view `known` describes: where requests of methods Manifold does not know go.
pub fn owners(catalog: &Catalog, known: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut owners: Vec<usize> = fates(catalog, known)
        .into_values()
        .filter_map(|fate| match fate {
            Fate::PassedThrough(upstream) => Some(upstream),
            _ => None,
        })
        .collect();
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// The unknown extensions several upstreams declare, as last told: each is logged once when a
/// catalog makes it so, not for every request that meets it.
#[derive(Debug, Default)]
pub struct Conflicts {
    seen: Mutex<(u64, BTreeMap<String, Vec<usize>>)>,
}

impl Conflicts {
    /// Logs (warn) every unknown extension that several upstreams of `catalog` declare and
    /// did not in the catalog looked at before. A catalog already looked at costs one lock.
    pub fn note(&self, catalog: &Catalog) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.0 == catalog.generation() {
            return;
        }
        let now: BTreeMap<String, Vec<usize>> = fates(catalog, |i| {
            catalog.defs().get(i).is_some_and(|d| !d.retired)
        })
        .into_iter()
        .filter_map(|(name, fate)| match fate {
            Fate::NotAdvertised(by) => Some((name, by)),
            _ => None,
        })
        .collect();
        for (name, by) in &now {
            if seen.1.get(name) != Some(by) {
                tracing::warn!(
                    extension = %name,
                    upstreams = %keys(catalog, by),
                    "extension declared by several upstreams is not advertised: its methods cannot be routed"
                );
            }
        }
        *seen = (catalog.generation(), now);
    }
}

/// The keys of upstreams `by`, joined with ", ".
pub fn keys(catalog: &Catalog, by: &[usize]) -> String {
    let defs = catalog.defs();
    let keys: Vec<&str> = by
        .iter()
        .filter_map(|i| defs.get(*i).map(|d| d.key.as_str()))
        .collect();
    keys.join(", ")
}
