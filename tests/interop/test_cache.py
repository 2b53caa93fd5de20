"""Interop: Manifold's result cache in front of @modelcontextprotocol/server-everything, driven
by the official MCP Python SDK client over stdio, counted on Manifold's /metrics (admin
listener).

server-everything annotates `echo` readOnlyHint: true, openWorldHint: false, so `cache` on the
upstream keeps it; `toggle-simulated-logging` is readOnlyHint: false, so it is never kept (and
never counted as a hit or a miss). `resource_cache` keeps resources/read answers.

Then a stateless-era upstream on the official Python SDK (dual_era_server.py), whose answers
carry the SDK's default hints (ttlMs 0, cacheScope "private"): the configured rule outweighs
them, and a resources/updated on its subscriptions/listen stream drops the entry.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from conftest import EVERYTHING_JS, START_TIMEOUT_S, _toml_str, all_resources, all_tools, manifold_stdio

pytestmark = pytest.mark.anyio

UPSTREAM = "everything"
ECHO = f"{UPSTREAM}__echo"
WRITER = f"{UPSTREAM}__toggle-simulated-logging"

CONFIG = (
    f"[upstreams.{UPSTREAM}]\n"
    'command = "node"\n'
    f'args = [{_toml_str(EVERYTHING_JS)}, "stdio"]\n'
    'cache = { ttl = "60s" }\n'
    'resource_cache = { ttl = "60s" }\n'
)

COUNTERS = ("manifold_cache_hits_total", "manifold_cache_misses_total")
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


async def admin_port(stderr: Path) -> int:
    """The admin port Manifold logged (`--admin 127.0.0.1:0`)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = re.search(r"admin listening on 127\.0\.0\.1:(\d+)", stderr.read_text(errors="replace"))
        if m:
            return int(m.group(1))
        await anyio.sleep(0.05)
    raise AssertionError("Manifold never logged its admin port")


async def roots_asked(stderr: Path) -> None:
    """Waits until server-everything has asked for the host's roots, which it does 350 ms after
    `initialized`. Over stdio an upstream cannot say which request a request of its own belongs
    to, so Manifold takes it as part of the host request in flight then, if there is one; and
    an answer during which the upstream asked the host something is never cached. A read that
    happened to be in flight at that moment would rightly not be kept, so the counts below
    start once that exchange is over."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if "request roots" in stderr.read_text(errors="replace"):
            return
        await anyio.sleep(0.05)
    raise AssertionError("server-everything never asked for the host's roots")


def cache_counts(port: int) -> dict[tuple[str, str], float]:
    """{(counter, cache): value} of the hits and misses of this upstream's caches (0 if absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    counts = {(name, cache): 0.0 for name in COUNTERS for cache in ("tools", "resources")}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(1) not in COUNTERS:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("upstream") == UPSTREAM and labels.get("cache") in ("tools", "resources"):
            counts[(m.group(1), labels["cache"])] += float(m.group(3))
    return counts


def expect(hits_tools: int, misses_tools: int, hits_resources: int, misses_resources: int) -> dict[tuple[str, str], float]:
    return {
        ("manifold_cache_hits_total", "tools"): hits_tools,
        ("manifold_cache_misses_total", "tools"): misses_tools,
        ("manifold_cache_hits_total", "resources"): hits_resources,
        ("manifold_cache_misses_total", "resources"): misses_resources,
    }


