//! The index's term dictionary: for each term, the segments that have it and its place in
//! each, so that a query term costs one lookup however many upstreams there are. Made anew
//! from the segments' sorted term lists at every build or update (a merge, no analysis).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::size_of;
use std::sync::Arc;

use super::segment::Segment;

/// Where a term is: (segment, the term's position in that segment's list), by segment.
pub(crate) type Places = Vec<(u32, u32)>;

#[derive(Debug, Default)]
pub(crate) struct Dictionary {
    map: HashMap<Box<str>, Places, BuildHasherDefault<WordHasher>>,
}

impl Dictionary {
    pub fn of(segments: &[Arc<Segment>]) -> Dictionary {
        let mut map: HashMap<Box<str>, Places, BuildHasherDefault<WordHasher>> = HashMap::default();
        for (s, segment) in segments.iter().enumerate() {
            let s = u32::try_from(s).unwrap_or(u32::MAX);
            for (t, term) in segment.terms.iter().enumerate() {
                let place = (s, u32::try_from(t).unwrap_or(u32::MAX));
                match map.get_mut(&term.text) {
                    Some(places) => places.push(place),
                    None => {
                        map.insert(term.text.clone(), vec![place]);
                    }
                }
            }
        }
        map.values_mut().for_each(|p| p.shrink_to_fit());
        Dictionary { map }
    }

    pub fn get(&self, term: &str) -> &[(u32, u32)] {
        self.map.get(term).map_or(&[], Vec::as_slice)
    }

    pub fn heap_bytes(&self) -> usize {
        let slot = size_of::<(Box<str>, Places)>() + 1;
        (self.map.iter())
            .map(|(k, v)| slot + k.len() + v.capacity() * size_of::<(u32, u32)>())
            .sum()
    }
}

/// A fast hash for short words (multiply and rotate, eight bytes at a time). The keys come
/// from the catalog, which the operator's upstreams supply, and lookups from queries: no
/// outsider chooses the keys, so flooding a bucket is not a concern and SipHash's cost is not
/// needed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WordHasher(u64);

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
