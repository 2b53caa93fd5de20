"""Interop in the stateless era (protocol revision 2026-07-28): the official MCP Python SDK's
high-level client (`mcp.client.client.Client` in modes "2026-07-28", "auto" and "legacy") and
raw HTTP against Manifold fronting @modelcontextprotocol/server-everything (npm) and
mcp-server-time (PyPI), configured as the other interop tests configure them.

Covered: the era the client ends up in, over Streamable HTTP and over stdio; both eras served by
one process at once; server-everything's sampling, elicitation (form and URL mode) and roots
requests reaching a stateless host as `input_required`, and the host's retry completing them,
with the sealed `requestState` checked (altered, reused, for another tool, for another team);
caching hints; the revision's header checks; `subscriptions/listen`; and a closed response
stream cancelling its request upstream.

server-everything's stdin is teed to a file (conftest.tee_config), so a test can see what
reached the upstream. Its connection is shared, and Manifold can tell which host an upstream's
request is for only while a single host request is in flight to it: the tests of this module
run one after the other and leave no request waiting for a retry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from conftest import (
    ALL_REVISIONS,
    EVERYTHING_JS,
    META_SERVER_INFO,
    META_SUBSCRIPTION,
    META_VERSION,
    REQUEST_TIMEOUT_S,
    STATELESS,
    StatelessHttp,
    Wire,
    _check_prerequisites,
    _serving_http,
    _toml_str,
    config_text,
    envelope,
    manifold_stdio_client,
    sdk_client,
    sse_events,
    sse_messages,
    tee_config,
    upstream_received,
    upstreams_settled,
)

pytestmark = pytest.mark.anyio

ECHO = "everything__echo"
SUM = "everything__get-sum"
SAMPLING = "everything__trigger-sampling-request"
ELICITATION = "everything__trigger-elicitation-request"
URL_ELICITATION = "everything__trigger-url-elicitation"
ROOTS = "everything__get-roots-list"
LONG = "everything__trigger-long-running-operation"
GZIP = "everything__gzip-file-as-resource"
TOGGLE_UPDATES = "everything__toggle-subscriber-updates"
DOC = "everything+demo://resource/static/document/architecture.md"
WATCHED = "everything+demo://resource/static/document/extension.md"
#: A document server-everything can gzip without going to the network.
DATA_URI = "data:text/plain;base64," + base64.b64encode(b"stateless interop\n").decode()


@dataclass
class Served:
    url: str
    #: Manifold's stderr.
    log: Path
    #: What server-everything read on its stdin.
    upstream_stdin: Path


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One Manifold serving Streamable HTTP in front of server-everything (stdin teed) and
    mcp-server-time, shared by this module's tests. Manifold notices that a host closed a
    stream when a write to it fails; a short SSE keepalive makes that quick."""
    bin_ = _check_prerequisites()
    tmp = tmp_path_factory.mktemp("stateless")
    stdin = tmp / "everything.stdin"
    config = tmp / "manifold.toml"
    config.write_text(tee_config(stdin, server="sse_keepalive_ms = 250"))
    log = tmp / "manifold.stderr"
    with _serving_http(bin_, config, log) as port:
        await upstreams_settled(log, "everything", "time")
        yield Served(f"http://127.0.0.1:{port}/mcp", log, stdin)


@pytest.fixture
async def raw(manifold: Served) -> AsyncIterator[StatelessHttp]:
    async with httpx2.AsyncClient() as http:
        yield StatelessHttp(manifold.url, http)


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def raw_text(result: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in result["content"])


@asynccontextmanager
async def client_over(transport: str, mode: str, served: Served, tmp: Path, **kw: Any) -> AsyncIterator[Any]:
    """The SDK client in `mode`, on the shared Manifold over HTTP or on a Manifold of its own
    over stdio."""
    if transport == "http":
        async with sdk_client(served.url, mode, **kw) as client:
            yield client
    else:
        log = tmp / "manifold.stderr"
        async with manifold_stdio_client(config_text(), mode, log, "everything", "time", **kw) as client:
            yield client


