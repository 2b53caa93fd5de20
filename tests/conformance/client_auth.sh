#!/usr/bin/env bash
# The official MCP conformance suite's client authorization scenarios (`auth/*`), each played
# once by the official Python SDK's own OAuth client (the reference) and once by Manifold as the
# client of the suite's mock MCP server, compared scenario by scenario.
#
#   1. Installs what run.sh installs (the pinned suites and Node.js 22 under
#      tests/conformance/node_modules) and the interop virtualenv (<repo>/.venv, with the SDK),
#      each only when missing or out of date.
#   2. Runs every `auth/*` client scenario of three sets:
#        2025-11-25   the release's scenarios of that revision, at its wire;
#        2026-07-28   the prerelease's requirement set of that revision, at its wire;
#        extension    the prerelease's extension scenarios (client credentials, enterprise-
#                     managed authorization, DPoP, workload identity).
#      with two clients:
#        reference    auth_reference_client.py: the SDK's OAuth providers;
#        manifold     auth_through_manifold.py: the mock server as Manifold's one upstream,
#                     the shared login through the admin address, a host through Manifold.
#   3. Prints a table (scenario, set, reference, manifold) and fails when a scenario that the
#      reference passes fails through Manifold and is not listed in
#      expected-differences-client-auth.txt, or when a listed scenario no longer differs. A
#      client that has no way to play a scenario reports it as such ("n/a").
#
# Usage: tests/conformance/client_auth.sh [--reference-only] [SCENARIO...]
#
#   --reference-only  only the reference client: no Manifold, no comparison
#   SCENARIO...       just these scenarios, in whichever set has them (default: all of them)
#
# CLIENT_AUTH_SETS=2025-11-25,2026-07-28,extension chooses the sets (default: all three).
# CLIENT_AUTH_PARALLEL=N runs N scenarios at a time (default 2); the table keeps the suite's
# order whatever order they finish in.
#
# A scenario passes when the suite exits 0 for it (it does not when the client exits non-zero,
# unless the scenario expects that) and its checks.json holds a SUCCESS and no FAILURE. Results stay in
# target/conformance/client-auth/{reference,manifold}/SET/: the suite's folder per scenario
# (auth/NAME-TIME/: checks.json, the client's stdout.txt and stderr.txt), its output
# (auth-NAME.log) and, for Manifold, Manifold's own log (auth-NAME.manifold.log). The harness
# itself is client_harness.sh, shared with client_scenarios.sh.
#
# Binaries: MANIFOLD_BIN (default: target/debug/manifold under the repository root; build it
# first). Every server listens on loopback only, every wait is bounded, and the clients stop
# every process they start.
set -euo pipefail

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/client_harness.sh"
harness=client-auth
title="client auth conformance"
what="auth client scenario"
results="$repo/target/conformance/client-auth"
differences="$here/expected-differences-client-auth.txt"
reference_script="$here/auth_reference_client.py"
manifold_script="$here/auth_through_manifold.py"
# Scenarios run this many at a time (default 2, one per core of the machine CI runs on).
parallel="${CLIENT_AUTH_PARALLEL:-2}"
known_sets="2025-11-25,$modern,extension"
default_sets="$known_sets"

# The suite for each set, with the options its scenarios run with.
suite_of() {
    case "$1" in
        2025-11-25) echo "$entry client --spec-version 2025-11-25" ;;
        "$modern") echo "$entry_modern client --spec-version $modern" ;;
        extension) echo "$entry_modern client" ;;
    esac
}

scenarios_of() {
    case "$1" in
        2025-11-25) client_scenarios "$entry" '^auth/' -- 2025-11-25 ;;
        "$modern") client_scenarios "$entry_modern" '^auth/' --requirements "$modern" ;;
        extension) client_scenarios "$entry_modern" '^auth/' -- "[extension]" ;;
    esac
}

harness_main CLIENT_AUTH_SETS "$@"
