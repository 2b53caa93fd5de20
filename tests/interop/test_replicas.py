"""Manifold as replicas behind a real load balancer: three `manifold serve` processes behind
HAProxy (the shipped deploy/haproxy/haproxy.cfg), sharing a real redis-server, in front of one
HTTP fixture upstream; hosts are the official Python SDK client, through HAProxy.

- With the Redis session store, any replica serves any request of a session: HAProxy without
  affinity sends each request of a session to the next replica in turn.
- With the in-memory store, HAProxy's affinity (learned from initialize's Mcp-Session-Id)
  keeps each session on the replica that made it; without affinity, sessions break.
- A host's answer to a request another replica sent it (sampling) reaches that replica.
- A replica killed with SIGKILL: sessions go on through the others, GET streams resume with
  Last-Event-ID on another replica, and no event kept for a session is lost.
- Notifications reach exactly the sessions that should hear them, whichever replica they are
  homed on: list changes once per session, per team view.
- Stateless (2026-07-28) requests need no session: balanced freely.
- Quotas hold exactly across the replicas (Redis limit backend).

Figures (failed requests, events lost, notifications missed) are printed: pytest -s shows them.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp import types
from mcp.client.streamable_http import streamable_http_client

from conftest import REQUEST_TIMEOUT_S, START_TIMEOUT_S, _toml_str
from replicas import Cluster, Fixture, Redis

pytestmark = pytest.mark.anyio

SESSIONS = 50
API_KEY_A = "replica-team-a-key-0001"
API_KEY_B = "replica-team-b-key-0002"


@pytest.fixture(scope="module")
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="manifold-replicas-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def redis(tmp: Path) -> Iterator[Redis]:
    r = Redis(tmp)
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="module")
def fixture(tmp: Path) -> Iterator[Fixture]:
    f = Fixture(tmp, "--client-tools")
    try:
        yield f
    finally:
        f.stop()


def config(fixture: Fixture, extra: str = "") -> str:
    return f"{extra}[upstreams.fx]\nurl = {_toml_str(fixture.url)}\n"


class Inbox:
    """Every message the SDK hands the host that is not an answer."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.items.append(message)

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.items if isinstance(m, kind)]


async def sampling(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked = params.messages[0].content
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"host sampled: {getattr(asked, 'text', '')}"),
        model="host-model",
    )


