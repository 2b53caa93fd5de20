//! Tool-call latency over the last minutes, for the overview: Manifold's own duration
//! histograms count since the process started, so the console keeps a short history of
//! their bucket counts (one sample every [`STEP`], the last [`KEPT`]) and reads a stretch of
//! time as the difference of two samples. p50 and p95 are estimated inside the bucket the
//! rank falls in (linearly, as Prometheus's `histogram_quantile` does), and the chart is drawn
//! as an inline SVG on the server: no script, no external service.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use manifold_telemetry::histogram::OPERATION_BUCKETS;

/// Time between two samples, and the width of one point of the chart.
pub(super) const STEP: Duration = Duration::from_secs(10);
/// Samples kept: fifteen minutes of them, and the one before.
const KEPT: usize = 91;
/// The narrowest stretch the chart spans.
const MIN_SPAN: Duration = Duration::from_secs(120);
/// The stretch p50 and p95 are read over.
pub(super) const WINDOW: Duration = Duration::from_secs(300);

/// Cumulative duration counts by upstream key (see `CallCounts::durations`).
pub(super) type Counts = BTreeMap<Arc<str>, Vec<u64>>;

struct Sample {
    at: Instant,
    counts: Counts,
}

/// The samples taken so far, oldest first.
#[derive(Default)]
pub(super) struct History {
    samples: Mutex<VecDeque<Sample>>,
}

/// One upstream's latency as the overview shows it.
pub(super) struct Latency {
    /// Seconds, over [`WINDOW`] (or since the first sample); `None` without calls in it.
    pub(super) p50: Option<f64>,
    pub(super) p95: Option<f64>,
    /// The chart, an `<svg>` element.
    pub(super) chart: String,
}

impl History {
    /// Keeps `counts` as the sample of `now` when the last one is at least [`STEP`] old.
    pub(super) fn sample(&self, now: Instant, counts: Counts) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.back().is_some_and(|last| now < last.at + STEP) {
            return;
        }
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample { at: now, counts });
    }

    /// `upstream`'s latency up to `now`, whose counts are `current`.
    pub(super) fn latency(&self, upstream: &str, now: Instant, current: &[u64]) -> Latency {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let counts_at = |s: &Sample| s.counts.get(upstream).cloned().unwrap_or_default();
        // The oldest sample inside the window: the stretch read is at most WINDOW long.
        let base = samples
            .iter()
            .find(|s| now.saturating_duration_since(s.at) <= WINDOW)
            .map(counts_at)
            .unwrap_or_default();
        let window = difference(current, &base);
        // One point per step: each sample against the one before, then now against the last.
        let mut points = Vec::with_capacity(samples.len());
        let mut previous: Option<(Instant, Vec<u64>)> = None;
        let ends = samples
            .iter()
            .map(|s| (s.at, counts_at(s)))
            .chain(std::iter::once((now, current.to_vec())));
        for (at, counts) in ends {
            if let Some((_, before)) = &previous {
                let step = difference(&counts, before);
                let age = now.saturating_duration_since(at);
                points.push((age, quantile(&step, 0.5), quantile(&step, 0.95)));
            }
            previous = Some((at, counts));
        }
        // The chart spans the history kept (at least two minutes, at most fifteen): a console
        // opened a minute ago draws its points across the chart, not in its last pixels.
        let kept = samples
            .front()
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s.at));
        let span = kept.clamp(MIN_SPAN, STEP * (KEPT as u32 - 1));
        Latency {
            p50: quantile(&window, 0.5),
            p95: quantile(&window, 0.95),
            chart: chart(&points, span),
        }
    }
}

/// `now - before`, bucket by bucket (a missing side counts as zeros).
fn difference(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, n)| n.saturating_sub(before.get(i).copied().unwrap_or(0)))
        .collect()
}

/// The `q` quantile, in seconds, of cumulative counts over [`OPERATION_BUCKETS`] then the
/// total; `None` without observations. Past the last bound it is that bound.
pub(super) fn quantile(cumulative: &[u64], q: f64) -> Option<f64> {
    let total = *cumulative.last()?;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let i = cumulative.iter().position(|&c| c as f64 >= rank)?;
    let Some(&upper) = OPERATION_BUCKETS.get(i) else {
        return OPERATION_BUCKETS.last().copied();
    };
    let lower = if i == 0 {
        0.0
    } else {
        OPERATION_BUCKETS[i - 1]
    };
    let below = if i == 0 { 0 } else { cumulative[i - 1] };
    let inside = cumulative[i] - below;
    if inside == 0 {
        return Some(upper);
    }
    Some(lower + (upper - lower) * (rank - below as f64) / inside as f64)
}

