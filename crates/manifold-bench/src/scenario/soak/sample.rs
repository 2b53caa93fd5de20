//! Manifold's resources during the soak, read from /proc once a second: resident memory, open
//! descriptors, threads, CPU time, and its children (the upstream processes). A server that
//! leaks shows it here long before it runs out of anything: memory that keeps rising once
//! the load is steady, descriptors or threads that do not come back down, children that
//! come and go.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};

use crate::procstat::{self, Usage};
use crate::stats::{round, round2};

/// How often the process is sampled.
pub const EVERY: Duration = Duration::from_secs(1);

/// Descriptors and threads may rise this much over their level after the warm-up before the
/// run fails: a connection being replaced, or a worker the runtime starts for a while, is
/// not a leak; a count that grows with the load is.
pub const FD_TOLERANCE: u64 = 8;
pub const THREAD_TOLERANCE: u64 = 4;

/// One reading of the process.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the schedule started.
    pub t_s: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    pub cpu_s: f64,
    /// The children's pids, and how many of them are zombies.
    pub children: BTreeSet<u32>,
    pub zombies: u64,
}

/// Reads `pid` now.
pub fn take(pid: u32, start: Instant) -> Result<Sample> {
    let usage = Usage::of(pid)?;
    let children = procstat::children(pid);
    Ok(Sample {
        t_s: start.elapsed().as_secs_f64(),
        rss_kib: procstat::status_kb(pid, "VmRSS:")?,
        fds: procstat::entries(pid, "fd")? as u64,
        threads: procstat::entries(pid, "task")? as u64,
        cpu_s: usage.user_s + usage.sys_s,
        zombies: children.iter().filter(|(_, s)| *s == 'Z').count() as u64,
        children: children.into_iter().map(|(p, _)| p).collect(),
    })
}

/// Samples `pid` every second from `start` until `stop` is set or `bound` has passed, and
/// once more at the end.
pub fn every_second(
    pid: u32,
    start: Instant,
    stop: &AtomicBool,
    bound: Duration,
) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    let mut next = start;
    // Bounded in time by `bound`.
    while !stop.load(Ordering::Relaxed) && start.elapsed() < bound {
        let now = Instant::now();
        if now < next {
            // Short naps, so that the end of the load is noticed within a tenth of a second.
            std::thread::sleep((next - now).min(Duration::from_millis(100)));
            continue;
        }
        samples.push(take(pid, start)?);
        next += EVERY;
    }
    samples.push(take(pid, start)?);
    Ok(samples)
}

/// Start (the first sample after the warm-up), most, and end of one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start: u64,
    pub max: u64,
    pub end: u64,
}

impl Span {
    fn of(samples: &[&Sample], figure: fn(&Sample) -> u64) -> Self {
        let values: Vec<u64> = samples.iter().map(|s| figure(s)).collect();
        Self {
            start: values.first().copied().unwrap_or(0),
            max: values.iter().copied().max().unwrap_or(0),
            end: values.last().copied().unwrap_or(0),
        }
    }

    /// How far it rose over its start, at most and at the end.
    pub fn rise(self) -> u64 {
        self.max.saturating_sub(self.start)
    }

    fn to_json(self) -> Value {
        json!({ "start": self.start, "max": self.max, "end": self.end })
    }
}

/// The figures after the warm-up (`warmup_s`), the slope of memory over the second half of
/// what followed, and every failure of flatness.
pub struct Figures {
    pub json: Value,
    pub failures: Vec<String>,
}

pub fn figures(samples: &[Sample], warmup_s: f64, upstreams: usize) -> Figures {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= warmup_s).collect();
    let (rss, fds, threads) = (
        Span::of(&after, |s| s.rss_kib),
        Span::of(&after, |s| s.fds),
        Span::of(&after, |s| s.threads),
    );
    let end = after.last().map_or(warmup_s, |s| s.t_s);
    let middle = warmup_s + (end - warmup_s) / 2.0;
    let halves = [
        slope_per_min(after.iter().filter(|s| s.t_s <= middle)),
        slope_per_min(after.iter().filter(|s| s.t_s >= middle)),
    ];
    let mut failures = Vec::new();
    for (name, span, tolerance) in [
        ("descriptors", fds, FD_TOLERANCE),
        ("threads", threads, THREAD_TOLERANCE),
    ] {
        if span.rise() > tolerance || span.end > span.start + tolerance {
            failures.push(format!(
                "Manifold's open {name} rose from {} to {} (end {}), more than {tolerance}",
                span.start, span.max, span.end
            ));
        }
    }
    let children = children(samples, upstreams, &mut failures);
    let json = json!({
        "samples": samples.len(),
        "rss_kib": {
            "start": rss.start, "max": rss.max, "end": rss.end,
            "slope_kib_per_min_first_half": halves[0].map(round),
            "slope_kib_per_min_second_half": halves[1].map(round),
        },
        "fds": with_tolerance(fds, FD_TOLERANCE),
        "threads": with_tolerance(threads, THREAD_TOLERANCE),
        "upstream_processes": children,
        "cpu": cpu(&after),
    });
    Figures { json, failures }
}

