"""What Manifold translates between a stateless host (protocol revision 2026-07-28) and
session-era upstreams, checked on what reached the upstream: the host's own `_meta`
declarations are not forwarded (a session-era Python SDK server refuses them), a URL-mode
elicitation is asked only of a host that declared that mode, a stateless GET's 405 names the
methods allowed, and a host that goes away before anything was sent to it gets its request
cancelled upstream.

Peers as in test_stateless.py: Manifold over Streamable HTTP in front of
@modelcontextprotocol/server-everything (stdin teed, to see what reached it) and mcp-server-time
(built on the official Python SDK 2.3; Manifold now speaks the stateless era to it, so the
`_meta` check is made on server-everything's input).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import MCPError

from conftest import (
    REQUEST_TIMEOUT_S,
    STATELESS,
    StatelessHttp,
    _check_prerequisites,
    _serving_http,
    sdk_client,
    tee_config,
    upstream_received,
    upstreams_settled,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[str, Path]]:
    """Manifold over HTTP; yields its /mcp URL and the file server-everything's stdin goes to."""
    bin_ = _check_prerequisites()
    tmp = tmp_path_factory.mktemp("stateless-defects")
    stdin = tmp / "everything.stdin"
    config = tmp / "manifold.toml"
    config.write_text(tee_config(stdin, server="sse_keepalive_ms = 250"))
    log = tmp / "manifold.stderr"
    with _serving_http(bin_, config, log) as port:
        await upstreams_settled(log, "everything", "time")
        yield f"http://127.0.0.1:{port}/mcp", stdin


@pytest.fixture
async def raw(served: tuple[str, Path]) -> AsyncIterator[StatelessHttp]:
    async with httpx2.AsyncClient() as http:
        yield StatelessHttp(served[0], http)


async def test_the_stateless_envelope_is_not_forwarded_to_a_session_era_upstream(
    raw: StatelessHttp, served: tuple[str, Path]
):
    result = await raw.result("tools/call", {"name": "everything__echo", "arguments": {"message": "envelope-probe"}})
    assert result["content"][0]["text"] == "Echo: envelope-probe", result
    (forwarded,) = [
        m for m in upstream_received(served[1]) if m.get("method") == "tools/call" and "envelope-probe" in json.dumps(m)
    ]
    # server-everything speaks 2025-11-25 on this connection (it was opened with initialize):
    # the per-request envelope of the stateless era means nothing to it, and a stricter
    # server refuses it (next test).
    reserved = [k for k in (forwarded["params"].get("_meta") or {}) if k.startswith("io.modelcontextprotocol/")]
    assert not reserved, f"forwarded to a session-era upstream: {json.dumps(forwarded)}"


async def test_a_stateless_host_calls_a_python_sdk_upstream(served: tuple[str, Path]):
    async with sdk_client(served[0], STATELESS) as c:
        try:
            result = await c.call_tool("time__get_current_time", {"timezone": "UTC"})
        except MCPError as e:
            raise AssertionError(f"time__get_current_time failed: {e.code} {e.message}") from e
        assert json.loads(result.content[0].text)["timezone"] == "UTC", result


async def test_a_host_that_declared_only_form_elicitation_is_not_asked_a_url_one(raw: StatelessHttp):
    result = await raw.result(
        "tools/call",
        {"name": "everything__trigger-url-elicitation", "arguments": {"url": "https://example.com/authorize"}},
        capabilities={"elicitation": {"form": {}}},
    )
    modes = [r["params"].get("mode") for r in (result.get("inputRequests") or {}).values()]
    if result["resultType"] == "input_required":
        # Answer it anyway (declined), so that no request is left waiting upstream.
        answers = {key: {"action": "decline"} for key in result["inputRequests"]}
        await raw.result(
            "tools/call",
            {
                "name": "everything__trigger-url-elicitation",
                "arguments": {"url": "https://example.com/authorize"},
                "inputResponses": answers,
                "requestState": result["requestState"],
            },
            capabilities={"elicitation": {"form": {}}},
        )
    assert "url" not in modes, f"asked a form-only host: {json.dumps(result)}"