# --- the SDK client, stateless ----------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("mode", [STATELESS, "auto"])
async def test_the_sdk_client_speaks_the_stateless_era(manifold: Served, tmp_path: Path, transport: str, mode: str):
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, _message: str | None) -> None:
        progress.append((done, total))

    async with client_over(transport, mode, manifold, tmp_path) as c:
        assert c.protocol_version == STATELESS
        if mode == "auto":
            # The client probed server/discover and adopted Manifold's answer.
            discovered = c.session.discover_result
            assert discovered is not None and discovered.supported_versions == ALL_REVISIONS
            assert c.server_info is not None and c.server_info.name == "manifold"
            assert c.server_capabilities.tools is not None and c.server_capabilities.prompts is not None

        tools = await c.list_tools()
        assert (tools.meta or {})[META_SERVER_INFO]["name"] == "manifold", tools.meta
        # mcp-server-time (a stateless upstream) says its tools list is fresh for 0 ms and
        # private; the merged list carries the smallest ttl, and private if any part is.
        assert (tools.ttl_ms, tools.cache_scope) == (0, "private")
        names = {t.name for t in tools.tools}
        assert {ECHO, SUM, LONG, "time__get_current_time", "time__convert_time"} <= names, sorted(names)
        assert all(n.startswith(("everything__", "time__")) for n in names), sorted(names)

        r = await c.call_tool(ECHO, {"message": "stateless ✓"})
        assert text_of(r) == "Echo: stateless ✓" and not r.is_error, r
        assert (r.meta or {})[META_SERVER_INFO]["name"] == "manifold", r.meta
        r = await c.call_tool(SUM, {"a": 19, "b": 23})
        assert "42" in text_of(r), r

        prompts = {p.name for p in (await c.list_prompts()).prompts}
        assert {"everything__simple-prompt", "everything__args-prompt"} <= prompts, sorted(prompts)
        got = await c.get_prompt("everything__args-prompt", {"city": "Lyon", "state": "ARA"})
        assert got.messages[0].content.text == "What's weather in Lyon, ARA?", got

        resources = await c.list_resources()
        assert DOC in {r.uri for r in resources.resources}
        read = await c.read_resource(DOC)
        assert read.contents[0].uri == DOC and read.contents[0].text.startswith("# Everything Server"), read
        for unknown in ("everything+demo://resource/static/document/no-such-document.md", "nobody+demo://x"):
            with pytest.raises(MCPError) as err:
                await c.read_resource(unknown)
            assert err.value.code == -32602, (unknown, err.value.code, err.value.message)

        r = await c.call_tool(LONG, {"duration": 1, "steps": 3}, progress_callback=on_progress)
        assert "completed" in text_of(r).lower(), r
        assert progress == [(1, 3), (2, 3), (3, 3)], progress


