#!/usr/bin/env bash
# A real redis-server for the Redis limit backend's tests: Debian's packages, downloaded and
# unpacked under tests/.cache/redis. Nothing is installed system-wide and no service is started;
# the tests start their own server on a free loopback port
# (crates/manifold-testkit/src/redis_server.rs).
#
# The unpacked binary needs its libraries (liblzf, libjemalloc) from the same tree:
#   LD_LIBRARY_PATH="$(echo tests/.cache/redis/usr/lib/*-linux-gnu)" tests/.cache/redis/usr/bin/redis-server
# (the test support sets this itself).
set -euo pipefail
cd "$(dirname "$0")/../.."

dir="$PWD/tests/.cache/redis"

if command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is on PATH: $(command -v redis-server)"
    exit 0
fi
if [ -e "$dir/usr/bin/redis-server" ]; then
    echo "redis-server is unpacked under tests/.cache/redis"
    exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# redis-server's binary is a symlink into redis-tools; liblzf and libjemalloc are its libraries.
(cd "$tmp" && apt-get download redis-server redis-tools liblzf1 libjemalloc2)
mkdir -p "$dir"
for deb in "$tmp"/*.deb; do
    dpkg -x "$deb" "$dir"
done

libs=("$dir"/usr/lib/*-linux-gnu)
LD_LIBRARY_PATH="${libs[0]}" "$dir/usr/bin/redis-server" --version