async def test_the_405_to_a_stateless_get_names_the_allowed_methods(raw: StatelessHttp):
    response = await raw.client.get(
        raw.url, headers={"MCP-Protocol-Version": STATELESS, "Accept": "text/event-stream"}, timeout=REQUEST_TIMEOUT_S
    )
    assert response.status_code == 405
    # RFC 9110 §15.5.6: the origin server MUST generate an Allow header field in a 405.
    assert "POST" in response.headers.get("allow", ""), dict(response.headers)


# Last in the module: it leaves a request in flight to server-everything for a few seconds.
async def test_a_host_that_goes_away_before_any_notification_gets_its_request_cancelled(
    raw: StatelessHttp, served: tuple[str, Path]
):
    # No progressToken: nothing is sent before the answer, in 5 s.
    params = {"name": "everything__trigger-long-running-operation", "arguments": {"duration": 5, "steps": 5}}
    body, headers = raw.request("tools/call", params, id=91)
    with pytest.raises(httpx2.ReadTimeout):
        await raw.client.post(raw.url, json=body, headers=headers, timeout=0.5)

    def cancelled() -> bool:
        seen = upstream_received(served[1])
        ids = [
            m["id"]
            for m in seen
            if m.get("method") == "tools/call" and m["params"].get("arguments") == params["arguments"]
        ]
        stops = [m["params"]["requestId"] for m in seen if m.get("method") == "notifications/cancelled"]
        return bool(ids) and ids[-1] in stops

    with anyio.move_on_after(3):
        while not cancelled():
            await anyio.sleep(0.1)
    assert cancelled(), "no notifications/cancelled reached server-everything within 3 s of the host going away"


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


async def test_a_session_era_task_is_followed_with_the_tasks_extension(raw: StatelessHttp):
    """server-everything's simulate-research-query runs only as a task (2025-11-25 tasks): a
    stateless host that declared the tasks extension gets a task handle and follows it with
    tasks/get until the result is in it; one that did not is told the extension is needed."""
    discovered = await raw.result("server/discover", {}, capabilities=TASKS)
    assert "io.modelcontextprotocol/tasks" in discovered["capabilities"]["extensions"], discovered
    call = {"name": "everything__simulate-research-query", "arguments": {"topic": "eras"}}
    response = await raw.post("tools/call", call)
    assert response.status_code == 400, response.text  # -32021 travels in a 400
    refused = response.json()["error"]
    assert refused["code"] == -32021, refused
    assert refused["data"]["requiredCapabilities"] == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    created = await raw.result("tools/call", call, capabilities=TASKS)
    assert created["resultType"] == "task", created
    assert created["taskId"].startswith("everything+"), created
    assert created["status"] == "working" and "ttlMs" in created and "ttl" not in created, created
    task = created
    with anyio.fail_after(30):
        while task["status"] not in ("completed", "failed", "cancelled"):
            await anyio.sleep(max(task.get("pollIntervalMs") or 500, 200) / 1000)
            task = await raw.result("tasks/get", {"taskId": created["taskId"]}, capabilities=TASKS)
            assert task["taskId"] == created["taskId"], task
    assert task["status"] == "completed", task
    assert task["result"]["content"][0]["type"] == "text", task
    assert "eras" in json.dumps(task["result"]), task
    # Another caller's guess at the id finds nothing; tasks/update has no meaning for it.
    unknown = await raw.error("tasks/get", {"taskId": "everything+nope"}, capabilities=TASKS)
    assert unknown["code"] == -32602, unknown
    update = await raw.error(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": {}}, capabilities=TASKS
    )
    assert update["code"] == -32602, update


async def test_notifications_the_revision_removed_are_not_passed_on(
    raw: StatelessHttp, served: tuple[str, Path]
):
    """A stateless host's `notifications/roots/list_changed` (removed in 2026-07-28: roots come
    with each request now) is accepted and goes to no upstream."""
    body, headers = raw.request("notifications/roots/list_changed", {})
    del body["id"]
    response = await raw.client.post(raw.url, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 202, (response.status_code, response.text)
    # A call after it, so that anything it caused has reached the upstream first.
    await raw.result("tools/call", {"name": "everything__echo", "arguments": {"message": "after"}})
    seen = [m.get("method") for m in upstream_received(served[1])]
    assert "notifications/roots/list_changed" not in seen, seen
