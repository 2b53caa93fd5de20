"""MCP Apps (extension `io.modelcontextprotocol/ui`) through the merge: two servers built on the
official SDK's `mcp.server.apps` (apps_server.py), each binding its tools to the same
`ui://clock/app.html`, fronted by Manifold over stdio and over Streamable HTTP, under the SDK
client declaring the extension, in the session era and in the stateless one.

Server "a" runs in the era Manifold probes for (the SDK answers server/discover: the stateless
era, which advertises its extensions), server "b" in the session era. Each tool's merged
`_meta.ui.resourceUri` must be a `ui://` URI that reads that server's own HTML.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import (
    STATELESS,
    _check_prerequisites,
    _serving_http,
    _toml_str,
    manifold_stdio_client,
    sdk_client,
    upstreams_settled,
)
from mcp import MCPError
from mcp.client import advertise

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
SERVER = HERE / "apps_server.py"
UI = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"
#: How the host reaches Manifold, and how its client connects: "legacy" initializes (the
#: session era), "auto" starts with server/discover (which Manifold answers: the stateless era).
WAYS = [("stdio", "legacy"), ("stdio", "auto"), ("http", "legacy"), ("http", "auto")]


def config(team: str = "") -> str:
    """Both servers; with `team`, the host is that team, which sees upstream "a" only."""
    py, server = _toml_str(sys.executable), _toml_str(SERVER)
    teams = f'[server]\nteam = "{team}"\n\n[teams.{team}]\nupstreams = ["a"]\n\n' if team else ""
    return (
        f'{teams}[upstreams.a]\ncommand = {py}\nargs = [{server}, "a"]\n\n'
        f'[upstreams.b]\ncommand = {py}\nargs = [{server}, "b"]\nera = "session"\n'
    )


@asynccontextmanager
async def apps_host(transport: str, mode: str, tmp: Path, team: str = "") -> AsyncIterator[Any]:
    """The SDK's `Client` in `mode`, declaring MCP Apps, on Manifold (over `transport`) in front
    of both servers, once both are ready."""
    apps = [advertise(UI, {"mimeTypes": [APP_MIME]})]
    log = tmp / "manifold.stderr"
    if transport == "stdio":
        async with manifold_stdio_client(config(team), mode, log, "a", "b", extensions=apps) as client:
            yield client
        return
    bin_ = _check_prerequisites()
    path = tmp / "manifold.toml"
    path.write_text(config())
    with _serving_http(bin_, path, log) as port:
        await upstreams_settled(log, "a", "b")
        async with sdk_client(f"http://127.0.0.1:{port}/mcp", mode, extensions=apps) as client:
            yield client


def ui_of(tool: types.Tool) -> dict:
    assert tool.meta and isinstance(tool.meta.get("ui"), dict), tool
    return tool.meta["ui"]


async def tools_of(client: Any) -> dict[str, types.Tool]:
    page = await client.list_tools()
    assert page.next_cursor is None, page
    return {t.name: t for t in page.tools}


@pytest.mark.parametrize("transport,mode", WAYS)
async def test_each_app_reads_its_own_servers_html(transport: str, mode: str, tmp_path: Path):
    async with apps_host(transport, mode, tmp_path) as client:
        assert (client.protocol_version == STATELESS) == (mode == "auto"), client.protocol_version
        # The extension an upstream advertises is advertised to the host.
        extensions = client.server_capabilities.extensions
        assert extensions and UI in extensions, client.server_capabilities
        tools = await tools_of(client)
        assert {"a__show_time", "a__tick", "b__show_time", "b__tick"} <= tools.keys(), tools.keys()
        uris = {key: ui_of(tools[f"{key}__show_time"])["resourceUri"] for key in ("a", "b")}
        assert uris == {"a": "ui://a/clock/app.html", "b": "ui://b/clock/app.html"}, uris
        # The resources are listed under the URIs the tools name, with their own _meta.ui.
        page = await client.list_resources()
        listed = {str(r.uri): r for r in page.resources}
        for key, uri in uris.items():
            assert uri in listed, listed.keys()
            assert listed[uri].mime_type == APP_MIME, listed[uri]
            assert listed[uri].meta == {"ui": {"prefersBorder": True}}, listed[uri]
            read = await client.read_resource(uri)
            (content,) = read.contents
            assert str(content.uri) == uri, content
            assert content.mime_type == APP_MIME, content
            assert isinstance(content, types.TextResourceContents), content
            assert f"<p id=server>{key}</p>" in content.text, content.text


@pytest.mark.parametrize("transport,mode", WAYS)
async def test_tools_reach_their_server_with_the_extension_declared(transport: str, mode: str, tmp_path: Path):
    async with apps_host(transport, mode, tmp_path) as client:
        for key in ("a", "b"):
            result = await client.call_tool(f"{key}__show_time", {})
            assert not result.is_error, result
            # Each server saw a client that declared MCP Apps: the stateless one through the
            # host's own capabilities, the session-era one through Manifold's initialize.
            assert result.content[0].text == f"{key}: 12:00 (apps=True)", result


@pytest.mark.parametrize("transport,mode", WAYS)
async def test_app_only_tools_are_listed_and_callable(transport: str, mode: str, tmp_path: Path):
    async with apps_host(transport, mode, tmp_path) as client:
        tools = await tools_of(client)
        for key in ("a", "b"):
            ui = ui_of(tools[f"{key}__tick"])
            assert ui == {"resourceUri": f"ui://{key}/clock/app.html", "visibility": ["app"]}, ui
            result = await client.call_tool(f"{key}__tick", {})
            assert not result.is_error, result
            assert result.content[0].text == f"{key}: tick", result


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_team_that_does_not_see_a_server_sees_none_of_its_apps(mode: str, tmp_path: Path):
    async with apps_host("stdio", mode, tmp_path, team="only-a") as client:
        tools = await tools_of(client)
        assert {"a__show_time", "a__tick"} <= tools.keys() and not any(n.startswith("b__") for n in tools), tools
        page = await client.list_resources()
        assert [str(r.uri) for r in page.resources] == ["ui://a/clock/app.html"], page
        read = await client.read_resource("ui://a/clock/app.html")
        assert "<p id=server>a</p>" in read.contents[0].text, read
        # The other server's app reads as unknown, as if it did not exist (resource not found:
        # -32002 in the session era, -32602 in the stateless one).
        with pytest.raises(MCPError) as refused:
            await client.read_resource("ui://b/clock/app.html")
        assert refused.value.code == (-32602 if mode == "auto" else -32002), refused.value