@asynccontextmanager
async def host(
    url: str, *, inbox: Inbox | None = None, key: str | None = None, seen: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session through `url`; `seen` gets its Mcp-Session-Id."""

    async def note(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and seen is not None:
            seen["id"] = sid

    headers = {"x-api-key": key} if key else {}
    client = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"response": [note]},
    )
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            async with ClientSession(
                streams[0],
                streams[1],
                read_timeout_seconds=REQUEST_TIMEOUT_S,
                message_handler=inbox,
                sampling_callback=sampling,
            ) as s:
                with anyio.fail_after(START_TIMEOUT_S):
                    await s.initialize()
                yield s


def leaf(e: BaseException) -> str:
    """The innermost error of an exception group, as text."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def one_session(url: str, n: int, calls: int, failures: list[str]) -> None:
    """A whole session: initialize, list, `calls` echo calls checked one by one."""
    try:
        async with host(url) as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            assert "fx__echo" in tools, tools
            for k in range(calls):
                text = f"session {n} call {k}"
                got = text_of(await s.call_tool("fx__echo", {"text": text}))
                if got != text:
                    failures.append(f"session {n}: asked {text!r}, got {got!r}")
    except Exception as e:  # noqa: BLE001 - every failure is counted, whatever it is
        failures.append(f"session {n}: {leaf(e)}")


async def many_sessions(url: str, sessions: int = SESSIONS, calls: int = 4) -> list[str]:
    failures: list[str] = []
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for n in range(sessions):
                tg.start_soon(one_session, url, n, calls, failures)
    return failures


def cluster(tmp: Path, fixture: Fixture, redis: Redis, *, store: str, sticky: bool, extra: str = "", n: int = 3):
    return Cluster(tmp, config(fixture, extra), store=store, sticky=sticky, redis=redis, n=n)


async def test_with_the_redis_store_any_replica_serves_any_request_of_a_session(
    tmp: Path, fixture: Fixture, redis: Redis
):
    c = cluster(tmp, fixture, redis, store="redis", sticky=False)
    try:
        before = [c.operations(i) for i in range(3)]
        failures = await many_sessions(c.url)
        served = [c.operations(i) - before[i] for i in range(3)]
        print(f"\nredis store, round robin: {SESSIONS} sessions, failures {len(failures)}, served per replica {served}")
        assert failures == [], failures[:5]
        # Round robin without affinity: every replica served a share of every kind of request.
        assert all(n >= SESSIONS for n in served), served
        # Every session is recorded once, with a home among the replicas.
        keys = redis.command("KEYS", f"{c.prefix}:session:*")
        records = [k for k in keys if k.count(b":") == 2]
        assert len(records) == 0, "sessions ended by the hosts (DELETE) are gone from Redis"
    finally:
        c.stop()
        print(c.logs_tail()[-2000:])


async def test_a_hosts_answer_reaches_the_replica_that_asked(tmp: Path, fixture: Fixture, redis: Redis):
    # Round robin: the POST carrying the host's answer to sampling lands on another replica
    # than the one whose upstream asked, every time (three replicas, one request each in turn).
    c = cluster(tmp, fixture, redis, store="redis", sticky=False)
    try:
        async with host(c.url) as s:
            for k in range(6):
                got = text_of(await s.call_tool("fx__ask_sampling", {"prompt": f"p{k}"}))
                assert got == f"host sampled: p{k}", got
    finally:
        c.stop()


async def test_with_the_memory_store_affinity_keeps_sessions_whole(tmp: Path, fixture: Fixture, redis: Redis):
    # Without affinity, a session's requests reach replicas that never heard of it.
    c = cluster(tmp, fixture, redis, store="memory", sticky=False)
    try:
        broken = await many_sessions(c.url, sessions=6, calls=3)
        print(f"\nmemory store, round robin: 6 sessions, {len(broken)} broken")
        assert len(broken) >= 4, broken
    finally:
        c.stop()
    c = cluster(tmp, fixture, redis, store="memory", sticky=True)
    try:
        before = [c.operations(i) for i in range(3)]
        failures = await many_sessions(c.url)
        served = [c.operations(i) - before[i] for i in range(3)]
        print(f"memory store, affinity: {SESSIONS} sessions, failures {len(failures)}, served per replica {served}")
        assert failures == [], failures[:5]
        assert all(n > 0 for n in served), served
    finally:
        c.stop()


async def test_a_replica_killed_under_load_loses_no_session_and_no_event(tmp: Path, fixture: Fixture, redis: Redis):
    c = cluster(tmp, fixture, redis, store="redis", sticky=True)
    hosts = 12
    inboxes = [Inbox() for _ in range(hosts)]
    ids: list[dict[str, str]] = [{} for _ in range(hosts)]
    failed: list[str] = []
    ok = [0]
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def run(n: int, ready: anyio.Event) -> None:
                async with host(c.url, inbox=inboxes[n], seen=ids[n]) as s:
                    ready.set()
                    k = 0
                    while not stop.is_set():
                        try:
                            got = text_of(await s.call_tool("fx__echo", {"text": f"{n}-{k}"}))
                            assert got == f"{n}-{k}"
                            ok[0] += 1
                        except Exception as e:  # noqa: BLE001 - counted
                            failed.append(f"{n}-{k}: {e}")
                        k += 1
                        await anyio.sleep(0.02)
                    # The GET stream has had time to catch up before the session ends.
                    await anyio.sleep(1.0)

            for n in range(hosts):
                ready = anyio.Event()
                tg.start_soon(run, n, ready)
                await ready.wait()
            # Every session's GET stream is open (the SDK opens it after initialize).
            await anyio.sleep(1.0)
            async with host(c.url) as driver:
                await driver.call_tool("fx__add_tool", {"name": "before_kill"})
                await anyio.sleep(1.0)
                c.kill(1)
                c.wait_exit(1)
                # While the others take over its sessions, the catalog changes again, twice.
                await driver.call_tool("fx__add_tool", {"name": "during_takeover"})
                await anyio.sleep(4.0)
                await driver.call_tool("fx__add_tool", {"name": "after_takeover"})
                await anyio.sleep(2.0)
            stop.set()
        # Every event Redis kept for a session reached its host: none lost on the move.
        lost = 0
        missed = 0
        for n in range(hosts):
            token = ids[n].get("id")
            assert token, "every host got a session id"
            heard = len(inboxes[n].of(types.ToolListChangedNotification))
            entries = redis.command("XRANGE", f"{c.prefix}:session:{token}:events", "-", "+") or []
            kept = sum(1 for e in entries if b"tools/list_changed" in e[1][1])
            lost += max(0, kept - heard)
            missed += max(0, 3 - heard)
        print(
            f"\nSIGKILL of 1 replica of 3 under load: {ok[0]} calls answered, {len(failed)} failed, "
            f"events lost {lost}, list changes missed {missed} of {3 * hosts}"
        )
        assert lost == 0
        # Sessions homed on the killed replica may miss the change made before anyone took them
        # over; the one made after the takeover reaches every session.
        for n in range(hosts):
            assert len(inboxes[n].of(types.ToolListChangedNotification)) >= 2, n
        # A call in flight on the replica that died fails; the others are not affected.
        assert len(failed) <= hosts, failed
    finally:
        c.stop()
