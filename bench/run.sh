#!/usr/bin/env bash
# The benchmark command: release build, then manifold-load's end-to-end scenarios (Manifold
# versus the same fixture upstream called directly, interleaved rounds, medians and spreads).
# Writes bench-results/latest.json and prints a table with the PERF.md goals beside each figure.
#   bench/run.sh                 every scenario
#   bench/run.sh latency         one scenario (latency, throughput, list, big, rss)
#   bench/run.sh all --rounds 9  extra flags go to manifold-load (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
scenario="${1:-all}"
shift || true
cargo build --release --workspace --locked
target/release/manifold-load "$scenario" --out bench-results/latest.json "$@"