async def test_progress_comes_on_the_response_stream_with_the_hosts_token(raw: StatelessHttp):
    response = await raw.post(
        "tools/call",
        {"name": LONG, "arguments": {"duration": 1, "steps": 2}, "_meta": envelope(progressToken="host-token-7")},
        id=70,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    *notes, answer = sse_messages(response.text)
    assert [n["method"] for n in notes] == ["notifications/progress"] * 2, notes
    assert [(n["params"]["progressToken"], n["params"]["progress"]) for n in notes] == [
        ("host-token-7", 1),
        ("host-token-7", 2),
    ], notes
    assert answer["id"] == 70 and answer["result"]["resultType"] == "complete", answer


async def test_a_legacy_client_and_a_stateless_one_share_the_process(manifold: Served):
    async with sdk_client(manifold.url, "legacy") as old, sdk_client(manifold.url, STATELESS) as new:
        assert old.protocol_version == "2025-11-25"
        assert old.session.initialize_result is not None
        assert old.session.initialize_result.server_info.name == "manifold"
        assert new.protocol_version == STATELESS
        # Interleaved, each in its own era.
        r = await old.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert json.loads(text_of(r))["timezone"] == "UTC", r
        r = await new.call_tool(ECHO, {"message": "new era"})
        assert text_of(r) == "Echo: new era"
        r = await old.call_tool(ECHO, {"message": "old era"})
        assert text_of(r) == "Echo: old era"
        assert r.meta is None or META_SERVER_INFO not in r.meta, "a session-era result carries no stateless stamp"
        await old.session.send_ping()
        # A resource Manifold does not know: -32002 in the session era, -32602 in the stateless.
        with pytest.raises(MCPError) as err:
            await old.read_resource("nobody+demo://x")
        assert err.value.code == -32002, err.value.message
        with pytest.raises(MCPError) as err:
            await new.read_resource("nobody+demo://x")
        assert err.value.code == -32602, err.value.message


# --- multi round-trip: server-everything asks, the stateless host answers ---------------------


async def test_upstream_requests_reach_the_stateless_sdk_client_and_its_answers_return(manifold: Served):
    asked: dict[str, list[Any]] = {"sampling": [], "form": [], "url": [], "roots": []}

    async def sampling(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked["sampling"].append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"host sampled: {params.messages[0].content.text}"),
            model="host-model",
        )

    async def elicitation(_ctx: Any, params: Any) -> types.ElicitResult:
        if params.mode == "url":
            asked["url"].append(params)
            return types.ElicitResult(action="accept")
        asked["form"].append(params)
        return types.ElicitResult(
            action="accept", content={"name": "Ada Lovelace", "check": True, "email": "ada@example.com", "integer": 7}
        )

    async def roots(_ctx: Any) -> types.ListRootsResult:
        asked["roots"].append(True)
        return types.ListRootsResult(roots=[types.Root(uri="file:///host/project", name="project")])

    wire = Wire()
    http = httpx2.AsyncClient(event_hooks={"request": [wire]})
    async with http, sdk_client(
        streamable_http_client(manifold.url, http_client=http),
        STATELESS,
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
    ) as c:
        r = await c.call_tool(SAMPLING, {"prompt": "a haiku", "maxTokens": 20})
        (params,) = asked["sampling"]
        assert params.messages[0].content.text == "Resource trigger-sampling-request context: a haiku"
        assert params.system_prompt == "You are a helpful test server."
        assert (params.max_tokens, params.temperature) == (20, 0.7)
        sampled = json.loads(text_of(r).split("LLM sampling result:", 1)[1])
        assert sampled == {
            "model": "host-model",
            "role": "assistant",
            "content": {"type": "text", "text": "host sampled: Resource trigger-sampling-request context: a haiku"},
        }, r

        r = await c.call_tool(ELICITATION, {})
        (params,) = asked["form"]
        assert params.mode == "form" and params.message == "Please provide inputs for the following fields:"
        assert params.requested_schema["required"] == ["name"]
        assert params.requested_schema["properties"]["email"]["format"] == "email"
        text = text_of(r)
        for line in (
            "- Name: Ada Lovelace",
            "- Agreed to terms: true",
            "- Email: ada@example.com",
            "- Favorite Integer: 7",
        ):
            assert line in text, text

        url_args = {"url": "https://example.com/authorize", "elicitationId": "interop-url-1"}
        r = await c.call_tool(URL_ELICITATION, url_args)
        (params,) = asked["url"]
        assert (params.url, params.elicitation_id) == ("https://example.com/authorize", "interop-url-1"), params
        assert "User completed the URL elicitation flow" in text_of(r) and "interop-url-1" in text_of(r), r

        # server-everything keeps the roots it got for the rest of its (shared) session, so only
        # the first get-roots-list of a Manifold process asks the host.
        r = await c.call_tool(ROOTS, {})
        assert asked["roots"] == [True]
        assert "Current MCP Roots (1 total)" in text_of(r) and "file:///host/project" in text_of(r), r

    # Each call took two rounds: Manifold answered the first with input_required, and the
    # client retried with its answers and the requestState it got.
    for tool in (SAMPLING, ELICITATION, URL_ELICITATION, ROOTS):
        first, retry = wire.calls_of(tool)
        assert "requestState" not in first and "inputResponses" not in first, first
        assert isinstance(retry["requestState"], str) and len(retry["inputResponses"]) == 1, retry


def altered(state: str) -> str:
    """`state` with one character in its middle changed."""
    i = len(state) // 2
    return state[:i] + ("A" if state[i] != "A" else "B") + state[i + 1 :]


