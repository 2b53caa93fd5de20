#!/usr/bin/env bash
# The benchmark command: release build, then every end-to-end scenario of manifold-load
# (Manifold versus the same fixture upstream called directly, interleaved rounds, medians).
# Writes bench-results/latest.json and prints a table with the PERF.md goals beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --locked
target/release/manifold-load "${1:-all}" --out bench-results/latest.json
