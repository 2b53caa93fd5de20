//! Tool search: a small full-text index over a catalog's tools, ranked by BM25F, for hosts
//! that find tools by asking instead of reading a list of thousands.
//!
//! A document is one tool of `catalog.listing(Kind::Tools)`, with five fields of its own and
//! one it shares with its upstream, weighted in this order:
//!
//! - name: the exposed and the original name, split at `_`, `-`, `.`, camelCase humps and
//!   digits;
//! - title: `title` and `annotations.title`;
//! - description;
//! - parameters: the input schema's property names, their descriptions and enum values;
//! - hints: "read only", "destructive", "idempotent" for the annotations set to true;
//! - upstream: the upstream's key and the `instructions` it gave at its handshake.
//!
//! Text is lowercased, common accents are folded to ASCII, English stop words dropped and
//! words stemmed by a light stemmer of this module's own; a query goes through the same
//! analysis and brings a few synonyms ("ticket" for "issue") at a lower weight.
//!
//! The API the sessions use:
//!
//! - [`SearchIndex::build`] indexes a catalog; an index is immutable, `Send` and `Sync`.
//! - [`SearchIndex::update`] indexes a newer catalog, sharing the documents of every upstream
//!   whose slice (the same `Arc<UpstreamSlice>`), key and exposed tools are unchanged, so
//!   that one upstream's `list_changed` costs the analysis of that upstream's tools alone.
//! - [`SearchIndex::search`] gives the best `k` tools for a query among those `admit` accepts
//!   (a team's view, an upstream filter), best first, ties broken by exposed name. A tool
//!   `admit` refuses is never returned, and no score depends on it: the document count, the
//!   document frequencies and the average field lengths are all taken over the admitted
//!   tools, so a team cannot learn of another's tools through scores.
//! - [`SearchIndex::len`] and [`SearchIndex::heap_bytes`] say how big it is.
//!
//! The index is built here rather than with a search library: see BENCHMARKS.md ("Tool
//! search") for the comparison and the figures.

mod document;
mod query;
mod score;
mod segment;
mod stem;
mod text;

use std::cmp::Ordering;
use std::mem::size_of;
use std::sync::Arc;

use crate::build::Catalog;
use crate::listing::{Item, Kind};
use score::{Admitted, TUNING};
use segment::Segment;

/// An index of a catalog's tools. Immutable once built.
#[derive(Debug, Default)]
pub struct SearchIndex {
    /// One per upstream with at least one listed tool, in upstream order.
    segments: Vec<Arc<Segment>>,
    /// Documents in all segments.
    len: usize,
}

/// A tool found by [`SearchIndex::search`].
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The name the host calls it by.
    pub exposed: String,
    /// Index of its upstream in the catalog's upstream list.
    pub upstream: usize,
    pub score: f32,
    pub title: Option<String>,
    /// The first line of its description, shortened past 160 characters.
    pub summary: String,
}

impl SearchIndex {
    /// Indexes every tool of `catalog`.
    pub fn build(catalog: &Catalog) -> SearchIndex {
        Self::update(&SearchIndex::default(), catalog)
    }

    /// The index of `catalog`, reusing the documents of every upstream whose slice (the same
    /// `Arc<UpstreamSlice>`), key and exposed tools (name, original name and definition) are
    /// unchanged since `previous` was built: the others are analyzed anew.
    pub fn update(previous: &SearchIndex, catalog: &Catalog) -> SearchIndex {
        let defs = catalog.defs();
        let mut by_upstream: Vec<Vec<&Item>> = vec![Vec::new(); defs.len()];
        for item in catalog.listing(Kind::Tools).items() {
            if let Some(list) = by_upstream.get_mut(item.upstream) {
                list.push(item);
            }
        }
        let mut segments = Vec::new();
        for (upstream, items) in by_upstream.iter().enumerate() {
            if items.is_empty() {
                continue;
            }
            let (def, slice) = (&defs[upstream], catalog.slice(upstream));
            let old = previous
                .segments
                .iter()
                .find(|s| s.holds(upstream, &def.key, slice, items));
            segments.push(match old {
                Some(old) => Arc::clone(old),
                None => Arc::new(Segment::build(upstream, def, slice, items)),
            });
        }
        let len = segments.iter().map(|s| s.docs.len()).sum();
        SearchIndex { segments, len }
    }

    /// The best `k` tools for `query` among those `admit` accepts, best first (ties broken
    /// by exposed name). Empty when the query has no searchable word.
    pub fn search(&self, query: &str, k: usize, admit: &dyn Fn(&Item) -> bool) -> Vec<Hit> {
        let terms = query::terms(query);
        if terms.is_empty() || k == 0 || self.len == 0 {
            return Vec::new();
        }
        let admitted = Admitted::of(&self.segments, self.len, admit);
        if admitted.count == 0 {
            return Vec::new();
        }
        let mut scores = vec![0f32; self.len];
        for term in &terms {
            score::add_term(&self.segments, &admitted, term, &TUNING, &mut scores);
        }
        self.best(&scores, &admitted.admitted, k)
    }

    /// Tools in the index.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An estimate of the heap memory the index holds, in bytes (segments shared with
    /// another index counted in full).
    pub fn heap_bytes(&self) -> usize {
        let own = self.segments.capacity() * size_of::<Arc<Segment>>();
        own + self
            .segments
            .iter()
            .map(|s| size_of::<Segment>() + s.heap_bytes())
            .sum::<usize>()
    }

    /// The `k` admitted documents with the highest positive scores, as hits.
    fn best(&self, scores: &[f32], admitted: &[bool], k: usize) -> Vec<Hit> {
        let docs: Vec<&segment::Doc> = self.segments.iter().flat_map(|s| &s.docs).collect();
        let mut found: Vec<(f32, usize)> = (scores.iter().enumerate())
            .filter(|&(i, &s)| s > 0.0 && admitted[i])
            .map(|(i, &s)| (s, i))
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| -> Ordering {
            b.0.total_cmp(&a.0)
                .then_with(|| docs[a.1].item.exposed.cmp(&docs[b.1].item.exposed))
        };
        if found.len() > k {
            found.select_nth_unstable_by(k - 1, order);
            found.truncate(k);
        }
        found.sort_unstable_by(order);
        found
            .into_iter()
            .map(|(score, i)| {
                let doc = docs[i];
                Hit {
                    exposed: doc.item.exposed.clone(),
                    upstream: doc.item.upstream,
                    score,
                    title: doc.title.clone(),
                    summary: doc.summary.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
