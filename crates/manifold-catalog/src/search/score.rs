//! Ranking: BM25F over the admitted documents only. Each field's term frequency is divided by
//! that field's length normalization, the fields are summed with their weights into one
//! frequency per term and document, and that frequency is saturated once (`k1`), as in the
//! "simple BM25F" of Robertson and Zaragoza. Every collection statistic (the number of
//! documents, each term's document frequency, each field's average length) is taken over the
//! documents the caller admits, so a score is the same whether hidden tools exist or not.

use std::sync::Arc;

use super::document::DOC_FIELDS;
use super::segment::{Posting, Segment, INSTRUCTIONS, KEY, SHARED_FIELDS};

/// Per-tool fields, then the upstream's key and instructions fields.
pub(crate) const FIELDS: usize = DOC_FIELDS + SHARED_FIELDS;

/// The ranking's parameters. Chosen on the development half of the query set in
/// `bench/search/` (never on the held-out half).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// Weight of each field: name, title, description, parameters, hints, upstream key,
    /// upstream instructions.
    pub weights: [f32; FIELDS],
    /// Length normalization of each field (0: none, 1: full).
    pub b: [f32; FIELDS],
    /// Term frequency saturation.
    pub k1: f32,
}

/// The development half barely moved across reasonable values (every field weight halved or
/// doubled, `k1` from 0.8 to 1.8, `b` from 0.3 to 0.9 changed recall@5 by at most 0.02): these
/// sit in the middle of that plateau. The key field has no length normalization: a key is a
/// name, not a text.
pub(crate) const TUNING: Tuning = Tuning {
    weights: [3.0, 2.0, 1.5, 0.5, 0.5, 1.5, 0.3],
    b: [0.5, 0.5, 0.75, 0.75, 0.5, 0.0, 0.75],
    k1: 1.2,
};

/// One query term and how much it counts (less for a synonym than for a word the user wrote).
#[derive(Debug, Clone)]
pub(crate) struct QueryTerm {
    pub term: String,
    pub weight: f32,
}

/// The tools one caller may see in one index, with the statistics their scores are taken
/// from (see `SearchIndex::admission`).
#[derive(Debug, Clone)]
pub struct Admission {
    /// The index it was made for.
    pub(crate) index: u64,
    /// By the index's document number (segments in order, documents in order within each).
    pub(crate) admitted: Vec<bool>,
    /// Admitted documents in each segment.
    pub(crate) per_segment: Vec<u32>,
    pub(crate) count: u32,
    /// Average length of each field over the admitted documents (at least a small positive
    /// number, so that an empty field divides by something).
    pub(crate) avg_len: [f32; FIELDS],
}

impl Admission {
    /// Asks `admit` about every document of index `index` once.
    pub(crate) fn of(
        index: u64,
        segments: &[Arc<Segment>],
        total: usize,
        admit: &dyn Fn(&crate::Item) -> bool,
    ) -> Self {
        let mut admitted = Vec::with_capacity(total);
        let mut per_segment = Vec::with_capacity(segments.len());
        let mut sums = [0f64; FIELDS];
        let mut count = 0u32;
        for segment in segments {
            let mut here = 0u32;
            for doc in &segment.docs {
                let ok = admit(&doc.item);
                admitted.push(ok);
                if ok {
                    here += 1;
                    for (sum, len) in sums.iter_mut().zip(doc.lens) {
                        *sum += f64::from(len);
                    }
                    for (s, len) in segment.upstream_len.iter().enumerate() {
                        sums[DOC_FIELDS + s] += f64::from(*len);
                    }
                }
            }
            per_segment.push(here);
            count += here;
        }
        let avg_len = sums.map(|s| ((s / f64::from(count.max(1))) as f32).max(0.5));
        Self {
            index,
            admitted,
            per_segment,
            count,
            avg_len,
        }
    }
}

/// Adds the contribution of `q`, found at `places` (see `Dictionary`), to every admitted
/// document's score in `scores`; `starts` is each segment's first global document number.
pub(crate) fn add_term(
    segments: &[Arc<Segment>],
    starts: &[usize],
    places: &[(u32, u32)],
    admitted: &Admission,
    q: &QueryTerm,
    scores: &mut [f32],
) {
    let df = document_frequency(segments, starts, places, admitted);
    if df == 0 {
        return;
    }
    let (n, df) = (admitted.count as f32, df as f32);
    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
    let norm = |field: usize, len: f32| {
        let b = TUNING.b[field];
        TUNING.weights[field] / (1.0 - b + b * len / admitted.avg_len[field])
    };
    let saturate = |tf: f32| q.weight * idf * tf * (TUNING.k1 + 1.0) / (TUNING.k1 + tf);
    for &(s, t) in places {
        let (segment, start) = (&segments[s as usize], starts[s as usize]);
        let term = &segment.terms[t as usize];
        let shared: f32 = (0..SHARED_FIELDS)
            .filter(|&f| term.shared[f] > 0)
            .map(|f| {
                f32::from(term.shared[f]) * norm(DOC_FIELDS + f, segment.upstream_len[f] as f32)
            })
            .sum();
        let own = |p: &Posting| -> f32 {
            let lens = &segment.docs[p.doc as usize].lens;
            (0..DOC_FIELDS)
                .filter(|&f| p.tf[f] > 0)
                .map(|f| f32::from(p.tf[f]) * norm(f, f32::from(lens[f])))
                .sum()
        };
        if shared > 0.0 {
            // Every document of the upstream has the term; those with it in their own fields
            // have more of it.
            let mut next = term.postings.iter().peekable();
            for d in 0..segment.docs.len() {
                let mine = next.next_if(|p| p.doc as usize == d).map_or(0.0, &own);
                if admitted.admitted[start + d] {
                    scores[start + d] += saturate(shared + mine);
                }
            }
        } else {
            for p in term.postings.iter() {
                let at = start + p.doc as usize;
                if admitted.admitted[at] {
                    scores[at] += saturate(own(p));
                }
            }
        }
    }
}

/// How many admitted documents have the term found at `places`: those whose own fields have
/// it, and every admitted one of an upstream whose key has it. An upstream's instructions
/// count only for a term nothing else has: instructions that mention files make every tool
/// of their upstream hold "file", and a word made that common would weigh nothing in "read
/// a file".
fn document_frequency(
    segments: &[Arc<Segment>],
    starts: &[usize],
    places: &[(u32, u32)],
    admitted: &Admission,
) -> u32 {
    let (mut df, mut instructed) = (0, 0);
    for &(s, t) in places {
        let (s, term) = (s as usize, &segments[s as usize].terms[t as usize]);
        if term.shared[KEY] > 0 {
            df += admitted.per_segment[s];
            continue;
        }
        if term.shared[INSTRUCTIONS] > 0 {
            instructed += admitted.per_segment[s];
        }
        let hits = (term.postings.iter())
            .filter(|p| admitted.admitted[starts[s] + p.doc as usize])
            .count();
        df += u32::try_from(hits).unwrap_or(u32::MAX);
    }
    if df > 0 {
        df
    } else {
        instructed
    }
}
