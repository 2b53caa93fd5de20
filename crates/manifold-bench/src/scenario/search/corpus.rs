//! Catalogs made the way Manifold makes them (`Catalog::build`, names `{key}__{tool}`) from
//! the real servers' and the generated upstreams' tool lists.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Result};
use manifold_catalog::{Catalog, UpstreamDef, UpstreamSlice, UpstreamState};
use manifold_config::NameSettings;
use serde_json::value::RawValue;

use super::generate;
use super::real::Fetched;

/// One upstream's part of a catalog.
pub struct Part {
    pub key: String,
    pub slice: Arc<UpstreamSlice>,
}

/// A catalog and what it was made of.
pub struct Corpus {
    pub parts: Vec<Part>,
    pub catalog: Catalog,
    /// Exposed name -> operation, for the generated tools (their near-duplicates share it).
    pub ops: HashMap<String, String>,
}

impl Part {
    pub fn new(key: &str, tools: &[String], instructions: Option<String>) -> Result<Part> {
        let tools = tools
            .iter()
            .map(|t| RawValue::from_string(t.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Part {
            key: key.to_owned(),
            slice: Arc::new(UpstreamSlice {
                tools,
                instructions,
                ..UpstreamSlice::default()
            }),
        })
    }
}

impl Corpus {
    /// The real servers' catalogs, then the generated upstreams'.
    pub fn of(real: &[Fetched], generated: &[generate::Upstream]) -> Result<Corpus> {
        let mut parts = Vec::new();
        for server in real {
            parts.push(Part::new(
                &server.key,
                &server.tools,
                server.instructions.clone(),
            )?);
        }
        let mut ops = HashMap::new();
        for up in generated {
            let tools: Vec<String> = up.tools.iter().map(|t| t.json.clone()).collect();
            parts.push(Part::new(&up.key, &tools, up.instructions.clone())?);
            for t in &up.tools {
                ops.insert(format!("{}__{}", up.key, t.name), t.op.clone());
            }
        }
        let catalog = build(&parts)?;
        Ok(Corpus {
            parts,
            catalog,
            ops,
        })
    }

    /// Tools in the catalog.
    pub fn tools(&self) -> usize {
        self.catalog
            .listing(manifold_catalog::Kind::Tools)
            .items()
            .len()
    }
}

/// The catalog of `parts`, in one page, checked to have withheld nothing.
pub fn build(parts: &[Part]) -> Result<Catalog> {
    let defs: Vec<UpstreamDef> = parts.iter().map(|p| def(&p.key)).collect();
    let names = NameSettings {
        separator: "__".into(),
        max_length: 64,
    };
    let n = defs.len();
    let slices = parts.iter().map(|p| Some(Arc::clone(&p.slice))).collect();
    let catalog = Catalog::build(
        defs.into(),
        &names,
        0,
        1,
        vec![UpstreamState::Up; n],
        slices,
    );
    if !catalog.collisions().is_empty() || !catalog.malformed().is_empty() {
        bail!(
            "the search catalog lost tools: collisions {:?}, malformed {:?}",
            catalog.collisions(),
            catalog.malformed()
        );
    }
    Ok(catalog)
}

fn def(key: &str) -> UpstreamDef {
    UpstreamDef::for_key(key)
}
