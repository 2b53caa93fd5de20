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
- Tool discovery follows a session: the settings its host chose and the tools it found (and
  those the budget evicted) on one replica are what every replica lists.
- Quotas hold exactly across the replicas (Redis limit backend).

Figures (failed requests, events lost, notifications missed) are printed: pytest -s shows them.
"""

from __future__ import annotations

import json
import signal
import time
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

from conftest import Inbox, REQUEST_TIMEOUT_S, START_TIMEOUT_S, _toml_str
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
    f = Fixture(tmp, "--client-tools", "--tasks")
    try:
        yield f
    finally:
        f.stop()


def config(fixture: Fixture, extra: str = "") -> str:
    return f"{extra}[upstreams.fx]\nurl = {_toml_str(fixture.url)}\n"


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


def sse_events(lines: Iterator[str], want: int) -> list[tuple[str, str]]:
    """Reads `want` events (id, data) from the lines of an SSE response."""
    events: list[tuple[str, str]] = []
    event_id, data = "", []
    for line in lines:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            events.append((event_id, "\n".join(data)))
            event_id, data = "", []
            if len(events) >= want:
                break
    return events


def post(client: httpx2.Client, url: str, sid: str | None, body: dict) -> httpx2.Response:
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    if sid:
        headers["mcp-session-id"] = sid
    return client.post(url, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)


def open_session(client: httpx2.Client, url: str) -> str:
    r = post(
        client,
        url,
        None,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        },
    )
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    assert post(client, url, sid, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    return sid


def change_catalog(client: httpx2.Client, url: str, sid: str, name: str) -> None:
    r = post(
        client,
        url,
        sid,
        {"jsonrpc": "2.0", "id": name, "method": "tools/call", "params": {"name": "fx__add_tool", "arguments": {"name": name}}},
    )
    assert r.status_code == 200 and '"isError":true' not in r.text, r.text


def result_of(r: httpx2.Response) -> dict:
    """The result of a POST's answer, sent as JSON or as an event stream."""
    assert r.status_code == 200, r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        for _, data in sse_events(iter(r.text.splitlines()), 10):
            message = json.loads(data)
            if "id" in message:
                break
    else:
        message = r.json()
    assert "result" in message, message
    return message["result"]


def listed_names(client: httpx2.Client, url: str, sid: str) -> list[str]:
    result = result_of(post(client, url, sid, {"jsonrpc": "2.0", "id": "l", "method": "tools/list"}))
    return [t["name"] for t in result["tools"]]


def listed_soon(client: httpx2.Client, url: str, sid: str, want: list[str]) -> list[str]:
    """What `url` lists for the session, asked again (for at most 5 s) until it is `want`:
    the replica that changed the list tells the others through Redis."""
    deadline = time.monotonic() + 5
    while True:
        names = listed_names(client, url, sid)
        if names == want or time.monotonic() > deadline:
            return names
        time.sleep(0.05)


