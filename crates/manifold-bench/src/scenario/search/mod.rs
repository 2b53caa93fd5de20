//! `search`: how well and how fast Manifold's tool search (`manifold_catalog::SearchIndex`)
//! finds tools, and what discovery saves a host.
//!
//! - Quality: every query of `bench/search/queries.tsv` over the real catalogs (fetched live
//!   from the reference servers and the fixture, `real.rs`) and the generated upstreams
//!   (`generate/`), recall@1, recall@5 and nDCG@10 of Manifold's ranking beside a baseline
//!   (`quality.rs`), for the development and the held-out half apart.
//! - Cost: search latency over a large generated catalog, the index's build and incremental
//!   update, its memory (`cost.rs`).
//! - Size: `tools/list` of 1,000 tools against a list with discovery (`size.rs`).
//!
//! It runs in this process (no Manifold is started): what it measures is the library.

mod corpus;
mod cost;
mod generate;
mod quality;
mod queries;
mod real;
mod report;
mod size;

use anyhow::Result;
use manifold_catalog::{Item, Kind, SearchIndex};
use serde_json::{json, Map, Value};

use crate::setup::{Plan, Setup};
use corpus::Corpus;
use quality::{Baseline, Totals};
use queries::{Query, Split};

pub use report::{goals, table};

/// The seed of every generated catalog.
const SEED: u64 = 20_240_611;

/// How many of the development half's misses the JSON keeps, for whoever tunes the ranking
/// (the held-out half's are never shown, so that no one tunes on them).
const MISSES_SHOWN: usize = 100;

pub fn search(setup: &Setup, plan: &Plan) -> Result<Value> {
    let real = real::fetch(setup)?;
    for (key, why) in &real.skipped {
        eprintln!("manifold-load: search: the {key} server is left out: {why}");
    }
    let generated = generate::catalog(SEED)?;
    let corpus = Corpus::of(&real.servers, &generated)?;
    let (queries, excluded) = labelled(&corpus, &real.skipped)?;
    let quality = evaluate(&corpus, &queries);
    let sizes = cost::Sizes {
        tools: plan.search_tools,
        rounds: plan.search_rounds,
        builds: plan.rounds,
    };
    let cost = cost::measure(&sizes, &queries, SEED)?;
    let size = size::measure(SEED)?;
    let real_tools: Map<String, Value> = (real.servers.iter())
        .map(|s| (s.key.clone(), json!(s.tools.len())))
        .collect();
    Ok(json!({
        "catalog": {
            "tools": corpus.tools(),
            "upstreams": corpus.parts.len(),
            "real_tools": real_tools,
            "generated_tools": generated.iter().map(|u| u.tools.len()).sum::<usize>(),
            "generated_upstreams": generated.len(),
            "skipped": real.skipped.iter().map(|(k, why)| json!({ "server": k, "why": why })).collect::<Vec<_>>(),
        },
        "queries": {
            "total": queries.len(),
            "dev": queries.iter().filter(|q| q.split == Split::Dev).count(),
            "held_out": queries.iter().filter(|q| q.split == Split::HeldOut).count(),
            "excluded": excluded,
        },
        "quality": quality,
        "cost": cost,
        "size": size,
    }))
}

/// The queries whose tools are all in the catalog, with the near-duplicates' grades added;
/// and how many were left out because they name a tool of a server that was skipped. A name
/// that is in no catalog at all is an error in the query set.
fn labelled(corpus: &Corpus, skipped: &[(String, String)]) -> Result<(Vec<Query>, usize)> {
    let listing = corpus.catalog.listing(Kind::Tools);
    let (mut kept, mut excluded) = (Vec::new(), 0);
    for mut q in queries::parse()? {
        let missing: Vec<&String> = q
            .grades
            .keys()
            .filter(|n| listing.get(n).is_none())
            .collect();
        let of_skipped =
            |name: &&String| (skipped.iter()).any(|(key, _)| name.starts_with(&format!("{key}__")));
        if let Some(unknown) = missing.iter().find(|n| !of_skipped(n)) {
            anyhow::bail!(
                "query {:?} names {unknown}, which no upstream serves",
                q.text
            );
        }
        if !missing.is_empty() {
            excluded += 1;
            continue;
        }
        queries::add_near_duplicates(&mut q, &corpus.ops);
        kept.push(q);
    }
    Ok((kept, excluded))
}

/// Quality of Manifold's ranking and of the baseline, on each half.
fn evaluate(corpus: &Corpus, queries: &[Query]) -> Value {
    let index = SearchIndex::build(&corpus.catalog);
    let items = corpus.catalog.listing(Kind::Tools).items();
    let baseline = Baseline::new(items.iter().map(|i| i.exposed.as_str()));
    let all = |_: &Item| true;
    let mut out = Map::new();
    for split in [Split::Dev, Split::HeldOut] {
        let (mut ours, mut base) = (Totals::default(), Totals::default());
        let mut misses = Vec::new();
        for q in queries.iter().filter(|q| q.split == split) {
            let ranked: Vec<String> = (index.search(&q.text, 10, &all).into_iter())
                .map(|h| h.exposed)
                .collect();
            ours.add(&ranked, &q.grades);
            base.add(&baseline.rank(&q.text, 10), &q.grades);
            let first_ok = ranked.first().is_some_and(|n| q.grades.get(n) == Some(&2));
            if split == Split::Dev && !first_ok && misses.len() < MISSES_SHOWN {
                misses.push(miss(q, &ranked));
            }
        }
        let mut half = Map::new();
        half.insert("manifold".into(), ours.to_json());
        half.insert("baseline".into(), base.to_json());
        if split == Split::Dev {
            half.insert("misses".into(), Value::Array(misses));
        }
        out.insert(split.name().into(), Value::Object(half));
    }
    Value::Object(out)
}

/// A development query whose first hit is not fully relevant: what it wanted and got.
fn miss(q: &Query, ranked: &[String]) -> Value {
    let wanted: Vec<&String> = (q.grades.iter())
        .filter(|&(_, &g)| g == 2)
        .map(|(n, _)| n)
        .take(5)
        .collect();
    let got: Vec<&String> = ranked.iter().take(3).collect();
    json!({ "query": q.text, "wanted": wanted, "got": got })
}