async def test_input_required_on_the_wire_and_the_request_state_it_carries(raw: StatelessHttp):
    caps = {"sampling": {}}
    call = {"name": SAMPLING, "arguments": {"prompt": "wire", "maxTokens": 9}}

    first = await raw.result("tools/call", call, capabilities=caps, id=1)
    assert first["resultType"] == "input_required", first
    assert first["_meta"][META_SERVER_INFO]["name"] == "manifold", first
    ((key, request),) = first["inputRequests"].items()
    assert request["method"] == "sampling/createMessage", request
    assert request["params"]["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Resource trigger-sampling-request context: wire"}}
    ], request
    assert request["params"]["maxTokens"] == 9
    state = first["requestState"]
    assert isinstance(state, str) and state, first
    answers = {key: {"role": "assistant", "content": {"type": "text", "text": "wire answer"}, "model": "raw-model"}}

    def retry(name: str = SAMPLING, state: str = state) -> dict[str, Any]:
        return {**call, "name": name, "inputResponses": answers, "requestState": state}

    error = await raw.error("tools/call", retry(state=altered(state)), capabilities=caps, id=2)
    assert error["code"] == -32602 and "requestState" in error["message"], error
    error = await raw.error("tools/call", retry(name=ECHO), capabilities=caps, id=3)
    assert error["code"] == -32602 and "requestState" in error["message"], error

    done = await raw.result("tools/call", retry(), capabilities=caps, id=4)
    assert done["resultType"] == "complete", done
    sampled = json.loads(raw_text(done).split("LLM sampling result:", 1)[1])
    assert sampled["content"]["text"] == "wire answer" and sampled["model"] == "raw-model", done

    error = await raw.error("tools/call", retry(), capabilities=caps, id=5)
    assert error["code"] == -32602 and "requestState" in error["message"], error


async def test_a_host_that_did_not_declare_a_capability_is_not_asked(raw: StatelessHttp):
    result = await raw.result(
        "tools/call", {"name": SAMPLING, "arguments": {"prompt": "x", "maxTokens": 5}}, capabilities={"elicitation": {}}
    )
    # Manifold refused the upstream's sampling request on the host's behalf, with the stateless
    # era's missing-capability error; server-everything reports that refusal as the tool's error.
    assert result["resultType"] == "complete" and result.get("isError") is True, result
    assert "-32021" in raw_text(result) and "sampling" in raw_text(result), result


# --- caching hints ----------------------------------------------------------------------------


async def test_caching_hints_on_every_cacheable_result(raw: StatelessHttp):
    discover = await raw.result("server/discover")
    assert discover["resultType"] == "complete"
    assert discover["supportedVersions"] == ALL_REVISIONS, discover
    assert discover["_meta"][META_SERVER_INFO]["name"] == "manifold"
    assert discover["cacheScope"] == "public" and isinstance(discover["ttlMs"], int) and discover["ttlMs"] >= 0
    assert {"tools", "prompts", "resources"} <= set(discover["capabilities"]), discover["capabilities"]
    assert discover["instructions"].startswith("Manifold presents several MCP servers as one"), discover
    for method, field in (
        ("tools/list", "tools"),
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ):
        listed = await raw.result(method)
        hints = (listed["resultType"], listed["ttlMs"], listed["cacheScope"])
        # mcp-server-time gives hints (0 ms, private) for the lists it serves: the merged list
        # carries the smallest ttl and is private if any part is; a list no upstream gave hints
        # for carries Manifold's own choice (60 s, public).
        assert hints in (("complete", 0, "private"), ("complete", 60000, "public")), (method, listed)
        if method == "tools/list":
            assert hints == ("complete", 0, "private"), listed
        assert listed[field], (method, listed)
        assert listed["_meta"][META_SERVER_INFO]["name"] == "manifold"
    read = await raw.result("resources/read", {"uri": DOC})
    # server-everything gives no ttl of its own: the answer is stale at once.
    assert (read["resultType"], read["ttlMs"], read["cacheScope"]) == ("complete", 0, "public"), read
    assert read["contents"][0]["uri"] == DOC


def _key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


