//! A latency histogram with fixed buckets, recorded with relaxed atomic adds (no lock), and a
//! family of them keyed by label values.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustc_hash::FxBuildHasher;

/// Upper bounds (seconds) for request durations: from 100 us (answers from the catalog, a
/// fast local tool, and so Manifold's own share of a call) to the five minutes a long tool
/// call may take.
pub const OPERATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Upper bounds (seconds) for session lifetimes: a second to a day.
pub const SESSION_BUCKETS: &[f64] = &[
    1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
];

/// Counts of observations per bucket, and their sum.
pub struct Histogram {
    /// Upper bounds in nanoseconds, for a comparison without floating point.
    bounds: &'static [f64],
    bounds_ns: Box<[u64]>,
    /// One count per bound, then one for observations above every bound (not cumulative:
    /// cumulated when rendered).
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

/// A consistent-enough copy of a histogram for rendering.
pub struct Snapshot<'a> {
    pub bounds: &'a [f64],
    /// Cumulative counts per bound (`le`), then the total.
    pub cumulative: Vec<u64>,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            bounds_ns: bounds.iter().map(|b| (b * 1e9) as u64).collect(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = self
            .bounds_ns
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(self.bounds_ns.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot<'_> {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                total += c.load(Ordering::Relaxed);
                total
            })
            .collect();
        Snapshot {
            bounds: self.bounds,
            cumulative,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// Histograms by label values. A series is created on first use and kept: label values are
/// bounded (see `names::label`), so the family is too.
pub struct Family<K> {
    bounds: &'static [f64],
    /// Read-locked to find a series (the usual case), write-locked only to add one. Hashed
    /// with FxHash: label values are bounded and not chosen by hosts, and SipHash was most of
    /// the cost of recording (BENCHMARKS.md).
    series: RwLock<HashMap<K, Arc<Histogram>, FxBuildHasher>>,
}

impl<K: Hash + Eq + Clone + Ord> Family<K> {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            series: RwLock::new(HashMap::default()),
        }
    }

    pub fn observe(&self, key: K, elapsed: Duration) {
        let found = self
            .series
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        let histogram = found.unwrap_or_else(|| {
            let mut series = self
                .series
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(
                series
                    .entry(key)
                    .or_insert_with(|| Arc::new(Histogram::new(self.bounds))),
            )
        });
        histogram.observe(elapsed);
    }

    /// Every series, sorted by its labels (stable output for a scrape).
    pub fn series(&self) -> Vec<(K, Arc<Histogram>)> {
        let mut all: Vec<(K, Arc<Histogram>)> = self
            .series
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, h)| (k.clone(), Arc::clone(h)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(OPERATION_BUCKETS);
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(1000));
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], 1, "le 0.0001 holds exactly 100 us");
        assert_eq!(s.cumulative[2], 2, "le 0.0005 holds exactly 500 us");
        assert_eq!(s.cumulative[4], 2, "le 0.0025 does not hold 3 ms");
        assert_eq!(s.cumulative[5], 3);
        assert_eq!(s.cumulative[OPERATION_BUCKETS.len() - 1], 3);
        assert_eq!(*s.cumulative.last().unwrap(), 4, "+Inf counts everything");
        assert!(
            (s.sum_seconds - 1000.0036).abs() < 1e-6,
            "{}",
            s.sum_seconds
        );
    }

    #[test]
    fn a_family_keeps_one_series_per_label_set() {
        let f: Family<(&'static str, u8)> = Family::new(OPERATION_BUCKETS);
        f.observe(("b", 1), Duration::from_millis(1));
        f.observe(("a", 2), Duration::from_millis(1));
        f.observe(("b", 1), Duration::from_millis(1));
        let series = f.series();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].0, ("a", 2), "sorted by labels");
        assert_eq!(*series[1].1.snapshot().cumulative.last().unwrap(), 2);
    }
}
