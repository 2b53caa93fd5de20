"""Interop: the whole protocol across the merge, with the official Python SDK client and
@modelcontextprotocol/server-everything behind Manifold: requests from the server to the host
(sampling, elicitation, roots) answered by the host's callbacks, progress with the host's own
token, cancellation, log messages named and filtered per session, resource subscriptions
per session, and a task-augmented tool.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from conftest import Inbox, http_host, REPO, REQUEST_TIMEOUT_S, START_TIMEOUT_S, _check_prerequisites, _serving_http, config_text

# These tests drive the session-based era on purpose; the SDK warns that later revisions
# replace logging levels and subscriptions.
pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:.*2026-07-28")]


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def sampling(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked = params.messages[0].content
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"host sampled: {getattr(asked, 'text', '')}"),
        model="host-model",
    )


async def elicitation(_ctx: Any, _params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"color": "teal"})


async def roots(_ctx: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///host/project", name="project")])


@asynccontextmanager
async def stdio_session(log: Path, **callbacks: Any) -> AsyncIterator[ClientSession]:
    """Manifold over stdio, in front of server-everything and mcp-server-time, with the
    host's callbacks; Manifold's stderr goes to `log`."""
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-protocol-") as tmp:
        config = Path(tmp) / "manifold.toml"
        config.write_text(config_text())
        params = StdioServerParameters(
            command=str(bin_),
            args=["serve", "--config", str(config)],
            cwd=str(REPO),
            env={**os.environ, "MANIFOLD_LOG": "info,manifold_core=debug"},
        )
        with log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT_S, **callbacks) as s:
                    with anyio.fail_after(START_TIMEOUT_S):
                        await s.initialize()
                    yield s


async def test_server_requests_reach_the_host_and_its_answers_come_back(tmp_path: Path):
    async with stdio_session(
        tmp_path / "manifold.stderr",
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
    ) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        # server-everything lists these only to clients that can serve them: Manifold told it
        # that it can.
        for tool in ("trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"):
            assert f"everything__{tool}" in names, sorted(names)
        r = await s.call_tool("everything__trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 20})
        assert "host sampled:" in text_of(r) and "a haiku" in text_of(r), r
        assert "host-model" in text_of(r), r
        r = await s.call_tool("everything__trigger-elicitation-request", {})
        assert "teal" in text_of(r).lower(), r
        r = await s.call_tool("everything__get-roots-list", {})
        assert "file:///host/project" in text_of(r), r


async def test_progress_comes_with_the_hosts_token_and_a_cancel_stops_the_call(tmp_path: Path):
    log = tmp_path / "manifold.stderr"
    seen: list[float] = []
    first = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        first.set()

    async with stdio_session(log) as s:
        r = await s.call_tool(
            "everything__trigger-long-running-operation",
            {"duration": 1, "steps": 4},
            progress_callback=on_progress,
        )
        assert "completed" in text_of(r).lower(), r
        assert len(seen) == 4 and seen == sorted(seen), seen
        # Cancelling the host's call (its task) sends notifications/cancelled, which
        # Manifold forwards to the one upstream that owns the request.
        seen.clear()
        first = anyio.Event()
        with anyio.move_on_after(REQUEST_TIMEOUT_S):
            async with anyio.create_task_group() as tg:

                async def long_call() -> None:
                    await s.call_tool(
                        "everything__trigger-long-running-operation",
                        {"duration": 30, "steps": 30},
                        progress_callback=on_progress,
                    )

                tg.start_soon(long_call)
                await first.wait()
                tg.cancel_scope.cancel()
        # The session goes on.
        r = await s.call_tool("everything__echo", {"message": "after"})
        assert text_of(r) == "Echo: after"
    text = log.read_text()
    assert re.search(r'host cancelled a request.*forwarded_to="everything"', text), text[-3000:]


async def test_a_task_augmented_tool_completes_as_a_task(tmp_path: Path):
    async with stdio_session(tmp_path / "manifold.stderr") as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        research = tools["everything__simulate-research-query"]
        assert research.execution is not None and research.execution.task_support == "required"
        # The SDK's send_request validates a tools/call result as CallToolResult even for a
        # task-augmented call, so that one request goes through its dispatcher's raw path.
        raw = await s._dispatcher.send_raw_request(
            "tools/call",
            {"name": "everything__simulate-research-query", "arguments": {"topic": "merging"}, "task": {"ttl": 60000}},
            {},
        )
        created = types.CreateTaskResult.model_validate(raw)
        task_id = created.task.task_id
        assert task_id.startswith("everything+"), task_id
        status = created.task.status
        with anyio.fail_after(30):
            while status not in ("completed", "failed", "cancelled"):
                await anyio.sleep(0.3)
                got = await s.send_request(
                    types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
                )
                assert got.task_id == task_id
                status = got.status
        assert status == "completed"
        result = await s.send_request(
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
            types.CallToolResult,
        )
        assert "merging" in text_of(result)
        listed = await s.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert task_id in [t.task_id for t in listed.tasks]


# --- over HTTP: several sessions at once ----------------------------------------------------


@pytest.fixture(scope="module")
def manifold_url() -> Iterator[str]:
    """Manifold serving HTTP in front of server-everything (stdio, shared) and time."""
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-protocol-http-") as tmp:
        config = Path(tmp) / "manifold.toml"
        config.write_text(config_text())
        with _serving_http(bin_, config, Path(tmp) / "manifold.stderr") as port:
            yield f"http://127.0.0.1:{port}/mcp"




async def test_log_messages_are_named_and_filtered_per_session(manifold_url: str):
    loud_inbox, quiet_inbox = Inbox(), Inbox()
    async with http_host(manifold_url, loud_inbox) as loud, http_host(manifold_url, quiet_inbox) as quiet:
        await loud.set_logging_level("debug")
        await quiet.set_logging_level("error")
        # server-everything acknowledges a subscribe with an info message.
        await loud.subscribe_resource("everything+demo://resource/static/document/architecture.md")
        with anyio.fail_after(10):
            while not loud_inbox.of(types.LoggingMessageNotification):
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)
    heard = loud_inbox.of(types.LoggingMessageNotification)
    assert all(n.params.logger is not None and n.params.logger.startswith("everything") for n in heard), heard
    assert any("Subscribe" in str(n.params.data) for n in heard), heard
    assert not [n for n in quiet_inbox.of(types.LoggingMessageNotification) if n.params.level == "info"]


async def test_resource_updates_reach_only_subscribed_sessions(manifold_url: str):
    uri = "everything+demo://resource/static/document/extension.md"
    sub_inbox, other_inbox = Inbox(), Inbox()
    async with http_host(manifold_url, sub_inbox) as subscribed, http_host(manifold_url, other_inbox) as other:
        await subscribed.subscribe_resource(uri)
        r = await other.call_tool("everything__toggle-subscriber-updates", {})
        assert "Started" in text_of(r), r
        try:
            with anyio.fail_after(15):
                while not sub_inbox.of(types.ResourceUpdatedNotification):
                    await anyio.sleep(0.1)
        finally:
            await other.call_tool("everything__toggle-subscriber-updates", {})
        updated = sub_inbox.of(types.ResourceUpdatedNotification)
        assert {str(n.params.uri) for n in updated} == {uri}, updated
        assert not other_inbox.of(types.ResourceUpdatedNotification)
