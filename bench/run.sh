#!/usr/bin/env bash
# The benchmark command: release build, then manifold-load's end-to-end scenarios (Manifold
# versus the same fixture upstream called directly, and over Streamable HTTP versus a peer
# gateway fronting the same fixture; interleaved rounds, medians and spreads).
# Writes bench-results/latest.json and prints tables with the goals beside each figure.
#   bench/run.sh                  every scenario
#   bench/run.sh latency          one scenario: latency, throughput, list, big, rss, telemetry,
#                                 policy, cache, http-latency, http-throughput, http-rss; `http`
#                                 runs the last three
#   bench/run.sh telemetry        what metrics and OTLP trace export cost a small stdio call
#   bench/run.sh policy           what teams and limits cost a small stdio call, in memory and in
#                                 a redis-server it starts (skipped without one: tests/redis/install.sh)
#   bench/run.sh cache            what the result cache costs and saves: hits, misses and plain
#                                 forwarding over stdio, hits/s against forwarded calls/s over HTTP
#   bench/run.sh soak             a steady mix of requests over HTTP for 30 s, every answer checked,
#                                 Manifold's memory, descriptors and threads sampled (not in `all`;
#                                 add --soak-seconds 600 for the 10-minute record)
#   bench/run.sh openapi          OpenAPI upstreams: GitHub's description loaded, converted and
#                                 served, and a converted call beside a direct HTTP request (not
#                                 in `all`; needs bash tests/interop/install.sh)
#   bench/run.sh http --quick     further flags go to manifold-load (see --help)
#   bench/run.sh http --no-peer   the HTTP scenarios without building or running the peer
# The peer (the mcp-proxy crate, pinned below) is built once into bench/.cache/mcp-proxy by
# `cargo install`, which needs the crates.io registry the first time; it is never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario="${1:-all}"
shift || true
peer_version=0.6.0
peer_root=bench/.cache/mcp-proxy
use_peer=1
args=()
for arg in "$@"; do
  if [ "$arg" = "--no-peer" ]; then use_peer=0; else args+=("$arg"); fi
done
case "$scenario" in
  all | http | http-*) ;;
  *) use_peer=0 ;;
esac
cargo build --release --workspace --locked
if [ "$use_peer" = 1 ]; then
  if [ ! -x "$peer_root/bin/mcp-proxy" ] ||
    ! grep -qs "\"mcp-proxy $peer_version " "$peer_root/.crates.toml"; then
    echo "bench/run.sh: building the peer, mcp-proxy $peer_version, into $peer_root (once)" >&2
    cargo install mcp-proxy --version "$peer_version" --locked --root "$peer_root"
  fi
  args+=(--peer "$peer_root/bin/mcp-proxy")
fi
target/release/manifold-load "$scenario" --out bench-results/latest.json ${args[@]+"${args[@]}"}
