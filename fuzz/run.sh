#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer on the stable toolchain and runs them for a fixed
# number of executions (FUZZING.md says why it is built this way).
#
#   fuzz/run.sh build                 build every target
#   fuzz/run.sh TARGET RUNS [ARGS...] run one target for RUNS executions
#   fuzz/run.sh all RUNS [ARGS...]    run every target for RUNS executions each
#
# ARGS are passed to libFuzzer (e.g. -max_total_time=60, -jobs=2). Each run starts from
# the checked-in seeds and regression inputs and keeps what it finds new in the working
# corpus fuzz/corpus/TARGET (not checked in); a failing input is written to
# fuzz/artifacts/TARGET/. The build goes to fuzz/target unless CARGO_TARGET_DIR says
# otherwise.
set -euo pipefail
cd "$(dirname "$0")"

targets=(host_envelope upstream_envelope sse line_buffer config names uris canonical)
triple="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

# Coverage instrumentation as cargo-fuzz adds it, without the sanitizer (`-Zsanitizer`
# needs a nightly compiler; these flags do not). `--target` keeps build scripts and proc
# macros, which run on the host, uninstrumented.
flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-sanitizer-coverage-stack-depth
    --cfg fuzzing
)

build() {
    RUSTFLAGS="${flags[*]}" CARGO_TARGET_DIR="$target_dir" \
        cargo build --locked --release --target "$triple" --bins
}

run() {
    local target="$1" runs="$2"
    shift 2
    local bin="$target_dir/$triple/release/$target"
    mkdir -p "corpus/$target" "artifacts/$target" "seeds/$target" "regressions/$target"
    "$bin" -runs="$runs" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="artifacts/$target/" "$@" \
        "corpus/$target" "seeds/$target" "regressions/$target"
}

case "${1:-}" in
    build) build ;;
    all)
        [ $# -ge 2 ] || { echo "usage: $0 all RUNS [ARGS...]" >&2; exit 2; }
        runs="$2"
        shift 2
        build
        for t in "${targets[@]}"; do
            echo "==> $t: $runs runs"
            run "$t" "$runs" "$@"
        done
        ;;
    *)
        [ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
        target="$1"
        runs="$2"
        shift 2
        [[ " ${targets[*]} " == *" $target "* ]] || { echo "unknown target: $target" >&2; exit 2; }
        build
        run "$target" "$runs" "$@"
        ;;
esac
