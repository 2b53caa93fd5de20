"""Interop with an upstream that speaks both eras: stateless_server.py, built on the official
Python SDK (mcp 2.3 `MCPServer`), whose tools ask the user through the SDK's resolvers: an
`elicitation/create` request mid-call in the session era, `input_required` in the stateless
era. The official SDK client is the host, in each era.

First the server alone (no Manifold), so that a failure behind Manifold blames the right peer.
Then through one Manifold (Streamable HTTP to the hosts, stdio to the server). How Manifold
talks to the server (today in the session era; later in the stateless era too) is Manifold's
business: the tests assert only what must hold either way:

  - a legacy host is asked through `elicitation/create` requests, and its tool call completes
    with its answers, in one tools/call;
  - a stateless host is asked through `input_required` answers, one round per question the
    server asks in turn, and its retries complete the call with its answers; it is never sent
    a request of its own to answer.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from conftest import (
    HERE,
    STATELESS,
    Wire,
    _check_prerequisites,
    _serving_http,
    _toml_str,
    sdk_client,
    upstreams_settled,
)

pytestmark = pytest.mark.anyio

SERVER = HERE / "stateless_server.py"
T = TypeVar("T")

#: The server's questions, and the user's answers.
ANSWERS = {
    "Where to?": {"city": "Lyon"},
    "When do you go to Lyon?": {"date": "2027-05-01"},
}


class User:
    """The host's elicitation callback: answers the server's questions and remembers them."""

    def __init__(self, note: str) -> None:
        self.note = note
        self.asked: list[Any] = []

    async def __call__(self, _ctx: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        if params.message == "Ship books?":
            return types.ElicitResult(action="accept", content={"approve": True, "note": self.note})
        return types.ElicitResult(action="accept", content=ANSWERS[params.message])

    def messages(self) -> list[str]:
        return [p.message for p in self.asked]


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def must(call: Awaitable[T]) -> T:
    """`call`'s result; an error answer fails the test (as an assertion, with its code)."""
    try:
        return await call
    except MCPError as e:
        raise AssertionError(f"error {e.code}: {e.message}") from e


# --- the server alone ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [STATELESS, "legacy"])
async def test_the_server_alone_serves_both_eras(mode: str):
    user = User("direct")
    server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with sdk_client(server, mode, elicitation_callback=user) as c:
        tools = await c.list_tools()
        assert {t.name for t in tools.tools} == {"confirm_order", "book_trip", "add"}
        if mode == STATELESS:
            assert (tools.ttl_ms, tools.cache_scope) == (12345, "public")
            first = await c.session.call_tool("confirm_order", {"item": "books"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            ((_, question),) = first.input_requests.items()
            assert question.method == "elicitation/create" and question.params.message == "Ship books?", question
        r = await c.call_tool("confirm_order", {"item": "books"})
        assert text_of(r) == f"books: approve=True note='direct' (served at {c.protocol_version})", r
        r = await c.call_tool("book_trip", {})
        assert text_of(r) == "trip to Lyon on 2027-05-01", r
    # The manual first round above asked no one: the client's driver runs the callback.
    assert user.messages() == ["Ship books?", "Where to?", "When do you go to Lyon?"]


# --- through Manifold -------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def manifold_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """Manifold over HTTP in front of the server (stdio, key "dual")."""
    bin_ = _check_prerequisites()
    tmp: Path = tmp_path_factory.mktemp("dual-era")
    config = tmp / "manifold.toml"
    config.write_text(f"[upstreams.dual]\ncommand = {_toml_str(sys.executable)}\nargs = [{_toml_str(SERVER)}]\n")
    log = tmp / "manifold.stderr"
    with _serving_http(bin_, config, log) as port:
        await upstreams_settled(log, "dual")
        yield f"http://127.0.0.1:{port}/mcp"


async def test_a_stateless_host_lists_the_servers_tools(manifold_url: str):
    async with sdk_client(manifold_url, STATELESS) as c:
        tools = await c.list_tools()
        assert {t.name for t in tools.tools} == {"dual__confirm_order", "dual__book_trip", "dual__add"}
        # The server says its list is fresh for 12345 ms, public: the merged list (this server's
        # alone) is fresh for what is left of that, and public.
        assert isinstance(tools.ttl_ms, int) and 0 < tools.ttl_ms <= 12345, tools.ttl_ms
        assert tools.cache_scope == "public", tools.cache_scope


async def test_a_legacy_host_is_asked_through_elicitation_create(manifold_url: str):
    user, wire = User("from a legacy host"), Wire()
    http = httpx2.AsyncClient(event_hooks={"request": [wire]})
    transport = streamable_http_client(manifold_url, http_client=http)
    async with http, sdk_client(transport, "legacy", elicitation_callback=user) as c:
        assert c.protocol_version == "2025-11-25"
        r = await must(c.call_tool("dual__confirm_order", {"item": "books"}))
        assert "books: approve=True note='from a legacy host'" in text_of(r), r
        r = await must(c.call_tool("dual__book_trip", {}))
        assert text_of(r) == "trip to Lyon on 2027-05-01", r
        r = await must(c.call_tool("dual__add", {"a": 2, "b": 40}))
        assert text_of(r) == "42", r
    assert user.messages() == ["Ship books?", "Where to?", "When do you go to Lyon?"]
    assert user.asked[0].requested_schema["required"] == ["approve"], user.asked[0]
    # One tools/call each; the questions were requests the client answered (POSTed responses).
    assert len(wire.calls_of("dual__confirm_order")) == 1 and len(wire.calls_of("dual__book_trip")) == 1
    answers = wire.responses()
    assert [a["result"]["action"] for a in answers] == ["accept"] * 3, answers


async def test_a_stateless_host_is_asked_through_input_required(manifold_url: str):
    user, wire = User("from a stateless host"), Wire()
    http = httpx2.AsyncClient(event_hooks={"request": [wire]})
    transport = streamable_http_client(manifold_url, http_client=http)
    async with http, sdk_client(transport, STATELESS, elicitation_callback=user) as c:
        r = await must(c.call_tool("dual__confirm_order", {"item": "books"}))
        assert "books: approve=True note='from a stateless host'" in text_of(r), r
        r = await must(c.call_tool("dual__book_trip", {}))
        assert text_of(r) == "trip to Lyon on 2027-05-01", r
    assert user.messages() == ["Ship books?", "Where to?", "When do you go to Lyon?"]
    # Every question came in an input_required answer: each call was retried once per question,
    # with the requestState of the answer before; the client answered no request of the server.
    for tool, rounds in (("dual__confirm_order", 2), ("dual__book_trip", 3)):
        calls = wire.calls_of(tool)
        assert len(calls) == rounds, calls
        assert "requestState" not in calls[0] and all(isinstance(c["requestState"], str) for c in calls[1:]), calls
    assert not wire.responses(), wire.responses()
