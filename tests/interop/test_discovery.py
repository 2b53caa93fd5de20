"""Tool discovery (`[discovery] mode = "search"`) driven by the official Python SDK client over
Streamable HTTP: a session lists its pinned tools and `find_tools`; what it finds joins its own
typed tools/list (announced with list_changed) and is called with arguments checked against
the real schema; the budget evicts the least recently used found tool; a hidden tool is never
found; two sessions keep separate found sets; an upstream that drops a found tool drops it
from the sessions; a stateless request gets the definitions in the result.

Upstreams: server-everything (npm) and mcp-server-time (PyPI) over stdio, and the in-repo
fixture (whose `add_tool` adds and removes tools at run time).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import mcp_types as types
import pytest
from mcp import ClientSession

from conftest import (
    EVERYTHING_JS,
    Inbox,
    StatelessHttp,
    _check_prerequisites,
    _serving_http,
    _toml_str,
    http_host,
    manifold_bin,
    time_server_bin,
)

pytestmark = pytest.mark.anyio

OPS_KEY = "discovery-ops-key-0123456789abcdef"
DEV_KEY = "discovery-dev-key-0123456789abcdef"
PINNED = {"time__get_current_time", "time__convert_time"}


def config() -> str:
    fixture = manifold_bin().parent / "manifold-fixture"
    return (
        "[discovery]\n"
        'mode = "search"\n'
        'pinned = ["time__*"]\n'
        "max_tools = 4\n"
        "\n[teams.ops]\n"
        f'api_keys = ["{OPS_KEY}"]\n'
        'tools = { exclude = ["everything__get-env"] }\n'
        "\n[teams.dev]\n"
        f'api_keys = ["{DEV_KEY}"]\n'
        "\n[upstreams.everything]\n"
        'command = "node"\n'
        f'args = [{_toml_str(EVERYTHING_JS)}, "stdio"]\n'
        "\n[upstreams.time]\n"
        f"command = {_toml_str(time_server_bin())}\n"
        'args = ["--local-timezone", "UTC"]\n'
        "\n[upstreams.fx]\n"
        f"command = {_toml_str(fixture)}\n"
        'args = ["--name", "fx"]\n'
    )


@pytest.fixture(scope="module")
def manifold() -> Iterator[str]:
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-discovery-") as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "manifold.toml"
        path.write_text(config())
        with _serving_http(bin_, path, tmp / "manifold.stderr") as port:
            yield f"http://127.0.0.1:{port}/mcp"




async def listed(s: ClientSession) -> dict[str, types.Tool]:
    return {t.name: t for t in (await s.list_tools()).tools}


async def find(s: ClientSession, query: str, k: int = 5, **extra: Any) -> dict[str, Any]:
    r = await s.call_tool("find_tools", {"query": query, "k": k, **extra})
    assert not r.is_error, r
    assert r.structured_content is not None, r
    return r.structured_content


def found_names(result: dict[str, Any]) -> list[str]:
    return [t["name"] for t in result["tools"]]


async def heard_list_changed(inbox: Inbox, before: int) -> bool:
    with anyio.move_on_after(10):
        while len(inbox.of(types.ToolListChangedNotification)) <= before:
            await anyio.sleep(0.05)
        return True
    return False


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_found_tools_join_the_typed_list_and_are_called_with_their_real_schema(manifold: str):
    inbox = Inbox()
    async with http_host(manifold, inbox, key=OPS_KEY) as s:
        first = await listed(s)
        assert set(first) == PINNED | {"find_tools"}, sorted(first)
        assert first["find_tools"].input_schema["required"] == ["query"]
        result = await find(s, "add two numbers together", k=2)
        assert "everything__get-sum" in found_names(result), result
        assert "everything__get-sum" in result["added"], result
        assert await heard_list_changed(inbox, 0), "no tools/list_changed after find_tools"
        now = await listed(s)
        tool = now["everything__get-sum"]
        args = {"a": 2, "b": 3}
        jsonschema.validate(args, tool.input_schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"a": "two"}, tool.input_schema)
        r = await s.call_tool("everything__get-sum", args)
        assert "5" in text_of(r), r


#: Arguments that each tool the eviction test may find accepts.
ARGS = {
    "everything__echo": {"message": "x"},
    "everything__get-sum": {"a": 1, "b": 2},
    "fx__add": {"a": 1, "b": 2},
    "everything__get-tiny-image": {},
}


async def test_the_budget_evicts_the_least_recently_used_found_tool(manifold: str):
    async with http_host(manifold, key=DEV_KEY) as s:
        queries = ["echo a message back", "add two numbers together", "get a tiny image"]
        order: list[str] = []
        results = []
        for query in queries:
            result = await find(s, query, k=1)
            assert len(result["tools"]) == 1, result
            order.append(result["tools"][0]["name"])
            results.append(result)
        assert len(set(order)) == 3 and set(order) <= set(ARGS), order
        # Two pinned tools and a budget of four: room for the two found last.
        assert results[2]["evicted"] == [order[0]], results[2]
        assert set(await listed(s)) == PINNED | {"find_tools", order[1], order[2]}
        # The budget shapes what is listed, never what may be called.
        r = await s.call_tool(order[0], ARGS[order[0]])
        assert not r.is_error, r
        # A call makes a found tool the most recently used: finding the first one again
        # evicts the one not called since.
        r = await s.call_tool(order[1], ARGS[order[1]])
        assert not r.is_error, r
        again = await find(s, queries[0], k=1)
        assert again["added"] == [order[0]] and again["evicted"] == [order[2]], again
        assert set(await listed(s)) == PINNED | {"find_tools", order[0], order[1]}


async def test_a_hidden_tool_is_never_found(manifold: str):
    async with http_host(manifold, key=DEV_KEY) as dev, http_host(manifold, key=OPS_KEY) as ops:
        query = "get environment variables"
        assert "everything__get-env" in found_names(await find(dev, query, k=5))
        for k in (1, 5, 20):
            assert "everything__get-env" not in found_names(await find(ops, query, k=k))
        assert "everything__get-env" not in found_names(await find(ops, "get-env", k=20))


async def test_two_sessions_keep_separate_found_sets(manifold: str):
    async with http_host(manifold, key=OPS_KEY) as a, http_host(manifold, key=OPS_KEY) as b:
        result = await find(a, "add two numbers together", k=1)
        tool = result["tools"][0]["name"]
        assert tool in await listed(a)
        assert tool not in await listed(b)
        other = await find(b, "echo a message back", k=1)
        assert other["tools"][0]["name"] not in await listed(a)


async def test_a_tool_the_upstream_drops_leaves_the_sessions_that_found_it(manifold: str):
    inbox = Inbox()
    async with http_host(manifold, inbox, key=DEV_KEY) as s:
        # fx__add_tool is not listed, but it is in the view: it may be called.
        r = await s.call_tool(
            "fx__add_tool", {"name": "weather_report", "description": "Reports the weather forecast for a city"}
        )
        assert not r.is_error, r
        with anyio.fail_after(10):
            while True:
                result = await find(s, "weather forecast for a city", k=1)
                if found_names(result) == ["fx__weather_report"]:
                    break
                await anyio.sleep(0.1)
        assert "fx__weather_report" in await listed(s)
        heard = len(inbox.of(types.ToolListChangedNotification))
        r = await s.call_tool("fx__add_tool", {"name": "weather_report", "remove": True})
        assert not r.is_error, r
        assert await heard_list_changed(inbox, heard)
        with anyio.fail_after(10):
            while "fx__weather_report" in await listed(s):
                await anyio.sleep(0.1)
        # It left the session's found set, not only its list: back in the catalog, it is not
        # listed again until it is found again.
        heard = len(inbox.of(types.ToolListChangedNotification))
        r = await s.call_tool("fx__add_tool", {"name": "weather_report"})
        assert not r.is_error, r
        assert await heard_list_changed(inbox, heard)
        assert "fx__weather_report" not in await listed(s)
        assert "fx__weather_report" in found_names(await find(s, "weather_report", k=1))
        assert "fx__weather_report" in await listed(s)


async def test_a_stateless_request_gets_the_definitions_in_the_result(manifold: str):
    async with httpx2.AsyncClient() as client:
        raw = StatelessHttp(manifold, client, {"Authorization": f"Bearer {DEV_KEY}"})
        listing = await raw.result("tools/list", {})
        names = {t["name"] for t in listing["tools"]}
        assert names == PINNED | {"find_tools"}, sorted(names)
        found = await raw.result(
            "tools/call", {"name": "find_tools", "arguments": {"query": "add two numbers together", "k": 3}}
        )
        tools = found["structuredContent"]["tools"]
        by_name = {t["name"]: t for t in tools}
        assert "everything__get-sum" in by_name, tools
        schema = by_name["everything__get-sum"]["definition"]["inputSchema"]
        jsonschema.validate({"a": 1, "b": 2}, schema)
        called = await raw.result("tools/call", {"name": "everything__get-sum", "arguments": {"a": 1, "b": 2}})
        assert "3" in json.dumps(called), called
