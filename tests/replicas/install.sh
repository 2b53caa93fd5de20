#!/usr/bin/env bash
# A real HAProxy for the replica tests: Debian's package and the libraries it links, downloaded
# and unpacked under tests/.cache/haproxy. Nothing is installed system-wide and no service is
# started; the tests start their own HAProxy on a free loopback port (tests/interop/replicas.py).
#
# The unpacked binary needs its libraries from the same tree:
#   LD_LIBRARY_PATH="$(echo tests/.cache/haproxy/usr/lib/*-linux-gnu)" tests/.cache/haproxy/usr/sbin/haproxy -v
set -euo pipefail
cd "$(dirname "$0")/../.."

dir="$PWD/tests/.cache/haproxy"

if command -v haproxy >/dev/null 2>&1; then
    echo "haproxy is on PATH: $(command -v haproxy)"
    exit 0
fi
if [ -e "$dir/usr/sbin/haproxy" ]; then
    echo "haproxy is unpacked under tests/.cache/haproxy"
    exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# haproxy links Lua and the OpenTracing wrapper, which a minimal system lacks.
(cd "$tmp" && apt-get download haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1)
mkdir -p "$dir"
for deb in "$tmp"/*.deb; do
    dpkg -x "$deb" "$dir"
done

libs=("$dir"/usr/lib/*-linux-gnu)
LD_LIBRARY_PATH="${libs[0]}" "$dir/usr/sbin/haproxy" -v | sed -n 1p
