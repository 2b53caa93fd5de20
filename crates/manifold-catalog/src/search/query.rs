//! A query's terms: the analyzed words the user wrote, each once, and the synonyms they
//! bring with a lower weight.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::score::QueryTerm;
use super::text;

/// What a synonym counts for against a word of the query itself.
const SYNONYM_WEIGHT: f32 = 0.4;

/// Groups of words that name the same thing in tool catalogs. A query word of a group brings
/// the others at `SYNONYM_WEIGHT`; documents are indexed as written.
const SYNONYMS: &[&[&str]] = &[];

/// The terms of `query`: its own, in order of first appearance, then the synonyms of those
/// (each term once, at the highest weight it gets).
pub(crate) fn terms(query: &str) -> Vec<QueryTerm> {
    let mut out: Vec<QueryTerm> = Vec::new();
    for term in text::terms_of(query) {
        if !out.iter().any(|q| q.term == term) {
            out.push(QueryTerm { term, weight: 1.0 });
        }
    }
    let own = out.len();
    for i in 0..own {
        for synonym in synonyms_of(&out[i].term) {
            if !out.iter().any(|q| &q.term == synonym) {
                out.push(QueryTerm {
                    term: synonym.clone(),
                    weight: SYNONYM_WEIGHT,
                });
            }
        }
    }
    out
}

/// The analyzed terms of every other word of each group `term` belongs to as a single word.
fn synonyms_of(term: &str) -> &'static [String] {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table: HashMap<String, Vec<String>> = HashMap::new();
        for group in SYNONYMS {
            let analyzed: Vec<Vec<String>> = group.iter().map(|w| text::terms_of(w)).collect();
            for (i, word) in analyzed.iter().enumerate() {
                let [single] = word.as_slice() else { continue };
                let entry = table.entry(single.clone()).or_default();
                let others = analyzed.iter().enumerate().filter(|&(j, _)| j != i);
                for term in others.flat_map(|(_, other)| other) {
                    if term != single && !entry.contains(term) {
                        entry.push(term.clone());
                    }
                }
            }
        }
        table
    });
    table.get(term).map_or(&[], Vec::as_slice)
}
