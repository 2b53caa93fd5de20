//! Percentiles of one round, and medians across rounds: a lone timing on a shared two-core
//! machine says little, the median of several interleaved rounds says more.

use serde_json::{json, Value};

/// Percentiles of one round, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples_ns: &mut [u64]) -> Self {
        if samples_ns.is_empty() {
            return Self::default();
        }
        samples_ns.sort_unstable();
        let at = |q: f64| {
            let i = ((samples_ns.len() as f64 - 1.0) * q).round() as usize;
            samples_ns[i] as f64 / 1000.0
        };
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: at(1.0),
        }
    }

    pub fn minus(self, other: Self) -> Self {
        Self {
            p50: self.p50 - other.p50,
            p90: self.p90 - other.p90,
            p99: self.p99 - other.p99,
            max: self.max - other.max,
        }
    }

    pub fn to_json(self) -> Value {
        json!({ "p50_us": round(self.p50), "p90_us": round(self.p90), "p99_us": round(self.p99), "max_us": round(self.max) })
    }
}

/// The median of each percentile across rounds, and the spread (min..max) of the p50s.
pub fn median(rounds: &[Summary]) -> (Summary, (f64, f64)) {
    let pick = |f: fn(&Summary) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            0.0
        } else {
            v[v.len() / 2]
        }
    };
    let p50s: Vec<f64> = rounds.iter().map(|r| r.p50).collect();
    let spread = (
        p50s.iter().copied().fold(f64::INFINITY, f64::min),
        p50s.iter().copied().fold(0.0, f64::max),
    );
    (
        Summary {
            p50: pick(|r| r.p50),
            p90: pick(|r| r.p90),
            p99: pick(|r| r.p99),
            max: pick(|r| r.max),
        },
        spread,
    )
}

pub fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        0.0
    } else {
        values[values.len() / 2]
    }
}

pub fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let mut s: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let r = Summary::of(&mut s);
        assert_eq!((r.p50, r.p99, r.max), (51.0, 99.0, 100.0));
        let (m, spread) = median(&[
            r,
            r.minus(Summary {
                p50: 1.0,
                ..Default::default()
            }),
            r,
        ]);
        assert_eq!(m.p50, 51.0);
        assert_eq!(spread, (50.0, 51.0));
    }
}
