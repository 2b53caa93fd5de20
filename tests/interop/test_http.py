"""Interop over HTTP, both ways: the official MCP Python SDK client talks to Manifold over
Streamable HTTP and over the 2024-11-05 HTTP+SSE transport, while Manifold reaches
@modelcontextprotocol/server-everything run in its own `streamableHttp` and `sse` modes as
HTTP upstreams (and mcp-server-time over stdio). Any host transport reaches any upstream
transport.

server-everything listens on every interface by default; it is started with loopback.cjs
preloaded, which binds it to 127.0.0.1 and reports the port it got.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, MCPError
from mcp import types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from conftest import (
    EVERYTHING_JS,
    HERE,
    REQUEST_TIMEOUT_S,
    START_TIMEOUT_S,
    _check_prerequisites,
    _initialized,
    _serving_http,
    _stop,
    _toml_str,
    _wait_for_line,
    time_server_bin,
)

pytestmark = pytest.mark.anyio

LOOPBACK = HERE / "loopback.cjs"


class Everything:
    """server-everything in one of its HTTP modes, on a loopback port."""

    def __init__(self, mode: str, tmp: Path):
        self.log = tmp / f"everything-{mode}.stderr"
        self.proc = subprocess.Popen(
            ["node", "--require", str(LOOPBACK), str(EVERYTHING_JS), mode],
            env={**os.environ, "PORT": "0"},
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
            cwd=str(HERE),
        )
        m = _wait_for_line(self.proc, r"LISTENING 127\.0\.0\.1:(\d+)", self.log, f"server-everything {mode}")
        self.port = int(m.group(1))


@pytest.fixture(scope="module")
def manifold_http() -> Iterator[str]:
    """Manifold serving HTTP in front of server-everything over Streamable HTTP, over
    HTTP+SSE (named, and found by the fallback), and mcp-server-time over stdio. Yields the
    base URL."""
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-http-") as tmp_name:
        tmp = Path(tmp_name)
        streamable = Everything("streamableHttp", tmp)
        sse = Everything("sse", tmp)
        config = tmp / "manifold.toml"
        config.write_text(
            "[upstreams.ev]\n"
            f'url = "http://127.0.0.1:{streamable.port}/mcp"\n'
            'transport = "streamable-http"\n'
            "\n[upstreams.evsse]\n"
            f'url = "http://127.0.0.1:{sse.port}/sse"\n'
            'transport = "sse"\n'
            "\n[upstreams.evauto]\n"
            f'url = "http://127.0.0.1:{sse.port}/sse"\n'
            "\n[upstreams.time]\n"
            f"command = {_toml_str(time_server_bin())}\n"
            'args = ["--local-timezone", "UTC"]\n'
        )
        try:
            with _serving_http(bin_, config, tmp / "manifold.stderr") as port:
                yield f"http://127.0.0.1:{port}"
        finally:
            for p in (streamable, sse):
                _stop(p.proc)


@asynccontextmanager
async def session_over(transport: str, base: str) -> AsyncIterator[ClientSession]:
    if transport == "streamable-http":
        client = streamable_http_client(f"{base}/mcp")
    else:
        client = sse_client(f"{base}/sse")
    async with _initialized(client) as session:
        yield session


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_every_host_transport_reaches_every_upstream_transport(manifold_http: str, transport: str):
    async with session_over(transport, manifold_http) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        for prefix in ("ev", "evsse", "evauto"):
            assert f"{prefix}__echo" in names, sorted(names)
        assert "time__get_current_time" in names
        for prefix in ("ev", "evsse", "evauto"):
            r = await s.call_tool(f"{prefix}__echo", {"message": f"via {prefix}"})
            assert text_of(r) == f"Echo: via {prefix}", r
        r = await s.call_tool("ev__get-sum", {"a": 20, "b": 22})
        assert "42" in text_of(r), r
        r = await s.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert "UTC" in text_of(r), r


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_resources_through_an_http_upstream(manifold_http: str, transport: str):
    async with session_over(transport, manifold_http) as s:
        uri = "ev+demo://resource/static/document/architecture.md"
        resources = {str(r.uri) for r in (await s.list_resources()).resources}
        assert uri in resources, sorted(resources)[:10]
        read = await s.read_resource(uri)
        assert str(read.contents[0].uri) == uri
        with pytest.raises(MCPError):
            await s.read_resource("ev+demo://resource/static/document/nope.md")


async def test_progress_from_an_http_upstream_reaches_the_host_with_its_own_token(manifold_http: str):
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with session_over("streamable-http", manifold_http) as s:
        r = await s.call_tool(
            "ev__trigger-long-running-operation",
            {"duration": 1, "steps": 3},
            progress_callback=on_progress,
        )
        assert "completed" in text_of(r).lower(), r
    assert seen == sorted(seen) and len(seen) == 3, seen


async def test_concurrent_sessions_share_the_upstreams(manifold_http: str):
    async def one(i: int) -> str:
        async with session_over("streamable-http", manifold_http) as s:
            r = await s.call_tool("ev__echo", {"message": f"s{i}"})
            return text_of(r)

    results: list[str] = []

    async def run(i: int) -> None:
        results.append(await one(i))

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(run, i)
    assert sorted(results) == sorted(f"Echo: s{i}" for i in range(8))
