//! Criterion benches for Manifold's metrics beside the `prometheus-client` crate doing the same
//! work: recording one request duration into a histogram family keyed by the labels Manifold
//! uses (one thread, and two threads recording into the same series at once), and rendering a
//! scrape of 200 series of 20 buckets each. BENCHMARKS.md ("Metrics: why the exposition is
//! hand-written") quotes the figures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use manifold_telemetry::exposition::Exposition;
use manifold_telemetry::histogram::{Family, OPERATION_BUCKETS};
use manifold_telemetry::metrics::render_operations;
use manifold_telemetry::names::{self, label};
use manifold_telemetry::{OpLabels, Outcome};
use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::family::Family as PcFamily;
use prometheus_client::metrics::histogram::Histogram as PcHistogram;
use prometheus_client::registry::Registry;

/// How many series the families hold: 10 upstreams x 10 tools x 2 outcomes.
const SERIES: usize = 200;

/// The same label set as Manifold's, so both sides hash and compare the same key; only the
/// map, its hasher, its lock and the histogram differ.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct PcLabels(OpLabels);

impl EncodeLabelSet for PcLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let l = &self.0;
        (label::METHOD, l.method).encode(encoder.encode_label())?;
        (label::TOOL, l.tool.as_deref().unwrap_or("")).encode(encoder.encode_label())?;
        (label::UPSTREAM, l.upstream.as_deref().unwrap_or("")).encode(encoder.encode_label())?;
        (label::TEAM, &*l.team).encode(encoder.encode_label())?;
        (label::TRANSPORT, l.transport).encode(encoder.encode_label())?;
        (label::OUTCOME, l.outcome.label()).encode(encoder.encode_label())
    }
}

type PcOps = PcFamily<PcLabels, PcHistogram, fn() -> PcHistogram>;

fn pc_family() -> PcOps {
    PcFamily::new_with_constructor(|| PcHistogram::new(OPERATION_BUCKETS.iter().copied()))
}

/// The label sets of every series: what a router holds as `Arc`s (tool, upstream, team) and
/// clones into a fresh `OpLabels` for each request.
fn label_sets() -> Vec<OpLabels> {
    let team: Arc<str> = Arc::from("default");
    (0..SERIES)
        .map(|i| OpLabels {
            method: "tools/call",
            tool: Some(Arc::from(format!(
                "upstream{}__tool_{}",
                i / 20,
                (i / 2) % 10
            ))),
            upstream: Some(Arc::from(format!("upstream{}", i / 20))),
            team: Arc::clone(&team),
            transport: "stdio",
            outcome: if i % 2 == 0 {
                Outcome::Ok
            } else {
                Outcome::ToolError
            },
        })
        .collect()
}

/// A request's labels as the router builds them: the `Arc`s cloned.
fn labels_of(l: &OpLabels) -> OpLabels {
    OpLabels {
        method: l.method,
        tool: l.tool.clone(),
        upstream: l.upstream.clone(),
        team: Arc::clone(&l.team),
        transport: l.transport,
        outcome: l.outcome,
    }
}

/// Durations spread over the low buckets, as Manifold's own answers and fast tools are.
fn elapsed(i: u64) -> Duration {
    Duration::from_nanos(20_000 + (i % 64) * 7_919)
}

fn filled_manifold(sets: &[OpLabels]) -> Family<OpLabels> {
    let family = Family::new(OPERATION_BUCKETS);
    for (i, l) in sets.iter().enumerate() {
        family.observe(labels_of(l), elapsed(i as u64));
    }
    family
}

fn filled_pc(sets: &[OpLabels]) -> PcOps {
    let family = pc_family();
    for (i, l) in sets.iter().enumerate() {
        family
            .get_or_create(&PcLabels(labels_of(l)))
            .observe(elapsed(i as u64).as_secs_f64());
    }
    family
}

/// Runs `record` `iters` times on each of two threads started together, and returns the wall
/// time: the time per iteration is then what one recording costs while another thread records
/// into the same series.
fn two_threads(iters: u64, record: &(dyn Fn(u64) + Sync)) -> Duration {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                barrier.wait();
                for i in 0..iters {
                    record(i);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn recording(c: &mut Criterion) {
    let sets = label_sets();
    // A series in the middle of the map, as a request's would be.
    let one = &sets[SERIES / 2 + 1];

    let manifold = filled_manifold(&sets);
    let pc = filled_pc(&sets);
    let mut g = c.benchmark_group("record");
    g.bench_function("manifold, 1 thread", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            manifold.observe(labels_of(black_box(one)), elapsed(i));
        });
    });
    g.bench_function("prometheus-client, 1 thread", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            let key = PcLabels(labels_of(black_box(one)));
            pc.get_or_create(&key).observe(elapsed(i).as_secs_f64());
        });
    });
    g.bench_function("manifold, 2 threads, same series", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|i| {
                manifold.observe(labels_of(black_box(one)), elapsed(i));
            })
        });
    });
    g.bench_function("prometheus-client, 2 threads, same series", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|i| {
                let key = PcLabels(labels_of(black_box(one)));
                pc.get_or_create(&key).observe(elapsed(i).as_secs_f64());
            })
        });
    });
    g.finish();
}

fn scrape(c: &mut Criterion) {
    let sets = label_sets();
    let manifold = filled_manifold(&sets);
    let pc = filled_pc(&sets);
    let mut registry = Registry::default();
    registry.register(
        names::SERVER_OPERATION_DURATION.name,
        names::SERVER_OPERATION_DURATION.help,
        pc,
    );

    let mut g = c.benchmark_group("scrape, 200 series x 20 buckets");
    // What `Metrics::render` writes for each duration family.
    g.bench_function("manifold", |b| {
        b.iter(|| {
            let mut e = Exposition::new();
            render_operations(&mut e, &names::SERVER_OPERATION_DURATION, &manifold);
            black_box(e.finish())
        });
    });
    g.bench_function("prometheus-client", |b| {
        b.iter(|| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            black_box(text)
        });
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    targets = recording, scrape
}
criterion_main!(benches);
