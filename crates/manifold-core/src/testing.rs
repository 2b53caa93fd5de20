//! What the unit tests of this crate share: catalogs built from tool definitions.

use std::sync::Arc;

use manifold_catalog::{Catalog, UpstreamDef, UpstreamSlice, UpstreamState};
use manifold_config::NameSettings;
use serde_json::value::RawValue;
use serde_json::Value;

/// The catalog of `upstreams` (key, its tools' definitions), all up, as catalog generation
/// `generation`, with names joined by `__`.
pub fn catalog(generation: u64, upstreams: &[(&str, Vec<Value>)]) -> Catalog {
    let defs: Vec<UpstreamDef> = upstreams
        .iter()
        .map(|(key, _)| UpstreamDef::for_key(key))
        .collect();
    let slices = upstreams
        .iter()
        .map(|(_, tools)| {
            let tools = tools
                .iter()
                .map(|t| RawValue::from_string(t.to_string()).unwrap())
                .collect();
            Some(Arc::new(UpstreamSlice {
                tools,
                ..UpstreamSlice::default()
            }))
        })
        .collect();
    let names = NameSettings {
        separator: "__".into(),
        max_length: 64,
    };
    Catalog::build(
        defs.into(),
        &names,
        0,
        generation,
        vec![UpstreamState::Up; upstreams.len()],
        slices,
    )
}