async def assert_counts(port: int, expected: dict[tuple[str, str], float]) -> None:
    """Waits (bounded) for the counters to reach `expected`, then asserts they are exactly it."""
    deadline = time.monotonic() + START_TIMEOUT_S
    seen = cache_counts(port)
    while seen != expected and time.monotonic() < deadline:
        await anyio.sleep(0.1)
        seen = cache_counts(port)
    assert seen == expected


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_read_only_tools_and_resources_are_answered_from_the_cache():
    async with manifold_stdio(CONFIG, ["--admin", "127.0.0.1:0"]) as (s, _init, stderr):
        port = await admin_port(stderr)
        await roots_asked(stderr)
        tools = {t.name: t for t in await all_tools(s)}
        # What the cache decides by, as the pinned server-everything declares it.
        echo = tools[ECHO].annotations
        assert echo is not None and echo.read_only_hint is True and echo.open_world_hint is False, echo
        writer = tools[WRITER].annotations
        assert writer is not None and writer.read_only_hint is False, writer

        first = await s.call_tool(ECHO, {"message": "one"})
        again = await s.call_tool(ECHO, {"message": "one"})
        other = await s.call_tool(ECHO, {"message": "two"})
        assert [text_of(first), text_of(again), text_of(other)] == ["Echo: one", "Echo: one", "Echo: two"]
        assert again.content == first.content

        uri = next(str(r.uri) for r in await all_resources(s) if "/static/" in str(r.uri))
        read = await s.read_resource(uri)
        read_again = await s.read_resource(uri)
        assert read_again.contents == read.contents
        await assert_counts(port, expect(hits_tools=1, misses_tools=2, hits_resources=1, misses_resources=1))

        # A tool that is not read-only reaches the upstream every time and is never counted.
        started = text_of(await s.call_tool(WRITER, {}))
        stopped = text_of(await s.call_tool(WRITER, {}))
        assert started.startswith("Started") and stopped.startswith("Stopped"), (started, stopped)
        await assert_counts(port, expect(hits_tools=1, misses_tools=2, hits_resources=1, misses_resources=1))


# --- A stateless-era upstream built on the official Python SDK -------------------------------

#: dual_era_server.py over stdio: Manifold's default `era = "auto"` finds it speaks 2026-07-28.
#: Its resources/read answers carry the SDK's default hints (ttlMs 0, cacheScope "private"),
#: which the operator's rule outweighs.
SDK_UPSTREAM = "sdk"
SDK_CONFIG = (
    f"[upstreams.{SDK_UPSTREAM}]\n"
    f"command = {_toml_str(sys.executable)}\n"
    f"args = [{_toml_str(Path(__file__).parent / 'dual_era_server.py')}, \"--stdio\"]\n"
    'resource_cache = { ttl = "60s", scope = "shared" }\n'
)


async def read_counter(s: Any, uri: str) -> str:
    contents = (await s.read_resource(uri)).contents
    return "".join(getattr(c, "text", "") for c in contents)


async def test_a_rule_outweighs_an_sdk_upstreams_default_hints_and_its_updates_drop_entries():
    async with manifold_stdio(SDK_CONFIG, ["--admin", "127.0.0.1:0"]) as (s, _init, stderr):
        port = await admin_port(stderr)
        uri = next(str(r.uri) for r in await all_resources(s) if str(r.uri).endswith("test://counter"))
        assert [await read_counter(s, uri) for _ in range(3)] == ["0", "0", "0"]
        deadline = time.monotonic() + START_TIMEOUT_S
        while sdk_resource_hits(port) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert sdk_resource_hits(port) == 2, "the SDK's ttlMs 0 / private outweighed the rule"
        # The update reaches Manifold on the upstream's subscriptions/listen stream once that
        # stream names the cached URI (it is opened again, asynchronously, when the URI is
        # first kept): from then on an update drops the entry, and the next read is the
        # upstream's. Bump until one update lands after the stream names the URI.
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            count = text_of(await s.call_tool(f"{SDK_UPSTREAM}__bump", {}))
            await anyio.sleep(0.2)
            seen = await read_counter(s, uri)
            if seen == count or time.monotonic() > deadline:
                break
        assert seen == count, "the cached counter outlived the upstream's resources/updated"
        # And the new answer is kept again: a second read is a hit with the same count.
        assert await read_counter(s, uri) == count


def sdk_resource_hits(port: int) -> float:
    """manifold_cache_hits_total of the SDK upstream's resource cache (0 if absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(1) != "manifold_cache_hits_total":
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("upstream") == SDK_UPSTREAM and labels.get("cache") == "resources":
            total += float(m.group(3))
    return total