async def test_tool_discovery_follows_a_session_to_every_replica(tmp: Path, fixture: Fixture, redis: Redis):
    # Direct to the replicas (no balancer): the host chose search mode at initialize on the
    # first replica; what it finds on one replica is listed on the other, and so is what the
    # budget evicts.
    c = cluster(tmp, fixture, redis, store="redis", sticky=True, n=2)
    r1, r2 = (f"http://127.0.0.1:{p}/mcp" for p in c.ports)
    try:
        with httpx2.Client() as client:
            chosen = {"mode": "search", "max_tools": 2, "pinned": ["fx__echo"]}
            r = post(
                client,
                r1,
                None,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"},
                        "_meta": {"manifold/discovery": chosen},
                    },
                },
            )
            assert r.status_code == 200, r.text
            sid = r.headers["mcp-session-id"]
            assert post(client, r1, sid, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
            # The other replica copies the session with the settings its host chose.
            assert listed_names(client, r2, sid) == ["fx__echo", "find_tools"]
            find = {"name": "find_tools", "arguments": {"query": "add two numbers", "k": 1}}
            found = result_of(post(client, r2, sid, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": find}))
            assert found["structuredContent"]["added"] == ["fx__add"], found
            assert listed_soon(client, r1, sid, ["fx__echo", "fx__add", "find_tools"]) == [
                "fx__echo",
                "fx__add",
                "find_tools",
            ]
            # Found on the first replica: the budget (one found tool) evicts fx__add everywhere.
            find = {"name": "find_tools", "arguments": {"query": "sleep milliseconds", "k": 1}}
            found = result_of(post(client, r1, sid, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": find}))
            assert found["structuredContent"]["added"] == ["fx__sleep"], found
            assert found["structuredContent"]["evicted"] == ["fx__add"], found
            want = ["fx__echo", "fx__sleep", "find_tools"]
            assert listed_soon(client, r2, sid, want) == want
            record = redis.command("HGET", f"{c.prefix}:session:{sid}", "found")
            assert json.loads(record) == ["fx__sleep"], record
    finally:
        c.stop()


async def test_a_get_stream_resumes_on_another_replica_with_last_event_id(tmp: Path, fixture: Fixture, redis: Redis):
    # Direct to the replicas (no balancer), to choose where each request goes.
    c = cluster(tmp, fixture, redis, store="redis", sticky=True, n=2)
    r1, r2 = (f"http://127.0.0.1:{p}/mcp" for p in c.ports)
    try:
        with httpx2.Client() as client:
            sid = open_session(client, r1)
            driver = open_session(client, r1)
            stream = {"accept": "text/event-stream", "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            with client.stream("GET", r1, headers=stream, timeout=30) as get:
                assert get.status_code == 200
                change_catalog(client, r1, driver, "first")
                first = sse_events(get.iter_lines(), 1)
            assert len(first) == 1 and "tools/list_changed" in first[0][1], first
            last_id = first[0][0]
            # The host is away; the catalog changes twice; it comes back to the other replica.
            # (Apart: changes close together may be told as one.)
            change_catalog(client, r1, driver, "second")
            time.sleep(0.5)
            change_catalog(client, r1, driver, "third")
            time.sleep(0.5)
            with client.stream("GET", r2, headers={**stream, "last-event-id": last_id}, timeout=30) as get:
                assert get.status_code == 200
                lines = get.iter_lines()
                missed = sse_events(lines, 2)
                assert len(missed) == 2 and all("tools/list_changed" in d for _, d in missed), missed
                assert len({i for i, _ in [*first, *missed]}) == 3, "every event has an id of its own"
                # Replica 2 is the session's home now: a change is told once, from there.
                change_catalog(client, r1, driver, "fourth")
                later = sse_events(lines, 1)
                assert len(later) == 1 and "tools/list_changed" in later[0][1], later
                time.sleep(1.0)
            kept = redis.command("XLEN", f"{c.prefix}:session:{sid}:events")
            assert kept == 4, f"each change told once: {kept} events kept"
            home = redis.command("HGET", f"{c.prefix}:session:{sid}", "home")
            assert home.decode() == c.replica_id(1), "the GET stream moved the session's home"
            assert sid.encode() in redis.command("SMEMBERS", f"{c.prefix}:homes:{home.decode()}")
            assert sid.encode() not in redis.command("SMEMBERS", f"{c.prefix}:homes:{c.replica_id(0)}")
    finally:
        c.stop()


TEAMS = f"""
[teams.a]
api_keys = ["{API_KEY_A}"]

[teams.b]
api_keys = ["{API_KEY_B}"]
upstreams = ["other"]

[limits]
backend = "redis"
redis_url = "REDIS_URL"
key_prefix = "PREFIX"
tools.other__add = {{ quota = "30/day" }}

[upstreams.other]
command = "FIXTURE"
args = ["--name", "other"]

"""


async def test_notifications_reach_the_sessions_of_teams_that_see_them_and_quotas_hold(
    tmp: Path, fixture: Fixture, redis: Redis
):
    from replicas import fixture_bin

    teams = (
        TEAMS.replace("REDIS_URL", redis.url)
        .replace("PREFIX", f"quota-{time.monotonic_ns()}")
        .replace("FIXTURE", str(fixture_bin()))
    )
    c = cluster(tmp, fixture, redis, store="redis", sticky=False, extra=teams)
    try:
        inboxes = {team: [Inbox() for _ in range(4)] for team in ("a", "b")}
        keys = {"a": API_KEY_A, "b": API_KEY_B}
        async with anyio.create_task_group() as tg:
            done = anyio.Event()
            opened = []

            async def keep(team: str, n: int) -> None:
                async with host(c.url, inbox=inboxes[team][n], key=keys[team]) as s:
                    opened.append(s)
                    await done.wait()

            for team in ("a", "b"):
                for n in range(4):
                    tg.start_soon(keep, team, n)
            with anyio.fail_after(START_TIMEOUT_S):
                while len(opened) < 8:
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # every GET stream open
            async with host(c.url, key=API_KEY_A) as a:
                await a.call_tool("fx__add_tool", {"name": "seen_by_a"})
            await anyio.sleep(2.0)
            # Team b's quota on other__add is exact across the replicas, in turn.
            answered, refused = 0, 0
            async with host(c.url, key=API_KEY_B) as b:
                for k in range(45):
                    try:
                        r = await b.call_tool("other__add", {"a": k, "b": 1})
                        assert not r.is_error
                        answered += 1
                    except MCPError:
                        refused += 1
            done.set()
        heard = {team: [len(i.of(types.ToolListChangedNotification)) for i in inboxes[team]] for team in inboxes}
        print(f"\nlist changes heard per session: {heard}; quota 30/day over 3 replicas: {answered} answered, {refused} refused")
        assert heard["a"] == [1, 1, 1, 1], heard
        assert heard["b"] == [0, 0, 0, 0], heard
        assert (answered, refused) == (30, 15)
    finally:
        c.stop()


async def test_stateless_requests_need_no_session_and_balance_freely(tmp: Path, fixture: Fixture, redis: Redis):
    # The in-memory store and no affinity: nothing of a stateless request lives between requests.
    c = cluster(tmp, fixture, redis, store="memory", sticky=False)
    try:
        before = [c.operations(i) for i in range(3)]
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        with httpx2.Client() as client:
            for k in range(30):
                body = {
                    "jsonrpc": "2.0",
                    "id": k,
                    "method": "tools/call",
                    "params": {"name": "fx__echo", "arguments": {"text": f"t{k}"}, "_meta": meta},
                }
                r = client.post(
                    c.url,
                    json=body,
                    headers={
                        "accept": "application/json, text/event-stream",
                        "mcp-protocol-version": "2026-07-28",
                        "mcp-method": "tools/call",
                        "mcp-name": "fx__echo",
                    },
                    timeout=REQUEST_TIMEOUT_S,
                )
                assert r.status_code == 200, r.text
                assert f'"t{k}"' in r.text and "mcp-session-id" not in r.headers
        served = [c.operations(i) - before[i] for i in range(3)]
        assert served == [10, 10, 10], served
    finally:
        c.stop()


async def test_a_rolling_restart_with_sigterm_fails_no_request(tmp: Path, fixture: Fixture, redis: Redis):
    # Each replica in turn: SIGTERM (readiness fails, HAProxy stops sending, in-flight calls
    # finish, new ones are refused with 503 and retried elsewhere), then started again.
    drain = '[server]\ndrain_delay = "1500ms"\ndrain_timeout = "10s"\n\n'
    c = cluster(tmp, fixture, redis, store="redis", sticky=True, extra=drain)
    hosts = 12
    failed: list[str] = []
    ok = [0]
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def run(n: int, ready: anyio.Event) -> None:
                async with host(c.url) as s:
                    ready.set()
                    k = 0
                    while not stop.is_set():
                        try:
                            # Some calls take a while, so that a drain has calls in flight.
                            if k % 5 == 0:
                                got = text_of(await s.call_tool("fx__sleep", {"ms": 300}))
                            else:
                                got = text_of(await s.call_tool("fx__echo", {"text": f"{n}-{k}"}))
                                assert got == f"{n}-{k}", got
                            ok[0] += 1
                        except Exception as e:  # noqa: BLE001 - counted
                            failed.append(f"{n}-{k}: {leaf(e)}")
                        k += 1
                        await anyio.sleep(0.02)

            for n in range(hosts):
                ready = anyio.Event()
                tg.start_soon(run, n, ready)
                await ready.wait()
            await anyio.sleep(1.0)
            for i in range(3):
                c.kill(i, signal.SIGTERM)
                code = await anyio.to_thread.run_sync(c.wait_exit, i)
                assert code == 0, f"replica {i + 1} exited with {code}"
                c.start(i)
                await anyio.to_thread.run_sync(c.wait_ready, i)
                # HAProxy sees it up again (rise 2, inter 500ms).
                await anyio.sleep(1.5)
            stop.set()
        print(f"\nrolling restart of 3 replicas with SIGTERM under load: {ok[0]} calls answered, {len(failed)} failed")
        assert failed == [], failed[:5]
        assert ok[0] > 100
    finally:
        c.stop()


async def test_a_task_is_served_by_the_replica_that_runs_it_whichever_replica_is_asked(
    tmp: Path, fixture: Fixture, redis: Redis
):
    # Direct to the replicas, to choose: the session opened on 1, the task created on 2, then
    # followed from 3 and 1; its status and result come from 2, where the upstream runs it.
    c = cluster(tmp, fixture, redis, store="redis", sticky=True)
    r1, r2, r3 = (f"http://127.0.0.1:{p}/mcp" for p in c.ports)
    try:
        with httpx2.Client() as client:
            sid = open_session(client, r1)
            call = {
                "jsonrpc": "2.0",
                "id": "t",
                "method": "tools/call",
                "params": {"name": "fx__sleep", "arguments": {"ms": 400}, "task": {"ttl": 60000}},
            }
            created = post(client, r2, sid, call)
            assert created.status_code == 200, created.text
            task = created.json()["result"]["task"]["taskId"]
            for k, url in enumerate([r3, r1, r3]):
                got = post(client, url, sid, {"jsonrpc": "2.0", "id": k, "method": "tasks/get", "params": {"taskId": task}})
                assert got.status_code == 200, got.text
                assert got.json()["result"]["taskId"] == task, got.text
            result = post(client, r3, sid, {"jsonrpc": "2.0", "id": "r", "method": "tasks/result", "params": {"taskId": task}})
            assert "slept 400" in result.text, result.text
            # Another session may not follow it, from any replica.
            other = open_session(client, r3)
            refused = post(client, r3, other, {"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {"taskId": task}})
            assert "error" in refused.json() and "unknown task" in refused.text, refused.text
    finally:
        c.stop()
