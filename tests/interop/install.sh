#!/usr/bin/env bash
# Installs the third-party peers and clients of Manifold's interoperability tests:
#   <repo>/.venv                   Python venv with the pinned packages of requirements.txt
#                                  (official MCP Python SDK client, mcp-server-time, pytest,
#                                  requests, FastAPI for openapi_service.py, selenium
#                                  for the web console's browser tests, which also need
#                                  Debian's chromium and chromium-driver: tests/run.sh
#                                  installs those)
#   tests/interop/node_modules     @modelcontextprotocol/server-everything, server-memory and
#                                  server-filesystem (the last two for the tool search
#                                  benchmark's real catalogs), oidc-provider (the OAuth
#                                  authorization server of the upstream credential tests),
#                                  @modelcontextprotocol/server (the TypeScript SDK whose
#                                  ext/skills builds skills_server.mjs), and for the OpenAPI
#                                  tests @stoplight/prism-cli (the mock server that validates
#                                  every request), @readme/oas-examples (Petstore) and
#                                  @octokit/openapi (GitHub's REST description), from
#                                  package-lock.json
#
# Idempotent: each half is skipped when its stamp file matches the current pin file, so a
# second run takes well under a second. Needs python3 >= 3.10 (with the venv module), Node.js
# >= 20 and npm, and access to PyPI and the npm registry. Non-interactive (fine under CI=true).
#
# Then run:  .venv/bin/python -m pytest tests/interop -q
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$repo/.venv"

die() {
    echo "install.sh: error: $*" >&2
    exit 1
}

# --- Python ----------------------------------------------------------------------------------
python="${PYTHON:-python3}"
command -v "$python" >/dev/null 2>&1 || die "$python not found; install Python >= 3.10 (Debian: apt-get install python3 python3-venv)"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "$("$python" --version 2>&1) is too old: the mcp SDK needs Python >= 3.10"

req="$here/requirements.txt"
stamp="$venv/.interop-requirements.txt"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp" \
    && [ -x "$venv/bin/mcp-server-time" ]; then
    echo "install.sh: $venv is up to date"
else
    if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
        # Missing, or left half-made (no pip) by an earlier failed run: (re)create it.
        echo "install.sh: creating $venv"
        "$python" -m venv --clear "$venv" \
            || die "'$python -m venv' failed (Debian/Ubuntu: apt-get install python3-venv), or remove a broken $venv"
    fi
    echo "install.sh: installing $req into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" \
        || die "pip install -r $req failed (is PyPI reachable?)"
    [ -x "$venv/bin/mcp-server-time" ] || die "mcp-server-time missing from $venv/bin after pip install"
    cp "$req" "$stamp"
fi

# --- Node ------------------------------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node not found; install Node.js >= 20 (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
# The locked tree (e.g. @hono/node-server, a dependency of the MCP TypeScript SDK, and the SDK's
# v2 @modelcontextprotocol/server) needs >= 20.
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
    || die "node $(node --version) is too old: the pinned server-everything needs Node.js >= 20"
# Prism is pinned at 5.14.2, the last release that runs on Node.js 20 (5.15.10 and later need
# 24.14); package.json's overrides hold its own packages (prism-core, prism-http,
# prism-http-server) at the releases that go with it, since their later ones need 24 too.

lock="$here/package-lock.json"
[ -f "$lock" ] || die "$lock is missing"
entry="$here/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
oidc="$here/node_modules/oidc-provider/package.json"
skills="$here/node_modules/@modelcontextprotocol/server/dist/ext/skills/index.mjs"
prism="$here/node_modules/@stoplight/prism-cli/dist/index.js"
petstore="$here/node_modules/@readme/oas-examples/3.0/json/petstore.json"
github="$here/node_modules/@octokit/openapi/generated/api.github.com.json"
nstamp="$here/node_modules/.interop-package-lock.json"
if [ -f "$entry" ] && [ -f "$oidc" ] && [ -f "$skills" ] && [ -f "$prism" ] && [ -f "$petstore" ] \
    && [ -f "$github" ] && [ -f "$nstamp" ] && cmp -s "$lock" "$nstamp"; then
    echo "install.sh: $here/node_modules is up to date"
else
    echo "install.sh: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) \
        || die "npm ci failed in $here (is the npm registry reachable?)"
    [ -f "$entry" ] || die "$entry missing after npm ci"
    [ -f "$oidc" ] || die "$oidc missing after npm ci"
    [ -f "$skills" ] || die "$skills missing after npm ci"
    for f in "$prism" "$petstore" "$github"; do
        [ -f "$f" ] || die "$f missing after npm ci"
    done
    # @octokit/openapi also ships the GitHub Enterprise descriptions (about 300 MB); the tests
    # use only api.github.com's, as published and fully dereferenced, so the rest is removed.
    rm -f "$here/node_modules/@octokit/openapi/generated/"{ghec,ghes-}*.json
    cp "$lock" "$nstamp"
fi

echo "install.sh: done"
