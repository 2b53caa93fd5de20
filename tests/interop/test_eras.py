"""Manifold's upstream side in the stateless era (2026-07-28), against servers of the official
Python SDK, which serve both eras: mcp-server-time over stdio, and dual_era_server.py over
Streamable HTTP (whose HTTP entry refuses a request whose metadata headers are missing or
disagree with its body) and over stdio. Manifold probes each with `server/discover`, speaks
the stateless era to all (its log says so), and its hosts (here the SDK's client over
Streamable HTTP, of the session era) call their tools, hear their list changes and their
resources' updates (which reach Manifold on `subscriptions/listen` streams).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import types

from conftest import (
    HERE,
    Inbox,
    _check_prerequisites,
    _serving_http,
    _stop,
    _toml_str,
    _wait_for_line,
    http_host,
    time_server_bin,
)

pytestmark = pytest.mark.anyio

SERVER = HERE / "dual_era_server.py"
UPSTREAMS = ("time", "modern", "local")


@pytest.fixture(scope="module")
def manifold() -> Iterator[tuple[str, Path]]:
    """Manifold serving HTTP in front of mcp-server-time (stdio) and dual_era_server.py
    (Streamable HTTP): its URL and its log."""
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-eras-") as tmp:
        server_log = Path(tmp) / "stateless-server.stderr"
        server = subprocess.Popen(
            [sys.executable, str(SERVER)],
            stdout=subprocess.DEVNULL,
            stderr=server_log.open("w"),
            cwd=str(HERE),
        )
        try:
            m = _wait_for_line(server, r"LISTENING 127\.0\.0\.1:(\d+)", server_log, "dual_era_server.py")
            config = Path(tmp) / "manifold.toml"
            config.write_text(
                "[upstreams.time]\n"
                f"command = {_toml_str(time_server_bin())}\n"
                'args = ["--local-timezone", "UTC"]\n'
                "\n"
                "[upstreams.modern]\n"
                f'url = "http://127.0.0.1:{m.group(1)}/mcp"\n'
                "\n"
                "[upstreams.local]\n"
                f"command = {_toml_str(sys.executable)}\n"
                f'args = [{_toml_str(SERVER)}, "--stdio"]\n'
            )
            log = Path(tmp) / "manifold.stderr"
            with _serving_http(bin_, config, log) as port:
                for key in UPSTREAMS:
                    _wait_for_line(server, rf"ready upstream={key} ", log, f"upstream {key}")
                yield f"http://127.0.0.1:{port}/mcp", log
        finally:
            _stop(server)




def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_both_upstreams_are_spoken_to_in_the_stateless_era(manifold: tuple[str, Path]):
    _, log = manifold
    text = log.read_text()
    for key in UPSTREAMS:
        assert f'ready upstream={key} era="stateless" version=2026-07-28' in text, text[-4000:]


async def test_calls_reach_stateless_upstreams_with_the_headers_they_check(manifold: tuple[str, Path]):
    url, _ = manifold
    async with http_host(url) as s:
        now = json.loads(text_of(await s.call_tool("time__get_current_time", {"timezone": "UTC"})))
        assert now["timezone"] == "UTC", now
        assert text_of(await s.call_tool("modern__echo", {"text": "hello"})) == "hello"
        # `region` is annotated x-mcp-header: the server refuses the call without a matching
        # Mcp-Param-Region header.
        assert text_of(await s.call_tool("modern__where", {"region": "Île-de-France"})) == "in Île-de-France"
        seen = json.loads(text_of(await s.call_tool("modern__http_log", {})))
    # Each request a POST of its own with its revision, no session, no GET stream; the first
    # one the probe.
    assert seen[0]["mcp_method"] == "server/discover", seen
    assert all(r["http"] == "POST" and r["session"] is None for r in seen), seen
    assert all(r["version"] == "2026-07-28" for r in seen), seen
    assert "initialize" not in {r["mcp_method"] for r in seen}, seen
    assert "subscriptions/listen" in {r["mcp_method"] for r in seen}, seen


@pytest.mark.parametrize("key", ["modern", "local"])
async def test_list_changes_of_a_stateless_upstream_reach_hosts(manifold: tuple[str, Path], key: str):
    url, _ = manifold
    inbox = Inbox()
    async with http_host(url, inbox) as s:
        assert text_of(await s.call_tool(f"{key}__add_tool", {"name": "extra"})) == "added"
        with anyio.fail_after(10):
            while not inbox.of(types.ToolListChangedNotification):
                await anyio.sleep(0.05)
        names = {t.name for t in (await s.list_tools()).tools}
        assert f"{key}__extra" in names, names
        assert text_of(await s.call_tool(f"{key}__extra", {})) == "extra here"


@pytest.mark.parametrize("key", ["modern", "local"])
async def test_resource_updates_of_a_stateless_upstream_reach_subscribers(manifold: tuple[str, Path], key: str):
    url, _ = manifold
    uri = f"{key}+test://counter"
    inbox = Inbox()
    async with http_host(url, inbox) as s:
        await s.subscribe_resource(uri)
        # The subscription reaches the upstream when Manifold opens its listen stream again
        # with the URI: changes before that are not heard, so the counter is bumped until one
        # is.
        with anyio.fail_after(10):
            while not inbox.of(types.ResourceUpdatedNotification):
                await s.call_tool(f"{key}__bump", {})
                await anyio.sleep(0.1)
        assert {str(n.params.uri) for n in inbox.of(types.ResourceUpdatedNotification)} == {uri}
        read = await s.read_resource(uri)
        assert int(read.contents[0].text) >= 1, read