async def test_a_teams_answers_are_private_and_its_request_state_its_own():
    """A Manifold of its own, with two teams (API keys): what a team's caller gets is private
    to it, and a requestState minted for one team is refused to the other."""
    alpha, beta = "alpha-interop-key-0001", "beta-interop-key-0002"
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-teams-") as tmp_name:
        tmp = Path(tmp_name)
        config = tmp / "manifold.toml"
        config.write_text(
            f'[teams.alpha]\napi_keys = ["{_key_hash(alpha)}"]\n\n'
            f'[teams.beta]\napi_keys = ["{_key_hash(beta)}"]\n\n'
            "[upstreams.everything]\n"
            'command = "node"\n'
            f'args = [{_toml_str(EVERYTHING_JS)}, "stdio"]\n'
        )
        log = tmp / "manifold.stderr"
        with _serving_http(bin_, config, log) as port:
            await upstreams_settled(log, "everything")
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx2.AsyncClient() as http:
                as_alpha = StatelessHttp(url, http, {"X-API-Key": alpha})
                as_beta = StatelessHttp(url, http, {"Authorization": f"Bearer {beta}"})
                nobody = await StatelessHttp(url, http).post("tools/list")
                assert nobody.status_code == 401, nobody.text

                cacheable = ("server/discover", "tools/list", "prompts/list", "resources/list")
                for method in (*cacheable, "resources/templates/list"):
                    got = await as_alpha.result(method)
                    assert got["cacheScope"] == "private", (method, got)
                read = await as_alpha.result("resources/read", {"uri": DOC})
                assert (read["ttlMs"], read["cacheScope"]) == (0, "private"), read

                caps = {"sampling": {}}
                call = {"name": SAMPLING, "arguments": {"prompt": "teams", "maxTokens": 5}}
                first = await as_alpha.result("tools/call", call, capabilities=caps)
                assert first["resultType"] == "input_required", first
                ((key, _),) = first["inputRequests"].items()
                answers = {key: {"role": "assistant", "content": {"type": "text", "text": "alpha's"}, "model": "m"}}
                retry = {**call, "inputResponses": answers, "requestState": first["requestState"]}
                error = await as_beta.error("tools/call", retry, capabilities=caps)
                assert error["code"] == -32602 and "requestState" in error["message"], error
                done = await as_alpha.result("tools/call", retry, capabilities=caps)
                assert "alpha's" in raw_text(done), done


# --- the revision's HTTP rules ----------------------------------------------------------------

_ECHO_CALL = {"name": ECHO, "arguments": {"message": "header-mismatch-probe"}}


@pytest.mark.parametrize(
    ("method", "params", "headers"),
    [
        pytest.param("tools/list", {}, {"Mcp-Method": "prompts/list"}, id="Mcp-Method-differs"),
        pytest.param("tools/list", {}, {"Mcp-Method": None}, id="Mcp-Method-missing"),
        pytest.param("tools/call", _ECHO_CALL, {"Mcp-Name": SUM}, id="Mcp-Name-differs-tool"),
        pytest.param("tools/call", _ECHO_CALL, {"Mcp-Name": None}, id="Mcp-Name-missing"),
        pytest.param(
            "prompts/get",
            {"name": "everything__simple-prompt"},
            {"Mcp-Name": "everything__args-prompt"},
            id="Mcp-Name-differs-prompt",
        ),
        pytest.param("resources/read", {"uri": DOC}, {"Mcp-Name": WATCHED}, id="Mcp-Name-differs-uri"),
        pytest.param(
            "tools/list", {"_meta": {**envelope(), META_VERSION: "2025-11-25"}}, {}, id="meta-names-another-revision"
        ),
    ],
)
async def test_headers_that_disagree_with_the_body_are_refused(
    raw: StatelessHttp, manifold: Served, method: str, params: dict, headers: dict
):
    response = await raw.post(method, params, headers=headers, id=41)
    assert response.status_code == 400, (response.status_code, response.text)
    answer = response.json()
    assert answer["id"] == 41 and answer["error"]["code"] == -32020, answer
    assert "header-mismatch-probe" not in manifold.upstream_stdin.read_text(), "a refused call reached the upstream"


async def test_a_body_that_names_no_revision_is_invalid_params(raw: StatelessHttp):
    response = await raw.post("tools/list", {"_meta": {}}, id=42)
    assert response.status_code == 400, (response.status_code, response.text)
    answer = response.json()
    assert answer["id"] == 42 and answer["error"]["code"] == -32602, answer



