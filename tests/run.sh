#!/usr/bin/env bash
# The whole test suite, from a fresh clone: lints, unit and integration tests against the
# in-repo fixtures, interop tests against real third-party peers, and the official MCP
# conformance suite (each installed here from the pinned versions in tests/interop/ and
# tests/conformance/). Needs cargo, python3 and npm; nothing else by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

# A one-off build: incremental compilation state would only take disk space.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Each step says how long the run has taken so far, so a slow part shows in CI's log.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "format and lints"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build (the fixture server is a crate of its own; tests run its binary)"
cargo build --workspace --locked

step "install Prometheus (Debian package, unpacked under tests/.cache: no service is started)"
# The prometheus test evaluates every dashboard query with a real Prometheus. The package is
# unpacked rather than installed, so that no system service starts listening on this machine.
prom_dir="$PWD/tests/.cache/prometheus"
if ! command -v prometheus >/dev/null 2>&1 && [ ! -x "$prom_dir/usr/bin/prometheus" ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    mkdir -p "$prom_dir"
    (cd "$prom_dir" && apt-get download prometheus && dpkg -x prometheus_*.deb . && rm -f prometheus_*.deb)
fi
export PATH="$prom_dir/usr/bin:$PATH"

step "install redis-server (Debian packages, unpacked under tests/.cache: no service is started)"
# The Redis limit backend's tests start their own server on a loopback port.
bash tests/redis/install.sh

step "install HAProxy (Debian package, unpacked under tests/.cache: no service is started)"
# The replica tests run three Manifold processes behind the shipped HAProxy configuration.
bash tests/replicas/install.sh

step "install openssl (the TLS tests make their certificates with it)"
if ! command -v openssl >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    $sudo apt-get install -y openssl
fi

step "unit and integration tests (fixture upstreams over stdio and HTTP, rmcp client)"
cargo test --workspace --locked

step "bounded fuzz pass: each fuzz target for 30000 runs, regression inputs first (FUZZING.md)"
# libFuzzer itself is C++, compiled by the libfuzzer-sys crate: a C++ compiler is installed
# when there is none.
if ! command -v c++ >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    $sudo apt-get install -y g++
fi
# The fuzz package is a workspace of its own with its own target folder: its targets are built
# with coverage instrumentation (libFuzzer on the stable toolchain) that no other build shares.
# Each run first executes every checked-in seed and regression input through the target's
# checks (what `cargo test --manifest-path fuzz/Cargo.toml` replays without the engine, which
# would cost a second build of the same code), then fuzzes on.
CARGO_TARGET_DIR="$PWD/fuzz/target" bash fuzz/run.sh all 30000 -verbosity=0

step "install interop peers (PyPI: mcp, mcp-server-time, requests, FastAPI, selenium; npm: server-everything, server-memory, server-filesystem, oidc-provider, the TypeScript SDK server, Prism with the Petstore and GitHub REST descriptions)"
bash tests/interop/install.sh

step "install Chromium and chromedriver (Debian packages: the web console's browser tests drive them)"
# Installed rather than unpacked under tests/.cache: Chromium needs some hundred shared
# libraries of its own (GTK, NSS, fonts, ...) that only apt resolves. Neither starts a service.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver
fi

step "deployment kit: Dockerfile, Kubernetes manifests, Prometheus and Grafana config (offline; tools into .venv)"
MANIFOLD_BIN="$PWD/target/debug/manifold" bash tests/deploy/check.sh

step "interop: official Python SDK client against Manifold fronting real servers, stdio and HTTP; the web console in headless Chromium"
MANIFOLD_BIN="$PWD/target/debug/manifold" .venv/bin/python -m pytest tests/interop -q --durations=12

step "conformance: the official suite against the fixture and the SDK's skills server directly and through Manifold"
bash tests/conformance/run.sh

# Manifold as an OAuth client of its upstreams, held to the suite's client authorization
# scenarios beside the Python SDK's own client (two scenarios at a time).
step "conformance, client side: the suite's auth scenarios with the SDK's client and through Manifold"
bash tests/conformance/client_auth.sh

# Manifold as the MCP client of its upstreams, held to the suite's other client scenarios
# (headers, request metadata and state, SSE retry, schemas, skills) beside the SDK's client.
step "conformance, client side: the suite's other client scenarios with the SDK's client and through Manifold"
bash tests/conformance/client_scenarios.sh

step "all passed"
