#!/usr/bin/env bash
# The whole test suite, from a fresh clone: lints, unit and integration tests against the
# in-repo fixtures, interop tests against real third-party peers, and the official MCP
# conformance suite (each installed here from the pinned versions in tests/interop/ and
# tests/conformance/). Needs cargo, python3 and npm; nothing else by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build (the fixture server is a crate of its own; tests run its binary)"
cargo build --workspace --locked

step "install Prometheus (Debian package; the prometheus test evaluates dashboards/ with it)"
if ! command -v prometheus >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
fi

step "unit and integration tests (fixture upstreams over stdio and HTTP, rmcp client)"
cargo test --workspace --locked

step "install interop peers (PyPI: mcp, mcp-server-time; npm: server-everything)"
bash tests/interop/install.sh

step "interop: official Python SDK client against Manifold fronting real servers, stdio and HTTP"
MANIFOLD_BIN="$PWD/target/debug/manifold" .venv/bin/python -m pytest tests/interop -q

step "conformance: the official suite against the fixture directly and through Manifold"
bash tests/conformance/run.sh