async def test_an_unsupported_revision_is_refused_with_the_supported_ones(raw: StatelessHttp):
    response = await raw.post(
        "tools/list",
        {"_meta": {**envelope(), META_VERSION: "2099-01-01"}},
        headers={"MCP-Protocol-Version": "2099-01-01"},
    )
    assert response.status_code == 400, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == -32022, error
    assert error["data"]["supported"] == ALL_REVISIONS and error["data"]["requested"] == "2099-01-01", error


async def test_get_is_not_allowed_in_the_stateless_era(raw: StatelessHttp):
    response = await raw.client.get(
        raw.url, headers={"MCP-Protocol-Version": STATELESS, "Accept": "text/event-stream"}, timeout=REQUEST_TIMEOUT_S
    )
    assert response.status_code == 405, (response.status_code, response.text)
    assert response.json()["error"]["code"] == -32600, response.text


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("ping", {}),
        ("logging/setLevel", {"level": "debug"}),
        ("resources/subscribe", {"uri": DOC}),
        ("resources/unsubscribe", {"uri": DOC}),
        ("initialize", {"protocolVersion": STATELESS, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}),
    ],
)
async def test_methods_the_revision_removed_are_not_found(raw: StatelessHttp, method: str, params: dict):
    # resources/(un)subscribe name a URI, but not one Mcp-Name carries: send it anyway, so that
    # the refusal is about the method.
    response = await raw.post(method, params, headers={"Mcp-Name": params.get("uri")})
    # An unknown method is 404 in this revision's transport.
    assert response.status_code == 404, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == -32601, error


# --- subscriptions/listen ---------------------------------------------------------------------


def subscriptions_upstream(served: Served, uri: str) -> tuple[int, int]:
    """How many resources/subscribe and resources/unsubscribe for exposed `uri` reached
    server-everything so far."""
    original = uri.split("+", 1)[1]
    sent = [m for m in upstream_received(served.upstream_stdin) if (m.get("params") or {}).get("uri") == original]
    return (
        sum(m.get("method") == "resources/subscribe" for m in sent),
        sum(m.get("method") == "resources/unsubscribe" for m in sent),
    )


async def until(condition: Any, what: str, timeout: float = 10.0) -> None:
    """Waits (bounded) until `condition()` holds."""
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
    assert condition(), f"{what}: not within {timeout} s"


async def test_listen_with_the_sdk(manifold: Served):
    subscribed, unsubscribed = subscriptions_upstream(manifold, WATCHED)
    async with sdk_client(manifold.url, STATELESS) as c, sdk_client(manifold.url, STATELESS) as other:
        async with c.listen(resources_list_changed=True, resource_subscriptions=[WATCHED]) as sub:
            # Manifold subscribed server-everything to the resource for the host.
            assert subscriptions_upstream(manifold, WATCHED) == (subscribed + 1, unsubscribed)
            assert sub.honored.resources_list_changed is True
            assert sub.honored.resource_subscriptions == [WATCHED]
            assert not sub.honored.tools_list_changed
            # A new resource (server-everything registers the gzipped file) ...
            r = await other.call_tool(GZIP, {"name": "interop-sdk.gz", "data": DATA_URI})
            assert not r.is_error, r
            with anyio.fail_after(10):
                event = await anext(sub)
            assert isinstance(event, ResourcesListChanged), event
            uris = {r.uri for r in (await c.list_resources(cache_mode="refresh")).resources}
            assert "everything+demo://resource/session/interop-sdk.gz" in uris, sorted(uris)
            # ... and updates of the subscribed resource.
            await other.call_tool(TOGGLE_UPDATES, {})
            try:
                with anyio.fail_after(10):
                    event = await anext(sub)
                    while isinstance(event, ResourcesListChanged):
                        event = await anext(sub)
            finally:
                await other.call_tool(TOGGLE_UPDATES, {})
            assert event == ResourceUpdated(uri=WATCHED), event
        # Leaving the subscription closes its stream, which ends it: Manifold unsubscribes.
        await until(
            lambda: subscriptions_upstream(manifold, WATCHED) == (subscribed + 1, unsubscribed + 1),
            "resources/unsubscribe after the listen stream closed",
        )


