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
//! - hints: a term of their own (`hint:readonly`, `hint:destructive`, `hint:idempotent`) for
//!   each annotation set to true, which only a query naming the hint reaches ("read-only"),
//!   so that the hint's words are not counted as what the tool does;
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
//! - [`SearchIndex::admission`] asks a filter about every tool once and keeps the answer
//!   with its statistics; [`SearchIndex::search_admitted`] then searches within it without
//!   asking again. A team's view can keep its `Admission` for as long as the index lives, so
//!   that a search costs only the query's own terms (`search` asks `admit` about every tool
//!   at every call).
//! - [`SearchIndex::len`] and [`SearchIndex::heap_bytes`] say how big it is.
//!
//! The index is built here rather than with a search library: see BENCHMARKS.md ("Tool
//! search") for the comparison and the figures.

mod dictionary;
mod document;
mod query;
mod score;
mod segment;
mod stem;
mod text;

use std::cmp::Ordering;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::build::Catalog;
use crate::listing::{Item, Kind};
use dictionary::Dictionary;
use segment::Segment;

pub use score::Admission;

/// An index of a catalog's tools. Immutable once built.
#[derive(Debug, Default)]
pub struct SearchIndex {
    /// One per upstream with at least one listed tool, in upstream order.
    segments: Vec<Arc<Segment>>,
    /// Each segment's first document in the index's numbering (segments in order, documents
    /// in order within each).
    starts: Vec<usize>,
    dictionary: Dictionary,
    /// Documents in all segments.
    len: usize,
    /// Which index this is, so that an `Admission` made for another is refused.
    id: u64,
}

/// The id of the next index made.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

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
        // The segment `previous` has for each upstream index, to be shared when it still
        // holds what the catalog lists.
        let mut before: Vec<Option<&Arc<Segment>>> = vec![None; defs.len()];
        for segment in &previous.segments {
            if let Some(slot) = before.get_mut(segment.upstream) {
                *slot = Some(segment);
            }
        }
        let mut segments = Vec::new();
        for (upstream, items) in by_upstream.iter().enumerate() {
            if items.is_empty() {
                continue;
            }
            let (def, slice) = (&defs[upstream], catalog.slice(upstream));
            let old = before[upstream].filter(|s| s.holds(upstream, &def.key, slice, items));
            segments.push(match old {
                Some(old) => Arc::clone(old),
                None => Arc::new(Segment::build(upstream, def, slice, items)),
            });
        }
        let mut starts = Vec::with_capacity(segments.len());
        let mut len = 0;
        for segment in &segments {
            starts.push(len);
            len += segment.docs.len();
        }
        let dictionary = Dictionary::of(&segments);
        SearchIndex {
            segments,
            starts,
            dictionary,
            len,
            id: NEXT_ID.fetch_add(1, AtomicOrdering::Relaxed),
        }
    }

    /// The best `k` tools for `query` among those `admit` accepts, best first (ties broken
    /// by exposed name). Empty when the query has no searchable word. `admit` is asked about
    /// every tool of the index, since the scores' statistics are taken over the admitted
    /// ones: a caller that searches often with the same filter makes an [`Admission`] once
    /// instead.
    pub fn search(&self, query: &str, k: usize, admit: &dyn Fn(&Item) -> bool) -> Vec<Hit> {
        if k == 0 || self.len == 0 {
            return Vec::new();
        }
        self.search_admitted(query, k, &self.admission(admit))
    }

    /// The tools `admit` accepts, for [`SearchIndex::search_admitted`]: what a team's view
    /// of this index keeps for as long as the index lives.
    pub fn admission(&self, admit: &dyn Fn(&Item) -> bool) -> Admission {
        Admission::of(self.id, &self.segments, self.len, admit)
    }

    /// [`SearchIndex::search`] among the tools of `admission`, without asking a filter about
    /// every tool. An admission made for another index finds nothing.
    pub fn search_admitted(&self, query: &str, k: usize, admission: &Admission) -> Vec<Hit> {
        if admission.index != self.id || admission.count == 0 || k == 0 {
            return Vec::new();
        }
        let mut scores = vec![0f32; self.len];
        for term in &query::terms(query) {
            let places = self.dictionary.get(&term.term);
            score::add_term(
                &self.segments,
                &self.starts,
                places,
                admission,
                term,
                &mut scores,
            );
        }
        self.best(&scores, &admission.admitted, k)
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
        let own = self.segments.capacity() * (size_of::<Arc<Segment>>() + size_of::<usize>());
        own + self.dictionary.heap_bytes()
            + self
                .segments
                .iter()
                .map(|s| size_of::<Segment>() + s.heap_bytes())
                .sum::<usize>()
    }

    /// The `k` admitted documents with the highest positive scores, as hits.
    fn best(&self, scores: &[f32], admitted: &[bool], k: usize) -> Vec<Hit> {
        let doc = |i: usize| {
            let s = self.starts.partition_point(|&start| start <= i) - 1;
            &self.segments[s].docs[i - self.starts[s]]
        };
        let mut found: Vec<(f32, usize)> = (scores.iter().enumerate())
            .filter(|&(i, &s)| s > 0.0 && admitted[i])
            .map(|(i, &s)| (s, i))
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| -> Ordering {
            b.0.total_cmp(&a.0)
                .then_with(|| doc(a.1).item.exposed.cmp(&doc(b.1).item.exposed))
        };
        if found.len() > k {
            found.select_nth_unstable_by(k - 1, order);
            found.truncate(k);
        }
        found.sort_unstable_by(order);
        found
            .into_iter()
            .map(|(score, i)| {
                let doc = doc(i);
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
