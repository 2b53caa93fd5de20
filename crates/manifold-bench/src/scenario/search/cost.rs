//! What search costs over a large generated catalog: each query's time (every query of the
//! set, many rounds), building the index, updating it after one upstream's slice changed,
//! and its memory.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use manifold_catalog::{Hit, Item, SearchIndex, UpstreamSlice};
use serde_json::{json, Value};

use super::corpus::{self, Corpus, Part};
use super::generate;
use super::queries::Query;
use crate::stats::{self, Across, Summary};

/// The goal: a search over 5,000 tools takes at most this long at the median.
pub const GOAL_P50_US: f64 = 1000.0;

/// What to measure: `tools` in the catalog, every query `rounds` times, and `builds` builds
/// and updates, each timed alone.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub tools: usize,
    pub rounds: usize,
    pub builds: usize,
}

pub fn measure(sizes: &Sizes, queries: &[Query], seed: u64) -> Result<Value> {
    let Sizes {
        tools,
        rounds,
        builds,
    } = *sizes;
    let generated = generate::scaled(seed, tools)?;
    let corpus = Corpus::of(&[], &generated)?;
    let rss_before = rss_kb();
    let index = SearchIndex::build(&corpus.catalog);
    let rss_after = rss_kb();
    let build = time_ms(builds, || {
        std::hint::black_box(SearchIndex::build(&corpus.catalog));
    });
    let (update, rebuilt_tools) = update_cost(&corpus, &index, builds)?;
    let all = |_: &Item| true;
    let searched = search_times(queries, rounds, &|q| index.search(q, 10, &all));
    // A team's view: half the upstreams, checked by exposed name as a team's filter does.
    let visible: HashSet<&str> = (corpus
        .catalog
        .listing(manifold_catalog::Kind::Tools)
        .items())
    .iter()
    .filter(|i| i.upstream % 2 == 0)
    .map(|i| i.exposed.as_str())
    .collect();
    let view = |item: &Item| visible.contains(item.exposed.as_str());
    let filtered = search_times(queries, rounds, &|q| index.search(q, 10, &view));
    let admission = index.admission(&view);
    let kept = search_times(queries, rounds, &|q| {
        index.search_admitted(q, 10, &admission)
    });
    Ok(json!({
        "tools": index.len(),
        "upstreams": corpus.parts.len(),
        "queries": queries.len(),
        "rounds": rounds,
        "search_us": searched,
        "search_half_view_us": filtered,
        "search_half_view_admission_us": kept,
        "goal_p50_us": GOAL_P50_US,
        "build_ms": across_json(build),
        "update_ms": across_json(update),
        "update_rebuilt_tools": rebuilt_tools,
        "build_rounds": builds,
        "heap_bytes": index.heap_bytes(),
        "rss_delta_kb": rss_after.zip(rss_before).map(|(a, b)| a.saturating_sub(b)),
        "cpus_allowed": cpus_allowed(),
    }))
}

/// Every query `rounds` times through `search` (which asks for the best 10), each timed on
/// its own: the medians over rounds of each round's percentiles.
fn search_times(queries: &[Query], rounds: usize, search: &dyn Fn(&str) -> Vec<Hit>) -> Value {
    for q in queries {
        std::hint::black_box(search(&q.text));
    }
    let mut summaries = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut samples = Vec::with_capacity(queries.len());
        for q in queries {
            let began = Instant::now();
            let hits = search(&q.text);
            let took = began.elapsed();
            std::hint::black_box(hits);
            samples.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        }
        summaries.push(Summary::of(&mut samples));
    }
    stats::medians(&summaries)
}

/// The time of `SearchIndex::update` after one upstream (the one in the middle) got a new
/// slice with one description changed, and how many tools it analyzed again. The new
/// catalog's own build is not timed: it happens whether or not there is search.
fn update_cost(corpus: &Corpus, index: &SearchIndex, builds: usize) -> Result<(Across, usize)> {
    let changed = corpus.parts.len() / 2;
    let mut parts: Vec<Part> = (corpus.parts.iter())
        .map(|p| Part {
            key: p.key.clone(),
            slice: Arc::clone(&p.slice),
        })
        .collect();
    parts[changed].slice = Arc::new(edited(&parts[changed].slice)?);
    let catalog = corpus::build(&parts)?;
    let full = SearchIndex::build(&catalog);
    let updated = SearchIndex::update(index, &catalog);
    for q in ["create an issue", "send a message", "list files"] {
        if updated.search(q, 10, &|_| true) != full.search(q, 10, &|_| true) {
            bail!("an updated index answers {q:?} unlike a full build");
        }
    }
    let times = time_ms(builds, || {
        std::hint::black_box(SearchIndex::update(index, &catalog));
    });
    Ok((times, parts[changed].slice.tools.len()))
}

/// A copy of `slice` whose first tool says one more word.
fn edited(slice: &UpstreamSlice) -> Result<UpstreamSlice> {
    let mut tools = slice.tools.clone();
    let Some(first) = tools.first_mut() else {
        bail!("an upstream without tools");
    };
    let mut tool: Value = serde_json::from_str(first.get())?;
    let description = tool["description"].as_str().unwrap_or("").to_owned();
    tool["description"] = json!(format!("{description} Changed."));
    *first = serde_json::value::RawValue::from_string(tool.to_string())?;
    Ok(UpstreamSlice {
        tools,
        instructions: slice.instructions.clone(),
        ..UpstreamSlice::default()
    })
}

fn time_ms(rounds: usize, mut f: impl FnMut()) -> Across {
    Across::of((0..rounds).map(|_| {
        let began = Instant::now();
        f();
        began.elapsed().as_secs_f64() * 1000.0
    }))
}

fn across_json(a: Across) -> Value {
    json!({ "median": stats::round2(a.median), "min": stats::round2(a.min), "max": stats::round2(a.max) })
}

/// This process's resident set, in kB.
fn rss_kb() -> Option<u64> {
    status_field("VmRSS:")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The CPUs this process may run on (`taskset` shows here).
fn cpus_allowed() -> Option<String> {
    status_field("Cpus_allowed_list:")
}

fn status_field(field: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    Some(line.trim().to_owned())
}