async def test_listen_on_the_wire(raw: StatelessHttp, manifold: Served):
    """Two listen streams at once: A asks for tools list changes and updates of one resource, B
    for resources list changes. Each gets its acknowledgement first, then only what it asked
    for, tagged with its own listen request's id; closing A's stream ends its subscription."""
    subscribed, unsubscribed = subscriptions_upstream(manifold, WATCHED)
    heard: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    acked = {"A": anyio.Event(), "B": anyio.Event()}
    asked = {
        "A": {"toolsListChanged": True, "resourceSubscriptions": [WATCHED]},
        "B": {"resourcesListChanged": True},
    }

    async def listen(name: str) -> None:
        body, headers = raw.request("subscriptions/listen", {"notifications": asked[name]}, id=f"listen-{name}")
        stream = raw.client.stream("POST", raw.url, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)
        async with stream as response:
            assert response.status_code == 200, response.status_code
            assert response.headers["content-type"].startswith("text/event-stream"), response.headers
            async for message in sse_events(response):
                heard[name].append(message)
                acked[name].set()

    def methods(name: str) -> list[str]:
        return [m.get("method") for m in heard[name]]

    async with anyio.create_task_group() as tg:
        tg.start_soon(listen, "A")
        tg.start_soon(listen, "B")
        with anyio.fail_after(10):
            await acked["A"].wait()
            await acked["B"].wait()
        await raw.result("tools/call", {"name": GZIP, "arguments": {"name": "interop-raw.gz", "data": DATA_URI}})
        await raw.result("tools/call", {"name": TOGGLE_UPDATES, "arguments": {}})
        try:
            with anyio.fail_after(10):
                while not (
                    "notifications/resources/updated" in methods("A")
                    and "notifications/resources/list_changed" in methods("B")
                ):
                    await anyio.sleep(0.05)
            # Anything not asked for that is on its way has a second to arrive.
            await anyio.sleep(1.0)
        finally:
            await raw.result("tools/call", {"name": TOGGLE_UPDATES, "arguments": {}})
        tg.cancel_scope.cancel()
    await until(
        lambda: subscriptions_upstream(manifold, WATCHED) == (subscribed + 1, unsubscribed + 1),
        "resources/unsubscribe after the listen stream closed",
    )

    for name in ("A", "B"):
        ack, *rest = heard[name]
        assert ack["method"] == "notifications/subscriptions/acknowledged", heard[name]
        assert ack["params"]["notifications"] == asked[name], ack
        for message in heard[name]:
            assert message["params"]["_meta"][META_SUBSCRIPTION] == f"listen-{name}", message
        assert "id" not in ack and all("id" not in m for m in rest), "the stream ended with an answer"
    assert set(methods("A")[1:]) == {"notifications/resources/updated"}, heard["A"]
    assert {m["params"]["uri"] for m in heard["A"][1:]} == {WATCHED}, heard["A"]
    assert set(methods("B")[1:]) == {"notifications/resources/list_changed"}, heard["B"]


# --- cancellation -----------------------------------------------------------------------------


async def test_closing_the_response_stream_cancels_the_request_upstream(raw: StatelessHttp, manifold: Served):
    body, headers = raw.request(
        "tools/call",
        {"name": LONG, "arguments": {"duration": 20, "steps": 20}, "_meta": envelope(progressToken="to-be-cancelled")},
        id=90,
    )
    async with raw.client.stream("POST", raw.url, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S) as response:
        assert response.headers["content-type"].startswith("text/event-stream"), response.headers
        with anyio.fail_after(10):
            first = await anext(sse_events(response))
        assert first["method"] == "notifications/progress", first
    # The host has gone: Manifold tells the upstream, for the request it forwarded.
    def forwarded() -> list[int]:
        return [
            m["id"]
            for m in upstream_received(manifold.upstream_stdin)
            if m.get("method") == "tools/call"
            and m["params"]["name"] == "trigger-long-running-operation"
            and m["params"]["arguments"] == {"duration": 20, "steps": 20}
        ]

    def cancelled() -> list[Any]:
        return [
            m["params"]["requestId"]
            for m in upstream_received(manifold.upstream_stdin)
            if m.get("method") == "notifications/cancelled"
        ]

    await until(lambda: len(forwarded()) == 1 and forwarded()[0] in cancelled(), "notifications/cancelled upstream")
    # Manifold is fine afterwards.
    assert raw_text(await raw.result("tools/call", {"name": ECHO, "arguments": {"message": "after"}})) == "Echo: after"