fn with_tolerance(span: Span, tolerance: u64) -> Value {
    let mut v = span.to_json();
    v["tolerance"] = json!(tolerance);
    v
}

/// The upstream processes: always `upstreams` of them, the same ones, none a zombie.
fn children(samples: &[Sample], upstreams: usize, failures: &mut Vec<String>) -> Value {
    let first = samples
        .first()
        .map(|s| s.children.clone())
        .unwrap_or_default();
    let counts: Vec<usize> = samples.iter().map(|s| s.children.len()).collect();
    let (min, max) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    let changed = samples.iter().filter(|s| s.children != first).count();
    let zombies = samples.iter().map(|s| s.zombies).max().unwrap_or(0);
    if min != upstreams || max != upstreams || changed > 0 || zombies > 0 {
        failures.push(format!(
            "upstream processes: {min} to {max} (expected {upstreams}), {changed} samples with \
             other pids than the first, at most {zombies} zombies"
        ));
    }
    json!({
        "expected": upstreams,
        "min": min,
        "max": max,
        "samples_with_other_pids": changed,
        "zombies_max": zombies,
        "pids": first,
    })
}

/// Manifold's CPU use after the warm-up, in percent of one CPU.
fn cpu(after: &[&Sample]) -> Value {
    match (after.first(), after.last()) {
        (Some(a), Some(b)) if b.t_s > a.t_s => {
            json!({ "percent_of_one_cpu": round(100.0 * (b.cpu_s - a.cpu_s) / (b.t_s - a.t_s)) })
        }
        _ => json!({ "percent_of_one_cpu": null }),
    }
}

/// The least-squares slope of RSS over time, in KiB a minute; `None` for fewer than two
/// samples.
fn slope_per_min<'a>(samples: impl Iterator<Item = &'a &'a Sample>) -> Option<f64> {
    let points: Vec<(f64, f64)> = samples.map(|s| (s.t_s / 60.0, s.rss_kib as f64)).collect();
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| round2(sxy / sxx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64, rss_kib: u64, fds: u64, threads: u64, children: &[u32]) -> Sample {
        Sample {
            t_s,
            rss_kib,
            fds,
            threads,
            cpu_s: t_s / 2.0,
            children: children.iter().copied().collect(),
            zombies: 0,
        }
    }

    #[test]
    fn a_flat_process_passes_and_its_slope_is_measured() {
        // Memory rises by 60 KiB a minute; the first sample is in the warm-up.
        let samples: Vec<Sample> = (0..=120)
            .map(|t| at(f64::from(t), 1000 + t as u64, 40, 9, &[7, 8]))
            .collect();
        let f = figures(&samples, 1.0, 2);
        assert!(f.failures.is_empty(), "{:?}", f.failures);
        assert_eq!(f.json["rss_kib"]["start"], 1001);
        assert_eq!(f.json["rss_kib"]["end"], 1120);
        assert_eq!(f.json["rss_kib"]["slope_kib_per_min_second_half"], 60.0);
        assert_eq!(f.json["fds"]["max"], 40);
        assert_eq!(f.json["cpu"]["percent_of_one_cpu"], 50.0);
    }

    #[test]
    fn growing_descriptors_threads_and_changed_children_fail() {
        let samples = vec![
            at(0.0, 1, 40, 9, &[7, 8]),
            at(1.0, 1, 40, 9, &[7, 8]),
            at(2.0, 1, 60, 20, &[7, 9]),
        ];
        let f = figures(&samples, 0.5, 2);
        assert_eq!(f.failures.len(), 3, "{:?}", f.failures);
        let one = vec![at(0.0, 1, 40, 9, &[7])];
        assert_eq!(figures(&one, 0.0, 2).failures.len(), 1);
    }

    #[test]
    fn samples_this_process() {
        let s = take(std::process::id(), Instant::now()).unwrap();
        assert!(s.rss_kib > 0 && s.fds >= 3 && s.threads >= 1);
    }
}
