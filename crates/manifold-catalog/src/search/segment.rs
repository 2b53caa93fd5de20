//! One upstream's part of the index: its tools' documents and postings, and the upstream's
//! fields (its key and its instructions) that all of them share. A segment is immutable and shared by
//! `Arc` between an index and the next one made by `SearchIndex::update` while its upstream's
//! slice stays the same.

use std::collections::BTreeMap;
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

/// One term of a segment: where its documents have it, and how often the upstream's own
/// fields have it.
#[derive(Debug)]
pub(crate) struct Term {
    pub text: Box<str>,
    /// In document order.
    pub postings: Box<[Posting]>,
    /// Its frequency in the upstream's key field and instructions field.
    pub shared: [u16; SHARED_FIELDS],
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub upstream: usize,
    pub key: String,
    /// The slice it was built from: compared by address, without keeping the slice alive.
    slice: Option<Weak<UpstreamSlice>>,
    pub docs: Vec<Doc>,
    /// Every term of its documents and of the upstream's fields, sorted; the index's
    /// dictionary points here by position.
    pub terms: Vec<Term>,
    /// Terms in each of the upstream's fields.
    pub upstream_len: [u32; SHARED_FIELDS],
}

/// The fields every tool of an upstream shares: its key (with its prefix) and its
/// instructions.
pub(crate) const SHARED_FIELDS: usize = 2;

/// The upstream's key field, among the shared fields.
pub(crate) const KEY: usize = 0;

/// The upstream's instructions field, among the shared fields.
pub(crate) const INSTRUCTIONS: usize = 1;

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
        // Sorted by term, so that a segment is made the same way on every build.
        let mut terms: Terms = BTreeMap::new();
        for (n, item) in items.iter().enumerate() {
            let analyzed = document::analyze(item, &key_terms);
            let mut counts: BTreeMap<&str, [u8; DOC_FIELDS]> = BTreeMap::new();
            let mut lens = [0u16; DOC_FIELDS];
            for (field, words) in analyzed.fields.iter().enumerate() {
                lens[field] = u16::try_from(words.len()).unwrap_or(u16::MAX);
                for term in words {
                    let tf = &mut counts.entry(term.as_str()).or_default()[field];
                    *tf = tf.saturating_add(1);
                }
            }
            let doc = u32::try_from(n).unwrap_or(u32::MAX);
            for (term, tf) in counts {
                let entry = terms.entry(term.to_owned()).or_default();
                entry.0.push(Posting { doc, tf });
            }
            docs.push(Doc {
                item: (*item).clone(),
                title: analyzed.title,
                summary: analyzed.summary,
                lens,
            });
        }
        let instructions = slice.and_then(|s| s.instructions.as_deref()).unwrap_or("");
        let upstream_len = add_shared(&mut terms, key_terms, instructions);
        let terms = (terms.into_iter())
            .map(|(text, (postings, shared))| Term {
                text: text.into_boxed_str(),
                postings: postings.into_boxed_slice(),
                shared,
            })
            .collect();
        Segment {
            upstream,
            key: def.key.clone(),
            slice: slice.map(Arc::downgrade),
            docs,
            terms,
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
        let terms: usize = (self.terms.iter())
            .map(|t| size_of::<Term>() + t.text.len() + t.postings.len() * size_of::<Posting>())
            .sum();
        self.docs.capacity() * size_of::<Doc>() + docs + terms + self.key.capacity()
    }
}

/// A segment's terms while it is made: postings and shared-field frequencies by term.
type Terms = BTreeMap<String, (Vec<Posting>, [u16; SHARED_FIELDS])>;

/// Counts the terms of the upstream's key field (`key_terms`) and of its instructions into
/// `terms`; the two fields' lengths.
fn add_shared(
    terms: &mut Terms,
    key_terms: Vec<String>,
    instructions: &str,
) -> [u32; SHARED_FIELDS] {
    let fields = [key_terms, text::terms_of(instructions)];
    let mut lens = [0u32; SHARED_FIELDS];
    for (field, words) in fields.iter().enumerate() {
        lens[field] = u32::try_from(words.len()).unwrap_or(u32::MAX);
        for term in words {
            let tf = &mut terms.entry(term.clone()).or_default().1[field];
            *tf = tf.saturating_add(1);
        }
    }
    lens
}

fn same_item(a: &Item, b: &Item) -> bool {
    a.exposed == b.exposed
        && a.original == b.original
        && a.upstream == b.upstream
        && a.origin == b.origin
        && a.raw == b.raw
}
