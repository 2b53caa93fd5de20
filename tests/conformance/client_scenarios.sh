#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios other than `auth/*` (those are
# client_auth.sh's), each played once by the official Python SDK client (the reference) and
# once by Manifold as the client of the suite's mock server, compared scenario by scenario.
# Manifold is an MCP client to every upstream: what it sends them (headers, request metadata,
# request state, reconnection after an SSE stream ends, schemas kept verbatim, skills) is held
# to the same checks as the SDK's client.
#
#   1. Installs what client_auth.sh installs, each only when missing or out of date.
#   2. Runs every such client scenario of three sets:
#        2025-11-25   the scenarios of that revision, at its wire (the release's; those only
#                     the prerelease has, with the prerelease);
#        2026-07-28   the prerelease's scenarios of that revision, at its wire;
#        extension    the prerelease's extension scenarios (Skills: sep-2640-client-*).
#      with two clients, which take the same steps as a host (client_host.py):
#        reference    client_reference.py: the SDK's client at the mock server;
#        manifold     client_through_manifold.py: the mock server as Manifold's one upstream
#                     over Streamable HTTP, the SDK's client as the host through Manifold.
#   3. Prints a table (scenario, set, reference, manifold) and fails when a scenario that the
#      reference passes fails through Manifold and is not listed in
#      expected-differences-client.txt, or when a listed scenario no longer differs.
#
# Usage: tests/conformance/client_scenarios.sh [--reference-only] [SCENARIO...]
#
#   --reference-only  only the reference client: no Manifold, no comparison
#   SCENARIO...       just these scenarios, in whichever set has them (default: all of them)
#
# CLIENT_SETS=2025-11-25,2026-07-28,extension chooses the sets (default: all three).
# CLIENT_PARALLEL=N runs N scenarios at a time (default 2); the table keeps the suite's order.
#
# Results stay in target/conformance/client/{reference,manifold}/SET/ (client_harness.sh says
# what each holds). MANIFOLD_BIN: the binary (default: target/debug/manifold; build it first).
set -euo pipefail

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/client_harness.sh"
harness=client
title="client conformance"
what="client scenario"
results="$repo/target/conformance/client"
differences="$here/expected-differences-client.txt"
reference_script="$here/client_reference.py"
manifold_script="$here/client_through_manifold.py"
parallel="${CLIENT_PARALLEL:-2}"
known_sets="2025-11-25,$modern,extension"
default_sets="$known_sets"
not_auth='!^auth/'

# The scenarios of 2025-11-25 the release knows run with the release; any other with the
# prerelease at that revision.
released() {
    client_scenarios "$entry" "$not_auth" -- 2025-11-25 | grep -qx -- "$1"
}

suite_of() {
    case "$1" in
        2025-11-25)
            if released "$2"; then
                echo "$entry client --spec-version 2025-11-25"
            else
                echo "$entry_modern client --spec-version 2025-11-25"
            fi
            ;;
        "$modern") echo "$entry_modern client --spec-version $modern" ;;
        extension) echo "$entry_modern client" ;;
    esac
}

scenarios_of() {
    case "$1" in
        2025-11-25)
            {
                client_scenarios "$entry" "$not_auth" -- 2025-11-25
                client_scenarios "$entry_modern" "$not_auth" -- 2025-11-25
            } | awk '!seen[$0]++'
            ;;
        "$modern") client_scenarios "$entry_modern" "$not_auth" -- "$modern" ;;
        extension) client_scenarios "$entry_modern" "$not_auth" -- "[extension]" ;;
    esac
}

harness_main CLIENT_SETS "$@"
