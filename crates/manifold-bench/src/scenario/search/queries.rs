//! The labelled query set (`bench/search/queries.tsv`, read at build time) and its split into
//! a development and a held-out half.

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Result};

const QUERIES: &str = include_str!("../../../../../bench/search/queries.tsv");

/// Which half of the set a query is in. Fixed by its text alone (FNV-1a of the text: even
/// for development, odd for held-out), so that the split was made before any tuning and a
/// query added later does not move another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Dev,
    HeldOut,
}

impl Split {
    pub fn of(text: &str) -> Split {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        if h % 2 == 0 {
            Split::Dev
        } else {
            Split::HeldOut
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Split::Dev => "dev",
            Split::HeldOut => "held_out",
        }
    }
}

/// One task and what serves it.
#[derive(Debug, Clone)]
pub struct Query {
    pub text: String,
    pub split: Split,
    /// Exposed name -> grade (2: serves the task; 1: partly, or the same operation on
    /// another upstream than the one asked for).
    pub grades: BTreeMap<String, u8>,
}

/// Every query of the file as written (grades as labelled, nothing derived).
pub fn parse() -> Result<Vec<Query>> {
    let mut out = Vec::new();
    for (n, line) in QUERIES.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((text, labels)) = line.split_once('\t') else {
            bail!(
                "queries.tsv:{}: no tab between the query and its labels",
                n + 1
            );
        };
        let mut grades = BTreeMap::new();
        for label in labels.split_whitespace() {
            let (name, grade) = match label.strip_suffix("=1") {
                Some(name) => (name, 1),
                None => (label, 2),
            };
            grades.insert(name.to_owned(), grade);
        }
        if !grades.values().any(|&g| g == 2) {
            bail!("queries.tsv:{}: no fully relevant tool", n + 1);
        }
        out.push(Query {
            text: text.to_owned(),
            split: Split::of(text),
            grades,
        });
    }
    Ok(out)
}

/// Adds grade 1 for the near-duplicates of each fully relevant tool: the tools performing the
/// same operation (`ops`: exposed name -> operation, for generated tools) on other upstreams.
pub fn add_near_duplicates(query: &mut Query, ops: &HashMap<String, String>) {
    let mut by_op: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, op) in ops {
        by_op.entry(op.as_str()).or_default().push(name.as_str());
    }
    let full: Vec<String> = (query.grades.iter())
        .filter(|&(_, &g)| g == 2)
        .map(|(name, _)| name.clone())
        .collect();
    for name in full {
        let Some(op) = ops.get(&name) else { continue };
        for twin in by_op.get(op.as_str()).into_iter().flatten() {
            query.grades.entry((*twin).to_owned()).or_insert(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_parses_and_is_big_enough() {
        let all = parse().unwrap();
        assert!(all.len() >= 300, "{}", all.len());
        let dev = all.iter().filter(|q| q.split == Split::Dev).count();
        assert!(dev > all.len() / 3 && dev < all.len() * 2 / 3, "{dev}");
        let mut texts: Vec<&str> = all.iter().map(|q| q.text.as_str()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), all.len(), "every query once");
    }

    #[test]
    fn near_duplicates_get_grade_one() {
        let mut q = Query {
            text: "x".into(),
            split: Split::Dev,
            grades: [("a__create".to_owned(), 2), ("c__other".to_owned(), 1)].into(),
        };
        let ops: HashMap<String, String> = [
            ("a__create", "issue.create"),
            ("b__new", "issue.create"),
            ("c__other", "issue.create"),
            ("d__close", "issue.close"),
        ]
        .map(|(n, o)| (n.to_owned(), o.to_owned()))
        .into();
        add_near_duplicates(&mut q, &ops);
        let grades: Vec<(&str, u8)> = q.grades.iter().map(|(n, g)| (n.as_str(), *g)).collect();
        assert_eq!(grades, [("a__create", 2), ("b__new", 1), ("c__other", 1)]);
    }
}
