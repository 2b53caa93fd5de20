//! Ranking quality: recall@1, recall@5 and nDCG@10 of a ranking against graded labels, and
//! the baseline every ranking is shown beside.
//!
//! - recall@k: of the fully relevant tools (grade 2), the share found in the first k, out of
//!   at most k (a query with six equally good tools has recall@1 = 1 when any of them comes
//!   first), averaged over queries.
//! - nDCG@10: discounted cumulative gain of the first ten (gain 2^grade - 1, discount
//!   log2(rank + 1)) over that of the ideal order of every labelled tool.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// Function words the baseline skips: as substrings they would match names at random ("and"
/// in "command", "all" in "install").
const BASELINE_SKIPS: &[&str] = &[
    "about", "all", "and", "any", "are", "but", "can", "could", "did", "does", "for", "from",
    "had", "has", "have", "how", "into", "its", "just", "let", "not", "our", "out", "please",
    "should", "some", "than", "that", "the", "their", "them", "then", "there", "these", "this",
    "was", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you",
    "your",
];

/// Sums of the three figures over queries.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub queries: usize,
    recall_1: f64,
    recall_5: f64,
    ndcg_10: f64,
}

impl Totals {
    /// Adds one query's ranking (exposed names, best first).
    pub fn add(&mut self, ranked: &[String], grades: &BTreeMap<String, u8>) {
        self.queries += 1;
        self.recall_1 += recall(ranked, grades, 1);
        self.recall_5 += recall(ranked, grades, 5);
        self.ndcg_10 += ndcg(ranked, grades, 10);
    }

    pub fn to_json(self) -> Value {
        let n = self.queries.max(1) as f64;
        let r = |x: f64| (x / n * 1000.0).round() / 1000.0;
        json!({
            "queries": self.queries,
            "recall_at_1": r(self.recall_1),
            "recall_at_5": r(self.recall_5),
            "ndcg_at_10": r(self.ndcg_10),
        })
    }
}

fn recall(ranked: &[String], grades: &BTreeMap<String, u8>, k: usize) -> f64 {
    let full = grades.values().filter(|&&g| g == 2).count();
    if full == 0 {
        return 0.0;
    }
    let found = (ranked.iter().take(k))
        .filter(|name| grades.get(*name) == Some(&2))
        .count();
    found as f64 / full.min(k) as f64
}

fn ndcg(ranked: &[String], grades: &BTreeMap<String, u8>, k: usize) -> f64 {
    let gain = |grade: u8| f64::from((1u32 << grade) - 1);
    let discount = |rank: usize| (rank as f64 + 2.0).log2();
    let dcg: f64 = (ranked.iter().take(k).enumerate())
        .map(|(i, name)| gain(grades.get(name).copied().unwrap_or(0)) / discount(i))
        .sum();
    let mut ideal: Vec<u8> = grades.values().copied().collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let best: f64 = (ideal.iter().take(k).enumerate())
        .map(|(i, &g)| gain(g) / discount(i))
        .sum();
    if best > 0.0 {
        dcg / best
    } else {
        0.0
    }
}

/// The baseline: a tool scores the number of distinct query words (three letters or more,
/// not a function word, lowercased) found as substrings of its lowercased exposed name; the
/// best `k` by score, ties by name.
pub struct Baseline {
    /// (lowercased name, name), sorted by name.
    names: Vec<(String, String)>,
}

impl Baseline {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Baseline {
        let mut names: Vec<(String, String)> = names
            .into_iter()
            .map(|n| (n.to_lowercase(), n.to_owned()))
            .collect();
        names.sort_by(|a, b| a.1.cmp(&b.1));
        Baseline { names }
    }

    pub fn rank(&self, query: &str, k: usize) -> Vec<String> {
        let mut words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
            .filter(|w| w.chars().count() >= 3 && !BASELINE_SKIPS.contains(&w.as_str()))
            .collect();
        words.sort_unstable();
        words.dedup();
        let mut scored: Vec<(usize, &String)> = (self.names.iter())
            .map(|(lower, name)| (words.iter().filter(|w| lower.contains(*w)).count(), name))
            .filter(|&(score, _)| score > 0)
            .collect();
        // Stable: equal scores keep name order.
        scored.sort_by_key(|s| std::cmp::Reverse(s.0));
        scored.into_iter().take(k).map(|(_, n)| n.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grades(pairs: &[(&str, u8)]) -> BTreeMap<String, u8> {
        pairs.iter().map(|(n, g)| ((*n).to_owned(), *g)).collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn recall_counts_fully_relevant_tools_out_of_at_most_k() {
        let g = grades(&[("a", 2), ("b", 2), ("c", 1)]);
        assert_eq!(recall(&names(&["b", "x"]), &g, 1), 1.0);
        assert_eq!(recall(&names(&["c", "a"]), &g, 1), 0.0);
        assert_eq!(recall(&names(&["c", "a", "x", "y", "z"]), &g, 5), 0.5);
        assert!((ndcg(&names(&["a", "b", "c"]), &g, 10) - 1.0).abs() < 1e-9);
        assert!(ndcg(&names(&["c", "b", "a"]), &g, 10) < 1.0);
        assert_eq!(ndcg(&names(&["x"]), &g, 10), 0.0);
    }

    #[test]
    fn baseline_matches_words_inside_names() {
        let b = Baseline::new([
            "gh__create_issue",
            "gh__close_issue",
            "fs__readFile",
            "x__command",
        ]);
        assert_eq!(
            b.rank("Create an ISSUE", 5),
            ["gh__create_issue", "gh__close_issue"]
        );
        assert_eq!(b.rank("read the file", 5), ["fs__readFile"]);
        assert!(b.rank("and to a", 5).is_empty());
    }
}