/// A latency as people read it: `850 µs`, `12.4 ms`, `1.20 s`.
pub(super) fn human(seconds: f64) -> String {
    if seconds < 0.001 {
        format!("{:.0} µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

/// Size of the chart in SVG units; the y axis is logarithmic from 100 µs to 10 s.
const WIDTH: f64 = 180.0;
const HEIGHT: f64 = 40.0;
const FLOOR: f64 = 1e-4;
const DECADES: f64 = 5.0;

/// The chart of `points` (age, p50, p95): `span` wide, now at the right; a line is broken
/// where a step had no calls.
fn chart(points: &[(Duration, Option<f64>, Option<f64>)], span: Duration) -> String {
    let minutes = span.as_secs().div_ceil(60);
    let span = span.as_secs_f64();
    let x = |age: Duration| WIDTH - WIDTH * (age.as_secs_f64() / span).min(1.0);
    let y = |s: f64| {
        let decades = (s.max(FLOOR) / FLOOR).log10().min(DECADES);
        HEIGHT - HEIGHT * decades / DECADES
    };
    let mut svg = format!(
        "<svg class=\"latency-chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" data-points=\"{}\">\
         <title>p50 and p95 of tool calls, one point per {} s over the last {minutes} minutes \
         (log scale, 100 µs to 10 s)</title>",
        points.iter().filter(|p| p.2.is_some()).count(),
        STEP.as_secs()
    );
    // Grid lines at 1 ms, 10 ms, 100 ms and 1 s.
    for decade in 1..5 {
        let at = HEIGHT - HEIGHT * f64::from(decade) / DECADES;
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{at:.1}\" y2=\"{at:.1}\"/>"
        );
    }
    for (class, pick) in [("p95", 2usize), ("p50", 1usize)] {
        let value = |p: &(Duration, Option<f64>, Option<f64>)| if pick == 1 { p.1 } else { p.2 };
        let mut run = Vec::new();
        for p in points {
            match value(p) {
                Some(v) => run.push(format!("{:.1},{:.1}", x(p.0), y(v))),
                None => flush(&mut svg, class, &mut run),
            }
        }
        flush(&mut svg, class, &mut run);
    }
    svg.push_str("</svg>");
    svg
}

/// Draws a run of points as one line (a lone point as a dot) and empties it.
fn flush(svg: &mut String, class: &str, run: &mut Vec<String>) {
    match run.len() {
        0 => {}
        1 => {
            let (cx, cy) = run[0].split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                svg,
                "<circle class=\"{class}\" cx=\"{cx}\" cy=\"{cy}\" r=\"1.5\"/>"
            );
        }
        _ => {
            let _ = write!(
                svg,
                "<polyline class=\"{class}\" points=\"{}\"/>",
                run.join(" ")
            );
        }
    }
    run.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cumulative counts of `n` calls that each took `seconds`.
    fn calls(n: u64, seconds: f64) -> Vec<u64> {
        let mut counts: Vec<u64> = OPERATION_BUCKETS
            .iter()
            .map(|&b| if seconds <= b { n } else { 0 })
            .collect();
        counts.push(n);
        counts
    }

    fn add(a: &[u64], b: &[u64]) -> Vec<u64> {
        a.iter().zip(b).map(|(x, y)| x + y).collect()
    }

    #[test]
    fn quantiles_fall_inside_the_bucket_of_their_rank() {
        // 90 calls of 3 ms (the 2.5-5 ms bucket) and 10 of 700 ms (0.5-1 s).
        let counts = add(&calls(90, 0.003), &calls(10, 0.7));
        let p50 = quantile(&counts, 0.5).unwrap();
        let p95 = quantile(&counts, 0.95).unwrap();
        assert!((0.0025..=0.005).contains(&p50), "{p50}");
        assert!((0.5..=1.0).contains(&p95), "{p95}");
        assert_eq!(quantile(&calls(0, 0.1), 0.5), None, "no calls, no quantile");
        assert_eq!(
            quantile(&calls(3, 1000.0), 0.5),
            Some(300.0),
            "past the last bound"
        );
    }

    #[test]
    fn the_window_forgets_calls_older_than_it() {
        let history = History::default();
        let start = Instant::now();
        let key: Arc<str> = "alpha".into();
        // Slow calls long ago, fast ones since.
        let slow = calls(50, 2.0);
        history.sample(start, Counts::from([(Arc::clone(&key), slow.clone())]));
        let later = start + WINDOW + STEP * 2;
        history.sample(
            later - STEP,
            Counts::from([(Arc::clone(&key), slow.clone())]),
        );
        let now_counts = add(&slow, &calls(50, 0.0002));
        let latency = history.latency("alpha", later, &now_counts);
        let p95 = latency.p95.unwrap();
        assert!(p95 < 0.001, "only the fast calls are in the window: {p95}");
        assert!(latency.chart.contains("<polyline") || latency.chart.contains("<circle"));
        // An upstream without calls has no figures and an empty chart.
        let idle = history.latency("beta", later, &[]);
        assert_eq!((idle.p50, idle.p95), (None, None));
        assert!(idle.chart.contains("data-points=\"0\""), "{}", idle.chart);
    }

    #[test]
    fn samples_are_kept_one_per_step_and_at_most_fifteen_minutes_of_them() {
        let history = History::default();
        let start = Instant::now();
        history.sample(start, Counts::new());
        history.sample(start + STEP / 2, Counts::new());
        assert_eq!(
            history.samples.lock().unwrap().len(),
            1,
            "a second sample too soon"
        );
        for i in 1..200 {
            history.sample(start + STEP * i, Counts::new());
        }
        assert_eq!(history.samples.lock().unwrap().len(), KEPT);
    }

    #[test]
    fn latencies_read_as_people_write_them() {
        assert_eq!(human(0.00085), "850 µs");
        assert_eq!(human(0.0124), "12.4 ms");
        assert_eq!(human(1.2), "1.20 s");
    }
}
