//! One upstream's part of the index: its tools' documents and postings, and the upstream's
//! fields (its key and its instructions) that all of them share. A segment is immutable and shared by
//! `Arc` between an index and the next one made by `SearchIndex::update` while its upstream's
//! slice stays the same.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::{Arc, Weak};

use super::document::{self, DOC_FIELDS};
use super::text;
use crate::build::{UpstreamDef, UpstreamSlice};
use crate::listing::Item;

/// One tool in a segment.
#[derive(Debug)]
pub(crate) struct Doc {
    /// The tool as the catalog listed it, for the caller's admit check and the hit.
    pub item: Item,
    pub title: Option<String>,
    pub summary: String,
    /// Terms in each field, by `Field`.
    pub lens: [u16; DOC_FIELDS],
}

/// That a term occurs in one document, and how often in each of its fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Posting {
    /// The document's place in its segment.
    pub doc: u32,
    pub tf: [u8; DOC_FIELDS],
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub upstream: usize,
    pub key: String,
    /// The slice it was built from: compared by address, without keeping the slice alive.
    slice: Option<Weak<UpstreamSlice>>,
    pub docs: Vec<Doc>,
    /// Each term's postings, in document order.
    pub postings: HashMap<String, Vec<Posting>>,
    /// Frequency of each term in the upstream's fields: its key (and prefix), its
    /// instructions.
    pub upstream_terms: HashMap<String, [u16; SHARED_FIELDS]>,
    /// Terms in each of the upstream's fields.
    pub upstream_len: [u32; SHARED_FIELDS],
}

/// The fields every tool of an upstream shares: its key (with its prefix) and its
/// instructions.
pub(crate) const SHARED_FIELDS: usize = 2;

impl Segment {
    /// The segment of upstream `upstream` (`def`, slice `slice`) holding `items`, all of
    /// that upstream, in listing order.
    pub fn build(
        upstream: usize,
        def: &UpstreamDef,
        slice: Option<&Arc<UpstreamSlice>>,
        items: &[&Item],
    ) -> Segment {
        let mut key_terms = text::terms_of(&def.key);
        text::terms(&def.prefix, &mut key_terms);
        let mut docs = Vec::with_capacity(items.len());
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        for (n, item) in items.iter().enumerate() {
            let analyzed = document::analyze(item, &key_terms);
            let mut counts: HashMap<&str, [u8; DOC_FIELDS]> = HashMap::new();
            let mut lens = [0u16; DOC_FIELDS];
            for (field, terms) in analyzed.fields.iter().enumerate() {
                lens[field] = u16::try_from(terms.len()).unwrap_or(u16::MAX);
                for term in terms {
                    let tf = &mut counts.entry(term.as_str()).or_default()[field];
                    *tf = tf.saturating_add(1);
                }
            }
            // Sorted, so that each term's postings are made in the same order on every build.
            let mut counts: Vec<_> = counts.into_iter().collect();
            counts.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let doc = u32::try_from(n).unwrap_or(u32::MAX);
            for (term, tf) in counts {
                postings
                    .entry(term.to_owned())
                    .or_default()
                    .push(Posting { doc, tf });
            }
            docs.push(Doc {
                item: (*item).clone(),
                title: analyzed.title,
                summary: analyzed.summary,
                lens,
            });
        }
        postings.values_mut().for_each(|p| p.shrink_to_fit());
        let instructions = slice.and_then(|s| s.instructions.as_deref()).unwrap_or("");
        let (upstream_terms, upstream_len) = shared_fields(&key_terms, instructions);
        Segment {
            upstream,
            key: def.key.clone(),
            slice: slice.map(Arc::downgrade),
            docs,
            postings,
            upstream_terms,
            upstream_len,
        }
    }

    /// Whether this segment indexes exactly `items` of upstream `upstream` with key `key`,
    /// built from `slice`: then a new index may share it.
    pub fn holds(
        &self,
        upstream: usize,
        key: &str,
        slice: Option<&Arc<UpstreamSlice>>,
        items: &[&Item],
    ) -> bool {
        let same_slice = match (&self.slice, slice) {
            (Some(old), Some(new)) => Weak::ptr_eq(old, &Arc::downgrade(new)),
            (None, None) => true,
            _ => false,
        };
        same_slice
            && self.upstream == upstream
            && self.key == key
            && self.docs.len() == items.len()
            && self
                .docs
                .iter()
                .zip(items)
                .all(|(d, i)| same_item(&d.item, i))
    }

    /// An estimate of the heap memory it holds, in bytes.
    pub fn heap_bytes(&self) -> usize {
        let docs: usize = self
            .docs
            .iter()
            .map(|d| {
                let i = &d.item;
                i.exposed.capacity()
                    + i.original.capacity()
                    + i.raw.len()
                    + d.title.as_ref().map_or(0, String::capacity)
                    + d.summary.capacity()
            })
            .sum();
        let postings: usize = self
            .postings
            .iter()
            .map(|(term, list)| {
                map_entry::<String, Vec<Posting>>(term.capacity()) + vec_bytes(list)
            })
            .sum();
        let upstream: usize = (self.upstream_terms.keys())
            .map(|term| map_entry::<String, [u16; SHARED_FIELDS]>(term.capacity()))
            .sum();
        self.docs.capacity() * size_of::<Doc>() + docs + postings + upstream + self.key.capacity()
    }
}

/// The counted terms of an upstream's key field (`key_terms`) and instructions field.
fn shared_fields(
    key_terms: &[String],
    instructions: &str,
) -> (HashMap<String, [u16; SHARED_FIELDS]>, [u32; SHARED_FIELDS]) {
    let fields = [key_terms.to_vec(), text::terms_of(instructions)];
    let mut counts: HashMap<String, [u16; SHARED_FIELDS]> = HashMap::new();
    let mut lens = [0u32; SHARED_FIELDS];
    for (field, terms) in fields.iter().enumerate() {
        lens[field] = u32::try_from(terms.len()).unwrap_or(u32::MAX);
        for term in terms {
            let tf = &mut counts.entry(term.clone()).or_default()[field];
            *tf = tf.saturating_add(1);
        }
    }
    (counts, lens)
}

fn same_item(a: &Item, b: &Item) -> bool {
    a.exposed == b.exposed
        && a.original == b.original
        && a.upstream == b.upstream
        && a.origin == b.origin
        && a.raw == b.raw
}

/// What a hash map entry with a string key of `key_bytes` costs, its table slot included
/// (one control byte, and a load factor of about 7/8).
fn map_entry<K, V>(key_bytes: usize) -> usize {
    (size_of::<(K, V)>() + 1) * 8 / 7 + key_bytes
}

fn vec_bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}
