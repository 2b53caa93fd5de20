"""Interop: the official MCP Python SDK client (mcp.client.stdio + ClientSession) against the
real Manifold binary fronting two real third-party upstreams:

  everything  @modelcontextprotocol/server-everything (npm, pinned in package-lock.json)
  time        mcp-server-time (PyPI, pinned in requirements.txt)

Manifold exposes tools and prompts as `{key}__{name}` and resources as `{key}+{uri}`.
The upstream names asserted here were verified against the pinned versions.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timedelta

import pytest
from mcp import ClientSession, MCPError
from mcp import types
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from conftest import all_prompts, all_resource_templates, all_resources, all_tools, manifold_session

pytestmark = pytest.mark.anyio

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Tools of the pinned upstreams (server-everything 2026.8.31 registers some more tools
# depending on the client's capabilities; these are unconditional).
EVERYTHING_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "trigger-long-running-operation",
}
TIME_TOOLS = {"get_current_time", "convert_time"}
EVERYTHING_PROMPTS = {"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"}
EVERYTHING_DOC = "demo://resource/static/document/architecture.md"
EVERYTHING_TEXT_TEMPLATE = "demo://resource/dynamic/text/{resourceId}"
EVERYTHING_BLOB_TEMPLATE = "demo://resource/dynamic/blob/{resourceId}"


@pytest.fixture(scope="module")
async def session():
    """One Manifold process shared by the tests of this module (each upstream start costs
    about a second); test_initialize_identifies_as_manifold starts its own."""
    async with manifold_session() as (s, _init):
        yield s


def text_of(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    assert texts, f"no text content in {result!r}"
    return "".join(texts)


async def test_initialize_identifies_as_manifold():
    async with manifold_session() as (s, init):
        assert init.server_info.name == "manifold"
        # The client offers its newest handshake version; Manifold supports it, so it must
        # answer with the same one.
        assert init.protocol_version == LATEST_HANDSHAKE_VERSION
        caps = init.capabilities
        assert caps.tools is not None, "both upstreams have tools, Manifold must declare tools"
        assert caps.prompts is not None, "server-everything has prompts, Manifold must declare prompts"
        assert caps.resources is not None, "server-everything has resources, Manifold must declare resources"
        # The session is usable after the handshake.
        await s.send_ping()


async def test_merged_tool_list_has_both_upstreams(session: ClientSession):
    tools = await all_tools(session)
    names = [t.name for t in tools]
    assert len(names) == len(set(names)), f"duplicate tool names: {sorted(names)}"
    for name in names:
        assert NAME_RE.match(name), f"tool name {name!r} is not ^[A-Za-z0-9_-]{{1,64}}$"
        assert name.startswith(("everything__", "time__")), f"tool {name!r} carries no upstream prefix"
    missing = {f"everything__{n}" for n in EVERYTHING_TOOLS} - set(names)
    assert not missing, f"server-everything tools missing: {sorted(missing)}; got {sorted(names)}"
    assert {n for n in names if n.startswith("time__")} == {f"time__{n}" for n in TIME_TOOLS}
    # Metadata is passed through unchanged apart from the name.
    by_name = {t.name: t for t in tools}
    echo = by_name["everything__echo"]
    assert "message" in echo.input_schema.get("properties", {}), echo.input_schema
    assert echo.input_schema.get("required") == ["message"]
    get_time = by_name["time__get_current_time"]
    assert "timezone" in get_time.input_schema.get("properties", {}), get_time.input_schema


async def test_call_everything_echo(session: ClientSession):
    result = await session.call_tool("everything__echo", {"message": "hello through manifold ✓"})
    assert not result.is_error, result
    assert text_of(result) == "Echo: hello through manifold ✓"


async def test_call_everything_get_sum(session: ClientSession):
    result = await session.call_tool("everything__get-sum", {"a": 19, "b": 23})
    assert not result.is_error, result
    assert "42" in text_of(result)


async def test_call_time_get_current_time(session: ClientSession):
    result = await session.call_tool("time__get_current_time", {"timezone": "UTC"})
    assert not result.is_error, result
    payload = json.loads(text_of(result))
    assert payload["timezone"] == "UTC"
    when = datetime.fromisoformat(payload["datetime"])
    assert when.utcoffset() == timedelta(0), payload
    assert abs((datetime.now(when.tzinfo) - when).total_seconds()) < 300, payload


async def test_parallel_calls_to_both_upstreams(session: ClientSession):
    import anyio

    results: dict[str, types.CallToolResult] = {}

    async def call(key: str, name: str, args: dict) -> None:
        results[key] = await session.call_tool(name, args)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(call, f"echo{i}", "everything__echo", {"message": f"m{i}"})
            tg.start_soon(call, f"time{i}", "time__get_current_time", {"timezone": "UTC"})
    for i in range(5):
        assert text_of(results[f"echo{i}"]) == f"Echo: m{i}"
        assert json.loads(text_of(results[f"time{i}"]))["timezone"] == "UTC"


async def test_list_and_read_resource(session: ClientSession):
    resources = await all_resources(session)
    uris = [r.uri for r in resources]
    assert len(uris) == len(set(uris)), f"duplicate resource URIs: {sorted(uris)}"
    for uri in uris:
        assert uri.startswith(("everything+", "time+")), f"resource URI {uri!r} carries no upstream prefix"
    exposed = f"everything+{EVERYTHING_DOC}"
    assert exposed in uris, f"{exposed} not listed; got {sorted(uris)}"

    result = await session.read_resource(exposed)
    assert result.contents, result
    content = result.contents[0]
    assert content.uri == exposed, f"contents[].uri must be the exposed URI, got {content.uri!r}"
    assert isinstance(content, types.TextResourceContents), content
    assert content.text.startswith("# Everything Server"), content.text[:200]


async def test_resource_templates_and_read_through_them(session: ClientSession):
    templates = await all_resource_templates(session)
    uri_templates = {t.uri_template for t in templates}
    for t in uri_templates:
        assert t.startswith(("everything+", "time+")), f"template {t!r} carries no upstream prefix"
    for t in (EVERYTHING_TEXT_TEMPLATE, EVERYTHING_BLOB_TEMPLATE):
        assert f"everything+{t}" in uri_templates, f"everything+{t} not listed; got {sorted(uri_templates)}"

    text_uri = "everything+demo://resource/dynamic/text/7"
    result = await session.read_resource(text_uri)
    (content,) = result.contents
    assert content.uri == text_uri
    assert isinstance(content, types.TextResourceContents), content
    assert content.text.startswith("Resource 7:"), content.text

    blob_uri = "everything+demo://resource/dynamic/blob/7"
    result = await session.read_resource(blob_uri)
    (content,) = result.contents
    assert content.uri == blob_uri
    assert isinstance(content, types.BlobResourceContents), content
    assert base64.b64decode(content.blob).startswith(b"Resource 7:")


async def test_list_and_get_prompts(session: ClientSession):
    prompts = await all_prompts(session)
    names = [p.name for p in prompts]
    assert len(names) == len(set(names)), f"duplicate prompt names: {sorted(names)}"
    for name in names:
        assert NAME_RE.match(name), f"prompt name {name!r} is not ^[A-Za-z0-9_-]{{1,64}}$"
        assert name.startswith(("everything__", "time__")), f"prompt {name!r} carries no upstream prefix"
    missing = {f"everything__{n}" for n in EVERYTHING_PROMPTS} - set(names)
    assert not missing, f"server-everything prompts missing: {sorted(missing)}; got {sorted(names)}"
    args_prompt = next(p for p in prompts if p.name == "everything__args-prompt")
    assert {(a.name, bool(a.required)) for a in args_prompt.arguments or []} == {("city", True), ("state", False)}

    result = await session.get_prompt("everything__args-prompt", {"city": "Lyon", "state": "ARA"})
    assert len(result.messages) == 1, result
    message = result.messages[0]
    assert message.role == "user"
    assert isinstance(message.content, types.TextContent), message
    assert message.content.text == "What's weather in Lyon, ARA?"

    result = await session.get_prompt("everything__simple-prompt")
    assert result.messages[0].content.text == "This is a simple prompt without arguments."


@pytest.mark.parametrize(
    "name",
    [
        "everything__no-such-tool",  # known upstream, unknown tool
        "nobody__echo",  # unknown upstream
        "echo",  # no prefix at all
    ],
)
async def test_unknown_tool_is_invalid_params(session: ClientSession, name: str):
    with pytest.raises(MCPError) as err:
        result = await session.call_tool(name, {"message": "x"})
        pytest.fail(f"calling unknown tool {name!r} returned a result instead of a JSON-RPC error: {result!r}")
    assert err.value.code == types.INVALID_PARAMS == -32602, (err.value.code, err.value.message)
    # The session survives the error.
    result = await session.call_tool("everything__echo", {"message": "still alive"})
    assert text_of(result) == "Echo: still alive"


@pytest.mark.parametrize(
    "uri",
    [
        "everything+demo://resource/static/document/no-such-document.md",  # upstream says no
        "nobody+demo://resource/static/document/architecture.md",  # unknown upstream
        "demo://resource/static/document/architecture.md",  # no prefix at all
    ],
)
async def test_unknown_resource_is_an_error(session: ClientSession, uri: str):
    with pytest.raises(MCPError) as err:
        result = await session.read_resource(uri)
        pytest.fail(f"reading unknown resource {uri!r} returned a result instead of a JSON-RPC error: {result!r}")
    assert err.value.code < 0, (err.value.code, err.value.message)
    await session.send_ping()


async def test_unknown_prompt_is_an_error(session: ClientSession):
    with pytest.raises(MCPError) as err:
        result = await session.get_prompt("everything__no-such-prompt")
        pytest.fail(f"getting an unknown prompt returned a result instead of a JSON-RPC error: {result!r}")
    assert err.value.code == -32602, (err.value.code, err.value.message)
