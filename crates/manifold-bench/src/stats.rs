//! Percentiles of one round, and medians across rounds: a lone timing on a shared two-core
//! machine says little, the median of several interleaved rounds says more, and the spread
//! across rounds says how much to trust it.

use serde_json::{json, Map, Value};

/// The percentiles reported for every latency figure, with their JSON names.
pub const PERCENTILES: [(&str, f64); 4] = [
    ("p50_us", 0.50),
    ("p90_us", 0.90),
    ("p99_us", 0.99),
    ("max_us", 1.0),
];

/// Percentiles of one round, in microseconds, indexed like `PERCENTILES`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub at: [f64; 4],
}

impl Summary {
    pub fn of(samples_ns: &mut [u64]) -> Self {
        samples_ns.sort_unstable();
        let mut at = [0.0; 4];
        if let Some(last) = samples_ns.len().checked_sub(1) {
            for (slot, (_, q)) in at.iter_mut().zip(PERCENTILES) {
                // Nearest rank: the smallest sample with at least q of the samples at or below.
                let rank = ((q * samples_ns.len() as f64).ceil() as usize).clamp(1, last + 1);
                *slot = samples_ns[rank - 1] as f64 / 1000.0;
            }
        }
        Self {
            count: samples_ns.len(),
            at,
        }
    }

    pub fn to_json(self) -> Value {
        let mut m = Map::new();
        for ((name, _), v) in PERCENTILES.iter().zip(self.at) {
            m.insert((*name).into(), json!(round(v)));
        }
        m.insert("count".into(), json!(self.count));
        Value::Object(m)
    }
}

/// One figure over rounds: the median and the spread (min..max).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Across {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Across {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().collect();
        v.sort_by(f64::total_cmp);
        let Some(&min) = v.first() else {
            return Self {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            };
        };
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Self {
            median,
            min,
            max: v[v.len() - 1],
        }
    }

    pub fn to_json(self) -> Value {
        json!({ "median": round(self.median), "min": round(self.min), "max": round(self.max) })
    }
}

/// Medians of each percentile over rounds, with their spreads.
pub fn medians(rounds: &[Summary]) -> Value {
    let mut m = Map::new();
    let mut spread = Map::new();
    for (i, (name, _)) in PERCENTILES.iter().enumerate() {
        let a = Across::of(rounds.iter().map(|r| r.at[i]));
        m.insert((*name).into(), json!(round(a.median)));
        spread.insert((*name).into(), json!([round(a.min), round(a.max)]));
    }
    m.insert("spread".into(), Value::Object(spread));
    m.insert(
        "count".into(),
        json!(rounds.iter().map(|r| r.count).sum::<usize>()),
    );
    m.insert(
        "per_round".into(),
        rounds.iter().map(|r| r.to_json()).collect(),
    );
    Value::Object(m)
}

/// Direct and through rounds (paired by index) side by side: medians, the added latency
/// (median through minus median direct; its spread from the per-round differences) and the
/// ratio of the medians.
pub fn compare(direct: &[Summary], through: &[Summary]) -> Value {
    let (mut added, mut spread, mut ratio) = (Map::new(), Map::new(), Map::new());
    for (i, (name, _)) in PERCENTILES.iter().enumerate() {
        let d = Across::of(direct.iter().map(|r| r.at[i]));
        let t = Across::of(through.iter().map(|r| r.at[i]));
        let paired = Across::of(direct.iter().zip(through).map(|(d, t)| t.at[i] - d.at[i]));
        added.insert((*name).into(), json!(round(t.median - d.median)));
        spread.insert(
            (*name).into(),
            json!([round(paired.min), round(paired.max)]),
        );
        let key = name.trim_end_matches("_us");
        ratio.insert(key.into(), json!(round2(t.median / d.median.max(1e-9))));
    }
    added.insert("spread".into(), Value::Object(spread));
    json!({
        "direct": medians(direct),
        "through": medians(through),
        "added": added,
        "ratio": ratio,
    })
}

/// `a` over `b` per percentile (Manifold over the peer): the ratio of the medians, and its
/// spread from the per-round ratios (rounds paired by index).
pub fn ratios(a: &[Summary], b: &[Summary]) -> Value {
    let (mut ratio, mut spread) = (Map::new(), Map::new());
    for (i, (name, _)) in PERCENTILES.iter().enumerate() {
        let x = Across::of(a.iter().map(|r| r.at[i]));
        let y = Across::of(b.iter().map(|r| r.at[i]));
        let paired = Across::of(a.iter().zip(b).map(|(x, y)| x.at[i] / y.at[i].max(1e-9)));
        let key = name.trim_end_matches("_us");
        ratio.insert(key.into(), json!(round2(x.median / y.median.max(1e-9))));
        spread.insert(key.into(), json!([round2(paired.min), round2(paired.max)]));
    }
    ratio.insert("spread".into(), Value::Object(spread));
    Value::Object(ratio)
}

/// One decimal: finer digits are noise on this machine.
pub fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let r = Summary::of(&mut s);
        assert_eq!(r.at, [50.0, 90.0, 99.0, 100.0]);
        assert_eq!(r.count, 100);
        assert_eq!(Summary::of(&mut [7000]).at, [7.0; 4]);
        assert_eq!(Summary::of(&mut []).count, 0);
    }

    #[test]
    fn medians_spreads_and_added() {
        let a = Across::of([3.0, 1.0, 2.0, 10.0]);
        assert_eq!((a.median, a.min, a.max), (2.5, 1.0, 10.0));
        let d = [Summary {
            count: 5,
            at: [10.0, 11.0, 12.0, 20.0],
        }; 3];
        let mut t = [Summary {
            count: 5,
            at: [15.0, 17.0, 20.0, 40.0],
        }; 3];
        t[0].at[0] = 14.0;
        let c = compare(&d, &t);
        assert_eq!(c["added"]["p50_us"], 5.0);
        assert_eq!(c["added"]["spread"]["p50_us"], json!([4.0, 5.0]));
        assert_eq!(c["ratio"]["p50"], 1.5);
        assert_eq!(c["direct"]["count"], 15);
        assert_eq!(c["through"]["spread"]["p50_us"], json!([14.0, 15.0]));
        let r = ratios(&t, &d);
        assert_eq!(r["p50"], 1.5);
        assert_eq!(r["spread"]["p50"], json!([1.4, 1.5]));
    }
}
